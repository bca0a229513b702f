// The CUDA layer table (src/model/layer_ops.hpp): the layers/cuda twins in fp32 on the calling
// thread's default stream, where the step ops run too, so everything of a step is in one order.
#include <cuda_runtime.h>

#include "layers/cuda/attention.cuh"
#include "layers/cuda/crossentropy.cuh"
#include "layers/cuda/dropout.cuh"
#include "layers/cuda/encoder.cuh"
#include "layers/cuda/gelu.cuh"
#include "layers/cuda/layernorm.cuh"
#include "layers/cuda/linear.cuh"
#include "layers/cuda/residual.cuh"
#include "src/cuda/cuda_check.hpp"
#include "src/cuda/device_memory.cuh"
#include "src/cuda/step_ops.cuh"
#include "src/model/layer_ops.hpp"

namespace mpitron {

namespace {

const cudaStream_t kStream = cudaStreamPerThread;

// Scratch of the backward kernels that need some (LayerNorm's column partials, the embedding's
// sort): one per host thread and device, grown to the largest request and kept, so a step
// allocates nothing after the first. Small next to the activations and outside their count.
struct GrowingScratch {
  int device = -1;
  void* data = nullptr;
  size_t bytes = 0;
  ~GrowingScratch() {
    if (data) cudaFree(data);  // errors ignored: the runtime may be shutting down at exit
  }
  void* get(size_t want) {
    int current = 0;
    CUDA_CHECK(cudaGetDevice(&current));
    if (data && current == device && want <= bytes) return data;
    if (data) {
      CUDA_CHECK(cudaStreamSynchronize(kStream));  // the old buffer may still be read
      CUDA_CHECK(cudaFree(data));
    }
    data = nullptr;
    CUDA_CHECK(cudaMalloc(&data, want));
    device = current;
    bytes = want;
    return data;
  }
};

void* layernorm_scratch(size_t bytes) {
  thread_local GrowingScratch s;
  return s.get(bytes);
}
void* encoder_scratch(size_t bytes) {
  thread_local GrowingScratch s;
  return s.get(bytes);
}

void zero(float* p, size_t n) {
  cuda::zero(p, n, kStream);
}
void copy(float* dst, const float* src, size_t n) {
  cuda::copy(dst, src, n, kStream);
}
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, double eps) {
  cuda::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps, kStream);
}
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
  float* scratch = static_cast<float*>(
      layernorm_scratch(cuda::layernorm_backward_scratch(N, C) * sizeof(float)));
  cuda::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, scratch,
                           kStream);
}
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int IC, int OC) {
  cuda::linear_forward(out, inp, weight, bias, N, IC, OC, kStream);
}
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC) {
  cuda::linear_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, kStream);
}
void gelu_forward(float* out, const float* inp, size_t n) {
  cuda::gelu_forward(out, inp, n, kStream);
}
void gelu_backward(float* dinp, const float* dout, const float* inp, size_t n) {
  cuda::gelu_backward(dinp, dout, inp, n, kStream);
}
// saved: the (B,NH,T) log-sum-exp; scratch: backward's (B,NH,T) rowsum(dout * out).
void attention_forward(float* out, float* saved, const float* qkv, int B, int T, int C, int NH,
                       bool causal, const int32_t* lengths) {
  cuda::attention_forward(out, saved, qkv, B, T, C, NH, causal, lengths, kStream);
}
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* out,
                        const float* qkv, const float* saved, int B, int T, int C, int NH,
                        bool causal, const int32_t* lengths) {
  cuda::attention_backward(dqkv, scratch, dout, out, qkv, saved, B, T, C, NH, causal, lengths,
                           kStream);
}
size_t attention_saved_elements(int B, int NH, int T) {
  return size_t(B) * NH * T;
}
void dropout_forward(float* out, const float* inp, float p, const PhiloxStream& rng, uint64_t row0,
                     int N, int C) {
  cuda::dropout_forward(out, inp, p, rng, row0, N, C, kStream);
}
void dropout_backward(float* dinp, const float* dout, float p, const PhiloxStream& rng,
                      uint64_t row0, int N, int C) {
  cuda::dropout_backward(dinp, dout, p, rng, row0, N, C, kStream);
}
void residual_forward(float* out, const float* a, const float* b, size_t n) {
  cuda::residual_forward(out, a, b, n, kStream);
}
void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                     int T, int C) {
  cuda::encoder_forward(out, tokens, wte, wpe, B, T, C, kStream);
}
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                      int T, int C) {
  void* scratch = encoder_scratch(cuda::encoder_backward_scratch_bytes(B, T));
  cuda::encoder_backward(dwte, dwpe, dout, tokens, B, T, C, scratch, kStream);
}
void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                          int N, int V) {
  cuda::crossentropy_forward(losses, lse, logits, targets, N, V, kStream);
}
void crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                           const int32_t* targets, float dloss, int N, int V) {
  cuda::crossentropy_backward(dlogits, logits, lse, targets, dloss, N, V, kStream);
}

}  // namespace

const LayerOps& cuda_layer_ops() {
  static constexpr LayerOps ops{
      "cuda",
      zero,
      copy,
      cuda::upload_int32,
      cuda::upload,
      cuda::download,
      layernorm_forward,
      layernorm_backward,
      linear_forward,
      linear_backward,
      gelu_forward,
      gelu_backward,
      attention_forward,
      attention_backward,
      attention_saved_elements,
      dropout_forward,
      dropout_backward,
      residual_forward,
      encoder_forward,
      encoder_backward,
      crossentropy_forward,
      crossentropy_backward,
  };
  return ops;
}

}  // namespace mpitron
