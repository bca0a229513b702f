#include "src/cpu/gemm.hpp"

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

#ifdef MPITRON_BLAS
template <>
void gemm<float>(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                 int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
template <>
void gemm<double>(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A,
                  int lda, const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
const char* gemm_library() {
  return "openblas";
}
#else
template <class F>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, F alpha, const F* A, int lda, const F* B,
          int ldb, F beta, F* C, int ldc) {
  gemm_reference(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
template void gemm<float>(bool, bool, int, int, int, float, const float*, int, const float*, int,
                          float, float*, int);
template void gemm<double>(bool, bool, int, int, int, double, const double*, int, const double*,
                           int, double, double*, int);
const char* gemm_library() {
  return "eigen";
}
#endif

template void gemm_reference<float>(bool, bool, int, int, int, float, const float*, int,
                                    const float*, int, float, float*, int);
template void gemm_reference<double>(bool, bool, int, int, int, double, const double*, int,
                                     const double*, int, double, double*, int);

int default_compute_threads(int ranks) {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env && std::atoi(env) > 0) return std::atoi(env);
  return ranks == 1 ? int(std::max(1u, std::thread::hardware_concurrency())) : 1;
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
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
#ifdef MPITRON_BLAS
  openblas_set_num_threads(n);
#endif
  Eigen::setNbThreads(n);
}

}  // namespace mpitron::cpu
