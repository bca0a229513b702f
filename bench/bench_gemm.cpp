// The GPT step's matrix products one shape at a time: cpu::gemm (chunks fixed by the shape, one
// serial library call each, bits independent of the thread count) against one threaded OpenBLAS
// call over the whole product (what PyTorch makes), GFLOP/s of each and their ratio. Shapes are
// linear_forward / linear_backward's for a layer (out = in W^T; din = dout W; dW += dout^T in)
// at B*T rows: the four block linears and the tied LM head.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "base/gemm.hpp"

#ifdef MPITRON_BLAS
#include <cblas.h>
#endif

using namespace mpitron;

namespace {

struct Product {
  std::string name;
  bool ta, tb;
  int M, N, K;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* kernels = cpu::better_blas_kernels()) {  // as mpitron does
    setenv("OPENBLAS_CORETYPE", kernels, 1);
    execv("/proc/self/exe", argv);
  }
  CLI::App app{"the GPT step's matrix products: mpitron's gemm against one threaded BLAS call"};
  int rows = 256, embd = 768, vocab = 50257, threads = 2, repeats = 5;
  app.add_option("--rows", rows, "B*T rows of activations")->capture_default_str();
  app.add_option("--embd", embd, "model width C")->capture_default_str();
  app.add_option("--vocab", vocab, "vocabulary (the LM head)")->capture_default_str();
  app.add_option("--threads", threads, "compute threads")->capture_default_str();
  app.add_option("--repeats", repeats, "timed repeats per shape (median)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  cpu::set_compute_threads(threads);

  std::vector<Product> products;
  const int C = embd;
  for (auto [layer, OC, IC] :
       {std::tuple{"c_attn", 3 * C, C}, std::tuple{"attn_proj", C, C}, std::tuple{"c_fc", 4 * C, C},
        std::tuple{"mlp_proj", C, 4 * C}, std::tuple{"lm_head", vocab, C}}) {
    products.push_back({fmt::format("{} fwd", layer), false, true, rows, OC, IC});
    products.push_back({fmt::format("{} dinp", layer), false, false, rows, IC, OC});
    products.push_back({fmt::format("{} dW", layer), true, false, OC, IC, rows});
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  fmt::print("{} threads, {} rows, gemm {}\n", threads, rows, cpu::gemm_library());
  fmt::print("{:<16} {:>6} {:>6} {:>6} {:>10} {:>10} {:>10} {:>10} {:>7}\n", "product", "M", "N",
             "K", "ours ms", "blas ms", "ours GF/s", "blas GF/s", "ours/blas");
  double total_ours = 0, total_blas = 0;
  for (const Product& p : products) {
    // op(A) is M x K, op(B) is K x N; row-major with the stored shapes.
    const int a_rows = p.ta ? p.K : p.M, a_cols = p.ta ? p.M : p.K;
    const int b_rows = p.tb ? p.N : p.K, b_cols = p.tb ? p.K : p.N;
    std::vector<float> A(size_t(a_rows) * a_cols), B(size_t(b_rows) * b_cols),
        Cm(size_t(p.M) * p.N);
    for (float& x : A) x = u(rng);
    for (float& x : B) x = u(rng);
    auto time = [&](auto&& call) {
      std::vector<double> ms;
      call();  // warm-up
      for (int r = 0; r < repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        call();
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
      }
      return median(ms);
    };
    const double ours = time([&] {
      cpu::gemm<float>(p.ta, p.tb, p.M, p.N, p.K, 1.0f, A.data(), a_cols, B.data(), b_cols, 0.0f,
                       Cm.data(), p.N);
    });
    double blas = ours;
#ifdef MPITRON_BLAS
    blas = time([&] {
      cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans,
                  p.M, p.N, p.K, 1.0f, A.data(), a_cols, B.data(), b_cols, 0.0f, Cm.data(), p.N);
    });
#endif
    const double gflop = 2.0 * p.M * p.N * p.K / 1e9;
    total_ours += ours;
    total_blas += blas;
    fmt::print("{:<16} {:>6} {:>6} {:>6} {:>10.2f} {:>10.2f} {:>10.1f} {:>10.1f} {:>7.2f}\n",
               p.name, p.M, p.N, p.K, ours, blas, gflop / ours * 1e3, gflop / blas * 1e3,
               ours / blas);
  }
  fmt::print("one layer's products x 1 and the head: ours {:.1f} ms, blas {:.1f} ms ({:.2f})\n",
             total_ours, total_blas, total_ours / total_blas);
  return 0;
}
