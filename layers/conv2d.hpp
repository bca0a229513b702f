// 2-D convolution (cross-correlation, as PyTorch's nn.Conv2d) with stride and zero padding, NCHW:
// out[n,o,y,x] = b[o] + sum_{i,ky,kx} w[o,i,ky,kx] * in[n,i,y*s+ky-p,x*s+kx-p] (0 outside).
// CPU: im2col of a block of images into a caller-owned workspace, then one GEMM per block
// (Chellapilla et al. 2006); conv2d_*_direct are plain loops, the reference the fast path is tested
// against.
#pragma once
#include <cstddef>

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
