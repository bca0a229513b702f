// The CUDA step ops against their CPU twins on random data: zero and copy exactly, the gradient
// norm within 1e-12 and bitwise repeatable, AdamW over cut shards bit for bit with its bf16/f16
// weights copy equal to the rounded fp32 result, the one-launch AdamW equal to one launch per
// parameter bit for bit, the staging queue's overlapped copies. Skips (GTEST_SKIP) on a machine
// with no device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/cuda_check.hpp"
#include "src/cpu/adamw.hpp"
#include "src/cpu/step_ops.hpp"
#include "src/cuda/adamw.cuh"
#include "src/cuda/step_ops.cuh"
#include "src/model/staging_queue.hpp"
#include "src/train/step_backend.hpp"
#include "tests/cuda_test_support.hpp"

using namespace mpitron;
using cuda_test::DeviceArray;
using cuda_test::Stream;

namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist;
  std::vector<float> x(n);
  for (auto& e : x) e = dist(gen);
  return x;
}

uint64_t bits(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

uint16_t bits16(const void* p) {
  uint16_t b;
  std::memcpy(&b, p, sizeof b);
  return b;
}

}  // namespace

TEST(CudaStepOps, ZeroAndCopyAreExact) {
  SKIP_WITHOUT_DEVICE();
  Stream stream;
  const size_t n = 100003;
  const std::vector<float> a = random_floats(n, 1), b = random_floats(n, 2);
  DeviceArray<float> da(a), db(b);
  // Interior ranges, so writes past either end would show.
  cuda::zero(da.ptr + 5, n - 12, stream.s);
  cuda::copy(db.ptr + 3, da.ptr + 1, n - 9, stream.s);
  cuda::zero(da.ptr, 0, stream.s);  // empty ranges are no-ops
  cuda::copy(db.ptr, da.ptr, 0, stream.s);
  stream.sync();

  std::vector<float> ra = a, rb = b;
  cpu::zero(ra.data() + 5, n - 12);
  cpu::copy(rb.data() + 3, ra.data() + 1, n - 9);
  const std::vector<float> ga = da.download(), gb = db.download();
  EXPECT_EQ(std::memcmp(ga.data(), ra.data(), n * sizeof(float)), 0) << "zero";
  EXPECT_EQ(std::memcmp(gb.data(), rb.data(), n * sizeof(float)), 0) << "copy";
}

TEST(CudaStepOps, SumOfSquaresMatchesCpuAndRepeatsBitwise) {
  SKIP_WITHOUT_DEVICE();
  Stream stream;
  for (size_t n : {0ul, 1ul, 63ul, 64ul, 65ul, 1000ul, 123457ul, (1ul << 22) + 7}) {
    const std::vector<float> g = random_floats(n, uint32_t(n) + 11);
    DeviceArray<float> dg(g);
    const double ref = cpu::sum_of_squares(g.data(), n);
    const double first = cuda::sum_of_squares(dg.ptr, n, stream.s);
    EXPECT_NEAR(first, ref, 1e-12 * std::max(1.0, std::abs(ref))) << "n=" << n;
    for (int call = 0; call < 2; ++call)
      EXPECT_EQ(bits(cuda::sum_of_squares(dg.ptr, n, stream.s)), bits(first))
          << "not bitwise repeatable, n=" << n;
    // The default stream too (the partials buffer is per thread, not per stream).
    EXPECT_EQ(bits(cuda::sum_of_squares(dg.ptr, n, nullptr)), bits(first)) << "n=" << n;
  }
}

