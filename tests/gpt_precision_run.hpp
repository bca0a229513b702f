// Shared by the precision tests (tests/test_precision.cpp, tests/test_cuda_precision.cpp): one
// forward and backward of a small GPT in a given storage precision, on a given device's layers.
#pragma once
#include <cmath>
#include <cstdint>
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

// rows sequences of T tokens, dropout 0.1, seed 3; param_scale multiplies the parameters (host
// layers only) before parameters_changed.
inline GptRun run_gpt(const GptConfig& g, int rows, int T, DType precision, float dloss,
                      DeviceAllocator alloc, const LayerOps& layers, float param_scale = 1.0f) {
  std::vector<int32_t> tokens(size_t(rows) * (T + 1));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 37 + 11) % 256);
  ModelBuild how;
  how.micro_rows = rows;
  how.seq_len = T;
  how.seed = 3;
  how.alloc = &alloc;
  how.layers = &layers;
  how.precision = precision;
  auto model = build_model(to_model_config(g), how);
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

// |a - b| / |b| over the whole vectors (L2).
inline double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d += double(a[i] - b[i]) * (a[i] - b[i]), n += double(b[i]) * b[i];
  return std::sqrt(d / n);
}

}  // namespace mpitron::precision_test
