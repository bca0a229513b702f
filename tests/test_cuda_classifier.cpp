// The GPT's LM head on CUDA: the vocabulary padded to the CUDA table's lm_head_align (128) and the
// fused classifier (cross-entropy forward and backward in one pass, dlogits over the logits). The
// kernels: padded rows read nothing past V (NaN there changes nothing) and equal the unpadded
// ones bit for bit, the fused kernel equals the separate ones bit for bit (dlogits at the same
// dloss), padding gets exactly 0. The model: a GPT of odd vocabulary (5, 257, 50257) on the GPU,
// training (fused) and evaluation (separate) forwards, against the CPU's unpadded GPT. Skips
// (GTEST_SKIP) on a machine with no device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "layers/cuda/crossentropy.cuh"
#include "src/cuda/device_memory.cuh"
#include "src/model/family.hpp"
#include "src/model/gpt.hpp"
#include "src/model/layer_ops.hpp"
#include "src/model/precision.hpp"
#include "src/train/grad_sync.hpp"
#include "tests/cuda_test_support.hpp"
#include "tests/gpt_precision_run.hpp"

using namespace mpitron;
using cuda_test::DeviceArray;
using cuda_test::Stream;

namespace {

int round_up(int v, int a) {
  return (v + a - 1) / a * a;
}

// The device type of a host storage type.
template <class A>
using Dev =
    std::conditional_t<std::is_same_v<A, float>, float,
                       std::conditional_t<std::is_same_v<A, bf16_t>, __nv_bfloat16, __half>>;
template <class A>
Dev<A>* dev(A* p) {
  return reinterpret_cast<Dev<A>*>(p);
}

template <class A>
std::vector<A> rounded(const std::vector<float>& x) {
  if constexpr (std::is_same_v<A, float>) {
    return x;
  } else {
    std::vector<A> out(x.size());
    round_to(out.data(), x.data(), x.size());
    return out;
  }
}

template <class A>
std::vector<float> widened(const std::vector<A>& x) {
  if constexpr (std::is_same_v<A, float>) {
    return x;
  } else {
    std::vector<float> out(x.size());
    widen(out.data(), x.data(), x.size());
    return out;
  }
}

template <class A>
bool same_bits(const A& a, const A& b) {
  return std::memcmp(&a, &b, sizeof(A)) == 0;
}

template <class A>
bool is_plus_zero(const A& a) {
  const A zero{};
  return same_bits(a, zero);
}

template <class A>
class CudaClassifier : public ::testing::Test {};
using StorageTypes = ::testing::Types<float, bf16_t, fp16_t>;
TYPED_TEST_SUITE(CudaClassifier, StorageTypes);

// Rows of Vp logits whose Vp - V padding columns are NaN: the padded kernels must equal the
// unpadded ones on the (N,V) logits bit for bit, and the fused kernel the separate ones.
TYPED_TEST(CudaClassifier, PaddedAndFusedKernelsMatchTheUnpaddedBitForBit) {
  SKIP_WITHOUT_DEVICE();
  using A = TypeParam;
  Stream stream;
  const int shapes[][2] = {{1, 5}, {37, 5}, {37, 257}, {3, 128}, {37, 50257}};
  for (const auto& shape : shapes) {
    const int N = shape[0], V = shape[1], Vp = round_up(V, 128);
    const std::string where = "N=" + std::to_string(N) + " V=" + std::to_string(V);
    std::mt19937 rng(uint32_t(N * 7919 + V));
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> dense(size_t(N) * V), padded(size_t(N) * Vp, std::nanf(""));
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < V; ++j)
        padded[size_t(n) * Vp + j] = dense[size_t(n) * V + j] = normal(rng);
    std::vector<int32_t> targets(static_cast<size_t>(N));
    for (int n = 0; n < N; ++n) targets[size_t(n)] = int32_t((n * 131 + 7) % V);
    targets.front() = V - 1;
    targets.back() = 0;
    if (N > 2) targets[1] = -1;  // a masked position: loss 0, gradient row 0
    const float dloss = 0.3f;    // not a power of two: its rounding shows

    DeviceArray<A> gdense(rounded<A>(dense)), gpadded(rounded<A>(padded)),
        gfused(rounded<A>(padded));
    DeviceArray<A> gd_dense(size_t(N) * V), gd_padded(size_t(N) * Vp);
    DeviceArray<int32_t> gtargets(targets);
    DeviceArray<float> losses0(static_cast<size_t>(N)), lse0(static_cast<size_t>(N)),
        losses1(static_cast<size_t>(N)), lse1(static_cast<size_t>(N)),
        losses2(static_cast<size_t>(N)), lse2(static_cast<size_t>(N));
    cuda::crossentropy_forward(losses0.ptr, lse0.ptr, dev(gdense.ptr), gtargets.ptr, N, V,
                               stream.s);
    cuda::crossentropy_backward(dev(gd_dense.ptr), dev(gdense.ptr), lse0.ptr, gtargets.ptr, dloss,
                                N, V, stream.s);
    cuda::crossentropy_forward(losses1.ptr, lse1.ptr, dev(gpadded.ptr), gtargets.ptr, N, V, Vp,
                               stream.s);
    cuda::crossentropy_backward(dev(gd_padded.ptr), dev(gpadded.ptr), lse1.ptr, gtargets.ptr, dloss,
                                N, V, Vp, stream.s);
    cuda::crossentropy_fused(losses2.ptr, lse2.ptr, dev(gfused.ptr), gtargets.ptr, dloss, N, V, Vp,
                             stream.s);
    stream.sync();
    const std::vector<float> l0 = losses0.download(), s0 = lse0.download();
    for (const auto* got : {&losses1, &losses2}) {
      const std::vector<float> l = got->download();
      for (int n = 0; n < N; ++n)
        ASSERT_TRUE(same_bits(l[size_t(n)], l0[size_t(n)]))
            << where << " loss of row " << n << ": " << l[size_t(n)] << " vs " << l0[size_t(n)];
    }
    for (const auto* got : {&lse1, &lse2}) {
      const std::vector<float> l = got->download();
      for (int n = 0; n < N; ++n)
        ASSERT_TRUE(same_bits(l[size_t(n)], s0[size_t(n)])) << where << " lse of row " << n;
    }
    for (float l : l0) ASSERT_TRUE(std::isfinite(l)) << where;
    const std::vector<A> d0 = gd_dense.download();
    if (N > 2) {
      ASSERT_EQ(l0[1], 0.0f) << where << " masked row's loss";
      for (int j = 0; j < V; ++j) {
        ASSERT_TRUE(is_plus_zero(d0[size_t(V) + j])) << where << " masked row's dlogit " << j;
      }
    }
    for (const auto* got : {&gd_padded, &gfused}) {
      const std::vector<A> d = got->download();
      const char* what = got == &gfused ? "fused" : "padded";
      for (int n = 0; n < N; ++n) {
        for (int j = 0; j < V; ++j)
          ASSERT_TRUE(same_bits(d[size_t(n) * Vp + j], d0[size_t(n) * V + j]))
              << where << " " << what << " dlogits at (" << n << ", " << j << ")";
        for (int j = V; j < Vp; ++j)
          ASSERT_TRUE(is_plus_zero(d[size_t(n) * Vp + j]))
              << where << " " << what << " padding dlogit at (" << n << ", " << j << ") not 0";
      }
    }
  }
}

