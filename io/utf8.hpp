// UTF-8 for the tokenizers, in one place: how long the character at a position is, or how long
// the invalid bytes there are (what a decoder replaces with one U+FFFD); decoding a valid
// character, encoding a code point, and finding the first invalid sequence of a string.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace mpitron::io {

// Length of the UTF-8 character at p[0..n) (n >= 1), or minus the length of the maximal invalid
// subsequence there (Unicode's "maximal subpart", as WHATWG decoders replace with one U+FFFD).
inline int utf8_char(const uint8_t* p, size_t n) {
  const uint8_t b = p[0];
  if (b < 0x80) return 1;
  int need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k <= need; ++k) {
    if (size_t(k) >= n || p[k] < lo || p[k] > hi) return -k;
    lo = 0x80, hi = 0xBF;
  }
  return need + 1;
}

// The code point of a valid UTF-8 character of len bytes (len from utf8_char).
inline char32_t utf8_decode(const uint8_t* p, int len) {
  char32_t cp = len == 1 ? p[0] : p[0] & (0xFF >> (len + 1));
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (p[k] & 0x3F);
  return cp;
}

// Appends the UTF-8 encoding of code point cp (<= U+10FFFF) to s.
inline void append_utf8(std::string& s, char32_t cp) {
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
}

// Offset of the first invalid UTF-8 sequence in s, or s.size(); eight ASCII bytes at a time.
inline size_t first_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const int len = utf8_char(p + i, n - i);
    if (len < 0) return i;
    i += size_t(len);
  }
  return n;
}

}  // namespace mpitron::io
