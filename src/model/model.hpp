// The model-family interface (after torchtitan's TrainSpec and Megatron's forward_step): what the
// trainer, `eval`, `generate` and checkpoints need of any model, so none of them names a family.
// A Model is one pipeline stage of a family's network (the whole network at pp = 1): its
// registry and flat parameters, activations planned for every micro-batch in flight, and forward
// and backward over one micro-batch. Gradients live where gradient synchronisation puts them
// (bind_gradients); a model only announces which of its segments became final (GradReadyHook).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/allocator.hpp"
#include "comm/group.hpp"
#include "src/model/config.hpp"
#include "src/model/layer_ops.hpp"
#include "src/model/precision.hpp"
#include "src/model/registry.hpp"
#include "src/model/staging_queue.hpp"

namespace mpitron {

namespace tp {
struct TpDeviceCollectives;  // src/model/tensor_parallel.hpp
}

// Samples of one micro-batch. Language models read tokens (rows, T+1): inputs [0,T), targets
// [1,T]. Classifiers read features (rows, D) and labels (rows).
struct SampleView {
  const int32_t* tokens = nullptr;
  const float* features = nullptr;
  const int32_t* labels = nullptr;
  int rows = 0;
  // Language models: (rows, 2) spans [begin, end) of the target positions that are loss terms (a
  // translation's target); nullptr: every position.
  const int32_t* loss_spans = nullptr;
  // Tokens per row (rows of seq_len + 1) when fewer than the model was built for (translation
  // pairs in length buckets: the batch's longest); 0: as built.
  int seq_len = 0;
};

// One micro-batch and where it sits in the global batch: dropout masks are keyed by (seed, step,
// global sample), so every layout draws the baseline's masks (ARCHITECTURE.md, "Invariants").
struct MicroBatch {
  SampleView samples;
  int slot = 0;              // which planned activation set holds it (micro-batches in flight)
  int chunk = 0;             // which of this stage's model chunks runs it (interleaved pipelines)
  int64_t first_sample = 0;  // global index of samples.rows' first row in the step's batch
  int64_t step = 0;
  // The step whose global batch the samples are (step itself, or 1 every step with
  // train.fixed_batch): what the data's own draws key on (BERT's masking), dropout keys on step.
  int64_t data_step = 0;
  float dropout = 0.0f;  // 0 in evaluation
  // Training: the dloss backward will be given (the loss sum's scale), which a fused classifier
  // applies in forward (GptModelT: the logits overwritten by their gradient).
  float dloss = 1.0f;
  bool training = false;  // batch norm: the group's statistics (else the running statistics)
  uint64_t seed = 0;
};

// How to build a model (or one pipeline stage of it).
struct ModelBuild {
  int micro_rows = 1;      // largest micro-batch, in samples
  int seq_len = 0;         // tokens per sample (language models; 0: the model's longest)
  int slots = 1;           // micro-batches in flight per chunk whose activations are kept
  uint64_t seed = 0;       // parameter initialisation
  size_t flat_align = 16;  // the flat parameter allocation is padded to a multiple of this
  // Keep only each block's output per micro-batch in flight and recompute the rest of the block
  // in backward from its input (one shared set of block activations): less memory, one more
  // forward per block. Families without blocks refuse it (ModelFamily::recomputes).
  bool recompute = false;
  // > 0: the LM head and its loss over at most this many token rows at a time, through one shared
  // logits buffer recomputed in backward (the B x T x V logits are never held whole); families
  // without an LM head refuse it (ModelFamily::chunks_head).
  int head_chunk_rows = 0;
  // With target masking (loss spans): the LM head and its loss over the rows that are loss terms
  // alone, moved together before the head and back after it (the device's compact_rows); false:
  // over every row, the simple path, kept for the test that compares the two.
  bool head_on_loss_rows = true;
  // --bitwise: this rank's reduction shards, each one micro-batch (0: not bitwise). State summed
  // over the step's samples (batch-norm running statistics) is kept per shard and summed in the
  // fixed tree (src/train/reduction_tree.hpp) at end_step.
  int reduction_shards_per_rank = 0;
  // --bitwise: the TP shards (tp::TpComm::shards) every split sum runs over (0: not bitwise).
  int tp_shards = 0;
  RegistrySlice slice;        // TP slice and pipeline stage
  comm::Group* tp = nullptr;  // the tensor-parallel group of slice.tp ranks (nullptr: tp 1)
  // Its all-reduces on the device's own memory (NCCL, --comm nccl), or nullptr: MPI.
  const tp::TpDeviceCollectives* tp_device = nullptr;
  DeviceAllocator* alloc = nullptr;
  // Where params (the fp32 master weights) live when not in alloc: the host's memory while the
  // layers run on another device (--offload optimizer,master). Below fp32 only: the layers read
  // the 16-bit copy, which parameters_changed rounds on the host and uploads.
  DeviceAllocator* master_alloc = nullptr;
  // With master_alloc: the copies of that upload and the allocator of their staging buffers.
  StagingQueue* staging = nullptr;
  DeviceAllocator* staging_alloc = nullptr;
  // The layers of the device alloc allocates on (nullptr: the CPU's). Families that run on the CPU
  // only refuse another (ModelFamily::devices).
  const LayerOps* layers = nullptr;
  // Storage of activations and of the weights the layers read (--precision); the trainer takes
  // another than fp32 for the GPT family only.
  DType precision = DType::f32;
};

// A flat range of parameters whose gradients become final together in backward, in flat order.
// Segments marked `window` have one parameter layout each (transformer blocks), so gradient
// storage may give them one shared window that is reduced and cleared after each (ZeRO 2).
struct GradSegment {
  size_t begin = 0, end = 0;
  bool window = false;
};

// What a model built with a ModelBuild allocates, counted without building it (the memory plan):
// the same registry, padding and activation carving as the build.
struct ModelMemory {
  size_t flat_size = 0;          // parameter elements, padded to flat_align
  size_t buffer_elements = 0;    // non-trained buffers
  size_t weight_copy_bytes = 0;  // the 16-bit copy of the weights the layers read
  size_t activation_bytes = 0;   // activation sets, backward scratch and token buffers
  size_t logit_bytes = 0;        // the part of activation_bytes that holds logits
  size_t boundary_elements = 0;  // per sample, the largest pipeline message of a chunk (pp > 1)
  std::vector<GradSegment> segments;  // as the model's (ZeRO 2 sizes its window from them)
  // A parameter the first and the last pipeline stage both hold (the tied embedding), whose
  // gradients are summed over them.
  bool first_and_last = false;
  size_t first_and_last_elements = 0;  // its elements on this rank
};

// Called by backward with the index of each segment whose gradients are final for this
// micro-batch, last segment first.
struct GradReadyHook {
  void (*fn)(void* ctx, size_t segment) = nullptr;
  void* ctx = nullptr;
  void operator()(size_t segment) const {
    if (fn) fn(ctx, segment);
  }
};

// Where one chunk's activations cross a pipeline-stage boundary, for one slot. Null where the
// chunk has no neighbour on that side: input on the first virtual stage, output and output_grad on
// the last, input_grad on the first.
struct StageBoundary {
  void* input = nullptr;             // receive the chunk's input here before its forward
  const void* output = nullptr;      // the chunk's output after its forward, to send on
  void* output_grad = nullptr;       // receive the gradient of the output here before backward
  const void* input_grad = nullptr;  // after backward: the gradient of the input, to send back
  // Per sample, a micro-batch of r samples sends r times these: the input and its gradient, the
  // output and its gradient.
  size_t input_elements = 0, output_elements = 0;
  size_t element_bytes = sizeof(float);  // of the model's storage type (2 in 16 bits)
};

// A tensor a model fed itself beyond its samples (an encoder's masked inputs), for `eval --dump`.
struct DumpTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;  // integers are exact up to 2^24
};

