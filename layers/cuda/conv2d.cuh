// CUDA twin of layers/conv2d.hpp through cuDNN (NCHW; T float, __nv_bfloat16 or __half; fp32
// arithmetic, no TF32 on float data; tensor cores with fp32 sums on 16-bit data): a plan made once
// per shape and storage type holds cuDNN's descriptors and the algorithms chosen for them, every
// one deterministic, so a step's bits repeat (the layout-equivalence and resume tests need that).
// In 16 bits cuDNN writes the weight gradient in T: each call's is rounded once, then added to the
// fp32 gradient.
// Device pointers; asynchronous on s. Built where cuDNN's header was found (MPITRON_HAVE_CUDNN).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "layers/conv2d.hpp"

namespace mpitron::cuda {

struct Conv2dCudnn;  // descriptors and algorithms for one shape (conv2d.cu)

// The kernels for calls on up to shape.N images of T; calls on one plan must not overlap.
template <class T>
std::shared_ptr<const Conv2dCudnn> conv2d_plan(const cpu::Conv2dShape& shape);

// Bytes of workspace a call on up to shape.N images needs (the largest of the three algorithms',
// and in 16 bits the weight gradient's).
size_t conv2d_workspace_bytes(const Conv2dCudnn& plan);

template <class T>
void conv2d_forward(T* out,           // (N,OC,OH,OW) =
                    void* workspace,  // (conv2d_workspace_bytes(plan))
                    const T* inp,     // (N,IC,H,W)
                    const T* weight,  // (OC,IC,KH,KW)
                    const Conv2dCudnn& plan, int N, cudaStream_t s);

template <class T>
void conv2d_backward(T* dinp,          // (N,IC,H,W) =, or nullptr to skip
                     float* dweight,   // (OC,IC,KH,KW) +=
                     void* workspace,  // (conv2d_workspace_bytes(plan))
                     const T* dout,    // (N,OC,OH,OW)
                     const T* inp,     // (N,IC,H,W)
                     const T* weight,  // (OC,IC,KH,KW)
                     const Conv2dCudnn& plan, int N, cudaStream_t s);

}  // namespace mpitron::cuda
