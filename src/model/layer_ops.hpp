// The layers a model runs, as one table per device, chosen once when the model is built: call
// sites never branch on the device (as StepBackend does for the step's non-layer work). The CPU
// table holds layers/cpu; the CUDA table (src/cuda/layer_ops.cu) the layers/cuda twins on the
// calling thread's default stream. Arguments and contracts are the CPU layers' (layers/*.hpp);
// every pointer is in the device's memory except where "host" is said.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "base/device.hpp"
#include "base/philox.hpp"
#include "layers/conv2d.hpp"
#include "layers/pool.hpp"
#include "src/model/precision.hpp"

namespace mpitron {

// A: the storage type of activations and of the weights the layers read (float, bf16_t or
// fp16_t; src/model/precision.hpp); parameter gradients, losses, the log-sum-exp, LayerNorm's
// statistics and attention's saved softmax are float whatever A is.
template <class A>
struct LayerOpsT {
  Device device;

  // ---- memory ----
  void (*zero)(A* p, size_t n);
  void (*copy)(A* dst, const A* src, size_t n);
  void (*upload_int32)(int32_t* dst, const int32_t* host_src, size_t n);
  void (*upload)(float* dst, const float* host_src, size_t n);
  void (*download)(float* host_dst, const float* src, size_t n);  // waits for the device
  // The layers' weight copy from the fp32 master weights (rounded to nearest even; for float a
  // copy). Both in the device's memory.
  void (*round_weights)(A* dst, const float* src, size_t n);

  // ---- layers ----
  void (*layernorm_forward)(A* out, float* mean, float* rstd, const A* inp, const A* weight,
                            const A* bias, int N, int C, double eps);
  void (*layernorm_backward)(A* dinp, float* dweight, float* dbias, const A* dout, const A* inp,
                             const A* weight, const float* mean, const float* rstd, int N, int C);
  void (*linear_forward)(A* out, const A* inp, const A* weight, const A* bias, int N, int IC,
                         int OC);
  void (*linear_backward)(A* dinp, float* dweight, float* dbias, const A* dout, const A* inp,
                          const A* weight, int N, int IC, int OC);
  // pre = inp W^T + b, out = gelu(pre) (tanh GELU; pre kept for gelu_backward): the CUDA table
  // fuses the GELU into the matrix product's epilogue, the CPU's runs the two layers.
  void (*linear_gelu_forward)(A* pre, A* out, const A* inp, const A* weight, const A* bias, int N,
                              int IC, int OC);
  void (*gelu_forward)(A* out, const A* inp, size_t n);
  void (*gelu_backward)(A* dinp, const A* dout, const A* inp, size_t n);
  void (*relu_forward)(A* out, const A* inp, size_t n);
  void (*relu_backward)(A* dinp, const A* dout, const A* inp, size_t n);
  // The exact GELU (BERT's) and tanh (its pooler; backward reads forward's output).
  void (*gelu_erf_forward)(A* out, const A* inp, size_t n);
  void (*gelu_erf_backward)(A* dinp, const A* dout, const A* inp, size_t n);
  void (*tanh_forward)(A* out, const A* inp, size_t n);
  void (*tanh_backward)(A* dinp, const A* dout, const A* out, size_t n);

  // ---- rows by index (the encoder's token types, masked-LM rows and first tokens) ----
  // dst row r = cols elements at dst + r dst_stride, likewise src (a block of columns).
  void (*copy_strided)(A* dst, int dst_stride, const A* src, int src_stride, int rows, int cols);
  // dst[k] = src[index[k]] for k < M; rows of C.
  void (*gather_rows)(A* dst, const A* src, const int32_t* index, int M, int C);
  // dst[index[k]] += src[k] for k < M, the indices distinct.
  void (*scatter_add_rows)(A* dst, const A* src, const int32_t* index, int M, int C);
  // x[n] += table[index[n]] for n < N (a small embedding table added to every row).
  void (*add_table_rows)(A* x, const A* table, const int32_t* index, int N, int C);
  // Its backward: dtable[index[n]] += dout[n], n ascending (the same bits on every device).
  void (*table_rows_backward)(float* dtable, const A* dout, const int32_t* index, int N, int C);
  // saved: what backward needs of the softmax, attention_saved_elements(B, NH, T) of it (the CPU:
  // the (B,NH,T,T) probabilities; CUDA: the (B,NH,T) log-sum-exp). out is forward's output (the
  // CUDA backward reads it, the CPU's does not); scratch has as many elements as saved.
  void (*attention_forward)(A* out, float* saved, const A* qkv, int B, int T, int C, int NH,
                            bool causal, const int32_t* lengths);
  void (*attention_backward)(A* dqkv, float* scratch, const A* dout, const A* out, const A* qkv,
                             const float* saved, int B, int T, int C, int NH, bool causal,
                             const int32_t* lengths);
  size_t (*attention_saved_elements)(int B, int NH, int T);
  void (*dropout_forward)(A* out, const A* inp, float p, const PhiloxStream& rng, uint64_t row0,
                          int N, int C);
  void (*dropout_backward)(A* dinp, const A* dout, float p, const PhiloxStream& rng, uint64_t row0,
                           int N, int C);
  void (*residual_forward)(A* out, const A* a, const A* b, size_t n);
  void (*embedding_forward)(A* out, const int32_t* tokens, const A* wte, const A* wpe, int B, int T,
                            int C);
  void (*embedding_backward)(float* dwte, float* dwpe, const A* dout, const int32_t* tokens, int B,
                             int T, int C);
  void (*crossentropy_forward)(float* losses, float* lse, const A* logits, const int32_t* targets,
                               int N, int V);
  void (*crossentropy_backward)(A* dlogits, const A* logits, const float* lse,
                                const int32_t* targets, float dloss, int N, int V);

