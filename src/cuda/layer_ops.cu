// The CUDA layer tables (src/model/layer_ops.hpp): the layers/cuda twins in float, bf16 or fp16
// storage on the calling thread's default stream, where the step ops run too, so everything of a
// step is in one order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "base/cuda_check.hpp"
#include "layers/cuda/attention.cuh"
#include "layers/cuda/batchnorm.cuh"
#ifdef MPITRON_HAVE_CUDNN
#include "layers/cuda/conv2d.cuh"
#endif
#include "layers/cuda/crossentropy.cuh"
#include "layers/cuda/dropout.cuh"
#include "layers/cuda/embedding.cuh"
#include "layers/cuda/gelu.cuh"
#include "layers/cuda/layernorm.cuh"
#include "layers/cuda/linear.cuh"
#include "layers/cuda/pool.cuh"
#include "layers/cuda/relu.cuh"
#include "layers/cuda/residual.cuh"
#include "layers/cuda/rows.cuh"
#include "layers/cuda/tanh.cuh"
#include "src/cuda/device_memory.cuh"
#include "src/cuda/step_ops.cuh"
#include "src/model/layer_ops.hpp"

namespace mpitron {

namespace {

const cudaStream_t kStream = cudaStreamPerThread;
// The LM head's vocabulary padded to a multiple of 128 rows: cuBLAS picks aligned tensor-core
// kernels (an odd V such as GPT-2's 50257 falls back to slow align1 ones).
constexpr int kLmHeadAlign = 128;

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
void* embedding_scratch(size_t bytes) {
  thread_local GrowingScratch s;
  return s.get(bytes);
}
void* batchnorm_scratch(size_t bytes) {
  thread_local GrowingScratch s;
  return s.get(bytes);
}

// The CUDA type of a storage type: float, __nv_bfloat16 or __half (the same bits).
template <class A>
struct Cuda {
  using type = float;
};
template <>
struct Cuda<bf16_t> {
  using type = __nv_bfloat16;
};
template <>
struct Cuda<fp16_t> {
  using type = __half;
};
static_assert(sizeof(__nv_bfloat16) == sizeof(bf16_t) && sizeof(__half) == sizeof(fp16_t));
template <class A>
typename Cuda<A>::type* dev(A* p) {
  return reinterpret_cast<typename Cuda<A>::type*>(p);
}
template <class A>
const typename Cuda<A>::type* dev(const A* p) {
  return reinterpret_cast<const typename Cuda<A>::type*>(p);
}

template <class T>
__global__ void round_kernel(T* dst, const float* src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    dst[i] = T(src[i]);  // round to nearest even
}

template <class A>
void zero(A* p, size_t n) {
  if constexpr (std::is_same_v<A, float>)
    cuda::zero(p, n, kStream);
  else  // +0 is all zero bits in both 16-bit formats
    CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(A), kStream));
}
template <class A>
void copy(A* dst, const A* src, size_t n) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(A), cudaMemcpyDeviceToDevice, kStream));
}
template <class A>
void round_weights(A* dst, const float* src, size_t n) {
  if (n == 0) return;
  if constexpr (std::is_same_v<A, float>) {
    copy(dst, src, n);
  } else {
    const int threads = 256;
    const int blocks = int(std::min<size_t>((n + threads - 1) / threads, 65536));
    round_kernel<<<blocks, threads, 0, kStream>>>(dev(dst), src, n);
    CUDA_CHECK_LAUNCH();
  }
}
template <class A>
void layernorm_forward(A* out, float* mean, float* rstd, const A* inp, const A* weight,
                       const A* bias, int N, int C, double eps) {
  cuda::layernorm_forward(dev(out), mean, rstd, dev(inp), dev(weight), dev(bias), N, C, eps,
                          kStream);
}
template <class A>
void layernorm_backward(A* dinp, float* dweight, float* dbias, const A* dout, const A* inp,
                        const A* weight, const float* mean, const float* rstd, int N, int C) {
  float* scratch = static_cast<float*>(
      layernorm_scratch(cuda::layernorm_backward_scratch(N, C) * sizeof(float)));
  cuda::layernorm_backward(dev(dinp), dweight, dbias, dev(dout), dev(inp), dev(weight), mean, rstd,
                           N, C, scratch, kStream);
}
template <class A>
void linear_forward(A* out, const A* inp, const A* weight, const A* bias, int N, int IC, int OC) {
  cuda::linear_forward(dev(out), dev(inp), dev(weight), dev(bias), N, IC, OC, kStream);
}
template <class A>
void linear_backward(A* dinp, float* dweight, float* dbias, const A* dout, const A* inp,
                     const A* weight, int N, int IC, int OC) {
  cuda::linear_backward(dev(dinp), dweight, dbias, dev(dout), dev(inp), dev(weight), N, IC, OC,
                        kStream);
}
template <class A>
void linear_gelu_forward(A* pre, A* out, const A* inp, const A* weight, const A* bias, int N,
                         int IC, int OC) {
  cuda::linear_gelu_forward(dev(pre), dev(out), dev(inp), dev(weight), dev(bias), N, IC, OC,
                            kStream);
}
template <class A>
void gelu_forward(A* out, const A* inp, size_t n) {
  cuda::gelu_forward(dev(out), dev(inp), n, kStream);
}
template <class A>
void gelu_backward(A* dinp, const A* dout, const A* inp, size_t n) {
  cuda::gelu_backward(dev(dinp), dev(dout), dev(inp), n, kStream);
}
template <class A>
void relu_forward(A* out, const A* inp, size_t n) {
  cuda::relu_forward(dev(out), dev(inp), n, kStream);
}
template <class A>
void relu_backward(A* dinp, const A* dout, const A* inp, size_t n) {
  cuda::relu_backward(dev(dinp), dev(dout), dev(inp), n, kStream);
}
template <class A>
void gelu_erf_forward(A* out, const A* inp, size_t n) {
  cuda::gelu_erf_forward(dev(out), dev(inp), n, kStream);
}
template <class A>
void gelu_erf_backward(A* dinp, const A* dout, const A* inp, size_t n) {
  cuda::gelu_erf_backward(dev(dinp), dev(dout), dev(inp), n, kStream);
}
template <class A>
void tanh_forward(A* out, const A* inp, size_t n) {
  cuda::tanh_forward(dev(out), dev(inp), n, kStream);
}
template <class A>
void tanh_backward(A* dinp, const A* dout, const A* out, size_t n) {
  cuda::tanh_backward(dev(dinp), dev(dout), dev(out), n, kStream);
}
template <class A>
void copy_strided(A* dst, int dst_stride, const A* src, int src_stride, int rows, int cols) {
  cuda::copy_strided(dev(dst), dst_stride, dev(src), src_stride, rows, cols, kStream);
}
template <class A>
void gather_rows(A* dst, const A* src, const int32_t* index, int M, int C) {
  cuda::gather_rows(dev(dst), dev(src), index, M, C, kStream);
}
template <class A>
void scatter_add_rows(A* dst, const A* src, const int32_t* index, int M, int C) {
  cuda::scatter_add_rows(dev(dst), dev(src), index, M, C, kStream);
}
template <class A>
void add_table_rows(A* x, const A* table, const int32_t* index, int N, int C) {
  cuda::add_table_rows(dev(x), dev(table), index, N, C, kStream);
}
template <class A>
void table_rows_backward(float* dtable, const A* dout, const int32_t* index, int N, int C) {
  cuda::table_rows_backward(dtable, dev(dout), index, N, C, kStream);
}
// saved: the (B,NH,T) log-sum-exp; scratch: backward's (B,NH,T) rowsum(dout * out).
template <class A>
void attention_forward(A* out, float* saved, const A* qkv, int B, int T, int C, int NH, bool causal,
                       const int32_t* lengths) {
  cuda::attention_forward(dev(out), saved, dev(qkv), B, T, C, NH, causal, lengths, kStream);
}
template <class A>
void attention_backward(A* dqkv, float* scratch, const A* dout, const A* out, const A* qkv,
                        const float* saved, int B, int T, int C, int NH, bool causal,
                        const int32_t* lengths) {
  cuda::attention_backward(dev(dqkv), scratch, dev(dout), dev(out), dev(qkv), saved, B, T, C, NH,
                           causal, lengths, kStream);
}
size_t attention_saved_elements(int B, int NH, int T) {
  return size_t(B) * NH * T;
}
template <class A>
void dropout_forward(A* out, const A* inp, float p, const PhiloxStream& rng, uint64_t row0, int N,
                     int C) {
  cuda::dropout_forward(dev(out), dev(inp), p, rng, row0, N, C, kStream);
}
template <class A>
void dropout_backward(A* dinp, const A* dout, float p, const PhiloxStream& rng, uint64_t row0,
                      int N, int C) {
  cuda::dropout_backward(dev(dinp), dev(dout), p, rng, row0, N, C, kStream);
}
template <class A>
void residual_forward(A* out, const A* a, const A* b, size_t n) {
  cuda::residual_forward(dev(out), dev(a), dev(b), n, kStream);
}
template <class A>
void embedding_forward(A* out, const int32_t* tokens, const A* wte, const A* wpe, int B, int T,
                       int C) {
  cuda::embedding_forward(dev(out), tokens, dev(wte), dev(wpe), B, T, C, kStream);
}
template <class A>
void embedding_backward(float* dwte, float* dwpe, const A* dout, const int32_t* tokens, int B,
                        int T, int C) {
  void* scratch = embedding_scratch(cuda::embedding_backward_scratch_bytes(B, T));
  cuda::embedding_backward(dwte, dwpe, dev(dout), tokens, B, T, C, scratch, kStream);
}
template <class A>
void crossentropy_forward(float* losses, float* lse, const A* logits, const int32_t* targets, int N,
                          int V) {
  cuda::crossentropy_forward(losses, lse, dev(logits), targets, N, V, kStream);
}
template <class A>
void crossentropy_backward(A* dlogits, const A* logits, const float* lse, const int32_t* targets,
                           float dloss, int N, int V) {
  cuda::crossentropy_backward(dev(dlogits), dev(logits), lse, targets, dloss, N, V, kStream);
}
template <class A>
void crossentropy_padded_forward(float* losses, float* lse, const A* logits, const int32_t* targets,
                                 int N, int V, int Vp) {
  cuda::crossentropy_forward(losses, lse, dev(logits), targets, N, V, Vp, kStream);
}
template <class A>
void crossentropy_padded_backward(A* dlogits, const A* logits, const float* lse,
                                  const int32_t* targets, float dloss, int N, int V, int Vp) {
  cuda::crossentropy_backward(dev(dlogits), dev(logits), lse, targets, dloss, N, V, Vp, kStream);
}
template <class A>
void crossentropy_fused(float* losses, float* lse, A* logits, const int32_t* targets, float dloss,
                        int N, int V, int Vp) {
  cuda::crossentropy_fused(losses, lse, dev(logits), targets, dloss, N, V, Vp, kStream);
}
template <class A>
void lm_head_backward(A* dinp, float* dweight, const A* dout, const A* inp, const A* weight,
                      float dout_scale, int N, int IC, int OC) {
  cuda::linear_backward(dev(dinp), dweight, static_cast<float*>(nullptr), dev(dout), dev(inp),
                        dev(weight), N, IC, OC, kStream, dout_scale);
}

