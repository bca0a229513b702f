// The Model interface for every family: activations of several micro-batches in flight live in
// their own slots (a pipeline stage runs forward of one while another waits for backward), so
// forward A, forward B, backward A, backward B gives the bits of A then B one at a time; and a
// model built from a config rebuilds from the attributes a checkpoint stores.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "base/check.hpp"
#include "src/model/family.hpp"
#include "src/model/gpt.hpp"
#include "src/model/layer_ops.hpp"
#include "src/train/grad_sync.hpp"

using namespace mpitron;

namespace {

struct Samples {
  std::vector<int32_t> tokens, labels;
  std::vector<float> features;
  SampleView view(int rows, int offset, int T, int D) const {
    SampleView v;
    v.rows = rows;
    if (!tokens.empty()) v.tokens = tokens.data() + size_t(offset) * (T + 1);
    if (!features.empty()) {
      v.features = features.data() + size_t(offset) * D;
      v.labels = labels.data() + offset;
    }
    return v;
  }
};

void check_slots(const ModelConfig& cfg, int T, int D) {
  const int rows = 3;
  Samples s;
  if (T > 0) {
    for (int i = 0; i < 2 * rows * (T + 1); ++i) s.tokens.push_back(int32_t(i * 41 % 256));
  } else {
    for (int i = 0; i < 2 * rows * D; ++i) s.features.push_back(float(i % 17) / 17.0f);
    for (int i = 0; i < 2 * rows; ++i) s.labels.push_back(i % 10);
  }
  auto micro = [&](int which, int slot) {
    MicroBatch mb;
    mb.samples = s.view(rows, which * rows, T, D);
    mb.slot = slot;
    mb.first_sample = which * rows;
    mb.step = 4;
    mb.dropout = 0.2f;
    mb.seed = 9;
    return mb;
  };
  DeviceAllocator alloc;
  ModelBuild how;
  how.micro_rows = rows;
  how.seq_len = T;
  how.seed = 2;
  how.alloc = &alloc;
  auto one_at_a_time = build_model(cfg, how);
  how.slots = 2;
  auto in_flight = build_model(cfg, how);
  GradStorage g1 = GradStorage::full(*one_at_a_time, alloc);
  GradStorage g2 = GradStorage::full(*in_flight, alloc);
  const float dloss = 0.05f;
  const double a1 = one_at_a_time->forward(micro(0, 0));
  one_at_a_time->backward(micro(0, 0), dloss, {});
  const double b1 = one_at_a_time->forward(micro(1, 0));
  one_at_a_time->backward(micro(1, 0), dloss, {});
  const double a2 = in_flight->forward(micro(0, 0));
  const double b2 = in_flight->forward(micro(1, 1));
  in_flight->backward(micro(0, 0), dloss, {});
  in_flight->backward(micro(1, 1), dloss, {});
  EXPECT_EQ(a1, a2);
  EXPECT_EQ(b1, b2);
  EXPECT_NE(a1, b1);
  ASSERT_EQ(g1.data.size(), g2.data.size());
  EXPECT_EQ(0, std::memcmp(g1.data.data(), g2.data.data(), g1.data.size() * sizeof(float)))
      << cfg.type << ": gradients differ with two micro-batches in flight";
}

}  // namespace

TEST(Model, GptMicroBatchesInFlightKeepTheirOwnActivations) {
  check_slots(to_model_config(GptConfig{2, 2, 16, 8, 256}), 8, 0);
}

TEST(Model, BertMicroBatchesInFlightKeepTheirOwnActivations) {
  ModelConfig cfg = default_model_config("bert");
  cfg.dims["n_embd"] = 16;
  cfg.dims["block_size"] = 10;
  check_slots(cfg, 10, 0);  // masked LM
}

TEST(Model, MlpMicroBatchesInFlightKeepTheirOwnActivations) {
  ModelConfig cfg = default_model_config("mlp");
  cfg.dims["input"] = 20;
  cfg.dims["hidden"] = 12;
  cfg.dims["layernorm"] = 1;
  check_slots(cfg, 0, 20);
}

TEST(Model, FamiliesAreNamedByTypeAndUnknownTypesRefused) {
  EXPECT_EQ(model_family("gpt").data(default_model_config("gpt")), DataKind::text);
  EXPECT_EQ(model_family("mlp").data(default_model_config("mlp")), DataKind::images);
  ModelConfig bert = default_model_config("bert");
  EXPECT_EQ(model_family("bert").data(bert), DataKind::text);  // masked-LM pretraining
  bert.dims["task"] = 1;
  EXPECT_EQ(model_family("bert").data(bert), DataKind::verses);
  try {
    model_family("cnn");
    FAIL() << "an unknown type was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("known: gpt, mlp"), std::string::npos) << e.what();
  }
}

TEST(Model, ParameterCountMatchesTheRegistry) {
  const GptConfig g{3, 4, 32, 16, 300};
  DeviceAllocator alloc;
  ModelBuild how;
  how.alloc = &alloc;
  EXPECT_EQ(build_model(to_model_config(g), how)->registry.parameter_count(),
            gpt_parameter_count(g));
}

// A device whose attention takes only some head sizes (CUDA's: 32, 64, 128) refuses a model of
// another before allocating anything, naming the sizes.
TEST(Model, AnAttentionHeadSizeTheLayersRefuseStopsTheBuildBeforeAnyAllocation) {
  LayerOps picky = cpu_layer_ops();
  picky.attention_head_size_ok = [](int head_size) { return head_size == 32; };
  auto build = [&](const GptConfig& g, DeviceAllocator& alloc) {
    ModelBuild how;
    how.alloc = &alloc;
    how.layers = &picky;
    return build_model(to_model_config(g), how);
  };
  DeviceAllocator refused;
  try {
    build(GptConfig{2, 4, 64, 16, 300}, refused);  // heads of 16
    FAIL() << "heads of 16 were accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("n_embd / n_head is 64 / 4 = 16"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(refused.peak_bytes, 0u);
  DeviceAllocator accepted;
  EXPECT_NE(build(GptConfig{2, 2, 64, 16, 300}, accepted), nullptr);  // heads of 32
  EXPECT_GT(accepted.peak_bytes, 0u);
}
