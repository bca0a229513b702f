// out = inp W^T + b on cuBLAS. Row-major X (r,c) is column-major X^T, so in cuBLAS's terms
//   forward  out^T (OC,N)  = W (OC,IC) inp^T (IC,N):   gemm(T, N, OC, N, IC, W, IC, inp, IC)
//   dinp     dinp^T (IC,N) = W^T (IC,OC) dout^T (OC,N): gemm(N, N, IC, N, OC, W, IC, dout, OC)
//   dweight  dW^T (IC,OC) += inp^T (IC,N) dout (N,OC): gemm(N, T, IC, OC, N, inp, IC, dout, OC)
// with W's row-major (OC,IC) read as the column-major (IC,OC) matrix W^T.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "layers/cuda/linear.cuh"
#include "src/cuda/cuda_check.hpp"

namespace mpitron::cuda {

namespace {

template <class T>
constexpr cudaDataType_t data_type() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return CUDA_R_16BF;
  return CUDA_R_16F;
}

constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;

// The cuBLAS and cuBLASLt handles and cuBLASLt's workspace of this host thread, for its current
// device; made on first use, remade if the thread moves to another device. Destroyed at thread
// exit with errors ignored (the runtime may already be shutting down).
struct BlasHandles {
  int device = -1;
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  void release() {
    if (blas) cublasDestroy(blas);
    if (lt) cublasLtDestroy(lt);
    if (workspace) cudaFree(workspace);
    blas = nullptr;
    lt = nullptr;
    workspace = nullptr;
  }
  ~BlasHandles() { release(); }
};

BlasHandles& handles() {
  thread_local BlasHandles h;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (h.blas == nullptr || h.device != device) {
    h.release();
    CUBLAS_CHECK(cublasCreate(&h.blas));
    // True fp32 products: no TF32 tensor-core rounding of the inputs.
    CUBLAS_CHECK(cublasSetMathMode(h.blas, CUBLAS_DEFAULT_MATH));
    CUBLAS_CHECK(cublasLtCreate(&h.lt));
    CUDA_CHECK(cudaMalloc(&h.workspace, kLtWorkspaceBytes));
    h.device = device;
  }
  return h;
}

// C = A op B with fp32 accumulation; beta 0 assigns, 1 accumulates. C's type may differ from the
// inputs' (fp32 weight gradients of bf16/fp16 activations).
template <class T, class CT>
void gemm(cudaStream_t s, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
          const T* A, int lda, const T* B, int ldb, float beta, CT* C, int ldc) {
  cublasHandle_t h = handles().blas;
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasSetStream(h, s));
  CUBLAS_CHECK(cublasGemmEx(h, ta, tb, m, n, k, &alpha, A, data_type<T>(), lda, B, data_type<T>(),
                            ldb, &beta, C, data_type<CT>(), ldc, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

__device__ __forceinline__ float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

// out[n, o] += bias[o] (and gelu: out2 = gelu(out)), one thread per element.
template <class T, bool kGelu>
__global__ void add_bias(T* __restrict__ out, T* __restrict__ activated, const T* __restrict__ bias,
                         size_t total, int OC) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const float x = float(out[i]) + (bias ? float(bias[i % size_t(OC)]) : 0.0f);
  out[i] = T(x);
  if constexpr (kGelu) activated[i] = T(gelu_tanh(float(T(x))));
}

template <class T, bool kGelu>
void launch_add_bias(T* out, T* activated, const T* bias, int N, int OC, cudaStream_t s) {
  const size_t total = size_t(N) * size_t(OC);
  if (total == 0) return;
  constexpr int kThreads = 256;
  const size_t blocks = (total + kThreads - 1) / kThreads;
  add_bias<T, kGelu><<<unsigned(blocks), kThreads, 0, s>>>(out, activated, bias, total, OC);
  CUDA_CHECK_LAUNCH();
}

// Column sums of dout (N,OC) added to dbias: block (32, 32), thread (x, y) sums rows y, y+32, ...
// of column 32 * blockIdx.x + x in increasing order; the 32 partials are then added in y order.
constexpr int kSumRows = 32;
template <class T>
__global__ void column_sums(float* __restrict__ dbias, const T* __restrict__ dout, int N, int OC) {
  __shared__ float partial[kSumRows][33];
  const int col = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.0f;
  if (col < OC)
    for (int r = threadIdx.y; r < N; r += kSumRows) acc += float(dout[size_t(r) * OC + col]);
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < OC) {
    float total = 0.0f;
    for (int y = 0; y < kSumRows; ++y) total += partial[y][threadIdx.x];
    dbias[col] += total;
  }
}

// The largest power of two up to 16 that divides the address.
uint32_t alignment(const void* p) {
  uint32_t a = 16;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

// The fused bias + GELU product on cuBLASLt: true when it ran, false when cuBLASLt has no
// algorithm for this shape, type or alignment (the caller then takes the unfused path).
template <class T>
bool lt_linear_gelu(T* pre, T* out, const T* inp, const T* weight, const T* bias, int N, int IC,
                    int OC, cudaStream_t s) {
  // The epilogue's auxiliary output wants a 16-byte aligned pointer and a leading dimension that
  // is a multiple of 8.
  if (alignment(pre) < 16 || OC % 8 != 0) return false;
  BlasHandles& h = handles();
  const cudaDataType_t type = data_type<T>();
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                              sizeof epilogue));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre,
                                              sizeof pre));
  const int64_t aux_ld = OC;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                              sizeof aux_ld));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, type, IC, OC, IC));  // W read as (IC,OC), op T
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, type, IC, N, IC));   // inp^T
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d, type, OC, N, OC));   // out^T
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kLtWorkspaceBytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws, sizeof ws));
  // The heuristic assumes 16-byte aligned operands unless told: tell it what they are.
  const uint32_t align_a = alignment(weight), align_b = alignment(inp),
                 align_d = std::min(alignment(out), alignment(pre));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof align_d));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof align_d));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(h.lt, op, a, b, d, d, pref, 1, &result, &found);
  const bool ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
  if (ok) {
    const float alpha = 1.0f, beta = 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(h.lt, op, &alpha, weight, a, inp, b, &beta, out, d, out, d,
                                &result.algo, h.workspace, ws, s));
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(d);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatmulDescDestroy(op);
  return ok;
}

}  // namespace

