// Evaluating a checkpoint outside training (mpitron eval): the model rebuilt from the file for
// inference, and its loss (with accuracy and confusion matrix for classifiers) over validation
// batches of any data kind: sampled batches as the trainer's validation draws them, or every
// validation image or verse once, in order.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/allocator.hpp"
#include "src/model/model.hpp"
#include "src/train/batch_source.hpp"
#include "src/train/model_checkpoint.hpp"

namespace mpitron {

// A model from a checkpoint, planned for micro-batches of `rows` samples of seq_len tokens
// (0: the model's longest).
std::unique_ptr<Model> load_for_inference(const std::string& ckpt, const CheckpointRecord& rec,
                                          int rows, int seq_len, DeviceAllocator& alloc);

struct EvalPlan {
  int batches = 0;           // sampled batches (whole_split: ignored)
  int batch_size = 0;        // rows per batch; data must have been loaded for this many
  int seq_len = 0;           // T of sequence data
  uint64_t seed = 0;         // of the sampled batches
  bool whole_split = false;  // classifiers: every validation sample once, in order
};

struct EvalTotals {
  double loss_sum = 0;             // sum of the model's forward losses
  int64_t loss_terms = 0;          // what they are a sum over: the mean loss is loss_sum / this
  int64_t samples = 0;             // rows evaluated
  int batches = 0;                 // batches evaluated
  int64_t split_samples = 0;       // validation images or verses in the split (classifiers)
  int64_t correct = 0;             // arg-max hits (classifiers)
  std::vector<int64_t> confusion;  // (label, prediction), classes x classes (classifiers)
};

// Validation over the data's kind: the loss of a language model on sampled batches, or a
// classifier's loss, hits and confusion matrix (classes K). Mean loss: loss_sum / loss_terms.
EvalTotals evaluate_split(Model& model, BatchSource& data, int classes, const EvalPlan& plan);

// What a classifier's labels 0..classes-1 mean, for people: BERT's verse tasks name theirs
// (testament, consecutive pair), a Fashion-MNIST folder (its path says "fashion") its ten
// garments; otherwise the label number itself.
std::vector<std::string> class_names(const ModelConfig& model, const std::string& data_path,
                                     int classes);

}  // namespace mpitron
