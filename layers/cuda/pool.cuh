// CUDA twins of layers/pool.hpp (NCHW; T float, __nv_bfloat16 or __half, fp32 arithmetic): max
// pooling with the CPU's rule (the first maximum in row-major order wins, a NaN wins, padding never
// does) and its winners' indices, so backward routes gradients exactly as the CPU's; global average
// pooling summed in double in plane order. The same bits as the CPU's. Device pointers;
// asynchronous on s.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "layers/pool.hpp"

namespace mpitron::cuda {

template <class T>
void maxpool2d_forward(T* out,           // (N,C,OH,OW) =
                       int32_t* argmax,  // (N,C,OH,OW)
                       const T* inp,     // (N,C,H,W)
                       const cpu::Pool2dShape& shape, cudaStream_t s);

// One thread per input element adds the outputs that chose it in output order (the CPU's order).
template <class T>
void maxpool2d_backward(T* dinp,                // (N,C,H,W) =
                        const T* dout,          // (N,C,OH,OW)
                        const int32_t* argmax,  // (N,C,OH,OW)
                        const cpu::Pool2dShape& shape, cudaStream_t s);

template <class T>
void global_avgpool_forward(T* out,        // (N,C) =
                            const T* inp,  // (N,C,HW)
                            int N, int C, int HW, cudaStream_t s);

template <class T>
void global_avgpool_backward(T* dinp,        // (N,C,HW) =
                             const T* dout,  // (N,C)
                             int N, int C, int HW, cudaStream_t s);

}  // namespace mpitron::cuda
