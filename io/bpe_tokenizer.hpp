// GPT-2's byte-level BPE tokenizer: OpenAI's encoder.json + vocab.bpe or Hugging Face's vocab.json
// + merges.txt, GPT-2's pre-tokenizing regex (PCRE2, JIT), merges by rank, a word -> ids cache. It
// gives the ids of the JS reference encoder (npm gpt-3-encoder) on valid UTF-8, and is lossless.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mpitron::io {

// Invalid UTF-8: the JS encoder sees text that was decoded with U+FFFD for each maximal invalid
// subsequence (WHATWG), so it cannot give the bytes back. We split the text into pre-tokens as if
// each such subsequence were U+FFFD (so boundaries are the JS ones) but encode the original bytes:
// decode(encode(x)) == x for every byte string x, and the ids equal the JS ids wherever the
// pre-token holds valid UTF-8.
class BpeTokenizer {
 public:
  // Loads DIR/encoder.json + DIR/vocab.bpe (preferred) or DIR/vocab.json + DIR/merges.txt.
  // UsageError (one line, naming the file) for: a missing folder or files, malformed JSON or a
  // value that is not an integer id, ids that are not exactly 0..N-1 (vocabulary size mismatch), a
  // merges line that is not two symbols, a merge whose symbols or result are not in the
  // vocabulary, a byte without its single-byte token.
  static BpeTokenizer load(const std::string& dir);

  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;
  ~BpeTokenizer();

  // Appends the ids of text to out. Not thread-safe (it fills the word cache).
  void encode(std::string_view text, std::vector<int32_t>& out);
  std::vector<int32_t> encode(std::string_view text);
  // For text read in pieces: encodes text up to its last safe cut (a "\n" followed by a printable
  // ASCII character, where a pre-token always ends), appends the ids and returns the bytes used;
  // the caller keeps the rest and adds the next piece. 0 when text has no such cut; last: all.
  size_t encode_stream(std::string_view text, bool last, std::vector<int32_t>& out);
  // The bytes of the ids (raw bytes, possibly not UTF-8); UsageError for an id outside the vocab.
  std::string decode(std::span<const int32_t> ids) const;
  // The bytes of one id (empty view for an id outside the vocabulary).
  std::string_view token_bytes(int32_t id) const;
  // The pre-tokens of text (the regex's matches), for tests.
  std::vector<std::string> pretokenize(std::string_view text) const;

  int vocab_size() const;
  int merges() const;
  const std::string& dir() const;     // absolute
  const std::string& format() const;  // "encoder.json+vocab.bpe" or "vocab.json+merges.txt"

 private:
  struct Impl;
  explicit BpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Where a folder holds tokenizer files (either pair): for error messages and data steps.
bool has_tokenizer_files(const std::string& dir);

}  // namespace mpitron::io
