// The linear layer on cuBLASLt/cuBLAS. Row-major X (r,c) is column-major X^T (c,r); W's row-major
// (OC,IC) is the column-major (IC,OC) matrix W^T. In BLAS's column-major terms:
//   forward  out^T (OC,N) = op_T(W^T) inp^T      m=OC n=N  k=IC  A=W   lda=IC  B=inp  ldb=IC
//   dinp     dinp^T (IC,N) = W^T dout^T          m=IC n=N  k=OC  A=W   lda=IC  B=dout ldb=OC
//   dweight  dW^T (IC,OC) += inp^T op_T(dout^T)  m=IC n=OC k=N   A=inp lda=IC  B=dout ldb=OC
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "base/check.hpp"
#include "base/cuda_check.hpp"
#include "layers/cuda/elementwise.cuh"
#include "layers/cuda/linear.cuh"

namespace mpitron::cuda {

namespace {

template <class T>
constexpr cudaDataType_t data_type() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return CUDA_R_16BF;
  return CUDA_R_16F;
}

using elementwise::from_float;
using elementwise::to_float;

constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;
// Distinct (type, epilogue, N, IC, OC) whose cuBLASLt algorithm a thread keeps; then round robin.
constexpr int kPlans = 64;
// The alignment (bytes) the Lt path demands of every pointer and leading dimension; its algorithm
// is chosen for exactly this alignment, so it suits every call that passes the check.
constexpr uintptr_t kLtAlign = 16;

enum Epilogue : int { kPlain = 0, kBias = 1, kGelu = 2, kGeluBias = 3 };

cublasLtEpilogue_t lt_epilogue(Epilogue e) {
  switch (e) {
    case kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case kGelu:
      return CUBLASLT_EPILOGUE_GELU_AUX;
    case kGeluBias:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    default:
      return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

bool has_bias(Epilogue e) {
  return e == kBias || e == kGeluBias;
}
bool has_gelu(Epilogue e) {
  return e == kGelu || e == kGeluBias;
}

// One cuBLASLt problem (descriptors and the heuristic's algorithm), or the note that cuBLASLt has
// none for it (found = false).
struct LtPlan {
  int type = -1, epilogue = -1, N = 0, IC = 0, OC = 0;  // the key; type -1: an empty slot
  bool found = false;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  void destroy_descriptors() {  // errors ignored: host-side descriptors only
    if (d) cublas::library().cublasLtMatrixLayoutDestroy(d);
    if (b) cublas::library().cublasLtMatrixLayoutDestroy(b);
    if (a) cublas::library().cublasLtMatrixLayoutDestroy(a);
    if (op) cublas::library().cublasLtMatmulDescDestroy(op);
    op = nullptr;
    a = b = d = nullptr;
  }
  void release() {
    destroy_descriptors();
    *this = LtPlan{};
  }
};

// This host thread's cuBLAS and cuBLASLt handles, cuBLASLt workspace and plans, for its current
// device; made on first use, remade if the thread moves to another device. The workspace serves
// every stream of the thread: `workspace_done` is recorded after each use, and a use on another
// stream than the last waits for it. Freed at thread exit, errors ignored (as in step_ops.cu).
struct BlasHandles {
  int device = -1;
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  cudaEvent_t workspace_done = nullptr;
  cudaStream_t workspace_stream = nullptr;
  bool workspace_used = false;
  LtPlan plans[kPlans];
  int next_plan = 0;

  void release() {
    if (device < 0) return;
    int current = -1;
    const bool switch_device = cudaGetDevice(&current) == cudaSuccess && current != device;
    if (switch_device) cudaSetDevice(device);  // destroy each resource on its own device
    for (LtPlan& p : plans) p.release();
    if (blas) cublas::library().cublasDestroy(blas);
    if (lt) cublas::library().cublasLtDestroy(lt);
    if (workspace_done) cudaEventDestroy(workspace_done);
    if (workspace) cudaFree(workspace);
    if (switch_device) cudaSetDevice(current);
    *this = BlasHandles{};
  }
  BlasHandles() = default;
  BlasHandles(const BlasHandles&) = delete;
  BlasHandles& operator=(const BlasHandles&) = delete;
  BlasHandles& operator=(BlasHandles&&) = default;
  ~BlasHandles() { release(); }
};

BlasHandles& handles() {
  thread_local BlasHandles h;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (h.device != device) {
    h.release();
    h.device = device;
    CUBLAS_CHECK(cublas::library().cublasCreate(&h.blas));
    // No TF32 (true fp32 products); split-k partial sums kept in fp32 for bf16/f16 outputs.
    CUBLAS_CHECK(cublas::library().cublasSetMathMode(
        h.blas, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    CUBLAS_CHECK(cublas::library().cublasLtCreate(&h.lt));
    CUDA_CHECK(cudaMalloc(&h.workspace, kLtWorkspaceBytes));
    CUDA_CHECK(cudaEventCreateWithFlags(&h.workspace_done, cudaEventDisableTiming));
  }
  return h;
}

thread_local bool t_forward_used_lt = false;

bool aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kLtAlign == 0;
}

// C = op(A) op(B) (+ C when beta = 1) with fp32 accumulation; C may be float while A, B are T.
template <class T, class CT>
void gemm(cudaStream_t s, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
          const T* A, int lda, const T* B, int ldb, float alpha, float beta, CT* C, int ldc) {
  cublasHandle_t h = handles().blas;
  CUBLAS_CHECK(cublas::library().cublasSetStream(h, s));
  CUBLAS_CHECK(cublas::library().cublasGemmEx(h, ta, tb, m, n, k, &alpha, A, data_type<T>(), lda, B,
                                              data_type<T>(), ldb, &beta, C, data_type<CT>(), ldc,
                                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The plan for (T, e, N, IC, OC): from this thread's cache, else built and the heuristic asked.
template <class T>
LtPlan& lt_plan(BlasHandles& h, Epilogue e, int N, int IC, int OC) {
  const int type = int(data_type<T>());
  for (LtPlan& p : h.plans)
    if (p.type == type && p.epilogue == int(e) && p.N == N && p.IC == IC && p.OC == OC) return p;
  LtPlan& p = h.plans[h.next_plan];
  h.next_plan = (h.next_plan + 1) % kPlans;
  p.release();
  p.type = type;
  p.epilogue = int(e);
  p.N = N;
  p.IC = IC;
  p.OC = OC;

  CUBLAS_CHECK(cublas::library().cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLAS_CHECK(cublas::library().cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                                &ta, sizeof ta));
  CUBLAS_CHECK(cublas::library().cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                                &tb, sizeof tb));
  const cublasLtEpilogue_t epilogue = lt_epilogue(e);
  CUBLAS_CHECK(cublas::library().cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                                &epilogue, sizeof epilogue));
  // The heuristic reads the bias and aux pointers' alignment: show it one aligned to exactly
  // kLtAlign (never dereferenced), the least any call passes with.
  const void* probe = static_cast<const char*>(h.workspace) + kLtAlign;
  if (has_bias(e))
    CUBLAS_CHECK(cublas::library().cublasLtMatmulDescSetAttribute(
        p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &probe, sizeof probe));
  if (has_gelu(e)) {
    CUBLAS_CHECK(cublas::library().cublasLtMatmulDescSetAttribute(
        p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &probe, sizeof probe));
    const int64_t aux_ld = OC;
    CUBLAS_CHECK(cublas::library().cublasLtMatmulDescSetAttribute(
        p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
  }
  const cudaDataType_t t = data_type<T>();
  CUBLAS_CHECK(cublas::library().cublasLtMatrixLayoutCreate(&p.a, t, uint64_t(IC), uint64_t(OC),
                                                            int64_t(IC)));
  CUBLAS_CHECK(cublas::library().cublasLtMatrixLayoutCreate(&p.b, t, uint64_t(IC), uint64_t(N),
                                                            int64_t(IC)));
  CUBLAS_CHECK(cublas::library().cublasLtMatrixLayoutCreate(&p.d, t, uint64_t(OC), uint64_t(N),
                                                            int64_t(OC)));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublas::library().cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kLtWorkspaceBytes;
  CUBLAS_CHECK(cublas::library().cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  // Split-k partial sums only in fp32 in the workspace (not in a bf16/f16 output).
  const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  CUBLAS_CHECK(cublas::library().cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction, sizeof reduction));
  const uint32_t align = uint32_t(kLtAlign);  // the default assumes 256
  for (const cublasLtMatmulPreferenceAttributes_t attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    CUBLAS_CHECK(
        cublas::library().cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align));
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t st = cublas::library().cublasLtMatmulAlgoGetHeuristic(
      h.lt, p.op, p.a, p.b, p.d, p.d, pref, 1, &result, &count);
  cublas::library().cublasLtMatmulPreferenceDestroy(pref);
  p.found = st == CUBLAS_STATUS_SUCCESS && count > 0 && result.state == CUBLAS_STATUS_SUCCESS &&
            result.workspaceSize <= kLtWorkspaceBytes;
  if (p.found)
    p.algo = result.algo;
  else  // the key stays: this problem takes the unfused path without asking again
    p.destroy_descriptors();
  return p;
}

// D = out^T (OC,N) = op_T(W^T) inp^T with epilogue e (bias, and GELU with aux = pre): one cuBLASLt
// call. False (nothing launched) where the shape or alignment is outside the Lt path or cuBLASLt
// has no algorithm for it.
template <class T>
bool lt_forward(T* out, T* pre, const T* inp, const T* weight, const T* bias, int N, int IC, int OC,
                Epilogue e, cudaStream_t s) {
  constexpr int kPerAlign = int(kLtAlign / sizeof(T));  // elements per 16 bytes
  if (IC % kPerAlign != 0 || OC % kPerAlign != 0) return false;
  if (!aligned(out) || !aligned(inp) || !aligned(weight)) return false;
  if (has_bias(e) && !aligned(bias)) return false;
  if (has_gelu(e) && (!aligned(pre) || OC % 8 != 0)) return false;  // aux ld: multiple of 8
  BlasHandles& h = handles();
  LtPlan& p = lt_plan<T>(h, e, N, IC, OC);
  if (!p.found) return false;
  if (has_bias(e))
    CUBLAS_CHECK(cublas::library().cublasLtMatmulDescSetAttribute(
        p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  if (has_gelu(e))
    CUBLAS_CHECK(cublas::library().cublasLtMatmulDescSetAttribute(
        p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre, sizeof pre));
  if (h.workspace_used && s != h.workspace_stream)
    CUDA_CHECK(cudaStreamWaitEvent(s, h.workspace_done, 0));
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t st =
      cublas::library().cublasLtMatmul(h.lt, p.op, &alpha, weight, p.a, inp, p.b, &beta, out, p.d,
                                       out, p.d, &p.algo, h.workspace, kLtWorkspaceBytes, s);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) {  // refused before launching: never tried again
    p.found = false;
    return false;
  }
  CUBLAS_CHECK(st);
  CUDA_CHECK(cudaEventRecord(h.workspace_done, s));
  h.workspace_stream = s;
  h.workspace_used = true;
  return true;
}

constexpr int kThreads = 256;
constexpr unsigned kMaxRowBlocks = 65535;  // gridDim.y limit
constexpr size_t kMaxBlocks = size_t(1) << 16;

// out[n, o] = bias[o] (0 without bias): the rows the unfused product adds onto (beta = 1).
template <class T>
__global__ void fill_rows(T* __restrict__ out, const T* __restrict__ bias, int N, int OC) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
    T* row = out + n * OC;
    for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < OC; o += stride)
      row[o] = bias ? bias[o] : from_float<T>(0.0f);
  }
}

template <class T>
void launch_fill_rows(T* out, const T* bias, int N, int OC, cudaStream_t s) {
  const dim3 grid(unsigned((int64_t(OC) + kThreads - 1) / kThreads),
                  std::min(unsigned(N), kMaxRowBlocks));
  fill_rows<T><<<grid, kThreads, 0, s>>>(out, bias, N, OC);
  CUDA_CHECK_LAUNCH();
}

__device__ __forceinline__ float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

template <class T>
__global__ void gelu_elementwise(T* __restrict__ out, const T* __restrict__ pre, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] = from_float<T>(gelu_tanh(to_float(pre[i])));
}

template <class T>
void launch_gelu(T* out, const T* pre, size_t n, cudaStream_t s) {
  const size_t blocks = std::min((n + kThreads - 1) / kThreads, kMaxBlocks);
  gelu_elementwise<T><<<unsigned(blocks), kThreads, 0, s>>>(out, pre, n);
  CUDA_CHECK_LAUNCH();
}

// Column sums of dout (N,OC) added to dbias. Block (32, 32) owns 32 columns: thread (x, y) sums
// rows y, y + 32, ... of column 32 blockIdx.x + x in increasing order (a warp reads 32 adjacent
// columns of one row), then thread (x, 0) adds the 32 partials in y order.
constexpr int kSumCols = 32, kSumRows = 32;
template <class T>
__global__ void __launch_bounds__(kSumCols* kSumRows)
    column_sums(float* __restrict__ dbias, const T* __restrict__ dout, int N, int OC) {
  __shared__ float partial[kSumRows][kSumCols + 1];
  const int64_t col = int64_t(blockIdx.x) * kSumCols + threadIdx.x;
  float acc = 0.0f;
  if (col < OC) {
#pragma unroll 4
    for (int64_t r = threadIdx.y; r < N; r += kSumRows) acc += to_float(dout[r * OC + col]);
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < OC) {
    float total = 0.0f;
    for (int y = 0; y < kSumRows; ++y) total += partial[y][threadIdx.x];
    dbias[col] += total;
  }
}

// The fast bias gradient in two deterministic passes: the rows are cut into chunks fixed by N alone
// (kChunkRows each, at most as many as the workspace holds), block (x, y) of the first pass sums
// chunk y of columns 32x.. in the reference kernel's order into partial[y][col], and the second
// sums the chunks of each column in chunk order. So the bits depend on (N, OC) only, and the
// rows spread over every SM instead of OC/32 blocks.
constexpr int kChunkRows = 256;
template <class T>
__global__ void __launch_bounds__(kSumCols* kSumRows)
    column_sums_chunked(float* __restrict__ partial, const T* __restrict__ dout, int N, int OC,
                        int chunk_rows) {
  __shared__ float part[kSumRows][kSumCols + 1];
  const int64_t col = int64_t(blockIdx.x) * kSumCols + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < N ? r0 + chunk_rows : int64_t(N);
  float acc = 0.0f;
  if (col < OC) {
#pragma unroll 4
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kSumRows) acc += to_float(dout[r * OC + col]);
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < OC) {
    float total = 0.0f;
    for (int y = 0; y < kSumRows; ++y) total += part[y][threadIdx.x];
    partial[int64_t(blockIdx.y) * OC + col] = total;
  }
}

__global__ void __launch_bounds__(256)
    sum_chunks(float* __restrict__ dbias, const float* __restrict__ partial, int chunks, int OC) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= OC) return;
  float total = 0.0f;
  for (int c = 0; c < chunks; ++c) total += partial[int64_t(c) * OC + col];
  dbias[col] += total;
}

void check_shape(int N, int IC, int OC) {
  MPITRON_REQUIRE(N >= 0 && IC >= 0 && OC >= 0, "linear: N, IC, OC must be non-negative");
}

// pre = inp W^T + b (and out = gelu(pre) when gelu): the fused cuBLASLt call where it applies,
// else the bias rows (or zeros), cublasGemmEx adding the product onto them, then GELU.
template <class T>
void forward(T* pre, T* out, const T* inp, const T* weight, const T* bias, int N, int IC, int OC,
             bool gelu, cudaStream_t s) {
  check_shape(N, IC, OC);
  t_forward_used_lt = false;
  if (N == 0 || OC == 0) return;
  const Epilogue e = gelu ? (bias ? kGeluBias : kGelu) : (bias ? kBias : kPlain);
  // Lt writes D = gelu(pre) and aux = pre; without GELU, D is pre.
  if (IC > 0 && lt_forward(gelu ? out : pre, pre, inp, weight, bias, N, IC, OC, e, s)) {
    t_forward_used_lt = true;
    return;
  }
  if (bias)
    launch_fill_rows(pre, bias, N, OC, s);
  else if (IC == 0)
    CUDA_CHECK(cudaMemsetAsync(pre, 0, size_t(N) * size_t(OC) * sizeof(T), s));
  if (IC > 0)
    gemm(s, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, weight, IC, inp, IC, 1.0f, bias ? 1.0f : 0.0f, pre,
         OC);
  if (gelu) launch_gelu(out, pre, size_t(N) * size_t(OC), s);
}

}  // namespace

