// Conv2d through oneDNN (see conv2d_onednn.hpp). Per slot (a fixed run of images): the images
// are reordered from NCHW into the kernels' blocked layout in the slot's workspace region, the
// primitive runs single-threaded, and the result is reordered back. Backward keeps each slot's
// weight gradient (and bias gradient) in its region and adds them in slot order afterwards.
#include "layers/cpu/conv2d_onednn.hpp"

#ifdef MPITRON_ONEDNN

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

#include "base/check.hpp"

namespace mpitron::cpu {

namespace {

// Every oneDNN call goes through this: oneDNN's C++ API throws dnnl::error, named here with the
// call, file and line.
template <class Fn>
auto onednn_checked(const char* call, const char* file, int line, Fn&& fn) {
  try {
    return fn();
  } catch (const dnnl::error& e) {
    fail_at(file, line, call, std::string("oneDNN: ") + e.what());
  }
}
#define ONEDNN_CHECK(call) \
  ::mpitron::cpu::onednn_checked(#call, __FILE__, __LINE__, [&] { return call; })

using dnnl::memory;
using tag = memory::format_tag;
constexpr auto f32 = memory::data_type::f32;
constexpr size_t kAlignFloats = 16;  // regions start 64 bytes apart

size_t floats(const memory::desc& d) {
  return (d.get_size() + sizeof(float) - 1) / sizeof(float);
}
size_t aligned(size_t n) {
  return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
}

// omp_get_max_threads() = 1 while alive: oneDNN sizes a primitive's blocking by the threads it
// may use, and ours always run on one.
struct OneThread {
  int saved = omp_get_max_threads();
  OneThread() { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved); }
};

bool reference_kernel(const dnnl::primitive_desc& pd) {
  return std::string(pd.impl_info_str()).find("ref") != std::string::npos;
}

}  // namespace

// Primitives for sub-batches of n images, and where their buffers sit in a slot's region.
struct SubBatch {
  int n = 0;
  memory::desc src_plain, dst_plain, src_fwd, dst_fwd, src_bw, ddst_bw, ddst_bd, dsrc_bd;
  memory::desc scratch_fwd, scratch_bd, scratch_bw;
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  dnnl::reorder src_to_fwd, dst_to_plain, src_to_bw, ddst_to_bw, ddst_to_bd, dsrc_to_plain;
  bool ddst_shared = false;  // bwd_data reads diff_dst in bwd_weights' layout
  // Floats from the region's start: a = input side, b = output side, c = bwd_data's diff_dst if
  // its layout differs, s = scratchpad, w = weight gradient, d = bias gradient.
  size_t a = 0, b = 0, c = 0, s = 0, w = 0, d = 0, region = 0;
};

struct Conv2dOnednn {
  Conv2dShape shape;  // N: the most images a call passes
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::vector<dnnl::stream> streams;  // one per slot
  memory::desc w_plain, b_plain, w_fwd, w_bd, dw_bw;
  dnnl::reorder w_to_fwd, w_to_bd, dw_to_plain;
  // Shared part of the workspace, floats from its start: weights for forward and bwd_data, the
  // summed weight gradient (blocked, then plain), a zero bias.
  size_t sh_wf = 0, sh_wd = 0, sh_dw = 0, sh_dwp = 0, sh_zero = 0, shared = 0;
  size_t planned = 0;  // workspace floats for shape.N images: no call may need more
  std::map<int, SubBatch> batches;

  static int slots(int N) { return std::min(N, kConv2dMaxThreads); }
  static int first(int N, int slot) { return int(int64_t(slot) * N / slots(N)); }