// The product's scale (lm_head_backward's dout_scale) against dout scaled on the host by a power
// of two, which is exact: the same values up to the products' fp32 rounding.
TYPED_TEST(CudaClassifier, LmHeadBackwardScalesDout) {
  SKIP_WITHOUT_DEVICE();
  using A = TypeParam;
  const int N = 64, IC = 96, OC = 384;
  const float s = 0.125f;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> dout(size_t(N) * OC), inp(size_t(N) * IC), w(size_t(OC) * IC);
  for (std::vector<float>* v : {&dout, &inp, &w})
    for (float& x : *v) x = normal(rng);
  std::vector<float> dout_s(dout);
  for (float& x : dout_s) x *= s;
  const LayerOpsT<A>& L = cuda_layer_ops<A>();
  EXPECT_EQ(L.lm_head_align, 128);
  DeviceArray<A> gdout(rounded<A>(dout)), gdout_s(rounded<A>(dout_s)), ginp(rounded<A>(inp)),
      gw(rounded<A>(w)), dinp0(size_t(N) * IC), dinp1(size_t(N) * IC);
  const std::vector<float> start(size_t(OC) * IC, 0.5f);
  DeviceArray<float> dw0(start), dw1(start);
  L.linear_backward(dinp0.ptr, dw0.ptr, nullptr, gdout_s.ptr, ginp.ptr, gw.ptr, N, IC, OC);
  L.lm_head_backward(dinp1.ptr, dw1.ptr, gdout.ptr, ginp.ptr, gw.ptr, s, N, IC, OC);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> a = widened(dinp0.download()), b = widened(dinp1.download());
  const double u = std::is_same_v<A, float> ? 1e-6 : std::is_same_v<A, bf16_t> ? 0x1p-8 : 0x1p-11;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(b[i], a[i], u * (std::fabs(a[i]) + 1e-3)) << "dinp " << i;
  const std::vector<float> c = dw0.download(), d = dw1.download();
  for (size_t i = 0; i < c.size(); ++i)
    ASSERT_NEAR(d[i], c[i], 1e-5 * (std::fabs(c[i]) + 1.0)) << i;
}

