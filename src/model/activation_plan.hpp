// Activations are planned up front so nothing allocates inside forward or backward: a model
// describes its buffers in one carving function, run once to count (no base) and once to hand
// out 16-float aligned slices of a single allocation.
#pragma once
#include <cstddef>

#include "src/allocator.hpp"

namespace mpitron {

struct ActivationCarver {
  float* base = nullptr;  // nullptr: only count
  size_t used = 0;
  float* take(size_t n) {
    float* p = base ? base + used : nullptr;
    used += (n + 15) / 16 * 16;
    return p;
  }
};

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
