// Model families, picked by the config's model.type: each states its shape keys, checks a config,
// builds a model (or a pipeline stage of it) and names the data it reads. Adding a family is one
// model file pair and one entry in the table in family.cpp.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "src/model/config.hpp"
#include "src/model/model.hpp"

namespace mpitron {

struct ModelKey {
  const char* name;
  int64_t default_value;
  const char* meaning;
  bool must_be_positive = true;
  // Picks the task head (bert's task): a pretrained source (--init-from) may differ in it, its
  // shared parameters load and the run's own head starts fresh.
  bool selects_head = false;
  // A key newer than some checkpoints: one without it reads as this default.
  bool optional_in_checkpoints = false;
};

enum class DataKind {
  text,    // a text file, byte tokens; a sample is seq_len + 1 tokens
  images,  // a folder of IDX files; a sample is an image and its label
  verses,  // a verse file (io/verse_dataset.hpp); a sample is seq_len ids and its label
  pairs,   // a folder of sentence pairs (io/pair_dataset.hpp); a sample is seq_len + 1 tokens and
           // the span of its loss terms
};

// Samples of seq_len tokens (text, verses), and samples with a label (images, verses).
inline bool is_sequence_data(DataKind k) {
  return k != DataKind::images;
}
inline bool is_labelled_data(DataKind k) {
  return k != DataKind::text && k != DataKind::pairs;
}

struct ModelFamily {
  const char* type;
  const char* description;
  DataKind (*data)(const ModelConfig& model);  // what a model of this config reads
  const char* default_data;                    // --data when none is given
  const char* data_hint;                       // how to get the default data
  std::vector<ModelKey> keys;
  // UsageError naming the first impossible value of the model and the train settings it limits
  // (keys are already checked for being positive where they must be).
  void (*validate)(const ModelConfig& model, const TrainConfig& train);
  // UsageError when the model cannot split over tp tensor-parallel ranks.
  void (*validate_layout)(const ModelConfig& model, int tp);
  std::unique_ptr<Model> (*build)(const ModelConfig& model, const ModelBuild& how);
  // What one sample may be: text, the most tokens (block size); images, the input features.
  int64_t (*sample_size)(const ModelConfig& model);
  // Classes the model predicts: the vocabulary of a language model, the labels of a classifier.
  int64_t (*classes)(const ModelConfig& model);
  // Pipeline parallelism, for families that split into stages (nullptr: one stage only): the
  // blocks stages divide among themselves, and the registry of any slice without building it.
  int (*pipeline_blocks)(const ModelConfig& model) = nullptr;
  ParamRegistry (*registry)(const ModelConfig& model, const RegistrySlice& slice) = nullptr;
  // Samples whose statistics batch norm shares (nullptr: none): every micro-batch holds whole
  // groups.
  int64_t (*sample_group)(const ModelConfig& model) = nullptr;
  bool generates =
      false;  // a causal LM: `mpitron generate` samples from it, span objectives train it
  bool recomputes = false;       // builds with ModelBuild::recompute (--recompute block)
  bool on_device = false;        // builds on a device's layer table (--device cuda, cpu-staged)
  bool mixed_precision = false;  // 16-bit activations and weight copies (--precision bf16, fp16)
  // What a build allocates, counted without building (`mpitron plan`; nullptr: no plan yet).
  ModelMemory (*memory)(const ModelConfig& model, const ModelBuild& how) = nullptr;
  bool chunks_head = false;  // an LM head over ModelBuild::head_chunk_rows (--lm-head-chunk)
  // Names of the classes a labelled task predicts, for `eval`'s confusion matrix (nullptr or
  // empty: the data's names, else the class numbers).
  std::vector<std::string> (*class_names)(const ModelConfig& model) = nullptr;
};

// --data when none is given, and how to get it (pairs: data/es-en, whatever the family). Images:
// data/fashion-mnist where it exists (an unpacked data archive), else Debian's package's folder.
std::string default_data(const ModelFamily& family, const ModelConfig& model);
const char* default_data_hint(const ModelFamily& family, const ModelConfig& model);
// What a preset trains on without --data: its [data] path, else its family's default.
std::string preset_data(const RunConfig& cfg);

// Every family, in the table's order.
std::span<const ModelFamily> model_families();

// The types of the families with a flag set, for messages: "gpt", "gpt and bert".
std::string family_types_with(bool ModelFamily::*flag);

// The family of a type; UsageError naming the known types when there is none.
const ModelFamily& model_family(const std::string& type);

// Builds a model of any family.
std::unique_ptr<Model> build_model(const ModelConfig& model, const ModelBuild& how);

}  // namespace mpitron