using precision_test::HeadRun;

// The GPT of precision_test::run_head on the GPU or the CPU.
template <class A>
HeadRun run_gpt(int V, DType precision, bool on_gpu, bool training, float dloss) {
  return precision_test::run_head<A>(V, precision, training, dloss,
                                     on_gpu ? cuda::device_allocator() : DeviceAllocator{},
                                     on_gpu ? cuda_layer_ops<float>() : cpu_layer_ops(), dloss);
}

double relative_l2(const float* a, const float* b, size_t n) {
  double d = 0, m = 0;
  for (size_t i = 0; i < n; ++i) d += double(a[i] - b[i]) * (a[i] - b[i]), m += double(b[i]) * b[i];
  return m > 0 ? std::sqrt(d / m) : std::sqrt(d);
}

// The GPU's padded, possibly fused GPT against the CPU's unpadded one: every parameter's real
// elements (gradients within grad_tol relative L2 per tensor, the loss within loss_tol relative),
// and the padding exactly 0 (wte's rows past V, their gradient, the dlogits past V).
// dloss: 1 / 64 (the mean over the tokens), or 1 for fp16, as a loss scale would: the CPU's
// reference rounds (softmax - onehot) dloss to fp16, and at 1 / 64 most of it is subnormal there.
template <class A>
void check_gpt(int V, DType precision, bool training, double loss_tol, double grad_tol) {
  const std::string where = std::string(precision_name(precision)) + " V=" + std::to_string(V) +
                            (training ? " training (fused)" : " evaluation (separate)");
  const float dloss = precision == DType::f16 ? 1.0f : 1.0f / 64;
  const HeadRun gpu = run_gpt<A>(V, precision, true, training, dloss);
  const HeadRun cpu = run_gpt<A>(V, precision, false, training, dloss);
  EXPECT_EQ(cpu.Vl, V) << where;
  EXPECT_EQ(gpu.Vl, round_up(V, 128)) << where;
  std::printf("%s: loss gpu %.7f cpu %.7f\n", where.c_str(), gpu.loss, cpu.loss);
  EXPECT_NEAR(gpu.loss, cpu.loss, loss_tol * cpu.loss) << where;
  for (const ParamInfo& p : cpu.registry.params()) {
    const ParamInfo& q = gpu.registry.at(p.name);
    EXPECT_EQ(q.global_shape, p.global_shape) << where << " " << p.name;
    ASSERT_EQ(q.real_numel(), p.numel) << where << " " << p.name;
    const double e = relative_l2(&gpu.grads[q.offset], &cpu.grads[p.offset], p.numel);
    EXPECT_LT(e, grad_tol) << where << " gradient of " << p.name;
    for (size_t i = q.real_numel(); i < q.numel; ++i) {
      ASSERT_EQ(gpu.params[q.offset + i], 0.0f) << where << " " << p.name << " padding " << i;
      ASSERT_EQ(gpu.grads[q.offset + i], 0.0f)
          << where << " gradient of " << p.name << " padding element " << i;
    }
  }
  ASSERT_EQ(gpu.padding_dlogits.size(), size_t(64) * size_t(gpu.Vl - V)) << where;
  for (size_t i = 0; i < gpu.padding_dlogits.size(); ++i)
    ASSERT_EQ(gpu.padding_dlogits[i], 0.0f) << where << " padding dlogit " << i << " not +0";
}