// Output of the last forward of a slot: (rows, positions, classes) logits.
struct ModelOutput {
  const float* logits = nullptr;
  int positions = 0, classes = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  ModelConfig config;
  ParamRegistry registry;
  size_t flat_size = 0;           // elements of params (the registry's, padded to flat_align)
  Buffer<float> params, buffers;  // flat parameters and non-trained buffers
  std::vector<GradSegment> segments;

  // Points the model's gradient views at their storage: address(flat offset) for every parameter.
  // Called once after building, before the first backward.
  virtual void bind_gradients(const std::function<float*(size_t)>& address) = 0;
  // --bitwise in one stage holding both ends of a tied embedding (StageOwner::first_and_last): the
  // token embedding's part of its gradient goes to g, apart from the LM head's part, as a pipeline
  // holds the two on two stages (each summed over the shards, then the two added). Families with
  // such a parameter override it; the others never get the call.
  virtual void bind_tied_embedding_gradient(float* g);
  // Returns the sum of the micro-batch's losses (the caller normalises by the global count).
  virtual double forward(const MicroBatch& mb) = 0;
  // Backward of the slot's last forward; parameter gradients accumulate. dloss: gradient of the
  // objective with respect to each loss term (1 / global loss terms for the mean).
  virtual void backward(const MicroBatch& mb, float dloss, GradReadyHook ready) = 0;
  virtual ModelOutput output(int slot) const = 0;
  // Loss terms per sample: T for a language model, 1 for a classifier.
  virtual int loss_terms_per_sample() const = 0;
  // Samples of the slot's last forward whose arg-max prediction is the label (classifiers).
  virtual int64_t count_correct(const MicroBatch& mb) const;
  // The pipeline boundary of a chunk's slot (families that split into stages; the others throw).
  virtual StageBoundary boundary(int chunk, int slot);
  // After a training step's last backward, on every rank of the dp group: state that is no
  // gradient but sums over the step's samples (batch-norm running statistics).
  virtual void end_step(comm::Group& dp);
  // After the fp32 parameters changed outside the model (an optimizer step, a checkpoint or
  // pretrained weights read): a model whose layers read a lower-precision copy rounds it again.
  virtual void parameters_changed() {}
  // Bytes of that copy (0 where the layers read params itself).
  virtual size_t weight_copy_bytes() const { return 0; }
  // What the slot's last forward derived from its samples (an encoder's masked inputs, token types,
  // lengths, targets), for the oracle's `eval --dump`; empty for families that use them as given.
  virtual std::vector<DumpTensor> input_dump(int slot) const;

