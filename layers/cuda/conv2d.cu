// Convolution through cuDNN's convolution calls (conv2d.cuh). Algorithms come from cuDNN's
// heuristics (the _v7 queries, best first), keeping the first that is deterministic, does not use
// tensor cores on float data (TF32 would round the inputs to 10 bits) and fits kMaxWorkspace.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/cuda_check.hpp"
#include "base/cudnn_library.hpp"
#include "layers/cuda/conv2d.cuh"

namespace mpitron::cuda {

namespace {

constexpr size_t kMaxWorkspace = size_t(256) << 20;

const cudnn::Library& lib() {
  return cudnn::library();
}

// One cuDNN handle per host thread and device, as the cuBLAS handles (layers/cuda/linear.cu).
struct CudnnHandle {
  int device = -1;
  cudnnHandle_t handle = nullptr;
  ~CudnnHandle() {
    if (handle) lib().cudnnDestroy(handle);  // errors ignored: the runtime may be shutting down
  }
};

cudnnHandle_t handle(cudaStream_t s) {
  thread_local CudnnHandle h;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (h.device != device) {
    if (h.handle) CUDNN_CHECK(lib().cudnnDestroy(h.handle));
    h.handle = nullptr;
    CUDNN_CHECK(lib().cudnnCreate(&h.handle));
    h.device = device;
  }
  CUDNN_CHECK(lib().cudnnSetStream(h.handle, s));
  return h.handle;
}

// CUDNN_DEFAULT_MATH would let an Ampere or later GPU use TF32 on float data.
bool fp32_math(cudnnMathType_t m) {
  return m == CUDNN_FMA_MATH;
}

// The first acceptable of a heuristic's answers, best first.
template <class Perf>
Perf choose(const std::vector<Perf>& perfs, int returned, const char* which,
            const cpu::Conv2dShape& s) {
  for (int i = 0; i < returned; ++i) {
    const Perf& p = perfs[size_t(i)];
    if (p.status == CUDNN_STATUS_SUCCESS && p.determinism == CUDNN_DETERMINISTIC &&
        fp32_math(p.mathType) && p.memory <= kMaxWorkspace)
      return p;
  }
  throw UsageError(fmt::format(
      "cuDNN offers no deterministic fp32 {} algorithm within {} MiB of workspace for the "
      "convolution N {} IC {} {}x{} OC {} kernel {}x{} stride {} pad {}",
      which, kMaxWorkspace >> 20, s.N, s.IC, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad));
}

}  // namespace

struct Conv2dCudnn {
  cpu::Conv2dShape shape;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;  // set to each call's N
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t workspace = 0;

  Conv2dCudnn() = default;
  Conv2dCudnn(const Conv2dCudnn&) = delete;
  Conv2dCudnn& operator=(const Conv2dCudnn&) = delete;
  ~Conv2dCudnn() {  // errors ignored: the runtime may be shutting down
    if (x) lib().cudnnDestroyTensorDescriptor(x);
    if (y) lib().cudnnDestroyTensorDescriptor(y);
    if (w) lib().cudnnDestroyFilterDescriptor(w);
    if (conv) lib().cudnnDestroyConvolutionDescriptor(conv);
  }
  void set_rows(int N) const {
    const cpu::Conv2dShape& s = shape;
    CUDNN_CHECK(lib().cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, s.IC,
                                                 s.H, s.W));
    CUDNN_CHECK(lib().cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, s.OC,
                                                 s.OH(), s.OW()));
  }
};

