#include "io/dataset.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "base/check.hpp"
#include "base/philox.hpp"
#include "io/bpe_tokenizer.hpp"
#include "io/h5.hpp"
#include "io/sentencepiece_tokenizer.hpp"
#include "io/wordpiece_tokenizer.hpp"

namespace mpitron::io {

namespace {

constexpr const char* kTokenFormat = "mpitron tokens";

int64_t int_attr(const Attributes& a, const std::string& path, const char* key) {
  auto it = a.find(key);
  if (it == a.end() || !std::holds_alternative<int64_t>(it->second))
    throw UsageError(fmt::format(
        "token file {} lacks the integer attribute '{}' (write it with mpitron tokenize)", path,
        key));
  return std::get<int64_t>(it->second);
}

std::string string_attr(const Attributes& a, const char* key) {
  auto it = a.find(key);
  return it != a.end() && std::holds_alternative<std::string>(it->second)
             ? std::get<std::string>(it->second)
             : "";
}

TokenFileInfo info_of(const Attributes& a, const std::string& path) {
  TokenFileInfo i;
  if (string_attr(a, "format") != kTokenFormat)
    throw UsageError(fmt::format(
        "{} is an HDF5 file but not a token file (format attribute is not '{}'; make one with "
        "mpitron tokenize)",
        path, kTokenFormat));
  i.vocab_size = int_attr(a, path, "vocab_size");
  i.tokens = int_attr(a, path, "tokens");
  i.source_bytes = int_attr(a, path, "source_bytes");
  i.checksum = uint64_t(int_attr(a, path, "checksum"));
  i.tokenizer = string_attr(a, "tokenizer");
  i.tokenizer_format = string_attr(a, "tokenizer_format");
  i.source = string_attr(a, "source");
  if (i.vocab_size <= 0 || i.tokens < 0)
    throw UsageError(fmt::format("token file {}: vocab_size {} / tokens {} make no sense", path,
                                 i.vocab_size, i.tokens));
  return i;
}

TextDataset load_token_dataset(const std::string& path, int seq_len, double val_fraction) {
  Handle file = open_user_file(path, "token file");
  UserFileScope scope(path, "token file");
  const TokenFileInfo info = info_of(read_attributes(file), path);
  if (!path_exists(file, "tokens"))
    throw UsageError(fmt::format("token file {} has no dataset /tokens", path));
  Handle dset(H5_CHECK(H5Dopen2(file, "tokens", H5P_DEFAULT)));
  const std::vector<int64_t> shape = dataset_shape(dset);
  if (shape.size() != 1 || shape[0] != info.tokens)
    throw UsageError(fmt::format("token file {}: /tokens has shape {}, expected ({})", path,
                                 shape_string(shape), info.tokens));
  {
    // Read as int32 only what converts to it without a wider buffer: integers of up to 4 bytes.
    Handle type(H5_CHECK(H5Dget_type(dset)));
    require_sound_numeric_type(type, "/tokens");
    if (H5Tget_class(type) != H5T_INTEGER || H5Tget_size(type) > 4)
      throw UsageError(fmt::format(
          "token file {}: /tokens is not of 16- or 32-bit integers (not an mpitron token file?)",
          path));
  }
  std::vector<int32_t> tokens(size_t(info.tokens));
  if (!tokens.empty())
    H5_CHECK(H5Dread(dset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, tokens.data()));
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= info.vocab_size)
      throw UsageError(fmt::format("token file {}: token {} at {} is outside its vocabulary of {}",
                                   path, tokens[i], i, info.vocab_size));
  if (token_checksum(tokens.data(), tokens.size()) != info.checksum)
    throw UsageError(fmt::format(
        "token file {} is corrupt: its tokens do not match the recorded checksum", path));
  return make_token_dataset(path, std::move(tokens), info.vocab_size, info.tokenizer, seq_len,
                            val_fraction);
}

}  // namespace

