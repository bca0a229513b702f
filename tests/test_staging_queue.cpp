// The staging queue off a GPU: on cpu-staged a copy runs only when a wait reaches it, in queue
// order (so the CPU's tests see what a missing wait does on a GPU); on the CPU at once.
#include <gtest/gtest.h>

#include <vector>

#include "src/model/staging_queue.hpp"

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
