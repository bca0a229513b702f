// --precision bf16|fp16 on the GPU: the CUDA tables' weight rounding is the host's (round to
// nearest even, fp16 overflowing to infinity) bit for bit, and the GPT in 16-bit storage on the GPU
// against the same GPT in the CPU's 16-bit tables: both round every layer output to the format,
// they differ only in fp32 summation order, so the loss agrees within the format's rounding error
// (bf16 2^-9, fp16 2^-12 relative) and the fp32 gradients within eight times it (relative L2);
// AlexNet and ResNet in 16 bits within the format's own distance from fp32 (check_cnns).
// Skips (GTEST_SKIP) on a machine with no device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "layers/cuda/attention_mma.cuh"
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

namespace {

template <class A>
void check_round_weights() {
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f,
                          1.0f + 0x1p-8f,
                          1.0f + 3 * 0x1p-8f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          -1e6f,
                          0x1p-24f,
                          0x1p-26f,
                          1e30f,
                          -3.5e-3f,
                          std::numeric_limits<float>::infinity(),
                          std::nanf("")};
  for (int i = 0; i < 1000; ++i) x.push_back(std::ldexp(std::sin(float(i) * 0.37f), i % 40 - 20));
  std::vector<A> want(x.size());
  round_to(want.data(), x.data(), x.size());
  DeviceArray<float> src(x);
  DeviceArray<A> dst(x.size());
  cuda_layer_ops<A>().round_weights(dst.ptr, src.ptr, x.size());
  const std::vector<A> got = dst.download();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {  // a NaN, whatever its payload (CUDA's and Eigen's differ)
      float back = 0;
      widen(&back, &got[i], 1);
      EXPECT_TRUE(std::isnan(back)) << "NaN at " << i << " became bits " << got[i].bits;
    } else {
      EXPECT_EQ(got[i].bits, want[i].bits) << x[i] << " at " << i;
    }
  }
}

using precision_test::GptRun;
using precision_test::relative_l2;

GptRun run_gpt(DType precision, bool on_gpu) {
  return precision_test::run_gpt({2, 4, 128, 32, 256}, 4, 32, precision, 1.0f / (4 * 32),
                                 on_gpu ? cuda::device_allocator() : DeviceAllocator{},
                                 on_gpu ? cuda_layer_ops<float>() : cpu_layer_ops());
}

// Through the attention the GPU runs (the tensor-core kernels, which round the probabilities and
// their gradients to the format inside) and through the reference kernels (which round only the
// outputs, as the CPU's 16-bit table does); both within the bound, each printed, so a failure says
// which.
void check_gpt(DType precision, double u) {
  const GptRun cpu = run_gpt(precision, false);
  for (const bool reference : {false, true}) {
    const bool before = cuda::detail::reference_attention_forced();
    cuda::detail::force_reference_attention(reference);
    const GptRun gpu = run_gpt(precision, true);
    cuda::detail::force_reference_attention(before);
    const double e = relative_l2(gpu.grads, cpu.grads);
    std::printf("%s, %s attention: loss gpu %.7f cpu %.7f; gradient relative L2 %.2e\n",
                precision_name(precision), reference ? "reference" : "tensor-core", gpu.loss,
                cpu.loss, e);
    EXPECT_NEAR(gpu.loss, cpu.loss, u * cpu.loss) << (reference ? "reference" : "tensor-core");
    EXPECT_LT(e, 8 * u) << (reference ? "reference" : "tensor-core") << " attention";
  }
}

// The CNNs on the GPU in 16 bits against the CPU's 16-bit tables (cuDNN's sums in another order,
// its weight gradient rounded once to the format before the fp32 sum). Batch norm over groups of
// 4 magnifies any rounding difference by a step-dependent amount (16-bit against fp32 on the CPU:
// 2-20% of a conv weight's gradient, relative L2), so the bound is the format's own: the GPU's
// 16-bit run is closer to the CPU's 16-bit run than that run is to fp32 (loss: or within one
// rounding error).
void check_cnns(DType precision, double u) {
  for (const char* type : {"alexnet", "resnet"}) {
    const GptRun gpu = precision_test::run_cnn(type, 8, precision, cuda::device_allocator(),
                                               cuda_layer_ops<float>());
    const GptRun cpu =
        precision_test::run_cnn(type, 8, precision, DeviceAllocator{}, cpu_layer_ops());
    const GptRun f32 =
        precision_test::run_cnn(type, 8, DType::f32, DeviceAllocator{}, cpu_layer_ops());
    const double e = relative_l2(gpu.grads, cpu.grads),
                 e_format = relative_l2(cpu.grads, f32.grads);
    std::printf(
        "%s %s: loss gpu %.7f cpu %.7f (fp32 %.7f); gradient relative L2 %.2e (the "
        "format's %.2e)\n",
        type, precision_name(precision), gpu.loss, cpu.loss, f32.loss, e, e_format);
    EXPECT_NEAR(gpu.loss, cpu.loss, std::max(u * cpu.loss, std::abs(cpu.loss - f32.loss))) << type;
    EXPECT_LT(e, e_format) << type;
  }
}

}  // namespace

TEST(CudaPrecision, Bf16WeightRoundingIsTheHostsBitForBit) {
  SKIP_WITHOUT_DEVICE();
  check_round_weights<bf16_t>();
}
TEST(CudaPrecision, Fp16WeightRoundingIsTheHostsBitForBit) {
  SKIP_WITHOUT_DEVICE();
  check_round_weights<fp16_t>();
}
TEST(CudaPrecision, Bf16GptMatchesTheCpusBf16Gpt) {
  SKIP_WITHOUT_DEVICE();
  check_gpt(DType::bf16, 0x1p-9);
}
TEST(CudaPrecision, Fp16GptMatchesTheCpusFp16Gpt) {
  SKIP_WITHOUT_DEVICE();
  check_gpt(DType::f16, 0x1p-12);
}
#ifdef MPITRON_HAVE_CUDNN
TEST(CudaPrecision, Bf16CnnsMatchTheCpusBf16Cnns) {
  SKIP_WITHOUT_DEVICE();
  check_cnns(DType::bf16, 0x1p-9);
}
TEST(CudaPrecision, Fp16CnnsMatchTheCpusFp16Cnns) {
  SKIP_WITHOUT_DEVICE();
  check_cnns(DType::f16, 0x1p-12);
}
#endif
