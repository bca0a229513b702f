// Conv2d, NCHW: out[n,o,p] = b[o] + sum_k W[o,k] col[k,(n,p)], col = im2col(inp), k = (i,ky,kx);
// backward dW += dout col^T, dcol = W^T dout, dinp = col2im(dcol), db += sums of dout.
// Images go in blocks of ~kBlockCols output pixels, one GEMM per block (inner dimension K).
#include "layers/conv2d.hpp"

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "base/check.hpp"
#include "base/gemm.hpp"
#include "layers/cpu/conv2d_onednn.hpp"

namespace mpitron::cpu {

namespace {

// Output pixels per GEMM block: big enough for an efficient GEMM, small enough that a block's
// columns (K x kBlockCols) stay in L2.
constexpr int kBlockCols = 256;
constexpr size_t kAlign = 16;  // slot regions start 64 bytes apart at least (no false sharing)

// How a shape is cut into work. Every choice depends on the shape only, never on the thread
// count: the blocks are split into `slots` contiguous runs, each run is done in order by one
// thread (whichever) with the slot's own region of the workspace (im2col columns, gathered dout,
// partial dW), and the partial dW of the slots are added in slot order. GEMMs run single-threaded
// inside the slots, so every sum has the same order, hence the same bits, for any thread count.
struct Plan {
  int P, K;           // output pixels per image, weight columns (IC*KH*KW)
  int imgs;           // images per block
  int blocks, slots;  // blocks = ceil(N/imgs), slots = min(kConv2dMaxThreads, blocks)
  bool direct;        // 1x1, stride 1, no padding, one image per block: col is the input itself
  size_t col, tmp, part, slot;  // elements of each region, slot = their sum rounded up

