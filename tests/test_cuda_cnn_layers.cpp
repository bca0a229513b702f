// The convolutional families' CUDA layers against their CPU twins (float NCHW), on the shapes the
// AlexNet and ResNet presets run and some awkward ones: cuDNN's convolution against the CPU's
// direct loops (forward, input gradient, weight gradient +=, within 1e-4 of each tensor's largest
// |value|: another summation order) and the same bits on a second identical call (deterministic
// algorithms), and in bf16 and fp16 (every shape plans a deterministic algorithm in each direction,
// within the format's rounding of the float layer); ghost-group batch norm (training, evaluation,
// backward, the statistics sums) against the CPU's, within 1e-5 (double sums in another order, then
// the same float formulas); max and global average pooling and their backward bit for bit (the same
// comparisons and orders). Skips without a device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/cuda_check.hpp"
#include "layers/batchnorm.hpp"
#include "layers/conv2d.hpp"
#include "layers/cuda/batchnorm.cuh"
#include "layers/cuda/pool.cuh"
#include "layers/pool.hpp"
#include "src/model/precision.hpp"
#include "tests/cuda_test_support.hpp"
#ifdef MPITRON_HAVE_CUDNN
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "layers/cuda/conv2d.cuh"
#endif

using namespace mpitron;
using cuda_test::DeviceArray;
using cuda_test::Stream;

namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f, float shift = 0.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& e : v) e = shift + scale * dist(gen);
  return v;
}

// Every |gpu - cpu| <= tol * max|cpu| (NaN fails).
void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, double tol,
                  const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double scale = 0;
  for (float c : cpu) scale = std::max(scale, double(std::abs(c)));
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < gpu.size(); ++i)
    if (!(std::abs(double(gpu[i]) - double(cpu[i])) <= tol * scale) && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << gpu.size() << " elements off by more than "
                     << tol << " x " << scale << "; first at " << first << ": gpu " << gpu[first]
                     << " cpu " << cpu[first];
}

template <class T>
void expect_bitwise(const std::vector<T>& gpu, const std::vector<T>& cpu, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < gpu.size(); ++i)
    if (std::memcmp(&gpu[i], &cpu[i], sizeof(T)) != 0 && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << gpu.size()
                     << " elements not bitwise equal; first at " << first;
}

}  // namespace

#ifdef MPITRON_HAVE_CUDNN
// N, IC, H, W, OC, KH, KW, stride, pad: the presets' first layers and strided 1x1 shortcuts, an
// odd image, and (below) calls on fewer images than planned.
const cpu::Conv2dShape kConvShapes[] = {
    {16, 1, 28, 28, 32, 3, 3, 1, 1}, {16, 32, 14, 14, 64, 3, 3, 1, 1},
    {8, 16, 28, 28, 32, 3, 3, 2, 1}, {8, 16, 28, 28, 32, 1, 1, 2, 0},
    {3, 5, 11, 9, 7, 3, 3, 1, 1},    {5, 8, 7, 7, 8, 3, 3, 2, 1}};