TEST(CudaStepOps, AdamWMatchesCpuOverCutShardsWithLowPrecisionCopies) {
  SKIP_WITHOUT_DEVICE();
  Stream stream;
  ParamRegistry reg;
  reg.add("w", {37, 29}, InitKind::normal, 0.02f, true);  // matrix: decayed
  reg.add("b", {29}, InitKind::zeros, 0, false);          // bias: not decayed
  reg.add("e", {11, 13}, InitKind::normal, 0.02f, false);
  const size_t n = reg.size();
  // Shard boundaries inside "w" and inside "b" (as ZeRO cuts the flat allocation).
  const size_t cuts[] = {0, 500, reg.at("b").offset + 10, n};
  const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  const float grad_scale = 0.5f;

  std::vector<float> p(n, 0.f), m(n, 0.f), v(n, 0.f);
  reg.initialize(p.data(), 7);
  // Three device runs of the same steps: fp32, with a bf16 copy, with an f16 copy.
  DeviceArray<float> p32(p), m32(m), v32(v), pb(p), mb(m), vb(v), ph(p), mh(m), vh(v);
  DeviceArray<float> dg(n);
  DeviceArray<__nv_bfloat16> wb(n);
  DeviceArray<__half> wh(n);
  CUDA_CHECK(cudaMemset(wb.ptr, 0, n * sizeof(__nv_bfloat16)));
  CUDA_CHECK(cudaMemset(wh.ptr, 0, n * sizeof(__half)));

  const std::vector<AdamWTensor> tensors = adamw_tensors(reg);
  for (int64_t t = 1; t <= 5; ++t) {
    const std::vector<float> g = random_floats(n, uint32_t(100 + t));
    dg.upload(g);
    const double lr = 1e-3 * double(t);
    for (int k = 0; k < 3; ++k) {
      const size_t b = cuts[k], e = cuts[k + 1];
      // Moments of each shard start at its first element (m_offset = b), grads at 0.
      cpu::adamw_update(tensors, {b, e, p.data(), 0, g.data(), 0, m.data() + b, v.data() + b, b},
                        cfg, lr, grad_scale, t);
      cuda::adamw_update(tensors.data(), tensors.size(),
                         {b, e, p32.ptr, 0, dg.ptr, 0, m32.ptr + b, v32.ptr + b, b}, cfg, lr,
                         grad_scale, t, stream.s);
      cuda::adamw_update(
          tensors.data(), tensors.size(),
          {b, e, pb.ptr, 0, dg.ptr, 0, mb.ptr + b, vb.ptr + b, b, wb.ptr, DType::bf16}, cfg, lr,
          grad_scale, t, stream.s);
      cuda::adamw_update(
          tensors.data(), tensors.size(),
          {b, e, ph.ptr, 0, dg.ptr, 0, mh.ptr + b, vh.ptr + b, b, wh.ptr, DType::f16}, cfg, lr,
          grad_scale, t, stream.s);
    }
    stream.sync();  // dg is overwritten next step
  }

  // fp32 run against the CPU, bit for bit: the kernel is cpu::adamw_update's folded arithmetic
  // with AdamWStep's constants, every operation correctly rounded as the CPU file (built without
  // contraction) rounds it. Each array's count of differing elements and the worst relative
  // difference are printed, so a failure says how far off it is.
  const std::vector<float> gp = p32.download(), gm = m32.download(), gv = v32.download();
  const struct {
    const char* name;
    const std::vector<float>&gpu, &cpu;
  } arrays[] = {{"weights", gp, p}, {"m", gm, m}, {"v", gv, v}};
  for (const auto& a : arrays) {
    size_t differ = 0, first = 0;
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
      if (std::memcmp(&a.gpu[i], &a.cpu[i], sizeof(float)) != 0 && differ++ == 0) first = i;
      const double ref = a.cpu[i];
      worst = std::max(worst, std::abs(a.gpu[i] - ref) / std::max(std::abs(ref), 1e-30));
    }
    std::printf("adamw %s: %zu of %zu differ from the CPU's bits, worst relative difference %.3g\n",
                a.name, differ, n, worst);
    EXPECT_EQ(differ, 0u) << a.name << ", first at " << first << ": gpu " << a.gpu[first] << " cpu "
                          << a.cpu[first];
  }

  // The weights copy changes nothing in the fp32 math: masters and moments as in the fp32 run.
  const std::pair<const DeviceArray<float>*, const std::vector<float>*> same[] = {
      {&pb, &gp}, {&mb, &gm}, {&vb, &gv}, {&ph, &gp}, {&mh, &gm}, {&vh, &gv}};
  for (const auto& [device, expected] : same)
    EXPECT_EQ(std::memcmp(device->download().data(), expected->data(), n * sizeof(float)), 0);

  // Each copy is its type's round-to-nearest of the fp32 result, inside every parameter.
  const std::vector<__nv_bfloat16> cb = wb.download();
  const std::vector<__half> ch = wh.download();
  size_t bad_bf16 = 0, bad_f16 = 0;
  for (const ParamInfo& info : reg.params())
    for (size_t i = info.offset; i < info.offset + info.numel; ++i) {
      const __nv_bfloat16 eb = __float2bfloat16(gp[i]);
      const __half eh = __float2half(gp[i]);
      bad_bf16 += bits16(&cb[i]) != bits16(&eb);
      bad_f16 += bits16(&ch[i]) != bits16(&eh);
    }
  EXPECT_EQ(bad_bf16, 0u) << "bf16 copy elements differing from __float2bfloat16(fp32 result)";
  EXPECT_EQ(bad_f16, 0u) << "f16 copy elements differing from __float2half(fp32 result)";
}