TokenFileInfo tokenize_file(const WordPieceTokenizer& tokenizer, const std::string& in,
                            const std::string& out) {
  namespace fs = std::filesystem;
  if (!fs::is_regular_file(in))
    throw UsageError(fmt::format("text file '{}' does not exist (give it with --in)", in));
  std::ifstream f(in, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw UsageError(fmt::format("text file '{}' cannot be read", in));
  const std::string dir = fs::path(tokenizer.file()).parent_path().string();
  write_token_file(out, {}, {tokenizer.vocab_size(), dir, tokenizer.format(), "", 0});
  const std::vector<int32_t> tokens = tokenizer.encode(text);
  TokenFileInfo info{tokenizer.vocab_size(), dir, tokenizer.format(),
                     fs::absolute(in).lexically_normal().string(), int64_t(text.size())};
  info.tokens = int64_t(tokens.size());
  info.checksum = token_checksum(tokens.data(), tokens.size());
  write_token_file(out, tokens, info);
  return info;
}

TokenFileInfo tokenize_file(const SentencePieceTokenizer& tokenizer, const std::string& in,
                            const std::string& out) {
  namespace fs = std::filesystem;
  if (!fs::is_regular_file(in))
    throw UsageError(fmt::format("text file '{}' does not exist (give it with --in)", in));
  std::ifstream f(in, std::ios::binary);
  std::vector<int32_t> tokens;
  int64_t bytes = 0;
  for (std::string line; std::getline(f, line);) {
    bytes += int64_t(line.size()) + 1;
    const std::vector<int32_t> ids = tokenizer.encode(line);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    tokens.push_back(tokenizer.eos_id());
  }
  if (f.bad()) throw UsageError(fmt::format("text file '{}' cannot be read", in));
  TokenFileInfo info{tokenizer.vocab_size(), fs::absolute(tokenizer.path()).string(),
                     "sentencepiece", fs::absolute(in).lexically_normal().string(), bytes};
  info.tokens = int64_t(tokens.size());
  info.checksum = token_checksum(tokens.data(), tokens.size());
  write_token_file(out, tokens, info);
  return info;
}

uint64_t token_checksum(const int32_t* ids, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ uint32_t(ids[i])) * 1099511628211ull;
  return h;
}

bool is_token_file(const std::string& path) {
  return has_hdf5_signature(path);
}

TokenFileInfo read_token_file_info(const std::string& path) {
  Handle file = open_user_file(path, "token file");
  UserFileScope scope(path, "token file");
  return info_of(read_attributes(file), path);
}

