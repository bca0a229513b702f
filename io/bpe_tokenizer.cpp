// GPT-2 byte-level BPE (see bpe_tokenizer.hpp). Symbols are vocabulary ids from the start (every
// byte has its own token, every merge's parts and result are tokens), so a merge is a lookup of
// the id pair; words of up to kShortWord bytes use the textbook loop, longer ones a heap.
#include "io/bpe_tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "base/check.hpp"
#include "io/utf8.hpp"

namespace mpitron::io {

namespace {

namespace fs = std::filesystem;

// GPT-2's pattern, with \s spelled out as JavaScript's \s (which the JS reference uses): PCRE2's
// \s differs from it (U+FEFF, U+0085), and \S becomes [^WS].
#define MPITRON_WS     \
  "\\t\\n\\x0B\\f\\r " \
  "\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}"
constexpr const char* kPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" MPITRON_WS "\\p{L}\\p{N}]+|[" MPITRON_WS
    "]+(?![^" MPITRON_WS "])|[" MPITRON_WS "]+";
#undef MPITRON_WS

constexpr size_t kShortWord = 64;                  // longer words: heap-based merging, O(n log n)
constexpr size_t kCacheWordMax = 256;              // longer words are not cached
constexpr size_t kCacheEntries = size_t(1) << 21;  // then the cache starts afresh

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the others to U+0100...
std::vector<uint32_t> byte_to_unicode() {
  std::vector<uint32_t> cp(256, 0);
  std::vector<bool> direct(256, false);
  for (int b = '!'; b <= '~'; ++b) direct[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b) cp[b] = direct[b] ? uint32_t(b) : 256 + n++;
  return cp;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(fmt::format("tokenizer file {} cannot be read", path.string()));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct Merge {
  int32_t rank, result;
};

}  // namespace

struct BpeTokenizer::Impl {
  std::string dir, format;
  std::vector<std::string> token_bytes;  // id -> raw bytes
  int32_t byte_id[256] = {};
  std::unordered_map<uint64_t, Merge> merges;  // (left id << 32 | right id) -> rank, result
  int n_merges = 0;
  pcre2_code* code = nullptr;
  bool jit = false;
  // word (raw bytes) -> [offset, offset + count) of cache_ids
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> cache;
  std::vector<int32_t> cache_ids;
  std::vector<int32_t> scratch;

  ~Impl() {
    if (code) pcre2_code_free(code);
  }

  const Merge* find_merge(int32_t a, int32_t b) const {
    auto it = merges.find((uint64_t(uint32_t(a)) << 32) | uint32_t(b));
    return it == merges.end() ? nullptr : &it->second;
  }

  // The textbook loop: merge every occurrence (left to right) of the lowest-ranked pair.
  void bpe_short(std::vector<int32_t>& s) const {
    while (s.size() > 1) {
      const Merge* best = nullptr;
      int32_t a = 0, b = 0;
      for (size_t i = 0; i + 1 < s.size(); ++i)
        if (const Merge* m = find_merge(s[i], s[i + 1]); m && (!best || m->rank < best->rank))
          best = m, a = s[i], b = s[i + 1];
      if (!best) return;
      size_t w = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          s[w++] = best->result;
          ++i;
        } else {
          s[w++] = s[i];
        }
      }
      s.resize(w);
    }
  }

