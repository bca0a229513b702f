// Convolution through cuDNN's convolution calls (conv2d.cuh). Algorithms come from cuDNN's
// heuristics (the _v7 queries, best first), keeping the first that is deterministic, does not use
// tensor cores on float data (TF32 would round the inputs to 10 bits) and fits kMaxWorkspace. On
// bf16 and fp16 data tensor cores are welcome: the inputs are 16-bit already, products accumulate
// in fp32 (the descriptor's compute type).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/cuda_check.hpp"
#include "base/cudnn_library.hpp"
#include "layers/cuda/conv2d.cuh"
#include "layers/cuda/elementwise.cuh"

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

// The first of a heuristic's answers, best first, that is deterministic, fp32 arithmetic on float
// data, and whose workspace cuDNN gives within the cap when asked (an answer marked usable may
// still be refused there). On float data cuDNN reports FMA math, or DEFAULT where the GPU makes
// them one (a V100); the descriptor gets FMA either way, since DEFAULT lets an Ampere or later
// GPU use TF32. Leaves desc with the chosen math type; returns the algorithm and its workspace.
template <class Perf, class Workspace>
std::pair<decltype(Perf::algo), size_t> choose(const std::vector<Perf>& perfs, int returned,
                                               cudnnConvolutionDescriptor_t desc,
                                               const Workspace& workspace, const char* which,
                                               const cpu::Conv2dShape& s, bool float_data) {
  for (int i = 0; i < returned && i < int(perfs.size()); ++i) {
    const Perf& p = perfs[size_t(i)];
    if (p.status != CUDNN_STATUS_SUCCESS || p.determinism != CUDNN_DETERMINISTIC) continue;
    if (float_data && p.mathType != CUDNN_FMA_MATH && p.mathType != CUDNN_DEFAULT_MATH) continue;
    CUDNN_CHECK(lib().cudnnSetConvolutionMathType(desc, float_data ? CUDNN_FMA_MATH : p.mathType));
    size_t bytes = 0;
    if (workspace(p.algo, &bytes) == CUDNN_STATUS_SUCCESS && bytes <= kMaxWorkspace)
      return {p.algo, bytes};
  }
  throw UsageError(fmt::format(
      "cuDNN offers no deterministic {} {} algorithm within {} MiB of workspace for the "
      "convolution N {} IC {} {}x{} OC {} kernel {}x{} stride {} pad {}",
      float_data ? "fp32" : "16-bit", which, kMaxWorkspace >> 20, s.N, s.IC, s.H, s.W, s.OC, s.KH,
      s.KW, s.stride, s.pad));
}

template <class T>
constexpr cudnnDataType_t data_type() {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return CUDNN_DATA_BFLOAT16;
  if constexpr (std::is_same_v<T, __half>) return CUDNN_DATA_HALF;
  return CUDNN_DATA_FLOAT;
}

// dweight[i] += dw16[i]: a 16-bit weight gradient into the fp32 one.
template <class T>
__global__ void accumulate_kernel(float* dweight, const T* dw16, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    dweight[i] = __fadd_rn(dweight[i], elementwise::to_float(dw16[i]));
}

}  // namespace

struct Conv2dCudnn {
  cpu::Conv2dShape shape;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;  // set to each call's N
  cudnnFilterDescriptor_t w = nullptr;
  // One convolution descriptor per direction: each carries the math type its algorithm was chosen
  // with (cuDNN's heuristics answer an algorithm and a math type together).
  cudnnConvolutionDescriptor_t conv = nullptr, conv_data = nullptr, conv_filter = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  cudnnDataType_t data = CUDNN_DATA_FLOAT;  // of x, y and w
  size_t workspace = 0;                     // cuDNN's
  // 16-bit data: the weight gradient cuDNN writes in the storage type (it writes w's type), at
  // this offset of the caller's workspace, then added to the fp32 gradient.
  size_t weight_grad_offset = 0, weight_grad_bytes = 0;

