#include "src/model/staging_queue.hpp"

#include <cstring>

#include "base/check.hpp"
#include "base/staged_memory.hpp"

#ifdef MPITRON_HAVE_CUDA
#include "src/cuda/device_memory.cuh"
#endif

namespace mpitron {

StagingQueue::StagingQueue(Device device) : device_(device) {}

#ifdef MPITRON_HAVE_CUDA
cuda::CopyStream* StagingQueue::cuda_stream() {
  if (!stream_) stream_ = cuda::copy_stream_open();  // at first use: on the rank's device
  return stream_;
}
#endif

StagingQueue::~StagingQueue() {
#ifdef MPITRON_HAVE_CUDA
  if (stream_) cuda::copy_stream_close(stream_);
#endif
}

uint64_t StagingQueue::download(void* host_dst, const void* src, size_t bytes) {
#ifdef MPITRON_HAVE_CUDA
  if (device_ == Device::cuda)
    return cuda::copy_stream_download(cuda_stream(), host_dst, src, bytes);
#endif
  return upload(host_dst, src, bytes);  // the host's memory either way
}

uint64_t StagingQueue::upload(void* dst, const void* host_src, size_t bytes) {
#ifdef MPITRON_HAVE_CUDA
  if (device_ == Device::cuda) return cuda::copy_stream_upload(cuda_stream(), dst, host_src, bytes);
#endif
  if (device_ == Device::cpu_staged) {
    pending_.push_back({dst, host_src, bytes});
    return ++queued_;
  }
  if (bytes > 0) std::memcpy(dst, host_src, bytes);
  done_ = ++queued_;
  return queued_;
}

void StagingQueue::wait(uint64_t ticket) {
#ifdef MPITRON_HAVE_CUDA
  if (device_ == Device::cuda) return cuda::copy_stream_wait(cuda_stream(), ticket);
#endif
  MPITRON_REQUIRE(ticket <= queued_, "a staging ticket not handed out");
  for (; done_ < ticket; ++done_) {  // in queue order, as a stream runs them
    const Copy c = pending_.front();
    pending_.pop_front();
    // The device's side at its real pages (cpu-staged's device addresses: base/staged_memory.hpp).
    if (c.bytes > 0) std::memcpy(staged_memory::real(c.dst), staged_memory::real(c.src), c.bytes);
  }
}

void StagingQueue::wait_all() {
#ifdef MPITRON_HAVE_CUDA
  if (device_ == Device::cuda) return cuda::copy_stream_wait_all(cuda_stream());
#endif
  wait(queued_);
}

DeviceAllocator StagingQueue::pinned_allocator() const {
#ifdef MPITRON_HAVE_CUDA
  if (device_ == Device::cuda) return cuda::pinned_allocator();
#endif
  return DeviceAllocator{"pinned host"};
}

}  // namespace mpitron