namespace {

// Host values of the storage type Host (float, or the project's 16-bit types) as the device type D.
template <class D, class Host>
std::vector<D> as_device(const std::vector<Host>& h) {
  static_assert(sizeof(D) == sizeof(Host));
  std::vector<D> d(h.size());
  std::memcpy(static_cast<void*>(d.data()), h.data(), h.size() * sizeof(Host));
  return d;
}
template <class Host, class D>
std::vector<float> widened(const std::vector<D>& d) {
  std::vector<Host> h(d.size());
  std::memcpy(h.data(), static_cast<const void*>(d.data()), d.size() * sizeof(D));
  if constexpr (std::is_same_v<Host, float>) {
    return h;
  } else {
    std::vector<float> f(h.size());
    widen(f.data(), h.data(), h.size());
    return f;
  }
}

// Random values the storage type holds exactly: its storage and the same values as floats.
template <class Host>
std::pair<std::vector<Host>, std::vector<float>> exact_values(size_t n, uint32_t seed,
                                                              float scale = 1.0f) {
  std::vector<float> f = random_floats(n, seed, scale);
  if constexpr (std::is_same_v<Host, float>) {
    return {f, f};
  } else {
    std::vector<Host> h(n);
    round_to(h.data(), f.data(), n);
    widen(f.data(), h.data(), n);
    return {h, f};
  }
}

// cuDNN's convolution (fp32 sums; in 16 bits each output written in the format, the weight
// gradient in the format, then added to the fp32 one) against the CPU's float direct loops on the
// same values: within 2 units of the format's rounding (0 for float) plus 1e-4 (the sums' order)
// of each tensor's largest |value|; the same bits on a repeat (deterministic algorithms, no
// atomics' order) and for the weight gradient without the input's (the image's). Every shape must
// plan: a deterministic algorithm in each direction (the first layer's single channel included).
template <class D, class Host>
void check_conv(double unit) {
  Stream stream;
  for (const cpu::Conv2dShape& planned : kConvShapes)
    for (int rows : {planned.N, std::max(1, planned.N / 2 - 1)}) {
      cpu::Conv2dShape s = planned;
      s.N = rows;
      const std::string where = "N " + std::to_string(rows) + " of " + std::to_string(planned.N) +
                                " IC " + std::to_string(s.IC) + " " + std::to_string(s.H) + "x" +
                                std::to_string(s.W) + " OC " + std::to_string(s.OC) + " K " +
                                std::to_string(s.KH) + " stride " + std::to_string(s.stride);
      const size_t in = size_t(s.N) * s.IC * s.H * s.W, out = size_t(s.N) * s.OC * s.OH() * s.OW();
      const size_t wn = size_t(s.OC) * s.IC * s.KH * s.KW;
      const auto [xh, x] = exact_values<Host>(in, 1);
      const auto [wh, w] = exact_values<Host>(wn, 2, 0.2f);
      const auto [dyh, dy] = exact_values<Host>(out, 3);
      const std::vector<float> dw0 = random_floats(wn, 4);
      std::vector<float> y(out), dx(in), dw = dw0;
      cpu::conv2d_forward_direct(y.data(), x.data(), w.data(), static_cast<const float*>(nullptr),
                                 s);
      cpu::conv2d_backward_direct(dx.data(), dw.data(), static_cast<float*>(nullptr), dy.data(),
                                  x.data(), w.data(), s);

      const auto plan = cuda::conv2d_plan<D>(planned);
      DeviceArray<char> ws(std::max<size_t>(cuda::conv2d_workspace_bytes(*plan), 1));
      DeviceArray<D> gx(as_device<D>(xh)), gw(as_device<D>(wh)), gy(out), gdy(as_device<D>(dyh)),
          gdx(in);
      DeviceArray<float> gdw(dw0);
      cuda::conv2d_forward(gy.ptr, ws.ptr, gx.ptr, gw.ptr, *plan, rows, stream.s);
      cuda::conv2d_backward(gdx.ptr, gdw.ptr, ws.ptr, gdy.ptr, gx.ptr, gw.ptr, *plan, rows,
                            stream.s);
      stream.sync();
      const std::vector<D> y1 = gy.download(), dx1 = gdx.download();
      const std::vector<float> dw1 = gdw.download();
      const double tol = 2 * unit + 1e-4;
      expect_close(widened<Host>(y1), y, tol, where + " forward");
      expect_close(widened<Host>(dx1), dx, tol, where + " input gradient");
      expect_close(dw1, dw, tol, where + " weight gradient +=");

      gdw.upload(dw0);
      cuda::conv2d_forward(gy.ptr, ws.ptr, gx.ptr, gw.ptr, *plan, rows, stream.s);
      cuda::conv2d_backward(gdx.ptr, gdw.ptr, ws.ptr, gdy.ptr, gx.ptr, gw.ptr, *plan, rows,
                            stream.s);
      stream.sync();
      expect_bitwise(gy.download(), y1, where + " forward repeated");
      expect_bitwise(gdx.download(), dx1, where + " input gradient repeated");
      expect_bitwise(gdw.download(), dw1, where + " weight gradient repeated");

      gdw.upload(dw0);
      cuda::conv2d_backward(static_cast<D*>(nullptr), gdw.ptr, ws.ptr, gdy.ptr, gx.ptr, gw.ptr,
                            *plan, rows, stream.s);
      stream.sync();
      expect_bitwise(gdw.download(), dw1, where + " weight gradient without the input's");
    }
}

}  // namespace

