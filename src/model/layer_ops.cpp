#include "src/model/layer_ops.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/check.hpp"
#include "base/staged_memory.hpp"
#include "layers/attention.hpp"
#include "layers/batchnorm.hpp"
#include "layers/conv2d.hpp"
#include "layers/crossentropy.hpp"
#include "layers/dropout.hpp"
#include "layers/embedding.hpp"
#include "layers/gelu.hpp"
#include "layers/layernorm.hpp"
#include "layers/linear.hpp"
#include "layers/pool.hpp"
#include "layers/relu.hpp"
#include "layers/residual.hpp"
#include "layers/tanh.hpp"
#include "src/cpu/step_ops.hpp"

namespace mpitron {

void require_attention_head_size(bool (*head_size_ok)(int), Device device, int n_embd, int n_head) {
  if (!head_size_ok || n_head < 1 || n_embd % n_head != 0) return;
  const int hs = n_embd / n_head;
  if (!head_size_ok(hs))
    throw UsageError(fmt::format(
        "--device {}: its attention takes heads of 32, 64 or 128 elements, and n_embd / n_head "
        "is {} / {} = {}",
        device_name(device), n_embd, n_head, hs));
}

namespace {

void upload_int32(int32_t* dst, const int32_t* src, size_t n) {
  std::copy_n(src, n, dst);
}
void copy_floats(float* dst, const float* src, size_t n) {
  std::copy_n(src, n, dst);
}
void attention_forward(float* out, float* saved, const float* qkv, int B, int T, int C, int NH,
                       bool causal, const int32_t* lengths) {
  cpu::attention_forward(out, saved, qkv, B, T, C, NH, causal, lengths);
}
void attention_backward(float* dqkv, float* scratch, const float* dout, const float*,
                        const float* qkv, const float* saved, int B, int T, int C, int NH,
                        bool causal, const int32_t* lengths) {
  cpu::attention_backward(dqkv, scratch, dout, qkv, saved, B, T, C, NH, causal, lengths);
}
size_t attention_saved_elements(int B, int NH, int T) {
  return size_t(B) * NH * T * T;
}
void linear_gelu_forward(float* pre, float* out, const float* inp, const float* weight,
                         const float* bias, int N, int IC, int OC) {
  cpu::linear_forward(pre, inp, weight, bias, N, IC, OC);
  cpu::gelu_forward(out, pre, size_t(N) * OC);
}

template <class A>
void copy_strided(A* dst, int dst_stride, const A* src, int src_stride, int rows, int cols) {
#pragma omp parallel for schedule(static) if (size_t(rows) * size_t(cols) >= (size_t(1) << 16))
  for (int r = 0; r < rows; ++r)
    std::memcpy(static_cast<void*>(dst + size_t(r) * dst_stride), src + size_t(r) * src_stride,
                sizeof(A) * size_t(cols));
}
template <class A>
void gather_rows(A* dst, const A* src, const int32_t* index, int M, int C) {
  for (int k = 0; k < M; ++k)
    std::memcpy(static_cast<void*>(dst + size_t(k) * C), src + size_t(index[k]) * C,
                sizeof(A) * size_t(C));
}
void scatter_add_rows(float* dst, const float* src, const int32_t* index, int M, int C) {
  for (int k = 0; k < M; ++k) {
    float* d = dst + size_t(index[k]) * C;
    const float* g = src + size_t(k) * C;
    for (int c = 0; c < C; ++c) d[c] += g[c];
  }
}
void add_table_rows(float* x, const float* table, const int32_t* index, int N, int C) {
  for (int n = 0; n < N; ++n) {
    const float* t = table + size_t(index[n]) * C;
    float* e = x + size_t(n) * C;
    for (int c = 0; c < C; ++c) e[c] += t[c];
  }
}
void add_bias_rows(float* x, const float* b, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* row = x + ptrdiff_t(n) * C;
    for (int c = 0; c < C; ++c) row[c] += b[c];
  }
}
void table_rows_backward(float* dtable, const float* dout, const int32_t* index, int N, int C) {
  for (int n = 0; n < N; ++n) {
    float* d = dtable + size_t(index[n]) * C;
    const float* g = dout + size_t(n) * C;
    for (int c = 0; c < C; ++c) d[c] += g[c];
  }
}

template <class A>
void compact_rows(A* x, const int32_t* rows, int M, int C) {
  const size_t row_bytes = size_t(C) * sizeof(A);
  for (int j = 0; j < M; ++j)
    if (rows[j] != j)
      std::memcpy(static_cast<void*>(x + size_t(j) * C), x + size_t(rows[j]) * C, row_bytes);
}

// From the last row down: row j's destination rows[j] >= j never holds a row not yet moved.
template <class A>
void expand_rows(A* x, const int32_t* rows, int M, int N, int C) {
  const size_t row_bytes = size_t(C) * sizeof(A);
  int above = N;  // rows from here on are final
  for (int j = M - 1; j >= 0; --j) {
    const int r = rows[j];
    std::memset(static_cast<void*>(x + size_t(r + 1) * C), 0, size_t(above - r - 1) * row_bytes);
    if (r != j) std::memcpy(static_cast<void*>(x + size_t(r) * C), x + size_t(j) * C, row_bytes);
    above = r;
  }
  std::memset(static_cast<void*>(x), 0, size_t(above) * row_bytes);  // +0: all zero bits
}

void copy_bytes(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
std::shared_ptr<const void> conv2d_plan(const cpu::Conv2dShape& s) {
  return std::make_shared<const cpu::Conv2dPlan>(cpu::conv2d_plan(s));
}
const cpu::Conv2dPlan& conv_plan(const void* plan) {
  return *static_cast<const cpu::Conv2dPlan*>(plan);
}
size_t conv2d_workspace(const void* plan) {
  return cpu::conv2d_workspace(conv_plan(plan));
}
void conv2d_forward(float* out, float* workspace, const float* inp, const float* weight,
                    const void* plan, int N) {
  cpu::conv2d_forward(out, workspace, inp, weight, static_cast<const float*>(nullptr),
                      conv_plan(plan), N);
}
void conv2d_backward(float* dinp, float* dweight, float* workspace, const float* dout,
                     const float* inp, const float* weight, const void* plan, int N) {
  cpu::conv2d_backward(dinp, dweight, static_cast<float*>(nullptr), workspace, dout, inp, weight,
                       conv_plan(plan), N);
}

// The CPU's layers, and (kStaged) the same under another name: a model on "cpu-staged" takes the
// paths of a device whose memory the host cannot read (uploads, downloads), with the CPU's math.
template <bool kStaged>
constexpr LayerOps kHostLayers{
    kStaged ? Device::cpu_staged : Device::cpu,
    cpu::zero,
    cpu::copy,
    upload_int32,
    copy_floats,
    copy_floats,
    copy_floats,
    cpu::layernorm_forward<float>,
    cpu::layernorm_backward<float>,
    cpu::linear_forward<float>,
    cpu::linear_backward<float>,
    linear_gelu_forward,
    cpu::gelu_forward<float>,
    cpu::gelu_backward<float>,
    cpu::relu_forward<float>,
    cpu::relu_backward<float>,
    cpu::gelu_erf_forward<float>,
    cpu::gelu_erf_backward<float>,
    cpu::tanh_forward<float>,
    cpu::tanh_backward<float>,
    copy_strided<float>,
    gather_rows<float>,
    scatter_add_rows,
    add_table_rows,
    table_rows_backward,
    attention_forward,
    attention_backward,
    attention_saved_elements,
    cpu::dropout_forward<float>,
    cpu::dropout_backward<float>,
    cpu::residual_forward<float>,
    cpu::embedding_forward<float>,
    cpu::embedding_backward<float>,
    cpu::crossentropy_forward<float>,
    cpu::crossentropy_backward<float>,
    1,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    compact_rows<float>,
    expand_rows<float>,
    copy_bytes,
    copy_bytes,
    conv2d_plan,
    conv2d_workspace,
    conv2d_forward,
    conv2d_backward,
    cpu::batchnorm2d_forward<float>,
    cpu::batchnorm2d_forward_eval<float>,
    cpu::batchnorm2d_backward<float>,
    // cpu-staged runs the separate layers: the staged tests compare the two paths bit for bit
    kStaged ? nullptr : cpu::batchnorm2d_add_relu_forward<float>,
    cpu::batchnorm2d_group_stats<float>,
    cpu::maxpool2d_forward<float>,
    cpu::maxpool2d_backward<float>,
    cpu::global_avgpool_forward<float>,
    cpu::global_avgpool_backward<float>,
    add_bias_rows,
    cpu::embedding_shard_forward<float>,
    cpu::embedding_add_positions<float>,
    cpu::embedding_shard_backward<float>,
    cpu::crossentropy_shard_stats<float>,
    cpu::crossentropy_shard_sumexp<float>,
    cpu::crossentropy_shard_loss<float>,
    cpu::crossentropy_shard_backward<float>,
    nullptr,
};

// ---- bf16/fp16 storage on the CPU: every 16-bit input widened to float, the CPU layer, every
// 16-bit output rounded once (as the CUDA kernels: fp32 math, one rounding per output) ----

// Float copies of one call's 16-bit arguments: a pool per thread, grown to the largest call and
// kept, so a step allocates nothing after the first.
class Widened {
 public:
  template <class A>
  const float* in(const A* p, size_t n) {
    if (!p) return nullptr;
    float* f = out(n);
    widen(f, p, n);
    return f;
  }
  float* out(size_t n) {
    thread_local std::vector<std::vector<float>> pool;
    if (next_ == pool.size()) pool.emplace_back();
    std::vector<float>& v = pool[next_++];
    if (v.size() < n) v.resize(n);
    return v.data();
  }

 private:
  size_t next_ = 0;
};

template <class A>
void zero_16(A* p, size_t n) {
  std::memset(static_cast<void*>(p), 0, n * sizeof(A));  // +0 is all zero bits in both formats
}
template <class A>
void copy_16(A* dst, const A* src, size_t n) {
  std::copy_n(src, n, dst);
}
template <class A>
void round_weights_16(A* dst, const float* src, size_t n) {
  round_to(dst, src, n);
}
template <class A>
void layernorm_forward_16(A* out, float* mean, float* rstd, const A* inp, const A* weight,
                          const A* bias, int N, int C, double eps) {
  Widened w;
  const size_t NC = size_t(N) * C;
  float* o = w.out(NC);
  cpu::layernorm_forward(o, mean, rstd, w.in(inp, NC), w.in(weight, C), w.in(bias, C), N, C, eps);
  round_to(out, o, NC);
}
template <class A>
void layernorm_backward_16(A* dinp, float* dweight, float* dbias, const A* dout, const A* inp,
                           const A* weight, const float* mean, const float* rstd, int N, int C) {
  Widened w;
  const size_t NC = size_t(N) * C;
  float* di = const_cast<float*>(w.in(dinp, NC));  // += : starts from dinp
  cpu::layernorm_backward(di, dweight, dbias, w.in(dout, NC), w.in(inp, NC), w.in(weight, C), mean,
                          rstd, N, C);
  round_to(dinp, di, NC);
}
template <class A>
void linear_forward_16(A* out, const A* inp, const A* weight, const A* bias, int N, int IC,
                       int OC) {
  Widened w;
  float* o = w.out(size_t(N) * OC);
  cpu::linear_forward(o, w.in(inp, size_t(N) * IC), w.in(weight, size_t(OC) * IC), w.in(bias, OC),
                      N, IC, OC);
  round_to(out, o, size_t(N) * OC);
}
template <class A>
void linear_backward_16(A* dinp, float* dweight, float* dbias, const A* dout, const A* inp,
                        const A* weight, int N, int IC, int OC) {
  Widened w;
  float* di = dinp ? w.out(size_t(N) * IC) : nullptr;
  cpu::linear_backward(di, dweight, dbias, w.in(dout, size_t(N) * OC), w.in(inp, size_t(N) * IC),
                       w.in(weight, size_t(OC) * IC), N, IC, OC);
  if (dinp) round_to(dinp, di, size_t(N) * IC);
}
template <class A>
void gelu_forward_16(A* out, const A* inp, size_t n) {
  Widened w;
  float* o = w.out(n);
  cpu::gelu_forward(o, w.in(inp, n), n);
  round_to(out, o, n);
}
template <class A>
void linear_gelu_forward_16(A* pre, A* out, const A* inp, const A* weight, const A* bias, int N,
                            int IC, int OC) {
  linear_forward_16(pre, inp, weight, bias, N, IC, OC);
  gelu_forward_16(out, pre, size_t(N) * OC);
}
// out = f(a) elementwise (relu_forward).
template <class A, void (*f)(float*, const float*, size_t)>
void unary_16(A* out, const A* a, size_t n) {
  Widened w;
  float* o = w.out(n);
  f(o, w.in(a, n), n);
  round_to(out, o, n);
}
// out = f(a, b) elementwise (gelu_backward, relu_backward, residual_forward).
template <class A, void (*f)(float*, const float*, const float*, size_t)>
void binary_16(A* out, const A* a, const A* b, size_t n) {
  Widened w;
  float* o = w.out(n);
  f(o, w.in(a, n), w.in(b, n), n);
  round_to(out, o, n);
}
template <class A>
void attention_forward_16(A* out, float* saved, const A* qkv, int B, int T, int C, int NH,
                          bool causal, const int32_t* lengths) {
  Widened w;
  const size_t BT = size_t(B) * T;
  float* o = w.out(BT * C);
  cpu::attention_forward(o, saved, w.in(qkv, BT * 3 * C), B, T, C, NH, causal, lengths);
  round_to(out, o, BT * C);
}
template <class A>
void attention_backward_16(A* dqkv, float* scratch, const A* dout, const A*, const A* qkv,
                           const float* saved, int B, int T, int C, int NH, bool causal,
                           const int32_t* lengths) {
  Widened w;
  const size_t BT = size_t(B) * T;
  float* d = w.out(BT * 3 * C);
  cpu::attention_backward(d, scratch, w.in(dout, BT * C), w.in(qkv, BT * 3 * C), saved, B, T, C, NH,
                          causal, lengths);
  round_to(dqkv, d, BT * 3 * C);
}
// Dropout's forward and backward have one shape: out = mask(in) / (1 - p).
template <class A, void (*f)(float*, const float*, float, const PhiloxStream&, uint64_t, int, int)>
void dropout_16(A* out, const A* inp, float p, const PhiloxStream& rng, uint64_t row0, int N,
                int C) {
  Widened w;
  const size_t NC = size_t(N) * C;
  float* o = w.out(NC);
  f(o, w.in(inp, NC), p, rng, row0, N, C);
  round_to(out, o, NC);
}
// wte's and wpe's sizes are not arguments: only the rows the tokens and positions name are read.
template <class A>
void embedding_forward_16(A* out, const int32_t* tokens, const A* wte, const A* wpe, int B, int T,
                          int C) {
  Widened w;
  float* e = w.out(size_t(C));
  float* p = w.out(size_t(C));
  for (int i = 0; i < B * T; ++i) {
    widen(e, wte + size_t(tokens[i]) * C, size_t(C));
    widen(p, wpe + size_t(i % T) * C, size_t(C));
    for (int c = 0; c < C; ++c) e[c] += p[c];
    round_to(out + size_t(i) * C, e, size_t(C));
  }
}
template <class A>
void embedding_backward_16(float* dwte, float* dwpe, const A* dout, const int32_t* tokens, int B,
                           int T, int C) {
  Widened w;
  cpu::embedding_backward(dwte, dwpe, w.in(dout, size_t(B) * T * C), tokens, B, T, C);
}
template <class A>
void crossentropy_forward_16(float* losses, float* lse, const A* logits, const int32_t* targets,
                             int N, int V) {
  Widened w;
  cpu::crossentropy_forward(losses, lse, w.in(logits, size_t(N) * V), targets, N, V);
}
template <class A>
void crossentropy_backward_16(A* dlogits, const A* logits, const float* lse, const int32_t* targets,
                              float dloss, int N, int V) {
  Widened w;
  const size_t NV = size_t(N) * V;
  float* d = w.out(NV);
  cpu::crossentropy_backward(d, w.in(logits, NV), lse, targets, dloss, N, V);
  round_to(dlogits, d, NV);
}

// Tensor parallelism's pieces: the same widening and one rounding per output.
template <class A>
void add_bias_rows_16(A* x, const A* b, int N, int C) {
  Widened w;
  const size_t NC = size_t(N) * C;
  float* o = w.out(NC);
  widen(o, x, NC);
  add_bias_rows(o, w.in(b, size_t(C)), N, C);
  round_to(x, o, NC);
}
template <class A>
void embedding_shard_forward_16(A* out, const int32_t* tokens, const A* wte, int N, int C, int v0,
                                int Vl) {
  const size_t row_bytes = size_t(C) * sizeof(A);  // rows copied: no rounding
  for (int i = 0; i < N; ++i) {
    const int v = tokens[i] - v0;
    void* o = out + size_t(i) * C;
    if (v >= 0 && v < Vl)
      std::memcpy(o, wte + size_t(v) * C, row_bytes);
    else
      std::memset(o, 0, row_bytes);  // +0 is all zero bits in both formats
  }
}
template <class A>
void embedding_add_positions_16(A* out, const A* wpe, int B, int T, int C) {
  Widened w;
  const size_t NC = size_t(B) * T * C;
  float* o = w.out(NC);
  widen(o, out, NC);
  cpu::embedding_add_positions(o, w.in(wpe, size_t(T) * C), B, T, C);
  round_to(out, o, NC);
}
template <class A>
void embedding_shard_backward_16(float* dwte, float* dwpe, const A* dout, const int32_t* tokens,
                                 int B, int T, int C, int v0, int Vl) {
  Widened w;
  cpu::embedding_shard_backward(dwte, dwpe, w.in(dout, size_t(B) * T * C), tokens, B, T, C, v0, Vl);
}
template <class A>
void crossentropy_shard_stats_16(float* row_max, float* target_logit, const A* logits,
                                 const int32_t* targets, int N, int Vl, int v0, int V) {
  Widened w;
  cpu::crossentropy_shard_stats(row_max, target_logit, w.in(logits, size_t(N) * Vl), targets, N, Vl,
                                v0, V);
}
template <class A>
void crossentropy_shard_sumexp_16(float* sum, const A* logits, const float* row_max, int N, int Vl,
                                  int v0, int V) {
  Widened w;
  cpu::crossentropy_shard_sumexp(sum, w.in(logits, size_t(N) * Vl), row_max, N, Vl, v0, V);
}
template <class A>
void crossentropy_shard_backward_16(A* dlogits, const A* logits, const float* lse,
                                    const int32_t* targets, float dloss, int N, int Vl, int v0,
                                    int V) {
  Widened w;
  const size_t NV = size_t(N) * Vl;
  float* d = w.out(NV);
  cpu::crossentropy_shard_backward(d, w.in(logits, NV), lse, targets, dloss, N, Vl, v0, V);
  round_to(dlogits, d, NV);
}

// Rows by index: each touched row widened, the fp32 sum rounded once (as the CUDA kernels).
template <class A>
void scatter_add_rows_16(A* dst, const A* src, const int32_t* index, int M, int C) {
  Widened w;
  float* d = w.out(size_t(C));
  float* g = w.out(size_t(C));
  for (int k = 0; k < M; ++k) {
    A* row = dst + size_t(index[k]) * C;
    widen(d, row, size_t(C));
    widen(g, src + size_t(k) * C, size_t(C));
    for (int c = 0; c < C; ++c) d[c] += g[c];
    round_to(row, d, size_t(C));
  }
}
template <class A>
void add_table_rows_16(A* x, const A* table, const int32_t* index, int N, int C) {
  Widened w;
  float* e = w.out(size_t(C));
  float* t = w.out(size_t(C));
  for (int n = 0; n < N; ++n) {
    widen(e, x + size_t(n) * C, size_t(C));
    widen(t, table + size_t(index[n]) * C, size_t(C));
    for (int c = 0; c < C; ++c) e[c] += t[c];
    round_to(x + size_t(n) * C, e, size_t(C));
  }
}
template <class A>
void table_rows_backward_16(float* dtable, const A* dout, const int32_t* index, int N, int C) {
  Widened w;
  float* g = w.out(size_t(C));
  for (int n = 0; n < N; ++n) {
    widen(g, dout + size_t(n) * C, size_t(C));
    float* d = dtable + size_t(index[n]) * C;
    for (int c = 0; c < C; ++c) d[c] += g[c];
  }
}

// The convolutional families: the float kernels' plan and workspace (its bytes counted in
// elements of A), every 16-bit tensor widened, each output rounded once. The weight gradient of a
// call is rounded to A too before its fp32 sum, as cuDNN writes it on 16-bit data (and as
// PyTorch's autocast keeps it): fp16's range then bounds it, the loss scale included.
template <class A>
size_t conv2d_workspace_16(const void* plan) {
  return conv2d_workspace(plan) * (sizeof(float) / sizeof(A));
}
template <class A>
void conv2d_forward_16(A* out, A* workspace, const A* inp, const A* weight, const void* plan,
                       int N) {
  const cpu::Conv2dShape& s = conv_plan(plan).shape;
  const size_t in = size_t(N) * s.IC * s.H * s.W, o = size_t(N) * s.OC * s.OH() * s.OW();
  Widened w;
  float* f = w.out(o);
  conv2d_forward(f, reinterpret_cast<float*>(workspace), w.in(inp, in),
                 w.in(weight, size_t(s.OC) * s.IC * s.KH * s.KW), plan, N);
  round_to(out, f, o);
}
template <class A>
void conv2d_backward_16(A* dinp, float* dweight, A* workspace, const A* dout, const A* inp,
                        const A* weight, const void* plan, int N) {
  const cpu::Conv2dShape& s = conv_plan(plan).shape;
  const size_t in = size_t(N) * s.IC * s.H * s.W, o = size_t(N) * s.OC * s.OH() * s.OW();
  const size_t nw = size_t(s.OC) * s.IC * s.KH * s.KW;
  Widened w;
  float* di = dinp ? w.out(in) : nullptr;
  float* dw = w.out(nw);
  std::fill_n(dw, nw, 0.0f);
  conv2d_backward(di, dw, reinterpret_cast<float*>(workspace), w.in(dout, o), w.in(inp, in),
                  w.in(weight, nw), plan, N);
  if (dinp) round_to(dinp, di, in);
  A* dw16 = reinterpret_cast<A*>(w.out((nw + 1) / 2));  // nw elements of A in float storage
  round_to(dw16, dw, nw);
  widen(dw, dw16, nw);
  for (size_t k = 0; k < nw; ++k) dweight[k] += dw[k];
}
template <class A>
void batchnorm2d_forward_16(A* out, float* mean, float* rstd, const A* inp, const A* weight,
                            const A* bias, int N, int C, int HW, int G, float eps) {
  const size_t n = size_t(N) * C * HW;
  Widened w;
  float* o = w.out(n);
  cpu::batchnorm2d_forward(o, mean, rstd, w.in(inp, n), w.in(weight, size_t(C)),
                           w.in(bias, size_t(C)), N, C, HW, G, eps);
  round_to(out, o, n);
}
template <class A>
void batchnorm2d_forward_eval_16(A* out, const A* inp, const A* weight, const A* bias,
                                 const float* running_mean, const float* running_var, int N, int C,
                                 int HW, float eps) {
  const size_t n = size_t(N) * C * HW;
  Widened w;
  float* o = w.out(n);
  cpu::batchnorm2d_forward_eval(o, w.in(inp, n), w.in(weight, size_t(C)), w.in(bias, size_t(C)),
                                running_mean, running_var, N, C, HW, eps);
  round_to(out, o, n);
}
template <class A>
void batchnorm2d_backward_16(A* dinp, float* dweight, float* dbias, const A* dout, const A* inp,
                             const A* weight, const float* mean, const float* rstd, int N, int C,
                             int HW, int G) {
  const size_t n = size_t(N) * C * HW;
  Widened w;
  float* di = w.out(n);
  cpu::batchnorm2d_backward(di, dweight, dbias, w.in(dout, n), w.in(inp, n),
                            w.in(weight, size_t(C)), mean, rstd, N, C, HW, G);
  round_to(dinp, di, n);
}
// Max pooling moves values: its outputs are inputs (no rounding changes them).
template <class A>
void maxpool2d_forward_16(A* out, int32_t* argmax, const A* inp, const cpu::Pool2dShape& s) {
  const size_t in = size_t(s.N) * s.C * s.H * s.W, o = size_t(s.N) * s.C * s.OH() * s.OW();
  Widened w;
  float* f = w.out(o);
  cpu::maxpool2d_forward(f, argmax, w.in(inp, in), s);
  round_to(out, f, o);
}
template <class A>
void maxpool2d_backward_16(A* dinp, const A* dout, const int32_t* argmax,
                           const cpu::Pool2dShape& s) {
  const size_t in = size_t(s.N) * s.C * s.H * s.W, o = size_t(s.N) * s.C * s.OH() * s.OW();
  Widened w;
  float* f = w.out(in);
  cpu::maxpool2d_backward(f, w.in(dout, o), argmax, s);
  round_to(dinp, f, in);
}
template <class A>
void global_avgpool_forward_16(A* out, const A* inp, int N, int C, int HW) {
  Widened w;
  float* f = w.out(size_t(N) * C);
  cpu::global_avgpool_forward(f, w.in(inp, size_t(N) * C * HW), N, C, HW);
  round_to(out, f, size_t(N) * C);
}
template <class A>
void global_avgpool_backward_16(A* dinp, const A* dout, int N, int C, int HW) {
  Widened w;
  float* f = w.out(size_t(N) * C * HW);
  cpu::global_avgpool_backward(f, w.in(dout, size_t(N) * C), N, C, HW);
  round_to(dinp, f, size_t(N) * C * HW);
}

// The CPU's 16-bit layers, as kHostLayers.
template <class A, bool kStaged>
constexpr LayerOpsT<A> kHost16Layers{
    kStaged ? Device::cpu_staged : Device::cpu,
    zero_16<A>,
    copy_16<A>,
    upload_int32,
    copy_floats,
    copy_floats,
    round_weights_16<A>,
    layernorm_forward_16<A>,
    layernorm_backward_16<A>,
    linear_forward_16<A>,
    linear_backward_16<A>,
    linear_gelu_forward_16<A>,
    gelu_forward_16<A>,
    binary_16<A, cpu::gelu_backward<float>>,
    unary_16<A, cpu::relu_forward<float>>,
    binary_16<A, cpu::relu_backward<float>>,
    unary_16<A, cpu::gelu_erf_forward<float>>,
    binary_16<A, cpu::gelu_erf_backward<float>>,
    unary_16<A, cpu::tanh_forward<float>>,
    binary_16<A, cpu::tanh_backward<float>>,
    copy_strided<A>,
    gather_rows<A>,
    scatter_add_rows_16<A>,
    add_table_rows_16<A>,
    table_rows_backward_16<A>,
    attention_forward_16<A>,
    attention_backward_16<A>,
    attention_saved_elements,
    dropout_16<A, cpu::dropout_forward<float>>,
    dropout_16<A, cpu::dropout_backward<float>>,
    binary_16<A, cpu::residual_forward<float>>,
    embedding_forward_16<A>,
    embedding_backward_16<A>,
    crossentropy_forward_16<A>,
    crossentropy_backward_16<A>,
    1,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    compact_rows<A>,
    expand_rows<A>,
    copy_bytes,
    copy_bytes,
    conv2d_plan,
    conv2d_workspace_16<A>,
    conv2d_forward_16<A>,
    conv2d_backward_16<A>,
    batchnorm2d_forward_16<A>,
    batchnorm2d_forward_eval_16<A>,
    batchnorm2d_backward_16<A>,
    nullptr,  // the separate layers, each output rounded (as CUDA's 16-bit layers would)
    cpu::batchnorm2d_group_stats<float>,
    maxpool2d_forward_16<A>,
    maxpool2d_backward_16<A>,
    global_avgpool_forward_16<A>,
    global_avgpool_backward_16<A>,
    add_bias_rows_16<A>,
    embedding_shard_forward_16<A>,
    embedding_add_positions_16<A>,
    embedding_shard_backward_16<A>,
    crossentropy_shard_stats_16<A>,
    crossentropy_shard_sumexp_16<A>,
    cpu::crossentropy_shard_loss<float>,
    crossentropy_shard_backward_16<A>,
    nullptr,
};

// cpu-staged's table: the CPU's (base), each call's pointer arguments turned from the device
// addresses cpu-staged's allocator hands out into their real pages (base/staged_memory.hpp), so
// that host code which reads or writes a device buffer directly faults, as on a GPU.
template <class A, const LayerOpsT<A>& base>
constexpr LayerOpsT<A> device_addressed() {
#define MPITRON_DEVICE_CALL(m) .m = staged_memory::device_call<base, &LayerOpsT<A>::m>()
  return LayerOpsT<A>{
      .device = base.device,
      MPITRON_DEVICE_CALL(zero),
      MPITRON_DEVICE_CALL(copy),
      MPITRON_DEVICE_CALL(upload_int32),
      MPITRON_DEVICE_CALL(upload),
      MPITRON_DEVICE_CALL(download),
      MPITRON_DEVICE_CALL(round_weights),
      MPITRON_DEVICE_CALL(layernorm_forward),
      MPITRON_DEVICE_CALL(layernorm_backward),
      MPITRON_DEVICE_CALL(linear_forward),
      MPITRON_DEVICE_CALL(linear_backward),
      MPITRON_DEVICE_CALL(linear_gelu_forward),
      MPITRON_DEVICE_CALL(gelu_forward),
      MPITRON_DEVICE_CALL(gelu_backward),
      MPITRON_DEVICE_CALL(relu_forward),
      MPITRON_DEVICE_CALL(relu_backward),
      MPITRON_DEVICE_CALL(gelu_erf_forward),
      MPITRON_DEVICE_CALL(gelu_erf_backward),
      MPITRON_DEVICE_CALL(tanh_forward),
      MPITRON_DEVICE_CALL(tanh_backward),
      MPITRON_DEVICE_CALL(copy_strided),
      MPITRON_DEVICE_CALL(gather_rows),
      MPITRON_DEVICE_CALL(scatter_add_rows),
      MPITRON_DEVICE_CALL(add_table_rows),
      MPITRON_DEVICE_CALL(table_rows_backward),
      MPITRON_DEVICE_CALL(attention_forward),
      MPITRON_DEVICE_CALL(attention_backward),
      MPITRON_DEVICE_CALL(attention_saved_elements),
      MPITRON_DEVICE_CALL(dropout_forward),
      MPITRON_DEVICE_CALL(dropout_backward),
      MPITRON_DEVICE_CALL(residual_forward),
      MPITRON_DEVICE_CALL(embedding_forward),
      MPITRON_DEVICE_CALL(embedding_backward),
      MPITRON_DEVICE_CALL(crossentropy_forward),
      MPITRON_DEVICE_CALL(crossentropy_backward),
      .lm_head_align = base.lm_head_align,
      MPITRON_DEVICE_CALL(crossentropy_padded_forward),
      MPITRON_DEVICE_CALL(crossentropy_padded_backward),
      MPITRON_DEVICE_CALL(crossentropy_fused),
      MPITRON_DEVICE_CALL(lm_head_backward),
      MPITRON_DEVICE_CALL(compact_rows),
      MPITRON_DEVICE_CALL(expand_rows),
      MPITRON_DEVICE_CALL(upload_bytes),
      MPITRON_DEVICE_CALL(download_bytes),
      MPITRON_DEVICE_CALL(conv2d_plan),
      MPITRON_DEVICE_CALL(conv2d_workspace),
      MPITRON_DEVICE_CALL(conv2d_forward),
      MPITRON_DEVICE_CALL(conv2d_backward),
      MPITRON_DEVICE_CALL(batchnorm2d_forward),
      MPITRON_DEVICE_CALL(batchnorm2d_forward_eval),
      MPITRON_DEVICE_CALL(batchnorm2d_backward),
      MPITRON_DEVICE_CALL(batchnorm2d_add_relu_forward),
      MPITRON_DEVICE_CALL(batchnorm2d_group_stats),
      MPITRON_DEVICE_CALL(maxpool2d_forward),
      MPITRON_DEVICE_CALL(maxpool2d_backward),
      MPITRON_DEVICE_CALL(global_avgpool_forward),
      MPITRON_DEVICE_CALL(global_avgpool_backward),
      MPITRON_DEVICE_CALL(add_bias_rows),
      MPITRON_DEVICE_CALL(embedding_shard_forward),
      MPITRON_DEVICE_CALL(embedding_add_positions),
      MPITRON_DEVICE_CALL(embedding_shard_backward),
      MPITRON_DEVICE_CALL(crossentropy_shard_stats),
      MPITRON_DEVICE_CALL(crossentropy_shard_sumexp),
      MPITRON_DEVICE_CALL(crossentropy_shard_loss),
      MPITRON_DEVICE_CALL(crossentropy_shard_backward),
      MPITRON_DEVICE_CALL(attention_head_size_ok),
  };
#undef MPITRON_DEVICE_CALL
}

template <bool kStaged>
const LayerOps& host_layer_ops() {
  if constexpr (kStaged) {
    static constexpr LayerOps ops = device_addressed<float, kHostLayers<true>>();
    return ops;
  } else {
    return kHostLayers<false>;
  }
}

// As host_layer_ops: under cpu-staged the same layers take a device's paths.
template <class A, bool kStaged>
const LayerOpsT<A>& host_16_layer_ops() {
  if constexpr (kStaged) {
    static constexpr LayerOpsT<A> ops = device_addressed<A, kHost16Layers<A, true>>();
    return ops;
  } else {
    return kHost16Layers<A, false>;
  }
}

[[noreturn]] void no_layers(Device device, DType t) {
  throw UsageError(
      fmt::format("--device {}{}: this build has no layers for it", device_name(device),
                  t == DType::f32 ? "" : fmt::format(" --precision {}", precision_name(t))));
}

}  // namespace

const LayerOps& cpu_layer_ops() {
  return host_layer_ops<false>();
}

template <class A>
const LayerOpsT<A>& layer_ops(Device device) {
  if constexpr (std::is_same_v<A, float>) {
    if (device == Device::cpu) return cpu_layer_ops();
    if (device == Device::cpu_staged) return host_layer_ops<true>();
  } else {
    if (device == Device::cpu) return host_16_layer_ops<A, false>();
    if (device == Device::cpu_staged) return host_16_layer_ops<A, true>();
  }
#ifdef MPITRON_HAVE_CUDA
  if (device == Device::cuda) return cuda_layer_ops<A>();
#endif
  no_layers(device, dtype_of<A>());
}

template const LayerOpsT<float>& layer_ops<float>(Device);
template const LayerOpsT<bf16_t>& layer_ops<bf16_t>(Device);
template const LayerOpsT<fp16_t>& layer_ops<fp16_t>(Device);

}  // namespace mpitron
