// The BPE tokenizer on a tiny hand-written vocabulary (all 256 byte tokens and a few merges) made
// in a temporary folder: merges by rank, byte fallback, long words, the GPT-2 pre-tokenizer's
// splits, lossless round trips of arbitrary bytes (invalid UTF-8 too), and clear load errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "io/bpe_tokenizer.hpp"
#include "base/check.hpp"

namespace fs = std::filesystem;
using mpitron::UsageError;
using mpitron::io::BpeTokenizer;

namespace {

// GPT-2's byte -> character table, written independently of the tokenizer's.
std::string byte_char(int b) {
  const bool direct = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  int cp = b;
  if (!direct) {
    int n = 0;
    for (int c = 0; c < b; ++c)
      if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE))) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// "left right" in rank order; each result becomes the next id after the 256 bytes.
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"a", "a"}, {"aa", "aa"}, {"b", "a"}, {"a", "b"},
};

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

struct TinyTokenizer : ::testing::Test {
  fs::path dir;
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("mpitron_bpe_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    write_files(dir, "encoder.json", "vocab.bpe");
  }
  void TearDown() override { fs::remove_all(dir); }

  static void write(const fs::path& p, const std::string& text) {
    std::ofstream(p, std::ios::binary) << text;
  }
  static void write_files(const fs::path& d, const char* vocab, const char* merges) {
    std::string j = "{";
    int id = 0;
    for (int b = 0; b < 256; ++b) {
      j += (b ? ", \"" : "\"") + json_escape(byte_char(b)) + "\": " + std::to_string(id);
      ++id;
    }
    std::string m = "#version: 0.2\n";
    for (const auto& [l, r] : kMerges) {
      j += ", \"" + json_escape(l + r) + "\": " + std::to_string(id++);
      m += l + " " + r + "\n";
    }
    write(d / vocab, j + "}");
    write(d / merges, m);
  }
  BpeTokenizer load() const { return BpeTokenizer::load(dir.string()); }
};

int32_t id_of(const BpeTokenizer& t, const std::string& bytes) {
  for (int i = 0; i < t.vocab_size(); ++i)
    if (t.token_bytes(i) == bytes) return i;
  return -1;
}

// The textbook BPE on symbol strings (the JS reference's algorithm), as the oracle.
std::vector<std::string> reference_bpe(const std::string& word) {
  std::map<std::pair<std::string, std::string>, int> rank;
  for (size_t i = 0; i < kMerges.size(); ++i) {
    auto raw = [](const std::string& s) {  // symbols here are ASCII except Ġ (a space)
      std::string r;
      for (size_t k = 0; k < s.size(); ++k) {
        if (s.compare(k, 2, "Ġ") == 0)
          r += ' ', ++k;
        else
          r += s[k];
      }
      return r;
    };
    rank[{raw(kMerges[i].first), raw(kMerges[i].second)}] = int(i);
  }
  std::vector<std::string> w;
  for (char c : word) w.emplace_back(1, c);
  while (w.size() > 1) {
    int best = -1;
    std::pair<std::string, std::string> pair;
    for (size_t i = 0; i + 1 < w.size(); ++i)
      if (auto it = rank.find({w[i], w[i + 1]});
          it != rank.end() && (best < 0 || it->second < best))
        best = it->second, pair = it->first;
    if (best < 0) break;
    std::vector<std::string> n;
    for (size_t i = 0; i < w.size(); ++i) {
      if (i + 1 < w.size() && w[i] == pair.first && w[i + 1] == pair.second) {
        n.push_back(w[i] + w[i + 1]);
        ++i;
      } else {
        n.push_back(w[i]);
      }
    }
    w = n;
  }
  return w;
}

std::vector<std::string> pieces(const BpeTokenizer& t, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.emplace_back(t.token_bytes(id));
  return out;
}

}  // namespace

