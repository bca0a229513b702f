// cpu::gemm (OpenBLAS where built with it) against cpu::gemm_reference (Eigen): all four transpose
// combinations, non-square shapes, padded leading dimensions, alpha/beta variants, float and
// double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/gemm.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace mpitron::cpu {
namespace {

template <class F>
std::vector<F> random_vec(size_t n, std::mt19937& g) {
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<F> v(n);
  for (F& x : v) x = F(d(g));
  return v;
}

// Runs both paths on the same operands, C stored with ldc and padding that must stay untouched.
template <class F>
void check(bool ta, bool tb, int M, int N, int K, F alpha, F beta, int pad, double tol) {
  std::mt19937 g(M * 1000 + N * 100 + K + ta * 7 + tb * 13 + pad);
  const int arows = ta ? K : M, acols = ta ? M : K;
  const int brows = tb ? N : K, bcols = tb ? K : N;
  const int lda = acols + pad, ldb = bcols + pad, ldc = N + pad;
  const std::vector<F> A = random_vec<F>(size_t(arows) * lda, g);
  const std::vector<F> B = random_vec<F>(size_t(brows) * ldb, g);
  const std::vector<F> C0 = random_vec<F>(size_t(M) * ldc, g);
  std::vector<F> fast = C0, ref = C0;
  gemm<F>(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, fast.data(), ldc);
  gemm_reference<F>(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, ref.data(), ldc);

  // An independent triple loop checks the reference itself.
  double max_ref = 0, max_diff = 0, max_naive = 0;
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k) {
        const double a = ta ? A[size_t(k) * lda + i] : A[size_t(i) * lda + k];
        const double b = tb ? B[size_t(j) * ldb + k] : B[size_t(k) * ldb + j];
        s += a * b;
      }
      const double naive = double(alpha) * s + double(beta) * double(C0[size_t(i) * ldc + j]);
      const double r = ref[size_t(i) * ldc + j];
      max_ref = std::max(max_ref, std::fabs(r));
      max_diff = std::max(max_diff, std::fabs(double(fast[size_t(i) * ldc + j]) - r));
      max_naive = std::max(max_naive, std::fabs(naive - r));
    }
    for (int j = N; j < ldc; ++j) {  // padding columns are not part of C
      EXPECT_EQ(fast[size_t(i) * ldc + j], C0[size_t(i) * ldc + j]);
      EXPECT_EQ(ref[size_t(i) * ldc + j], C0[size_t(i) * ldc + j]);
    }
  }
  // Relative to the largest entry of the result (entries near 0 carry absolute rounding error).
  const double bound = tol * std::max(1.0, max_ref);
  EXPECT_LE(max_diff, bound) << "gemm vs reference, ta=" << ta << " tb=" << tb << " M=" << M
                             << " N=" << N << " K=" << K << " pad=" << pad;
  EXPECT_LE(max_naive, bound) << "reference vs loop, ta=" << ta << " tb=" << tb << " M=" << M
                              << " N=" << N << " K=" << K << " pad=" << pad;
}

struct Shape {
  int M, N, K;
};

template <class F>
void check_all(double tol) {
  const Shape shapes[] = {{1, 1, 1},   {7, 5, 3},    {3, 17, 29},
                          {33, 9, 64}, {65, 70, 31}, {128, 96, 130}};
  const F ab[][2] = {{F(1), F(0)}, {F(1), F(1)}, {F(0.5), F(-2)}, {F(-1.25), F(0.5)}};
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (const Shape& s : shapes) {
        for (const auto& c : ab) {
          for (int pad : {0, 3}) check<F>(ta, tb, s.M, s.N, s.K, c[0], c[1], pad, tol);
        }
      }
    }
  }
}

TEST(Gemm, FloatMatchesReference) {
  check_all<float>(1e-5);
}
TEST(Gemm, DoubleMatchesReference) {
  check_all<double>(1e-12);
}

// beta == 0 must not read C (BLAS semantics): NaN in C does not reach the result.
TEST(Gemm, BetaZeroIgnoresC) {
  const int M = 4, N = 6, K = 5;
  std::mt19937 g(1);
  const std::vector<double> A = random_vec<double>(M * K, g), B = random_vec<double>(K * N, g);
  std::vector<double> fast(M * N, std::nan("")), ref(M * N, std::nan(""));
  gemm<double>(false, false, M, N, K, 1.0, A.data(), K, B.data(), N, 0.0, fast.data(), N);
  gemm_reference<double>(false, false, M, N, K, 1.0, A.data(), K, B.data(), N, 0.0, ref.data(), N);
  for (int i = 0; i < M * N; ++i) {
    EXPECT_FALSE(std::isnan(fast[i]));
    EXPECT_NEAR(fast[i], ref[i], 1e-12);
  }
}

#ifdef _OPENMP
// gemm() gives the same bits at any thread count: row chunks start at multiples of 48 (so their
// bits are one call's), products with few rows, or many more columns than rows (wide), take column
// chunks fixed by the shape. Shapes with
// tails on every side, row splits with a short last chunk kept and joined, column chunks, serial
// products; both transposes, beta 0 and 1, float and double.
template <class F>
void check_thread_counts() {
  struct Shape {
    int M, N, K;
  };
  const Shape shapes[] = {{111, 96, 96},    {2048, 384, 128}, {515, 131, 77},  {97, 1031, 129},
                          {1500, 200, 700}, {64, 64, 4096},   {247, 300, 300}, {200, 300, 300},
                          {64, 4096, 96},   {1031, 257, 96},  {100, 4100, 64}};
  const int saved = omp_get_max_threads();
  std::mt19937 g(5);
  for (const Shape& s : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (F beta : {F(0), F(1)}) {
          const std::vector<F> A = random_vec<F>(size_t(s.M) * s.K, g),
                               B = random_vec<F>(size_t(s.K) * s.N, g),
                               C0 = random_vec<F>(size_t(s.M) * s.N, g);
          std::vector<F> one;
          for (int threads = 1; threads <= 4; ++threads) {
            omp_set_num_threads(threads);
            std::vector<F> C = C0;
            gemm<F>(ta, tb, s.M, s.N, s.K, F(1), A.data(), ta ? s.M : s.K, B.data(), tb ? s.K : s.N,
                    beta, C.data(), s.N);
            if (threads == 1)
              one = C;
            else
              ASSERT_EQ(0, std::memcmp(one.data(), C.data(), C.size() * sizeof(F)))
                  << s.M << "x" << s.N << "x" << s.K << " ta " << ta << " tb " << tb << " beta "
                  << beta << ": other bits at " << threads << " threads";
          }
        }
  omp_set_num_threads(saved);
}
TEST(Gemm, FloatBitsDoNotDependOnTheThreadCount) {
  check_thread_counts<float>();
}
TEST(Gemm, DoubleBitsDoNotDependOnTheThreadCount) {
  check_thread_counts<double>();
}
#endif

TEST(Gemm, LibraryIsNamed) {
  EXPECT_NE(std::string(gemm_library()), "");
}

}  // namespace
}  // namespace mpitron::cpu