void write_token_file(const std::string& path, const std::vector<int32_t>& tokens,
                      const TokenFileInfo& info) {
  hid_t created;
  {
    QuietErrors quiet;
    created = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  }
  if (created < 0)
    throw UsageError(
        fmt::format("cannot create {} (does its folder exist and is it writable?)", path));
  Handle file(created);
  const hsize_t n = tokens.size();
  Handle space(H5_CHECK(H5Screate_simple(1, &n, nullptr)));
  const hid_t file_type = info.vocab_size > 65536 ? H5T_STD_U32LE : H5T_STD_U16LE;
  Handle dset(H5_CHECK(
      H5Dcreate2(file, "tokens", file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  if (n > 0)
    H5_CHECK(H5Dwrite(dset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, tokens.data()));
  dset.close();
  write_attributes(file, {{"format", std::string(kTokenFormat)},
                          {"vocab_size", info.vocab_size},
                          {"tokenizer", info.tokenizer},
                          {"tokenizer_format", info.tokenizer_format},
                          {"source", info.source},
                          {"source_bytes", info.source_bytes},
                          {"tokens", int64_t(tokens.size())},
                          {"checksum", int64_t(token_checksum(tokens.data(), tokens.size()))}});
  file.close();
}

TokenFileInfo tokenize_file(BpeTokenizer& tokenizer, const std::string& in, const std::string& out,
                            const std::function<void(int64_t, int64_t, int64_t)>& progress) {
  namespace fs = std::filesystem;
  if (!fs::is_regular_file(in))
    throw UsageError(fmt::format("text file '{}' does not exist (give it with --in)", in));
  std::ifstream f(in, std::ios::binary);
  if (!f) throw UsageError(fmt::format("text file '{}' cannot be read", in));
  std::error_code ec;
  const int64_t total = int64_t(fs::file_size(in, ec));
  // Create the output first, so that a bad --out fails before the work.
  write_token_file(out, {}, {tokenizer.vocab_size(), tokenizer.dir(), tokenizer.format(), "", 0});
  std::vector<int32_t> tokens;
  tokens.reserve(size_t(std::max<int64_t>(total, 0) / 4 + 16));
  constexpr size_t kPiece = size_t(4) << 20;
  std::string buf;
  int64_t done = 0;
  auto last = std::chrono::steady_clock::now();
  bool eof = false;
  while (!eof) {
    const size_t have = buf.size();
    buf.resize(have + kPiece);
    f.read(buf.data() + have, std::streamsize(kPiece));
    buf.resize(have + size_t(f.gcount()));
    eof = f.gcount() == 0 || f.eof();
    const size_t used = tokenizer.encode_stream(buf, eof, tokens);
    done += int64_t(used);
    buf.erase(0, used);
    const auto now = std::chrono::steady_clock::now();
    if (progress && now - last >= std::chrono::seconds(1)) {
      progress(done, total, int64_t(tokens.size()));
      last = now;
    }
  }
  if (f.bad()) throw UsageError(fmt::format("text file '{}' cannot be read", in));
  TokenFileInfo info{tokenizer.vocab_size(), tokenizer.dir(), tokenizer.format(),
                     fs::absolute(in).lexically_normal().string(), done};
  info.tokens = int64_t(tokens.size());
  info.checksum = token_checksum(tokens.data(), tokens.size());
  write_token_file(out, tokens, info);
  return info;
}

TextDataset make_token_dataset(std::string path, std::vector<int32_t> tokens, int64_t vocab_size,
                               std::string tokenizer, int seq_len, double val_fraction) {
  TextDataset d;
  d.path = std::move(path);
  d.tokens = std::move(tokens);
  d.vocab_size = vocab_size;
  d.tokenizer = std::move(tokenizer);
  d.train_end = size_t(double(d.tokens.size()) * (1.0 - val_fraction));
  const size_t need = size_t(seq_len) + 2;
  if (d.train_end < need || d.tokens.size() - d.train_end < need)
    throw UsageError(fmt::format(
        "token data '{}' has {} tokens: too short for sequences of {} tokens in both splits",
        d.path, d.tokens.size(), seq_len));
  d.checksum = token_checksum(d.tokens.data(), d.tokens.size());
  return d;
}

TextDataset load_text_dataset(const std::string& path, int seq_len, double val_fraction) {
  if (const std::string why = wrong_kind_of_path(path, false); !why.empty())
    throw UsageError(fmt::format("data file '{}' {} (give a text file with --data)", path, why));
  if (is_token_file(path)) return load_token_dataset(path, seq_len, val_fraction);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(fmt::format("data file '{}' cannot be read", path));
  TextDataset d;
  d.path = path;
  d.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  d.train_end = size_t(double(d.bytes.size()) * (1.0 - val_fraction));
  size_t need = size_t(seq_len) + 2;
  if (d.train_end < need || d.bytes.size() - d.train_end < need)
    throw UsageError(fmt::format(
        "data file '{}' has {} bytes: too short for sequences of {} tokens in both splits", path,
        d.bytes.size(), seq_len));
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : d.bytes) h = (h ^ b) * 1099511628211ull;
  d.checksum = h;
  return d;
}

void fill_batch(const TextDataset& data, Split split, uint64_t seed, int64_t index,
                int64_t sample_begin, int64_t count, int seq_len, int32_t* out) {
  const size_t begin = data.split_begin(split);
  const uint64_t starts = data.split_end(split) - begin - size_t(seq_len) - 1;
  const PhiloxStream rng{seed, fnv1a64(split == Split::train ? "data.train" : "data.val")};
  for (int64_t i = 0; i < count; ++i) {
    uint64_t sample = uint64_t(sample_begin + i);
    Philox4x32 r = rng.block((uint64_t(index) << 32) | sample);
    uint64_t offset = begin + ((uint64_t(r.v[0]) | (uint64_t(r.v[1]) << 32)) % starts);
    int32_t* row = out + i * (seq_len + 1);
    if (data.is_tokens())
      std::copy_n(data.tokens.data() + offset, seq_len + 1, row);
    else
      for (int t = 0; t <= seq_len; ++t) row[t] = data.bytes[offset + t];
  }
}

}  // namespace mpitron::io
