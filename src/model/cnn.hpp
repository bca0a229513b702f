// The convolutional families on NCHW images: "alexnet" (conv-BN-ReLU pairs with max pooling and a
// dropout-linear-ReLU-linear classifier, channel-parallel over TP) and "resnet" (He et al. 2016:
// a stem, basic residual blocks in three widths, global average pooling, a linear classifier).
// Pipeline stages divide blocks: resnet's residual blocks, alexnet's four convolutions. Batch norm
// takes its statistics over ghost groups of model.norm_group samples, so no layout changes them
// (layers/batchnorm.hpp).
//   alexnet: c1 col | c2 row, pool | c3 col | c4 row, pool || dropout, fc1 col, relu, fc2 row
//   resnet:  stem | [conv-bn-relu conv-bn (+ shortcut) relu] x 3n | avgpool fc
// ("|": where pipeline stages may split; "||": the classifier, on the last stage)
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "layers/conv2d.hpp"
#include "layers/pool.hpp"
#include "src/model/config.hpp"
#include "src/model/layer_ops.hpp"
#include "src/model/model.hpp"
#include "src/model/tensor_parallel.hpp"

namespace mpitron {

enum class CnnKind { alexnet, resnet };

// How a convolution splits over TP (Megatron's pair, over channels): column splits its output
// channels (batch norm and ReLU then run on the shard), row splits its input channels and sums the
// partial outputs over TP (one all-reduce per pair).
enum class ChannelSplit { none, column, row };

// conv (no bias) -> batch norm -> optional ReLU -> optional 2x2 max pool, at global sizes.
struct ConvBnSpec {
  std::string conv, bn;  // parameter name prefixes: <conv>.weight, <bn>.{weight,bias,running_*}
  int IC = 1, OC = 1, H = 1, W = 1, K = 3, stride = 1, pad = 1;
  ChannelSplit split = ChannelSplit::none;
  bool relu = true, pool = false;
  int OH() const { return (H + 2 * pad - K) / stride + 1; }
  int OW() const { return (W + 2 * pad - K) / stride + 1; }
  int out_h() const { return pool ? OH() / 2 : OH(); }
  int out_w() const { return pool ? OW() / 2 : OW(); }
};

// One pipeline block: resnet's basic block (c1, c2 and, where the shape changes, the shortcut's
// 1x1), or one of alexnet's convolutions alone (c1; not residual). A stage boundary after a
// column-split convolution carries each TP rank's channels to its peer on the next stage.
struct CnnBlockSpec {
  ConvBnSpec c1, c2;
  bool residual = true;
  bool projection = false;
  ConvBnSpec down;  // with projection
};

struct CnnSpec {
  CnnKind kind = CnnKind::resnet;
  int channels = 1, image = 28, classes = 10, group = 8;
  std::vector<ConvBnSpec> convs;     // resnet's stem (first stage); alexnet: none
  std::vector<CnnBlockSpec> blocks;  // what pipeline stages divide
  int features = 0;                  // classifier input: resnet's last width, alexnet's flattened
  int hidden = 0;                    // alexnet: fc1's width
};

CnnSpec cnn_spec(CnnKind kind, const ModelConfig& m);
ParamRegistry cnn_registry(const CnnSpec& spec, const RegistrySlice& slice);

void validate_cnn(const ModelConfig& m, const TrainConfig& t);
void validate_alexnet_layout(const ModelConfig& m, int tp);
void validate_resnet_layout(const ModelConfig& m, int tp);
std::unique_ptr<Model> build_alexnet(const ModelConfig& m, const ModelBuild& how);
std::unique_ptr<Model> build_resnet(const ModelConfig& m, const ModelBuild& how);
// What build_alexnet and build_resnet allocate, counted without building (the memory plan; the
// convolutions' kernels are planned to size their workspace).
ModelMemory alexnet_model_memory(const ModelConfig& m, const ModelBuild& how);
ModelMemory resnet_model_memory(const ModelConfig& m, const ModelBuild& how);

// A conv-BN unit at this rank's sizes, with its weights and one slot's activations. A: the storage
// type of activations and of the weights the layers read (src/model/precision.hpp); gradients,
// batch norm's statistics and running buffers are float.
template <class A>
struct ConvBnT {
  ConvBnSpec spec;
  cpu::Conv2dShape shape;            // N = planned rows; IC/OC this rank's
  std::shared_ptr<const void> plan;  // its kernels on the model's device (LayerOps::conv2d_plan)
  // --bitwise with a channel split: the kernels of one TP shard's convolution (the split channels
  // / tp::TpComm::shards), which every tp runs, shard by shard.
  std::shared_ptr<const void> shard_plan;
  int C = 0;  // batch-norm channels held here (OC, or OC/tp after a column split)
  A *w = nullptr, *bn_w = nullptr, *bn_b = nullptr;         // (OC,IC,K,K), (C), (C)
  float *dw = nullptr, *dbn_w = nullptr, *dbn_b = nullptr;  // their gradients
  float *running_mean = nullptr, *running_var = nullptr;    // (C) buffers
  size_t stats = 0;  // offset of its (mean, var) sums in the model's running-statistics sums
  struct Acts {
    A *conv, *bn, *relu, *pool;  // relu/pool null where absent
    float *mean, *rstd;
    int32_t* argmax;
    A* out;  // what the next unit reads
  };
  std::vector<Acts> slots;
};

// In fp32, bf16 or fp16 storage (--precision): below fp32 the images and a copy of the fp32
// parameters are rounded to A; gradients, the loss and batch norm's statistics stay fp32.
template <class A>
class CnnModelT final : public Model {
 public:
  using ConvBn = ConvBnT<A>;
  CnnModelT(const CnnSpec& spec, const ModelConfig& m, const ModelBuild& how);
  void bind_gradients(const std::function<float*(size_t)>& address) override;
  double forward(const MicroBatch& mb) override;
  void backward(const MicroBatch& mb, float dloss, GradReadyHook ready) override;
  ModelOutput output(int slot) const override;
  int loss_terms_per_sample() const override { return 1; }
  StageBoundary boundary(int chunk, int slot) override;
  void end_step(comm::Group& dp) override;
  void parameters_changed() override;
  size_t weight_copy_bytes() const override { return weights.size() * sizeof(A); }

