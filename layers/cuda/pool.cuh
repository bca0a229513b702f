// CUDA twins of layers/pool.hpp (float NCHW): max pooling with the CPU's rule (the first maximum
// in row-major order wins, a NaN wins, padding never does) and its winners' indices, so backward
// routes gradients exactly as the CPU's; global average pooling summed in double in plane order.
// The same bits as the CPU's. Device pointers; asynchronous on s.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "layers/pool.hpp"

namespace mpitron::cuda {

void maxpool2d_forward(float* out,        // (N,C,OH,OW) =
                       int32_t* argmax,   // (N,C,OH,OW)
                       const float* inp,  // (N,C,H,W)
                       const cpu::Pool2dShape& shape, cudaStream_t s);

// One thread per input element adds the outputs that chose it in output order (the CPU's order).
void maxpool2d_backward(float* dinp,            // (N,C,H,W) =
                        const float* dout,      // (N,C,OH,OW)
                        const int32_t* argmax,  // (N,C,OH,OW)
                        const cpu::Pool2dShape& shape, cudaStream_t s);

void global_avgpool_forward(float* out,        // (N,C) =
                            const float* inp,  // (N,C,HW)
                            int N, int C, int HW, cudaStream_t s);

void global_avgpool_backward(float* dinp,        // (N,C,HW) =
                             const float* dout,  // (N,C)
                             int N, int C, int HW, cudaStream_t s);

}  // namespace mpitron::cuda
