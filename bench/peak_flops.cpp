// The machine's fp32 peak as code can reach it: each thread runs 12 independent chains of 8-lane
// fused multiply-adds in registers (more chains than FMA latency x FMA ports on x86 cores of the
// last decade), no memory traffic. bench_step.sh divides a step's model FLOPs by it, so a speed
// target can be checked against what the cores can do at all.
#include <fmt/format.h>
#include <immintrin.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <vector>

namespace {

constexpr int chains = 12;
constexpr double flops_per_iteration = chains * 8 * 2;  // 8 lanes, multiply and add

// Returns the sum of the lanes so the compiler keeps the work.
__attribute__((target("avx2,fma"))) float fma_chains(long iterations, float seed) {
  __m256 acc[chains];
  for (int c = 0; c < chains; ++c) acc[c] = _mm256_set1_ps(seed + 0.001f * c);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < chains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  __m256 sum = acc[0];
  for (int c = 1; c < chains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  float lanes[8];
  _mm256_storeu_ps(lanes, sum);
  float total = 0;
  for (float x : lanes) total += x;
  return total;
}

// GFLOP/s of `threads` threads running the chains together: the slowest thread's time.
double peak_gflops(int threads, long iterations) {
  std::vector<double> seconds(threads);
  std::vector<float> sink(threads);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
#pragma omp barrier
    const auto start = std::chrono::steady_clock::now();
    sink[t] = fma_chains(iterations, 1.0f + t);
    seconds[t] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  asm volatile("" : : "r"(sink.data()) : "memory");  // the sums are stored, so the chains run
  const double slowest = *std::max_element(seconds.begin(), seconds.end());
  return threads * iterations * flops_per_iteration / slowest / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fp32 peak of the cores: FMA chains in registers, per thread count"};
  int threads = 2, repeats = 5;
  double seconds = 0.3;
  bool json = false;
  app.add_option("--threads", threads, "threads (one chain set each)")->capture_default_str();
  app.add_option("--repeats", repeats, "timed repeats; the best is reported")
      ->capture_default_str();
  app.add_option("--seconds", seconds, "about how long each repeat runs")->capture_default_str();
  app.add_flag("--json", json, "one JSON line");
  CLI11_PARSE(app, argc, argv);
  if (threads < 1 || repeats < 1 || seconds <= 0) {
    fmt::print(stderr, "error: --threads, --repeats and --seconds must be positive\n");
    return 2;
  }
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    fmt::print(stderr, "error: this CPU has no AVX2 and FMA: the peak kernel needs them\n");
    return 1;
  }
  // Calibrate: iterations for about `seconds` on one thread.
  long iterations = 1 << 20;
  const double calibration = peak_gflops(1, iterations);
  iterations =
      std::max<long>(1 << 16, static_cast<long>(seconds * calibration * 1e9 / flops_per_iteration));
  double best = 0;
  for (int r = 0; r < repeats; ++r) best = std::max(best, peak_gflops(threads, iterations));
  if (json) {
    fmt::print("{{\"threads\": {}, \"peak_gflops\": {:.2f}}}\n", threads, best);
  } else {
    fmt::print("{} thread{}: {:.1f} GFLOP/s fp32 (FMA chains, best of {})\n", threads,
               threads == 1 ? "" : "s", best, repeats);
  }
  return 0;
}
