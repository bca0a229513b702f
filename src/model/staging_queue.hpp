// Copies between host staging buffers and a device's memory that overlap the host's own work (the
// offloaded update, the rounded master weights' upload): queued in order on a copy stream of their
// own, each after everything the compute stream has queued so far, each returning a ticket;
// wait(ticket) returns when that copy and every one queued before it are done. The staging buffers
// come from pinned_allocator(): page-locked host memory on a GPU, so the copies run at the bus's
// speed without the host's involvement. On cpu-staged a copy runs only when a wait reaches it, as
// late as a GPU's may: a host buffer read before its download's wait, or rewritten before its
// upload's, gives wrong bits there, so the CPU's tests catch a missing wait.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>

#include "base/allocator.hpp"
#include "base/device.hpp"

namespace mpitron {

namespace cuda {
struct CopyStream;
}

class StagingQueue {
 public:
  explicit StagingQueue(Device device);  // the CPU: copies at once (nothing to overlap)
  // Waits for a GPU's queued copies; cpu-staged drops unrun ones (left only by an error, their
  // buffers may be gone).
  ~StagingQueue();
  StagingQueue(const StagingQueue&) = delete;
  StagingQueue& operator=(const StagingQueue&) = delete;

  uint64_t download(void* host_dst, const void* src, size_t bytes);
  uint64_t upload(void* dst, const void* host_src, size_t bytes);
  void wait(uint64_t ticket);
  void wait_all();
  // Where staging buffers come from (named "pinned host"; the CPU's memory off the GPU).
  DeviceAllocator pinned_allocator() const;

 private:
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  Device device_;
  uint64_t queued_ = 0, done_ = 0;  // tickets handed out and waited for (cpu-staged)
  std::deque<Copy> pending_;        // cpu-staged: queued, not yet run
  cuda::CopyStream* stream_ = nullptr;
  cuda::CopyStream* cuda_stream();
};

}  // namespace mpitron
