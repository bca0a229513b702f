// Vectorisable exp, tanh and erfc for float (Cephes-style range reduction and a degree-6
// polynomial, about 2 ulp): glibc's expf/tanhf are scalar calls that the compiler cannot vectorise,
// and they dominated GELU and softmax. The double overloads are the library functions, so float64
// gradient checks still run against the reference math.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace mpitron::cpu {

// Written with plain comparisons and the 1.5 * 2^23 rounding trick (no fminf/floorf calls), so
// that GCC vectorises loops over it without -ffast-math.
inline float exp_fast(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to the nearest integer
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  x = x - n * 0.693359375f + n * 2.12194440e-4f;  // x - n ln2, in two parts
  float y = 1.9875691500e-4f;
  y = y * x + 1.3981999507e-3f;
  y = y * x + 8.3334519073e-3f;
  y = y * x + 4.1665795894e-2f;
  y = y * x + 1.6666665459e-1f;
  y = y * x + 5.0000001201e-1f;
  y = y * x * x + x + 1.0f;
  return y * std::bit_cast<float>((int32_t(n) + 127) << 23);
}

// tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2|u|)
inline float tanh_fast(float u) {
  const float a = u < 0.0f ? -u : u;
  const float e = exp_fast(-2.0f * a);
  const float t = (1.0f - e) / (1.0f + e);
  return u < 0.0f ? -t : t;
}

// erfc(x) = t exp(-z^2 + P(t)), z = |x|, t = 1 / (1 + z/2), P a degree-9 Chebyshev fit (relative
// error 1.2e-7 in exact arithmetic, 3e-7 in float down to erfc = 1e-37);
// erfc(-z) = 2 - erfc(z). GELU's Phi(x) = erfc(-x / sqrt 2) / 2 keeps its relative accuracy in
// the negative tail, where 1 + erf(x) would cancel.
inline float erfc_fast(float x) {
  const float z = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  // exp(-z^2) as exp(-h^2) exp(-(z - h)(z + h)), h = z with its low 12 bits cleared: h^2 is
  // exact, and rounding z^2 near 80 would cost 4e-6 of relative error in the tail.
  const float h = std::bit_cast<float>(std::bit_cast<uint32_t>(z) & 0xFFFFF000u);
  const float r = t * exp_fast(-h * h) * exp_fast(p - (z - h) * (z + h));
  return x < 0.0f ? 2.0f - r : r;
}

inline double exp_fast(double x) {
  return std::exp(x);
}
inline double tanh_fast(double u) {
  return std::tanh(u);
}
inline double erfc_fast(double x) {
  return std::erfc(x);
}

}  // namespace mpitron::cpu
