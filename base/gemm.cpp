#include "base/gemm.hpp"

#include <fmt/format.h>
#include <sched.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <thread>

#ifdef MPITRON_BLAS
#include <cblas.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

namespace mpitron::cpu {

namespace {
template <class F>
using RowMat = Eigen::Matrix<F, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class F>
using ConstMap = Eigen::Map<const RowMat<F>, 0, Eigen::OuterStride<>>;
template <class F>
using Map = Eigen::Map<RowMat<F>, 0, Eigen::OuterStride<>>;
}  // namespace

template <class F>
void gemm_reference(bool trans_a, bool trans_b, int M, int N, int K, F alpha, const F* A, int lda,
                    const F* B, int ldb, F beta, F* C, int ldc) {
  Map<F> c(C, M, N, Eigen::OuterStride<>(ldc));
  ConstMap<F> a(A, trans_a ? K : M, trans_a ? M : K, Eigen::OuterStride<>(lda));
  ConstMap<F> b(B, trans_b ? N : K, trans_b ? K : N, Eigen::OuterStride<>(ldb));
  if (beta == F(0)) {
    c.setZero();
  } else if (beta != F(1)) {
    c *= beta;
  }
  if (!trans_a && !trans_b) c.noalias() += alpha * a * b;
  if (!trans_a && trans_b) c.noalias() += alpha * a * b.transpose();
  if (trans_a && !trans_b) c.noalias() += alpha * a.transpose() * b;
  if (trans_a && trans_b) c.noalias() += alpha * a.transpose() * b.transpose();
}

namespace {

// One single-threaded library call (OpenBLAS where the build has it, else Eigen).
#ifdef MPITRON_BLAS
void library_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                  int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void library_gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A,
                  int lda, const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#else
template <class F>
void library_gemm(bool trans_a, bool trans_b, int M, int N, int K, F alpha, const F* A, int lda,
                  const F* B, int ldb, F beta, F* C, int ldc) {
  gemm_reference(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#endif

// Chunks of C along a side of `dim` for a product of `volume` multiply-adds: a function of the
// shape alone, so that no thread count changes a bit (a serial library call's bits depend on its
// shape: OpenBLAS's Haswell/Zen kernels round a row otherwise when the rows around it change).
// Counts divide 48 (1, 2, 3, 4, 6, 8, 12, 16 or 24 threads share the chunks evenly); chunks keep
// at least 1024 rows or columns (each chunk repacks the other operand) and 2^21 multiply-adds.
int chunk_count(int dim, double volume) {
  for (int chunks : {48, 24, 12, 6, 4, 2})
    if (dim / chunks >= 1024 && volume / chunks >= double(1 << 21)) return chunks;
  return 1;
}

}  // namespace

// The bits of a product must not depend on how many threads compute it, and a threaded BLAS
// does not promise that (OpenBLAS's threaded driver splits the work by thread count). So C is cut
// along its longer side into chunks fixed by the shape (chunk_count), each one serial library call
// (inside the parallel region, where OpenMP builds of OpenBLAS do not thread), and threads take
// whole chunks: the same calls, so the same bits, at any thread count (tests/test_gemm.cpp).
template <class F>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, F alpha, const F* A, int lda, const F* B,
          int ldb, F beta, F* C, int ldc) {
  const bool by_rows = M >= N;
  const int dim = by_rows ? M : N;
  const int chunks = chunk_count(dim, double(M) * N * K);
  if (chunks == 1) {  // one serial call: OpenMP builds of OpenBLAS thread by OpenMP's count
#ifdef _OPENMP
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
#endif
    library_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    return;
  }
  const int step = (dim + chunks - 1) / chunks;
#pragma omp parallel for schedule(static)
  for (int c = 0; c < chunks; ++c) {
    const int b = c * step, n = std::min(step, dim - b);
    if (n <= 0) continue;
    if (by_rows)  // rows b.. of op(A) and of C
      library_gemm(trans_a, trans_b, n, N, K, alpha, trans_a ? A + b : A + ptrdiff_t(b) * lda, lda,
                   B, ldb, beta, C + ptrdiff_t(b) * ldc, ldc);
    else  // columns b.. of op(B) and of C
      library_gemm(trans_a, trans_b, M, n, K, alpha, A, lda,
                   trans_b ? B + ptrdiff_t(b) * ldb : B + b, ldb, beta, C + b, ldc);
  }
}

template void gemm<float>(bool, bool, int, int, int, float, const float*, int, const float*, int,
                          float, float*, int);
template void gemm<double>(bool, bool, int, int, int, double, const double*, int, const double*,
                           int, double, double*, int);

const char* gemm_library() {
#ifdef MPITRON_BLAS
  return "openblas";
#else
  return "eigen";
#endif
}

template void gemm_reference<float>(bool, bool, int, int, int, float, const float*, int,
                                    const float*, int, float, float*, int);
template void gemm_reference<double>(bool, bool, int, int, int, double, const double*, int,
                                     const double*, int, double, double*, int);

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

ComputeThreads default_compute_threads(int own_cores, int node_cores, int ranks_on_node) {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env && std::atoi(env) > 0) return {std::atoi(env), "OMP_NUM_THREADS"};
  const int ranks = std::max(1, ranks_on_node);
  node_cores = std::max(1, node_cores);
  return {std::clamp(node_cores / ranks, 1, std::max(1, own_cores)),
          fmt::format("{} core{} for {} rank{} on the node", node_cores, node_cores == 1 ? "" : "s",
                      ranks, ranks == 1 ? "" : "s")};
}

const char* better_blas_kernels() {
#ifdef MPITRON_BLAS
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return nullptr;
  const char* core = openblas_get_corename();
  if (core == nullptr || std::string_view(core) != "Prescott") return nullptr;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "SkylakeX";
  if (__builtin_cpu_supports("avx2")) return "Haswell";
#endif
  return nullptr;
}

void set_compute_threads(int n) {
#ifdef MPITRON_BLAS
  // gemm() threads over chunks itself. First: OpenMP builds of OpenBLAS set OpenMP's count too.
  openblas_set_num_threads(1);
#endif
  Eigen::setNbThreads(1);
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
}

}  // namespace mpitron::cpu
