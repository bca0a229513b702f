#include "allocator.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "base/human_units.hpp"

namespace mpitron {

void* DeviceAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (limit_bytes > 0 && current_bytes + bytes > limit_bytes)
    throw DeviceMemoryExceeded(fmt::format(
        "rank {}: {} for {} would take {} memory to {}, past --max-device-memory {} (in use {}, "
        "peak so far {}{}): see `mpitron plan` with the same flags for what fits",
        rank, human_bytes(double(bytes)), purpose, device,
        human_bytes(double(current_bytes + bytes)), human_bytes(double(limit_bytes)),
        human_bytes(double(current_bytes)), human_bytes(double(peak_bytes)),
        planned_bytes > 0
            ? fmt::format("; the plan predicts a peak of {}", human_bytes(double(planned_bytes)))
            : ""));
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = nullptr;
  if (raw_allocate) {
    try {
      p = raw_allocate(rounded);
    } catch (const DeviceOutOfMemory& e) {
      throw DeviceMemoryExceeded(fmt::format(
          "rank {}: out of {} memory: {} for {} (in use {}, peak so far {}{}): {}", rank, device,
          human_bytes(double(bytes)), purpose, human_bytes(double(current_bytes)),
          human_bytes(double(peak_bytes)),
          planned_bytes > 0
              ? fmt::format("; the plan predicts a peak of {}", human_bytes(double(planned_bytes)))
              : "",
          e.what()));
    }
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