  explicit Plan(const Conv2dShape& s) {
    P = s.OH() * s.OW();
    K = s.IC * s.KH * s.KW;
    imgs = std::clamp(kBlockCols / std::max(P, 1), 1, std::max(s.N, 1));
    blocks = (s.N + imgs - 1) / imgs;
    slots = std::min(kConv2dMaxThreads, blocks);
    direct = s.KH == 1 && s.KW == 1 && s.stride == 1 && s.pad == 0 && imgs == 1;
    const size_t cols = size_t(imgs) * P;
    col = direct ? 0 : size_t(K) * cols;
    tmp = imgs > 1 ? size_t(s.OC) * cols : 0;
    part = size_t(s.OC) * K;
    slot = (col + tmp + part + kAlign - 1) / kAlign * kAlign;
  }
  int block_begin(int slot_i) const { return int(int64_t(slot_i) * blocks / slots); }
};

// Output columns [x0, x1) whose input column x*stride - pad + kx lies inside [0, W).
inline void valid_range(int kx, int stride, int pad, int W, int OW, int& x0, int& x1) {
  const int lo = pad - kx;  // x*stride >= lo
  x0 = lo <= 0 ? 0 : (lo + stride - 1) / stride;
  const int hi = W - 1 + pad - kx;  // x*stride <= hi
  x1 = hi < 0 ? 0 : std::min(OW, hi / stride + 1);
  x0 = std::min(x0, x1);
}

// col (K, ld) = im2col of nimg images: column i*P + y*OW + x of row (c,ky,kx) holds
// inp[i, c, y*s+ky-p, x*s+kx-p], 0 in the padding.
template <class F>
void im2col(F* __restrict col, int ld, const F* __restrict inp, int nimg, const Conv2dShape& s) {
  const int OH = s.OH(), OW = s.OW(), P = OH * OW, HW = s.H * s.W;
  for (int c = 0; c < s.IC; ++c)
    for (int ky = 0; ky < s.KH; ++ky)
      for (int kx = 0; kx < s.KW; ++kx) {
        F* row = col + ptrdiff_t((c * s.KH + ky) * s.KW + kx) * ld;
        int x0, x1;
        valid_range(kx, s.stride, s.pad, s.W, OW, x0, x1);
        for (int i = 0; i < nimg; ++i) {
          const F* plane = inp + (ptrdiff_t(i) * s.IC + c) * HW;
          for (int y = 0; y < OH; ++y) {
            F* dst = row + ptrdiff_t(i) * P + y * OW;
            const int iy = y * s.stride + ky - s.pad;
            if (iy < 0 || iy >= s.H) {
              std::fill_n(dst, OW, F(0));
              continue;
            }
            const F* src = plane + iy * s.W + kx - s.pad;
            std::fill_n(dst, x0, F(0));
            if (s.stride == 1) {
              std::copy(src + x0, src + x1, dst + x0);
            } else {
              for (int x = x0; x < x1; ++x) dst[x] = src[x * s.stride];
            }
            std::fill(dst + x1, dst + OW, F(0));
          }
        }
      }
}

// dinp (nimg,IC,H,W) = col2im(dcol): each input pixel sums its entries of dcol (K, ld), in the
// fixed order (ky, kx, y, x).
template <class F>
void col2im(F* __restrict dinp, const F* __restrict dcol, int ld, int nimg, const Conv2dShape& s) {
  const int OH = s.OH(), OW = s.OW(), P = OH * OW, HW = s.H * s.W;
  for (int i = 0; i < nimg; ++i)
    for (int c = 0; c < s.IC; ++c) {
      F* plane = dinp + (ptrdiff_t(i) * s.IC + c) * HW;
      std::fill_n(plane, HW, F(0));
      for (int ky = 0; ky < s.KH; ++ky)
        for (int kx = 0; kx < s.KW; ++kx) {
          const F* row = dcol + ptrdiff_t((c * s.KH + ky) * s.KW + kx) * ld + ptrdiff_t(i) * P;
          int x0, x1;
          valid_range(kx, s.stride, s.pad, s.W, OW, x0, x1);
          for (int y = 0; y < OH; ++y) {
            const int iy = y * s.stride + ky - s.pad;
            if (iy < 0 || iy >= s.H) continue;
            F* dst = plane + iy * s.W + kx - s.pad;
            const F* src = row + y * OW;
            for (int x = x0; x < x1; ++x) dst[x * s.stride] += src[x];
          }
        }
    }
}

// Runs body(slot, region) for every slot, in parallel, each GEMM in it single-threaded.
template <class F, class Body>
void for_each_slot(const Plan& plan, F* workspace, Body&& body) {
  const int threads = std::min(omp_get_max_threads(), plan.slots);
#pragma omp parallel num_threads(threads)
  {
    // OpenBLAS (OpenMP flavour) threads a GEMM when omp_get_max_threads() > 1 outside an active
    // parallel region, with a different split of the inner dimension than its serial driver:
    // one thread per call keeps the bits independent of the thread count. Local to this region.
    omp_set_num_threads(1);
    // Dynamic: a slot's result does not depend on the thread that runs it, and a thread slowed by
    // other processes on its core then takes fewer slots.
#pragma omp for schedule(dynamic, 1)
    for (int slot = 0; slot < plan.slots; ++slot) body(slot, workspace + plan.slot * slot);
  }
}

}  // namespace

size_t conv2d_workspace(const Conv2dShape& s) {
  if (s.N <= 0) return 0;
  const Plan plan(s);
  return plan.slot * plan.slots;
}

template <class F>
void conv2d_forward(F* out, F* workspace, const F* inp, const F* weight, const F* bias,
                    const Conv2dShape& s) {
  if (s.N <= 0) return;
  const Plan plan(s);
  const int P = plan.P, K = plan.K, OC = s.OC;
  const ptrdiff_t in_img = ptrdiff_t(s.IC) * s.H * s.W, out_img = ptrdiff_t(OC) * P;
  for_each_slot(plan, workspace, [&](int slot, F* region) {
    F* col = region;
    F* tmp = region + plan.col;
    for (int b = plan.block_begin(slot); b < plan.block_begin(slot + 1); ++b) {
      const int n0 = b * plan.imgs, nimg = std::min(plan.imgs, s.N - n0), ncols = nimg * P;
      const F* x = inp + n0 * in_img;
      const F* cols = plan.direct ? x : col;
      if (!plan.direct) im2col(col, ncols, x, nimg, s);
      F* y = out + n0 * out_img;
      if (plan.imgs == 1) {  // the GEMM writes the image's output in place, bias preloaded
        if (bias)
          for (int o = 0; o < OC; ++o) std::fill_n(y + ptrdiff_t(o) * P, P, bias[o]);
        gemm<F>(false, false, OC, P, K, F(1), weight, K, cols, P, bias ? F(1) : F(0), y, P);
        continue;
      }
      gemm<F>(false, false, OC, ncols, K, F(1), weight, K, cols, ncols, F(0), tmp, ncols);
      for (int i = 0; i < nimg; ++i)  // (OC, nimg*P) -> (nimg, OC, P), plus bias
        for (int o = 0; o < OC; ++o) {
          const F* src = tmp + ptrdiff_t(o) * ncols + ptrdiff_t(i) * P;
          F* dst = y + i * out_img + ptrdiff_t(o) * P;
          const F bo = bias ? bias[o] : F(0);
          for (int p = 0; p < P; ++p) dst[p] = src[p] + bo;
        }
    }
  });
}

template <class F>
void conv2d_backward(F* dinp, F* dweight, F* dbias, F* workspace, const F* dout, const F* inp,
                     const F* weight, const Conv2dShape& s) {
  if (s.N <= 0) return;
  const Plan plan(s);
  const int P = plan.P, K = plan.K, OC = s.OC;
  const ptrdiff_t in_img = ptrdiff_t(s.IC) * s.H * s.W, out_img = ptrdiff_t(OC) * P;
  for_each_slot(plan, workspace, [&](int slot, F* region) {
    F* col = region;
    F* tmp = region + plan.col;
    F* part = tmp + plan.tmp;  // (OC,K) this slot's sum of dout col^T
    const int b0 = plan.block_begin(slot);
    for (int b = b0; b < plan.block_begin(slot + 1); ++b) {
      const int n0 = b * plan.imgs, nimg = std::min(plan.imgs, s.N - n0), ncols = nimg * P;
      const F* x = inp + n0 * in_img;
      const F* cols = plan.direct ? x : col;
      if (!plan.direct) im2col(col, ncols, x, nimg, s);
      const F* dy = dout + n0 * out_img;  // (OC, ncols) with row stride ncols
      if (plan.imgs > 1) {
        for (int o = 0; o < OC; ++o)
          for (int i = 0; i < nimg; ++i)
            std::copy_n(dy + i * out_img + ptrdiff_t(o) * P, P,
                        tmp + ptrdiff_t(o) * ncols + ptrdiff_t(i) * P);
        dy = tmp;
      }
      gemm<F>(false, true, OC, K, ncols, F(1), dy, ncols, cols, ncols, b == b0 ? F(0) : F(1), part,
              K);
      if (!dinp) continue;
      F* dx = dinp + n0 * in_img;
      if (plan.direct) {
        gemm<F>(true, false, K, P, OC, F(1), weight, K, dy, P, F(0), dx, P);
      } else {  // dcol overwrites col, which the dW product above has consumed
        gemm<F>(true, false, K, ncols, OC, F(1), weight, K, dy, ncols, F(0), col, ncols);
        col2im(dx, col, ncols, nimg, s);
      }
    }
  });
  // dW += part_0 + part_1 + ... in slot order; db sums dout over (n, p) in order, in double.
  const ptrdiff_t nw = ptrdiff_t(OC) * K;
  const size_t part_off = plan.col + plan.tmp;
#pragma omp parallel for schedule(static)
  for (ptrdiff_t e0 = 0; e0 < nw; e0 += 1024) {
    const ptrdiff_t e1 = std::min(nw, e0 + 1024);
    for (ptrdiff_t e = e0; e < e1; ++e) {
      F acc = workspace[part_off + e];
      for (int slot = 1; slot < plan.slots; ++slot)
        acc += workspace[plan.slot * slot + part_off + e];
      dweight[e] += acc;
    }
  }
  if (dbias) {
#pragma omp parallel for schedule(static)
    for (int o = 0; o < OC; ++o) {
      double acc = 0;
      for (int n = 0; n < s.N; ++n) {
        const F* d = dout + n * out_img + ptrdiff_t(o) * P;
        for (int p = 0; p < P; ++p) acc += double(d[p]);
      }
      dbias[o] += F(acc);
    }
  }
}

template <class F>
void conv2d_forward_direct(F* out, const F* inp, const F* weight, const F* bias,
                           const Conv2dShape& s) {
  const int OH = s.OH(), OW = s.OW();
  for (int n = 0; n < s.N; ++n)
    for (int o = 0; o < s.OC; ++o)
      for (int y = 0; y < OH; ++y)
        for (int x = 0; x < OW; ++x) {
          double acc = bias ? double(bias[o]) : 0.0;
          for (int c = 0; c < s.IC; ++c)
            for (int ky = 0; ky < s.KH; ++ky)
              for (int kx = 0; kx < s.KW; ++kx) {
                const int iy = y * s.stride + ky - s.pad, ix = x * s.stride + kx - s.pad;
                if (iy < 0 || iy >= s.H || ix < 0 || ix >= s.W) continue;
                acc += double(weight[((o * s.IC + c) * s.KH + ky) * s.KW + kx]) *
                       double(inp[((ptrdiff_t(n) * s.IC + c) * s.H + iy) * s.W + ix]);
              }
          out[((ptrdiff_t(n) * s.OC + o) * OH + y) * OW + x] = F(acc);
        }
}

template <class F>
void conv2d_backward_direct(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp,
                            const F* weight, const Conv2dShape& s) {
  const int OH = s.OH(), OW = s.OW();
  auto dy = [&](int n, int o, int y, int x) {
    return double(dout[((ptrdiff_t(n) * s.OC + o) * OH + y) * OW + x]);
  };
  if (dinp) {  // each input pixel gathers the outputs its window positions feed
    for (int n = 0; n < s.N; ++n)
      for (int c = 0; c < s.IC; ++c)
        for (int iy = 0; iy < s.H; ++iy)
          for (int ix = 0; ix < s.W; ++ix) {
            double acc = 0;
            for (int o = 0; o < s.OC; ++o)
              for (int ky = 0; ky < s.KH; ++ky)
                for (int kx = 0; kx < s.KW; ++kx) {
                  const int ty = iy + s.pad - ky, tx = ix + s.pad - kx;
                  if (ty < 0 || tx < 0 || ty % s.stride || tx % s.stride) continue;
                  const int y = ty / s.stride, x = tx / s.stride;
                  if (y >= OH || x >= OW) continue;
                  acc += double(weight[((o * s.IC + c) * s.KH + ky) * s.KW + kx]) * dy(n, o, y, x);
                }
            dinp[((ptrdiff_t(n) * s.IC + c) * s.H + iy) * s.W + ix] = F(acc);
          }
  }
  for (int o = 0; o < s.OC; ++o) {
    for (int c = 0; c < s.IC; ++c)
      for (int ky = 0; ky < s.KH; ++ky)
        for (int kx = 0; kx < s.KW; ++kx) {
          double acc = 0;
          for (int n = 0; n < s.N; ++n)
            for (int y = 0; y < OH; ++y)
              for (int x = 0; x < OW; ++x) {
                const int iy = y * s.stride + ky - s.pad, ix = x * s.stride + kx - s.pad;
                if (iy < 0 || iy >= s.H || ix < 0 || ix >= s.W) continue;
                acc +=
                    dy(n, o, y, x) * double(inp[((ptrdiff_t(n) * s.IC + c) * s.H + iy) * s.W + ix]);
              }
          dweight[((o * s.IC + c) * s.KH + ky) * s.KW + kx] += F(acc);
        }
    if (dbias) {
      double acc = 0;
      for (int n = 0; n < s.N; ++n)
        for (int y = 0; y < OH; ++y)
          for (int x = 0; x < OW; ++x) acc += dy(n, o, y, x);
      dbias[o] += F(acc);
    }
  }
}

Conv2dPlan conv2d_plan(const Conv2dShape& s, Conv2dPath want) {
  Conv2dPlan plan{s, nullptr};
  if (want == Conv2dPath::onednn && s.IC % 8 == 0 && s.OC % 8 == 0 && s.N > 0)
    plan.onednn = conv2d_onednn_make(s);
  return plan;
}

size_t conv2d_workspace(const Conv2dPlan& plan) {
  return plan.onednn ? conv2d_onednn_workspace(*plan.onednn, plan.shape.N)
                     : conv2d_workspace(plan.shape);
}

template <class F>
void conv2d_forward(F* out, F* workspace, const F* inp, const F* weight, const F* bias,
                    const Conv2dPlan& plan, int N) {
  MPITRON_REQUIRE(N <= plan.shape.N, "more images than the convolution was planned for");
  if constexpr (std::is_same_v<F, float>) {
    if (plan.onednn) {
      conv2d_onednn_forward(*plan.onednn, N, out, workspace, inp, weight, bias);
      return;
    }
  } else {
    MPITRON_REQUIRE(!plan.onednn, "oneDNN convolutions are float only (plan doubles for im2col)");
  }
  Conv2dShape s = plan.shape;
  s.N = N;
  conv2d_forward(out, workspace, inp, weight, bias, s);
}

template <class F>
void conv2d_backward(F* dinp, F* dweight, F* dbias, F* workspace, const F* dout, const F* inp,
                     const F* weight, const Conv2dPlan& plan, int N) {
  MPITRON_REQUIRE(N <= plan.shape.N, "more images than the convolution was planned for");
  if constexpr (std::is_same_v<F, float>) {
    if (plan.onednn) {
      conv2d_onednn_backward(*plan.onednn, N, dinp, dweight, dbias, workspace, dout, inp, weight);
      return;
    }
  } else {
    MPITRON_REQUIRE(!plan.onednn, "oneDNN convolutions are float only (plan doubles for im2col)");
  }
  Conv2dShape s = plan.shape;
  s.N = N;
  conv2d_backward(dinp, dweight, dbias, workspace, dout, inp, weight, s);
}

#define MPITRON_CONV2D_INSTANTIATE(F)                                                            \
  template void conv2d_forward<F>(F*, F*, const F*, const F*, const F*, const Conv2dShape&);     \
  template void conv2d_backward<F>(F*, F*, F*, F*, const F*, const F*, const F*,                 \
                                   const Conv2dShape&);                                          \
  template void conv2d_forward<F>(F*, F*, const F*, const F*, const F*, const Conv2dPlan&, int); \
  template void conv2d_backward<F>(F*, F*, F*, F*, const F*, const F*, const F*,                 \
                                   const Conv2dPlan&, int);                                      \
  template void conv2d_forward_direct<F>(F*, const F*, const F*, const F*, const Conv2dShape&);  \
  template void conv2d_backward_direct<F>(F*, F*, F*, const F*, const F*, const F*,              \
                                          const Conv2dShape&);
MPITRON_CONV2D_INSTANTIATE(float)
MPITRON_CONV2D_INSTANTIATE(double)
#undef MPITRON_CONV2D_INSTANTIATE

}  // namespace mpitron::cpu
