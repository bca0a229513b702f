// The parameter registry's shard specs and the gradient storage built from model segments: TP
// shards (strided for fused tensors) are exact slices of the global tensor, stages hold what the
// spec says, buffers are separate from trained parameters, and a windowed gradient layout maps
// every parameter where the full layout's backward would write it.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "base/check.hpp"
#include "src/model/family.hpp"
#include "src/model/gpt.hpp"
#include "src/model/registry.hpp"
#include "src/train/grad_sync.hpp"
#include "src/train/model_checkpoint.hpp"

using namespace mpitron;

TEST(Registry, TensorParallelShardsTileTheGlobalTensor) {
  // (3C, C) fused q|k|v rows split by head (stride 3), and (C, 4C) split by columns.
  const int64_t C = 8;
  for (int tp : {1, 2, 4}) {
    std::multiset<uint64_t> qkv, proj;
    for (int r = 0; r < tp; ++r) {
      ParamRegistry reg(RegistrySlice{tp, r});
      reg.add("qkv", {3 * C, C}, InitKind::normal, 1, true, {0, 3});
      reg.add("proj", {C, 4 * C}, InitKind::normal, 1, true, {1});
      const ParamInfo& q = reg.at("qkv");
      EXPECT_EQ(q.local_shape, (std::vector<int64_t>{3 * C / tp, C}));
      for (size_t i = 0; i < q.numel; ++i) qkv.insert(q.global_index(i));
      for (size_t i = 0; i < reg.at("proj").numel; ++i) proj.insert(reg.at("proj").global_index(i));
      if (tp == 2 && r == 1) {
        // Rank 1 of 2 holds rows 4..7 of q, 12..15 of k and 20..23 of v.
        EXPECT_EQ(q.global_index(0), uint64_t(4 * C));
        EXPECT_EQ(q.global_index(4 * C), uint64_t(12 * C));
        EXPECT_EQ(q.global_index(8 * C), uint64_t(20 * C));
        EXPECT_EQ(reg.at("proj").global_index(0), uint64_t(2 * C));
      }
    }
    ASSERT_EQ(qkv.size(), size_t(3 * C * C));
    ASSERT_EQ(proj.size(), size_t(4 * C * C));
    uint64_t k = 0;
    for (uint64_t g : qkv) EXPECT_EQ(g, k++) << "tp " << tp;  // every element exactly once
    k = 0;
    for (uint64_t g : proj) EXPECT_EQ(g, k++) << "tp " << tp;
  }
}

TEST(Registry, ShardsInitialiseAsSlicesOfTheBaseline) {
  ParamRegistry whole;
  whole.add("w", {12, 4}, InitKind::normal, 1, true, {0, 3});
  std::vector<float> base(whole.size());
  whole.initialize(base.data(), 5);
  for (int r = 0; r < 2; ++r) {
    ParamRegistry part(RegistrySlice{2, r});
    part.add("w", {12, 4}, InitKind::normal, 1, true, {0, 3});
    std::vector<float> mine(part.size());
    part.initialize(mine.data(), 5);
    const ParamInfo& p = part.at("w");
    for (size_t i = 0; i < p.numel; ++i) EXPECT_EQ(mine[i], base[p.global_index(i)]);
  }
}

TEST(Registry, IndivisibleSplitIsAUsageError) {
  ParamRegistry reg(RegistrySlice{4, 0});
  EXPECT_THROW(reg.add("qkv", {3 * 6, 6}, InitKind::zeros, 0, false, {0, 3}), UsageError);
}

TEST(Registry, StagesHoldWhatTheSpecSays) {
  const GptConfig cfg{4, 2, 16, 8, 32};
  auto names = [&](int stage, int first, int end) {
    std::set<std::string> s;
    const ParamRegistry reg = gpt_registry(cfg, RegistrySlice{1, 0, stage, 2, {{first, end}}});
    for (const auto& p : reg.params()) s.insert(p.name);
    return s;
  };
  const auto first = names(0, 0, 2), last = names(1, 2, 4);
  EXPECT_TRUE(first.count("wte.weight") && last.count("wte.weight"));  // tied head
  EXPECT_TRUE(first.count("wpe.weight") && !last.count("wpe.weight"));
  EXPECT_TRUE(!first.count("ln_f.weight") && last.count("ln_f.weight"));
  EXPECT_TRUE(first.count("h.1.mlp.c_fc.weight") && !first.count("h.2.mlp.c_fc.weight"));
  EXPECT_TRUE(last.count("h.3.attn.c_attn.weight") && !last.count("h.0.ln_1.weight"));
  EXPECT_EQ(first.size() + last.size(), gpt_registry(cfg).params().size() + 1);  // wte twice
}