template <class T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int IC, int OC,
                    cudaStream_t s) {
  if (N == 0 || OC == 0) return;
  gemm(s, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, weight, IC, inp, IC, 0.0f, out, OC);
  if (bias) launch_add_bias<T, false>(out, nullptr, bias, N, OC, s);
}

template <class T>
void linear_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                     const T* weight, int N, int IC, int OC, cudaStream_t s) {
  if (N == 0) return;
  if (dinp) gemm(s, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, weight, IC, dout, OC, 0.0f, dinp, IC);
  gemm(s, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, inp, IC, dout, OC, 1.0f, dweight, IC);
  if (dbias && OC > 0) {
    const dim3 block(32, kSumRows), grid(unsigned((OC + 31) / 32));
    column_sums<T><<<grid, block, 0, s>>>(dbias, dout, N, OC);
    CUDA_CHECK_LAUNCH();
  }
}

template <class T>
void linear_gelu_forward(T* pre, T* out, const T* inp, const T* weight, const T* bias, int N,
                         int IC, int OC, cudaStream_t s) {
  if (N == 0 || OC == 0) return;
  if (lt_linear_gelu(pre, out, inp, weight, bias, N, IC, OC, s)) return;
  gemm(s, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, weight, IC, inp, IC, 0.0f, pre, OC);
  launch_add_bias<T, true>(pre, out, bias, N, OC, s);
}

#define MPITRON_LINEAR(T)                                                                         \
  template void linear_forward<T>(T*, const T*, const T*, const T*, int, int, int, cudaStream_t); \
  template void linear_backward<T>(T*, float*, float*, const T*, const T*, const T*, int, int,    \
                                   int, cudaStream_t);                                            \
  template void linear_gelu_forward<T>(T*, T*, const T*, const T*, const T*, int, int, int,       \
                                       cudaStream_t);
MPITRON_LINEAR(float)
MPITRON_LINEAR(__nv_bfloat16)
MPITRON_LINEAR(__half)
#undef MPITRON_LINEAR

}  // namespace mpitron::cuda