// ---- the convolutional families' layers ----
#ifdef MPITRON_HAVE_CUDNN
template <class A>
std::shared_ptr<const void> conv2d_plan(const cpu::Conv2dShape& s) {
  return cuda::conv2d_plan<typename Cuda<A>::type>(s);
}
const cuda::Conv2dCudnn& conv_plan(const void* plan) {
  return *static_cast<const cuda::Conv2dCudnn*>(plan);
}
template <class A>
size_t conv2d_workspace(const void* plan) {
  return (cuda::conv2d_workspace_bytes(conv_plan(plan)) + sizeof(A) - 1) / sizeof(A);
}
template <class A>
void conv2d_forward(A* out, A* workspace, const A* inp, const A* weight, const void* plan, int N) {
  cuda::conv2d_forward(dev(out), workspace, dev(inp), dev(weight), conv_plan(plan), N, kStream);
}
template <class A>
void conv2d_backward(A* dinp, float* dweight, A* workspace, const A* dout, const A* inp,
                     const A* weight, const void* plan, int N) {
  cuda::conv2d_backward(dev(dinp), dweight, workspace, dev(dout), dev(inp), dev(weight),
                        conv_plan(plan), N, kStream);
}
#endif
template <class A>
void batchnorm2d_forward(A* out, float* mean, float* rstd, const A* inp, const A* weight,
                         const A* bias, int N, int C, int HW, int G, float eps) {
  cuda::batchnorm2d_forward(dev(out), mean, rstd, dev(inp), dev(weight), dev(bias), N, C, HW, G,
                            eps, kStream);
}
template <class A>
void batchnorm2d_forward_eval(A* out, const A* inp, const A* weight, const A* bias,
                              const float* running_mean, const float* running_var, int N, int C,
                              int HW, float eps) {
  cuda::batchnorm2d_forward_eval(dev(out), dev(inp), dev(weight), dev(bias), running_mean,
                                 running_var, N, C, HW, eps, kStream);
}
template <class A>
void batchnorm2d_backward(A* dinp, float* dweight, float* dbias, const A* dout, const A* inp,
                          const A* weight, const float* mean, const float* rstd, int N, int C,
                          int HW, int G) {
  void* scratch = batchnorm_scratch(cuda::batchnorm2d_backward_scratch_bytes(N, C, G));
  cuda::batchnorm2d_backward(dev(dinp), dweight, dbias, dev(dout), dev(inp), dev(weight), mean,
                             rstd, N, C, HW, G, scratch, kStream);
}
void batchnorm2d_group_stats(double* mean_sum, double* var_sum, const float* mean,
                             const float* rstd, int groups, int C, int HW, int G, float eps) {
  cuda::batchnorm2d_group_stats(mean_sum, var_sum, mean, rstd, groups, C, HW, G, eps, kStream);
}
template <class A>
void maxpool2d_forward(A* out, int32_t* argmax, const A* inp, const cpu::Pool2dShape& s) {
  cuda::maxpool2d_forward(dev(out), argmax, dev(inp), s, kStream);
}
template <class A>
void maxpool2d_backward(A* dinp, const A* dout, const int32_t* argmax, const cpu::Pool2dShape& s) {
  cuda::maxpool2d_backward(dev(dinp), dev(dout), argmax, s, kStream);
}
template <class A>
void global_avgpool_forward(A* out, const A* inp, int N, int C, int HW) {
  cuda::global_avgpool_forward(dev(out), dev(inp), N, C, HW, kStream);
}
template <class A>
void global_avgpool_backward(A* dinp, const A* dout, int N, int C, int HW) {
  cuda::global_avgpool_backward(dev(dinp), dev(dout), N, C, HW, kStream);
}

