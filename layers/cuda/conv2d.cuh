// CUDA twin of layers/conv2d.hpp through cuDNN (float NCHW, fp32 arithmetic: no TF32): a plan
// made once per shape holds cuDNN's descriptors and the algorithms chosen for them, every one
// deterministic, so a step's bits repeat (the layout-equivalence and resume tests need that).
// Device pointers; asynchronous on s. Built where cuDNN's header was found (MPITRON_HAVE_CUDNN).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "layers/conv2d.hpp"

namespace mpitron::cuda {

struct Conv2dCudnn;  // descriptors and algorithms for one shape (conv2d.cu)

// The kernels for calls on up to shape.N images; calls on one plan must not overlap.
std::shared_ptr<const Conv2dCudnn> conv2d_plan(const cpu::Conv2dShape& shape);

// Bytes of workspace a call on up to shape.N images needs (the largest of the three algorithms').
size_t conv2d_workspace_bytes(const Conv2dCudnn& plan);

void conv2d_forward(float* out,           // (N,OC,OH,OW) =
                    void* workspace,      // (conv2d_workspace_bytes(plan))
                    const float* inp,     // (N,IC,H,W)
                    const float* weight,  // (OC,IC,KH,KW)
                    const Conv2dCudnn& plan, int N, cudaStream_t s);

void conv2d_backward(float* dinp,          // (N,IC,H,W) =, or nullptr to skip
                     float* dweight,       // (OC,IC,KH,KW) +=
                     void* workspace,      // (conv2d_workspace_bytes(plan))
                     const float* dout,    // (N,OC,OH,OW)
                     const float* inp,     // (N,IC,H,W)
                     const float* weight,  // (OC,IC,KH,KW)
                     const Conv2dCudnn& plan, int N, cudaStream_t s);

}  // namespace mpitron::cuda
