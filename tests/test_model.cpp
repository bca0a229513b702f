// The Model interface for every family: activations of several micro-batches in flight live in
// their own slots (a pipeline stage runs forward of one while another waits for backward), so
// forward A, forward B, backward A, backward B gives the bits of A then B one at a time; and a
// model built from a config rebuilds from the attributes a checkpoint stores.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/check.hpp"
#include "layers/crossentropy.hpp"
#include "layers/linear.hpp"
#include "src/model/family.hpp"
#include "src/model/gpt.hpp"
#include "src/model/layer_ops.hpp"
#include "src/train/grad_sync.hpp"
#include "tests/gpt_precision_run.hpp"

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

namespace {

// A device's LM head on the CPU's arithmetic: the vocabulary padded to 128 rows and a fused
// classifier, as the CUDA table has them, built from the CPU's one-shard vocab-parallel
// cross-entropy (padding columns never read, their gradient 0).
void padded_ce_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                       int N, int V, int Vp) {
  std::vector<float> row_max(static_cast<size_t>(N)), target(static_cast<size_t>(N)),
      sum(static_cast<size_t>(N));
  cpu::crossentropy_shard_stats(row_max.data(), target.data(), logits, targets, N, Vp, 0, V);
  cpu::crossentropy_shard_sumexp(sum.data(), logits, row_max.data(), N, Vp, 0, V);
  cpu::crossentropy_shard_loss(losses, lse, row_max.data(), sum.data(), target.data(), targets, N);
}
void padded_ce_backward(float* dlogits, const float* logits, const float* lse,
                        const int32_t* targets, float dloss, int N, int V, int Vp) {
  cpu::crossentropy_shard_backward(dlogits, logits, lse, targets, dloss, N, Vp, 0, V);
}
void fused_ce(float* losses, float* lse, float* logits, const int32_t* targets, float dloss, int N,
              int V, int Vp) {
  padded_ce_forward(losses, lse, logits, targets, N, V, Vp);
  padded_ce_backward(logits, logits, lse, targets, dloss, N, V, Vp);
}
void lm_head_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, float dout_scale, int N, int IC, int OC) {
  std::vector<float> scaled(dout, dout + size_t(N) * OC);
  for (float& x : scaled) x *= dout_scale;
  cpu::linear_backward(dinp, dweight, static_cast<float*>(nullptr), scaled.data(), inp, weight, N,
                       IC, OC);
}

LayerOps device_like_layers() {
  LayerOps t = cpu_layer_ops();
  t.lm_head_align = 128;
  t.crossentropy_padded_forward = padded_ce_forward;
  t.crossentropy_padded_backward = padded_ce_backward;
  t.crossentropy_fused = fused_ce;
  t.lm_head_backward = lm_head_backward;
  return t;
}

using precision_test::HeadRun;

HeadRun run_head(const LayerOps& layers, int V, bool training, float dloss, float mb_dloss) {
  return precision_test::run_head<float>(V, DType::f32, training, dloss, DeviceAllocator{}, layers,
                                         mb_dloss);
}

}  // namespace

// The GPT's device paths for its LM head, walked on the CPU: the vocabulary padded to 128 rows
// (every flat offset after wte moves), the padded cross-entropy (evaluation) and the fused
// classifier (training, the dlogits written in forward at MicroBatch::dloss). Against the CPU's
// unpadded model: the loss and every real gradient (another summation length in the head's input
// product), padding parameters, gradients and dlogits exactly 0, and fused against separate bit
// for bit.
TEST(Model, PaddedVocabularyAndFusedClassifierMatchThePlainHead) {
  const LayerOps device_like = device_like_layers();
  const float dloss = 1.0f / 32;
  for (int V : {5, 257, 300}) {
    const std::string where = "V=" + std::to_string(V);
    const HeadRun plain = run_head(cpu_layer_ops(), V, true, dloss, dloss);
    const HeadRun fused = run_head(device_like, V, true, dloss, dloss);
    const HeadRun separate = run_head(device_like, V, false, dloss, dloss);
    EXPECT_EQ(plain.Vl, V) << where;
    EXPECT_EQ(fused.Vl, (V + 127) / 128 * 128) << where;
    EXPECT_NEAR(fused.loss, plain.loss, 1e-6 * plain.loss) << where;
    EXPECT_EQ(std::memcmp(&fused.loss, &separate.loss, sizeof(double)), 0) << where;
    ASSERT_EQ(fused.grads.size(), separate.grads.size());
    EXPECT_EQ(
        std::memcmp(fused.grads.data(), separate.grads.data(), fused.grads.size() * sizeof(float)),
        0)
        << where << ": fused and separate gradients differ";
    for (const ParamInfo& p : plain.registry.params()) {
      const ParamInfo& q = fused.registry.at(p.name);
      EXPECT_EQ(q.global_shape, p.global_shape) << where << " " << p.name;
      ASSERT_EQ(q.real_numel(), p.numel) << where << " " << p.name;
      double d = 0, m = 0;
      for (size_t i = 0; i < p.numel; ++i) {
        const double a = fused.grads[q.offset + i], b = plain.grads[p.offset + i];
        d += (a - b) * (a - b), m += b * b;
        ASSERT_EQ(fused.params[q.offset + i], plain.params[p.offset + i])
            << where << " " << p.name << " " << i;
      }
      EXPECT_LE(std::sqrt(d), 1e-5 * std::sqrt(m)) << where << " gradient of " << p.name;
      for (size_t i = q.real_numel(); i < q.numel; ++i) {
        ASSERT_EQ(fused.params[q.offset + i], 0.0f) << where << " " << p.name << " padding " << i;
        ASSERT_EQ(fused.grads[q.offset + i], 0.0f) << where << " " << p.name << " padding " << i;
      }
    }
    ASSERT_EQ(fused.padding_dlogits.size(), size_t(64) * size_t(fused.Vl - V)) << where;
    for (float x : fused.padding_dlogits) ASSERT_EQ(x, 0.0f) << where << " padding dlogit";
  }
}

