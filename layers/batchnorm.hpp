// Batch normalisation over channels of NCHW (Ioffe & Szegedy 2015), with ghost batches: the
// statistics of a channel are taken over groups of G consecutive samples (G*H*W values each), so
// they do not depend on how a batch is split over ranks or micro-batches (Hoffer et al. 2017).
// Training: y = (x - mean_g) * rstd_g * w + b, rstd = 1/sqrt(var_biased + eps).
// Evaluation: the running statistics instead of the group's.
#pragma once
#include <cstdint>

namespace mpitron::cpu {

// N samples (a multiple of G), C channels, HW = H*W pixels per channel.
template <class F>
void batchnorm2d_forward(F* out,           // (N,C,HW) =
                         F* mean,          // (N/G,C) the group statistics, for backward
                         F* rstd,          // (N/G,C)
                         const F* inp,     // (N,C,HW)
                         const F* weight,  // (C)
                         const F* bias,    // (C)
                         int N, int C, int HW, int G, float eps);

// Training's forward with what follows batch norm fused into its one write over the output:
// out = relu(y + residual), y as batchnorm2d_forward's; without residual (null) out = relu(y).
// The same bits as batchnorm2d_forward, residual_forward and relu_forward in turn.
template <class F>
void batchnorm2d_add_relu_forward(F* out,             // (N,C,HW) =
                                  F* mean,            // (N/G,C)
                                  F* rstd,            // (N/G,C)
                                  const F* inp,       // (N,C,HW)
                                  const F* weight,    // (C)
                                  const F* bias,      // (C)
                                  const F* residual,  // (N,C,HW) or null
                                  int N, int C, int HW, int G, float eps);

template <class F>
void batchnorm2d_forward_eval(F* out,                 // (N,C,HW) =
                              const F* inp,           // (N,C,HW)
                              const F* weight,        // (C)
                              const F* bias,          // (C)
                              const F* running_mean,  // (C)
                              const F* running_var,   // (C)
                              int N, int C, int HW, float eps);

template <class F>
void batchnorm2d_backward(F* dinp,          // (N,C,HW) =
                          F* dweight,       // (C) +=
                          F* dbias,         // (C) +=
                          const F* dout,    // (N,C,HW)
                          const F* inp,     // (N,C,HW)
                          const F* weight,  // (C)
                          const F* mean,    // (N/G,C)
                          const F* rstd,    // (N/G,C)
                          int N, int C, int HW, int G);

// Adds each group's mean and unbiased variance (var_biased * n/(n-1), n = G*HW, as PyTorch's
// running_var) to the sums, groups in order: the caller averages them over the step's groups and
// applies running = (1 - momentum) * running + momentum * average.
template <class F>
void batchnorm2d_group_stats(double* mean_sum,  // (C) +=
                             double* var_sum,   // (C) +=
                             const F* mean,     // (N/G,C)
                             const F* rstd,     // (N/G,C)
                             int groups, int C, int HW, int G, float eps);

}  // namespace mpitron::cpu
