// mpitron eval: a checkpoint's loss on a token (or image) batch, with logits and gradients for
// the oracles (--dump), or its validation loss, accuracy and confusion matrix on data. The loop
// over validation batches is evaluate_split (src/train/eval_data.hpp).
#include <fmt/format.h>
#include <mpi.h>

#include <filesystem>
#include <variant>

#include "base/check.hpp"
#include "base/gemm.hpp"
#include "io/arrays.hpp"
#include "io/checkpoint.hpp"
#include "src/cli/cli.hpp"
#include "src/model/family.hpp"
#include "src/task/translation.hpp"
#include "src/train/batch_source.hpp"
#include "src/train/eval_data.hpp"
#include "src/train/grad_sync.hpp"

namespace mpitron::cli {

namespace {

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

// Question answering: every validation question answered greedily (KV cache), scored by exact
// match beside always giving the most common training answer.
void print_exact_match(const std::string& ckpt, const CheckpointRecord& rec,
                       const std::string& tokenizer, const BatchSource& data) {
  const PairCodec codec = checkpoint_pair_codec(ckpt, rec, tokenizer);
  TranslateOptions o;
  o.window = rec.seq_len > 0 ? int(rec.seq_len) : int(rec.model.get("block_size"));
  DeviceAllocator alloc{"cpu"};
  std::unique_ptr<Model> model = load_for_inference(ckpt, rec, 1, 0, alloc);
  auto* gpt = dynamic_cast<GptModel*>(model.get());
  MPITRON_REQUIRE(gpt != nullptr, "a question-answering checkpoint builds a GPT");
  TranslateStats st;
  const std::vector<std::string> answers =
      translate_lines(*gpt, codec, data.pairs.val_sources, o, &st);
  const ExactMatch m = exact_match(answers, data.pairs.val_references, data.pairs.train_answers);
  fmt::print("exact_match {:.4f} ({} of {} validation questions, greedy)\n", m.rate(), m.correct,
             m.total);
  fmt::print("always answering \"{}\" (the most common training answer) would score {:.4f}\n",
             m.majority, m.majority_rate());
}

}  // namespace

// Validation loss (and accuracy and confusion matrix for classifiers) of a checkpoint on data.
// Unset options default to what the trainer's validation used, from the checkpoint: its data,
// seed, global batch, sequence length and number of batches.
int cmd_eval(const EvalArgs& a) {
  const int cores = cpu::usable_cores();
  cpu::set_compute_threads(cpu::default_compute_threads(cores, cores, 1).threads);
  if (!a.tokens.empty()) return eval_token_batch(a.ckpt, a.tokens, a.dump);
  const std::string& ckpt = a.ckpt;
  const std::string& tokenizer_dir = a.tokenizer;
  const std::optional<int> batches_opt = a.batches, batch_size_opt = a.batch_size,
                           seq_len_opt = a.seq_len;
  const std::optional<uint64_t> seed_opt = a.seed;
  const bool whole_split = a.whole_split;
  std::string data_path = a.data;
  const CheckpointRecord rec = read_checkpoint_record(ckpt);
  const ModelFamily& family = model_family(rec.model.type);
  if (data_path.empty())
    data_path = !rec.data_path.empty() && std::filesystem::exists(rec.data_path)
                    ? rec.data_path
                    : default_data(family, rec.model);
  if (whole_split && (!is_labelled_data(family.data(rec.model)) || batches_opt))
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
  if (kind == DataKind::verses || kind == DataKind::pairs) {
    verse_tokenizer = tokenizer_dir;
    if (auto t = rec.data.find("tokenizer"); verse_tokenizer.empty() && t != rec.data.end())
      if (const auto* dir = std::get_if<std::string>(&t->second))
        verse_tokenizer = kind == DataKind::pairs ? kept_beside(ckpt, *dir) : *dir;
  }
  std::string objective = "next_token";
  if (auto o = rec.settings.find("train.objective"); o != rec.settings.end())
    if (const auto* v = std::get_if<std::string>(&o->second)) objective = *v;
  int span_context_words = 0;  // absent in checkpoints older than the key
  if (auto o = rec.settings.find("train.span_context_words"); o != rec.settings.end())
    if (const auto* v = std::get_if<int64_t>(&o->second)) span_context_words = int(*v);
  std::string span_loss = "all";
  if (auto o = rec.settings.find("train.span_loss"); o != rec.settings.end())
    if (const auto* v = std::get_if<std::string>(&o->second)) span_loss = *v;
  double span_drop_words = 0;
  if (auto o = rec.settings.find("train.span_drop_words"); o != rec.settings.end())
    if (const auto* v = std::get_if<double>(&o->second)) span_drop_words = *v;
  BatchSource data = BatchSource::load(rec.model, data_path, T, batch_size, alloc, verse_tokenizer,
                                       objective, span_context_words, span_loss, span_drop_words);
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
  const EvalTotals totals =
      evaluate_split(*model, data, K, EvalPlan{batches, batch_size, T, seed, whole_split});
  batches = totals.batches;
  const double sum = totals.loss_sum;
  const int64_t samples = totals.samples, correct = totals.correct, images = totals.split_samples;
  const std::vector<int64_t>& confusion = totals.confusion;  // (label, prediction)
  if (text || kind == DataKind::pairs) {
    fmt::print(
        "val_loss {:.6f} ({} batches of {}x{} from {}, seed {}{})\n",
        sum / double(totals.loss_terms), batches, batch_size, T, data_path, seed,
        kind == DataKind::pairs ? fmt::format(", over their {} target tokens", totals.loss_terms)
        : data.span_corruption  ? fmt::format(", span corruption over {} tokens", totals.loss_terms)
                                : "");
    if (kind == DataKind::pairs && data.pairs.qa) print_exact_match(ckpt, rec, a.tokenizer, data);
    return 0;
  }
  const std::string drawn =
      whole_split ? fmt::format("every one of the {} validation {}", images,
                                kind == DataKind::verses ? "verses" : "images")
      : sequences ? fmt::format("{} batches of {}x{}, seed {}", batches, batch_size, T, seed)
                  : fmt::format("{} batches of {}, seed {}", batches, batch_size, seed);
  // The majority class of these samples: what always predicting it would score.
  int majority = 0;
  std::vector<int64_t> per_label(size_t(K), 0);
  for (int l = 0; l < K; ++l) {
    for (int k = 0; k < K; ++k) per_label[size_t(l)] += confusion[size_t(l) * K + k];
    if (per_label[size_t(l)] > per_label[size_t(majority)]) majority = l;
  }
  const std::vector<std::string> names = class_names(rec.model, data_path, K);
  fmt::print("val_loss {:.6f} ({} from {})\nval_accuracy {:.4f} over {} samples\n",
             sum / double(samples), drawn, data_path, double(correct) / double(samples), samples);
  fmt::print("majority class {} ({}) alone would score {:.4f}\n", majority, names[size_t(majority)],
             double(per_label[size_t(majority)]) / double(samples));
  fmt::print("confusion matrix (rows: label, columns: prediction)\n     ");
  for (int k = 0; k < K; ++k) fmt::print("{:>6}", k);
  fmt::print("\n");
  for (int l = 0; l < K; ++l) {
    fmt::print("{:>5}", l);
    for (int k = 0; k < K; ++k) fmt::print("{:>6}", confusion[size_t(l) * K + k]);
    fmt::print("\n");
  }
  fmt::print("classes:");
  for (int k = 0; k < K; ++k) fmt::print("{} {} {}", k == 0 ? "" : ",", k, names[size_t(k)]);
  fmt::print("\n");
  return 0;
}

}  // namespace mpitron::cli
