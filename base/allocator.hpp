// Counting allocator: every long-lived buffer (parameters, gradients, moments, activations) comes
// from here, so current and peak bytes per device are known exactly, like PyTorch's
// max_memory_allocated. Nothing allocates through it inside forward or backward.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

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

  void* allocate(size_t bytes);
  void release(void* ptr, size_t bytes);
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