TEST(CudaCnnLayers, CudnnConvolutionMatchesCpuAndRepeats) {
  SKIP_WITHOUT_DEVICE();
  check_conv<float, float>(0.0);
}

TEST(CudaCnnLayers, CudnnBf16ConvolutionPlansEveryShapeAndMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  check_conv<__nv_bfloat16, bf16_t>(0x1p-8);
}

TEST(CudaCnnLayers, CudnnFp16ConvolutionPlansEveryShapeAndMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  check_conv<__half, fp16_t>(0x1p-11);
}
#endif

TEST(CudaCnnLayers, GhostBatchNormMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  Stream stream;
  struct Case {
    int N, C, HW, G;
  };
  // The presets' planes (28x28 .. 7x7, groups of 8), one group, four values per group, one value
  // per group (variance 0, no unbiasing), inputs of mean 3 and spread 2.
  for (const Case& k : {Case{16, 32, 784, 8}, Case{16, 64, 49, 8}, Case{8, 3, 25, 8},
                        Case{12, 5, 1, 4}, Case{4, 7, 9, 2}, Case{6, 3, 1, 1}}) {
    const std::string where = "N " + std::to_string(k.N) + " C " + std::to_string(k.C) + " HW " +
                              std::to_string(k.HW) + " G " + std::to_string(k.G);
    const size_t n = size_t(k.N) * k.C * k.HW, stats = size_t(k.N / k.G) * k.C;
    const std::vector<float> x = random_floats(n, 5, 2.0f, 3.0f), dy = random_floats(n, 6);
    const std::vector<float> w = random_floats(size_t(k.C), 7, 0.5f, 1.0f);
    const std::vector<float> b = random_floats(size_t(k.C), 8);
    const std::vector<float> rm = random_floats(size_t(k.C), 9);
    std::vector<float> rv = random_floats(size_t(k.C), 10);
    for (float& v : rv) v = 0.5f + std::abs(v);
    const std::vector<float> dw0 = random_floats(size_t(k.C), 11),
                             db0 = random_floats(size_t(k.C), 12);
    std::vector<float> y(n), mean(stats), rstd(stats), ye(n), dx(n), dw = dw0, db = db0;
    cpu::batchnorm2d_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), k.N,
                             k.C, k.HW, k.G, 1e-5f);
    cpu::batchnorm2d_forward_eval(ye.data(), x.data(), w.data(), b.data(), rm.data(), rv.data(),
                                  k.N, k.C, k.HW, 1e-5f);
    cpu::batchnorm2d_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                              mean.data(), rstd.data(), k.N, k.C, k.HW, k.G);
    std::vector<double> ms(size_t(k.C), 0.5), vs(size_t(k.C), 0.25);
    cpu::batchnorm2d_group_stats(ms.data(), vs.data(), mean.data(), rstd.data(), k.N / k.G, k.C,
                                 k.HW, k.G, 1e-5f);

    DeviceArray<float> gx(x), gdy(dy), gw(w), gb(b), grm(rm), grv(rv), gy(n), gye(n), gdx(n);
    DeviceArray<float> gmean(stats), grstd(stats), gdw(dw0), gdb(db0);
    DeviceArray<char> scratch(cuda::batchnorm2d_backward_scratch_bytes(k.N, k.C, k.G));
    DeviceArray<double> gms(std::vector<double>(size_t(k.C), 0.5)),
        gvs(std::vector<double>(size_t(k.C), 0.25));
    cuda::batchnorm2d_forward(gy.ptr, gmean.ptr, grstd.ptr, gx.ptr, gw.ptr, gb.ptr, k.N, k.C, k.HW,
                              k.G, 1e-5f, stream.s);
    cuda::batchnorm2d_forward_eval(gye.ptr, gx.ptr, gw.ptr, gb.ptr, grm.ptr, grv.ptr, k.N, k.C,
                                   k.HW, 1e-5f, stream.s);
    stream.sync();
    expect_close(gmean.download(), mean, 1e-6, where + " mean");
    expect_close(grstd.download(), rstd, 1e-6, where + " rstd");
    expect_close(gy.download(), y, 1e-5, where + " forward");
    expect_bitwise(gye.download(), ye, where + " evaluation (elementwise, the same formula)");
    // Backward and the sums from the CPU's statistics, so that they are judged alone.
    gmean.upload(mean);
    grstd.upload(rstd);
    cuda::batchnorm2d_backward(gdx.ptr, gdw.ptr, gdb.ptr, gdy.ptr, gx.ptr, gw.ptr, gmean.ptr,
                               grstd.ptr, k.N, k.C, k.HW, k.G, scratch.ptr, stream.s);
    cuda::batchnorm2d_group_stats(gms.ptr, gvs.ptr, gmean.ptr, grstd.ptr, k.N / k.G, k.C, k.HW, k.G,
                                  1e-5f, stream.s);
    stream.sync();
    expect_close(gdx.download(), dx, 1e-5, where + " input gradient");
    expect_close(gdw.download(), dw, 1e-5, where + " weight gradient +=");
    expect_close(gdb.download(), db, 1e-5, where + " bias gradient +=");
    expect_bitwise(gms.download(), ms, where + " mean sums (the CPU's order)");
    expect_bitwise(gvs.download(), vs, where + " variance sums (the CPU's order)");
  }
}

