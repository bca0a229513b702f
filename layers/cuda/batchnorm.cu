// Ghost-group batch norm on the device (batchnorm.cuh), with the CPU's formulas
// (layers/cpu/batchnorm.cpp): two-pass statistics in double, y = (x - m) * (r w) + b, and
// dx = a dy + b' (x - m) + k per group, each product and sum rounded on its own (no FMA
// contraction), as the CPU's.
#include <cuda_runtime.h>

#include <algorithm>

#include "base/cuda_check.hpp"
#include "layers/cuda/batchnorm.cuh"
#include "layers/cuda/elementwise.cuh"

namespace mpitron::cuda {

namespace {

using elementwise::from_float;
using elementwise::to_float;

constexpr int kThreads = 256;

// The sum of every thread's v over the block, in a fixed tree; every thread gets it.
__device__ double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();
  return total;
}

// Element i of group g's channel-c values: sample g G + i / HW, pixel i % HW.
__device__ size_t at(int g, int c, int i, int C, int HW, int G) {
  const int n = g * G + i / HW;
  return (size_t(n) * C + c) * HW + i % HW;
}

template <class T>
__global__ void forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                               const T* bias, int C, int HW, int G, float eps) {
  __shared__ double shared[kThreads];
  const int gc = blockIdx.x, g = gc / C, c = gc % C, count = G * HW;
  double sum = 0;
  for (int i = threadIdx.x; i < count; i += kThreads)
    sum += double(to_float(inp[at(g, c, i, C, HW, G)]));
  const double m = block_sum(sum, shared) / double(count);
  double sq = 0;
  for (int i = threadIdx.x; i < count; i += kThreads) {
    const double d = double(to_float(inp[at(g, c, i, C, HW, G)])) - m;
    sq = __dadd_rn(sq, __dmul_rn(d, d));  // no FMA: the CPU's rounding
  }
  const double r = 1.0 / sqrt(block_sum(sq, shared) / double(count) + double(eps));
  if (threadIdx.x == 0) {
    mean[gc] = float(m);
    rstd[gc] = float(r);
  }
  const float mf = float(m), scale = float(r * double(to_float(weight[c])));
  const float shift = to_float(bias[c]);
  for (int i = threadIdx.x; i < count; i += kThreads) {
    const size_t k = at(g, c, i, C, HW, G);
    out[k] = from_float<T>(__fadd_rn(__fmul_rn(__fsub_rn(to_float(inp[k]), mf), scale), shift));
  }
}

template <class T>
__global__ void forward_eval_kernel(T* out, const T* inp, const T* weight, const T* bias,
                                    const float* running_mean, const float* running_var, size_t n,
                                    int C, int HW, float eps) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const int c = int((i / size_t(HW)) % size_t(C));
    const float scale =
        float(double(to_float(weight[c])) / sqrt(double(running_var[c]) + double(eps)));
    out[i] = from_float<T>(__fadd_rn(__fmul_rn(__fsub_rn(to_float(inp[i]), running_mean[c]), scale),
                                     to_float(bias[c])));
  }
}

// partial[(g C + c) 2 + {0, 1}] = the group's sum of dy xhat and of dy.
template <class T>
__global__ void backward_kernel(T* dinp, double* partial, const T* dout, const T* inp,
                                const T* weight, const float* mean, const float* rstd, int C,
                                int HW, int G) {
  __shared__ double shared[kThreads];
  const int gc = blockIdx.x, g = gc / C, c = gc % C, count = G * HW;
  const double m = double(mean[gc]), r = double(rstd[gc]);
  double sdy = 0, sdyx = 0;
  for (int i = threadIdx.x; i < count; i += kThreads) {
    const size_t k = at(g, c, i, C, HW, G);
    const double dy = double(to_float(dout[k]));
    sdy += dy;
    sdyx = __dadd_rn(sdyx, __dmul_rn(__dmul_rn(dy, double(to_float(inp[k])) - m), r));
  }
  const double sum_dy = block_sum(sdy, shared), sum_dy_xhat = block_sum(sdyx, shared);
  if (threadIdx.x == 0) {
    partial[2 * size_t(gc)] = sum_dy_xhat;
    partial[2 * size_t(gc) + 1] = sum_dy;
  }
  const double a = r * double(to_float(weight[c])), mdy = sum_dy / count, mdx = sum_dy_xhat / count;
  const float fa = float(a), fb = float(-a * mdx * r), fk = float(-a * mdy), fm = float(m);
  for (int i = threadIdx.x; i < count; i += kThreads) {
    const size_t k = at(g, c, i, C, HW, G);
    const float dy = to_float(dout[k]), x = to_float(inp[k]);
    dinp[k] =
        from_float<T>(__fadd_rn(__fadd_rn(__fmul_rn(fa, dy), __fmul_rn(fb, __fsub_rn(x, fm))), fk));
  }
}

