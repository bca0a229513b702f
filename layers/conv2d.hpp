// 2-D convolution (cross-correlation, as PyTorch's nn.Conv2d) with stride and zero padding, NCHW:
// out[n,o,y,x] = b[o] + sum_{i,ky,kx} w[o,i,ky,kx] * in[n,i,y*s+ky-p,x*s+kx-p] (0 outside).
// CPU: oneDNN's direct kernels on blocked layouts where the build has oneDNN and the channels suit
// them (layers/cpu/conv2d_onednn.hpp); otherwise im2col of a block of images into a caller-owned
// workspace, then one GEMM per block (Chellapilla et al. 2006). conv2d_*_direct are plain loops,
// the reference both are tested against.
#pragma once
#include <cstddef>
#include <memory>

namespace mpitron::cpu {

// N images, IC input channels of H x W, OC output channels, KH x KW kernel.
struct Conv2dShape {
  int N = 1, IC = 1, H = 1, W = 1, OC = 1, KH = 1, KW = 1, stride = 1, pad = 0;
  int OH() const { return (H + 2 * pad - KH) / stride + 1; }
  int OW() const { return (W + 2 * pad - KW) / stride + 1; }
};

// Elements of workspace forward and backward need (the model plans it once, shared by layers).
// It depends on the shape only; forward and backward use at most kConv2dMaxThreads threads.
inline constexpr int kConv2dMaxThreads = 8;
size_t conv2d_workspace(const Conv2dShape& s);

template <class F>
void conv2d_forward(F* out,           // (N,OC,OH,OW) =
                    F* workspace,     // (conv2d_workspace(s)) scratch
                    const F* inp,     // (N,IC,H,W)
                    const F* weight,  // (OC,IC,KH,KW)
                    const F* bias,    // (OC) or nullptr
                    const Conv2dShape& s);

template <class F>
void conv2d_backward(F* dinp,          // (N,IC,H,W) =, or nullptr to skip
                     F* dweight,       // (OC,IC,KH,KW) +=
                     F* dbias,         // (OC) +=, or nullptr
                     F* workspace,     // (conv2d_workspace(s)) scratch
                     const F* dout,    // (N,OC,OH,OW)
                     const F* inp,     // (N,IC,H,W)
                     const F* weight,  // (OC,IC,KH,KW)
                     const Conv2dShape& s);

// Which kernels a convolution runs on the CPU.
enum class Conv2dPath {
  im2col,  // im2col and GEMM (the functions above)
  onednn,  // oneDNN's direct kernels, float only
};

struct Conv2dOnednn;  // oneDNN's primitives for one shape (layers/cpu/conv2d_onednn.cpp)

// A shape and its kernels, made once (oneDNN's take milliseconds to make) and reused by every call
// on at most shape.N images. Copies share the kernels; calls on one plan must not overlap.
struct Conv2dPlan {
  Conv2dShape shape;
  std::shared_ptr<Conv2dOnednn> onednn;  // null: im2col
  Conv2dPath path() const { return onednn ? Conv2dPath::onednn : Conv2dPath::im2col; }
};

// Conv2dPath::onednn is taken where the build has oneDNN and both channel counts are multiples of
// 8 (a first layer on 1 channel runs faster through im2col); otherwise, or asked for im2col,
// im2col.
Conv2dPlan conv2d_plan(const Conv2dShape& s, Conv2dPath want = Conv2dPath::onednn);

// Elements of workspace a call on up to plan.shape.N images needs.
size_t conv2d_workspace(const Conv2dPlan& plan);

// As above on N <= plan.shape.N images, through the plan's kernels (doubles always take im2col).
template <class F>
void conv2d_forward(F* out, F* workspace, const F* inp, const F* weight, const F* bias,
                    const Conv2dPlan& plan, int N);

template <class F>
void conv2d_backward(F* dinp, F* dweight, F* dbias, F* workspace, const F* dout, const F* inp,
                     const F* weight, const Conv2dPlan& plan, int N);

// Reference: direct loops (sums in double), no workspace, single-threaded; for tests.
template <class F>
void conv2d_forward_direct(F* out,           // (N,OC,OH,OW) =
                           const F* inp,     // (N,IC,H,W)
                           const F* weight,  // (OC,IC,KH,KW)
                           const F* bias,    // (OC) or nullptr
                           const Conv2dShape& s);

template <class F>
void conv2d_backward_direct(F* dinp,          // (N,IC,H,W) =, or nullptr to skip
                            F* dweight,       // (OC,IC,KH,KW) +=
                            F* dbias,         // (OC) +=, or nullptr
                            const F* dout,    // (N,OC,OH,OW)
                            const F* inp,     // (N,IC,H,W)
                            const F* weight,  // (OC,IC,KH,KW)
                            const Conv2dShape& s);

}  // namespace mpitron::cpu
