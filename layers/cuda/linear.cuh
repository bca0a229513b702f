// CUDA twins of layers/linear.hpp: out = inp W^T + b, W stored (OC,IC) as nn.Linear; backward
// dinp = dout W, dW += dout^T inp, db += column sums of dout. T (activations, weights, bias) is
// float, __nv_bfloat16 or __half; parameter gradients are float; products accumulate in fp32
// (true fp32 for float: no TF32). Device pointers; asynchronous on s.
//
// A cuBLAS handle, a cuBLASLt handle and a 32 MiB cuBLASLt workspace per host thread and device,
// made on the first call and kept (remade when the thread's current device changes); nothing else
// allocates. The forward is one cuBLASLt call with the bias (and GELU) in its epilogue where every
// pointer is 16-byte aligned, IC and OC are multiples of 16 bytes of T (GELU: also OC % 8 == 0) and
// cuBLASLt has an algorithm; otherwise the bias rows, cublasGemmEx adding the product onto them,
// then a GELU kernel. The same call on the same pointers takes the same path: the same bits.
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

// dinp and dweight on cublasGemmEx (dweight: T inputs, float output, beta = 1); dbias by a
// fixed-order column-sum kernel without atomics, so every call gives the same bits. dout_scale
// multiplies dout inside both products (their alpha: dinp = s dout W, dW += s dout^T inp; the
// fused classifier's dloss); it needs dbias == nullptr.
template <class T>
void linear_backward(T* dinp,          // (N,IC)  =, or nullptr to skip
                     float* dweight,   // (OC,IC) +=, or nullptr to skip (inp unread then)
                     float* dbias,     // (OC)    +=, or nullptr
                     const T* dout,    // (N,OC)
                     const T* inp,     // (N,IC)
                     const T* weight,  // (OC,IC)
                     int N, int IC, int OC, cudaStream_t s, float dout_scale = 1.0f);

// pre = inp W^T + b, out = gelu(pre) with GPT-2's tanh GELU 0.5 x (1 + tanh(sqrt(2/pi) (x +
// 0.044715 x^3))): cuBLASLt's GELU_AUX_BIAS epilogue, pre being its auxiliary output, kept for
// gelu_backward. pre and out must not overlap. In 16 bits the epilogue takes the GELU of the fp32
// pre before rounding either, where its fallback (unaligned operands) and the CPU take it of the
// rounded pre: out may differ from theirs in the last bit.
template <class T>
void linear_gelu_forward(T* pre,           // (N,OC)
                         T* out,           // (N,OC)
                         const T* inp,     // (N,IC)
                         const T* weight,  // (OC,IC)
                         const T* bias,    // (OC) or nullptr
                         int N, int IC, int OC, cudaStream_t s);

// Whether this thread's latest linear_forward or linear_gelu_forward ran as one cuBLASLt call
// (false: cublasGemmEx and kernels). For tests and benchmarks.
bool linear_forward_used_lt();

// dbias += the column sums of dout, the bias gradient linear_backward takes: rows in chunks fixed
// by N summed over every SM, then the chunks of each column in order (cuBLASLt's workspace of this
// thread holds the partial sums), so the bits depend on (N, OC) alone.
template <class T>
void bias_gradient(float* dbias,   // (OC) +=
                   const T* dout,  // (N,OC)
                   int N, int OC, cudaStream_t s);

// The simple path it replaced: a block of 32 columns sums every row (OC/32 blocks).
template <class T>
void bias_gradient_reference(float* dbias,   // (OC) +=
                             const T* dout,  // (N,OC)
                             int N, int OC, cudaStream_t s);

}  // namespace mpitron::cuda
