// Nothing allocates inside a training step: forward, backward, gradient norm and AdamW run over
// buffers planned when the model was built. Counts every malloc of the process (glibc's
// allocator, interposed here) across steps after a warm-up step. One compute thread, as under
// MPI: OpenBLAS's multi-threaded GEMM driver mallocs a small job table per call by itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <vector>

#include "base/gemm.hpp"
#include "src/cpu/adamw.hpp"
#include "src/cpu/step_ops.hpp"
#include "src/model/family.hpp"
#include "src/model/gpt.hpp"
#include "src/train/adamw.hpp"
#include "src/train/grad_sync.hpp"
#include "src/train/step_backend.hpp"

#if defined(__SANITIZE_ADDRESS__)  // GCC's ASan; clang says __has_feature(address_sanitizer)
#define MPITRON_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MPITRON_UNDER_ASAN 1
#endif
#endif
#if defined(MPITRON_UNDER_ASAN)  // ASan owns malloc: no counting hooks beside it
#define MPITRON_COUNT_MALLOC 0
#else
#define MPITRON_COUNT_MALLOC 1
#endif

#if MPITRON_COUNT_MALLOC
namespace {
std::atomic<long> g_mallocs{0};
}
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void* malloc(size_t n) {
  g_mallocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t s) {
  g_mallocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(n, s);
}
void* realloc(void* p, size_t n) {
  g_mallocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(p, n);
}
void* aligned_alloc(size_t a, size_t n) {
  g_mallocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(a, n);
}
int posix_memalign(void** p, size_t a, size_t n) {
  g_mallocs.fetch_add(1, std::memory_order_relaxed);
  *p = __libc_memalign(a, n);
  return *p ? 0 : 12;
}
}
#endif

using namespace mpitron;

#if MPITRON_COUNT_MALLOC
namespace {

// After the first step nothing allocates, in any storage precision (the 16-bit CPU tables' float
// copies come from per-thread pools grown in the first step) and with either optimizer.
void check_training_step_allocates_nothing(DType precision,
                                           Optimizer optimizer = Optimizer::adamw) {
  cpu::set_compute_threads(1);
  const int B = 4, T = 32;
  DeviceAllocator alloc;
  ModelBuild how;
  how.micro_rows = B;
  how.seq_len = T;
  how.seed = 1;
  how.alloc = &alloc;
  how.precision = precision;
  if (optimizer == Optimizer::adamw8bit) how.flat_align = kAdamW8bitBlock;
  std::unique_ptr<Model> m = build_model(default_model_config("gpt"), how);  // gpt-tiny's shape
  GradStorage grads = GradStorage::full(*m, alloc);
  std::vector<int32_t> tokens(B * (T + 1));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919) % 256);
  Buffer<float> mom(alloc, m->flat_size), vel(alloc, m->flat_size);
  Buffer<uint8_t> m_codes(alloc, m->flat_size), v_codes(alloc, m->flat_size);
  Buffer<float> m_absmax(alloc, m->flat_size / kAdamW8bitBlock),
      v_absmax(alloc, m->flat_size / kAdamW8bitBlock);
  const std::vector<AdamWTensor> tensors = adamw_tensors(m->registry);
  auto step = [&](int64_t s) {
    MicroBatch mb;
    mb.samples = {tokens.data(), nullptr, nullptr, B};
    mb.step = s;
    mb.dropout = 0.1f;
    mb.seed = 1;
    cpu::zero(grads.data.data(), grads.data.size());
    m->forward(mb);
    m->backward(mb, 1.0f / (B * T), {});
    const double norm = std::sqrt(cpu::sum_of_squares(grads.data.data(), m->flat_size));
    const float scale = float(1.0 / std::max(1.0, norm));
    if (optimizer == Optimizer::adamw8bit)
      cpu::adamw8bit_update(tensors,
                            {0, m->flat_size, m->params.data(), 0, grads.data.data(), 0,
                             m_codes.data(), v_codes.data(), m_absmax.data(), v_absmax.data(), 0},
                            AdamWConfig{}, 1e-3, scale, s);
    else
      cpu::adamw_update(
          tensors,
          {0, m->flat_size, m->params.data(), 0, grads.data.data(), 0, mom.data(), vel.data(), 0},
          AdamWConfig{}, 1e-3, scale, s);
    m->parameters_changed();
  };
  step(1);  // first touch: thread pools and library buffers come up here
  const long mallocs_before = g_mallocs.load();
  const size_t buffers_before = alloc.allocations;
  for (int s = 2; s <= 4; ++s) step(s);
  EXPECT_EQ(g_mallocs.load() - mallocs_before, 0) << "heap allocations inside training steps";
  EXPECT_EQ(alloc.allocations, buffers_before);
  EXPECT_GT(mallocs_before, 0) << "the malloc counter is not wired";
}

}  // namespace
#endif

TEST(NoAllocation, TrainingStepAllocatesNothing) {
#if !MPITRON_COUNT_MALLOC
  GTEST_SKIP() << "malloc cannot be interposed under AddressSanitizer";
#else
  check_training_step_allocates_nothing(DType::f32);
#endif
}

TEST(NoAllocation, AdamW8bitTrainingStepAllocatesNothing) {
#if !MPITRON_COUNT_MALLOC
  GTEST_SKIP() << "malloc cannot be interposed under AddressSanitizer";
#else
  check_training_step_allocates_nothing(DType::f32, Optimizer::adamw8bit);
#endif
}

TEST(NoAllocation, Bf16TrainingStepAllocatesNothing) {
#if !MPITRON_COUNT_MALLOC
  GTEST_SKIP() << "malloc cannot be interposed under AddressSanitizer";
#else
  check_training_step_allocates_nothing(DType::bf16);
#endif
}