 protected:
  // After the registry is filled: pads flat_size to how.flat_align, allocates and initialises
  // params and buffers from how.seed.
  void allocate_tensors(const ModelBuild& how);

  // Below fp32: the layers' weight copy from params, rounded to nearest even: on params' device,
  // or with the master weights in the host's memory (ModelBuild::master_alloc) on the host's
  // threads, one staging chunk at a time, each uploaded while the next is rounded.
  template <class A>
  void round_weight_copy(const LayerOpsT<A>& layers, A* weights) {
    if (!master_on_host_) return layers.round_weights(weights, params.data(), flat_size);
    upload_rounded_master(weights);
  }

 private:
  void upload_rounded_master(bf16_t* weights);
  void upload_rounded_master(fp16_t* weights);
  template <class A>
  void upload_rounded_master_as(A* weights);

  bool master_on_host_ = false;  // params in the host's memory, the layers on another device
  StagingQueue* staging_ = nullptr;
  // Then: two chunks of the rounded copy on their way up (one rounded while the other uploads).
  Buffer<uint16_t> weight_staging_;
};

// Elements of a host staging chunk on the way to or from a device (the 16-bit weight copy's upload
// with the master weights in host memory, --offload's update): whole 8-bit AdamW blocks; the
// memory plan counts them.
inline constexpr size_t kHostStagingElements = size_t(1) << 20;

}  // namespace mpitron
