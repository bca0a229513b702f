#include "src/model/mlp.hpp"

#include <fmt/format.h>

#include <cmath>
#include <type_traits>

#include "base/check.hpp"
#include "src/model/activation_plan.hpp"

namespace mpitron {

void validate_mlp(const ModelConfig& m, const TrainConfig&) {
  if (m.get("layernorm") != 0 && m.get("layernorm") != 1)
    throw UsageError(fmt::format("model.layernorm must be 0 or 1 (got {})", m.get("layernorm")));
  if (m.get("classes") < 2)
    throw UsageError(fmt::format("model.classes must be at least 2 (got {})", m.get("classes")));
}

namespace {

ParamRegistry mlp_registry(const ModelConfig& m, const RegistrySlice& slice) {
  const int64_t D = m.get("input"), H = m.get("hidden"), K = m.get("classes");
  ParamRegistry r(slice);
  // He initialisation for the ReLU layer, LeCun's for the classifier.
  r.add("fc1.weight", {H, D}, InitKind::normal, std::sqrt(2.0f / float(D)), true, {0});
  r.add("fc1.bias", {H}, InitKind::zeros, 0, false, {0});
  if (m.get("layernorm") != 0) {
    r.add("ln.weight", {H}, InitKind::ones, 0, false);
    r.add("ln.bias", {H}, InitKind::zeros, 0, false);
  }
  r.add("fc2.weight", {K, H}, InitKind::normal, std::sqrt(1.0f / float(H)), true, {1});
  r.add("fc2.bias", {K}, InitKind::zeros, 0, false);
  return r;
}

// fc1 and LayerNorm, then the classifier: fc2's gradients are final first.
std::vector<GradSegment> mlp_segments(const ParamRegistry& registry, size_t flat_size) {
  const size_t fc2 = registry.at("fc2.weight").offset;
  return {{0, fc2, false}, {fc2, flat_size, false}};
}

// Another device's layers cannot read the host's samples, nor 16-bit layers float ones: the
// images go to each slot's copy (backward reads them for fc1's weight gradient).
template <class A>
bool mlp_owns_images(Device device) {
  return device != Device::cpu || !std::is_same_v<A, float>;
}

// Each slot's activations, the build's and the plan's carving.
template <class A>
void carve_mlp_activations(ActivationCarver& a, std::vector<typename MlpModelT<A>::Acts>& slots,
                           int B, int D, int H, int K, bool layernorm, bool own_images) {
  const size_t BH = size_t(B) * H;
  for (typename MlpModelT<A>::Acts& s : slots) {
    s.h = a.take_as<A>(BH);
    s.ln = layernorm ? a.take_as<A>(BH) : s.h;
    s.ln_mean = a.take(B);
    s.ln_rstd = a.take(B);
    s.r = a.take_as<A>(BH);
    s.logits = a.take_as<A>(size_t(B) * K);
    s.lse = a.take(B);
    s.losses = a.take(B);
    s.x = own_images ? a.take_as<A>(size_t(B) * D) : nullptr;
  }
}

// Backward's (B,H) scratch.
template <class A>
void carve_mlp_scratch(ActivationCarver& d, A*& dr, A*& dln, A*& dh, size_t BH) {
  dr = d.take_as<A>(BH);
  dln = d.take_as<A>(BH);
  dh = d.take_as<A>(BH);
}

}  // namespace

template <class A>
MlpModelT<A>::MlpModelT(const ModelConfig& m, const ModelBuild& how)
    : D(int(m.get("input"))),
      H(int(m.get("hidden"))),
      K(int(m.get("classes"))),
      B(how.micro_rows),
      layernorm(m.get("layernorm") != 0),
      layers_(&layer_ops<A>(how.layers ? how.layers->device : Device::cpu)) {
  MPITRON_REQUIRE(how.slice.tp == 1 && how.slice.stages == 1,
                  "the MLP runs unsharded (tp 1, one stage)");
  MPITRON_REQUIRE(how.precision == dtype_of<A>(), "an MLP built for another precision");
  config = m;
  DeviceAllocator& alloc = *how.alloc;
  registry = mlp_registry(m, how.slice);
  allocate_tensors(how);
  A* read = nullptr;
  if constexpr (std::is_same_v<A, float>) {
    read = params.data();
  } else {
    weights = Buffer<A>(alloc, flat_size);
    read = weights.data();
  }
  auto at = [&](const char* name) {
    const ParamInfo* p = registry.find(name);
    return p ? read + p->offset : nullptr;
  };
  w = {at("fc1.weight"), at("fc1.bias"),   at("ln.weight"),
       at("ln.bias"),    at("fc2.weight"), at("fc2.bias")};
  parameters_changed();
  segments = mlp_segments(registry, flat_size);
  fc2_segment = 1;

  const bool own_images = mlp_owns_images<A>(layers_->device);
  slots.resize(size_t(std::max(1, how.slots)));
  acts = plan_activations(alloc, [&](ActivationCarver& a) {
    carve_mlp_activations<A>(a, slots, B, D, H, K, layernorm, own_images);
  });
  dacts = plan_activations(
      alloc, [&](ActivationCarver& d) { carve_mlp_scratch(d, dr, dln, dh, size_t(B) * H); });
  if (layers_->device != Device::cpu) labels = Buffer<int32_t>(alloc, slots.size() * size_t(B));
  if (!std::is_same_v<A, float>) staging_ = Buffer<float>(alloc, size_t(B) * D);
  host_losses_.resize(size_t(B));
}

template <class A>
void MlpModelT<A>::bind_gradients(const std::function<float*(size_t)>& address) {
  auto at = [&](const char* name) {
    const ParamInfo* p = registry.find(name);
    return p ? address(p->offset) : nullptr;
  };
  dw = {at("fc1.weight"), at("fc1.bias"),   at("ln.weight"),
        at("ln.bias"),    at("fc2.weight"), at("fc2.bias")};
}

template <class A>
void MlpModelT<A>::parameters_changed() {
  if constexpr (!std::is_same_v<A, float>) round_weight_copy(*layers_, weights.data());
}

namespace {
PhiloxStream dropout_stream(const MicroBatch& mb) {
  return PhiloxStream{mb.seed, mix64(mix64(uint64_t(mb.step), 1), 0xD50Full)};
}
}  // namespace

template <class A>
const A* MlpModelT<A>::inputs(const MicroBatch& mb) const {
  const A* x = slots[size_t(mb.slot)].x;
  if constexpr (std::is_same_v<A, float>)
    if (!x) return mb.samples.features;
  return x;
}

template <class A>
const int32_t* MlpModelT<A>::device_labels(const MicroBatch& mb) const {
  return labels.data() ? labels.data() + size_t(mb.slot) * B : mb.samples.labels;
}

template <class A>
double MlpModelT<A>::forward(const MicroBatch& mb) {
  MPITRON_REQUIRE(mb.samples.features && mb.samples.labels && mb.samples.rows <= B &&
                      mb.slot < int(slots.size()),
                  "micro-batch larger than planned, or not images");
  const LayerOpsT<A>& L = *layers_;
  Acts& a = slots[mb.slot];
  const int N = mb.samples.rows;
  const size_t ND = size_t(N) * D;
  if (a.x) {
    if constexpr (std::is_same_v<A, float>) {
      L.upload(a.x, mb.samples.features, ND);
    } else {  // rounded to A where the layers run, as the weights are
      L.upload(staging_.data(), mb.samples.features, ND);
      L.round_weights(a.x, staging_.data(), ND);
    }
  }
  if (labels.data())
    L.upload_int32(labels.data() + size_t(mb.slot) * B, mb.samples.labels, size_t(N));
  const A* x = inputs(mb);
  const int32_t* y = device_labels(mb);
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

template <class A>
void MlpModelT<A>::backward(const MicroBatch& mb, float dloss, GradReadyHook ready) {
  const LayerOpsT<A>& L = *layers_;
  const Acts& a = slots[mb.slot];
  const int N = mb.samples.rows;
  const A* x = inputs(mb);
  const int32_t* y = device_labels(mb);
  L.crossentropy_backward(a.logits, a.logits, a.lse, y, dloss, N, K);
  L.linear_backward(dr, dw.fc2_w, dw.fc2_b, a.logits, a.r, w.fc2_w, N, H, K);
  ready(fc2_segment);
  L.dropout_backward(dr, dr, mb.dropout, dropout_stream(mb), uint64_t(mb.first_sample), N, H);
  L.relu_backward(dln, dr, a.ln, size_t(N) * H);
  A* dfc1 = dln;
  if (layernorm) {
    L.zero(dh, size_t(N) * H);  // layernorm_backward accumulates into its input gradient
    L.layernorm_backward(dh, dw.ln_w, dw.ln_b, dln, a.h, w.ln_w, a.ln_mean, a.ln_rstd, N, H);
    dfc1 = dh;
  }
  L.linear_backward(static_cast<A*>(nullptr), dw.fc1_w, dw.fc1_b, dfc1, x, w.fc1_w, N, D, H);
  ready(0);
}

template <class A>
ModelOutput MlpModelT<A>::output(int slot) const {
  return {host_floats(*layers_, slots[size_t(slot)].logits, size_t(B) * K, host_logits_,
                      host_logits_16_),
          1, K};
}

template class MlpModelT<float>;
template class MlpModelT<bf16_t>;
template class MlpModelT<fp16_t>;

std::unique_ptr<Model> build_mlp(const ModelConfig& m, const ModelBuild& how) {
  switch (how.precision) {
    case DType::bf16:
      return std::make_unique<MlpModelT<bf16_t>>(m, how);
    case DType::f16:
      return std::make_unique<MlpModelT<fp16_t>>(m, how);
    case DType::f32:
      break;
  }
  return std::make_unique<MlpModel>(m, how);
}

namespace {

template <class A>
ModelMemory mlp_memory(const ModelConfig& m, const ModelBuild& how) {
  const Device device = how.layers ? how.layers->device : Device::cpu;
  const int D = int(m.get("input")), H = int(m.get("hidden")), K = int(m.get("classes"));
  const int B = how.micro_rows;
  const ParamRegistry registry = mlp_registry(m, how.slice);
  ModelMemory out;
  out.flat_size = (registry.size() + how.flat_align - 1) / how.flat_align * how.flat_align;
  out.buffer_elements = registry.buffer_size();
  out.weight_copy_bytes = std::is_same_v<A, float> ? 0 : out.flat_size * sizeof(A);
  out.segments = mlp_segments(registry, out.flat_size);
  std::vector<typename MlpModelT<A>::Acts> slots(size_t(std::max(1, how.slots)));
  ActivationCarver a, d;
  carve_mlp_activations<A>(a, slots, B, D, H, K, m.get("layernorm") != 0,
                           mlp_owns_images<A>(device));
  A *dr, *dln, *dh;
  carve_mlp_scratch(d, dr, dln, dh, size_t(B) * H);
  const size_t labels = device != Device::cpu ? slots.size() * size_t(B) * sizeof(int32_t) : 0;
  const size_t staging = std::is_same_v<A, float> ? 0 : size_t(B) * D * sizeof(float);
  out.activation_bytes = (a.used + d.used) * sizeof(float) + labels + staging;
  out.logit_bytes = slots.size() * carved_bytes<A>(size_t(B) * K);
  return out;
}

}  // namespace

ModelMemory mlp_model_memory(const ModelConfig& m, const ModelBuild& how) {
  switch (how.precision) {
    case DType::bf16:
      return mlp_memory<bf16_t>(m, how);
    case DType::f16:
      return mlp_memory<fp16_t>(m, how);
    case DType::f32:
      break;
  }
  return mlp_memory<float>(m, how);
}

}  // namespace mpitron
