// Hugging Face GPT-2 <-> mpitron GPT: names ("transformer." prefix optional), Conv1D weights
// transposed to mpitron's (out, in), the tied lm_head, config.json checked against what mpitron
// computes. Tensors move one at a time out of the memory-mapped safetensors file. A config.json
// with model_type "bert" is dispatched to src/train/pretrained_bert.cpp.
#include "src/train/pretrained.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "base/check.hpp"
#include "io/bpe_tokenizer.hpp"
#include "io/checkpoint.hpp"
#include "io/h5.hpp"
#include "io/safetensors.hpp"
#include "src/model/family.hpp"
#include "src/train/model_checkpoint.hpp"
#include "src/train/pretrained_bert.hpp"

namespace mpitron {

namespace fs = std::filesystem;

namespace {

constexpr double kMpitronLnEps = 1e-5;  // layers/cpu/layernorm.cpp

// HF tensors that are not parameters of GPT2LMHeadModel: the causal-mask buffers older
// transformers versions saved ("h.<i>.attn.bias", "h.<i>.attn.masked_bias").
bool is_mask_buffer(const std::string& n) {
  auto ends = [&](const std::string& s) {
    return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
  };
  return n.rfind("h.", 0) == 0 && (ends(".attn.bias") || ends(".attn.masked_bias"));
}

std::string strip_prefix(const std::string& n) {
  static const std::string p = "transformer.";
  return n.rfind(p, 0) == 0 ? n.substr(p.size()) : n;
}

// The HF shape of an mpitron tensor.
std::vector<int64_t> hf_shape(const std::string& name, std::vector<int64_t> shape) {
  if (hf_transposed(name)) std::swap(shape[0], shape[1]);
  return shape;
}

std::string shape_text(const std::vector<int64_t>& s) {
  return io::shape_string(s);
}

// An opened HF model: config, mapped weights, and for every mpitron parameter its HF entry.
struct HfModel {
  HfSource src;
  ModelConfig model;
  std::unique_ptr<io::SafetensorsFile> file;
  std::vector<ParamInfo> params;
  std::map<std::string, const io::SafetensorsEntry*> entry;  // mpitron name -> HF tensor
  const io::SafetensorsEntry* lm_head = nullptr;
  std::vector<const io::SafetensorsEntry*> skipped;  // mask buffers

  explicit HfModel(const std::string& from) : src(resolve_hf_source(from)) {
    model = read_hf_gpt2_config(src.config);
    file = std::make_unique<io::SafetensorsFile>(src.weights);
    params = whole_params(model);
    std::set<std::string> wanted;
    for (const ParamInfo& p : params) wanted.insert(p.name);
    for (const io::SafetensorsEntry& e : file->tensors()) {
      const std::string n = strip_prefix(e.name);
      if (n == "lm_head.weight") {
        lm_head = &e;
        continue;
      }
      if (is_mask_buffer(n)) {
        skipped.push_back(&e);
        continue;
      }
      if (!wanted.count(n))
        throw UsageError(fmt::format(
            "{}: unexpected tensor '{}' (not a parameter of a GPT-2 of this config.json: "
            "n_layer {})",
            src.weights, e.name, model.get("n_layer")));
      if (entry.count(n))
        throw UsageError(
            fmt::format("{}: tensor '{}' is there twice (with and without the "
                        "'transformer.' prefix)",
                        src.weights, n));
      entry[n] = &e;
    }
    for (const ParamInfo& p : params) {
      auto it = entry.find(p.name);
      if (it == entry.end())
        throw UsageError(
            fmt::format("{}: missing tensor '{}' (or 'transformer.{}'), needed by the "
                        "GPT-2 of {}",
                        src.weights, p.name, p.name, src.config));
      const io::SafetensorsEntry& e = *it->second;
      const std::vector<int64_t> want = hf_shape(p.name, p.global_shape);
      if (e.shape != want)
        throw UsageError(
            fmt::format("{}: tensor '{}' has shape {}, the GPT-2 of {} needs {}{}", src.weights,
                        e.name, shape_text(e.shape), src.config, shape_text(want),
                        hf_transposed(p.name) ? " (Conv1D weights are stored (in, out))" : ""));
      if (!io::safetensors_dtype_readable(e.dtype))
        throw UsageError(fmt::format("{}: tensor '{}' has dtype {}; F32, F16, BF16 or F64 needed",
                                     src.weights, e.name, e.dtype));
    }
    if (lm_head) {
      const io::SafetensorsEntry& w = *entry.at("wte.weight");
      if (lm_head->shape != w.shape)
        throw UsageError(
            fmt::format("{}: lm_head.weight has shape {}, wte.weight {}: mpitron's "
                        "GPT ties the LM head to wte",
                        src.weights, shape_text(lm_head->shape), shape_text(w.shape)));
    }
  }

