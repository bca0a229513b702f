// Pooling over NCHW: max pooling with a window, stride and padding (padding never wins), and
// global average pooling (N,C,H,W) -> (N,C).
#pragma once
#include <cstdint>

namespace mpitron::cpu {

struct Pool2dShape {
  int N = 1, C = 1, H = 1, W = 1, K = 2, stride = 2, pad = 0;
  int OH() const { return (H + 2 * pad - K) / stride + 1; }
  int OW() const { return (W + 2 * pad - K) / stride + 1; }
};

// Every window must overlap the image: pad < K (PyTorch asks pad <= K/2).
// argmax holds, per output, the index (y*W + x) of the winning input in its channel plane; ties
// go to the first in row-major order, as PyTorch's.
template <class F>
void maxpool2d_forward(F* out,           // (N,C,OH,OW) =
                       int32_t* argmax,  // (N,C,OH,OW)
                       const F* inp,     // (N,C,H,W)
                       const Pool2dShape& s);

// Any window, one at a time: the simple path, which 2x2 windows at stride 2 (unpadded) bypass.
template <class F>
void maxpool2d_forward_windows(F* out, int32_t* argmax, const F* inp, const Pool2dShape& s);

template <class F>
void maxpool2d_backward(F* dinp,                // (N,C,H,W) =
                        const F* dout,          // (N,C,OH,OW)
                        const int32_t* argmax,  // (N,C,OH,OW)
                        const Pool2dShape& s);

template <class F>
void global_avgpool_forward(F* out,        // (N,C) =
                            const F* inp,  // (N,C,HW)
                            int N, int C, int HW);

template <class F>
void global_avgpool_backward(F* dinp,        // (N,C,HW) =
                             const F* dout,  // (N,C)
                             int N, int C, int HW);

}  // namespace mpitron::cpu