__global__ void backward_params_kernel(float* dweight, float* dbias, const double* partial,
                                       int groups, int C) {
  const int c = int(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double dw = 0, db = 0;
  for (int g = 0; g < groups; ++g) {
    dw += partial[2 * (size_t(g) * C + c)];
    db += partial[2 * (size_t(g) * C + c) + 1];
  }
  dweight[c] += float(dw);
  dbias[c] += float(db);
}

__global__ void group_stats_kernel(double* mean_sum, double* var_sum, const float* mean,
                                   const float* rstd, int groups, int C, double unbias,
                                   double eps) {
  const int c = int(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double ms = mean_sum[c], vs = var_sum[c];
  for (int g = 0; g < groups; ++g) {
    const double r = double(rstd[size_t(g) * C + c]);
    const double var = fmax(0.0, __dsub_rn(__ddiv_rn(1.0, __dmul_rn(r, r)), eps));
    ms = __dadd_rn(ms, double(mean[size_t(g) * C + c]));
    vs = __dadd_rn(vs, __dmul_rn(var, unbias));
  }
  mean_sum[c] = ms;
  var_sum[c] = vs;
}

}  // namespace

void batchnorm2d_group_stats(double* mean_sum, double* var_sum, const float* mean,
                             const float* rstd, int groups, int C, int HW, int G, float eps,
                             cudaStream_t s) {
  if (groups == 0 || C == 0) return;
  const double n = double(G) * HW;
  const double unbias = n > 1 ? n / (n - 1) : 1.0;
  group_stats_kernel<<<(C + 127) / 128, 128, 0, s>>>(mean_sum, var_sum, mean, rstd, groups, C,
                                                     unbias, double(eps));
  CUDA_CHECK_LAUNCH();
}

template <class T>
void batchnorm2d_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                         const T* bias, int N, int C, int HW, int G, float eps, cudaStream_t s) {
  const int blocks = (N / G) * C;
  if (blocks == 0) return;
  forward_kernel<<<blocks, kThreads, 0, s>>>(out, mean, rstd, inp, weight, bias, C, HW, G, eps);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void batchnorm2d_forward_eval(T* out, const T* inp, const T* weight, const T* bias,
                              const float* running_mean, const float* running_var, int N, int C,
                              int HW, float eps, cudaStream_t s) {
  const size_t n = size_t(N) * C * HW;
  if (n == 0) return;
  const int blocks = int(std::min<size_t>((n + kThreads - 1) / kThreads, 65536));
  forward_eval_kernel<<<blocks, kThreads, 0, s>>>(out, inp, weight, bias, running_mean, running_var,
                                                  n, C, HW, eps);
  CUDA_CHECK_LAUNCH();
}

size_t batchnorm2d_backward_scratch_bytes(int N, int C, int G) {
  return 2 * size_t(N / G) * C * sizeof(double);
}

template <class T>
void batchnorm2d_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                          const T* weight, const float* mean, const float* rstd, int N, int C,
                          int HW, int G, void* scratch, cudaStream_t s) {
  const int groups = N / G;
  if (groups == 0) return;
  auto* partial = static_cast<double*>(scratch);
  backward_kernel<<<groups * C, kThreads, 0, s>>>(dinp, partial, dout, inp, weight, mean, rstd, C,
                                                  HW, G);
  CUDA_CHECK_LAUNCH();
  backward_params_kernel<<<(C + 127) / 128, 128, 0, s>>>(dweight, dbias, partial, groups, C);
  CUDA_CHECK_LAUNCH();
}

#define MPITRON_INSTANTIATE(T)                                                                     \
  template void batchnorm2d_forward<T>(T*, float*, float*, const T*, const T*, const T*, int, int, \
                                       int, int, float, cudaStream_t);                             \
  template void batchnorm2d_forward_eval<T>(T*, const T*, const T*, const T*, const float*,        \
                                            const float*, int, int, int, float, cudaStream_t);     \
  template void batchnorm2d_backward<T>(T*, float*, float*, const T*, const T*, const T*,          \
                                        const float*, const float*, int, int, int, int, void*,     \
                                        cudaStream_t);
MPITRON_INSTANTIATE(float)
MPITRON_INSTANTIATE(__nv_bfloat16)
MPITRON_INSTANTIATE(__half)
#undef MPITRON_INSTANTIATE

}  // namespace mpitron::cuda