// Tensor parallelism's pieces.
template <class A>
void add_bias_rows(A* x, const A* b, int N, int C) {
  cuda::add_bias_rows(dev(x), dev(b), N, C, kStream);
}
template <class A>
void embedding_shard_forward(A* out, const int32_t* tokens, const A* wte, int N, int C, int v0,
                             int Vl) {
  cuda::embedding_shard_forward(dev(out), tokens, dev(wte), N, C, v0, Vl, kStream);
}
template <class A>
void embedding_add_positions(A* out, const A* wpe, int B, int T, int C) {
  cuda::embedding_add_positions(dev(out), dev(wpe), B, T, C, kStream);
}
template <class A>
void embedding_shard_backward(float* dwte, float* dwpe, const A* dout, const int32_t* tokens, int B,
                              int T, int C, int v0, int Vl) {
  void* scratch = embedding_scratch(cuda::embedding_backward_scratch_bytes(B, T));
  cuda::embedding_shard_backward(dwte, dwpe, dev(dout), tokens, B, T, C, v0, Vl, scratch, kStream);
}
template <class A>
void crossentropy_shard_stats(float* row_max, float* target_logit, const A* logits,
                              const int32_t* targets, int N, int Vl, int v0, int V) {
  cuda::crossentropy_shard_stats(row_max, target_logit, dev(logits), targets, N, Vl, v0, V,
                                 kStream);
}
template <class A>
void crossentropy_shard_sumexp(float* sum, const A* logits, const float* row_max, int N, int Vl,
                               int v0, int V) {
  cuda::crossentropy_shard_sumexp(sum, dev(logits), row_max, N, Vl, v0, V, kStream);
}
void crossentropy_shard_loss(float* losses, float* lse, const float* row_max, const float* sum,
                             const float* target_logit, const int32_t* targets, int N) {
  cuda::crossentropy_shard_loss(losses, lse, row_max, sum, target_logit, targets, N, kStream);
}
template <class A>
void crossentropy_shard_backward(A* dlogits, const A* logits, const float* lse,
                                 const int32_t* targets, float dloss, int N, int Vl, int v0,
                                 int V) {
  cuda::crossentropy_shard_backward(dev(dlogits), dev(logits), lse, targets, dloss, N, Vl, v0, V,
                                    kStream);
}

