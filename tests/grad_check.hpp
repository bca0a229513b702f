// Shared by the layer tests: random inputs and the central-difference gradient check in double.
// Buffers that must be assigned start as NaN, so any element left unwritten (or read) shows up;
// buffers that must accumulate start at kPrefill, which is taken out before comparing.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

namespace mpitron::grad_check {

using Vec = std::vector<double>;

constexpr double kH = 1e-6;    // finite-difference step
constexpr double kTol = 1e-6;  // max|analytic - numeric| / max|numeric|
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kPrefill = 0.75;

inline Vec randn(size_t n, std::mt19937& g, double scale = 1.0, double shift = 0.0) {
  std::normal_distribution<double> d(shift, scale);
  Vec v(n);
  for (double& x : v) x = d(g);
  return v;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

inline Vec minus(Vec v, double c) {
  for (double& x : v) x -= c;
  return v;
}

// max|a - n| / max(max|n|, 1e-12) with n the central difference of loss() in every element of x.
// NaN in `analytic` (an assigned buffer left unwritten) makes the result NaN, which fails checks.
inline double grad_error(const std::function<double()>& loss, Vec& x, const Vec& analytic) {
  EXPECT_EQ(x.size(), analytic.size());
  double max_diff = 0, max_num = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + kH;
    const double lp = loss();
    x[i] = x0 - kH;
    const double lm = loss();
    x[i] = x0;
    const double num = (lp - lm) / (2 * kH);
    const double diff = std::fabs(analytic[i] - num);
    if (std::isnan(diff)) return kNaN;
    max_diff = std::max(max_diff, diff);
    max_num = std::max(max_num, std::fabs(num));
  }
  return max_diff / std::max(max_num, 1e-12);
}

}  // namespace mpitron::grad_check
