// The "mlp" model family: a small classifier on flattened images (Fashion-MNIST), the second
// family that proves the trainer names none:
//   h = fc1(x); h = layernorm(h) (optional); r = dropout(relu(h)); logits = fc2(r)
// with softmax cross-entropy against the labels, on any device's layer table (fp32).
#pragma once
#include <memory>
#include <vector>

#include "src/model/config.hpp"
#include "src/model/model.hpp"

namespace mpitron {

void validate_mlp(const ModelConfig& m, const TrainConfig& t);
std::unique_ptr<Model> build_mlp(const ModelConfig& m, const ModelBuild& how);

class MlpModel final : public Model {
 public:
  MlpModel(const ModelConfig& m, const ModelBuild& how);
  void bind_gradients(const std::function<float*(size_t)>& address) override;
  double forward(const MicroBatch& mb) override;
  void backward(const MicroBatch& mb, float dloss, GradReadyHook ready) override;
  // The slot's logits in host memory (from another device: a copy, valid until the next call).
  ModelOutput output(int slot) const override;
  int loss_terms_per_sample() const override { return 1; }

  int D = 0, H = 0, K = 0, B = 0;  // input features, hidden width, classes, planned rows
  bool layernorm = false;
  struct Weights {
    float *fc1_w, *fc1_b;  // (H,D), (H)
    float *ln_w, *ln_b;    // (H), or nullptr without LayerNorm
    float *fc2_w, *fc2_b;  // (K,H), (K)
  } w{}, dw{};
  struct Acts {
    float* h;                  // (B,H) fc1 output
    float* ln;                 // (B,H) LayerNorm output (= h without)
    float *ln_mean, *ln_rstd;  // (B)
    float* r;                  // (B,H) relu then dropout
    float* logits;             // (B,K), overwritten by dlogits in backward
    float *lse, *losses;       // (B)
  };
  std::vector<Acts> slots;
  Buffer<float> acts, dacts;
  float *dr, *dln, *dh;  // (B,H) backward scratch

  // The samples in the device's memory (null on the CPU, whose layers read the host's).
  Buffer<float> inputs;
  Buffer<int32_t> labels;

 private:
  size_t fc2_segment = 0;
  const LayerOps* layers_;
  std::vector<float> host_losses_;
  mutable std::vector<float> host_logits_;
};

}  // namespace mpitron
