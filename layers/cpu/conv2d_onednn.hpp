// Conv2d through oneDNN's direct kernels on blocked layouts (nChw8c with AVX2, nChw16c with
// AVX-512), the path conv2d_plan() picks for float where the build has oneDNN. The images are cut
// into min(N, kConv2dMaxThreads) sub-batches fixed by N alone, each run by one thread with
// single-threaded primitives made once per sub-batch size (made with one OpenMP thread, so their
// blocking never depends on the thread count): the bits do not depend on the thread count.
#pragma once
#include <cstddef>
#include <memory>

#include "layers/conv2d.hpp"

namespace mpitron::cpu {

// Null where the build has no oneDNN, or oneDNN offers only a reference kernel for the shape.
std::shared_ptr<Conv2dOnednn> conv2d_onednn_make(const Conv2dShape& s);

// Floats of workspace a call on N images needs.
size_t conv2d_onednn_workspace(Conv2dOnednn& k, int N);

void conv2d_onednn_forward(Conv2dOnednn& k, int N, float* out, float* workspace, const float* inp,
                           const float* weight, const float* bias);

void conv2d_onednn_backward(Conv2dOnednn& k, int N, float* dinp, float* dweight, float* dbias,
                            float* workspace, const float* dout, const float* inp,
                            const float* weight);

}  // namespace mpitron::cpu
