#include "src/model/family.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/check.hpp"
#include "src/model/bert.hpp"
#include "src/model/cnn.hpp"
#include "src/model/gpt.hpp"
#include "src/model/mlp.hpp"

namespace mpitron {

namespace {

void validate_gpt(const ModelConfig& m, const TrainConfig& t) {
  const GptConfig g = gpt_config(m);
  if (g.n_embd % g.n_head != 0)
    throw UsageError(
        fmt::format("n_embd ({}) must be divisible by n_head ({})", g.n_embd, g.n_head));
  if (t.seq_len > g.block_size)
    throw UsageError(
        fmt::format("seq_len ({}) exceeds the model's block_size ({})", t.seq_len, g.block_size));
  // Pairs check their ids against the vocabulary when they are read (bytes or SentencePiece).
  if (g.vocab_size < 256 && m.get("task") == 0)
    throw UsageError(fmt::format(
        "vocab_size {} is smaller than the byte vocabulary (256) of the text data", g.vocab_size));
  if (m.get("task") != 0 && m.get("task") != 1)
    throw UsageError(
        fmt::format("gpt's task is 0 (text) or 1 (translation pairs), not {}", m.get("task")));
}

constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";
constexpr const char* kLocalFashionMnist = "data/fashion-mnist";
constexpr const char* kFashionMnistHint =
    "install Debian's dataset-fashion-mnist, unpack a data archive into data/ "
    "(io/unpack_data_archive.sh), or pass --data";

int64_t image_inputs(const ModelConfig& m) {
  return m.get("channels") * m.get("image") * m.get("image");
}

const ModelFamily kFamilies[] = {
    {"gpt",
     "GPT-2 decoder (causal language model)",
     [](const ModelConfig& m) { return m.get("task") == 1 ? DataKind::pairs : DataKind::text; },
     "data/kjv.txt",
     "create it with io/get_bible.sh, or pass --data",
     {{"n_layer", 4, "transformer blocks (what pipeline stages divide)"},
      {"n_head", 4, "attention heads (what tensor parallelism divides)"},
      {"n_embd", 128, "width of the residual stream"},
      {"block_size", 64, "longest sequence (position embeddings)"},
      {"vocab_size", 256, "vocabulary; 256 covers the byte tokens of text data"},
      {"task", 0,
       "0: next token on text; 1: translation pairs (source [SEP] target [END], the loss on the "
       "target; vocab_size >= 259 for bytes)",
       false, true, true}},
     validate_gpt,
     validate_gpt_layout,
     build_gpt,
     [](const ModelConfig& m) { return m.get("block_size"); },
     [](const ModelConfig& m) { return m.get("vocab_size"); },
     [](const ModelConfig& m) { return int(m.get("n_layer")); },
     [](const ModelConfig& m, const RegistrySlice& s) { return gpt_registry(gpt_config(m), s); },
     nullptr,
     true,
     true,
     true,
     true,
     gpt_model_memory,
     true},
    {"mlp",
     "MLP classifier: linear, optional LayerNorm, ReLU, dropout, linear",
     [](const ModelConfig&) { return DataKind::images; },
     kFashionMnist,
     kFashionMnistHint,
     {{"input", 784, "input features (pixels per image)"},
      {"hidden", 256, "width of the hidden layer"},
      {"classes", 10, "labels predicted"},
      {"layernorm", 0, "1: LayerNorm after fc1, 0: none", false}},
     validate_mlp,
     [](const ModelConfig&, int tp) {
       if (tp != 1)
         throw UsageError(fmt::format("the mlp family runs at --tp 1 (got --tp {})", tp));
     },
     build_mlp,
     [](const ModelConfig& m) { return m.get("input"); },
     [](const ModelConfig& m) { return m.get("classes"); },
     nullptr,
     nullptr,
     nullptr,
     false,
     false,
     true,
     true,
     mlp_model_memory},
    {"alexnet",
     "AlexNet-style CNN: conv-BN-ReLU pairs with max pooling, dropout-linear-ReLU-linear; "
     "channels split over TP, the four convolutions into pipeline stages",
     [](const ModelConfig&) { return DataKind::images; },
     kFashionMnist,
     kFashionMnistHint,
     {{"channels", 1, "input channels"},
      {"image", 28, "input height and width"},
      {"classes", 10, "labels predicted"},
      {"width", 32, "channels of the first convolution (then 2x, 4x, 4x)"},
      {"hidden", 256, "width of the classifier's hidden layer"},
      {"norm_group", 8, "samples per batch-norm statistics group (ghost batch)"}},
     validate_cnn,
     validate_alexnet_layout,
     build_alexnet,
     image_inputs,
     [](const ModelConfig& m) { return m.get("classes"); },
     [](const ModelConfig&) { return 4; },
     [](const ModelConfig& m, const RegistrySlice& s) {
       return cnn_registry(cnn_spec(CnnKind::alexnet, m), s);
     },
     [](const ModelConfig& m) { return m.get("norm_group"); },
     false,
     false,
     true,
     true,
     alexnet_model_memory},
    {"resnet",
     "ResNet (basic blocks with batch norm) in three widths, global average pooling, linear; "
     "blocks split into pipeline stages",
     [](const ModelConfig&) { return DataKind::images; },
     kFashionMnist,
     kFashionMnistHint,
     {{"channels", 1, "input channels"},
      {"image", 28, "input height and width"},
      {"classes", 10, "labels predicted"},
      {"width", 16, "channels of the stem and first stage (then 2x, 4x)"},
      {"blocks_per_stage", 3, "basic blocks per width (what pipeline stages divide: 3 x this)"},
      {"norm_group", 8, "samples per batch-norm statistics group (ghost batch)"}},
     validate_cnn,
     validate_resnet_layout,
     build_resnet,
     image_inputs,
     [](const ModelConfig& m) { return m.get("classes"); },
     [](const ModelConfig& m) { return 3 * int(m.get("blocks_per_stage")); },
     [](const ModelConfig& m, const RegistrySlice& s) {
       return cnn_registry(cnn_spec(CnnKind::resnet, m), s);
     },
     [](const ModelConfig& m) { return m.get("norm_group"); },
     false,
     false,
     true,
     true,
     resnet_model_memory},
    {"bert",
     "BERT-style encoder: masked-LM pretraining (task 0) or classification of verses (task 1: "
     "testament, task 2: consecutive pairs)",
     [](const ModelConfig& m) { return m.get("task") == 0 ? DataKind::text : DataKind::verses; },
     "data/kjv.txt",
     "create it with io/get_bible.sh (tasks 1 and 2: io/get_bible.sh data/kjv_verses.txt "
     "--references), or pass --data",
     {{"n_layer", 2, "encoder layers"},
      {"n_head", 4, "attention heads (what tensor parallelism divides)"},
      {"n_embd", 64, "hidden size"},
      {"block_size", 128, "position table: the longest sequence"},
      {"vocab_size", 261, "vocabulary; 261 covers bytes and the five specials at 256-260"},
      {"type_vocab", 2, "token types (segments A and B)"},
      {"task", 0, "0 masked-LM pretraining, 1 testament of a verse, 2 consecutive verse pairs",
       false, true},
      {"pad_id", 256, "id of [PAD]", false},
      {"unk_id", 257, "id of [UNK]", false},
      {"cls_id", 258, "id of [CLS]", false},
      {"sep_id", 259, "id of [SEP]", false},
      {"mask_id", 260, "id of [MASK]", false}},
     validate_bert,
     validate_bert_layout,
     build_bert,
     [](const ModelConfig& m) { return m.get("block_size"); },
     [](const ModelConfig& m) { return int64_t(bert_config(m).classes()); },
     nullptr,
     [](const ModelConfig& m, const RegistrySlice& s) { return bert_registry(bert_config(m), s); },
     nullptr,
     false,
     false,
     true,
     true,
     bert_model_memory,
     false,
     [](const ModelConfig& m) -> std::vector<std::string> {
       if (m.get("task") == 1) return {"Old Testament", "New Testament"};
       if (m.get("task") == 2) return {"not the next verse", "the next verse"};
       return {};
     }},
};

}  // namespace

std::string default_data(const ModelFamily& family, const ModelConfig& model) {
  if (family.data(model) == DataKind::pairs) return "data/es-en";
  if (family.default_data == std::string_view(kFashionMnist) &&
      std::filesystem::is_directory(kLocalFashionMnist))
    return kLocalFashionMnist;
  return family.default_data;
}

std::string preset_data(const RunConfig& cfg) {
  return cfg.data.empty() ? default_data(model_family(cfg.model.type), cfg.model) : cfg.data;
}

const char* default_data_hint(const ModelFamily& family, const ModelConfig& model) {
  return family.data(model) == DataKind::pairs
             ? "create it with io/get_parallel_bible.sh data/es-en, or pass --data"
             : family.data_hint;
}

std::span<const ModelFamily> model_families() {
  return kFamilies;
}

std::string family_types_with(bool ModelFamily::*flag) {
  std::vector<std::string> types;
  for (const ModelFamily& f : kFamilies)
    if (f.*flag) types.push_back(f.type);
  if (types.empty()) return "no family";
  std::string list = types.back();
  if (types.size() > 1)
    list = fmt::format("{} and {}", fmt::join(types.begin(), types.end() - 1, ", "), list);
  return list + (types.size() > 1 ? " families" : " family");
}

const ModelFamily& model_family(const std::string& type) {
  std::string known;
  for (const ModelFamily& f : kFamilies) {
    if (type == f.type) return f;
    known += (known.empty() ? "" : ", ") + std::string(f.type);
  }
  throw UsageError(fmt::format("model.type '{}' is not supported (known: {})", type, known));
}

std::unique_ptr<Model> build_model(const ModelConfig& model, const ModelBuild& how) {
  MPITRON_REQUIRE(how.alloc != nullptr, "ModelBuild needs an allocator");
  return model_family(model.type).build(model, how);
}

}  // namespace mpitron
