// Text data: every byte of a text file is a token (vocabulary 256), or the tokens of a token file
// (`mpitron tokenize`: HDF5 /tokens and the tokenizer's vocabulary size). The first 90% of the
// tokens is the training split, the rest validation. The global batch of step s is a pure
// function of (seed, s): sample i starts at a Philox-drawn offset keyed by (seed, split, s, i),
// so any DP rank or micro-batch can draw exactly its slice of it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mpitron::io {

enum class Split { train, val };

class BpeTokenizer;
class WordPieceTokenizer;
class SentencePieceTokenizer;

struct TextDataset {
  std::string path;
  std::vector<uint8_t> bytes;   // a text file: its bytes are the tokens
  std::vector<int32_t> tokens;  // a token file (bytes then empty)
  int64_t vocab_size = 256;     // tokens are < vocab_size
  std::string tokenizer;        // token file: the tokenizer folder that made it
  size_t train_end = 0;         // [0, train_end) is train, [train_end, size) validation
  uint64_t checksum = 0;  // FNV-1a of the bytes (text) or token_checksum (tokens), for checkpoints

  bool is_tokens() const { return !tokens.empty(); }
  size_t size() const { return is_tokens() ? tokens.size() : bytes.size(); }
  size_t split_begin(Split s) const { return s == Split::train ? 0 : train_end; }
  size_t split_end(Split s) const { return s == Split::train ? train_end : size(); }
};

// Loads a text file, or a token file (recognised by its HDF5 signature); UsageError if it is
// missing, unreadable, too short for seq_len, or a token file that is damaged (no /tokens, no
// vocab_size, a token >= vocab_size, a checksum that differs).
TextDataset load_text_dataset(const std::string& path, int seq_len, double val_fraction = 0.1);

// A token dataset from tokens in memory (e.g. a text file encoded on the fly); UsageError if too
// short for seq_len.
TextDataset make_token_dataset(std::string path, std::vector<int32_t> tokens, int64_t vocab_size,
                               std::string tokenizer, int seq_len, double val_fraction = 0.1);

// ---- token files: HDF5 with /tokens (uint16, or uint32 when the vocabulary exceeds 65536) and
// root attributes format = "mpitron tokens", vocab_size, tokenizer (absolute folder),
// tokenizer_format, source (the text file), source_bytes, tokens, checksum (token_checksum as
// int64 bits).
struct TokenFileInfo {
  int64_t vocab_size = 0;
  std::string tokenizer, tokenizer_format, source;
  int64_t source_bytes = 0, tokens = 0;
  uint64_t checksum = 0;
};

// FNV-1a 64 over the ids, one step per id: h = (h ^ uint32(id)) * 1099511628211.
uint64_t token_checksum(const int32_t* ids, size_t n);
// True for an HDF5 file (what --data treats as a token file).
bool is_token_file(const std::string& path);
// Attributes of a token file; UsageError if it is not one.
TokenFileInfo read_token_file_info(const std::string& path);
// Creates (overwrites) path; UsageError when it cannot be created.
void write_token_file(const std::string& path, const std::vector<int32_t>& tokens,
                      const TokenFileInfo& info);

// Encodes text file `in` with the tokenizer, reading it in pieces, and writes token file `out`
// (.h5). progress(bytes done, bytes total, tokens so far) is called about once a second.
TokenFileInfo tokenize_file(BpeTokenizer& tokenizer, const std::string& in, const std::string& out,
                            const std::function<void(int64_t, int64_t, int64_t)>& progress = {});

// The same with BERT's WordPiece tokenizer (the file is encoded whole: a few MB per second).
TokenFileInfo tokenize_file(const WordPieceTokenizer& tokenizer, const std::string& in,
                            const std::string& out);

// The same with a SentencePiece model, a line at a time, its eos id after each line (format
// "sentencepiece").
TokenFileInfo tokenize_file(const SentencePieceTokenizer& tokenizer, const std::string& in,
                            const std::string& out);

// Writes samples [sample_begin, sample_begin + count) of batch `index` (the step for training,
// the evaluation batch for validation) as rows of seq_len + 1 tokens: out is (count, seq_len+1).
void fill_batch(const TextDataset& data, Split split, uint64_t seed, int64_t index,
                int64_t sample_begin, int64_t count, int seq_len, int32_t* out);

}  // namespace mpitron::io