// The one-launch AdamW against its reference, one launch per parameter: bit for bit in the
// masters, moments and the bf16 copy, over more parameters than one launch takes (two launches),
// decayed and not, shards cut inside parameters; the alignment gaps between parameters untouched.
TEST(CudaStepOps, MultiTensorAdamWEqualsPerTensorLaunchesBitForBit) {
  SKIP_WITHOUT_DEVICE();
  Stream stream;
  ParamRegistry reg;
  for (int i = 0; i < 203; ++i) {
    std::string name = "p";  // not "p" + to_string(i): GCC 12 warns falsely (-Wrestrict) there
    name += std::to_string(i);
    reg.add(name, {int64_t(1 + (i * 37) % 53)}, InitKind::normal, 0.02f, i % 3 == 0);
  }
  const size_t n = reg.size();
  const size_t cuts[] = {0, reg.at("p7").offset + 3, reg.at("p170").offset + 1, n};
  const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  const float kGap = -7.0f;  // what every element outside a parameter holds, before and after
  std::vector<float> p(n, kGap), m(n, kGap), v(n, kGap);
  std::vector<float> init(n, 0.0f);
  reg.initialize(init.data(), 7);
  for (const ParamInfo& info : reg.params())
    for (size_t i = info.offset; i < info.offset + info.numel; ++i) p[i] = init[i], m[i] = v[i] = 0;
  DeviceArray<float> p1(p), m1(m), v1(v), p2(p), m2(m), v2(v), dg(n);
  DeviceArray<__nv_bfloat16> w1(n), w2(n);
  CUDA_CHECK(cudaMemset(w1.ptr, 0xff, n * sizeof(__nv_bfloat16)));
  CUDA_CHECK(cudaMemset(w2.ptr, 0xff, n * sizeof(__nv_bfloat16)));
  const std::vector<AdamWTensor> tensors = adamw_tensors(reg);
  for (int64_t t = 1; t <= 3; ++t) {
    dg.upload(random_floats(n, uint32_t(300 + t)));
    for (int k = 0; k < 3; ++k) {
      const size_t b = cuts[k], e = cuts[k + 1];
      cuda::adamw_update(
          tensors.data(), tensors.size(),
          {b, e, p1.ptr, 0, dg.ptr, 0, m1.ptr + b, v1.ptr + b, b, w1.ptr, DType::bf16}, cfg, 1e-3,
          0.5f, t, stream.s);
      cuda::adamw_update_per_tensor(
          tensors.data(), tensors.size(),
          {b, e, p2.ptr, 0, dg.ptr, 0, m2.ptr + b, v2.ptr + b, b, w2.ptr, DType::bf16}, cfg, 1e-3,
          0.5f, t, stream.s);
    }
    stream.sync();
  }
  const std::pair<const DeviceArray<float>*, const DeviceArray<float>*> pairs[] = {
      {&p1, &p2}, {&m1, &m2}, {&v1, &v2}};
  for (const auto& [a, b] : pairs)
    EXPECT_EQ(std::memcmp(a->download().data(), b->download().data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(w1.download().data(), w2.download().data(), n * sizeof(__nv_bfloat16)), 0);
  const std::vector<float> got = p1.download();
  size_t gaps = 0;
  std::vector<bool> inside(n, false);
  for (const ParamInfo& info : reg.params())
    for (size_t i = info.offset; i < info.offset + info.numel; ++i) inside[i] = true;
  for (size_t i = 0; i < n; ++i)
    if (!inside[i]) {
      ++gaps;
      EXPECT_EQ(got[i], kGap) << "gap element " << i << " written";
    }
  EXPECT_GT(gaps, 0u);
}

// 8-bit AdamW on the device (through the CUDA StepBackend, as the trainer calls it) against
// cpu::adamw8bit_update: parameters, codes and absmax values bit for bit over four steps, in two
// ZeRO-like shards with their own state, with 400 parameters (each shard overlaps more than the
// 160 tensors a launch takes, so its launches cut between blocks that share a parameter), a block
// of zero gradients (absmax 0: the maps' codes of 0) and a padding block past the last parameter
// (its moments requantized, nothing updated).
TEST(CudaStepOps, AdamW8bitMatchesTheCpuBitForBit) {
  SKIP_WITHOUT_DEVICE();
  ParamRegistry reg;
  for (int i = 0; i < 400; ++i) {
    std::string name(1, 't');
    name += std::to_string(i);
    reg.add(name, {int64_t(37 + (i * 29) % 97)}, InitKind::normal, 0.02f, i % 3 != 0);
  }
  const size_t B = kAdamW8bitBlock, n = (reg.size() + B - 1) / B * B + B;
  const size_t cut = n / B / 2 * B;
  std::vector<float> p(n, 0.f);
  reg.initialize(p.data(), 3);
  std::vector<uint8_t> mc(n, cpu::quantize_nearest(cpu::signed_dynamic_map(), 0.f));
  std::vector<uint8_t> vc(n, cpu::quantize_nearest(cpu::unsigned_dynamic_map(), 0.f));
  std::vector<float> ma(n / B, 0.f), va(n / B, 0.f);
  DeviceArray<float> dp(p), dg(n), dma(ma), dva(va);
  DeviceArray<uint8_t> dmc(mc), dvc(vc);
  const std::vector<AdamWTensor> tensors = adamw_tensors(reg);
  const StepBackend& gpu = step_backend(Device::cuda);
  const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  for (int64_t t = 1; t <= 4; ++t) {
    std::vector<float> g = random_floats(n, uint32_t(300 + t));
    std::fill_n(g.begin(), B, 0.0f);  // block 0: zero moments throughout
    dg.upload(g);
    const double lr = 1e-3 * double(t);
    for (const auto& [b, e] : {std::pair{size_t(0), cut}, std::pair{cut, n}}) {
      cpu::adamw8bit_update(tensors,
                            {b, e, p.data(), 0, g.data(), 0, mc.data() + b, vc.data() + b,
                             ma.data() + b / B, va.data() + b / B, b},
                            cfg, lr, 0.5f, t);
      gpu.adamw8bit_update(tensors,
                           {b, e, dp.ptr, 0, dg.ptr, 0, dmc.ptr + b, dvc.ptr + b, dma.ptr + b / B,
                            dva.ptr + b / B, b},
                           cfg, lr, 0.5f, t);
    }
    CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));  // dg is overwritten next step
  }
  EXPECT_EQ(std::memcmp(dp.download().data(), p.data(), n * sizeof(float)), 0) << "parameters";
  EXPECT_EQ(dmc.download(), mc) << "first-moment codes";
  EXPECT_EQ(dvc.download(), vc) << "second-moment codes";
  EXPECT_EQ(std::memcmp(dma.download().data(), ma.data(), ma.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(dva.download().data(), va.data(), va.size() * sizeof(float)), 0);
  EXPECT_EQ(ma[0], 0.0f) << "the zero-gradient block has moments";
  EXPECT_GT(ma[1], 0.0f);
}