  // The same result for long words: a heap of (rank, position) over a linked list. All entries of
  // the lowest rank (one pair) are taken at once, left to right, before any new pair is looked at,
  // exactly as the loop above merges all occurrences before searching again.
  void bpe_long(std::vector<int32_t>& s) const {
    const int n = int(s.size());
    std::vector<int> prev(n), next(n);
    for (int i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
    struct Entry {
      int32_t rank, pos, left, right;
      bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
    auto push = [&](int i) {
      if (i < 0 || next[i] < 0) return;
      if (const Merge* m = find_merge(s[i], s[next[i]])) heap.push({m->rank, i, s[i], s[next[i]]});
    };
    for (int i = 0; i + 1 < n; ++i) push(i);
    std::vector<bool> alive(n, true);
    std::vector<Entry> batch;
    while (!heap.empty()) {
      batch.clear();
      const int32_t rank = heap.top().rank;
      while (!heap.empty() && heap.top().rank == rank) {
        batch.push_back(heap.top());
        heap.pop();
      }
      std::vector<int> touched;
      for (const Entry& e : batch) {
        const int i = e.pos, j = next[i];
        if (!alive[i] || s[i] != e.left || j < 0 || s[j] != e.right) continue;  // stale
        s[i] = find_merge(e.left, e.right)->result;
        alive[j] = false;
        next[i] = next[j];
        if (next[j] >= 0) prev[next[j]] = i;
        touched.push_back(i);
      }
      for (int i : touched)
        if (alive[i]) push(prev[i]), push(i);
    }
    int w = 0;
    for (int i = 0; i >= 0 && i < n; i = next[i]) s[w++] = s[i];
    s.resize(w);
  }

  void encode_word(const uint8_t* p, size_t n, std::vector<int32_t>& out) {
    if (n == 1) {
      out.push_back(byte_id[p[0]]);
      return;
    }
    const std::string_view key(reinterpret_cast<const char*>(p), n);
    const bool cacheable = n <= kCacheWordMax;
    if (cacheable)
      if (auto it = cache.find(key); it != cache.end()) {
        out.insert(out.end(), cache_ids.begin() + it->second.first,
                   cache_ids.begin() + it->second.first + it->second.second);
        return;
      }
    scratch.resize(n);
    for (size_t i = 0; i < n; ++i) scratch[i] = byte_id[p[i]];
    if (n <= kShortWord)
      bpe_short(scratch);
    else
      bpe_long(scratch);
    out.insert(out.end(), scratch.begin(), scratch.end());
    if (!cacheable) return;
    if (cache.size() >= kCacheEntries) cache.clear(), cache_ids.clear();
    cache.emplace(std::string(key),
                  std::pair{uint32_t(cache_ids.size()), uint32_t(scratch.size())});
    cache_ids.insert(cache_ids.end(), scratch.begin(), scratch.end());
  }

  // Calls f(begin, end) for each pre-token of subject (valid UTF-8) that starts before stop.
  template <typename F>
  void for_each_pretoken(std::string_view subject, size_t stop, F&& f) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    if (!md) throw std::bad_alloc();
    const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
    size_t at = 0;
    while (at < stop) {
      const int rc =
          jit ? pcre2_jit_match(code, s, subject.size(), at, PCRE2_NO_UTF_CHECK, md, nullptr)
              : pcre2_match(code, s, subject.size(), at, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc < 0) {
        pcre2_match_data_free(md);
        if (rc == PCRE2_ERROR_NOMATCH) return;  // cannot happen: every character matches
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        MPITRON_REQUIRE(false, fmt::format("pcre2 match: {}", reinterpret_cast<char*>(msg)));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (ov[0] >= stop) break;
      f(size_t(ov[0]), size_t(ov[1]));
      at = ov[1] > ov[0] ? ov[1] : ov[1] + 1;
    }
    pcre2_match_data_free(md);
  }

  // Pre-tokens of text[0, stop) as byte ranges of text; bytes from stop on are lookahead only.
  // Invalid UTF-8 splits like U+FFFD (see the header).
  template <typename F>
  void pretokens(std::string_view text, size_t stop, F&& f) const {
    const size_t bad = first_invalid_utf8(text);
    if (bad == text.size()) return for_each_pretoken(text, stop, f);
    // A copy with U+FFFD for each invalid subsequence, and where its pieces came from.
    std::string clean(text.substr(0, bad));
    struct Piece {
      size_t clean, orig;
    };
    std::vector<Piece> pieces{{0, 0}};  // from clean offset pieces[k].clean on, orig follows 1:1
    const auto* p = reinterpret_cast<const uint8_t*>(text.data());
    for (size_t i = bad; i < text.size();) {
      const int len = utf8_char(p + i, text.size() - i);
      if (len > 0) {
        clean.append(text.data() + i, size_t(len));
        i += size_t(len);
        continue;
      }
      pieces.push_back({clean.size(), i});  // U+FFFD stands for orig [i, i - len)
      clean += "\xEF\xBF\xBD";
      i += size_t(-len);
      pieces.push_back({clean.size(), i});
    }
    size_t k = 0;
    auto orig = [&](size_t c) {  // c is a character boundary of clean; calls are monotonic
      while (k + 1 < pieces.size() && pieces[k + 1].clean <= c) ++k;
      return pieces[k].orig + (c - pieces[k].clean);
    };
    size_t clean_stop = clean.size();
    if (stop < text.size()) {  // stop is a character boundary of text, outside invalid bytes
      size_t j = 0;
      while (j + 1 < pieces.size() && pieces[j + 1].orig <= stop) ++j;
      clean_stop = pieces[j].clean + (stop - pieces[j].orig);
    }
    for_each_pretoken(clean, clean_stop, [&](size_t b, size_t e) {
      const size_t ob = orig(b), oe = orig(e);
      f(ob, oe);
    });
  }
};

BpeTokenizer::BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

bool has_tokenizer_files(const std::string& dir) {
  const fs::path d(dir);
  return (fs::is_regular_file(d / "encoder.json") && fs::is_regular_file(d / "vocab.bpe")) ||
         (fs::is_regular_file(d / "vocab.json") && fs::is_regular_file(d / "merges.txt"));
}

BpeTokenizer BpeTokenizer::load(const std::string& dir) {
  const fs::path d(dir);
  if (const std::string why = wrong_kind_of_path(dir, true); !why.empty())
    throw UsageError(fmt::format(
        "tokenizer folder '{}' {} (io/get_gpt2_tokenizer.sh DIR fetches GPT-2's)", dir, why));
  fs::path vocab_path, merges_path;
  std::string format;
  if (fs::exists(d / "encoder.json") || fs::exists(d / "vocab.bpe")) {
    vocab_path = d / "encoder.json", merges_path = d / "vocab.bpe";
    format = "encoder.json+vocab.bpe";
  } else if (fs::exists(d / "vocab.json") || fs::exists(d / "merges.txt")) {
    vocab_path = d / "vocab.json", merges_path = d / "merges.txt";
    format = "vocab.json+merges.txt";
  } else {
    throw UsageError(fmt::format(
        "tokenizer folder '{}' has neither encoder.json + vocab.bpe (OpenAI's) nor vocab.json + "
        "merges.txt (Hugging Face's)",
        dir));
  }
  for (const fs::path& f : {vocab_path, merges_path})
    if (!fs::is_regular_file(f))
      throw UsageError(fmt::format("tokenizer folder '{}' lacks {} (needed with {})", dir,
                                   f.filename().string(), format));

  auto impl = std::make_unique<Impl>();
  impl->dir = fs::absolute(d).lexically_normal().string();
  if (impl->dir.size() > 1 && impl->dir.back() == '/') impl->dir.pop_back();
  impl->format = format;

  // ---- vocabulary: {"symbols": id, ...}, ids exactly 0..N-1
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(read_file(vocab_path));
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{} is not valid JSON: {}", vocab_path.string(), e.what()));
  }
  if (!vocab.is_object() || vocab.empty())
    throw UsageError(fmt::format("{} is not a JSON object of token -> id", vocab_path.string()));
  const size_t N = vocab.size();
  if (N > size_t(std::numeric_limits<int32_t>::max()))
    throw UsageError(fmt::format("{} has too many tokens", vocab_path.string()));
  const std::vector<uint32_t> b2u = byte_to_unicode();
  std::unordered_map<uint32_t, uint8_t> u2b;
  for (int b = 0; b < 256; ++b) u2b[b2u[b]] = uint8_t(b);
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(N);
  impl->token_bytes.assign(N, {});
  std::vector<bool> seen(N, false);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer())
      throw UsageError(
          fmt::format("{}: the id of token '{}' is not an integer", vocab_path.string(), it.key()));
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || size_t(id) >= N || seen[size_t(id)])
      throw UsageError(fmt::format(
          "{}: vocabulary size mismatch: {} tokens, but token '{}' has id {} (ids must be 0..{}, "
          "each once)",
          vocab_path.string(), N, it.key(), id, N - 1));
    seen[size_t(id)] = true;
    ids.emplace(it.key(), int32_t(id));
    // The token's bytes: each character stands for a byte; a token with other characters (a
    // special token) stands for its own UTF-8.
    const std::string& key = it.key();
    std::string raw;
    bool bytes_only = true;
    const auto* kp = reinterpret_cast<const uint8_t*>(key.data());
    for (size_t i = 0; i < key.size() && bytes_only;) {
      const int len = utf8_char(kp + i, key.size() - i);
      if (len < 0) {
        bytes_only = false;
        break;
      }
      uint32_t cp = len == 1 ? kp[i] : kp[i] & (0xFF >> (len + 1));
      for (int k = 1; k < len; ++k) cp = (cp << 6) | (kp[i + k] & 0x3F);
      auto u = u2b.find(cp);
      if (u == u2b.end())
        bytes_only = false;
      else
        raw += char(u->second);
      i += size_t(len);
    }
    impl->token_bytes[size_t(id)] = bytes_only ? raw : key;
  }
  vocab = nlohmann::json();
  for (int b = 0; b < 256; ++b) {
    std::string key;
    append_utf8(key, b2u[b]);
    auto it = ids.find(key);
    if (it == ids.end())
      throw UsageError(
          fmt::format("{} lacks the token '{}' of byte {} (byte-level BPE needs all 256)",
                      vocab_path.string(), key, b));
    impl->byte_id[b] = it->second;
  }

  // ---- merges: "#version..." first line, then "left right" per line, in rank order
  const std::string text = read_file(merges_path);
  size_t pos = 0, line_no = 0;
  int32_t rank = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const size_t sp = line.find(' ');
    if (sp == 0 || sp == std::string_view::npos || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string_view::npos)
      throw UsageError(fmt::format("{} line {}: '{}' is not two symbols separated by one space",
                                   merges_path.string(), line_no, line));
    const std::string left(line.substr(0, sp)), right(line.substr(sp + 1));
    auto a = ids.find(left), b = ids.find(right), ab = ids.find(left + right);
    if (a == ids.end() || b == ids.end() || ab == ids.end())
      throw UsageError(fmt::format(
          "{} line {}: '{}' {} not in the vocabulary of {}", merges_path.string(), line_no,
          a == ids.end()   ? left
          : b == ids.end() ? right
                           : left + right,
          a == ids.end() || b == ids.end() ? "is a symbol" : "(the merge) is",
          vocab_path.filename().string()));
    const uint64_t key = (uint64_t(uint32_t(a->second)) << 32) | uint32_t(b->second);
    impl->merges.emplace(key, Merge{rank++, ab->second});  // a repeated pair keeps its first rank
  }
  impl->n_merges = rank;
  if (size_t(rank) + 256 > N)
    throw UsageError(fmt::format(
        "vocabulary size mismatch: {} has {} merges, more than the {} tokens of {} allow",
        merges_path.string(), rank, N, vocab_path.string()));

  // ---- the pre-tokenizer
  int err = 0;
  PCRE2_SIZE err_off = 0;
  impl->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                             PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (!impl->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    MPITRON_REQUIRE(false,
                    fmt::format("pcre2_compile at {}: {}", err_off, reinterpret_cast<char*>(msg)));
  }
  impl->jit = pcre2_jit_compile(impl->code, PCRE2_JIT_COMPLETE) == 0;
  return BpeTokenizer(std::move(impl));
}