  // ---- the LM head (the GPT's tied wte) and its loss ----
  // Its vocabulary rows are padded to a multiple of this (ShardSpec::tp_pad_align): 1 on the CPU
  // (its bits never change), 128 on CUDA, so every LM-head product runs aligned tensor-core
  // kernels on any V. Padding rows are zero; their logits are left out of the softmax.
  int lm_head_align;
  // The cross-entropy above over the first V of each row of Vp >= V logits; backward writes 0 to
  // the Vp - V padding columns. Null where lm_head_align is 1 (the model never pads there).
  void (*crossentropy_padded_forward)(float* losses, float* lse, const A* logits,
                                      const int32_t* targets, int N, int V, int Vp);
  void (*crossentropy_padded_backward)(A* dlogits, const A* logits, const float* lse,
                                       const int32_t* targets, float dloss, int N, int V, int Vp);
  // Training's fused classifier, one pass over the (N,Vp) logits: losses and lse as forward, the
  // logits overwritten by (softmax - onehot) dloss (0 on padding), crossentropy_padded_backward's
  // dlogits (the same bits, rounded once to A after the scale, as the CPU's: a loss scale keeps
  // fp16's small gradients). Null: no fused kernel (the separate ones run).
  void (*crossentropy_fused)(float* losses, float* lse, A* logits, const int32_t* targets,
                             float dloss, int N, int V, int Vp);
  // linear_backward without a bias, dout scaled by dout_scale inside the products: dinp =
  // s dout W, dweight += s dout^T inp. Null with crossentropy_fused.
  void (*lm_head_backward)(A* dinp, float* dweight, const A* dout, const A* inp, const A* weight,
                           float dout_scale, int N, int IC, int OC);
  // Rows of an (N,C) matrix moved in place by M ascending row indices (a host array, rows[j] >= j):
  // compact_rows brings row rows[j] to row j; expand_rows takes row j back to row rows[j] and
  // zeroes the other N - M rows. The LM head on the loss rows alone. Null: the head runs every row.
  void (*compact_rows)(A* x, const int32_t* rows, int M, int C);
  void (*expand_rows)(A* x, const int32_t* rows, int M, int N, int C);

  // ---- the convolutional families' layers (NCHW; the convolutions null in a CUDA build without
  // cuDNN) ----
  // Raw host <-> device copies (batch norm's double statistics sums); download waits.
  void (*upload_bytes)(void* dst, const void* host_src, size_t bytes);
  void (*download_bytes)(void* host_dst, const void* src, size_t bytes);
  // A convolution's kernels for one shape, made once (the CPU: oneDNN's primitives or im2col;
  // CUDA: cuDNN's descriptors and deterministic algorithms; null where the build has no cuDNN)
  // and used by every call on up to shape.N images; calls on one plan must not overlap.
  std::shared_ptr<const void> (*conv2d_plan)(const cpu::Conv2dShape& shape);
  size_t (*conv2d_workspace)(const void* plan);  // elements of A a call on the plan needs
  void (*conv2d_forward)(A* out, A* workspace, const A* inp, const A* weight, const void* plan,
                         int N);  // no bias (batch norm follows)
  void (*conv2d_backward)(A* dinp, float* dweight, A* workspace, const A* dout, const A* inp,
                          const A* weight, const void* plan, int N);  // dinp may be null
  void (*batchnorm2d_forward)(A* out, float* mean, float* rstd, const A* inp, const A* weight,
                              const A* bias, int N, int C, int HW, int G, float eps);
  void (*batchnorm2d_forward_eval)(A* out, const A* inp, const A* weight, const A* bias,
                                   const float* running_mean, const float* running_var, int N,
                                   int C, int HW, float eps);
  void (*batchnorm2d_backward)(A* dinp, float* dweight, float* dbias, const A* dout, const A* inp,
                               const A* weight, const float* mean, const float* rstd, int N, int C,
                               int HW, int G);
  // batchnorm2d_forward with what follows it in a conv unit written by the same pass:
  // out = relu(bn(inp) + residual), or relu(bn(inp)) where residual is null (the same bits as
  // the separate layers). Null: the separate layers run.
  void (*batchnorm2d_add_relu_forward)(A* out, float* mean, float* rstd, const A* inp,
                                       const A* weight, const A* bias, const A* residual, int N,
                                       int C, int HW, int G, float eps);
  // The groups' statistics added to (C) double sums in the device's memory, groups in order.
  void (*batchnorm2d_group_stats)(double* mean_sum, double* var_sum, const float* mean,
                                  const float* rstd, int groups, int C, int HW, int G, float eps);
  void (*maxpool2d_forward)(A* out, int32_t* argmax, const A* inp, const cpu::Pool2dShape& s);
  void (*maxpool2d_backward)(A* dinp, const A* dout, const int32_t* argmax,
                             const cpu::Pool2dShape& s);
  void (*global_avgpool_forward)(A* out, const A* inp, int N, int C, int HW);
  void (*global_avgpool_backward)(A* dinp, const A* dout, int N, int C, int HW);

