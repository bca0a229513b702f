// The parameter registry's shard specs and the gradient storage built from model segments: TP
// shards (strided for fused tensors) are exact slices of the global tensor, stages hold what the
// spec says, buffers are separate from trained parameters, and a windowed gradient layout maps
// every parameter where the full layout's backward would write it.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "src/check.hpp"
#include "src/model/family.hpp"
#include "src/model/gpt.hpp"
#include "src/model/registry.hpp"
#include "src/train/grad_sync.hpp"

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
    const ParamRegistry reg = gpt_registry(cfg, RegistrySlice{1, 0, stage, 2, first, end});
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