  SubBatch make(int n, bool fix_weights);
  SubBatch& batch(int n) {
    auto it = batches.find(n);
    if (it == batches.end()) it = batches.emplace(n, make(n, true)).first;
    MPITRON_REQUIRE(it->second.n == n, "oneDNN has only a reference kernel for this sub-batch");
    return it->second;
  }
  std::vector<SubBatch*> slot_batches(int N) {  // each slot's primitives for a call on N images
    std::vector<SubBatch*> sub(slots(N));
    for (int i = 0; i < slots(N); ++i) sub[i] = &batch(first(N, i + 1) - first(N, i));
    return sub;
  }
  size_t region(int N) {  // the largest slot region a call on N images uses
    size_t r = 0;
    for (const SubBatch* sb : slot_batches(N)) r = std::max(r, sb->region);
    return r;
  }
};

SubBatch Conv2dOnednn::make(int n, bool fix_weights) {
  const OneThread one;
  const Conv2dShape& s = shape;
  SubBatch sb;
  sb.n = n;
  const memory::dims src{n, s.IC, s.H, s.W}, dst{n, s.OC, s.OH(), s.OW()},
      wei{s.OC, s.IC, s.KH, s.KW}, bia{s.OC}, strides{s.stride, s.stride}, pad{s.pad, s.pad};
  sb.src_plain = memory::desc(src, f32, tag::nchw);
  sb.dst_plain = memory::desc(dst, f32, tag::nchw);
  const memory::desc src_any(src, f32, tag::any), dst_any(dst, f32, tag::any),
      wei_any(wei, f32, tag::any), bia_md(bia, f32, tag::a);
  // Every sub-batch size uses the first one's weight layouts, so weights are reordered once a call.
  const memory::desc wf = fix_weights ? w_fwd : wei_any, wd = fix_weights ? w_bd : wei_any,
                     dwb = fix_weights ? dw_bw : wei_any;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const auto alg = dnnl::algorithm::convolution_direct;
  const auto fpd = ONEDNN_CHECK(dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src_any, wf, bia_md,
                                      dst_any, strides, pad, pad),
      attr, engine));
  const auto dpd = ONEDNN_CHECK(dnnl::convolution_backward_data::primitive_desc(
      dnnl::convolution_backward_data::desc(alg, src_any, wd, dst_any, strides, pad, pad), attr,
      engine, fpd));
  const auto wpd = ONEDNN_CHECK(dnnl::convolution_backward_weights::primitive_desc(
      dnnl::convolution_backward_weights::desc(alg, src_any, dwb, bia_md, dst_any, strides, pad,
                                               pad),
      attr, engine, fpd));
  if (reference_kernel(fpd) || reference_kernel(dpd) || reference_kernel(wpd)) return SubBatch{};
  if (!fix_weights) {
    w_fwd = fpd.weights_desc();
    w_bd = dpd.weights_desc();
    dw_bw = wpd.diff_weights_desc();
  }
  sb.src_fwd = fpd.src_desc();
  sb.dst_fwd = fpd.dst_desc();
  sb.src_bw = wpd.src_desc();
  sb.ddst_bw = wpd.diff_dst_desc();
  sb.ddst_bd = dpd.diff_dst_desc();
  sb.dsrc_bd = dpd.diff_src_desc();
  sb.ddst_shared = sb.ddst_bd == sb.ddst_bw;
  sb.scratch_fwd = fpd.scratchpad_desc();
  sb.scratch_bd = dpd.scratchpad_desc();
  sb.scratch_bw = wpd.scratchpad_desc();
  sb.fwd = dnnl::convolution_forward(fpd);
  sb.bwd_data = dnnl::convolution_backward_data(dpd);
  sb.bwd_weights = dnnl::convolution_backward_weights(wpd);
  auto reorder = [&](const memory::desc& from, const memory::desc& to) {
    return ONEDNN_CHECK(dnnl::reorder(dnnl::reorder::primitive_desc(engine, from, engine, to)));
  };
  sb.src_to_fwd = reorder(sb.src_plain, sb.src_fwd);
  sb.dst_to_plain = reorder(sb.dst_fwd, sb.dst_plain);
  sb.src_to_bw = reorder(sb.src_plain, sb.src_bw);
  sb.ddst_to_bw = reorder(sb.dst_plain, sb.ddst_bw);
  sb.ddst_to_bd = reorder(sb.dst_plain, sb.ddst_bd);
  sb.dsrc_to_plain = reorder(sb.dsrc_bd, sb.src_plain);
  const size_t A = std::max({floats(sb.src_fwd), floats(sb.src_bw), floats(sb.dsrc_bd)});
  const size_t B = std::max(floats(sb.dst_fwd), floats(sb.ddst_bw));
  const size_t C = sb.ddst_shared ? 0 : floats(sb.ddst_bd);
  const size_t S = std::max({floats(sb.scratch_fwd), floats(sb.scratch_bd), floats(sb.scratch_bw)});
  sb.a = 0;
  sb.b = sb.a + aligned(A);
  sb.c = sb.b + aligned(B);
  sb.s = sb.c + aligned(C);
  sb.w = sb.s + aligned(S);
  sb.d = sb.w + aligned(floats(dw_bw));
  sb.region = sb.d + aligned(size_t(s.OC));
  return sb;
}