// The offloaded update's copy pattern on the GPU's copy stream: a download queued after a kernel
// on the compute stream sees the kernel's result, chunk k + 1 comes down into one half of a pinned
// buffer while the host works on chunk k in the other, and every upload lands, over more chunks
// than the stream's ring of events.
TEST(CudaStepOps, StagingQueueOverlapsPinnedCopiesAfterTheComputeStream) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = size_t(1) << 18, chunks = 21;
  const std::vector<float> x = random_floats(n * chunks, 11);
  DeviceArray<float> a(x), b(n * chunks), c(n * chunks);
  StagingQueue q(Device::cuda);
  DeviceAllocator pinned = q.pinned_allocator();
  Buffer<float> stage(pinned, 2 * n);
  cudaPointerAttributes attr{};
  CUDA_CHECK(cudaPointerGetAttributes(&attr, stage.data()));
  EXPECT_EQ(attr.type, cudaMemoryTypeHost) << "staging is not page-locked";
  cuda::copy(b.ptr, a.ptr, n * chunks, cudaStreamPerThread);  // queued before the downloads
  uint64_t down[2] = {q.download(stage.data(), b.ptr, n * sizeof(float)), 0};
  for (size_t k = 0; k < chunks; ++k) {
    const size_t half = k % 2, next = (k + 1) % 2;
    if (k + 1 < chunks)
      down[next] = q.download(stage.data() + next * n, b.ptr + (k + 1) * n, n * sizeof(float));
    q.wait(down[half]);
    for (size_t i = 0; i < n; ++i) stage[half * n + i] *= 2.0f;
    q.upload(c.ptr + k * n, stage.data() + half * n, n * sizeof(float));
  }
  q.wait_all();
  q.wait(1);  // a ticket the ring no longer holds: long done
  const std::vector<float> got = c.download();
  size_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != 2.0f * x[i];
  EXPECT_EQ(wrong, 0u) << "elements not twice the compute stream's copy";
}
