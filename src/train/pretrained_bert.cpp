// Hugging Face BERT <-> mpitron bert: names (optional "bert." prefix, LayerNorm gamma/beta), the
// head that decides the task, the tied decoder, config.json checked against what the encoder
// computes, special ids from vocab.txt. The file handling is pretrained.hpp's (safetensors mapped,
// one tensor at a time).
#include "src/train/pretrained_bert.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "base/check.hpp"
#include "io/safetensors.hpp"
#include "io/wordpiece_tokenizer.hpp"
#include "src/train/model_checkpoint.hpp"
#include "src/train/pretrained.hpp"

namespace mpitron {

namespace fs = std::filesystem;

namespace {

constexpr double kBertLnEps = 1e-12;  // src/model/bert.cpp

bool starts(const std::string& s, const std::string& p) {
  return s.rfind(p, 0) == 0;
}
bool ends(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// mpitron's name of a HF tensor: without "bert.", LayerNorm.gamma/beta (TF-era files) as
// LayerNorm.weight/bias.
std::string mpitron_name(const std::string& hf) {
  std::string n = starts(hf, "bert.") ? hf.substr(5) : hf;
  if (ends(n, "LayerNorm.gamma")) n = n.substr(0, n.size() - 5) + "weight";
  if (ends(n, "LayerNorm.beta")) n = n.substr(0, n.size() - 4) + "bias";
  return n;
}

// HF's name of an mpitron tensor as transformers writes it: the encoder and pooler under "bert.".
std::string hf_name(const std::string& n) {
  return starts(n, "cls.") || starts(n, "classifier.") ? n : "bert." + n;
}

bool is_head(const std::string& n) {
  return starts(n, "cls.") || starts(n, "pooler.") || starts(n, "classifier.");
}

std::string shape_text(const std::vector<int64_t>& s) {
  return io::shape_string(s);
}

// The special tokens: the model key, config.json's key (pad_token_id is BertConfig's; mpitron's
// export writes the other four beside it, so a round trip keeps what every id means), the token.
struct BertSpecial {
  const char* model_key;
  const char* config_key;
  const char* token;
};
constexpr BertSpecial kBertSpecials[] = {{"pad_id", "pad_token_id", "[PAD]"},
                                         {"unk_id", "unk_token_id", "[UNK]"},
                                         {"cls_id", "cls_token_id", "[CLS]"},
                                         {"sep_id", "sep_token_id", "[SEP]"},
                                         {"mask_id", "mask_token_id", "[MASK]"}};

const char* task_text(int64_t task) {
  return task == 0 ? "masked LM (BertForMaskedLM / BertForPreTraining)"
                   : "2-class classification (BertForSequenceClassification)";
}

// config.json's shape, checked against what mpitron's encoder computes. task and special ids are
// left at their defaults (they come from the weights and vocab.txt).
ModelConfig read_bert_config(const nlohmann::json& j, const std::string& path) {
  auto refuse = [&](const char* key, const std::string& why) {
    throw UsageError(fmt::format("{}: {} {} is not supported: {}", path, key, j[key].dump(), why));
  };
  if (j.contains("hidden_act") && j["hidden_act"] != "gelu")
    refuse("hidden_act",
           "mpitron's bert computes the exact erf GELU (\"gelu\"); gelu_new and "
           "gelu_pytorch_tanh are the tanh approximation");
  if (j.contains("layer_norm_eps") &&
      std::abs(json_number(j, "layer_norm_eps", path) - kBertLnEps) > 1e-18)
    refuse("layer_norm_eps", "mpitron's bert LayerNorm epsilon is 1e-12");
  if (j.contains("position_embedding_type") && !j["position_embedding_type"].is_null() &&
      j["position_embedding_type"] != "absolute")
    refuse("position_embedding_type", "mpitron's bert has absolute position embeddings");
  if (j.contains("is_decoder") && j["is_decoder"] == true)
    refuse("is_decoder", "mpitron's bert is a bidirectional encoder");
  if (j.contains("add_cross_attention") && j["add_cross_attention"] == true)
    refuse("add_cross_attention", "mpitron's bert has no cross-attention");
  if (j.contains("problem_type") && j["problem_type"].is_string() &&
      j["problem_type"] != "single_label_classification")
    refuse("problem_type", "mpitron's classifiers are single-label (softmax cross-entropy)");
  auto integer = [&](const char* k, int64_t fallback) -> int64_t {
    if (!j.contains(k)) {
      if (fallback > 0) return fallback;
      throw UsageError(fmt::format("{}: '{}' is missing (a BERT config.json has it)", path, k));
    }
    if (!j[k].is_number_integer() || j[k].get<int64_t>() <= 0)
      throw UsageError(fmt::format("{}: '{}' is not a positive integer", path, k));
    return j[k].get<int64_t>();
  };
  ModelConfig m = default_model_config("bert");
  m.dims["n_embd"] = integer("hidden_size", 0);
  m.dims["n_layer"] = integer("num_hidden_layers", 0);
  m.dims["n_head"] = integer("num_attention_heads", 0);
  m.dims["block_size"] = integer("max_position_embeddings", 0);
  m.dims["vocab_size"] = integer("vocab_size", 0);
  m.dims["type_vocab"] = integer("type_vocab_size", 2);  // BertConfig's default
  if (m.dims["n_embd"] % m.dims["n_head"] != 0)
    throw UsageError(fmt::format("{}: hidden_size {} is not divisible by num_attention_heads {}",
                                 path, m.dims["n_embd"], m.dims["n_head"]));
  if (integer("intermediate_size", 0) != 4 * m.dims["n_embd"])
    refuse("intermediate_size",
           fmt::format("mpitron's MLP is 4 * hidden_size = {}", 4 * m.dims["n_embd"]));
  return m;
}

// The label count config.json gives (id2label, else num_labels), 0 when it gives none.
int64_t config_labels(const nlohmann::json& j) {
  if (j.contains("id2label") && j["id2label"].is_object()) return int64_t(j["id2label"].size());
  if (j.contains("num_labels") && j["num_labels"].is_number_integer())
    return j["num_labels"].get<int64_t>();
  return 0;
}

// An opened HF BERT: config, mapped weights, for every mpitron parameter either head's registry
// knows the HF tensor that holds it, and what the file holds that is not imported.
struct HfBert {
  HfSource src;
  ModelConfig model;  // task: the head the weights hold (0 where they hold none)
  bool has_head = false;
  std::unique_ptr<io::SafetensorsFile> file;
  std::map<std::string, const io::SafetensorsEntry*> entry;  // mpitron name -> HF tensor
  const io::SafetensorsEntry *decoder_w = nullptr, *decoder_b = nullptr;
  std::vector<const io::SafetensorsEntry*> nsp, buffers;  // cls.seq_relationship.*, position_ids
  std::string specials;                                   // where the special ids came from

  explicit HfBert(const std::string& from) : src(resolve_hf_source(from)) {
    const nlohmann::json j = read_hf_config_json(src.config);
    model = read_bert_config(j, src.config);
    file = std::make_unique<io::SafetensorsFile>(src.weights);
    std::set<std::string> known;  // the parameters of both heads' registries
    for (int64_t task : {0, 1}) {
      ModelConfig m = model;
      m.dims["task"] = task;
      for (const ParamInfo& p : whole_params(m)) known.insert(p.name);
    }
    for (const io::SafetensorsEntry& e : file->tensors()) {
      const std::string n = mpitron_name(e.name);
      if (n == "cls.predictions.decoder.weight" || n == "cls.predictions.decoder.bias") {
        (ends(n, "weight") ? decoder_w : decoder_b) = &e;
      } else if (starts(n, "cls.seq_relationship.")) {
        nsp.push_back(&e);
      } else if (n == "embeddings.position_ids" || n == "embeddings.token_type_ids") {
        buffers.push_back(&e);  // buffers older transformers versions saved
      } else if (!known.count(n)) {
        throw UsageError(fmt::format(
            "{}: unexpected tensor '{}' (not a parameter of a BERT of this config.json: "
            "num_hidden_layers {})",
            src.weights, e.name, model.get("n_layer")));
      } else if (!entry.emplace(n, &e).second) {
        throw UsageError(fmt::format(
            "{}: tensor '{}' is there twice (with and without the 'bert.' prefix, or as gamma/beta "
            "and weight/bias)",
            src.weights, n));
      }
    }
    // The MLM output bias: transformers ties cls.predictions.decoder.bias to it; a file may hold
    // either.
    if (decoder_b && !entry.count("cls.predictions.bias")) {
      entry["cls.predictions.bias"] = decoder_b;
      decoder_b = nullptr;
    }
    const bool mlm = decoder_w || std::any_of(entry.begin(), entry.end(), [](const auto& kv) {
                       return starts(kv.first, "cls.predictions.");
                     });
    const bool classifier = entry.count("classifier.weight") || entry.count("classifier.bias");
    if (mlm && classifier)
      throw UsageError(
          fmt::format("{} holds two heads (cls.predictions.* and classifier.*): "
                      "mpitron's bert has one",
                      src.weights));
    has_head = mlm || classifier;
    model.dims["task"] = classifier ? 1 : 0;
    if (mlm && j.contains("tie_word_embeddings") && j["tie_word_embeddings"] == false)
      throw UsageError(
          fmt::format("{}: tie_word_embeddings false is not supported: mpitron's "
                      "masked-LM decoder is the word embeddings",
                      src.config));
    if (classifier) {
      const int64_t labels = config_labels(j);
      const auto w = entry.find("classifier.weight");
      const int64_t rows = w != entry.end() && !w->second->shape.empty() ? w->second->shape[0] : 2;
      if ((labels != 0 && labels != 2) || rows != 2)
        throw UsageError(fmt::format(
            "{}: num_labels {} is not supported: mpitron's classification tasks have 2 classes",
            labels != 0 && labels != 2 ? src.config : src.weights,
            labels != 0 && labels != 2 ? labels : rows));
    }
    read_specials(j);
  }

  // Special ids: config.json's pad/unk/cls/sep/mask_token_id where it names all five (mpitron's
  // export writes them), else vocab.txt beside it (line number - 1 = id), else pad_token_id and
  // bert-base's [UNK] [CLS] [SEP] [MASK] = 100..103. Where config.json names them and a vocab.txt
  // is there too, the two must agree: a model whose ids changed meaning is refused.
  void read_specials(const nlohmann::json& j) {
    const fs::path vocab = fs::path(src.config).parent_path() / "vocab.txt";
    const int64_t V = model.get("vocab_size");
    auto id_in_config = [&](const char* key) -> std::optional<int64_t> {
      if (!j.contains(key) || j[key].is_null()) return std::nullopt;
      if (!j[key].is_number_integer())
        throw UsageError(fmt::format("{}: '{}' is not an integer", src.config, key));
      return j[key].get<int64_t>();
    };
    bool all_in_config = true;
    for (const BertSpecial& t : kBertSpecials) all_in_config &= bool(id_in_config(t.config_key));
    if (all_in_config) {
      for (const BertSpecial& t : kBertSpecials)
        model.dims[t.model_key] = *id_in_config(t.config_key);
      specials = "from " + src.config;
      if (fs::is_regular_file(vocab)) {
        const io::WordPieceTokenizer w = io::WordPieceTokenizer::load(vocab.string());
        const int64_t in_vocab[] = {w.pad_id(), w.unk_id(), w.cls_id(), w.sep_id(), w.mask_id()};
        for (size_t i = 0; i < std::size(kBertSpecials); ++i)
          if (in_vocab[i] != model.get(kBertSpecials[i].model_key))
            throw UsageError(fmt::format(
                "{} puts {} at id {}, {} says {}: the ids would change meaning (remove one, or "
                "make them agree)",
                vocab.string(), kBertSpecials[i].token, in_vocab[i], src.config,
                model.get(kBertSpecials[i].model_key)));
        specials += " (agrees with " + vocab.string() + ")";
      }
    } else if (fs::is_regular_file(vocab)) {
      const io::WordPieceTokenizer t = io::WordPieceTokenizer::load(vocab.string());
      if (t.vocab_size() > V)
        throw UsageError(fmt::format("{} has {} tokens, more than vocab_size {} of {}",
                                     vocab.string(), t.vocab_size(), V, src.config));
      model.dims["pad_id"] = t.pad_id();
      model.dims["unk_id"] = t.unk_id();
      model.dims["cls_id"] = t.cls_id();
      model.dims["sep_id"] = t.sep_id();
      model.dims["mask_id"] = t.mask_id();
      specials = "from " + vocab.string();
    } else {
      const int64_t pad = id_in_config("pad_token_id").value_or(0);  // BertConfig's default: 0
      model.dims["pad_id"] = pad;
      model.dims["unk_id"] = 100;
      model.dims["cls_id"] = 101;
      model.dims["sep_id"] = 102;
      model.dims["mask_id"] = 103;
      specials = fmt::format(
          "no vocab.txt beside {} and no unk/cls/sep/mask_token_id in it: [PAD] from "
          "pad_token_id ({}), [UNK] [CLS] [SEP] [MASK] 100-103 as in bert-base's vocabulary (put "
          "the model's vocab.txt there if it differs)",
          src.config, pad);
    }
    for (const char* k : {"pad_id", "unk_id", "cls_id", "sep_id", "mask_id"})
      if (model.get(k) < 0 || model.get(k) >= V)
        throw UsageError(fmt::format("{}: {} {} is outside the vocabulary (vocab_size {})",
                                     src.config, k, model.get(k), V));
  }

  // UsageError unless p is in the file with its shape and a readable dtype.
  void check(const ParamInfo& p) const {
    const auto it = entry.find(p.name);
    if (it == entry.end())
      throw UsageError(fmt::format("{}: missing tensor '{}' (or '{}'), needed by the BERT of {}",
                                   src.weights, hf_name(p.name), p.name, src.config));
    const io::SafetensorsEntry& e = *it->second;
    if (e.shape != p.global_shape)
      throw UsageError(fmt::format("{}: tensor '{}' has shape {}, the BERT of {} needs {}",
                                   src.weights, e.name, shape_text(e.shape), src.config,
                                   shape_text(p.global_shape)));
    if (!io::safetensors_dtype_readable(e.dtype))
      throw UsageError(fmt::format("{}: tensor '{}' has dtype {}; F32, F16, BF16 or F64 needed",
                                   src.weights, e.name, e.dtype));
  }

  // The parameters of the task the weights hold, each checked. UsageError for a bare BertModel.
  std::vector<ParamInfo> import_params() const {
    if (!has_head)
      throw UsageError(fmt::format(
          "{} holds a bare BertModel (no cls.predictions.* or classifier.*): no head to import; "
          "fine-tune it with `mpitron train --init-from {}` (its [model] as this BERT's, the "
          "task's head starts fresh)",
          src.weights, src.weights));
    std::vector<ParamInfo> params = whole_params(model);
    for (const ParamInfo& p : params) check(p);
    if (decoder_w && decoder_w->shape != entry.at("embeddings.word_embeddings.weight")->shape)
      throw UsageError(
          fmt::format("{}: {} has shape {}, the word embeddings {}: mpitron ties the "
                      "decoder to them",
                      src.weights, decoder_w->name, shape_text(decoder_w->shape),
                      shape_text(entry.at("embeddings.word_embeddings.weight")->shape)));
    return params;
  }

  // UsageError unless the decoder weight (when present) equals the word embeddings and the
  // decoder bias (when present beside it) cls.predictions.bias. Reads both.
  void check_tied() const {
    if (decoder_w) {
      if (!hf_same_values(*file, *entry.at("embeddings.word_embeddings.weight"), *decoder_w))
        throw UsageError(fmt::format(
            "{}: {} differs from the word embeddings: mpitron's masked-LM decoder is tied to "
            "them (an untied decoder cannot be imported)",
            src.weights, decoder_w->name));
      file->release(*decoder_w);
    }
    const auto bias = entry.find("cls.predictions.bias");
    if (decoder_b && bias != entry.end()) {
      if (!hf_same_values(*file, *bias->second, *decoder_b))
        throw UsageError(
            fmt::format("{}: {} differs from {} (transformers ties them; mpitron "
                        "has one output bias)",
                        src.weights, decoder_b->name, bias->second->name));
      file->release(*decoder_b);
    }
  }

  // Lines on what the file holds that the import leaves out.
  std::vector<std::string> left_out(const std::vector<ParamInfo>& params) const {
    std::vector<std::string> out;
    std::set<std::string> used;
    for (const ParamInfo& p : params) used.insert(p.name);
    std::vector<std::string> dropped;
    for (const auto& [n, e] : entry)
      if (!used.count(n)) dropped.push_back(e->name);
    if (!dropped.empty())
      out.push_back(fmt::format(
          "{} not imported: mpitron's masked LM has no pooler (`train --init-from` the HF folder "
          "for a classifier uses it)",
          fmt::join(dropped, ", ")));
    if (!nsp.empty()) {
      std::vector<std::string> names;
      for (const auto* e : nsp) names.push_back(e->name);
      out.push_back(fmt::format(
          "{} not imported: the next-sentence head of BertForPreTraining is not trained by mpitron",
          fmt::join(names, ", ")));
    }
    for (const auto* e : buffers) out.push_back(e->name + " skipped (a buffer, not a parameter)");
    return out;
  }
};

std::string config_line(const HfBert& hf) {
  const ModelConfig& m = hf.model;
  return fmt::format(
      "config {}: bert n_layer {} n_head {} n_embd {} block_size {} vocab_size {} type_vocab {} "
      "task {}, {}",
      hf.src.config, m.get("n_layer"), m.get("n_head"), m.get("n_embd"), m.get("block_size"),
      m.get("vocab_size"), m.get("type_vocab"), m.get("task"), task_text(m.get("task")));
}

std::string specials_line(const HfBert& hf) {
  const ModelConfig& m = hf.model;
  return fmt::format("special ids [PAD] {} [UNK] {} [CLS] {} [SEP] {} [MASK] {} ({})",
                     m.get("pad_id"), m.get("unk_id"), m.get("cls_id"), m.get("sep_id"),
                     m.get("mask_id"), hf.specials);
}

}  // namespace

ModelConfig hf_bert_model_config(const std::string& source) {
  return HfBert(source).model;
}

void print_bert_import_plan(const std::string& from, std::ostream& out) {
  const HfBert hf(from);
  const std::vector<ParamInfo> params = hf.import_params();
  const io::SafetensorsFile& f = *hf.file;
  out << fmt::format("{}: {} tensors, header {} bytes, data {} bytes{}\n", f.path(),
                     f.tensors().size(), f.header_bytes(), f.data_bytes_needed(),
                     f.data_bytes_present() < f.data_bytes_needed()
                         ? fmt::format(" (TRUNCATED: the file holds {})", f.data_bytes_present())
                         : "");
  out << config_line(hf) << "\n" << specials_line(hf) << "\n";
  int64_t elements = 0;
  for (const ParamInfo& p : params) {
    const io::SafetensorsEntry& e = *hf.entry.at(p.name);
    out << fmt::format("  {:<56} {:<5} {:<12} {:>11} bytes -> {} {}\n", e.name, e.dtype,
                       shape_text(e.shape), e.bytes(), p.name, shape_text(p.global_shape));
    elements += int64_t(p.global_numel());
  }
  if (hf.decoder_w)
    out << fmt::format("  {:<56} tied: must equal the word embeddings (checked on import)\n",
                       hf.decoder_w->name);
  if (hf.decoder_b)
    out << fmt::format("  {:<56} tied: must equal cls.predictions.bias (checked on import)\n",
                       hf.decoder_b->name);
  for (const std::string& line : hf.left_out(params)) out << "  " << line << "\n";
  out << fmt::format("total: {} parameters, {} bytes as float32 in the checkpoint\n", elements,
                     elements * 4);
}

void import_hf_bert(const std::string& from, const std::string& out_checkpoint,
                    std::ostream& notes) {
  const HfBert hf(from);
  const std::vector<ParamInfo> params = hf.import_params();
  hf.file->require_complete();
  hf.check_tied();
  notes << config_line(hf) << "\n" << specials_line(hf) << "\n";
  for (const std::string& line : hf.left_out(params)) notes << line << "\n";
  write_imported_checkpoint(out_checkpoint, hf.model, *hf.file, params, hf.entry);
}

std::string hf_bert_config_json(const ModelConfig& m) {
  const bool mlm = m.get("task") == 0;
  nlohmann::ordered_json j;
  j["architectures"] = {mlm ? "BertForMaskedLM" : "BertForSequenceClassification"};
  j["attention_probs_dropout_prob"] = 0.1;
  j["classifier_dropout"] = nullptr;
  j["hidden_act"] = "gelu";
  j["hidden_dropout_prob"] = 0.1;
  j["hidden_size"] = m.get("n_embd");
  if (!mlm) j["id2label"] = {{"0", "LABEL_0"}, {"1", "LABEL_1"}};
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = 4 * m.get("n_embd");
  if (!mlm) j["label2id"] = {{"LABEL_0", 0}, {"LABEL_1", 1}};
  j["layer_norm_eps"] = kBertLnEps;
  j["max_position_embeddings"] = m.get("block_size");
  j["model_type"] = "bert";
  j["num_attention_heads"] = m.get("n_head");
  j["num_hidden_layers"] = m.get("n_layer");
  j["pad_token_id"] = m.get("pad_id");
  j["position_embedding_type"] = "absolute";
  for (const BertSpecial& t : kBertSpecials)
    if (std::string(t.config_key) != "pad_token_id") j[t.config_key] = m.get(t.model_key);
  j["type_vocab_size"] = m.get("type_vocab");
  j["use_cache"] = true;
  j["vocab_size"] = m.get("vocab_size");
  return j.dump(2) + "\n";
}

void export_hf_bert(const std::string& checkpoint, const std::string& out_dir) {
  const CheckpointRecord rec = read_checkpoint_record(checkpoint);
  std::vector<ParamInfo> params = whole_params(rec.model);
  // The safetensors library's order for one dtype: by name (HF's).
  std::sort(params.begin(), params.end(), [](const ParamInfo& a, const ParamInfo& b) {
    return hf_name(a.name) < hf_name(b.name);
  });
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw UsageError(fmt::format("cannot create {}: {}", out_dir, ec.message()));
  std::vector<io::SafetensorsTensorSpec> specs;
  for (const ParamInfo& p : params) specs.push_back({hf_name(p.name), p.global_shape});
  io::SafetensorsWriter w((fs::path(out_dir) / "model.safetensors").string(), specs,
                          {{"format", "pt"}});
  std::vector<float> buf;
  for (const ParamInfo& p : params) {
    const int64_t n = int64_t(p.global_numel());
    buf.resize(size_t(n));
    io::read_checkpoint_tensors(
        checkpoint, {io::TensorPiece{"params/" + p.name, p.global_shape,
                                     io::flat_range_blocks(p.global_shape, 0, n), buf.data()}});
    w.write(buf.data(), buf.size());
  }
  w.finish();
  const fs::path cfg = fs::path(out_dir) / "config.json";
  std::ofstream c(cfg);
  c << hf_bert_config_json(rec.model);
  if (!c.flush()) throw UsageError(fmt::format("cannot write {}", cfg.string()));
}

std::vector<std::string> load_hf_bert_parameters(const std::string& source,
                                                 const ModelConfig& model,
                                                 const std::vector<io::TensorPiece>& pieces) {
  const HfBert hf(source);
  if (std::string e = pretrained_mismatch(source, hf.model, model); !e.empty()) throw UsageError(e);
  hf.file->require_complete();
  if (hf.has_head) hf.check_tied();
  std::vector<std::string> fresh;
  for (const ParamInfo& p : whole_params(model)) {
    if (hf.entry.count(p.name))
      hf.check(p);
    else if (is_head(p.name))
      fresh.push_back(p.name);
    else
      hf.check(p);  // a missing encoder tensor: the error
  }
  for (const io::TensorPiece& t : pieces) {
    const std::string name = t.dataset.substr(t.dataset.find('/') + 1);
    MPITRON_REQUIRE(t.dataset.rfind("params/", 0) == 0, t.dataset + ": not a bert parameter");
    const auto it = hf.entry.find(name);
    if (it == hf.entry.end()) continue;  // a fresh head parameter
    copy_hf_blocks(*hf.file, *it->second, false, t.global_shape, t.blocks, t.data);
    hf.file->release(*it->second);
  }
  return fresh;
}

}  // namespace mpitron