TEST(Registry, BuffersAreCheckpointedNotTrained) {
  ParamRegistry reg;
  reg.add("w", {3}, InitKind::ones, 0, false);
  reg.add_buffer("bn.running_var", {5}, InitKind::ones);
  EXPECT_EQ(reg.params().size(), 1u);
  EXPECT_EQ(reg.buffers().size(), 1u);
  EXPECT_EQ(reg.parameter_count(), 3);
  EXPECT_EQ(reg.size(), 16u);
  EXPECT_EQ(reg.buffer_size(), 16u);
  EXPECT_EQ(reg.at("bn.running_var").kind, TensorKind::buffer);
  std::vector<float> buf(reg.buffer_size());
  reg.initialize_buffers(buf.data(), 1);
  EXPECT_EQ(buf[4], 1.0f);
}

// Backward with the windowed layout (ZeRO 2) writes each block's gradients into one shared window;
// after each block the window must equal that block's part of the full layout's gradients.
TEST(GradStorage, WindowedLayoutMatchesFullGradientsBlockByBlock) {
  DeviceAllocator alloc;
  ModelBuild how;
  how.micro_rows = 2;
  how.seq_len = 8;
  how.seed = 3;
  how.alloc = &alloc;
  const ModelConfig cfg = to_model_config(GptConfig{3, 2, 16, 8, 256});
  auto full_model = build_model(cfg, how);
  auto win_model = build_model(cfg, how);
  GradStorage full = GradStorage::full(*full_model, alloc);
  GradStorage win = GradStorage::windowed(*win_model, alloc);
  EXPECT_LT(win.data.size(), full.data.size());
  std::vector<int32_t> tokens(2 * 9);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i * 37 % 256);
  MicroBatch mb;
  mb.samples = {tokens.data(), nullptr, nullptr, 2};
  mb.dropout = 0.1f;
  mb.step = 1;
  full_model->forward(mb);
  full_model->backward(mb, 0.1f, {});
  struct Check {
    Model* model;
    GradStorage* win;
    const float* full;
    int announced = 0;
  } check{win_model.get(), &win, full.data.data()};
  GradReadyHook hook{[](void* ctx, size_t s) {
                       auto* c = static_cast<Check*>(ctx);
                       const GradSegment& seg = c->model->segments[s];
                       const float* w = c->win->segment_data[s];
                       for (size_t i = seg.begin; i < seg.end; ++i)
                         ASSERT_EQ(w[i - seg.begin], c->full[i]) << "segment " << s;
                       if (seg.window)
                         std::fill(c->win->segment_data[s],
                                   c->win->segment_data[s] + (seg.end - seg.begin), 0.0f);
                       ++c->announced;
                     },
                     &check};
  win_model->forward(mb);
  win_model->backward(mb, 0.1f, hook);
  EXPECT_EQ(check.announced, int(win_model->segments.size()));
}

// ---- checkpoint blocks of TP shards (shard_blocks) and vocabulary padding
// ------------------------

namespace {

// Global row-major indices of the blocks' elements, one block after another, each row-major.
std::vector<uint64_t> block_elements(const std::vector<int64_t>& shape,
                                     const std::vector<io::Block>& blocks) {
  std::vector<uint64_t> out;
  for (const io::Block& b : blocks) {
    int64_t n = 1;
    for (int64_t c : b.count) n *= c;
    std::vector<int64_t> idx(shape.size(), 0);
    for (int64_t e = 0; e < n; ++e) {
      uint64_t f = 0;
      for (size_t k = 0; k < shape.size(); ++k) {
        EXPECT_LT(b.start[k] + idx[k], shape[k]);
        f = f * uint64_t(shape[k]) + uint64_t(b.start[k] + idx[k]);
      }
      out.push_back(f);
      for (size_t k = shape.size(); k-- > 0;) {
        if (++idx[k] < b.count[k]) break;
        idx[k] = 0;
      }
    }
  }
  return out;
}

bool same_blocks(const std::vector<io::Block>& a, const std::vector<io::Block>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].start != b[i].start || a[i].count != b[i].count) return false;
  return true;
}

