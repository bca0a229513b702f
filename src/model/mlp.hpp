// The "mlp" model family: a small classifier on flattened images (Fashion-MNIST), the second
// family that proves the trainer names none:
//   h = fc1(x); h = layernorm(h) (optional); r = dropout(relu(h)); logits = fc2(r)
// with softmax cross-entropy against the labels, on any device's layer table, in fp32, bf16 or
// fp16 storage (A: --precision; below fp32 the images and a copy of the fp32 parameters are
// rounded to A, gradients and the loss stay fp32).
#pragma once
#include <memory>
#include <vector>

#include "src/model/config.hpp"
#include "src/model/layer_ops.hpp"
#include "src/model/model.hpp"

namespace mpitron {

void validate_mlp(const ModelConfig& m, const TrainConfig& t);
std::unique_ptr<Model> build_mlp(const ModelConfig& m, const ModelBuild& how);
// What build_mlp allocates, counted without building (the memory plan).
ModelMemory mlp_model_memory(const ModelConfig& m, const ModelBuild& how);

template <class A>
class MlpModelT final : public Model {
 public:
  MlpModelT(const ModelConfig& m, const ModelBuild& how);
  void bind_gradients(const std::function<float*(size_t)>& address) override;
  double forward(const MicroBatch& mb) override;
  void backward(const MicroBatch& mb, float dloss, GradReadyHook ready) override;
  // The slot's logits in host memory as float (from another device or in 16 bits: a copy, valid
  // until the next call).
  ModelOutput output(int slot) const override;
  int loss_terms_per_sample() const override { return 1; }
  void parameters_changed() override;
  size_t weight_copy_bytes() const override { return weights.size() * sizeof(A); }

  int D = 0, H = 0, K = 0, B = 0;  // input features, hidden width, classes, planned rows
  bool layernorm = false;
  template <class W>
  struct Weights {
    W *fc1_w, *fc1_b;  // (H,D), (H)
    W *ln_w, *ln_b;    // (H), or nullptr without LayerNorm
    W *fc2_w, *fc2_b;  // (K,H), (K)
  };
  Weights<A> w{};       // what the layers read: params (fp32), else the rounded copy in weights
  Weights<float> dw{};  // gradients, fp32
  struct Acts {
    A* h;                      // (B,H) fc1 output
    A* ln;                     // (B,H) LayerNorm output (= h without)
    float *ln_mean, *ln_rstd;  // (B)
    A* r;                      // (B,H) relu then dropout
    A* logits;                 // (B,K), overwritten by dlogits in backward
    float *lse, *losses;       // (B)
    A* x;                      // (B,D) the images where the layers read them (off the host or
                               // below fp32), else null
  };
  std::vector<Acts> slots;
  Buffer<float> acts, dacts;
  A *dr, *dln, *dh;   // (B,H) backward scratch
  Buffer<A> weights;  // below fp32: params rounded to A (flat_size); empty in fp32

  // The labels in the device's memory, per slot (null on the CPU, whose layers read the host's).
  Buffer<int32_t> labels;

 private:
  // Images and labels of a micro-batch where the layers read them (forward uploads them).
  const A* inputs(const MicroBatch& mb) const;
  const int32_t* device_labels(const MicroBatch& mb) const;
  size_t fc2_segment = 0;
  const LayerOpsT<A>* layers_;
  Buffer<float> staging_;  // (B,D) the images uploaded as float, then rounded (below fp32)
  std::vector<float> host_losses_;
  mutable std::vector<float> host_logits_;
  mutable std::vector<A> host_logits_16_;
};

using MlpModel = MlpModelT<float>;

}  // namespace mpitron