template <class A>
const LayerOpsT<A>& table() {
  static constexpr LayerOpsT<A> ops{
      Device::cuda,
      zero<A>,
      copy<A>,
      cuda::upload_int32,
      cuda::upload,
      cuda::download,
      round_weights<A>,
      layernorm_forward<A>,
      layernorm_backward<A>,
      linear_forward<A>,
      linear_backward<A>,
      linear_gelu_forward<A>,
      gelu_forward<A>,
      gelu_backward<A>,
      relu_forward<A>,
      relu_backward<A>,
      gelu_erf_forward<A>,
      gelu_erf_backward<A>,
      tanh_forward<A>,
      tanh_backward<A>,
      copy_strided<A>,
      gather_rows<A>,
      scatter_add_rows<A>,
      add_table_rows<A>,
      table_rows_backward<A>,
      attention_forward<A>,
      attention_backward<A>,
      attention_saved_elements,
      dropout_forward<A>,
      dropout_backward<A>,
      residual_forward<A>,
      embedding_forward<A>,
      embedding_backward<A>,
      crossentropy_forward<A>,
      crossentropy_backward<A>,
      kLmHeadAlign,
      crossentropy_padded_forward<A>,
      crossentropy_padded_backward<A>,
      crossentropy_fused<A>,
      lm_head_backward<A>,
      nullptr,
      nullptr,
      cuda::upload_bytes,
      cuda::download_bytes,
#ifdef MPITRON_HAVE_CUDNN
      conv2d_plan<A>,
      conv2d_workspace<A>,
      conv2d_forward<A>,
      conv2d_backward<A>,
#else
      nullptr,  // convolutions need cuDNN
      nullptr,
      nullptr,
      nullptr,
#endif
      batchnorm2d_forward<A>,
      batchnorm2d_forward_eval<A>,
      batchnorm2d_backward<A>,
      nullptr,  // no fused kernel: batch norm, residual and ReLU run separately
      batchnorm2d_group_stats,
      maxpool2d_forward<A>,
      maxpool2d_backward<A>,
      global_avgpool_forward<A>,
      global_avgpool_backward<A>,
      add_bias_rows<A>,
      embedding_shard_forward<A>,
      embedding_add_positions<A>,
      embedding_shard_backward<A>,
      crossentropy_shard_stats<A>,
      crossentropy_shard_sumexp<A>,
      crossentropy_shard_loss,
      crossentropy_shard_backward<A>,
      cuda::attention_head_size_ok,
  };
  return ops;
}

}  // namespace

template <class A>
const LayerOpsT<A>& cuda_layer_ops() {
  return table<A>();
}
template const LayerOpsT<float>& cuda_layer_ops<float>();
template const LayerOpsT<bf16_t>& cuda_layer_ops<bf16_t>();
template const LayerOpsT<fp16_t>& cuda_layer_ops<fp16_t>();

}  // namespace mpitron