std::shared_ptr<Conv2dOnednn> conv2d_onednn_make(const Conv2dShape& s) {
  auto k = std::make_shared<Conv2dOnednn>();
  k->shape = s;
  const OneThread one;
  const int n0 = Conv2dOnednn::first(s.N, 1);  // the first slot's images, N / slots rounded down
  SubBatch first = k->make(n0, false);
  if (first.n == 0) return nullptr;
  k->batches.emplace(n0, std::move(first));
  for (int i = 0; i < kConv2dMaxThreads; ++i) k->streams.emplace_back(k->engine);
  k->w_plain = memory::desc({s.OC, s.IC, s.KH, s.KW}, f32, tag::oihw);
  k->b_plain = memory::desc({s.OC}, f32, tag::a);
  auto reorder = [&](const memory::desc& from, const memory::desc& to) {
    return ONEDNN_CHECK(
        dnnl::reorder(dnnl::reorder::primitive_desc(k->engine, from, k->engine, to)));
  };
  k->w_to_fwd = reorder(k->w_plain, k->w_fwd);
  k->w_to_bd = reorder(k->w_plain, k->w_bd);
  k->dw_to_plain = reorder(k->dw_bw, k->w_plain);
  k->sh_wf = 0;
  k->sh_wd = k->sh_wf + aligned(floats(k->w_fwd));
  k->sh_dw = k->sh_wd + aligned(floats(k->w_bd));
  k->sh_dwp = k->sh_dw + aligned(floats(k->dw_bw));
  k->sh_zero = k->sh_dwp + aligned(floats(k->w_plain));
  k->shared = k->sh_zero + aligned(size_t(s.OC));
  k->planned = conv2d_onednn_workspace(*k, s.N);
  return k;
}

size_t conv2d_onednn_workspace(Conv2dOnednn& k, int N) {
  if (N <= 0) return 0;
  return k.shared + k.region(N) * size_t(Conv2dOnednn::slots(N));
}

namespace {

// Runs body(slot, sub-batch, first image, region) for every slot of a call on N images, in
// parallel; oneDNN runs single-threaded inside an active parallel region.
template <class Body>
void for_each_slot(Conv2dOnednn& k, int N, float* regions, Body&& body) {
  const int slots = Conv2dOnednn::slots(N);
  const std::vector<SubBatch*> sub = k.slot_batches(N);
  const size_t stride = k.region(N);
  MPITRON_REQUIRE(k.shared + stride * slots <= k.planned,
                  "a convolution call needs more workspace than its plan holds");
  const int threads = std::min(omp_get_max_threads(), slots);
#pragma omp parallel num_threads(threads)
  {
    omp_set_num_threads(1);
#pragma omp for schedule(dynamic, 1)
    for (int i = 0; i < slots; ++i)
      body(i, *sub[i], Conv2dOnednn::first(N, i), regions + stride * i);
  }
}

memory mem(const memory::desc& d, const dnnl::engine& e, const void* p) {
  return memory(d, e, const_cast<void*>(p));
}

}  // namespace