TEST_F(TinyTokenizer, LoadsBothFormats) {
  BpeTokenizer t = load();
  EXPECT_EQ(t.vocab_size(), 256 + int(kMerges.size()));
  EXPECT_EQ(t.merges(), int(kMerges.size()));
  EXPECT_EQ(t.format(), "encoder.json+vocab.bpe");
  EXPECT_TRUE(fs::path(t.dir()).is_absolute());
  const fs::path hf = dir / "hf";
  fs::create_directories(hf);
  write_files(hf, "vocab.json", "merges.txt");
  BpeTokenizer h = BpeTokenizer::load(hf.string());
  EXPECT_EQ(h.format(), "vocab.json+merges.txt");
  EXPECT_EQ(h.encode(" the aba"), t.encode(" the aba"));
}

TEST_F(TinyTokenizer, MergesByRankNotPosition) {
  BpeTokenizer t = load();
  // (b,a) outranks (a,b): "aba" -> a + ba, not ab + a.
  EXPECT_EQ(pieces(t, t.encode("aba")), (std::vector<std::string>{"a", "ba"}));
  EXPECT_EQ(t.encode(" the"), std::vector<int32_t>{id_of(t, " the")});
  EXPECT_EQ(pieces(t, t.encode("the")), (std::vector<std::string>{"t", "he"}));
  EXPECT_EQ(pieces(t, t.encode("aaaaa")), (std::vector<std::string>{"aaaa", "a"}));
  // All occurrences of a pair merge left to right before the next pair: "aaa" -> aa + a.
  EXPECT_EQ(pieces(t, t.encode("aaa")), (std::vector<std::string>{"aa", "a"}));
}

TEST_F(TinyTokenizer, ByteFallback) {
  BpeTokenizer t = load();
  EXPECT_EQ(pieces(t, t.encode("\xC3\xA9")), (std::vector<std::string>{"\xC3", "\xA9"}));
  EXPECT_EQ(pieces(t, t.encode("\xFF\xFE")), (std::vector<std::string>{"\xFF", "\xFE"}));
  EXPECT_EQ(pieces(t, t.encode(std::string(1, '\0'))),
            (std::vector<std::string>{std::string(1, '\0')}));
}

TEST_F(TinyTokenizer, LongWordsMatchTheTextbookAlgorithm) {
  BpeTokenizer t = load();
  EXPECT_EQ(t.encode(std::string(200, 'a')), std::vector<int32_t>(50, id_of(t, "aaaa")));
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = 1 + rng() % (trial < 150 ? 60 : 400);  // short and heap paths
    std::string w;
    for (size_t i = 0; i < n; ++i) w += "ab"[rng() % 3 == 0];
    ASSERT_EQ(pieces(t, t.encode(w)), reference_bpe(w)) << w;
  }
}

TEST_F(TinyTokenizer, PreTokenizerSplits) {
  BpeTokenizer t = load();
  using V = std::vector<std::string>;
  EXPECT_EQ(t.pretokenize("I'll don't 123 4567  x\n\n y"),
            (V{"I", "'ll", " don", "'t", " 123", " 4567", " ", " x", "\n\n", " y"}));
  EXPECT_EQ(t.pretokenize("it's we've they're I'm he'd"),
            (V{"it", "'s", " we", "'ve", " they", "'re", " I", "'m", " he", "'d"}));
  EXPECT_EQ(t.pretokenize("abc123def!?"), (V{"abc", "123", "def", "!?"}));
  EXPECT_EQ(t.pretokenize("a   "), (V{"a", "   "}));
  EXPECT_EQ(t.pretokenize("a\n\nb"), (V{"a", "\n", "\n", "b"}));  // run minus its last
  EXPECT_EQ(t.pretokenize("x \t\ny"), (V{"x", " \t", "\n", "y"}));
  // JavaScript's \s: U+00A0 and U+FEFF are white space; letters include accents and CJK.
  EXPECT_EQ(t.pretokenize("a\xC2\xA0"
                          "b"),
            (V{"a", "\xC2\xA0", "b"}));
  EXPECT_EQ(t.pretokenize("\xEF\xBB\xBFhi"), (V{"\xEF\xBB\xBF", "hi"}));
  EXPECT_EQ(t.pretokenize(" caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87"),
            (V{" caf\xC3\xA9", " \xE4\xB8\xAD\xE6\x96\x87"}));
  // Invalid UTF-8 splits as U+FFFD (a symbol) would: one per maximal invalid subsequence.
  EXPECT_EQ(t.pretokenize("a\xFF"
                          "b"),
            (V{"a", "\xFF", "b"}));
  EXPECT_EQ(t.pretokenize(" \xFF\xFE!x"), (V{" \xFF\xFE!", "x"}));
  EXPECT_EQ(t.pretokenize("\xE2\x82x"), (V{"\xE2\x82", "x"}));
  EXPECT_EQ(t.pretokenize("caf\xC3"), (V{"caf", "\xC3"}));
}