std::shared_ptr<const Conv2dCudnn> conv2d_plan(const cpu::Conv2dShape& s) {
  auto p = std::make_shared<Conv2dCudnn>();
  p->shape = s;
  CUDNN_CHECK(lib().cudnnCreateTensorDescriptor(&p->x));
  CUDNN_CHECK(lib().cudnnCreateTensorDescriptor(&p->y));
  CUDNN_CHECK(lib().cudnnCreateFilterDescriptor(&p->w));
  CUDNN_CHECK(lib().cudnnCreateConvolutionDescriptor(&p->conv));
  CUDNN_CHECK(lib().cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s.OC,
                                               s.IC, s.KH, s.KW));
  // Cross-correlation, as the CPU layers and PyTorch compute it.
  CUDNN_CHECK(lib().cudnnSetConvolution2dDescriptor(p->conv, s.pad, s.pad, s.stride, s.stride, 1, 1,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CUDNN_CHECK(lib().cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH));
  p->set_rows(s.N);
  cudnnHandle_t h = handle(cudaStreamPerThread);
  int count = 0;
  {
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
    CUDNN_CHECK(lib().cudnnGetConvolutionForwardAlgorithm_v7(
        h, p->x, p->w, p->conv, p->y, int(perfs.size()), &count, perfs.data()));
    p->fwd = choose(perfs, count, "forward", s).algo;
  }
  {
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perfs(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    CUDNN_CHECK(lib().cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, p->w, p->y, p->conv, p->x, int(perfs.size()), &count, perfs.data()));
    p->bwd_data = choose(perfs, count, "input-gradient", s).algo;
  }
  {
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perfs(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
    CUDNN_CHECK(lib().cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        h, p->x, p->y, p->conv, p->w, int(perfs.size()), &count, perfs.data()));
    p->bwd_filter = choose(perfs, count, "weight-gradient", s).algo;
  }
  size_t a = 0, b = 0, c = 0;
  CUDNN_CHECK(
      lib().cudnnGetConvolutionForwardWorkspaceSize(h, p->x, p->w, p->conv, p->y, p->fwd, &a));
  CUDNN_CHECK(lib().cudnnGetConvolutionBackwardDataWorkspaceSize(h, p->w, p->y, p->conv, p->x,
                                                                 p->bwd_data, &b));
  CUDNN_CHECK(lib().cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p->x, p->y, p->conv, p->w,
                                                                   p->bwd_filter, &c));
  p->workspace = std::max({a, b, c});
  MPITRON_REQUIRE(p->workspace <= kMaxWorkspace,
                  "cuDNN's workspace above the cap it was chosen by");
  return p;
}

size_t conv2d_workspace_bytes(const Conv2dCudnn& plan) {
  return plan.workspace;
}

namespace {
void check_rows(const Conv2dCudnn& p, int N) {
  MPITRON_REQUIRE(N > 0 && N <= p.shape.N, "convolution on more images than planned");
}

// A call on fewer images than planned: its algorithms' workspace at that N, asked (a host call),
// must fit the planned one.
void check_workspace(cudnnHandle_t h, const Conv2dCudnn& p, int N, bool backward) {
  size_t need = 0, more = 0;
  if (!backward) {
    CUDNN_CHECK(
        lib().cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, p.conv, p.y, p.fwd, &need));
  } else {
    CUDNN_CHECK(lib().cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, p.y, p.conv, p.x,
                                                                   p.bwd_data, &need));
    CUDNN_CHECK(lib().cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x, p.y, p.conv, p.w,
                                                                     p.bwd_filter, &more));
  }
  MPITRON_REQUIRE(std::max(need, more) <= p.workspace,
                  "cuDNN asks more workspace for " + std::to_string(N) + " images than for the " +
                      std::to_string(p.shape.N) + " planned");
}

}  // namespace

void conv2d_forward(float* out, void* workspace, const float* inp, const float* weight,
                    const Conv2dCudnn& p, int N, cudaStream_t s) {
  check_rows(p, N);
  cudnnHandle_t h = handle(s);
  p.set_rows(N);
  if (N != p.shape.N) check_workspace(h, p, N, false);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(lib().cudnnConvolutionForward(h, &one, p.x, inp, p.w, weight, p.conv, p.fwd,
                                            workspace, p.workspace, &zero, p.y, out));
}

void conv2d_backward(float* dinp, float* dweight, void* workspace, const float* dout,
                     const float* inp, const float* weight, const Conv2dCudnn& p, int N,
                     cudaStream_t s) {
  check_rows(p, N);
  cudnnHandle_t h = handle(s);
  p.set_rows(N);
  if (N != p.shape.N) check_workspace(h, p, N, true);
  const float one = 1.0f, zero = 0.0f;
  // dweight += (beta 1): gradients accumulate over micro-batches, as the CPU's.
  CUDNN_CHECK(lib().cudnnConvolutionBackwardFilter(h, &one, p.x, inp, p.y, dout, p.conv,
                                                   p.bwd_filter, workspace, p.workspace, &one, p.w,
                                                   dweight));
  if (dinp)
    CUDNN_CHECK(lib().cudnnConvolutionBackwardData(h, &one, p.w, weight, p.y, dout, p.conv,
                                                   p.bwd_data, workspace, p.workspace, &zero, p.x,
                                                   dinp));
}

}  // namespace mpitron::cuda
