#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstring>

#include "base/check.hpp"
#include "base/cuda_check.hpp"
#include "src/cuda/device_memory.cuh"
#include "src/cuda/device_query.hpp"

namespace mpitron::cuda {

namespace {

void* allocate_zeroed(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    size_t free_bytes = 0, total = 0;
    cudaGetLastError();  // clear the sticky-free error before asking
    cudaMemGetInfo(&free_bytes, &total);
    throw DeviceOutOfMemory(fmt::format(
        "the GPU had {:.1f} of {:.1f} MiB free (lower --batch-size or raise --micro-batches; "
        "--recompute block keeps less; `mpitron plan` predicts what fits)",
        double(free_bytes) / (1 << 20), double(total) / (1 << 20)));
  }
  CUDA_CHECK(err);
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cudaStreamPerThread));
  return p;
}

void release(void* p) {
  CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));  // no kernel may still use it
  CUDA_CHECK(cudaFree(p));
}

}  // namespace

int select_device(int local_rank) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess)
    throw UsageError(
        fmt::format("--device cuda: {} (cudaGetDeviceCount: {}); use --device cpu, "
                    "or --device cpu-staged to run the device's code paths on the CPU",
                    no_device_reason(err), cudaGetErrorString(err)));
  if (count == 0) throw UsageError("--device cuda: no CUDA device (cudaGetDeviceCount found 0)");
  const int device = local_rank % count;
  // Creates the context (CUDA 12+): fails when the GPU is taken (exclusive-process mode).
  const cudaError_t set_err = cudaSetDevice(device);
  if (set_err != cudaSuccess)
    throw UsageError(fmt::format("--device cuda: cannot use CUDA device {} (cudaSetDevice: {})",
                                 device, cudaGetErrorString(set_err)));
  return device;
}

DeviceAllocator device_allocator() {
  DeviceAllocator a;
  a.device = "cuda";
  a.raw_allocate = allocate_zeroed;
  a.raw_release = release;
  return a;
}

void upload(float* dst, const float* host_src, size_t n) {
  if (n == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, n * sizeof(float), cudaMemcpyHostToDevice,
                             cudaStreamPerThread));
}

void upload_int32(int32_t* dst, const int32_t* host_src, size_t n) {
  if (n == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, n * sizeof(int32_t), cudaMemcpyHostToDevice,
                             cudaStreamPerThread));
}

void download(float* host_dst, const float* src, size_t n) {
  download_bytes(host_dst, src, n * sizeof(float));
}

void upload_bytes(void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cudaStreamPerThread));
}

void download_bytes(void* host_dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cudaStreamPerThread));
  CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
}

}  // namespace mpitron::cuda

namespace mpitron::cuda {

namespace {

void* allocate_pinned(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw DeviceOutOfMemory(fmt::format(
        "cudaHostAlloc could not page-lock {:.1f} MiB of host memory", double(bytes) / (1 << 20)));
  }
  CUDA_CHECK(err);
  std::memset(p, 0, bytes);
  return p;
}

void release_pinned(void* p) {
  CUDA_CHECK(cudaFreeHost(p));  // waits for the device's work
}

}  // namespace

DeviceAllocator pinned_allocator() {
  DeviceAllocator a;
  a.device = "pinned host";
  a.raw_allocate = allocate_pinned;
  a.raw_release = release_pinned;
  return a;
}

// Events in a ring: ticket t's is done[t % kEvents]; before an event is recorded again the host
// waits for its previous copy, so a ticket older than the ring's reach is done.
struct CopyStream {
  static constexpr uint64_t kEvents = 8;
  cudaStream_t stream = nullptr;
  cudaEvent_t compute = nullptr;  // the compute stream's point each copy waits for
  cudaEvent_t done[kEvents] = {};
  uint64_t queued = 0;
};

CopyStream* copy_stream_open() {
  auto* s = new CopyStream;  // CUDA_CHECK stops the process on a failure
  CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&s->compute, cudaEventDisableTiming));
  for (cudaEvent_t& e : s->done) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return s;
}

void copy_stream_close(CopyStream* s) noexcept {
  if (!s) return;
  if (s->stream) cudaStreamSynchronize(s->stream);
  for (cudaEvent_t e : s->done)
    if (e) cudaEventDestroy(e);
  if (s->compute) cudaEventDestroy(s->compute);
  if (s->stream) cudaStreamDestroy(s->stream);
  delete s;
}

namespace {
uint64_t queue_copy(CopyStream* s, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const uint64_t ticket = ++s->queued;
  cudaEvent_t done = s->done[ticket % CopyStream::kEvents];
  if (ticket > CopyStream::kEvents) CUDA_CHECK(cudaEventSynchronize(done));
  CUDA_CHECK(cudaEventRecord(s->compute, cudaStreamPerThread));
  CUDA_CHECK(cudaStreamWaitEvent(s->stream, s->compute, 0));
  if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s->stream));
  CUDA_CHECK(cudaEventRecord(done, s->stream));
  return ticket;
}
}  // namespace

uint64_t copy_stream_download(CopyStream* s, void* host_dst, const void* src, size_t bytes) {
  return queue_copy(s, host_dst, src, bytes, cudaMemcpyDeviceToHost);
}

uint64_t copy_stream_upload(CopyStream* s, void* dst, const void* host_src, size_t bytes) {
  return queue_copy(s, dst, host_src, bytes, cudaMemcpyHostToDevice);
}

void copy_stream_wait(CopyStream* s, uint64_t ticket) {
  MPITRON_REQUIRE(ticket <= s->queued, "a staging ticket not handed out");
  if (ticket == 0 || ticket + CopyStream::kEvents <= s->queued) return;  // done before its reuse
  CUDA_CHECK(cudaEventSynchronize(s->done[ticket % CopyStream::kEvents]));
}

void copy_stream_wait_all(CopyStream* s) {
  CUDA_CHECK(cudaStreamSynchronize(s->stream));
}

}  // namespace mpitron::cuda