TEST_F(TinyTokenizer, RandomBytesRoundTrip) {
  BpeTokenizer t = load();
  std::mt19937 rng(5);
  const std::string alphabet = "ab the'sll\n\t 0129!.";
  for (int trial = 0; trial < 2000; ++trial) {
    std::string s;
    const size_t n = rng() % 300;
    for (size_t i = 0; i < n; ++i) {
      const unsigned r = rng() % 10;
      if (r < 4)
        s += char(rng() % 256);  // any byte: mostly invalid UTF-8
      else if (r < 5)
        s += "\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"[rng() % 9];  // cut UTF-8
      else if (r < 6)
        s += "\xE4\xB8\xAD";
      else
        s += alphabet[rng() % alphabet.size()];
    }
    const std::vector<int32_t> ids = t.encode(s);
    ASSERT_EQ(t.decode(ids), s) << "trial " << trial;
    // Pieces of a stream give the ids of one call.
    std::vector<int32_t> streamed;
    std::string buf;
    for (size_t at = 0; at < s.size();) {
      const size_t take = std::min<size_t>(s.size() - at, 1 + rng() % 40);
      buf.append(s, at, take);
      at += take;
      buf.erase(0, t.encode_stream(buf, at == s.size(), streamed));
    }
    if (!buf.empty()) t.encode_stream(buf, true, streamed);
    ASSERT_EQ(streamed, ids) << "trial " << trial;
  }
  EXPECT_THROW(t.decode(std::vector<int32_t>{t.vocab_size()}), UsageError);
}

namespace {
std::string load_error(const fs::path& d) {
  try {
    BpeTokenizer::load(d.string());
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_F(TinyTokenizer, ClearErrors) {
  EXPECT_NE(load_error(dir / "nowhere").find("does not exist"), std::string::npos);
  const fs::path empty = dir / "empty";
  fs::create_directories(empty);
  EXPECT_NE(load_error(empty).find("has neither encoder.json + vocab.bpe"), std::string::npos);
  fs::remove(dir / "vocab.bpe");
  EXPECT_NE(load_error(dir).find("lacks vocab.bpe"), std::string::npos);
  write_files(dir, "encoder.json", "vocab.bpe");
  write(dir / "encoder.json", "{\"a\": 0,");
  EXPECT_NE(load_error(dir).find("is not valid JSON"), std::string::npos) << load_error(dir);
  write(dir / "encoder.json", "[1, 2]");
  EXPECT_NE(load_error(dir).find("not a JSON object"), std::string::npos);
  write(dir / "encoder.json", "{\"a\": \"zero\"}");
  EXPECT_NE(load_error(dir).find("is not an integer"), std::string::npos);
  write(dir / "encoder.json", "{\"a\": 0, \"b\": 5}");
  EXPECT_NE(load_error(dir).find("vocabulary size mismatch"), std::string::npos);
  write_files(dir, "encoder.json", "vocab.bpe");
  write(dir / "vocab.bpe", "#version: 0.2\na b\nabc\n");
  const std::string e = load_error(dir);
  EXPECT_NE(e.find("line 3: 'abc' is not two symbols"), std::string::npos) << e;
  write(dir / "vocab.bpe", "#version: 0.2\na b c\n");
  EXPECT_NE(load_error(dir).find("not two symbols"), std::string::npos);
  write(dir / "vocab.bpe", "#version: 0.2\nq z\n");
  EXPECT_NE(load_error(dir).find("'qz' (the merge) is not in the vocabulary"), std::string::npos)
      << load_error(dir);
  for (const std::string& msg : {load_error(dir), load_error(empty)})
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;  // one line
}
