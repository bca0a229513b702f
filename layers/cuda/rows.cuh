// Rows by index on the device, the CPU table's twins (src/model/layer_ops.cpp): strided copies of
// column blocks, gathers and scatter-adds of rows, and a small embedding table added to rows with
// its deterministic backward (each column's rows summed in ascending order, as the CPU does).
// T is float, __nv_bfloat16 or __half; sums in fp32. Device pointers (indices too); asynchronous
// on s.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace mpitron::cuda {

// dst row r (cols elements at dst + r dst_stride) = src row r (at src + r src_stride).
template <class T>
void copy_strided(T* dst, int dst_stride, const T* src, int src_stride, int rows, int cols,
                  cudaStream_t s);

// dst[k] = src[index[k]], k < M, rows of C.
template <class T>
void gather_rows(T* dst, const T* src, const int32_t* index, int M, int C, cudaStream_t s);

// dst[index[k]] += src[k], k < M; the indices are distinct.
template <class T>
void scatter_add_rows(T* dst, const T* src, const int32_t* index, int M, int C, cudaStream_t s);

// x[n] += table[index[n]], n < N.
template <class T>
void add_table_rows(T* x, const T* table, const int32_t* index, int N, int C, cudaStream_t s);

// x[n] += b, n < N (a row-parallel linear's bias after the sum over TP).
template <class T>
void add_bias_rows(T* x, const T* b, int N, int C, cudaStream_t s);

// dtable[index[n]] += dout[n] in fp32, n ascending per column (one thread a column): the CPU's
// order, so the same bits. For small tables and N (token types).
template <class T>
void table_rows_backward(float* dtable, const T* dout, const int32_t* index, int N, int C,
                         cudaStream_t s);

}  // namespace mpitron::cuda
