// Pooling on the device (pool.cuh): one thread per output (forward) or input (backward) element.
#include <cuda_runtime.h>

#include <algorithm>

#include "base/cuda_check.hpp"
#include "layers/cuda/elementwise.cuh"
#include "layers/cuda/pool.cuh"

namespace mpitron::cuda {

namespace {

using elementwise::from_float;
using elementwise::to_float;

constexpr int kThreads = 256;

int blocks_for(size_t n) {
  return int(std::min<size_t>((n + kThreads - 1) / kThreads, 65536));
}

// OH and OW are the shape's (its member functions are host code).
template <class T>
__global__ void maxpool_forward_kernel(T* out, int32_t* argmax, const T* inp, cpu::Pool2dShape s,
                                       int OH, int OW, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t nc = i / (size_t(OH) * OW);
    const int p = int(i % (size_t(OH) * OW)), oy = p / OW, ox = p % OW;
    const T* x = inp + nc * size_t(s.H) * s.W;
    const int y0 = oy * s.stride - s.pad, x0 = ox * s.stride - s.pad;
    const int ya = max(y0, 0), yb = min(y0 + s.K, s.H);
    const int xa = max(x0, 0), xb = min(x0 + s.K, s.W);
    int best = ya * s.W + xa;
    float v = to_float(x[best]);
    for (int iy = ya; iy < yb; ++iy)
      for (int ix = xa; ix < xb; ++ix) {
        const float e = to_float(x[iy * s.W + ix]);
        if (e > v || (e != e && v == v)) {  // strict: the first of equal maxima, the first NaN
          v = e;
          best = iy * s.W + ix;
        }
      }
    out[i] = from_float<T>(v);  // an input's value: exact
    argmax[i] = best;
  }
}

template <class T>
__global__ void maxpool_backward_kernel(T* dinp, const T* dout, const int32_t* argmax,
                                        cpu::Pool2dShape s, int OH, int OW, size_t n) {
  const int HW = s.H * s.W;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t nc = i / size_t(HW);
    const int q = int(i % size_t(HW)), iy = q / s.W, ix = q % s.W;
    // Outputs whose window holds (iy, ix): oy s - pad <= iy < oy s - pad + K.
    const int oy0 = max(0, (iy + s.pad - s.K + s.stride) / s.stride);
    const int oy1 = min(OH - 1, (iy + s.pad) / s.stride);
    const int ox0 = max(0, (ix + s.pad - s.K + s.stride) / s.stride);
    const int ox1 = min(OW - 1, (ix + s.pad) / s.stride);
    const T* dy = dout + nc * size_t(OH) * OW;
    const int32_t* am = argmax + nc * size_t(OH) * OW;
    float g = 0.0f;
    for (int oy = oy0; oy <= oy1; ++oy)
      for (int ox = ox0; ox <= ox1; ++ox)
        if (am[oy * OW + ox] == q) g = __fadd_rn(g, to_float(dy[oy * OW + ox]));
    dinp[i] = from_float<T>(g);
  }
}

template <class T>
__global__ void avgpool_forward_kernel(T* out, const T* inp, int NC, int HW) {
  const int nc = int(blockIdx.x) * blockDim.x + threadIdx.x;
  if (nc >= NC) return;
  const T* x = inp + size_t(nc) * HW;
  double sum = 0;
  for (int i = 0; i < HW; ++i) sum += double(to_float(x[i]));
  out[nc] = from_float<T>(float(sum / HW));
}

template <class T>
__global__ void avgpool_backward_kernel(T* dinp, const T* dout, size_t n, int HW) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    dinp[i] = from_float<T>(float(double(to_float(dout[i / size_t(HW)])) / HW));
}

}  // namespace

template <class T>
void maxpool2d_forward(T* out, int32_t* argmax, const T* inp, const cpu::Pool2dShape& s,
                       cudaStream_t stream) {
  const size_t n = size_t(s.N) * s.C * s.OH() * s.OW();
  if (n == 0) return;
  maxpool_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, argmax, inp, s, s.OH(),
                                                                 s.OW(), n);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void maxpool2d_backward(T* dinp, const T* dout, const int32_t* argmax, const cpu::Pool2dShape& s,
                        cudaStream_t stream) {
  const size_t n = size_t(s.N) * s.C * s.H * s.W;
  if (n == 0) return;
  maxpool_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dinp, dout, argmax, s, s.OH(),
                                                                  s.OW(), n);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void global_avgpool_forward(T* out, const T* inp, int N, int C, int HW, cudaStream_t stream) {
  const int NC = N * C;
  if (NC == 0) return;
  avgpool_forward_kernel<<<(NC + kThreads - 1) / kThreads, kThreads, 0, stream>>>(out, inp, NC, HW);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void global_avgpool_backward(T* dinp, const T* dout, int N, int C, int HW, cudaStream_t stream) {
  const size_t n = size_t(N) * C * HW;
  if (n == 0) return;
  avgpool_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dinp, dout, n, HW);
  CUDA_CHECK_LAUNCH();
}

#define MPITRON_INSTANTIATE(T)                                                               \
  template void maxpool2d_forward<T>(T*, int32_t*, const T*, const cpu::Pool2dShape&,        \
                                     cudaStream_t);                                          \
  template void maxpool2d_backward<T>(T*, const T*, const int32_t*, const cpu::Pool2dShape&, \
                                      cudaStream_t);                                         \
  template void global_avgpool_forward<T>(T*, const T*, int, int, int, cudaStream_t);        \
  template void global_avgpool_backward<T>(T*, const T*, int, int, int, cudaStream_t);
MPITRON_INSTANTIATE(float)
MPITRON_INSTANTIATE(__nv_bfloat16)
MPITRON_INSTANTIATE(__half)
#undef MPITRON_INSTANTIATE

}  // namespace mpitron::cuda