  // ---- tensor parallelism's pieces between its all-reduces (src/model/tensor_parallel.hpp) ----
  // x[n,:] += b for n < N: a row-parallel linear's replicated bias, after the sum over TP.
  void (*add_bias_rows)(A* x, const A* b, int N, int C);
  // The vocab-parallel embedding and cross-entropy on a shard of vocabulary rows [v0, v0+Vl)
  // (layers/embedding.hpp, layers/crossentropy.hpp: embedding_shard_*, crossentropy_shard_*).
  void (*embedding_shard_forward)(A* out, const int32_t* tokens, const A* wte, int N, int C, int v0,
                                  int Vl);
  void (*embedding_add_positions)(A* out, const A* wpe, int B, int T, int C);
  void (*embedding_shard_backward)(float* dwte, float* dwpe, const A* dout, const int32_t* tokens,
                                   int B, int T, int C, int v0, int Vl);
  void (*crossentropy_shard_stats)(float* row_max, float* target_logit, const A* logits,
                                   const int32_t* targets, int N, int Vl, int v0, int V);
  void (*crossentropy_shard_sumexp)(float* sum, const A* logits, const float* row_max, int N,
                                    int Vl, int v0, int V);
  void (*crossentropy_shard_loss)(float* losses, float* lse, const float* row_max, const float* sum,
                                  const float* target_logit, const int32_t* targets, int N);
  void (*crossentropy_shard_backward)(A* dlogits, const A* logits, const float* lse,
                                      const int32_t* targets, float dloss, int N, int Vl, int v0,
                                      int V);

  // Whether the attention takes heads of this size (null: any), asked before a model allocates.
  bool (*attention_head_size_ok)(int head_size);
};

// UsageError, before any allocation, where the layers' attention does not take heads of
// n_embd / n_head (the CUDA kernels' tiles take 32, 64 or 128).
void require_attention_head_size(bool (*head_size_ok)(int), Device device, int n_embd, int n_head);
template <class A>
void require_attention_head_size(const LayerOpsT<A>& L, int n_embd, int n_head) {
  require_attention_head_size(L.attention_head_size_ok, L.device, n_embd, n_head);
}

using LayerOps = LayerOpsT<float>;

const LayerOps& cpu_layer_ops();
#ifdef MPITRON_HAVE_CUDA
template <class A>
const LayerOpsT<A>& cuda_layer_ops();  // src/cuda/layer_ops.cu
#endif

// n elements of A at src (the device's memory) as floats the host can read: src itself on the CPU
// in fp32, else a copy in `out` (downloaded, and widened from A through `staging`).
template <class A>
const float* host_floats(const LayerOpsT<A>& L, const A* src, size_t n, std::vector<float>& out,
                         std::vector<A>& staging) {
  if constexpr (std::is_same_v<A, float>) {
    if (L.device == Device::cpu) return src;
    out.resize(n);
    L.download(out.data(), src, n);
  } else {
    staging.resize(n);
    L.download_bytes(staging.data(), src, n * sizeof(A));
    out.resize(n);
    widen(out.data(), staging.data(), n);
  }
  return out.data();
}

// The device's layers in storage type A: cpu, cpu_staged (the CPU's under a device's paths) or
// cuda. The CPU's
// bf16/fp16 tables widen every input to float, run the CPU layer and round every output: the
// GPU's storage rounding on the host, slower than fp32 (a reference, and mixed precision where no
// GPU is). UsageError for a device this build has no layers for.
template <class A>
const LayerOpsT<A>& layer_ops(Device device);

}  // namespace mpitron