// For every local range [b, e) of every rank's shard: the blocks hold exactly the real local
// elements of the range, in local order (the global tensor's element values are their indices).
void check_shard_blocks(const std::vector<int64_t>& shape, ShardSpec spec, int tp) {
  for (int r = 0; r < tp; ++r) {
    ParamRegistry reg(RegistrySlice{tp, r});
    reg.add("w", shape, InitKind::normal, 1, true, spec);
    const ParamInfo& p = reg.at("w");
    for (size_t b = 0; b <= p.numel; ++b)
      for (size_t e = b; e <= p.numel; ++e) {
        const std::vector<io::Block> blocks = shard_blocks(p, b, e);
        std::vector<uint64_t> want;
        for (size_t i = b; i < e; ++i)
          if (!p.is_padding(i)) want.push_back(p.global_index(i));
        ASSERT_EQ(block_elements(shape, blocks), want)
            << "tp " << tp << " rank " << r << " range [" << b << ", " << e << ")";
        if ((tp == 1 && p.numel == p.global_numel()) || spec.tp_dim < 0) {
          ASSERT_TRUE(same_blocks(blocks, io::flat_range_blocks(shape, int64_t(b), int64_t(e))));
        }
      }
  }
}

}  // namespace

TEST(ShardBlocks, StridedRowsSplitAtPartBoundaries) {
  // (12, 4), q|k|v parts of 4 rows each; at tp 2 a rank holds 2 rows of each part.
  for (int tp : {1, 2}) check_shard_blocks({12, 4}, {0, 3}, tp);
  ParamRegistry reg(RegistrySlice{2, 1});
  reg.add("w", {12, 4}, InitKind::normal, 1, true, {0, 3});
  const auto blocks = shard_blocks(reg.at("w"), 0, 24);  // whole shard: rows 2-3, 6-7, 10-11
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(blocks[1].start, (std::vector<int64_t>{6, 0}));
  EXPECT_EQ(blocks[1].count, (std::vector<int64_t>{2, 4}));
  // From inside row 0 to inside row 5: a partial row, whole rows 1-4 cut at the part boundaries
  // (row 1 | rows 2-3 | row 4), a partial row.
  EXPECT_EQ(shard_blocks(reg.at("w"), 3, 21).size(), 5u);
}

TEST(ShardBlocks, ColumnSplit) {
  for (int tp : {1, 2, 4}) check_shard_blocks({4, 8}, {1}, tp);
  ParamRegistry reg(RegistrySlice{4, 2});
  reg.add("w", {4, 8}, InitKind::normal, 1, true, {1});
  const auto blocks = shard_blocks(reg.at("w"), 0, 8);  // whole shard: columns 4-5, one block
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].start, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(blocks[0].count, (std::vector<int64_t>{4, 2}));
}

TEST(ShardBlocks, StridedInnerDimensionsAndReplicated) {
  for (int tp : {1, 2}) {
    check_shard_blocks({3, 12}, {1, 3}, tp);     // strided columns: rows cut one by one
    check_shard_blocks({2, 6, 2}, {1, 3}, tp);   // strided middle dimension
    check_shard_blocks({5, 3}, {}, tp);          // replicated: the global flat range
    check_shard_blocks({4, 6}, {1, 1}, tp * 3);  // tp 3 and 6
  }
}