  Conv2dCudnn() = default;
  Conv2dCudnn(const Conv2dCudnn&) = delete;
  Conv2dCudnn& operator=(const Conv2dCudnn&) = delete;
  ~Conv2dCudnn() {  // errors ignored: the runtime may be shutting down
    if (x) lib().cudnnDestroyTensorDescriptor(x);
    if (y) lib().cudnnDestroyTensorDescriptor(y);
    if (w) lib().cudnnDestroyFilterDescriptor(w);
    for (cudnnConvolutionDescriptor_t d : {conv, conv_data, conv_filter})
      if (d) lib().cudnnDestroyConvolutionDescriptor(d);
  }
  void set_rows(int N) const {
    const cpu::Conv2dShape& s = shape;
    CUDNN_CHECK(lib().cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, data, N, s.IC, s.H, s.W));
    CUDNN_CHECK(
        lib().cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, data, N, s.OC, s.OH(), s.OW()));
  }
};

template <class T>
std::shared_ptr<const Conv2dCudnn> conv2d_plan(const cpu::Conv2dShape& s) {
  constexpr bool float_data = std::is_same_v<T, float>;
  auto p = std::make_shared<Conv2dCudnn>();
  p->shape = s;
  p->data = data_type<T>();
  CUDNN_CHECK(lib().cudnnCreateTensorDescriptor(&p->x));
  CUDNN_CHECK(lib().cudnnCreateTensorDescriptor(&p->y));
  CUDNN_CHECK(lib().cudnnCreateFilterDescriptor(&p->w));
  CUDNN_CHECK(
      lib().cudnnSetFilter4dDescriptor(p->w, p->data, CUDNN_TENSOR_NCHW, s.OC, s.IC, s.KH, s.KW));
  for (cudnnConvolutionDescriptor_t* d : {&p->conv, &p->conv_data, &p->conv_filter}) {
    CUDNN_CHECK(lib().cudnnCreateConvolutionDescriptor(d));
    // Cross-correlation, as the CPU layers and PyTorch compute it; sums in fp32 on any data.
    CUDNN_CHECK(lib().cudnnSetConvolution2dDescriptor(*d, s.pad, s.pad, s.stride, s.stride, 1, 1,
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(
        lib().cudnnSetConvolutionMathType(*d, float_data ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
  }
  p->set_rows(s.N);
  cudnnHandle_t h = handle(cudaStreamPerThread);
  int count = 0, most = 0;
  size_t a = 0, b = 0, c = 0;  // each direction's workspace
  {
    CUDNN_CHECK(lib().cudnnGetConvolutionForwardAlgorithmMaxCount(h, &most));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(size_t(std::max(most, 1)));
    CUDNN_CHECK(lib().cudnnGetConvolutionForwardAlgorithm_v7(
        h, p->x, p->w, p->conv, p->y, int(perfs.size()), &count, perfs.data()));
    const auto workspace = [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
      return lib().cudnnGetConvolutionForwardWorkspaceSize(h, p->x, p->w, p->conv, p->y, algo,
                                                           bytes);
    };
    std::tie(p->fwd, a) = choose(perfs, count, p->conv, workspace, "forward", s, float_data);
  }
  {
    CUDNN_CHECK(lib().cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &most));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perfs(size_t(std::max(most, 1)));
    CUDNN_CHECK(lib().cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, p->w, p->y, p->conv_data, p->x, int(perfs.size()), &count, perfs.data()));
    const auto workspace = [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
      return lib().cudnnGetConvolutionBackwardDataWorkspaceSize(h, p->w, p->y, p->conv_data, p->x,
                                                                algo, bytes);
    };
    std::tie(p->bwd_data, b) =
        choose(perfs, count, p->conv_data, workspace, "input-gradient", s, float_data);
  }
  {
    CUDNN_CHECK(lib().cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &most));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perfs(size_t(std::max(most, 1)));
    CUDNN_CHECK(lib().cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        h, p->x, p->y, p->conv_filter, p->w, int(perfs.size()), &count, perfs.data()));
    const auto workspace = [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
      return lib().cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p->x, p->y, p->conv_filter,
                                                                  p->w, algo, bytes);
    };
    std::tie(p->bwd_filter, c) =
        choose(perfs, count, p->conv_filter, workspace, "weight-gradient", s, float_data);
  }
  p->workspace = std::max({a, b, c});
  if (!float_data) {
    p->weight_grad_offset = (p->workspace + 255) / 256 * 256;
    p->weight_grad_bytes = size_t(s.OC) * s.IC * s.KH * s.KW * sizeof(T);
  }
  return p;
}

