#include "allocator.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

namespace mpitron {

void* DeviceAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = nullptr;
  if (raw_allocate) {
    p = raw_allocate(rounded);
  } else {
    p = std::aligned_alloc(64, rounded);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, rounded);
  }
  current_bytes += bytes;
  if (current_bytes > peak_bytes) peak_bytes = current_bytes;
  ++allocations;
  return p;
}

void DeviceAllocator::release(void* ptr, size_t bytes) {
  if (!ptr) return;
  if (raw_release)
    raw_release(ptr);
  else
    std::free(ptr);
  current_bytes -= bytes;
}

}  // namespace mpitron
