// Conv2d layer timings on the CPU, for comparison with bench/torch_conv.py (same shapes, figures):
// per shape, conv2d forward + backward (dinp, dweight, dbias) in float at batch 128, and
// BatchNorm2d (training, one group) + ReLU forward and backward on the conv's output.
// Prints one JSON line per shape with the median ms of the timed repeats.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "base/gemm.hpp"
#include "layers/batchnorm.hpp"
#include "layers/conv2d.hpp"
#include "layers/relu.hpp"

using namespace mpitron;
using cpu::Conv2dShape;

namespace {

struct NamedShape {
  const char* name;
  int IC, HW, OC, K, stride, pad;
};

// The shapes of bench/torch_conv.py.
constexpr NamedShape kShapes[] = {
    {"c1_28_32", 1, 28, 32, 3, 1, 1},     {"c32_28_64_s2", 32, 28, 64, 3, 2, 1},
    {"c64_14_64", 64, 14, 64, 3, 1, 1},   {"c64_14_128_s2", 64, 14, 128, 3, 2, 1},
    {"c128_7_128", 128, 7, 128, 3, 1, 1},
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

template <class Fn>
double time_ms(Fn&& fn, int reps, int warmup) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mpitron conv2d benchmark: forward + backward of conv and BN+ReLU, float"};
  int batch = 128, reps = 10, warmup = 3, threads = 2;
  std::string only;
  app.add_option("--batch", batch, "images")->capture_default_str();
  app.add_option("--reps", reps, "timed repeats")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed repeats first")->capture_default_str();
  app.add_option("--threads", threads, "compute threads (OpenMP and OpenBLAS)")
      ->capture_default_str();
  app.add_option("--shape", only, "one shape name; default: all");
  std::string path = "onednn";
  app.add_option("--path", path,
                 "conv kernels: onednn (im2col where the build or the shape has no oneDNN) or "
                 "im2col")
      ->check(CLI::IsMember({"onednn", "im2col"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  cpu::set_compute_threads(threads);

  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  auto rnd = [&](size_t n, float scale) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(g) * scale;
    return v;
  };
  for (const NamedShape& ns : kShapes) {
    if (!only.empty() && only != ns.name) continue;
    const Conv2dShape s{.N = batch,
                        .IC = ns.IC,
                        .H = ns.HW,
                        .W = ns.HW,
                        .OC = ns.OC,
                        .KH = ns.K,
                        .KW = ns.K,
                        .stride = ns.stride,
                        .pad = ns.pad};
    const int HW = s.OH() * s.OW();
    const size_t n_in = size_t(batch) * s.IC * s.H * s.W, n_out = size_t(batch) * s.OC * HW;
    const size_t n_w = size_t(s.OC) * s.IC * s.KH * s.KW;
    const std::vector<float> inp = rnd(n_in, 1.f), w = rnd(n_w, std::sqrt(2.f * s.OC / n_w)),
                             b(s.OC, 0.f), dout = rnd(n_out, 1.f);
    std::vector<float> out(n_out), dinp(n_in), dw(n_w, 0.f), db(s.OC, 0.f);
    const cpu::Conv2dPlan plan =
        cpu::conv2d_plan(s, path == "im2col" ? cpu::Conv2dPath::im2col : cpu::Conv2dPath::onednn);
    std::vector<float> ws(cpu::conv2d_workspace(plan));
    const double conv_ms = time_ms(
        [&] {
          cpu::conv2d_forward(out.data(), ws.data(), inp.data(), w.data(), b.data(), plan, batch);
          cpu::conv2d_backward(dinp.data(), dw.data(), db.data(), ws.data(), dout.data(),
                               inp.data(), w.data(), plan, batch);
        },
        reps, warmup);

    const std::vector<float> gamma(s.OC, 1.f), beta(s.OC, 0.f);
    std::vector<float> bn(n_out), act(n_out), dact(n_out), dbn(n_out), mean(s.OC), rstd(s.OC),
        dgamma(s.OC, 0.f), dbeta(s.OC, 0.f);
    const double bn_ms = time_ms(
        [&] {
          cpu::batchnorm2d_forward(bn.data(), mean.data(), rstd.data(), out.data(), gamma.data(),
                                   beta.data(), batch, s.OC, HW, batch, 1e-5f);
          cpu::relu_forward(act.data(), bn.data(), n_out);
          cpu::relu_backward(dact.data(), dout.data(), bn.data(), n_out);
          cpu::batchnorm2d_backward(dbn.data(), dgamma.data(), dbeta.data(), dact.data(),
                                    out.data(), gamma.data(), mean.data(), rstd.data(), batch, s.OC,
                                    HW, batch);
        },
        reps, warmup);
    fmt::print(
        "{{\"impl\": \"mpitron\", \"shape\": \"{}\", \"path\": \"{}\", \"conv_ms\": {:.3f}, "
        "\"bn_relu_ms\": {:.3f}, \"workspace_mib\": {:.1f}}}\n",
        ns.name, plan.path() == cpu::Conv2dPath::onednn ? "onednn" : "im2col", conv_ms, bn_ms,
        double(ws.size()) * sizeof(float) / (1 << 20));
    std::fflush(stdout);
  }
  return 0;
}
