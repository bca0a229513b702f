// CUDA twin of layers/linear.hpp: out = inp W^T + b with W stored (out, in) as nn.Linear, on
// cuBLAS (fp32 math; no TF32, so fp32 results stay within 1e-4 of the CPU's). Same names and
// argument order as the CPU layer plus the stream; storage T is float, __nv_bfloat16 or __half,
// parameter gradients are float. A cuBLAS handle per host thread and device, made on first use and
// kept; calls are asynchronous on s.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

namespace mpitron::cuda {

template <class T>
void linear_forward(T* out,           // (N,OC)
                    const T* inp,     // (N,IC)
                    const T* weight,  // (OC,IC)
                    const T* bias,    // (OC) or nullptr
                    int N, int IC, int OC, cudaStream_t s);

template <class T>
void linear_backward(T* dinp,          // (N,IC)  =, or nullptr to skip
                     float* dweight,   // (OC,IC) +=
                     float* dbias,     // (OC)    +=, or nullptr
                     const T* dout,    // (N,OC)
                     const T* inp,     // (N,IC)
                     const T* weight,  // (OC,IC)
                     int N, int IC, int OC, cudaStream_t s);

// pre = inp W^T + b, out = gelu(pre) (GPT-2's tanh form): one cuBLASLt call with the bias and GELU
// in its epilogue (pre kept as the epilogue's auxiliary output, for gelu_backward); where
// cuBLASLt offers no algorithm for the shape, a product then a bias-GELU kernel, the same math.
template <class T>
void linear_gelu_forward(T* pre,           // (N,OC)
                         T* out,           // (N,OC)
                         const T* inp,     // (N,IC)
                         const T* weight,  // (OC,IC)
                         const T* bias,    // (OC)
                         int N, int IC, int OC, cudaStream_t s);

}  // namespace mpitron::cuda