void conv2d_onednn_forward(Conv2dOnednn& k, int N, float* out, float* workspace, const float* inp,
                           const float* weight, const float* bias) {
  if (N <= 0) return;
  const Conv2dShape& s = k.shape;
  const ptrdiff_t in_img = ptrdiff_t(s.IC) * s.H * s.W, out_img = ptrdiff_t(s.OC) * s.OH() * s.OW();
  dnnl::stream& st0 = k.streams[0];
  {
    auto w = mem(k.w_plain, k.engine, weight), wf = mem(k.w_fwd, k.engine, workspace + k.sh_wf);
    ONEDNN_CHECK(k.w_to_fwd.execute(st0, w, wf));
  }
  float* zero = workspace + k.sh_zero;
  if (!bias) std::fill_n(zero, s.OC, 0.f);
  const float* b = bias ? bias : zero;
  for_each_slot(k, N, workspace + k.shared, [&](int slot, SubBatch& sb, int n0, float* r) {
    const dnnl::engine& e = k.engine;
    dnnl::stream& st = k.streams[slot];
    auto x = mem(sb.src_plain, e, inp + n0 * in_img), xb = mem(sb.src_fwd, e, r + sb.a);
    auto yb = mem(sb.dst_fwd, e, r + sb.b), y = mem(sb.dst_plain, e, out + n0 * out_img);
    ONEDNN_CHECK(sb.src_to_fwd.execute(st, x, xb));
    ONEDNN_CHECK(sb.fwd.execute(st, {{DNNL_ARG_SRC, xb},
                                     {DNNL_ARG_WEIGHTS, mem(k.w_fwd, e, workspace + k.sh_wf)},
                                     {DNNL_ARG_BIAS, mem(k.b_plain, e, b)},
                                     {DNNL_ARG_DST, yb},
                                     {DNNL_ARG_SCRATCHPAD, mem(sb.scratch_fwd, e, r + sb.s)}}));
    ONEDNN_CHECK(sb.dst_to_plain.execute(st, yb, y));
  });
}