bool linear_forward_used_lt() {
  return t_forward_used_lt;
}

template <class T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int IC, int OC,
                    cudaStream_t s) {
  forward<T>(out, nullptr, inp, weight, bias, N, IC, OC, false, s);
}

template <class T>
void linear_gelu_forward(T* pre, T* out, const T* inp, const T* weight, const T* bias, int N,
                         int IC, int OC, cudaStream_t s) {
  forward<T>(pre, out, inp, weight, bias, N, IC, OC, true, s);
}

template <class T>
void linear_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                     const T* weight, int N, int IC, int OC, cudaStream_t s, float dout_scale) {
  check_shape(N, IC, OC);
  MPITRON_REQUIRE(dout_scale == 1.0f || !dbias, "linear_backward: a dout_scale with a bias");
  if (N == 0) return;
  if (dinp && IC > 0) {
    if (OC > 0)
      gemm(s, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, weight, IC, dout, OC, dout_scale, 0.0f, dinp,
           IC);
    else  // an empty sum
      CUDA_CHECK(cudaMemsetAsync(dinp, 0, size_t(N) * size_t(IC) * sizeof(T), s));
  }
  if (dweight && IC > 0 && OC > 0)
    gemm(s, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, inp, IC, dout, OC, dout_scale, 1.0f, dweight, IC);
  if (dbias && OC > 0) bias_gradient(dbias, dout, N, OC, s);
}

