// Hugging Face GPT-2 weights in and out: the mapping between HF's names and layout (Conv1D
// weights stored (in, out), optional "transformer." prefix, tied lm_head) and mpitron's GPT
// parameters; `mpitron import`, `mpitron export` and `mpitron train --init-from`. A config.json
// with model_type "bert" goes to src/train/pretrained_bert.hpp instead; the helpers both share
// are declared at the end.
#pragma once
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"
#include "src/model/config.hpp"
#include "src/model/registry.hpp"

namespace mpitron {

// A Hugging Face model: the weights (model.safetensors) and its config.json. A folder holds both;
// for a .safetensors file, config.json is looked for beside it. UsageError when either is missing
// or the folder holds a sharded model (model.safetensors.index.json).
struct HfSource {
  std::string weights, config;
};
HfSource resolve_hf_source(const std::string& dir_or_file);

// The mpitron GPT config of a GPT-2 config.json (n_layer, n_head, n_embd, n_positions ->
// block_size, vocab_size). UsageError naming the key for what mpitron's GPT does not compute:
// another model_type, activation (gelu_new / gelu_pytorch_tanh only), layer_norm_epsilon other
// than mpitron's 1e-5, n_inner other than 4 * n_embd, untied or rescaled attention variants.
ModelConfig read_hf_gpt2_config(const std::string& config_json);

// config.json of an mpitron GPT, as transformers' GPT2Config writes it (GPT2LMHeadModel).
std::string hf_gpt2_config_json(const ModelConfig& model);

// True for the weights HF stores transposed (Conv1D, (in, out)): c_attn, c_proj, c_fc weights.
bool hf_transposed(const std::string& mpitron_name);

// `mpitron import --plan`, `import`, `export`, `train --init-from` below take a GPT-2 or a BERT
// (config.json's model_type, hf_model_type); the descriptions are the GPT-2's.

// `mpitron import --plan`: tensors, dtypes, shapes and bytes from the header, the mapping to
// mpitron's names and the model config; reads no tensor data. UsageError as import for a header
// or config that cannot be imported (a truncated file is reported, not refused).
void print_import_plan(const std::string& from, std::ostream& out);

// `mpitron import`: an mpitron checkpoint (step 0, parameters at global names and shapes, no
// optimizer state) from a HF GPT-2 model, streamed from the mapped file a chunk at a time.
// UsageError for a missing, misshapen or unexpected tensor, an lm_head not wte, a truncated file.
void import_hf(const std::string& from, const std::string& out_checkpoint);

// `mpitron export`: DIR/model.safetensors (F32, HF names without prefix, Conv1D layout) and
// DIR/config.json from an mpitron GPT checkpoint, one tensor in memory at a time.
void export_hf(const std::string& checkpoint, const std::string& out_dir);

// `train --init-from`: the model config of a pretrained source (HF folder or .safetensors file,
// or an mpitron checkpoint).
ModelConfig pretrained_model_config(const std::string& source);

// Fills the pieces ("params/<name>" at global shapes, this rank's blocks) from a pretrained
// source, after checking that its model equals `model` (UsageError naming the first mismatch,
// vocabulary first) and that every tensor is there with its shape. An mpitron checkpoint of
// another task (a key that selects the head, ModelKey::selects_head) fills what it has; returns
// the names of the parameters it lacks, which keep their initialisation. Not collective.
std::vector<std::string> load_pretrained_parameters(const std::string& source,
                                                    const ModelConfig& model,
                                                    const std::vector<io::TensorPiece>& pieces);

// ---- shared by the GPT-2 and BERT mappings --------------------------------------------------

// config.json as a JSON object. UsageError when it cannot be read, is not JSON or not an object.
nlohmann::json read_hf_config_json(const std::string& config_json);

// "gpt2" or "bert": config.json's model_type (when absent, as in the oldest files: "bert" if it
// has num_hidden_layers, else "gpt2").
// UsageError naming the supported ones for any other.
std::string hf_model_type(const std::string& config_json);

// config[key] as a number (UsageError naming the key when it is not one).
double json_number(const nlohmann::json& config, const std::string& key, const std::string& path);

// Every parameter of the whole network of a model config (the family's registry, no slice).
std::vector<ParamInfo> whole_params(const ModelConfig& m);

// Copies the blocks of an mpitron tensor of `shape` (global coordinates, row-major, TensorPiece
// contract) out of HF tensor e, converting to float; transposed: HF stores the 2-D tensor (in,
// out) (GPT-2's Conv1D).
void copy_hf_blocks(const io::SafetensorsFile& file, const io::SafetensorsEntry& e, bool transposed,
                    const std::vector<int64_t>& shape, const std::vector<io::Block>& blocks,
                    float* out);

// True when a and b hold the same float values element for element (read in chunks, the pages of
// each released after it).
bool hf_same_values(const io::SafetensorsFile& file, const io::SafetensorsEntry& a,
                    const io::SafetensorsEntry& b);

// The checkpoint `mpitron import` writes (step 0, parameters at global names and shapes, no
// optimizer state): each of params from entry.at(name) in file, transposed where
// transposed(name) is true (nullptr: none), streamed a chunk at a time (io::TensorPiece::fill),
// each chunk's mapped pages released once read. Not collective (MPI_COMM_SELF).
void write_imported_checkpoint(const std::string& out_checkpoint, const ModelConfig& model,
                               const io::SafetensorsFile& file,
                               const std::vector<ParamInfo>& params,
                               const std::map<std::string, const io::SafetensorsEntry*>& entry,
                               bool (*transposed)(const std::string&) = nullptr);

// `train --init-from`: "" when a pretrained model (have) fits this run's (want), else the error
// naming the first key that differs (vocabulary first; keys that select the task head are not
// compared).
std::string pretrained_mismatch(const std::string& source, const ModelConfig& have,
                                const ModelConfig& want);

}  // namespace mpitron
