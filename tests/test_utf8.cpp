// io/utf8.hpp, the tokenizers' one UTF-8 helper: encoding and decoding round-trip at every
// length boundary, and invalid sequences are found where a WHATWG decoder would replace them.
#include <gtest/gtest.h>

#include <string>

#include "io/utf8.hpp"

namespace {

using mpitron::io::append_utf8;
using mpitron::io::first_invalid_utf8;
using mpitron::io::utf8_char;
using mpitron::io::utf8_decode;

TEST(Utf8, EncodeDecodeRoundTripAtEveryLengthBoundary) {
  const char32_t points[] = {0x0,    0x41,   0x7F,   0x80,    0x7FF,   0x800,   0xD7FF,
                             0xE000, 0xFFFD, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF};
  const int lengths[] = {1, 1, 1, 2, 2, 3, 3, 3, 3, 3, 4, 4, 4};
  for (size_t k = 0; k < std::size(points); ++k) {
    std::string s;
    append_utf8(s, points[k]);
    ASSERT_EQ(int(s.size()), lengths[k]) << std::hex << uint32_t(points[k]);
    const auto* p = reinterpret_cast<const uint8_t*>(s.data());
    EXPECT_EQ(utf8_char(p, s.size()), lengths[k]);
    EXPECT_EQ(utf8_decode(p, lengths[k]), points[k]);
    EXPECT_EQ(first_invalid_utf8(s), s.size());
  }
}

TEST(Utf8, FirstInvalidSequence) {
  EXPECT_EQ(first_invalid_utf8(""), 0u);
  EXPECT_EQ(first_invalid_utf8("plain ASCII, longer than eight bytes"), 36u);
  EXPECT_EQ(first_invalid_utf8("abcdefghij\xFFxyz"), 10u);  // after the 8-byte fast path
  EXPECT_EQ(first_invalid_utf8("ab\xC3\xA9"
                               "cd\xC3"),
            6u);                                          // truncated at the end
  EXPECT_EQ(first_invalid_utf8("\xED\xA0\x80"), 0u);      // a surrogate
  EXPECT_EQ(first_invalid_utf8("x\xC0\xAF"), 1u);         // an overlong form
  EXPECT_EQ(first_invalid_utf8("\xF4\x90\x80\x80"), 0u);  // past U+10FFFF
  const auto* bad = reinterpret_cast<const uint8_t*>(
      "\xE2\x82"
      "A");
  EXPECT_EQ(utf8_char(bad, 3), -2);  // the maximal subpart: two bytes, one U+FFFD
}

}  // namespace