size_t conv2d_workspace_bytes(const Conv2dCudnn& plan) {
  return plan.weight_grad_bytes ? plan.weight_grad_offset + plan.weight_grad_bytes : plan.workspace;
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
    CUDNN_CHECK(lib().cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, p.y, p.conv_data, p.x,
                                                                   p.bwd_data, &need));
    CUDNN_CHECK(lib().cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x, p.y, p.conv_filter,
                                                                     p.w, p.bwd_filter, &more));
  }
  MPITRON_REQUIRE(std::max(need, more) <= p.workspace,
                  "cuDNN asks more workspace for " + std::to_string(N) + " images than for the " +
                      std::to_string(p.shape.N) + " planned");
}

}  // namespace

template <class T>
void conv2d_forward(T* out, void* workspace, const T* inp, const T* weight, const Conv2dCudnn& p,
                    int N, cudaStream_t s) {
  MPITRON_REQUIRE(p.data == data_type<T>(), "a convolution planned for another storage type");
  check_rows(p, N);
  cudnnHandle_t h = handle(s);
  p.set_rows(N);
  if (N != p.shape.N) check_workspace(h, p, N, false);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(lib().cudnnConvolutionForward(h, &one, p.x, inp, p.w, weight, p.conv, p.fwd,
                                            workspace, p.workspace, &zero, p.y, out));
}

template <class T>
void conv2d_backward(T* dinp, float* dweight, void* workspace, const T* dout, const T* inp,
                     const T* weight, const Conv2dCudnn& p, int N, cudaStream_t s) {
  MPITRON_REQUIRE(p.data == data_type<T>(), "a convolution planned for another storage type");
  check_rows(p, N);
  cudnnHandle_t h = handle(s);
  p.set_rows(N);
  if (N != p.shape.N) check_workspace(h, p, N, true);
  const float one = 1.0f, zero = 0.0f;
  if constexpr (std::is_same_v<T, float>) {
    // dweight += (beta 1): gradients accumulate over micro-batches, as the CPU's.
    CUDNN_CHECK(lib().cudnnConvolutionBackwardFilter(h, &one, p.x, inp, p.y, dout, p.conv_filter,
                                                     p.bwd_filter, workspace, p.workspace, &one,
                                                     p.w, dweight));
  } else {  // this micro-batch's gradient rounded once to T, then added in fp32
    T* dw16 = reinterpret_cast<T*>(static_cast<char*>(workspace) + p.weight_grad_offset);
    CUDNN_CHECK(lib().cudnnConvolutionBackwardFilter(h, &one, p.x, inp, p.y, dout, p.conv_filter,
                                                     p.bwd_filter, workspace, p.workspace, &zero,
                                                     p.w, dw16));
    const size_t n = p.weight_grad_bytes / sizeof(T);
    const int blocks = int(std::min<size_t>((n + 255) / 256, 65536));
    accumulate_kernel<<<blocks, 256, 0, s>>>(dweight, dw16, n);
    CUDA_CHECK_LAUNCH();
  }
  if (dinp)
    CUDNN_CHECK(lib().cudnnConvolutionBackwardData(h, &one, p.w, weight, p.y, dout, p.conv_data,
                                                   p.bwd_data, workspace, p.workspace, &zero, p.x,
                                                   dinp));
}

#define MPITRON_INSTANTIATE(T)                                                            \
  template std::shared_ptr<const Conv2dCudnn> conv2d_plan<T>(const cpu::Conv2dShape&);    \
  template void conv2d_forward<T>(T*, void*, const T*, const T*, const Conv2dCudnn&, int, \
                                  cudaStream_t);                                          \
  template void conv2d_backward<T>(T*, float*, void*, const T*, const T*, const T*,       \
                                   const Conv2dCudnn&, int, cudaStream_t);
MPITRON_INSTANTIATE(float)
MPITRON_INSTANTIATE(__nv_bfloat16)
MPITRON_INSTANTIATE(__half)
#undef MPITRON_INSTANTIATE

}  // namespace mpitron::cuda
