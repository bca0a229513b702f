// The project's Philox4x32-10 (base/philox.hpp) is Random123's philox4x32 (Salmon et al., SC'11),
// the generator CUDA code can draw from on the device with the same header: equal bits on a sweep
// of counters and keys, including the known-answer vectors of Random123's own test suite.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "base/philox.hpp"

// After ours: Random123 defines a function-like macro of the same name.
#include <Random123/philox.h>
#undef philox4x32

using namespace mpitron;

namespace {

r123::Philox4x32::ctr_type reference(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                     uint32_t k0, uint32_t k1) {
  r123::Philox4x32 g;
  const r123::Philox4x32::ctr_type ctr = {{c0, c1, c2, c3}};
  const r123::Philox4x32::key_type key = {{k0, k1}};
  return g(ctr, key);
}

}  // namespace

TEST(PhiloxRandom123, KnownAnswers) {
  // Random123's kat_vectors for philox4x32_10: zero, all-ones and pi-digit inputs.
  const Philox4x32 zero = philox4x32(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(zero.v[0], 0x6627e8d5u);
  EXPECT_EQ(zero.v[1], 0xe169c58du);
  EXPECT_EQ(zero.v[2], 0xbc57ac4cu);
  EXPECT_EQ(zero.v[3], 0x9b00dbd8u);
  const Philox4x32 ones = philox4x32(~0u, ~0u, ~0u, ~0u, ~0u, ~0u);
  EXPECT_EQ(ones.v[0], 0x408f276du);
  EXPECT_EQ(ones.v[1], 0x41c83b0eu);
  EXPECT_EQ(ones.v[2], 0xa20bc7c6u);
  EXPECT_EQ(ones.v[3], 0x6d5451fdu);
  const Philox4x32 pi =
      philox4x32(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(pi.v[0], 0xd16cfe09u);
  EXPECT_EQ(pi.v[1], 0x94fdccebu);
  EXPECT_EQ(pi.v[2], 0x5001e420u);
  EXPECT_EQ(pi.v[3], 0x24126ea1u);
}

TEST(PhiloxRandom123, SameBitsAsRandom123) {
  std::mt19937_64 g(5);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t a = g(), b = g(), k = g();
    const Philox4x32 ours = philox4x32(uint32_t(a), uint32_t(a >> 32), uint32_t(b),
                                       uint32_t(b >> 32), uint32_t(k), uint32_t(k >> 32));
    const auto ref = reference(uint32_t(a), uint32_t(a >> 32), uint32_t(b), uint32_t(b >> 32),
                               uint32_t(k), uint32_t(k >> 32));
    for (int w = 0; w < 4; ++w) ASSERT_EQ(ours.v[w], ref.v[w]) << "draw " << i << " word " << w;
  }
}

// PhiloxStream's layout (index in words 0-1, stream in 2-3, seed as the key) through Random123:
// what a device kernel keyed the same way draws for a dropout mask or an initial weight.
TEST(PhiloxRandom123, StreamLayout) {
  const PhiloxStream s{0x1234567890abcdefull, 0x0fedcba987654321ull};
  for (uint64_t index : {uint64_t(0), uint64_t(1), uint64_t(1) << 40, ~uint64_t(0)}) {
    const auto ref = reference(uint32_t(index), uint32_t(index >> 32), uint32_t(s.stream),
                               uint32_t(s.stream >> 32), uint32_t(s.seed), uint32_t(s.seed >> 32));
    const Philox4x32 ours = s.block(index);
    for (int w = 0; w < 4; ++w) EXPECT_EQ(ours.v[w], ref.v[w]);
  }
}
