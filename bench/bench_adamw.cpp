// The host's optimizer update (what --offload optimizer runs on the CPU each step): fp32 AdamW and
// 8-bit AdamW over N parameters in one flat tensor, and 8-bit AdamW's requantization alone
// (cpu::quantize_block over the moments' blocks). Median seconds of R runs and nanoseconds per
// parameter, on the threads OpenMP is given (OMP_NUM_THREADS).
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "src/cpu/adamw.hpp"

using namespace mpitron;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double median_seconds(int reps, F&& f) {
  std::vector<double> s;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f(r);
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(s);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The host's AdamW and 8-bit AdamW update, ns per parameter"};
  size_t n = size_t(32) << 20;
  int reps = 7;
  app.add_option("-n,--params", n, "parameters (a multiple of 256)")->capture_default_str();
  app.add_option("-r,--reps", reps, "timed runs of each (after one untimed)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  n = (n + kAdamW8bitBlock - 1) / kAdamW8bitBlock * kAdamW8bitBlock;
  const size_t blocks = n / kAdamW8bitBlock;
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 1e-2f);
  std::vector<float> params(n), grads(n), m(n, 0.0f), v(n, 0.0f);
  for (size_t i = 0; i < n; ++i) params[i] = normal(gen), grads[i] = normal(gen);
  std::vector<uint8_t> m_codes(n), v_codes(n), codes(n);
  std::vector<float> m_absmax(blocks, 0.0f), v_absmax(blocks, 0.0f);
  const std::vector<AdamWTensor> tensors = {{0, n, true}};
  const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  std::fill(m_codes.begin(), m_codes.end(), cpu::quantize_nearest(cpu::signed_dynamic_map(), 0));
  std::fill(v_codes.begin(), v_codes.end(), cpu::quantize_nearest(cpu::unsigned_dynamic_map(), 0));

  auto fp32 = [&](int r) {
    cpu::adamw_update(tensors, {0, n, params.data(), 0, grads.data(), 0, m.data(), v.data(), 0},
                      cfg, 1e-4, 1.0f, r + 1);
  };
  auto int8 = [&](int r) {
    cpu::adamw8bit_update(tensors,
                          {0, n, params.data(), 0, grads.data(), 0, m_codes.data(), v_codes.data(),
                           m_absmax.data(), v_absmax.data(), 0},
                          cfg, 1e-4, 1.0f, r + 1);
  };
  const cpu::QuantizationMap& map = cpu::signed_dynamic_map();
  auto requantize = [&](int) {
#pragma omp parallel for schedule(static)
    for (long b = 0; b < long(blocks); ++b) {
      const size_t at = size_t(b) * kAdamW8bitBlock;
      const float* x = grads.data() + at;
      float absmax = 0.0f;
      for (size_t j = 0; j < kAdamW8bitBlock; ++j) absmax = std::max(absmax, std::fabs(x[j]));
      cpu::quantize_block(map, x, absmax, codes.data() + at);
    }
  };
  fp32(0), int8(0), requantize(0);  // warm: pages touched, maps built
  const double s_fp32 = median_seconds(reps, fp32), s_8bit = median_seconds(reps, int8),
               s_quant = median_seconds(reps, requantize);
  fmt::print("{} parameters, {} threads, median of {} runs\n", n, omp_get_max_threads(), reps);
  fmt::print("{:<34} {:>9} {:>9}\n", "update", "s", "ns/param");
  auto row = [&](const char* what, double s) {
    fmt::print("{:<34} {:>9.4f} {:>9.3f}\n", what, s, s * 1e9 / double(n));
  };
  row("adamw (fp32 moments)", s_fp32);
  row("adamw8bit", s_8bit);
  row("quantize_block alone (one moment)", s_quant);
  return 0;
}