  // UsageError unless the lm_head (when present) equals wte element for element.
  void check_tied_head() const {
    if (!lm_head) return;
    if (!hf_same_values(*file, *entry.at("wte.weight"), *lm_head))
      throw UsageError(fmt::format(
          "{}: lm_head.weight differs from wte.weight: mpitron's GPT ties the LM head to the "
          "token embedding (an untied head cannot be imported)",
          src.weights));
    file->release(*lm_head);
  }

  // Copies the blocks of mpitron tensor `name` out of the HF tensor (copy_hf_blocks).
  void copy_blocks(const std::string& name, const std::vector<int64_t>& shape,
                   const std::vector<io::Block>& blocks, float* out) const {
    copy_hf_blocks(*file, *entry.at(name), hf_transposed(name), shape, blocks, out);
  }
};

bool is_mpitron_checkpoint(const std::string& source) {
  return fs::is_regular_file(source) && io::has_hdf5_signature(source);
}

// True for a HF source whose config.json says model_type "bert" (UsageError for an unsupported
// model_type, a missing config.json or weights file).
bool is_hf_bert(const std::string& source) {
  return hf_model_type(resolve_hf_source(source).config) == "bert";
}

}  // namespace

std::vector<ParamInfo> whole_params(const ModelConfig& m) {
  const ModelFamily& f = model_family(m.type);
  MPITRON_REQUIRE(f.registry != nullptr, "the " + m.type + " family has a registry");
  return f.registry(m, RegistrySlice{}).params();
}

void copy_hf_blocks(const io::SafetensorsFile& file, const io::SafetensorsEntry& e, bool transposed,
                    const std::vector<int64_t>& shape, const std::vector<io::Block>& blocks,
                    float* out) {
  MPITRON_REQUIRE(shape.size() == 1 || shape.size() == 2, e.name + ": 1-D or 2-D expected");
  for (const io::Block& b : blocks) {
    if (shape.size() == 1) {
      file.read(e, b.start[0], b.count[0], 1, out);
      out += b.count[0];
      continue;
    }
    const int64_t R = shape[0], K = shape[1];
    if (transposed) {
      // mpitron (r, c) is HF (c, r): read tiles of contiguous HF rows, transpose in memory.
      const int64_t r0 = b.start[0], nr = b.count[0], c0 = b.start[1], nc = b.count[1];
      constexpr int64_t kTile = 64;
      std::vector<float> tile(size_t(kTile * nr));
      for (int64_t c = c0; c < c0 + nc; c += kTile) {
        const int64_t w = std::min(kTile, c0 + nc - c);
        for (int64_t i = 0; i < w; ++i) file.read(e, (c + i) * R + r0, nr, 1, tile.data() + i * nr);
        for (int64_t r = 0; r < nr; ++r)
          for (int64_t i = 0; i < w; ++i) out[r * nc + (c - c0) + i] = tile[size_t(i * nr + r)];
      }
      out += nr * nc;
      continue;
    }
    for (int64_t r = b.start[0]; r < b.start[0] + b.count[0]; ++r) {
      file.read(e, r * K + b.start[1], b.count[1], 1, out);
      out += b.count[1];
    }
  }
}

bool hf_same_values(const io::SafetensorsFile& file, const io::SafetensorsEntry& a,
                    const io::SafetensorsEntry& b) {
  if (a.shape != b.shape) return false;
  const int64_t n = a.numel(), chunk = 1 << 20;
  std::vector<float> x(size_t(std::min(n, chunk))), y(x.size());
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t k = std::min(chunk, n - i);
    file.read(a, i, k, 1, x.data());
    file.read(b, i, k, 1, y.data());
    // Compared pages are not kept resident (a later read maps them again from the page cache).
    file.release(a, i, k);
    file.release(b, i, k);
    if (std::memcmp(x.data(), y.data(), size_t(k) * sizeof(float)) != 0) return false;
  }
  return true;
}

