// Internal to layers/cuda/attention*.cu and their tests: the tensor-core (mma.sync) attention
// kernels for 16-bit storage and the switch between them and the SIMT reference kernels of
// attention.cu. The contracts of attention_forward/backward (attention.cuh) hold for both paths.
// A plain C++17 header: .cpp files include it without nvcc.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace mpitron::cuda::detail {

// True while the reference kernels are forced for every storage type: initially when the
// environment variable MPITRON_ATTENTION is "reference" (read once), afterwards whatever
// force_reference_attention last set. Tests flip it to compare the two paths.
bool reference_attention_forced();
void force_reference_attention(bool on);

// Whether the tensor-core kernels can take head size HS on the current device: compute
// capability >= 8.0 and this binary holds their sm_80+ code. Ignores the forcing above.
bool attention_mma_available(int HS);

// The tensor-core paths, F = __nv_bfloat16 or __half. Each returns false, having done nothing,
// when it cannot take the call (forced reference, HS, device, a pointer not 16-byte aligned);
// the caller then runs the reference kernels. Shapes are checked by the caller (HS = C/NH is 32,
// 64 or 128; B, T > 0). Backward expects delta = rowsum(dout * out) already computed on s.
template <class F>
bool attention_forward_mma(F* out, float* lse, const F* qkv, int B, int T, int C, int NH,
                           bool causal, const int32_t* lengths, cudaStream_t s);
template <class F>
bool attention_backward_mma(F* dqkv, const float* delta, const F* dout, const F* qkv,
                            const float* lse, int B, int T, int C, int NH, bool causal,
                            const int32_t* lengths, cudaStream_t s);

}  // namespace mpitron::cuda::detail
