// Counting allocator: every long-lived buffer (parameters, gradients, moments, activations) comes
// from here, so current and peak bytes per device are known exactly, like PyTorch's
// max_memory_allocated. Nothing allocates through it inside forward or backward.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "base/check.hpp"

namespace mpitron {

struct DeviceAllocator {
  std::string device = "cpu";
  // The device's raw memory (zero-filled; a GPU's cudaMalloc, src/cuda/device_memory.cuh); null:
  // 64-byte aligned host memory. Buffers of a device allocator are not readable on the host.
  void* (*raw_allocate)(size_t bytes) = nullptr;
  void (*raw_release)(void* ptr) = nullptr;
  size_t current_bytes = 0;
  size_t peak_bytes = 0;
  size_t allocations = 0;  // total number of allocate() calls, for "no allocation per step" checks
  // --max-device-memory: an allocation that would take current_bytes past limit_bytes throws
  // DeviceMemoryExceeded naming `purpose`, the rank, the peak so far and planned_bytes (0: no
  // limit; no plan).
  size_t limit_bytes = 0;
  size_t planned_bytes = 0;
  int rank = 0;
  const char* purpose = "a buffer";  // what the next allocations are for (AllocationPurpose)

  void* allocate(size_t bytes);
  void release(void* ptr, size_t bytes);
};

// An allocation past DeviceAllocator::limit_bytes (a UsageError: the run's settings ask for too
// much, and every rank stops with the first such line).
struct DeviceMemoryExceeded : UsageError {
  using UsageError::UsageError;
};

// What a device's raw_allocate throws when the device itself has no room, its message saying what
// the device had free; DeviceAllocator::allocate turns it into a DeviceMemoryExceeded that names
// the rank, the purpose, the size and the peak so far, so every rank stops with that line.
struct DeviceOutOfMemory : UsageError {
  using UsageError::UsageError;
};

// Names what a DeviceAllocator's allocations are for while it lives (for the limit's error).
struct AllocationPurpose {
  DeviceAllocator& alloc;
  const char* before;
  AllocationPurpose(DeviceAllocator& a, const char* purpose) : alloc(a), before(a.purpose) {
    a.purpose = purpose;
  }
  ~AllocationPurpose() { alloc.purpose = before; }
  AllocationPurpose(const AllocationPurpose&) = delete;
  AllocationPurpose& operator=(const AllocationPurpose&) = delete;
};

// An owning, 64-byte aligned array of T from a DeviceAllocator (zero-initialised).
template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(DeviceAllocator& alloc, size_t n) : alloc_(&alloc), n_(n) {
    data_ = static_cast<T*>(alloc.allocate(n * sizeof(T)));
  }
  ~Buffer() { reset(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      std::swap(alloc_, o.alloc_);
      std::swap(data_, o.data_);
      std::swap(n_, o.n_);
    }
    return *this;
  }
  void reset() {
    if (data_) alloc_->release(data_, n_ * sizeof(T));
    data_ = nullptr;
    n_ = 0;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  DeviceAllocator* alloc_ = nullptr;
  T* data_ = nullptr;
  size_t n_ = 0;
};

}  // namespace mpitron
