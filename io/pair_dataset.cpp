// Sentence pairs for source -> target training (io/pair_dataset.hpp).
#include "io/pair_dataset.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "base/check.hpp"
#include "base/philox.hpp"
#include "io/sentencepiece_tokenizer.hpp"
#include "io/text_lines.hpp"
#include "io/utf8.hpp"

namespace mpitron::io {

namespace {

namespace fs = std::filesystem;

uint64_t fnv1a_extend(uint64_t h, std::string_view s) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The lines of a split: two aligned files (name.<source>, name.<target>), or one question-answer
// file (name.qa: "question⁇answer" lines). Paths name the lines in errors.
struct SplitLines {
  std::vector<std::string> src, tgt;
  std::string src_path, tgt_path;
};

SplitLines read_split(const std::string& dir, const std::string& name, const std::string& source,
                      const std::string& target, bool qa) {
  SplitLines l;
  if (!qa) {
    l.src_path = fmt::format("{}/{}.{}", dir, name, source);
    l.tgt_path = fmt::format("{}/{}.{}", dir, name, target);
    l.src = read_lines(l.src_path, "source");
    l.tgt = read_lines(l.tgt_path, "target");
    if (l.src.size() != l.tgt.size())
      throw UsageError(
          fmt::format("{} has {} lines but {} has {}: line k of each must be the same "
                      "sentence (io/get_parallel_bible.sh writes aligned files)",
                      l.src_path, l.src.size(), l.tgt_path, l.tgt.size()));
    return l;
  }
  l.src_path = l.tgt_path = fmt::format("{}/{}.qa", dir, name);
  const std::vector<std::string> lines = read_lines(l.src_path, "question-answer");
  for (size_t k = 0; k < lines.size(); ++k) {
    const size_t at = lines[k].find(kQaMark);
    if (at == std::string::npos || lines[k].find(kQaMark, at + 1) != std::string::npos)
      throw UsageError(
          fmt::format("{}:{}: a question-answer line is question{}answer, with one {} (U+2047)",
                      l.src_path, k + 1, kQaMark, kQaMark));
    l.src.push_back(lines[k].substr(0, at));
    l.tgt.push_back(lines[k].substr(at + std::string_view(kQaMark).size()));
  }
  return l;
}

PairSplit load_split(const std::string& dir, const std::string& name, const std::string& source,
                     const std::string& target, bool qa, const SentencePieceTokenizer* spm,
                     uint64_t& checksum, std::vector<std::string>* sources = nullptr,
                     std::vector<std::string>* references = nullptr) {
  const SplitLines l = read_split(dir, name, source, target, qa);
  if (l.src.empty()) throw UsageError(fmt::format("{} has no lines", l.src_path));
  PairSplit s;
  s.begin.push_back(0);
  auto add = [&](const std::string& line, const std::string& path, size_t k) {
    if (line.find_first_not_of(" \t") == std::string::npos)
      throw UsageError(fmt::format("{}:{}: an empty {} (every pair needs a source and a target)",
                                   path, k + 1, qa ? "question or answer" : "line"));
    if (first_invalid_utf8(line) != line.size())
      throw UsageError(fmt::format("{}:{}: not valid UTF-8", path, k + 1));
    checksum = fnv1a_extend(fnv1a_extend(checksum, line), "\n");
    if (spm) {
      const std::vector<int32_t> ids = spm->encode(line);
      s.ids.insert(s.ids.end(), ids.begin(), ids.end());
    } else {
      for (unsigned char c : line) s.ids.push_back(int32_t(c));
    }
    s.begin.push_back(int64_t(s.ids.size()));
  };
  for (size_t k = 0; k < l.src.size(); ++k) {
    add(l.src[k], l.src_path, k);
    add(l.tgt[k], l.tgt_path, k);
  }
  if (sources) *sources = l.src;
  if (references) *references = l.tgt;
  return s;
}

PhiloxStream pair_stream(uint64_t seed, Split split) {
  return {seed, fnv1a64(split == Split::train ? "pairs.train" : "pairs.val")};
}

int64_t pair_length(const PairSplit& s, int64_t k) {
  return s.begin[2 * k + 2] - s.begin[2 * k] + 2;  // source [SEP] target [END]
}

// Sample `sample` of batch `index`: uniform over the split, or over the batch's bucket (the same
// for every sample of the batch: keyed by the index alone, a counter no sample reaches).
int64_t pair_of(const PhiloxStream& rng, const PairSplit& s, const PairBuckets* buckets,
                int64_t index, int64_t sample) {
  const uint64_t draw = rng.block((uint64_t(index) << 32) | uint64_t(sample)).v[0];
  if (!buckets || buckets->count() == 0) return int64_t(draw % uint64_t(s.pairs()));
  const uint64_t b = rng.block((uint64_t(index) << 32) | 0xFFFFFFFFull).v[1] % buckets->count();
  const int64_t lo = buckets->bounds[b], n = buckets->bounds[b + 1] - lo;
  return buckets->order[size_t(lo + int64_t(draw % uint64_t(n)))];
}

const PairBuckets* buckets_of(const PairDataset& data, Split split) {
  return split == Split::train && data.train_buckets.count() > 0 ? &data.train_buckets : nullptr;
}

}  // namespace

PairDataset load_pair_dataset(const std::string& dir, const SentencePieceTokenizer* spm) {
  if (!fs::is_directory(dir))
    throw UsageError(
        fmt::format("pair data {} is not a folder (io/get_parallel_bible.sh DIR "
                    "writes one)",
                    dir));
  PairDataset d;
  d.path = fs::absolute(dir).lexically_normal().string();
  d.qa = fs::exists(fs::path(dir) / "train.qa");
  const std::string name = fs::path(dir).lexically_normal().filename().string().empty()
                               ? fs::path(dir).lexically_normal().parent_path().filename().string()
                               : fs::path(dir).lexically_normal().filename().string();
  const size_t dash = name.find('-');
  if (d.qa) {
    d.source = "question";
    d.target = "answer";
  } else if (dash == std::string::npos || dash == 0 || dash + 1 == name.size() ||
             name.find('-', dash + 1) != std::string::npos) {
    throw UsageError(
        fmt::format("pair data {}: the folder's name must say the direction as "
                    "<source>-<target> (data/es-en: train.es -> train.en), or the folder must "
                    "hold train.qa and valid.qa (question-answer lines)",
                    dir));
  } else {
    d.source = name.substr(0, dash);
    d.target = name.substr(dash + 1);
  }
  uint64_t checksum = 14695981039346656037ull;
  if (spm) {
    d.tokenizer = spm->path();
    d.tokenizer_checksum = spm->checksum();
    d.tokens = {spm->bos_id(), spm->eos_id(), spm->pad_id()};
    d.vocab_size = spm->vocab_size();
    if (d.tokens.sep < 0 || d.tokens.end < 0 || d.tokens.pad < 0)
      throw UsageError(
          fmt::format("SentencePiece model {} has no bos, eos or pad piece (learn "
                      "one with mpitron tokenize --learn N)",
                      spm->path()));
    checksum = fnv1a_extend(checksum, fmt::format("spm {}", spm->checksum()));
  }
  d.train = load_split(dir, "train", d.source, d.target, d.qa, spm, checksum, nullptr,
                       d.qa ? &d.train_answers : nullptr);
  d.val = load_split(dir, "valid", d.source, d.target, d.qa, spm, checksum, &d.val_sources,
                     &d.val_references);
  d.checksum = checksum;
  return d;
}

void pair_row(const int32_t* source, int64_t source_len, const int32_t* target, int64_t target_len,
              const PairTokens& tok, int T, int32_t* row, int32_t* span) {
  MPITRON_REQUIRE(T >= 3, "sequence too short for a pair");
  const int64_t room = int64_t(T) + 1 - 2;  // besides [SEP] and [END]
  int64_t s = source_len, g = target_len;
  bool end = true;
  if (s + g > room) {
    s = std::min(source_len, std::max<int64_t>((T - 1) / 2, room - g));
    g = std::min(target_len, room + 1 - s);  // a cut target gives its [END]'s place to a token
    end = s + g <= room;
  }
  int64_t n = 0;
  for (int64_t k = 0; k < s; ++k) row[n++] = source[k];
  row[n++] = tok.sep;
  for (int64_t k = 0; k < g; ++k) row[n++] = target[k];
  if (end) row[n++] = tok.end;
  const int64_t length = n;
  while (n < int64_t(T) + 1) row[n++] = tok.pad;
  span[0] = int32_t(s);           // position s holds [SEP] and predicts the first target token
  span[1] = int32_t(length - 1);  // the last position predicts the last token of the sequence
}

void fill_pair_batch(const PairDataset& data, Split split, uint64_t seed, int64_t index,
                     int64_t sample_begin, int64_t count, int T, int32_t* out, int32_t* spans) {
  const PairSplit& s = data.split(split);
  const PhiloxStream rng = pair_stream(seed, split);
  for (int64_t r = 0; r < count; ++r) {
    const int64_t k = pair_of(rng, s, buckets_of(data, split), index, sample_begin + r);
    const int32_t* ids = s.ids.data();
    pair_row(ids + s.begin[2 * k], s.begin[2 * k + 1] - s.begin[2 * k], ids + s.begin[2 * k + 1],
             s.begin[2 * k + 2] - s.begin[2 * k + 1], data.tokens, T, out + r * (T + 1),
             spans + 2 * r);
  }
}

int64_t pair_batch_loss_terms(const PairDataset& data, Split split, uint64_t seed, int64_t index,
                              int64_t count, int T) {
  std::vector<int32_t> rows(size_t(count) * (T + 1)), spans(size_t(count) * 2);
  fill_pair_batch(data, split, seed, index, 0, count, T, rows.data(), spans.data());
  int64_t terms = 0;
  for (int64_t r = 0; r < count; ++r) terms += spans[size_t(2 * r + 1)] - spans[size_t(2 * r)];
  return terms;
}

PairBuckets pair_length_buckets(const PairSplit& s, int buckets) {
  if (buckets < 1 || buckets > s.pairs())
    throw UsageError(
        fmt::format("train.length_buckets = {}: it must be from 1 to the {} training "
                    "pairs (0: no buckets)",
                    buckets, s.pairs()));
  PairBuckets b;
  b.order.resize(size_t(s.pairs()));
  for (int64_t k = 0; k < s.pairs(); ++k) b.order[size_t(k)] = k;
  std::stable_sort(b.order.begin(), b.order.end(),
                   [&](int64_t x, int64_t y) { return pair_length(s, x) < pair_length(s, y); });
  for (int i = 0; i <= buckets; ++i) b.bounds.push_back(s.pairs() * i / buckets);
  return b;
}

int pair_batch_seq_len(const PairDataset& data, Split split, uint64_t seed, int64_t index,
                       int64_t count, int T, int multiple) {
  const PairSplit& s = data.split(split);
  const PhiloxStream rng = pair_stream(seed, split);
  int64_t longest = 1;
  for (int64_t r = 0; r < count; ++r)
    longest = std::max(longest, pair_length(s, pair_of(rng, s, buckets_of(data, split), index, r)));
  // A row of n tokens predicts n - 1 of them: positions [0, n - 1).
  const int64_t need = (longest - 1 + multiple - 1) / multiple * multiple;
  return int(std::min<int64_t>(T, need));
}

}  // namespace mpitron::io