void conv2d_onednn_backward(Conv2dOnednn& k, int N, float* dinp, float* dweight, float* dbias,
                            float* workspace, const float* dout, const float* inp,
                            const float* weight) {
  if (N <= 0) return;
  const Conv2dShape& s = k.shape;
  const ptrdiff_t in_img = ptrdiff_t(s.IC) * s.H * s.W, out_img = ptrdiff_t(s.OC) * s.OH() * s.OW();
  if (dinp) {
    auto w = mem(k.w_plain, k.engine, weight), wd = mem(k.w_bd, k.engine, workspace + k.sh_wd);
    ONEDNN_CHECK(k.w_to_bd.execute(k.streams[0], w, wd));
  }
  float* regions = workspace + k.shared;
  for_each_slot(k, N, regions, [&](int slot, SubBatch& sb, int n0, float* r) {
    const dnnl::engine& e = k.engine;
    dnnl::stream& st = k.streams[slot];
    auto x = mem(sb.src_plain, e, inp + n0 * in_img),
         dy = mem(sb.dst_plain, e, dout + n0 * out_img);
    auto xw = mem(sb.src_bw, e, r + sb.a), dyw = mem(sb.ddst_bw, e, r + sb.b);
    ONEDNN_CHECK(sb.src_to_bw.execute(st, x, xw));
    ONEDNN_CHECK(sb.ddst_to_bw.execute(st, dy, dyw));
    ONEDNN_CHECK(
        sb.bwd_weights.execute(st, {{DNNL_ARG_SRC, xw},
                                    {DNNL_ARG_DIFF_DST, dyw},
                                    {DNNL_ARG_DIFF_WEIGHTS, mem(k.dw_bw, e, r + sb.w)},
                                    {DNNL_ARG_DIFF_BIAS, mem(k.b_plain, e, r + sb.d)},
                                    {DNNL_ARG_SCRATCHPAD, mem(sb.scratch_bw, e, r + sb.s)}}));
    if (!dinp) return;
    memory dyd = dyw;
    if (!sb.ddst_shared) {
      dyd = mem(sb.ddst_bd, e, r + sb.c);
      ONEDNN_CHECK(sb.ddst_to_bd.execute(st, dy, dyd));
    }
    auto dxb = mem(sb.dsrc_bd, e, r + sb.a);  // bwd_weights has read its input
    ONEDNN_CHECK(sb.bwd_data.execute(st, {{DNNL_ARG_DIFF_DST, dyd},
                                          {DNNL_ARG_WEIGHTS, mem(k.w_bd, e, workspace + k.sh_wd)},
                                          {DNNL_ARG_DIFF_SRC, dxb},
                                          {DNNL_ARG_SCRATCHPAD, mem(sb.scratch_bd, e, r + sb.s)}}));
    auto dx = mem(sb.src_plain, e, dinp + n0 * in_img);
    ONEDNN_CHECK(sb.dsrc_to_plain.execute(st, dxb, dx));
  });
  // dW += part_0 + part_1 + ... in slot order (in the blocked layout, then reordered); db alike.
  const std::vector<SubBatch*> sub = k.slot_batches(N);
  const int slots = int(sub.size());
  const size_t stride = k.region(N), nw = floats(k.dw_bw);
  std::vector<const float*> dw_part(slots), db_part(slots);
  for (int i = 0; i < slots; ++i) {
    dw_part[i] = regions + stride * i + sub[i]->w;
    db_part[i] = regions + stride * i + sub[i]->d;
  }
  float* sum = workspace + k.sh_dw;
#pragma omp parallel for schedule(static)
  for (ptrdiff_t e0 = 0; e0 < ptrdiff_t(nw); e0 += 1024) {
    const ptrdiff_t e1 = std::min(ptrdiff_t(nw), e0 + 1024);
    for (ptrdiff_t e = e0; e < e1; ++e) {
      float acc = dw_part[0][e];
      for (int i = 1; i < slots; ++i) acc += dw_part[i][e];
      sum[e] = acc;
    }
  }
  float* plain = workspace + k.sh_dwp;
  auto dw_blocked = mem(k.dw_bw, k.engine, sum), dw_plain = mem(k.w_plain, k.engine, plain);
  ONEDNN_CHECK(k.dw_to_plain.execute(k.streams[0], dw_blocked, dw_plain));
  const size_t nplain = size_t(s.OC) * s.IC * s.KH * s.KW;
#pragma omp parallel for schedule(static)
  for (size_t e = 0; e < nplain; ++e) dweight[e] += plain[e];
  if (dbias)
    for (int o = 0; o < s.OC; ++o) {
      float acc = 0;
      for (int i = 0; i < slots; ++i) acc += db_part[i][o];
      dbias[o] += acc;
    }
}

}  // namespace mpitron::cpu

#else  // built without oneDNN: every shape takes im2col

namespace mpitron::cpu {

struct Conv2dOnednn {};

std::shared_ptr<Conv2dOnednn> conv2d_onednn_make(const Conv2dShape&) {
  return nullptr;
}
size_t conv2d_onednn_workspace(Conv2dOnednn&, int) {
  return 0;
}
void conv2d_onednn_forward(Conv2dOnednn&, int, float*, float*, const float*, const float*,
                           const float*) {}
void conv2d_onednn_backward(Conv2dOnednn&, int, float*, float*, float*, float*, const float*,
                            const float*, const float*) {}

}  // namespace mpitron::cpu

#endif