TEST(ShardBlocks, PaddedVocabularyDropsPadding) {
  ShardSpec vocab;
  vocab.tp_dim = 0;
  vocab.tp_pad = true;
  for (int tp : {1, 2, 3, 4}) check_shard_blocks({11, 3}, vocab, tp);
  ParamRegistry reg(RegistrySlice{4, 3});
  reg.add("wte", {11, 3}, InitKind::normal, 1, false, vocab);
  const ParamInfo& p = reg.at("wte");
  EXPECT_EQ(p.local_shape, (std::vector<int64_t>{3, 3}));  // ceil(11 / 4) rows, the last padding
  EXPECT_EQ(p.real_numel(), 6u);
  EXPECT_FALSE(p.is_padding(5));
  EXPECT_TRUE(p.is_padding(6));
  const auto blocks = shard_blocks(p, 0, 9);
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].start, (std::vector<int64_t>{9, 0}));
  EXPECT_EQ(blocks[0].count, (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(shard_blocks(p, 6, 9).empty());
  // A divisible vocabulary pads nothing; an unpadded indivisible one is still refused.
  ParamRegistry even(RegistrySlice{2, 1});
  even.add("wte", {12, 3}, InitKind::normal, 1, false, vocab);
  EXPECT_EQ(even.at("wte").real_numel(), even.at("wte").numel);
  EXPECT_THROW(even.add("v", {11, 3}, InitKind::normal, 1, false, {0}), UsageError);
}

TEST(ShardBlocks, PaddingInitialisesToZeroRealElementsToTheBaseline) {
  ShardSpec vocab;
  vocab.tp_dim = 0;
  vocab.tp_pad = true;
  ParamRegistry whole;
  whole.add("wte", {11, 3}, InitKind::normal, 0.02f, false, vocab);
  whole.add("one", {11, 3}, InitKind::ones, 0, false, vocab);
  std::vector<float> base(whole.size());
  whole.initialize(base.data(), 9);
  for (int tp : {2, 3, 4})
    for (int r = 0; r < tp; ++r) {
      ParamRegistry part(RegistrySlice{tp, r});
      part.add("wte", {11, 3}, InitKind::normal, 0.02f, false, vocab);
      part.add("one", {11, 3}, InitKind::ones, 0, false, vocab);
      std::vector<float> mine(part.size(), -1.0f);
      part.initialize(mine.data(), 9);
      for (const char* name : {"wte", "one"}) {
        const ParamInfo& p = part.at(name);
        const ParamInfo& g = whole.at(name);
        for (size_t i = 0; i < p.numel; ++i) {
          if (p.is_padding(i))
            EXPECT_EQ(mine[p.offset + i], 0.0f) << name << " tp " << tp << " rank " << r;
          else
            EXPECT_EQ(mine[p.offset + i], base[g.offset + p.global_index(i)])
                << name << " tp " << tp << " rank " << r << " element " << i;
        }
      }
    }
}

// The device's LM-head alignment (ShardSpec::tp_pad_align): rows padded at tp 1 too, a suffix of
// zeros never checkpointed, the real elements the baseline's; the global shape and the parameter
// count stay the real vocabulary's.
TEST(ShardBlocks, AlignedVocabularyPadsAtEveryTp) {
  ShardSpec vocab;
  vocab.tp_dim = 0;
  vocab.tp_pad = true;
  vocab.tp_pad_align = 4;
  for (int tp : {1, 2, 3, 4}) check_shard_blocks({11, 3}, vocab, tp);
  EXPECT_EQ(padded_rows(11, 1, 4), 12);
  EXPECT_EQ(padded_rows(11, 2, 4), 8);
  EXPECT_EQ(padded_rows(50257, 1, 128), 50304);
  EXPECT_EQ(padded_rows(50257, 1, 1), 50257);
  EXPECT_EQ(padded_rows(11, 4, 1), 3);

  ParamRegistry whole;
  whole.add("wte", {11, 3}, InitKind::normal, 0.02f, false, {0, 1, StageOwner::every, -1, true});
  std::vector<float> base(whole.size());
  whole.initialize(base.data(), 9);
  ParamRegistry aligned;
  aligned.add("wte", {11, 3}, InitKind::normal, 0.02f, false, vocab);
  const ParamInfo& p = aligned.at("wte");
  EXPECT_EQ(p.local_shape, (std::vector<int64_t>{12, 3}));
  EXPECT_EQ(p.global_shape, (std::vector<int64_t>{11, 3}));
  EXPECT_EQ(p.real_numel(), 33u);
  EXPECT_EQ(aligned.parameter_count(), 33);
  std::vector<float> mine(aligned.size(), -1.0f);
  aligned.initialize(mine.data(), 9);
  for (size_t i = 0; i < p.numel; ++i)
    EXPECT_EQ(mine[p.offset + i], p.is_padding(i) ? 0.0f : base[i]) << i;
  const auto blocks = shard_blocks(p, 0, p.numel);
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].start, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(blocks[0].count, (std::vector<int64_t>{11, 3}));
  EXPECT_TRUE(shard_blocks(p, 33, 36).empty());
}

TEST(Registry, GptVocabularyAlignmentKeepsTheGlobalShape) {
  GptConfig g;
  g.n_layer = 1;
  g.n_embd = 16;
  g.n_head = 2;
  g.vocab_size = 50257;
  const ParamRegistry plain = gpt_registry(g), aligned = gpt_registry(g, {}, 128);
  EXPECT_EQ(plain.at("wte.weight").local_shape, (std::vector<int64_t>{50257, 16}));
  EXPECT_EQ(aligned.at("wte.weight").local_shape, (std::vector<int64_t>{50304, 16}));
  EXPECT_EQ(aligned.at("wte.weight").global_shape, (std::vector<int64_t>{50257, 16}));
  EXPECT_EQ(aligned.parameter_count(), plain.parameter_count());
  EXPECT_EQ(aligned.parameter_count(), gpt_parameter_count(g));
}
