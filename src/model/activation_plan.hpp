// Activations are planned up front so nothing allocates inside forward or backward: a model
// describes its buffers in one carving function, run once to count (no base) and once to hand
// out 16-float aligned slices of a single allocation.
#pragma once
#include <cstddef>

#include "base/allocator.hpp"

namespace mpitron {

struct ActivationCarver {
  float* base = nullptr;  // nullptr: only count
  size_t used = 0;
  float* take(size_t n) { return take_as<float>(n); }
  // n elements of T (2- or 4-byte), on the same 64-byte grid.
  template <class T>
  T* take_as(size_t n) {
    static_assert(sizeof(T) <= sizeof(float) && alignof(T) <= 64);
    T* p = base ? reinterpret_cast<T*>(base + used) : nullptr;
    const size_t floats = (n * sizeof(T) + sizeof(float) - 1) / sizeof(float);
    used += (floats + 15) / 16 * 16;
    return p;
  }
};

// What ActivationCarver::take_as<T>(n) adds to `used`, in bytes (the memory plan's logits).
template <class T>
size_t carved_bytes(size_t n) {
  ActivationCarver c;
  c.take_as<T>(n);
  return c.used * sizeof(float);
}

// carve(ActivationCarver&) assigns every pointer; returns the one allocation they point into.
template <class Carve>
Buffer<float> plan_activations(DeviceAllocator& alloc, Carve&& carve) {
  ActivationCarver count;
  carve(count);
  Buffer<float> buf(alloc, count.used);
  ActivationCarver hand_out{buf.data()};
  carve(hand_out);
  return buf;
}

}  // namespace mpitron