template <class T>
void bias_gradient_reference(float* dbias, const T* dout, int N, int OC, cudaStream_t s) {
  if (N == 0 || OC == 0) return;
  const dim3 block(kSumCols, kSumRows), grid(unsigned((int64_t(OC) + kSumCols - 1) / kSumCols));
  column_sums<T><<<grid, block, 0, s>>>(dbias, dout, N, OC);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void bias_gradient(float* dbias, const T* dout, int N, int OC, cudaStream_t s) {
  if (N == 0 || OC == 0) return;
  BlasHandles& h = handles();
  // As many chunks as the workspace and the grid hold, of at least kChunkRows rows each.
  const int64_t max_chunks =
      std::min<int64_t>(int64_t(kLtWorkspaceBytes / sizeof(float)) / OC, kMaxRowBlocks);
  const int64_t rows_per_chunk =
      std::max<int64_t>(kChunkRows, (int64_t(N) + std::max<int64_t>(max_chunks, 1) - 1) /
                                        std::max<int64_t>(max_chunks, 1));
  const int chunks = int((int64_t(N) + rows_per_chunk - 1) / rows_per_chunk);
  if (max_chunks < 2 || chunks <= 1) {
    bias_gradient_reference(dbias, dout, N, OC, s);
    return;
  }
  if (h.workspace_used && s != h.workspace_stream)
    CUDA_CHECK(cudaStreamWaitEvent(s, h.workspace_done, 0));
  float* partial = static_cast<float*>(h.workspace);
  const dim3 block(kSumCols, kSumRows);
  const dim3 grid(unsigned((int64_t(OC) + kSumCols - 1) / kSumCols), unsigned(chunks));
  column_sums_chunked<T><<<grid, block, 0, s>>>(partial, dout, N, OC, int(rows_per_chunk));
  CUDA_CHECK_LAUNCH();
  sum_chunks<<<unsigned((int64_t(OC) + 255) / 256), 256, 0, s>>>(dbias, partial, chunks, OC);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaEventRecord(h.workspace_done, s));
  h.workspace_stream = s;
  h.workspace_used = true;
}

#define MPITRON_LINEAR(T)                                                                         \
  template void linear_forward<T>(T*, const T*, const T*, const T*, int, int, int, cudaStream_t); \
  template void linear_backward<T>(T*, float*, float*, const T*, const T*, const T*, int, int,    \
                                   int, cudaStream_t, float);                                     \
  template void linear_gelu_forward<T>(T*, T*, const T*, const T*, const T*, int, int, int,       \
                                       cudaStream_t);                                             \
  template void bias_gradient<T>(float*, const T*, int, int, cudaStream_t);                       \
  template void bias_gradient_reference<T>(float*, const T*, int, int, cudaStream_t);
MPITRON_LINEAR(float)
MPITRON_LINEAR(__nv_bfloat16)
MPITRON_LINEAR(__half)
#undef MPITRON_LINEAR

}  // namespace mpitron::cuda
