// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11). A value is a pure function of
// (seed, stream, index): parameters are keyed by (seed, hash(name), global element index) and
// dropout by (seed, hash(step, site), global element index), so any shard of any layout draws
// exactly the numbers the single-process baseline draws for the same global elements.
#pragma once
#include <cmath>
#include <cstdint>
#include <string_view>

// philox4x32, PhiloxStream::block and ::uniform are also device functions under nvcc, so CUDA
// kernels draw the CPU's numbers bit for bit (integer math plus an exact power-of-two scale).
#if defined(__CUDACC__)
#define MPITRON_HOST_DEVICE __host__ __device__
#else
#define MPITRON_HOST_DEVICE
#endif

namespace mpitron {

struct Philox4x32 {
  uint32_t v[4];
};

// Ten rounds of Philox4x32 on counter (c0..c3) with key (k0,k1).
MPITRON_HOST_DEVICE inline Philox4x32 philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                                 uint32_t k0, uint32_t k1) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t(M0) * c0, p1 = uint64_t(M1) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += W0;
    k1 += W1;
  }
  return {{c0, c1, c2, c3}};
}

// 64-bit FNV-1a, for turning parameter names into streams.
constexpr uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return h;
}

// Mixes two 64-bit values into one stream id (splitmix64 finaliser).
constexpr uint64_t mix64(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct PhiloxStream {
  uint64_t seed;
  uint64_t stream;

  MPITRON_HOST_DEVICE Philox4x32 block(uint64_t index) const {
    return philox4x32(uint32_t(index), uint32_t(index >> 32), uint32_t(stream),
                      uint32_t(stream >> 32), uint32_t(seed), uint32_t(seed >> 32));
  }
  // Uniform in [0,1) with 24 bits, for element `index`.
  MPITRON_HOST_DEVICE float uniform(uint64_t index) const {
    return float(block(index).v[0] >> 8) * (1.0f / 16777216.0f);
  }
  // Standard normal for element `index` (Box-Muller on two 32-bit words, double precision).
  double normal(uint64_t index) const {
    Philox4x32 b = block(index);
    double u1 = (double(b.v[0]) + 1.0) * (1.0 / 4294967296.0);  // (0,1]
    double u2 = double(b.v[1]) * (1.0 / 4294967296.0);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

}  // namespace mpitron
