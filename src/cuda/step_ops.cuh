// CUDA twins of src/cpu/step_ops.hpp (zeroing, copies, gradient norm): the same names and
// arguments plus the stream they run on, for StepBackend's CUDA table. A plain C++17 header, so
// .cpp files include it without nvcc. All pointers are device pointers.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace mpitron::cuda {

// Asynchronous on s.
void zero(float* p, size_t n, cudaStream_t s);
void copy(float* dst, const float* src, size_t n, cudaStream_t s);

// Sum of squares of g[0, n) in double. Deterministic: 64 chunks as on the CPU, each summed by one
// block in a fixed tree order, the partials added in chunk order on the host; bitwise the same on
// every call, not bitwise the CPU's (within ~1e-15 relative of it). Synchronises s. Uses a small
// device buffer per host thread, allocated on the first call (and again if that thread's current
// device changes) and kept: calls from different threads never share it.
double sum_of_squares(const float* g, size_t n, cudaStream_t s);

}  // namespace mpitron::cuda
