#include "src/model/mlp.hpp"

#include <fmt/format.h>

#include <cmath>

#include "base/check.hpp"
#include "src/model/activation_plan.hpp"

namespace mpitron {

void validate_mlp(const ModelConfig& m, const TrainConfig&) {
  if (m.get("layernorm") != 0 && m.get("layernorm") != 1)
    throw UsageError(fmt::format("model.layernorm must be 0 or 1 (got {})", m.get("layernorm")));
  if (m.get("classes") < 2)
    throw UsageError(fmt::format("model.classes must be at least 2 (got {})", m.get("classes")));
}

MlpModel::MlpModel(const ModelConfig& m, const ModelBuild& how)
    : D(int(m.get("input"))),
      H(int(m.get("hidden"))),
      K(int(m.get("classes"))),
      B(how.micro_rows),
      layernorm(m.get("layernorm") != 0),
      layers_(how.layers ? how.layers : &cpu_layer_ops()) {
  MPITRON_REQUIRE(how.slice.tp == 1 && how.slice.stages == 1,
                  "the MLP runs unsharded (tp 1, one stage)");
  config = m;
  DeviceAllocator& alloc = *how.alloc;
  registry = ParamRegistry(how.slice);
  // He initialisation for the ReLU layer, LeCun's for the classifier.
  registry.add("fc1.weight", {H, D}, InitKind::normal, std::sqrt(2.0f / float(D)), true, {0});
  registry.add("fc1.bias", {H}, InitKind::zeros, 0, false, {0});
  if (layernorm) {
    registry.add("ln.weight", {H}, InitKind::ones, 0, false);
    registry.add("ln.bias", {H}, InitKind::zeros, 0, false);
  }
  registry.add("fc2.weight", {K, H}, InitKind::normal, std::sqrt(1.0f / float(H)), true, {1});
  registry.add("fc2.bias", {K}, InitKind::zeros, 0, false);
  allocate_tensors(how);
  float* p = params.data();
  bind_gradients([p](size_t o) { return p + o; });
  w = dw;
  dw = {};
  const size_t fc2 = registry.at("fc2.weight").offset;
  segments = {{0, fc2, false}, {fc2, flat_size, false}};
  fc2_segment = 1;

  slots.resize(size_t(std::max(1, how.slots)));
  const size_t BH = size_t(B) * H;
  acts = plan_activations(alloc, [&](ActivationCarver& a) {
    for (Acts& s : slots) {
      s.h = a.take(BH);
      s.ln = layernorm ? a.take(BH) : s.h;
      s.ln_mean = a.take(B);
      s.ln_rstd = a.take(B);
      s.r = a.take(BH);
      s.logits = a.take(size_t(B) * K);
      s.lse = a.take(B);
      s.losses = a.take(B);
    }
  });
  dacts = plan_activations(alloc, [&](ActivationCarver& d) {
    dr = d.take(BH);
    dln = d.take(BH);
    dh = d.take(BH);
  });
  // Another device's layers cannot read the host's samples: they are uploaded per micro-batch.
  if (layers_->device != Device::cpu) {
    inputs = Buffer<float>(alloc, size_t(B) * D);
    labels = Buffer<int32_t>(alloc, size_t(B));
  }
  host_losses_.resize(size_t(B));
}

void MlpModel::bind_gradients(const std::function<float*(size_t)>& address) {
  auto at = [&](const char* name) {
    const ParamInfo* p = registry.find(name);
    return p ? address(p->offset) : nullptr;
  };
  dw = {at("fc1.weight"), at("fc1.bias"),   at("ln.weight"),
        at("ln.bias"),    at("fc2.weight"), at("fc2.bias")};
}

namespace {
PhiloxStream dropout_stream(const MicroBatch& mb) {
  return PhiloxStream{mb.seed, mix64(mix64(uint64_t(mb.step), 1), 0xD50Full)};
}
}  // namespace

double MlpModel::forward(const MicroBatch& mb) {
  MPITRON_REQUIRE(mb.samples.features && mb.samples.labels && mb.samples.rows <= B &&
                      mb.slot < int(slots.size()),
                  "micro-batch larger than planned, or not images");
  const LayerOps& L = *layers_;
  Acts& a = slots[mb.slot];
  const int N = mb.samples.rows;
  const float* x = mb.samples.features;
  const int32_t* y = mb.samples.labels;
  if (inputs.data()) {
    L.upload(inputs.data(), x, size_t(N) * D);
    L.upload_int32(labels.data(), y, size_t(N));
    x = inputs.data();
    y = labels.data();
  }
  L.linear_forward(a.h, x, w.fc1_w, w.fc1_b, N, D, H);
  if (layernorm) L.layernorm_forward(a.ln, a.ln_mean, a.ln_rstd, a.h, w.ln_w, w.ln_b, N, H, 1e-5);
  L.relu_forward(a.r, a.ln, size_t(N) * H);
  // Masks keyed by (seed, step, global sample, feature): the same in every layout.
  L.dropout_forward(a.r, a.r, mb.dropout, dropout_stream(mb), uint64_t(mb.first_sample), N, H);
  L.linear_forward(a.logits, a.r, w.fc2_w, w.fc2_b, N, H, K);
  L.crossentropy_forward(a.losses, a.lse, a.logits, y, N, K);
  L.download(host_losses_.data(), a.losses, size_t(N));
  double sum = 0.0;
  for (int i = 0; i < N; ++i) sum += host_losses_[size_t(i)];
  return sum;
}

void MlpModel::backward(const MicroBatch& mb, float dloss, GradReadyHook ready) {
  const LayerOps& L = *layers_;
  const Acts& a = slots[mb.slot];
  const int N = mb.samples.rows;
  const float* x = inputs.data() ? inputs.data() : mb.samples.features;
  const int32_t* y = labels.data() ? labels.data() : mb.samples.labels;
  L.crossentropy_backward(a.logits, a.logits, a.lse, y, dloss, N, K);
  L.linear_backward(dr, dw.fc2_w, dw.fc2_b, a.logits, a.r, w.fc2_w, N, H, K);
  ready(fc2_segment);
  L.dropout_backward(dr, dr, mb.dropout, dropout_stream(mb), uint64_t(mb.first_sample), N, H);
  L.relu_backward(dln, dr, a.ln, size_t(N) * H);
  float* dfc1 = dln;
  if (layernorm) {
    L.zero(dh, size_t(N) * H);  // layernorm_backward accumulates into its input gradient
    L.layernorm_backward(dh, dw.ln_w, dw.ln_b, dln, a.h, w.ln_w, a.ln_mean, a.ln_rstd, N, H);
    dfc1 = dh;
  }
  L.linear_backward(static_cast<float*>(nullptr), dw.fc1_w, dw.fc1_b, dfc1, x, w.fc1_w, N, D, H);
  ready(0);
}

ModelOutput MlpModel::output(int slot) const {
  const float* logits = slots[size_t(slot)].logits;
  if (layers_->device == Device::cpu) return {logits, 1, K};
  host_logits_.resize(size_t(B) * K);
  layers_->download(host_logits_.data(), logits, host_logits_.size());
  return {host_logits_.data(), 1, K};
}

std::unique_ptr<Model> build_mlp(const ModelConfig& m, const ModelBuild& how) {
  return std::make_unique<MlpModel>(m, how);
}

}  // namespace mpitron