TEST(ModelDeathTest, BackwardRefusesAnotherDlossThanTheFusedClassifierApplied) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const LayerOps device_like = device_like_layers();
  EXPECT_DEATH(run_head(device_like, 5, true, 1.0f / 32, 1.0f),
               "differs from the MicroBatch::dloss its forward's fused classifier applied");
}

namespace {

struct SpanRun {
  double loss = 0;
  std::vector<float> grads;
  ParamRegistry registry;
};

// A translation-pairs GPT (task 1: the loss on the rows inside each row's span) on 3 rows of 24.
SpanRun run_spans(const LayerOps& layers, const std::vector<int32_t>& spans) {
  const int T = 24, rows = 3, V = 259;
  std::vector<int32_t> tokens(size_t(rows) * (T + 1));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919 + 11) % size_t(V));
  ModelConfig m = default_model_config("gpt");
  m.dims["n_layer"] = 2;
  m.dims["n_head"] = 2;
  m.dims["n_embd"] = 64;
  m.dims["block_size"] = T;
  m.dims["vocab_size"] = V;
  m.dims["task"] = 1;
  DeviceAllocator alloc;
  ModelBuild how;
  how.micro_rows = rows;
  how.seq_len = T;
  how.seed = 11;
  how.alloc = &alloc;
  how.layers = &layers;
  auto model = build_model(m, how);
  GradStorage grads = GradStorage::full(*model, alloc);
  MicroBatch mb;
  mb.samples = {tokens.data(), nullptr, nullptr, rows};
  mb.samples.loss_spans = spans.data();
  mb.training = true;
  mb.dropout = 0.1f;
  mb.seed = 7;
  mb.step = 3;
  mb.dloss = 0.01f;
  SpanRun r;
  r.loss = model->forward(mb);
  model->backward(mb, 0.01f, {});
  r.grads.assign(grads.data.data(), grads.data.data() + grads.data.size());
  r.registry = model->registry;
  return r;
}

}  // namespace

// Loss spans (translation pairs) through the device's head: without compact_rows (CUDA's table)
// every row's logits run, the rows outside the spans as target -1 (loss 0, gradient 0) through the
// padded and fused cross-entropy. The plain CPU head's loss and gradients, padding 0; no loss row
// at all gives no gradient anywhere.
TEST(Model, LossSpansThroughThePaddedFusedHeadMatchThePlainHead) {
  LayerOps device_like = device_like_layers();
  device_like.compact_rows = nullptr;
  device_like.expand_rows = nullptr;
  const std::vector<std::vector<int32_t>> span_sets = {
      {3, 15, 0, 0, 10, 24}, {0, 24, 0, 24, 0, 24}, {5, 6, 0, 0, 23, 24}, {0, 0, 7, 7, 0, 0}};
  for (const auto& spans : span_sets) {
    const std::string where = "spans " + std::to_string(spans[0]) + "-" + std::to_string(spans[1]);
    const SpanRun plain = run_spans(cpu_layer_ops(), spans), device = run_spans(device_like, spans);
    EXPECT_NEAR(device.loss, plain.loss, 1e-6 * std::abs(plain.loss)) << where;
    double worst = 0, scale = 0;
    for (const ParamInfo& p : plain.registry.params()) {
      const ParamInfo& q = device.registry.at(p.name);
      for (size_t i = 0; i < p.numel; ++i) {
        worst = std::max(worst,
                         double(std::abs(device.grads[q.offset + i] - plain.grads[p.offset + i])));
        scale = std::max(scale, double(std::abs(plain.grads[p.offset + i])));
      }
      for (size_t i = q.real_numel(); i < q.numel; ++i)
        ASSERT_EQ(device.grads[q.offset + i], 0.0f) << where << " " << p.name << " padding " << i;
    }
    EXPECT_LE(worst, 1e-5 * scale) << where;
    const bool any_loss_row = spans[0] < spans[1] || spans[2] < spans[3] || spans[4] < spans[5];
    if (!any_loss_row) {
      EXPECT_EQ(device.loss, 0.0) << where;
      EXPECT_EQ(scale, 0.0) << where;
    } else {
      EXPECT_GT(scale, 0.0) << where;
    }
  }
}