// fp32: 1e-4 relative (device summation order, no TF32). bf16/fp16 against the CPU's 16-bit
// tables (the same roundings, other fp32 orders): the loss within the format's unit roundoff u, the
// gradients within 8u relative L2 (tests/test_cuda_precision.cpp's bounds).
const int kVocabularies[] = {5, 257, 50257};

}  // namespace

TEST(CudaClassifierGpt, Fp32PaddedLmHeadMatchesTheCpu) {
  SKIP_WITHOUT_DEVICE();
  for (int V : kVocabularies)
    for (bool training : {true, false}) check_gpt<float>(V, DType::f32, training, 1e-4, 1e-4);
}

TEST(CudaClassifierGpt, Bf16PaddedLmHeadMatchesTheCpu) {
  SKIP_WITHOUT_DEVICE();
  for (int V : kVocabularies)
    for (bool training : {true, false})
      check_gpt<bf16_t>(V, DType::bf16, training, 0x1p-9, 8 * 0x1p-9);
}

TEST(CudaClassifierGpt, Fp16PaddedLmHeadMatchesTheCpu) {
  SKIP_WITHOUT_DEVICE();
  for (int V : kVocabularies)
    for (bool training : {true, false})
      check_gpt<fp16_t>(V, DType::f16, training, 0x1p-12, 8 * 0x1p-12);
}

// Training (fused) and evaluation (separate kernels) forwards give the same loss bits, and the
// same gradient bits: the fused kernel writes crossentropy_padded_backward's (softmax - onehot)
// dloss, rounded once to the format after the scale (at dloss 1 / 64 much of fp16's would be
// subnormal or zero if rounded before it).
template <class A>
void check_fused_and_separate(DType precision) {
  for (int V : kVocabularies) {
    const std::string where = std::string(precision_name(precision)) + " V=" + std::to_string(V);
    const HeadRun fused = run_gpt<A>(V, precision, true, true, 1.0f / 64);
    const HeadRun separate = run_gpt<A>(V, precision, true, false, 1.0f / 64);
    EXPECT_TRUE(same_bits(fused.loss, separate.loss))
        << where << " " << fused.loss << " vs " << separate.loss;
    ASSERT_EQ(fused.grads.size(), separate.grads.size());
    size_t differ = 0;
    for (size_t i = 0; i < fused.grads.size(); ++i)
      differ += !same_bits(fused.grads[i], separate.grads[i]);
    EXPECT_EQ(differ, 0u) << where << ": gradient elements not bitwise equal";
  }
}

TEST(CudaClassifierGpt, FusedAndSeparateAgree) {
  SKIP_WITHOUT_DEVICE();
  check_fused_and_separate<float>(DType::f32);
  check_fused_and_separate<bf16_t>(DType::bf16);
  check_fused_and_separate<fp16_t>(DType::f16);
}
