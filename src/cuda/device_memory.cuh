// A GPU's memory for the counting allocator and the host transfers of the layer table: the device
// a rank trains on, raw allocation, uploads and downloads. A plain C++ header (no nvcc needed).
#pragma once
#include <cstddef>
#include <cstdint>

#include "base/allocator.hpp"

namespace mpitron::cuda {

// Makes device `local_rank % devices` current and returns it. UsageError (one line) without a
// device: "--device cuda: no CUDA device (<the runtime's reason>)".
int select_device(int local_rank);

// A DeviceAllocator named "cuda" whose buffers are cudaMalloc'ed (zero-filled) on the current
// device; its peak is the run's GPU memory figure.
DeviceAllocator device_allocator();

// Host <-> current device on the calling thread's default stream. Downloads wait for the copy.
void upload(float* dst, const float* host_src, size_t n);
void upload_int32(int32_t* dst, const int32_t* host_src, size_t n);
void download(float* host_dst, const float* src, size_t n);
void upload_bytes(void* dst, const void* host_src, size_t bytes);
void download_bytes(void* host_dst, const void* src, size_t bytes);

}  // namespace mpitron::cuda

namespace mpitron::cuda {

// A DeviceAllocator named "pinned host" whose buffers are page-locked host memory (zero-filled):
// what a copy stream moves at the bus's speed, asynchronously.
DeviceAllocator pinned_allocator();

// A copy stream of the current device (StagingQueue's on a GPU): copies in queue order, each after
// the work queued so far on the calling thread's default stream, each a ticket (1, 2, ...).
struct CopyStream;
CopyStream* copy_stream_open();
void copy_stream_close(CopyStream* s) noexcept;  // waits for its copies; errors ignored
uint64_t copy_stream_download(CopyStream* s, void* host_dst, const void* src, size_t bytes);
uint64_t copy_stream_upload(CopyStream* s, void* dst, const void* host_src, size_t bytes);
void copy_stream_wait(CopyStream* s, uint64_t ticket);
void copy_stream_wait_all(CopyStream* s);

}  // namespace mpitron::cuda