double json_number(const nlohmann::json& j, const std::string& key, const std::string& path) {
  if (!j[key].is_number()) throw UsageError(fmt::format("{}: '{}' is not a number", path, key));
  return j[key].get<double>();
}

nlohmann::json read_hf_config_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError(fmt::format("cannot read {}", path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw UsageError(fmt::format("{} is not JSON ({})", path, e.what()));
  }
  if (!j.is_object()) throw UsageError(fmt::format("{} is not a JSON object", path));
  return j;
}

std::string hf_model_type(const std::string& path) {
  const nlohmann::json j = read_hf_config_json(path);
  // Configs older than the key: BERT's have num_hidden_layers, GPT-2's n_layer.
  if (!j.contains("model_type")) return j.contains("num_hidden_layers") ? "bert" : "gpt2";
  const std::string type = j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  if (type == "gpt2" || type == "bert") return type;
  throw UsageError(fmt::format(
      "{}: model_type {} is not supported: mpitron imports \"gpt2\" (GPT2LMHeadModel) and "
      "\"bert\" (BertForMaskedLM, BertForPreTraining, BertForSequenceClassification)",
      path, j["model_type"].dump()));
}

std::string pretrained_mismatch(const std::string& source, const ModelConfig& have,
                                const ModelConfig& want) {
  if (have.type != want.type)
    return fmt::format("--init-from {} holds a '{}' model, this run's config a '{}' model", source,
                       have.type, want.type);
  std::vector<std::string> order{"vocab_size", "n_layer", "n_head", "n_embd", "block_size"};
  for (const auto& [k, v] : want.dims)
    if (std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
  const ModelFamily& family = model_family(want.type);
  for (const std::string& k : order) {
    if (!want.dims.count(k)) continue;
    const auto key = std::find_if(family.keys.begin(), family.keys.end(),
                                  [&](const ModelKey& mk) { return k == mk.name; });
    if (key != family.keys.end() && key->selects_head) continue;
    const int64_t a = have.dims.count(k) ? have.dims.at(k) : -1, b = want.dims.at(k);
    if (a != b)
      return fmt::format(
          "--init-from {}: model.{} is {} there, {} in this run's config (the [model] table must "
          "match the pretrained model{})",
          source, k, a, b,
          k == "vocab_size" ? "; its vocabulary needs its tokenizer's tokens as --data" : "");
  }
  return "";
}

bool hf_transposed(const std::string& n) {
  auto ends = [&](const std::string& s) {
    return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
  };
  return ends("attn.c_attn.weight") || ends("attn.c_proj.weight") || ends("mlp.c_fc.weight") ||
         ends("mlp.c_proj.weight");
}

HfSource resolve_hf_source(const std::string& from) {
  std::error_code ec;
  if (fs::is_directory(from, ec)) {
    const fs::path dir(from);
    if (fs::exists(dir / "model.safetensors.index.json") && !fs::exists(dir / "model.safetensors"))
      throw UsageError(fmt::format(
          "{} holds a sharded model (model.safetensors.index.json): mpitron imports one "
          "model.safetensors file",
          from));
    HfSource s{(dir / "model.safetensors").string(), (dir / "config.json").string()};
    if (!fs::is_regular_file(s.weights))
      throw UsageError(
          fmt::format("{} has no model.safetensors (download it with config.json "
                      "from the model's page on huggingface.co)",
                      from));
    if (!fs::is_regular_file(s.config))
      throw UsageError(fmt::format("{} has no config.json beside model.safetensors", from));
    return s;
  }
  if (!fs::exists(from, ec))
    throw UsageError(
        fmt::format("{} does not exist (a folder with model.safetensors and "
                    "config.json, or a .safetensors file)",
                    from));
  const fs::path cfg = fs::path(from).parent_path() / "config.json";
  if (!fs::is_regular_file(cfg))
    throw UsageError(
        fmt::format("{}: no config.json beside it (the model's shape comes from there)", from));
  return {from, cfg.string()};
}

ModelConfig read_hf_gpt2_config(const std::string& path) {
  const nlohmann::json j = read_hf_config_json(path);
  auto str = [&](const char* k) {
    return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string();
  };
  if (j.contains("model_type") && str("model_type") != "gpt2")
    throw UsageError(fmt::format("{}: model_type '{}' is not gpt2", path, j["model_type"].dump()));
  if (j.contains("activation_function") && str("activation_function") != "gelu_new" &&
      str("activation_function") != "gelu_pytorch_tanh")
    throw UsageError(fmt::format(
        "{}: activation_function {} is not supported: mpitron's GPT uses the tanh GELU (gelu_new)",
        path, j["activation_function"].dump()));
  if (j.contains("layer_norm_epsilon")) {
    const double eps = json_number(j, "layer_norm_epsilon", path);
    if (std::abs(eps - kMpitronLnEps) > 1e-12)
      throw UsageError(
          fmt::format("{}: layer_norm_epsilon {} differs from mpitron's LayerNorm epsilon {}", path,
                      eps, kMpitronLnEps));
  }
  auto flag = [&](const char* k, bool refused_value, const char* why) {
    if (j.contains(k) && j[k].is_boolean() && j[k].get<bool>() == refused_value)
      throw UsageError(fmt::format("{}: {} = {} is not supported ({})", path, k,
                                   refused_value ? "true" : "false", why));
  };
  flag("scale_attn_weights", false, "mpitron scales attention by 1/sqrt(head size)");
  flag("scale_attn_by_inverse_layer_idx", true, "mpitron's attention has no per-layer scale");
  flag("add_cross_attention", true, "a decoder-only GPT-2 is needed");
  flag("tie_word_embeddings", false, "mpitron's LM head is tied to wte");
  ModelConfig m = default_model_config("gpt");
  auto integer = [&](const char* k) -> int64_t {
    if (!j.contains(k))
      throw UsageError(fmt::format("{}: '{}' is missing (a GPT-2 config.json has it)", path, k));
    if (!j[k].is_number_integer() || j[k].get<int64_t>() <= 0)
      throw UsageError(fmt::format("{}: '{}' is not a positive integer", path, k));
    return j[k].get<int64_t>();
  };
  m.dims["n_layer"] = integer("n_layer");
  m.dims["n_head"] = integer("n_head");
  m.dims["n_embd"] = integer("n_embd");
  m.dims["block_size"] = integer("n_positions");
  m.dims["vocab_size"] = integer("vocab_size");
  if (m.dims["n_embd"] % m.dims["n_head"] != 0)
    throw UsageError(fmt::format("{}: n_embd {} is not divisible by n_head {}", path,
                                 m.dims["n_embd"], m.dims["n_head"]));
  if (j.contains("n_inner") && !j["n_inner"].is_null() &&
      !(j["n_inner"].is_number_integer() && j["n_inner"].get<int64_t>() == 4 * m.dims["n_embd"]))
    throw UsageError(fmt::format("{}: n_inner {} is not supported: mpitron's MLP is 4 * n_embd",
                                 path, j["n_inner"].dump()));
  return m;
}

std::string hf_gpt2_config_json(const ModelConfig& m) {
  nlohmann::ordered_json j;
  j["activation_function"] = "gelu_new";
  j["architectures"] = {"GPT2LMHeadModel"};
  j["attn_pdrop"] = 0.1;
  j["embd_pdrop"] = 0.1;
  if (m.get("vocab_size") == 50257) {
    j["bos_token_id"] = 50256;
    j["eos_token_id"] = 50256;
  }
  j["initializer_range"] = 0.02;
  j["layer_norm_epsilon"] = kMpitronLnEps;
  j["model_type"] = "gpt2";
  j["n_ctx"] = m.get("block_size");
  j["n_embd"] = m.get("n_embd");
  j["n_head"] = m.get("n_head");
  j["n_inner"] = nullptr;
  j["n_layer"] = m.get("n_layer");
  j["n_positions"] = m.get("block_size");
  j["resid_pdrop"] = 0.1;
  j["scale_attn_weights"] = true;
  j["tie_word_embeddings"] = true;
  j["vocab_size"] = m.get("vocab_size");
  return j.dump(2) + "\n";
}

void print_import_plan(const std::string& from, std::ostream& out) {
  if (is_hf_bert(from)) return print_bert_import_plan(from, out);
  const HfModel hf(from);
  const io::SafetensorsFile& f = *hf.file;
  out << fmt::format("{}: {} tensors, header {} bytes, data {} bytes{}\n", f.path(),
                     f.tensors().size(), f.header_bytes(), f.data_bytes_needed(),
                     f.data_bytes_present() < f.data_bytes_needed()
                         ? fmt::format(" (TRUNCATED: the file holds {})", f.data_bytes_present())
                         : "");
  out << fmt::format("config {}: n_layer {} n_head {} n_embd {} block_size {} vocab_size {}\n",
                     hf.src.config, hf.model.get("n_layer"), hf.model.get("n_head"),
                     hf.model.get("n_embd"), hf.model.get("block_size"),
                     hf.model.get("vocab_size"));
  int64_t elements = 0;
  for (const ParamInfo& p : hf.params) {
    const io::SafetensorsEntry& e = *hf.entry.at(p.name);
    out << fmt::format("  {:<44} {:<5} {:<14} {:>12} bytes -> {} {}{}\n", e.name, e.dtype,
                       shape_text(e.shape), e.bytes(), p.name, shape_text(p.global_shape),
                       hf_transposed(p.name) ? " (transposed)" : "");
    elements += int64_t(p.global_numel());
  }
  if (hf.lm_head)
    out << fmt::format("  {:<44} tied: must equal wte.weight (checked on import)\n",
                       hf.lm_head->name);
  if (!hf.skipped.empty())
    out << fmt::format("  {} causal-mask buffers (h.<i>.attn.bias) skipped\n", hf.skipped.size());
  out << fmt::format("total: {} parameters, {} bytes as float32 in the checkpoint\n", elements,
                     elements * 4);
}

void write_imported_checkpoint(const std::string& out_checkpoint, const ModelConfig& model,
                               const io::SafetensorsFile& file,
                               const std::vector<ParamInfo>& params,
                               const std::map<std::string, const io::SafetensorsEntry*>& entry,
                               bool (*transposed)(const std::string&)) {
  // Streamed (io::TensorPiece::fill): each chunk is read (converted, transposed) out of the mapped
  // file just before it is written, then the mapped pages released, so the resident set holds
  // about one chunk and its source pages beyond the program, not the weights.
  std::vector<io::TensorPiece> pieces;
  for (const ParamInfo& p : params) {
    const io::SafetensorsEntry* e = entry.at(p.name);
    const bool tr = transposed && transposed(p.name);
    const int64_t n = int64_t(p.global_numel());
    io::TensorPiece t{"params/" + p.name, p.global_shape,
                      io::flat_range_blocks(p.global_shape, 0, n), nullptr};
    t.fill = [&file, e, tr, shape = p.global_shape](int64_t begin, int64_t end, float* out) {
      if (tr)
        copy_hf_blocks(file, *e, true, shape, io::flat_range_blocks(shape, begin, end), out);
      else
        file.read(*e, begin, end - begin, 1, out);
      // All, not the slice's: reads map whole large folios, pages of neighbours released before.
      file.release_all();
    };
    pieces.push_back(std::move(t));
  }
  CheckpointRecord r;
  r.model = model;
  r.settings = {{"config", std::string("imported")}};
  io::Attributes root = checkpoint_root_attributes(r);
  root["imported_from"] = file.path();
  // Tokenizer files beside the weights (Hugging Face's layout): recorded, so that generate and
  // eval need no --tokenizer.
  const fs::path folder = fs::absolute(fs::path(file.path())).parent_path();
  if (io::has_tokenizer_files(folder.string()) || fs::is_regular_file(folder / "vocab.txt"))
    root["tokenizer"] = folder.lexically_normal().string();
  io::write_checkpoint(out_checkpoint, root, checkpoint_groups(r), pieces, MPI_COMM_SELF);
}

void import_hf(const std::string& from, const std::string& out_checkpoint) {
  if (is_hf_bert(from)) return import_hf_bert(from, out_checkpoint, std::cout);
  const HfModel hf(from);
  hf.file->require_complete();
  hf.check_tied_head();
  write_imported_checkpoint(out_checkpoint, hf.model, *hf.file, hf.params, hf.entry, hf_transposed);
}

void export_hf(const std::string& checkpoint, const std::string& out_dir) {
  const CheckpointRecord rec = read_checkpoint_record(checkpoint);
  if (rec.model.type == "bert") return export_hf_bert(checkpoint, out_dir);
  if (rec.model.type != "gpt")
    throw UsageError(fmt::format(
        "{} holds a '{}' model; only a GPT (as GPT-2) or a bert (as BERT) exports to Hugging Face",
        checkpoint, rec.model.type));
  std::vector<ParamInfo> params = whole_params(rec.model);
  std::sort(params.begin(), params.end(),
            [](const ParamInfo& a, const ParamInfo& b) { return a.name < b.name; });
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw UsageError(fmt::format("cannot create {}: {}", out_dir, ec.message()));
  std::vector<io::SafetensorsTensorSpec> specs;
  for (const ParamInfo& p : params) specs.push_back({p.name, hf_shape(p.name, p.global_shape)});
  io::SafetensorsWriter w((fs::path(out_dir) / "model.safetensors").string(), specs,
                          {{"format", "pt"}});
  std::vector<float> buf, tr;
  for (const ParamInfo& p : params) {
    const int64_t n = int64_t(p.global_numel());
    buf.resize(size_t(n));
    io::read_checkpoint_tensors(
        checkpoint, {io::TensorPiece{"params/" + p.name, p.global_shape,
                                     io::flat_range_blocks(p.global_shape, 0, n), buf.data()}});
    if (hf_transposed(p.name)) {
      const int64_t R = p.global_shape[0], K = p.global_shape[1];
      tr.resize(size_t(n));
      constexpr int64_t kTile = 64;  // blocked transpose (cache-friendly)
      for (int64_t r0 = 0; r0 < R; r0 += kTile)
        for (int64_t c0 = 0; c0 < K; c0 += kTile)
          for (int64_t r = r0; r < std::min(R, r0 + kTile); ++r)
            for (int64_t c = c0; c < std::min(K, c0 + kTile); ++c)
              tr[size_t(c * R + r)] = buf[size_t(r * K + c)];
      w.write(tr.data(), tr.size());
    } else {
      w.write(buf.data(), buf.size());
    }
  }
  w.finish();
  const fs::path cfg = fs::path(out_dir) / "config.json";
  std::ofstream c(cfg);
  c << hf_gpt2_config_json(rec.model);
  if (!c.flush()) throw UsageError(fmt::format("cannot write {}", cfg.string()));
}

ModelConfig pretrained_model_config(const std::string& source) {
  if (is_mpitron_checkpoint(source)) return read_checkpoint_record(source).model;
  if (is_hf_bert(source)) return hf_bert_model_config(source);
  return read_hf_gpt2_config(resolve_hf_source(source).config);
}

std::vector<std::string> load_pretrained_parameters(const std::string& source_arg,
                                                    const ModelConfig& model,
                                                    const std::vector<io::TensorPiece>& pieces) {
  // A run folder (checkpoints, no config.json) stands for its latest checkpoint.
  std::string source = source_arg;
  if (std::error_code ec;
      fs::is_directory(source, ec) && !fs::exists(fs::path(source) / "config.json"))
    if (std::string latest = io::latest_checkpoint(source); !latest.empty()) source = latest;
  if (is_mpitron_checkpoint(source)) {
    const CheckpointRecord r = read_checkpoint_record(source);
    if (std::string e = pretrained_mismatch(source, r.model, model); !e.empty())
      throw UsageError(e);
    // Another task's checkpoint (a masked LM for a classifier): its head is not this run's, whose
    // parameters the source lacks keep their initialisation. A shape that differs is an error.
    bool other_head = false;
    for (const ModelKey& k : model_family(model.type).keys)
      other_head |= k.selects_head && r.model.dims.count(k.name) && model.dims.count(k.name) &&
                    r.model.dims.at(k.name) != model.dims.at(k.name);
    std::vector<io::TensorPiece> present;
    std::vector<std::string> fresh;
    const io::CheckpointHeader h = io::read_checkpoint_header(source);
    for (const io::TensorPiece& t : pieces) {
      if (other_head && !h.shapes.count(t.dataset))
        fresh.push_back(t.dataset.substr(t.dataset.find('/') + 1));
      else
        present.push_back(t);
    }
    io::read_checkpoint_tensors(source, present);
    return fresh;
  }
  if (is_hf_bert(source)) return load_hf_bert_parameters(source, model, pieces);
  const ModelConfig have = read_hf_gpt2_config(resolve_hf_source(source).config);
  if (std::string e = pretrained_mismatch(source, have, model); !e.empty()) throw UsageError(e);
  const HfModel hf(source);
  hf.file->require_complete();
  hf.check_tied_head();
  for (const io::TensorPiece& t : pieces) {
    const std::string name = t.dataset.substr(t.dataset.find('/') + 1);
    MPITRON_REQUIRE(t.dataset.rfind("params/", 0) == 0 && hf.entry.count(name),
                    t.dataset + ": not a GPT-2 parameter");
    hf.copy_blocks(name, t.global_shape, t.blocks, t.data);
    hf.file->release(*hf.entry.at(name));
  }
  return {};
}

}  // namespace mpitron
