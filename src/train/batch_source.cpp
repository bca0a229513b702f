#include "src/train/batch_source.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "base/check.hpp"
#include "io/sentencepiece_tokenizer.hpp"
#include "io/span_corruption.hpp"
#include "io/wordpiece_tokenizer.hpp"

namespace mpitron {

BatchSource BatchSource::load(const ModelConfig& model, const std::string& path, int seq_len,
                              int64_t capacity, DeviceAllocator& alloc,
                              const std::string& tokenizer, const std::string& objective,
                              int span_context_words, const std::string& span_loss,
                              double span_drop_words) {
  BatchSource s;
  s.kind = model_family(model.type).data(model);
  s.capacity = capacity;
  const bool spans = objective == "span_corruption" || objective == "name_span_corruption";
  if (objective != "next_token" && !spans)
    throw UsageError(fmt::format(
        "train.objective is \"next_token\", \"span_corruption\" or \"name_span_corruption\", not "
        "\"{}\"",
        objective));
  if (span_context_words < 0 || (span_context_words > 0 && objective != "name_span_corruption"))
    throw UsageError(
        fmt::format("train.span_context_words = {} is a count of words around a name "
                    "span: 0, or more with train.objective = \"name_span_corruption\"",
                    span_context_words));
  if (!(span_drop_words >= 0 && span_drop_words < 1) ||
      (span_drop_words > 0 && span_context_words == 0))
    throw UsageError(fmt::format(
        "train.span_drop_words = {} is the probability a word of a name's window is left out: in "
        "[0, 1), and above 0 only with train.span_context_words > 0",
        span_drop_words));
  if (span_loss != "all" && span_loss != "span")
    throw UsageError(fmt::format(
        "train.span_loss is \"all\" (every position up to [END]) or \"span\" (the span and "
        "[END]), not \"{}\"",
        span_loss));
  if (span_loss == "span" && !spans)
    throw UsageError("train.span_loss = \"span\" is for a span-corruption train.objective");
  if (spans && (!model_family(model.type).generates || s.kind != DataKind::text))
    throw UsageError(fmt::format("train.objective = \"{}\" is for the {} on text (model.task = 0)",
                                 objective, family_types_with(&ModelFamily::generates)));
  if (s.kind == DataKind::text) {
    s.seq_len = seq_len;
    s.text = io::load_text_dataset(path, seq_len);
    s.tokens = Buffer<int32_t>(alloc, size_t(capacity) * (seq_len + 1));
    s.span_corruption = spans;
    s.span_options.names = objective == "name_span_corruption";
    s.span_options.context_words = span_context_words;
    s.span_options.loss_on_span = span_loss == "span";
    s.span_options.drop_words = span_drop_words;
    if (s.span_options.names && s.text.is_tokens())
      throw UsageError(fmt::format(
          "{}: name spans find capitalized words in byte text; a token file has none: use "
          "train.objective = \"span_corruption\"",
          s.text.path));
    if (s.span_corruption) {
      const int64_t need = s.text.vocab_size + 3;
      if (model.get("vocab_size") < need)
        throw UsageError(
            fmt::format("span corruption adds [MASK], [END] and [PAD] to the data's {} tokens: set "
                        "model.vocab_size={} (or more)",
                        s.text.vocab_size, need));
      s.span_train = io::span_documents(s.text, io::Split::train, seq_len);
      s.span_val = io::span_documents(s.text, io::Split::val, seq_len);
      s.spans = Buffer<int32_t>(alloc, size_t(capacity) * 2);
    }
  } else if (s.kind == DataKind::verses) {
    s.seq_len = seq_len;
    if (tokenizer.empty()) {
      s.verses = io::load_verse_dataset(path);
    } else {
      const io::WordPieceTokenizer wp = io::WordPieceTokenizer::load(tokenizer);
      require_vocabulary_special_ids(tokenizer, model, "the verses' WordPiece tokens");
      if (wp.vocab_size() > model.get("vocab_size"))
        throw UsageError(
            fmt::format("the WordPiece vocabulary {} has {} tokens, the model's "
                        "vocab_size is {} (set model.vocab_size={})",
                        tokenizer, wp.vocab_size(), model.get("vocab_size"), wp.vocab_size()));
      s.verses = io::load_verse_dataset(path, &wp);
    }
    s.verse_task = io::VerseTask(model.get("task"));
    s.verse_tokens = {int32_t(model.get("pad_id")), int32_t(model.get("cls_id")),
                      int32_t(model.get("sep_id"))};
    s.tokens = Buffer<int32_t>(alloc, size_t(capacity) * (seq_len + 1));
    s.labels = Buffer<int32_t>(alloc, size_t(capacity));
  } else if (s.kind == DataKind::pairs) {
    s.seq_len = seq_len;
    if (tokenizer.empty()) {
      s.pairs = io::load_pair_dataset(path);
    } else {
      const io::SentencePieceTokenizer spm = io::SentencePieceTokenizer::load(tokenizer);
      s.pairs = io::load_pair_dataset(path, &spm);
    }
    if (s.pairs.vocab_size > model.get("vocab_size"))
      throw UsageError(
          fmt::format("the pairs of {} use {} token ids ({}), the model's vocab_size is {} (set "
                      "model.vocab_size={})",
                      path, s.pairs.vocab_size,
                      s.pairs.tokenizer.empty() ? "bytes, [SEP], [END], [PAD]"
                                                : "SentencePiece " + s.pairs.tokenizer,
                      model.get("vocab_size"), s.pairs.vocab_size));
    s.tokens = Buffer<int32_t>(alloc, size_t(capacity) * (seq_len + 1));
    s.spans = Buffer<int32_t>(alloc, size_t(capacity) * 2);
  } else {
    s.images = io::load_image_dataset(path);
    s.features = Buffer<float>(alloc, size_t(capacity) * s.images.pixels_per_image());
    s.labels = Buffer<int32_t>(alloc, size_t(capacity));
  }
  return s;
}

int BatchSource::batch_seq_len(io::Split split, uint64_t seed, int64_t index,
                               int64_t rows_global) const {
  if (kind != DataKind::pairs || split != io::Split::train || pairs.train_buckets.count() == 0)
    return seq_len;
  return io::pair_batch_seq_len(pairs, split, seed, index, rows_global, seq_len, 8);
}

void BatchSource::fill(io::Split split, uint64_t seed, int64_t index, int64_t first_row,
                       int64_t rows, int row_len) {
  if (row_len == 0) row_len = seq_len;
  MPITRON_REQUIRE(
      row_len == seq_len || (kind == DataKind::pairs && row_len > 0 && row_len < seq_len),
      "rows shorter than seq_len are for pairs only");
  filled_seq_len = row_len;
  if (kind == DataKind::text && span_corruption)
    io::fill_span_batch(text, span_docs(split), split, seed, index, first_row, rows, seq_len,
                        tokens.data(), spans.data(), span_options);
  else if (kind == DataKind::text)
    io::fill_batch(text, split, seed, index, first_row, rows, seq_len, tokens.data());
  else if (kind == DataKind::pairs)
    io::fill_pair_batch(pairs, split, seed, index, first_row, rows, row_len, tokens.data(),
                        spans.data());
  else if (kind == DataKind::verses)
    io::fill_verse_batch(verses, verse_task, verse_tokens, split, seed, index, first_row, rows,
                         seq_len, tokens.data(), labels.data());
  else
    io::fill_image_batch(images, split, seed, index, first_row, rows, features.data(),
                         labels.data());
  if (kind == DataKind::images && augment && split == io::Split::train)
    io::augment_images(features.data(), rows, images.rows, images.cols, 2, seed, index, first_row);
}

SampleView BatchSource::view(int64_t local_row, int rows) const {
  SampleView v;
  v.rows = rows;
  const int row_len = filled_seq_len > 0 ? filled_seq_len : seq_len;
  if (is_sequence_data(kind)) v.tokens = tokens.data() + local_row * (row_len + 1);
  if (row_len != seq_len) v.seq_len = row_len;
  if (kind == DataKind::images)
    v.features = features.data() + local_row * images.pixels_per_image();
  if (is_labelled_data(kind)) v.labels = labels.data() + local_row;
  if (kind == DataKind::pairs || span_corruption) v.loss_spans = spans.data() + local_row * 2;
  return v;
}

int64_t BatchSource::loss_terms(io::Split split, uint64_t seed, int64_t index, int64_t rows_global,
                                int64_t per_sample) const {
  if (kind == DataKind::pairs)
    return io::pair_batch_loss_terms(pairs, split, seed, index, rows_global, seq_len);
  if (span_corruption)
    return io::span_batch_loss_terms(text, span_docs(split), split, seed, index, rows_global,
                                     seq_len, span_options);
  return rows_global * per_sample;
}

uint64_t BatchSource::checksum() const {
  return kind == DataKind::text     ? text.checksum
         : kind == DataKind::verses ? verses.checksum
         : kind == DataKind::pairs  ? pairs.checksum
                                    : images.checksum;
}

io::Attributes BatchSource::attributes() const {
  if (kind == DataKind::text && text.is_tokens())
    return {{"path", text.path},
            {"tokens", int64_t(text.size())},
            {"vocab_size", text.vocab_size},
            {"checksum", int64_t(text.checksum)}};
  if (kind == DataKind::text)
    return {{"path", text.path},
            {"bytes", int64_t(text.bytes.size())},
            {"checksum", int64_t(text.checksum)}};
  if (kind == DataKind::verses)
    return {{"path", verses.path},
            {"verses", verses.verses()},
            {"tokenizer", verses.tokenizer},  // eval encodes the verses alike
            {"checksum", int64_t(verses.checksum)}};
  if (kind == DataKind::pairs)
    return {{"path", pairs.path},
            {"pairs", pairs.train.pairs() + pairs.val.pairs()},
            {"tokenizer", pairs.tokenizer},  // eval and translate encode alike
            {"tokenizer_checksum", int64_t(pairs.tokenizer_checksum)},
            {"checksum", int64_t(pairs.checksum)}};
  return {{"path", images.path},
          {"images", images.count(io::Split::train) + images.count(io::Split::val)},
          {"checksum", int64_t(images.checksum)}};
}

std::string BatchSource::describe() const {
  const std::string window =
      span_options.context_words > 0
          ? fmt::format(", span corruption on names, 0-{} words each side{}",
                        span_options.context_words,
                        span_options.drop_words > 0
                            ? fmt::format(", each left out with p {}", span_options.drop_words)
                            : "")
          : "";
  const char* objective = !window.empty()      ? window.c_str()
                          : span_options.names ? ", span corruption on names"
                          : span_corruption    ? ", span corruption"
                                               : "";
  if (kind == DataKind::text && text.is_tokens())
    return fmt::format("data {} ({} tokens, vocabulary {}{})", text.path, text.size(),
                       text.vocab_size, objective);
  if (kind == DataKind::text)
    return fmt::format("data {} ({} bytes{})", text.path, text.bytes.size(), objective);
  if (kind == DataKind::verses)
    return fmt::format("data {} ({} training and {} validation verses, task {}, {})", verses.path,
                       verses.train.size(), verses.val.size(),
                       verse_task == io::VerseTask::testament ? "testament" : "verse pairs",
                       verses.tokenizer.empty() ? "bytes" : "WordPiece " + verses.tokenizer);
  if (kind == DataKind::pairs)
    return fmt::format("data {} ({} training and {} validation pairs {} -> {}, {})", pairs.path,
                       pairs.train.pairs(), pairs.val.pairs(), pairs.source, pairs.target,
                       pairs.tokenizer.empty() ? "bytes" : "SentencePiece " + pairs.tokenizer);
  return fmt::format("data {} ({} training and {} validation images of {}x{}, {} classes)",
                     images.path, images.count(io::Split::train), images.count(io::Split::val),
                     images.rows, images.cols, images.classes);
}

void require_vocabulary_special_ids(const std::string& tokenizer, const ModelConfig& model,
                                    const std::string& what) {
  if (!model.dims.count("mask_id")) return;
  const io::WordPieceTokenizer wp = io::WordPieceTokenizer::load(tokenizer);
  const std::pair<const char*, int32_t> want[] = {{"pad_id", wp.pad_id()},
                                                  {"unk_id", wp.unk_id()},
                                                  {"cls_id", wp.cls_id()},
                                                  {"sep_id", wp.sep_id()},
                                                  {"mask_id", wp.mask_id()}};
  std::string fix;
  for (const auto& [key, id] : want)
    if (model.get(key) != id) fix += fmt::format(" --set model.{}={}", key, id);
  if (!fix.empty())
    throw UsageError(fmt::format(
        "{} come from the WordPiece vocabulary {}, whose special tokens have other ids than the "
        "config's: add{}",
        what, tokenizer, fix));
}

double BatchSource::majority_share() const {
  std::vector<int64_t> counts;
  auto add = [&](int label) {
    if (label >= int(counts.size())) counts.resize(size_t(label) + 1, 0);
    ++counts[size_t(label)];
  };
  if (kind == DataKind::images) {
    for (int32_t l : images.val_labels) add(l);
  } else if (kind == DataKind::verses) {
    if (verse_task == io::VerseTask::pairs) return 0.5;
    for (int64_t i : verses.val) add(verses.new_testament[size_t(i)]);
  }
  int64_t total = 0, most = 0;
  for (int64_t c : counts) total += c, most = std::max(most, c);
  return total > 0 ? double(most) / double(total) : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace mpitron
