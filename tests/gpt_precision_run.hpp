// Shared by the precision tests (tests/test_precision.cpp, tests/test_cuda_precision.cpp): one
// forward and backward of a small GPT, or of a small CNN (training: ghost-group batch norm,
// dropout), in a given storage precision, on a given device's layers; and by the LM head's tests
// (tests/test_model.cpp, tests/test_cuda_classifier.cpp): a GPT with what its head leaves.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "src/model/family.hpp"
#include "src/model/gpt.hpp"
#include "src/model/layer_ops.hpp"
#include "src/model/precision.hpp"
#include "src/train/grad_sync.hpp"

namespace mpitron::precision_test {

struct GptRun {
  double loss = 0;           // mean over the tokens
  std::vector<float> grads;  // every parameter gradient, on the host
};

// A GPT for micro-batches of rows sequences of T tokens, initialised from seed 3.
inline std::unique_ptr<Model> build_gpt(const GptConfig& g, int rows, int T, DType precision,
                                        DeviceAllocator& alloc, const LayerOps& layers) {
  ModelBuild how;
  how.micro_rows = rows;
  how.seq_len = T;
  how.seed = 3;
  how.alloc = &alloc;
  how.layers = &layers;
  how.precision = precision;
  return build_model(to_model_config(g), how);
}

// rows sequences of T tokens, dropout 0.1, seed 3; param_scale multiplies the parameters (host
// layers only) before parameters_changed.
inline GptRun run_gpt(const GptConfig& g, int rows, int T, DType precision, float dloss,
                      DeviceAllocator alloc, const LayerOps& layers, float param_scale = 1.0f) {
  std::vector<int32_t> tokens(size_t(rows) * (T + 1));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 37 + 11) % 256);
  auto model = build_gpt(g, rows, T, precision, alloc, layers);
  if (param_scale != 1.0f) {
    for (size_t i = 0; i < model->params.size(); ++i) model->params[i] *= param_scale;
    model->parameters_changed();
  }
  GradStorage grads = GradStorage::full(*model, alloc);
  MicroBatch mb;
  mb.samples.tokens = tokens.data();
  mb.samples.rows = rows;
  mb.step = 1;
  mb.dropout = 0.1f;
  mb.seed = 5;
  GptRun r;
  r.loss = model->forward(mb) / double(rows * T);
  model->backward(mb, dloss, {});
  r.grads.resize(grads.data.size());
  layers.download(r.grads.data(), grads.data.data(), r.grads.size());
  return r;
}

// A CNN family's model (alexnet or resnet: width 8, 2 blocks per stage, groups of 4) on rows
// synthetic 28x28 images with labels; the loss is the mean over the rows.
inline GptRun run_cnn(const std::string& type, int rows, DType precision, DeviceAllocator alloc,
                      const LayerOps& layers) {
  ModelConfig m = default_model_config(type);
  m.dims["width"] = 8;
  m.dims["norm_group"] = 4;
  if (type == "alexnet") m.dims["hidden"] = 32;
  if (type == "resnet") m.dims["blocks_per_stage"] = 2;
  const size_t pixels = 28 * 28;
  std::vector<float> images(size_t(rows) * pixels);
  std::vector<int32_t> labels(static_cast<size_t>(rows));
  for (size_t i = 0; i < images.size(); ++i)
    images[i] = float((i * 7919 + 13) % 255) / 255.0f - float(i / pixels % 3) * 0.2f;
  for (int i = 0; i < rows; ++i) labels[size_t(i)] = (i * 3 + 1) % 10;
  ModelBuild how;
  how.micro_rows = rows;
  how.seed = 3;
  how.alloc = &alloc;
  how.layers = &layers;
  how.precision = precision;
  auto model = build_model(m, how);
  GradStorage grads = GradStorage::full(*model, alloc);
  MicroBatch mb;
  mb.samples.features = images.data();
  mb.samples.labels = labels.data();
  mb.samples.rows = rows;
  mb.step = 1;
  mb.dropout = 0.1f;
  mb.seed = 5;
  mb.training = true;
  GptRun r;
  r.loss = model->forward(mb) / double(rows);
  model->backward(mb, 1.0f / float(rows), {});
  r.grads.resize(grads.data.size());
  layers.download(r.grads.data(), grads.data.data(), r.grads.size());
  return r;
}

// |a - b| / |b| over the whole vectors (L2).
inline double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d += double(a[i] - b[i]) * (a[i] - b[i]), n += double(b[i]) * b[i];
  return std::sqrt(d / n);
}

struct HeadRun {
  double loss = 0;                   // mean over the tokens
  std::vector<float> grads, params;  // flat, on the host
  ParamRegistry registry;
  int Vl = 0;                          // the LM head's rows (the vocabulary, maybe padded)
  std::vector<float> padding_dlogits;  // past V in the logits buffer after backward: 0 where +0
};

// One forward and backward of a GPT of vocabulary V (C 64, 2 heads of 32 (the CUDA attention
// takes HS 32, 64 or 128), 2 layers, 2 rows of 32 tokens, dropout 0.1) in storage A on the given
// layers; training picks the fused classifier where the table has one, at MicroBatch::dloss =
// forward_dloss (backward's dloss unless a test asks for another).
template <class A>
HeadRun run_head(int V, DType precision, bool training, float dloss, DeviceAllocator alloc,
                 const LayerOps& layers, float forward_dloss) {
  const GptConfig g{2, 2, 64, 32, V};
  const int rows = 2, T = 32;
  std::vector<int32_t> tokens(size_t(rows) * (T + 1));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919 + 11) % size_t(V));
  tokens[1] = tokens[5] = V - 1;  // the last real row of wte: an input and a target
  auto model = build_gpt(g, rows, T, precision, alloc, layers);
  GradStorage grads = GradStorage::full(*model, alloc);
  MicroBatch mb;
  mb.samples.tokens = tokens.data();
  mb.samples.rows = rows;
  mb.step = 1;
  mb.dropout = 0.1f;
  mb.seed = 5;
  mb.training = training;
  mb.dloss = forward_dloss;
  HeadRun r;
  r.loss = model->forward(mb) / double(rows * T);
  model->backward(mb, dloss, {});
  r.grads.resize(grads.data.size());
  layers.download(r.grads.data(), grads.data.data(), r.grads.size());
  r.params.resize(model->flat_size);
  layers.download(r.params.data(), model->params.data(), r.params.size());
  r.registry = model->registry;
  auto& gpt = dynamic_cast<GptModelT<A>&>(*model);
  r.Vl = gpt.Vl;
  const size_t N = size_t(rows) * T;
  std::vector<A> logits(N * size_t(gpt.Vl));
  layers.download_bytes(logits.data(), gpt.chunks.back().slots[0].logits,
                        logits.size() * sizeof(A));
  const A plus_zero{};
  for (size_t n = 0; n < N; ++n)
    for (int j = V; j < gpt.Vl; ++j)
      r.padding_dlogits.push_back(
          std::memcmp(&logits[n * size_t(gpt.Vl) + size_t(j)], &plus_zero, sizeof(A)) == 0 ? 0.0f
                                                                                           : 1.0f);
  return r;
}

}  // namespace mpitron::precision_test
