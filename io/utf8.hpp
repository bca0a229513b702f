// UTF-8 decoding for the tokenizers: how long the character at a position is, or how long the
// invalid bytes there are (what a decoder replaces with one U+FFFD).
#pragma once
#include <cstddef>
#include <cstdint>

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

}  // namespace mpitron::io