void BpeTokenizer::encode(std::string_view text, std::vector<int32_t>& out) {
  encode_stream(text, true, out);
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) {
  std::vector<int32_t> out;
  encode(text, out);
  return out;
}

size_t BpeTokenizer::encode_stream(std::string_view text, bool last, std::vector<int32_t>& out) {
  size_t stop = text.size();
  if (!last) {
    // The last "\n" followed by an ASCII character that is not white space: a pre-token ends
    // there whatever follows (the white-space run ends at the character, which cannot join it).
    stop = 0;
    for (size_t j = text.size() - (text.empty() ? 0 : 1); j > 0; --j) {
      const unsigned char c = text[j];
      if (text[j - 1] == '\n' && c > ' ' && c < 0x7F) {
        stop = j;
        break;
      }
    }
    if (stop == 0) return 0;
  }
  // One character after stop is all the lookahead the pattern needs ((?!\S) after white space).
  if (!last) text = text.substr(0, stop + 1);
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  impl_->pretokens(text, stop, [&](size_t b, size_t e) { impl_->encode_word(p + b, e - b, out); });
  return stop;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || size_t(id) >= impl_->token_bytes.size())
      throw UsageError(
          fmt::format("token {} is outside the tokenizer's vocabulary of {}", id, vocab_size()));
    out += impl_->token_bytes[size_t(id)];
  }
  return out;
}

std::string_view BpeTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->token_bytes.size()) return {};
  return impl_->token_bytes[size_t(id)];
}

std::vector<std::string> BpeTokenizer::pretokenize(std::string_view text) const {
  std::vector<std::string> out;
  impl_->pretokens(text, text.size(),
                   [&](size_t b, size_t e) { out.emplace_back(text.substr(b, e - b)); });
  return out;
}

int BpeTokenizer::vocab_size() const {
  return int(impl_->token_bytes.size());
}
int BpeTokenizer::merges() const {
  return impl_->n_merges;
}
const std::string& BpeTokenizer::dir() const {
  return impl_->dir;
}
const std::string& BpeTokenizer::format() const {
  return impl_->format;
}

}  // namespace mpitron::io
