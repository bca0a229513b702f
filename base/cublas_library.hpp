// cuBLAS and cuBLASLt, opened (dlopen) at their first use rather than at program start: loading
// libcublasLt costs every process about 0.4 s of CPU, which CPU runs and tools should not pay.
// Calls go through the table: `cublas::library().cublasLtMatmul(...)`; the headers' names and
// types as they are (cublasCreate is cublasCreate_v2 by the header's macro, here too).
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>

namespace mpitron::cublas {

#define MPITRON_CUBLAS_FUNCTIONS(X)                                                    \
  X(cublasCreate)                                                                      \
  X(cublasDestroy)                                                                     \
  X(cublasSetStream) X(cublasSetMathMode) X(cublasGetStatusString) X(cublasLtCreate)   \
      X(cublasLtDestroy) X(cublasLtMatmul) X(cublasLtMatmulDescCreate)                 \
          X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)               \
              X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)             \
                  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy) \
                      X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic)

struct Library {
#define MPITRON_CUBLAS_MEMBER(name) decltype(&::name) name = nullptr;
  MPITRON_CUBLAS_FUNCTIONS(MPITRON_CUBLAS_MEMBER)
#undef MPITRON_CUBLAS_MEMBER
  // The library's cublasGemmEx (a cublasComputeType_t), not the header's inline C++ overload.
  cublasStatus_t (*cublasGemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                 int, const void*, const void*, cudaDataType, int, const void*,
                                 cudaDataType, int, const void*, void*, cudaDataType, int,
                                 cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
};

// The table, filled on the first call (thread-safe); a library or symbol that cannot be found
// stops the job naming it and the loader's reason.
const Library& library();

}  // namespace mpitron::cublas
