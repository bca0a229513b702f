// Row-major matrix product C = alpha op(A) op(B) + beta C for the CPU backend.
// gemm() hands the product to OpenBLAS where the build has it (MPITRON_BLAS), else to Eigen;
// gemm_reference() is always Eigen, the simple path the fast one is tested against.
#pragma once
#include <string>

namespace mpitron::cpu {

// op(A) is (M,K), op(B) is (K,N), C is (M,N); lda/ldb/ldc are row strides.
template <class F>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, F alpha, const F* A, int lda, const F* B,
          int ldb, F beta, F* C, int ldc);

template <class F>
void gemm_reference(bool trans_a, bool trans_b, int M, int N, int K, F alpha, const F* A, int lda,
                    const F* B, int ldb, F beta, F* C, int ldc);

// Name of the library behind gemm(), for logs and benchmarks.
const char* gemm_library();

// OpenBLAS's kernel set in use ("SkylakeX", "Haswell", ...), or nullptr when gemm() is Eigen.
const char* blas_kernels();

// OpenBLAS falls back to its SSE3 kernels ("Prescott") on a CPU it does not recognise, as virtual
// machines often report one: 3-4x slower matrix products on an AVX-512 machine. Returns the kernel
// set (OPENBLAS_CORETYPE) the CPU's vector units support when that happened and the user set none,
// else nullptr; the caller re-executes itself with it, since OpenBLAS chooses when it loads.
const char* better_blas_kernels();

// Sets the threads of the CPU compute libraries (OpenMP and OpenBLAS).
void set_compute_threads(int n);

// Cores this process may run on (its CPU affinity: a Slurm allocation, taskset, a launcher's
// binding).
int usable_cores();

// Threads for a rank when none were asked for, and why: OMP_NUM_THREADS where set, else the cores
// the node's ranks may run on (the union of their CPU affinities: a Slurm allocation, a launcher's
// binding) shared evenly by them, at most the rank's own and at least 1, so that ranks x threads
// never exceeds the cores: "2 threads (4 cores for 2 ranks on the node)".
struct ComputeThreads {
  int threads;
  std::string why;
};
ComputeThreads default_compute_threads(int own_cores, int node_cores, int ranks_on_node);

}  // namespace mpitron::cpu
