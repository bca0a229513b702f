// Batched incremental decoding for the GPT with a key/value cache: the prompts of a batch are fed
// in one pass (prefill), then one token per sequence per step, each block's keys and values kept
// for every position fed so far, so a step costs one token's layers and an attention over the
// cache instead of a forward over the whole prefix. CPU, fp32, a whole model (tp 1, pp 1); the
// same formulas as GptModel's forward, so greedy decoding picks the tokens the full forward picks.
#pragma once
#include <cstdint>
#include <vector>

#include "src/model/gpt.hpp"

namespace mpitron {

class GptDecoder {
 public:
  // A cache for `rows` sequences of up to `length` tokens (0: the model's block size); the model
  // must outlive this.
  GptDecoder(const GptModel& model, int rows, int length = 0);

  // Forgets every sequence: each starts again at position 0.
  void reset();
  // Feeds n tokens to each row, tokens (rows, n), at the row's next positions, and writes to
  // logits (rows, V) those of the row's token take[b] (0 <= take[b] < n); the row's next position
  // then follows that token (later tokens of the row were padding and will be overwritten). A row
  // with take[b] < 0 is done: its logits and cache are left meaningless and its position stays.
  // UsageError past the block size.
  void feed(const int32_t* tokens, int n, const int32_t* take, float* logits);
  // Row r takes over row from[r]'s cache and position, for every r (beam search's reordering).
  void reorder(const std::vector<int32_t>& from);
  int position(int row) const { return pos_[size_t(row)]; }
  int rows() const { return B_; }

 private:
  const GptModel& m_;
  int B_, Tc_, C_, NH_, V_, L_;
  std::vector<int32_t> pos_;                      // (B) next position of each row
  std::vector<float> keys_, values_;              // (L,B,Tc,C)
  std::vector<float> spare_keys_, spare_values_;  // reorder's target, then swapped in
  std::vector<float> x_, ln_, mean_, rstd_, qkv_, atty_, branch_, res_, fc_, fc_gelu_, last_;
};

}  // namespace mpitron
