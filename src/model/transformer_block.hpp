// The pre-LN transformer block shared by the GPT (causal) and the encoder (bidirectional, with a
// padding mask), forward and backward side by side:
//   x' = x + dropout(c_proj(attn(c_attn(ln_1(x)))))
//   y  = x' + dropout(mlp.c_proj(gelu(mlp.c_fc(ln_2(x')))))
// Letters as in layers/README.md; N = B*T rows.
#pragma once
#include <cstdint>

#include "src/model/activation_plan.hpp"
#include "src/philox.hpp"

namespace mpitron {

struct BlockShape {
  int B = 0, T = 0, C = 0, NH = 0;
  bool causal = true;
  const int32_t* lengths = nullptr;  // (B) valid tokens per sequence, nullptr: all T
};

// Pointers to one block's parameters (or gradients) inside a flat buffer.
struct BlockWeights {
  float *ln_1_w, *ln_1_b;            // (C)
  float *c_attn_w, *c_attn_b;        // (3C,C), (3C)
  float *attn_proj_w, *attn_proj_b;  // (C,C), (C)
  float *ln_2_w, *ln_2_b;            // (C)
  float *c_fc_w, *c_fc_b;            // (4C,C), (4C)
  float *mlp_proj_w, *mlp_proj_b;    // (C,4C), (C)
};

// Saved by forward for backward, one set per block and micro-batch in flight.
struct BlockActs {
  float* ln_1;                   // (B,T,C)
  float *ln_1_mean, *ln_1_rstd;  // (B,T)
  float* qkv;                    // (B,T,3C)
  float* att;                    // (B,NH,T,T)
  float* atty;                   // (B,T,C)
  float* attn_out;               // (B,T,C) after projection and dropout
  float* res_attn;               // (B,T,C) x + attn_out
  float* ln_2;                   // (B,T,C)
  float *ln_2_mean, *ln_2_rstd;  // (B,T)
  float* fc;                     // (B,T,4C)
  float* fc_gelu;                // (B,T,4C)
  float* mlp_out;                // (B,T,C) after projection and dropout
  float* res_mlp;                // (B,T,C) block output
};

// Backward's scratch, shared by every block (one backward runs at a time).
struct BlockScratch {
  float *dbranch, *dln, *dqkv, *datty, *datt, *dfc, *dfc_gelu;
};

// Inverted dropout on the two branch outputs; masks keyed by global row (sample * T + t).
struct BlockDropout {
  float p = 0.0f;
  PhiloxStream attn, mlp;
  uint64_t row0 = 0;
};

void block_acts_carve(BlockActs& a, ActivationCarver& c, const BlockShape& s);
void block_scratch_carve(BlockScratch& d, ActivationCarver& c, const BlockShape& s);

// Fills a from the block input x (B,T,C); the block output is a.res_mlp.
void transformer_block_forward(BlockActs& a, const float* x, const BlockWeights& w,
                               const BlockShape& s, const BlockDropout& drop);

// dresidual (B,T,C): on entry dL/d(block output), on exit dL/d(block input x). Parameter
// gradients accumulate into dw.
void transformer_block_backward(float* dresidual, const BlockWeights& dw, const BlockScratch& d,
                                const BlockActs& a, const float* x, const BlockWeights& w,
                                const BlockShape& s, const BlockDropout& drop);

}  // namespace mpitron