  CnnSpec spec;
  int B = 0;  // planned rows
  struct Block {
    int index = 0;
    ConvBn c1, c2, down;
    bool residual = true, projection = false;
    // Per slot: c2 + shortcut and its ReLU (B,OC,H,W); not residual: out is c1's output.
    std::vector<A*> sum, out;
  };
  struct Chunk {
    bool first = false, last = false;  // holds the image (and resnet's stem) / the classifier
    std::vector<Block> blocks;
    std::vector<A*> input;  // per slot: the received input of a chunk that is not first
    size_t in_elements = 0, out_elements = 0;  // per sample, at the chunk's boundaries
  };
  std::vector<ConvBn> trunk;  // resnet's stem (the first chunk's); alexnet: empty
  std::vector<Chunk> chunks;
  struct Head {  // resnet's fc is fc1 here
    A *fc1_w = nullptr, *fc1_b = nullptr, *fc2_w = nullptr, *fc2_b = nullptr;
    float *dfc1_w = nullptr, *dfc1_b = nullptr, *dfc2_w = nullptr, *dfc2_b = nullptr;
    int Hl = 0;  // alexnet: fc1's outputs held here
  } head;
  struct HeadActs {
    A *features, *hidden, *relu, *logits;
    float *lse, *losses;
  };
  std::vector<HeadActs> head_slots;
  Buffer<float> acts, dacts;
  Buffer<int32_t> argmax_store;
  A *d0 = nullptr, *d1 = nullptr;                 // (B, widest) ping-pong activation gradients
  A *t0 = nullptr, *t1 = nullptr, *t2 = nullptr;  // (B, widest) scratch
  A* workspace = nullptr;                         // convolution scratch
  Buffer<A> weights;  // below fp32: params rounded to A (flat_size); empty in fp32
  // Per BN: (C) mean sums, (C) var sums; last, the groups summed. --bitwise: one such set (of
  // stat_stride values) per reduction shard of this rank.
  std::vector<double> stat_sums;
  size_t stat_stride = 0;
  int stat_shards = 0;  // --bitwise: this rank's reduction shards; 0: one set for the whole step
  double* stat_now = nullptr;  // the set the current forward adds to
  int64_t stat_groups = 0;     // groups counted into stat_sums this step
  // Where the layers add to the sums: stat_sums itself on the CPU, else the device's copy.
  double* stat_dev = nullptr;

 private:
  // With a shortcut (resnet's c2), the block's relu(bn + shortcut) goes to block_out where the
  // device fuses it into batch norm (returns true), else the caller adds it.
  bool conv_bn_forward(ConvBn& u, int slot, const A* x, int rows, bool training,
                       const A* shortcut = nullptr, A* block_out = nullptr);
  // dy is overwritten (ReLU's backward runs in place); dx may be nullptr (the image).
  void conv_bn_backward(ConvBn& u, int slot, A* dy, A* dx, const A* x, int rows);
  // --bitwise: a split convolution shard by shard (row split: the tree over its input channels'
  // shards, summed over TP; column split: the input gradient so).
  void conv_forward_fixed(ConvBn& u, A* out, const A* x, int rows);
  void conv_backward_fixed(ConvBn& u, A* dx, const A* dout, const A* x, int rows);
  const A* trunk_forward(int slot, const A* x, int rows, bool training);
  void block_forward(Block& b, int slot, const A* x, int rows, bool training);
  void block_backward(Block& b, int slot, A* dout, A* dx, const A* x, int rows);
  // fn(name, weight view, gradient view) for every parameter held here.
  template <class Fn>
  void for_each_parameter(Fn&& fn);
  // Points the weights at what the layers read: params, or the rounded copy.
  void bind_weights(A* read);
  // The micro-batch's images and labels where the layers read them: the host's on the CPU in fp32,
  // else the slot's copy (uploaded, and rounded below fp32, when asked: by forward).
  const A* device_images(const MicroBatch& mb, bool upload);
  const int32_t* device_labels(const MicroBatch& mb, bool upload);
  size_t image_elements() const;  // per slot
  const LayerOpsT<A>* layers_;
  comm::Group self_;
  tp::TpComm tp_;  // over how.tp, or self_
  Buffer<A> images_;
  Buffer<float> image_staging_;  // below fp32: a micro-batch's images as float, then rounded
  Buffer<int32_t> labels_;
  Buffer<double> stat_store_;  // stat_dev off the CPU
  std::vector<float> host_losses_, host_buffers_;
  mutable std::vector<float> host_logits_;
  mutable std::vector<A> host_logits_16_;
  size_t trunk_segment_ = SIZE_MAX, head_segment_ = SIZE_MAX;
  std::vector<size_t> segment_of_block_;
};

using CnnModel = CnnModelT<float>;

}  // namespace mpitron