TEST(CudaCnnLayers, PoolingEqualsCpuBitwise) {
  SKIP_WITHOUT_DEVICE();
  Stream stream;
  // AlexNet's 2x2/2, odd sides (the last row and column dropped), overlapping and padded windows.
  for (const cpu::Pool2dShape& s :
       {cpu::Pool2dShape{4, 3, 28, 28, 2, 2, 0}, cpu::Pool2dShape{2, 5, 7, 9, 2, 2, 0},
        cpu::Pool2dShape{2, 3, 9, 8, 3, 2, 1}, cpu::Pool2dShape{1, 2, 6, 6, 3, 1, 1}}) {
    const std::string where = std::to_string(s.H) + "x" + std::to_string(s.W) + " K " +
                              std::to_string(s.K) + " stride " + std::to_string(s.stride) +
                              " pad " + std::to_string(s.pad);
    const size_t in = size_t(s.N) * s.C * s.H * s.W, out = size_t(s.N) * s.C * s.OH() * s.OW();
    std::vector<float> x = random_floats(in, 13);
    for (float& e : x) e = std::round(2 * e) / 2;  // many ties: the first in row-major order wins
    x[1] = x[size_t(s.W)] = NAN;  // two NaNs in the first window: the first of them wins
    const std::vector<float> dy = random_floats(out, 14);
    std::vector<float> y(out), dx(in);
    std::vector<int32_t> am(out);
    cpu::maxpool2d_forward(y.data(), am.data(), x.data(), s);
    cpu::maxpool2d_backward(dx.data(), dy.data(), am.data(), s);

    DeviceArray<float> gx(x), gy(out), gdy(dy), gdx(in);
    DeviceArray<int32_t> gam(out);
    cuda::maxpool2d_forward(gy.ptr, gam.ptr, gx.ptr, s, stream.s);
    cuda::maxpool2d_backward(gdx.ptr, gdy.ptr, gam.ptr, s, stream.s);
    stream.sync();
    expect_bitwise(gy.download(), y, where + " max forward");
    expect_bitwise(gam.download(), am, where + " winners");
    expect_bitwise(gdx.download(), dx, where + " max backward");
  }
  for (const int HW : {1, 49, 784}) {
    const int N = 5, C = 6;
    const std::vector<float> x = random_floats(size_t(N) * C * HW, 15, 1.0f, 2.0f);
    const std::vector<float> dy = random_floats(size_t(N) * C, 16);
    std::vector<float> y(size_t(N) * C), dx(x.size());
    cpu::global_avgpool_forward(y.data(), x.data(), N, C, HW);
    cpu::global_avgpool_backward(dx.data(), dy.data(), N, C, HW);
    DeviceArray<float> gx(x), gy(y.size()), gdy(dy), gdx(x.size());
    cuda::global_avgpool_forward(gy.ptr, gx.ptr, N, C, HW, stream.s);
    cuda::global_avgpool_backward(gdx.ptr, gdy.ptr, N, C, HW, stream.s);
    stream.sync();
    expect_bitwise(gy.download(), y, "average pool forward, HW " + std::to_string(HW));
    expect_bitwise(gdx.download(), dx, "average pool backward, HW " + std::to_string(HW));
  }
}
