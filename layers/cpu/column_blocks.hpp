// Deterministic column reductions over rows (parameter gradients summed over the batch).
#pragma once
#include <algorithm>

namespace mpitron::cpu {

inline constexpr int kColumnBlock = 64;

// Calls fn(c0, c1) for every block [c0, c1) of kColumnBlock columns out of C, blocks in parallel.
// Each thread owns whole columns and fn walks the rows in order, so every sum is added in the same
// order and the bits do not depend on the thread count.
template <class Fn>
void for_each_column_block(int C, Fn&& fn) {
  const int nblocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; ++blk) {
    const int c0 = blk * kColumnBlock;
    fn(c0, std::min(C, c0 + kColumnBlock));
  }
}

}  // namespace mpitron::cpu
