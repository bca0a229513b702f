// The staging queue off a GPU: on cpu-staged a copy runs only when a wait reaches it, in queue
// order (so the CPU's tests see what a missing wait does on a GPU); on the CPU at once. And
// cpu-staged's device memory: addresses the host cannot use, which its layer table, step ops and
// staging copies turn into the real pages; host code touching them dies naming it.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "base/staged_memory.hpp"
#include "layers/linear.hpp"
#include "src/model/layer_ops.hpp"
#include "src/model/staging_queue.hpp"
#include "src/train/step_backend.hpp"

using namespace mpitron;

TEST(StagingQueue, CpuStagedCopiesRunWhenAWaitReachesThemInOrder) {
  StagingQueue q(Device::cpu_staged);
  std::vector<float> device = {1, 2, 3, 4}, host(4, 0.0f), up = {10, 20};
  const uint64_t down = q.download(host.data(), device.data(), 4 * sizeof(float));
  const uint64_t first_up = q.upload(device.data(), up.data(), 2 * sizeof(float));
  up[0] = 30;  // rewritten before its upload's wait: the device gets the new value
  const uint64_t second_up = q.upload(device.data() + 2, up.data(), 2 * sizeof(float));
  EXPECT_LT(down, first_up);
  EXPECT_LT(first_up, second_up);
  EXPECT_EQ(host, std::vector<float>(4, 0.0f)) << "a download ran before its wait";
  q.wait(down);
  EXPECT_EQ(host, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(device, (std::vector<float>{1, 2, 3, 4})) << "a wait ran copies queued after it";
  q.wait(first_up);
  EXPECT_EQ(device, (std::vector<float>{30, 20, 3, 4}));
  q.wait_all();
  EXPECT_EQ(device, (std::vector<float>{30, 20, 30, 20}));
  q.wait(down);  // an old ticket: nothing left to run
  EXPECT_DEATH(q.wait(second_up + 1), "a staging ticket not handed out");
}

TEST(StagingQueue, CpuCopiesAtOnce) {
  StagingQueue q(Device::cpu);
  std::vector<float> a = {1, 2}, b(2, 0.0f);
  q.upload(b.data(), a.data(), 2 * sizeof(float));
  EXPECT_EQ(b, a);
  EXPECT_EQ(q.pinned_allocator().device, "pinned host");
}

TEST(StagingQueue, CpuStagedPinnedAllocatorIsCountedHostMemory) {
  StagingQueue q(Device::cpu_staged);
  DeviceAllocator pinned = q.pinned_allocator();
  {
    Buffer<float> b(pinned, 1000);
    EXPECT_EQ(pinned.current_bytes, 4000u);
    b[999] = 1.0f;  // host memory, readable
  }
  EXPECT_EQ(pinned.current_bytes, 0u);
  EXPECT_EQ(pinned.peak_bytes, 4000u);
}

TEST(StagedMemory, DeviceAddressesAreNotTheRealPagesAndComeBackZeroed) {
  float* a = static_cast<float*>(staged_memory::allocate(100 * sizeof(float)));
  float* b = static_cast<float*>(staged_memory::allocate(5000 * sizeof(float)));
  const staged_memory::Range r = staged_memory::device_range();
  for (float* p : {a, b}) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    EXPECT_TRUE(at >= r.begin && at < r.end);
    EXPECT_NE(staged_memory::real(p), p);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
  }
  EXPECT_GE(reinterpret_cast<uintptr_t>(b) - reinterpret_cast<uintptr_t>(a), 4096u);
  std::vector<float> host(3, 1.0f);
  EXPECT_EQ(staged_memory::real(host.data()), host.data()) << "a host pointer moved";
  EXPECT_EQ(staged_memory::real(static_cast<float*>(nullptr)), nullptr);
  for (int i = 0; i < 100; ++i) staged_memory::real(a)[i] = float(i);
  EXPECT_EQ(staged_memory::real(a)[99], 99.0f);
  staged_memory::release(a);
  float* again = static_cast<float*>(staged_memory::allocate(100 * sizeof(float)));
  EXPECT_EQ(again, a) << "the freed pages first";
  for (int i = 0; i < 100; ++i) ASSERT_EQ(staged_memory::real(again)[i], 0.0f) << i;
  staged_memory::release(again);
  staged_memory::release(b);
}

TEST(StagedMemoryDeathTest, TheHostTouchingADeviceBufferDiesNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        volatile float* p = static_cast<float*>(staged_memory::allocate(64));
        p[3] = 1.0f;
      },
      "read or wrote device memory at offset [0-9]+ of the device arena, outside a device call");
}

// The cpu-staged layer table and step ops on device addresses: the CPU's results, through uploads
// and downloads; the staging queue's copies reach the real pages.
TEST(StagedMemory, DeviceCallsComputeOnTheRealPages) {
  const LayerOps& L = layer_ops<float>(Device::cpu_staged);
  const StepBackend& ops = step_backend(Device::cpu_staged);
  const int N = 3, IC = 4, OC = 2;
  std::vector<float> x(N * IC), w(OC * IC), want(N * OC), got(N * OC, -1.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 0.5f - 1.0f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(i % 3) - 0.75f;
  cpu::linear_forward(want.data(), x.data(), w.data(), static_cast<const float*>(nullptr), N, IC,
                      OC);
  auto device = [](size_t n) { return static_cast<float*>(staged_memory::allocate(n * 4)); };
  float *dx = device(x.size()), *dw = device(w.size()), *dy = device(got.size());
  L.upload(dx, x.data(), x.size());
  ops.upload(dw, w.data(), w.size());
  L.linear_forward(dy, dx, dw, nullptr, N, IC, OC);
  L.download(got.data(), dy, got.size());
  EXPECT_EQ(got, want);
  double sq = 0;
  for (float v : want) sq += double(v) * v;
  EXPECT_DOUBLE_EQ(ops.sum_of_squares(dy, want.size()), sq);
  std::vector<float> back(x.size(), 0.0f);
  StagingQueue q(Device::cpu_staged);
  q.wait(q.download(back.data(), dx, x.size() * sizeof(float)));
  EXPECT_EQ(back, x);
  for (float* p : {dx, dw, dy}) staged_memory::release(p);
}
