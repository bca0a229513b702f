#include "base/gemm.hpp"

#include <fmt/format.h>
#include <sched.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
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

// Rows of C a chunk starts at are multiples of this: it is a multiple of every OpenBLAS kernel's
// register tile along C's rows (12 for Haswell's and Zen's SGEMM, 8 for their DGEMM, 4 and 2 for
// SkylakeX's), so each chunk's calls lay the same tiles over its rows as one call over all rows
// does, and every entry of C gets the same sums, in the same order, as from that one call.
constexpr int kRowQuantum = 24;
// Every call made holds at least this many multiply-adds: below it OpenBLAS may take another
// kernel (SkylakeX's direct SGEMM serves row-major products under 28 x 512 x 512).
constexpr double kMinCallVolume = double(1 << 23);
constexpr int kMaxChunks = 256;  // threads a product is cut for at most

// Fixed column chunks for products with too few rows to split: a function of the shape alone.
// Counts divide 48 (1, 2, 3, 4, 6, 8, 12, 16 or 24 threads share them evenly); each chunk keeps at
// least 1024 columns (each one repacks A) and kMinCallVolume.
int column_chunk_count(int N, double volume) {
  for (int chunks : {48, 24, 12, 6, 4, 2})
    if (N / chunks >= 1024 && volume / chunks >= kMinCallVolume) return chunks;
  return 1;
}

// One serial library call (OpenMP builds of OpenBLAS thread by OpenMP's count outside a parallel
// region).
template <class F>
void serial_gemm(bool trans_a, bool trans_b, int M, int N, int K, F alpha, const F* A, int lda,
                 const F* B, int ldb, F beta, F* C, int ldc) {
#ifdef _OPENMP
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
#endif
  library_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#ifdef _OPENMP
  omp_set_num_threads(threads);
#endif
}

int available_threads() {
#ifdef _OPENMP
  return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace

// The bits of a product must not depend on how many threads compute it, and a threaded BLAS
// does not promise that (OpenBLAS's threaded driver cuts C's columns by the thread count, and a
// column's tiles, so its sums, change with the columns around it). So the threads here take
// chunks of C's rows that start at multiples of kRowQuantum, one serial library call each: the
// bits of one call over the whole product at any thread count (tests/test_gemm.cpp). Products
// with fewer than 2 x kRowQuantum rows, or wide ones (at least twice as many columns as rows,
// enough for two column chunks: a layer's weight times a batch's activations), are cut into column
// chunks fixed by the shape.
template <class F>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, F alpha, const F* A, int lda, const F* B,
          int ldb, F beta, F* C, int ldc) {
  const double volume = double(M) * N * K;
  const int row_chunks_max = int(std::min<double>(M / kRowQuantum, volume / kMinCallVolume));
  // Wide products (a weight of many columns times few rows of activations) go by columns too:
  // cut by rows, every thread would pack all of B, the bigger operand, for itself.
  const bool wide = N >= 2 * M && column_chunk_count(N, volume) >= 2;
  if (row_chunks_max < 2 || wide) {
    const int chunks = column_chunk_count(N, volume);
    if (chunks == 1)
      return serial_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    const int step = (N + chunks - 1) / chunks;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < chunks; ++c) {
      const int b = c * step, n = std::min(step, N - b);
      if (n > 0)
        library_gemm(trans_a, trans_b, M, n, K, alpha, A, lda,
                     trans_b ? B + ptrdiff_t(b) * ldb : B + b, ldb, beta, C + b, ldc);
    }
    return;
  }
  const int wanted = std::min({available_threads(), row_chunks_max, kMaxChunks});
  if (wanted < 2)
    return serial_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  // Chunk c starts at c M / wanted rounded to the nearest multiple of kRowQuantum; a chunk that
  // would hold fewer than kMinCallVolume multiply-adds joins the one before (the last one ends C,
  // so its tiles are those of one call whatever its size).
  int starts[kMaxChunks + 1];
  int chunks = 0;
  starts[chunks++] = 0;
  const double row_volume = double(N) * K;
  for (int c = 1; c < wanted; ++c) {
    const int b = int(std::lround(double(c) * M / wanted / kRowQuantum)) * kRowQuantum;
    if ((b - starts[chunks - 1]) * row_volume >= kMinCallVolume && b < M) starts[chunks++] = b;
  }
  if (chunks > 1 && (M - starts[chunks - 1]) * row_volume < kMinCallVolume) --chunks;
  starts[chunks] = M;
#pragma omp parallel for schedule(static, 1)
  for (int c = 0; c < chunks; ++c) {
    const int b = starts[c], n = starts[c + 1] - b;
    library_gemm(trans_a, trans_b, n, N, K, alpha, trans_a ? A + b : A + ptrdiff_t(b) * lda, lda, B,
                 ldb, beta, C + ptrdiff_t(b) * ldc, ldc);
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

const char* blas_kernels() {
#ifdef MPITRON_BLAS
  return openblas_get_corename();
#else
  return nullptr;
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
