// Blockwise 8-bit AdamW: the dynamic quantization maps against an independent construction,
// nearest-code quantization of random blocks, and the block update bit for bit against a
// reference written here (dequantize, fp32 AdamW, requantize by linear search), against the fp32
// update on the dequantized moments, across shards and across thread counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "base/check.hpp"
#include "base/gemm.hpp"
#include "src/cpu/adamw.hpp"
#include "src/train/adamw.hpp"
#include "src/train/step_backend.hpp"

using namespace mpitron;

namespace {

constexpr size_t B = kAdamW8bitBlock;

// bitsandbytes' create_dynamic_map(signed), written out from its definition: exponent i = 0..6
// has 2^i (signed) or 2^(i+1) (unsigned) fraction steps between 0.1 and 1 at scale 10^(i-6).
std::vector<float> reference_map(bool is_signed) {
  std::vector<double> all;
  for (int i = 0; i <= 6; ++i) {
    const int steps = is_signed ? (1 << i) : (2 << i);
    std::vector<double> edges(size_t(steps) + 1);
    for (int j = 0; j <= steps; ++j) edges[size_t(j)] = 0.1 + (1.0 - 0.1) * j / steps;
    for (int j = 0; j < steps; ++j) {
      const double mean = (edges[size_t(j)] + edges[size_t(j) + 1]) / 2.0 * std::pow(10.0, i - 6);
      all.push_back(mean);
      if (is_signed) all.push_back(-mean);
    }
  }
  all.push_back(0.0);
  all.push_back(1.0);
  while (all.size() < 256) all.push_back(0.0);
  std::sort(all.begin(), all.end());
  return std::vector<float>(all.begin(), all.end());
}

// Nearest map value by linear search; the lower index on a tie.
uint8_t nearest_code(const std::vector<float>& map, float x) {
  size_t best = 0;
  for (size_t j = 1; j < map.size(); ++j)
    if (std::fabs(double(x) - map[j]) < std::fabs(double(x) - map[best])) best = j;
  return uint8_t(best);
}

}  // namespace

TEST(AdamW8bit, DynamicMapsMatchTheirDefinition) {
  const cpu::QuantizationMap& s = cpu::signed_dynamic_map();
  const cpu::QuantizationMap& u = cpu::unsigned_dynamic_map();
  const std::vector<float> rs = reference_map(true), ru = reference_map(false);
  ASSERT_EQ(rs.size(), 256u);
  ASSERT_EQ(ru.size(), 256u);
  for (size_t i = 0; i < 256; ++i) {
    EXPECT_EQ(s[i], rs[i]) << "signed " << i;
    EXPECT_EQ(u[i], ru[i]) << "unsigned " << i;
  }
  for (size_t i = 1; i < 256; ++i) {
    EXPECT_LT(s[i - 1], s[i]) << "signed map not strictly ascending at " << i;
    EXPECT_LT(u[i - 1], u[i]) << "unsigned map not strictly ascending at " << i;
  }
  // Signed: 127 negatives mirroring the 127 positives below 1, then 0 and 1.
  EXPECT_EQ(s[127], 0.0f);
  EXPECT_EQ(s[255], 1.0f);
  for (size_t i = 0; i < 127; ++i) EXPECT_EQ(s[i], -s[254 - i]) << i;
  EXPECT_FLOAT_EQ(s[128], 0.55e-6f);            // the first midpoint of [0.1, 1] at 10^-6
  EXPECT_FLOAT_EQ(s[0], -(1.0f - 0.9f / 128));  // the last midpoint at 10^0
  // Unsigned: non-negative, 0 first and 1 last.
  EXPECT_EQ(u[0], 0.0f);
  EXPECT_EQ(u[255], 1.0f);
  EXPECT_FLOAT_EQ(u[1], 0.325e-6f);  // midpoint of [0.1, 0.55] at 10^-6
}

TEST(AdamW8bit, QuantizesRandomBlocksToTheNearestCode) {
  std::mt19937 gen(11);
  std::normal_distribution<float> dist;
  for (const bool is_signed : {true, false}) {
    const cpu::QuantizationMap& map =
        is_signed ? cpu::signed_dynamic_map() : cpu::unsigned_dynamic_map();
    const std::vector<float> ref(map.begin(), map.end());
    for (float scale : {1e-8f, 1e-3f, 1.0f, 50.0f}) {
      std::array<float, B> x;
      for (float& e : x) e = is_signed ? scale * dist(gen) : scale * dist(gen) * dist(gen);
      float absmax = 0;
      for (float e : x) absmax = std::max(absmax, std::fabs(e));
      for (float e : x) {
        const float normed = e / absmax;
        const uint8_t c = cpu::quantize_nearest(map, normed);
        EXPECT_EQ(c, nearest_code(ref, normed)) << normed;
        if (normed < map[0]) {  // the signed map ends at -0.99296875, not -1
          EXPECT_EQ(c, 0);
          continue;
        }
        // Within half the gap to the neighbour on x's side of its code.
        const size_t n = normed >= map[c] ? std::min<size_t>(c + 1, 255) : size_t(c) - 1;
        const float half_gap = std::fabs(map[n] - map[c]) / 2;
        EXPECT_LE(std::fabs(normed - map[c]), half_gap * 1.0001f) << normed;
        EXPECT_LE(std::fabs(map[c] * absmax - e), half_gap * absmax * 1.0001f + 1e-30f) << e;
      }
    }
  }
  // Ties go to the lower index; the ends and 0 map to themselves.
  const cpu::QuantizationMap& s = cpu::signed_dynamic_map();
  EXPECT_EQ(cpu::quantize_nearest(s, 0.0f), 127);
  EXPECT_EQ(cpu::quantize_nearest(s, 1.0f), 255);
  EXPECT_EQ(cpu::quantize_nearest(s, s[0]), 0);
  EXPECT_EQ(cpu::quantize_nearest(s, s[200]), 200);
  const float mid = float((double(s[200]) + double(s[201])) / 2);
  if (double(mid) - s[200] == double(s[201]) - mid) {
    EXPECT_EQ(cpu::quantize_nearest(s, mid), 200);
  }
  EXPECT_EQ(cpu::quantize_nearest(cpu::unsigned_dynamic_map(), 0.0f), 0);
}

// The block quantizer compares floats with the midpoints rounded down to float; at and around
// every midpoint (the float nearest it and three floats each side, both signs' maps) it gives
// quantize_nearest's code, ties to the lower one included.
TEST(AdamW8bit, BlockQuantizerAgreesAtEveryDecisionPoint) {
  for (const bool is_signed : {true, false}) {
    const cpu::QuantizationMap& map =
        is_signed ? cpu::signed_dynamic_map() : cpu::unsigned_dynamic_map();
    const cpu::Midpoints mid = cpu::quantization_midpoints(map);
    std::vector<float> xs;
    for (size_t k = 0; k + 1 < map.size(); ++k) {
      float x = float(mid[k]);
      for (int s = 0; s < 3; ++s) x = std::nextafter(x, -INFINITY);
      for (int s = 0; s < 7; ++s, x = std::nextafter(x, INFINITY)) xs.push_back(x);
    }
    size_t checked = 0, exact_ties = 0;
    for (size_t at = 0; at < xs.size(); at += B - 1) {
      std::array<float, B> block{};
      block[0] = 1.0f;  // absmax 1: each value is its own normalised value
      const size_t n = std::min(B - 1, xs.size() - at);
      std::copy_n(xs.begin() + long(at), n, block.begin() + 1);
      std::array<uint8_t, B> code{};
      cpu::quantize_block(map, block.data(), 1.0f, code.data());
      for (size_t j = 1; j <= n; ++j, ++checked) {
        EXPECT_EQ(code[j], cpu::quantize_nearest(map, block[j])) << block[j];
        for (size_t k = 0; k + 1 < map.size(); ++k) exact_ties += double(block[j]) == mid[k];
      }
    }
    EXPECT_EQ(checked, 7 * (map.size() - 1));
    EXPECT_GT(exact_ties, 0u) << "no midpoint is a float: the ties went unchecked";
  }
}

// The bucket table quantizer against the binary search it replaced and against quantize_nearest:
// at both ends of every bucket of floats that share sign, exponent and top 7 mantissa bits (all of
// [-2, 2], below 2^-24 too), at 0, -0, the smallest subnormals, +-1, +-inf, NaN of both signs, and
// at 2^20 random floats of [-1, 1], in both maps.
TEST(AdamW8bit, BucketQuantizerEqualsTheSearchItReplaced) {
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           std::numeric_limits<float>::denorm_min(),
                           -std::numeric_limits<float>::denorm_min(),
                           1.0f,
                           -1.0f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           -std::numeric_limits<float>::quiet_NaN()};
  for (uint32_t sign = 0; sign < 2; ++sign)
    for (uint32_t key = 0; key < (128u << 7); ++key) {  // exponents 0..127: |x| < 2
      const uint32_t first = (sign << 31) | (key << 16);
      xs.push_back(std::bit_cast<float>(first));
      xs.push_back(std::bit_cast<float>(first | 0xffffu));
    }
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int i = 0; i < (1 << 20); ++i) xs.push_back(unit(gen));
  while (xs.size() % B) xs.push_back(0.5f);
  for (const bool is_signed : {true, false}) {
    const cpu::QuantizationMap& map =
        is_signed ? cpu::signed_dynamic_map() : cpu::unsigned_dynamic_map();
    std::vector<uint8_t> fast(xs.size()), search(xs.size());
    for (size_t at = 0; at < xs.size(); at += B) {
      cpu::quantize_block(map, xs.data() + at, 1.0f, fast.data() + at);
      cpu::quantize_block_reference(map, xs.data() + at, 1.0f, search.data() + at);
    }
    size_t differ = 0, not_nearest = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      differ += fast[i] != search[i];
      not_nearest += fast[i] != cpu::quantize_nearest(map, xs[i]);
    }
    EXPECT_EQ(differ, 0u) << (is_signed ? "signed" : "unsigned") << " map";
    EXPECT_EQ(not_nearest, 0u) << (is_signed ? "signed" : "unsigned") << " map";
  }
}

TEST(AdamW8bit, StateBytes) {
  EXPECT_EQ(adamw8bit_state_bytes(0), 0u);
  EXPECT_EQ(adamw8bit_state_bytes(B), 2 * B + 2 * 4);
  EXPECT_EQ(adamw8bit_state_bytes(3 * B), 6 * B + 6 * 4);
  EXPECT_EQ(adamw8bit_state_bytes(B + 1), 2 * (B + 1) + 4 * 4);
}

namespace {

struct State8 {
  std::vector<float> params;
  std::vector<uint8_t> m_codes, v_codes;
  std::vector<float> m_absmax, v_absmax;
};

// Tensors that straddle block boundaries, a non-decaying one among them, and padding at the end:
// 300 + 5 + 400 = 705 elements in 3 blocks (768).
const std::vector<AdamWTensor> kTensors = {{0, 300, true}, {300, 5, false}, {305, 400, true}};
constexpr size_t kFlat = 3 * B;

State8 random_state(std::mt19937& gen) {
  std::normal_distribution<float> dist;
  std::uniform_int_distribution<int> code(0, 255);
  State8 s{std::vector<float>(kFlat, 0.0f), std::vector<uint8_t>(kFlat),
           std::vector<uint8_t>(kFlat), std::vector<float>(kFlat / B),
           std::vector<float>(kFlat / B)};
  for (size_t i = 0; i < 705; ++i) s.params[i] = 0.1f * dist(gen);
  for (size_t i = 0; i < kFlat; ++i) {
    s.m_codes[i] = uint8_t(code(gen));
    s.v_codes[i] = uint8_t(code(gen));
  }
  for (size_t i = 705; i < kFlat; ++i) s.m_codes[i] = 127, s.v_codes[i] = 0;  // padding: zeros
  for (size_t k = 0; k < kFlat / B; ++k) {
    s.m_absmax[k] = 1e-2f * std::fabs(dist(gen));
    s.v_absmax[k] = 1e-4f * std::fabs(dist(gen));
  }
  return s;
}

AdamW8bitRange whole_range(State8& s, const std::vector<float>& g) {
  return {0,
          kFlat,
          s.params.data(),
          0,
          g.data(),
          0,
          s.m_codes.data(),
          s.v_codes.data(),
          s.m_absmax.data(),
          s.v_absmax.data(),
          0};
}

}  // namespace

namespace {

// One update from a random state with gradients g against the reference below, bit for bit.
void expect_update_matches_reference(std::mt19937& gen, const std::vector<float>& g) {
  const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  const double lr = 3e-3;
  const float scale = 0.5f;
  const int64_t t = 3;
  State8 s = random_state(gen);
  State8 ref = s;
  cpu::adamw8bit_update(kTensors, whole_range(s, g), cfg, lr, scale, t);

  // Reference: per block, dequantize, PyTorch's fp32 AdamW in adamw_update's operation order
  // (w (1 - lr decay) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps), the per-step constants in
  // double), new absmax, requantize by linear search.
  const std::vector<float> smap = reference_map(true), umap = reference_map(false);
  const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
  const float step_size = float(lr / (1.0 - std::pow(0.9, 3.0)));
  const float inv_sqrt_bc2 = float(1.0 / std::sqrt(1.0 - std::pow(0.95, 3.0)));
  for (size_t k = 0; k < kFlat / B; ++k) {
    std::vector<float> m(B), v(B);
    for (size_t j = 0; j < B; ++j) {
      m[j] = smap[ref.m_codes[k * B + j]] * ref.m_absmax[k];
      v[j] = umap[ref.v_codes[k * B + j]] * ref.v_absmax[k];
    }
    for (size_t j = 0; j < B; ++j) {
      const size_t i = k * B + j;
      if (i >= 705) continue;  // padding keeps its zero state
      const float keep = (i >= 300 && i < 305) ? 1.0f : 1.0f - float(lr * 0.1);
      const float gi = g[i] * scale;
      m[j] = b1 * m[j] + (1.0f - b1) * gi;
      v[j] = b2 * v[j] + (1.0f - b2) * gi * gi;
      const float numerator = step_size * m[j];
      const float denominator = std::sqrt(v[j]) * inv_sqrt_bc2 + eps;
      const float kept = ref.params[i] * keep;
      ref.params[i] = kept - numerator / denominator;
    }
    float am = 0, av = 0;
    for (size_t j = 0; j < B; ++j) am = std::max(am, std::fabs(m[j])), av = std::max(av, v[j]);
    ref.m_absmax[k] = am;
    ref.v_absmax[k] = av;
    for (size_t j = 0; j < B; ++j) {
      ref.m_codes[k * B + j] = am > 0 ? nearest_code(smap, m[j] / am) : 127;
      ref.v_codes[k * B + j] = av > 0 ? nearest_code(umap, v[j] / av) : 0;
    }
  }
  EXPECT_EQ(s.m_absmax, ref.m_absmax);
  EXPECT_EQ(s.v_absmax, ref.v_absmax);
  size_t code_diffs = 0, param_diffs = 0;
  for (size_t i = 0; i < kFlat; ++i) {
    code_diffs += s.m_codes[i] != ref.m_codes[i] || s.v_codes[i] != ref.v_codes[i];
    param_diffs += std::bit_cast<uint32_t>(s.params[i]) != std::bit_cast<uint32_t>(ref.params[i]);
  }
  EXPECT_EQ(code_diffs, 0u);
  EXPECT_EQ(param_diffs, 0u);
  // The padding stays zero state, and the codes moved: they are codes, not stale values.
  for (size_t i = 705; i < kFlat; ++i) {
    EXPECT_EQ(s.m_codes[i], 127);
    EXPECT_EQ(s.v_codes[i], 0);
  }
}

}  // namespace

TEST(AdamW8bit, BlockUpdateMatchesReferenceBitForBit) {
  std::mt19937 gen(5);
  std::normal_distribution<float> dist;
  std::vector<float> g(kFlat, 0.0f);
  for (size_t i = 0; i < 705; ++i) g[i] = dist(gen);
  expect_update_matches_reference(gen, g);
}

// A NaN or infinite gradient makes its moments NaN: the block's absmax skips them (std::max from
// 0 does) and their codes are 0, as the reference's; its other elements quantize as ever.
TEST(AdamW8bit, NonFiniteGradientsQuantizeAsTheReference) {
  std::mt19937 gen(9);
  std::normal_distribution<float> dist;
  std::vector<float> g(kFlat, 0.0f);
  for (size_t i = 0; i < 705; ++i) g[i] = dist(gen);
  g[3] = std::numeric_limits<float>::quiet_NaN();
  g[260] = -std::numeric_limits<float>::quiet_NaN();
  g[400] = std::numeric_limits<float>::infinity();
  expect_update_matches_reference(gen, g);
}

TEST(AdamW8bit, UpdatesWeightsAsFp32AdamWOnTheDequantizedMoments) {
  std::mt19937 gen(7);
  std::normal_distribution<float> dist;
  std::vector<float> g(kFlat, 0.0f);
  for (size_t i = 0; i < 705; ++i) g[i] = dist(gen);
  const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  State8 s = random_state(gen);
  std::vector<float> p = s.params, m(kFlat), v(kFlat);
  for (size_t i = 0; i < kFlat; ++i) {
    m[i] = cpu::signed_dynamic_map()[s.m_codes[i]] * s.m_absmax[i / B];
    v[i] = cpu::unsigned_dynamic_map()[s.v_codes[i]] * s.v_absmax[i / B];
  }
  cpu::adamw8bit_update(kTensors, whole_range(s, g), cfg, 1e-3, 1.0f, 7);
  cpu::adamw_update(kTensors, {0, kFlat, p.data(), 0, g.data(), 0, m.data(), v.data(), 0}, cfg,
                    1e-3, 1.0f, 7);
  EXPECT_EQ(s.params, p);
}

TEST(AdamW8bit, ShardsAndThreadCountsGiveTheWholeUpdatesBits) {
  std::mt19937 gen(9);
  std::normal_distribution<float> dist;
  std::vector<float> g(kFlat, 0.0f);
  const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  State8 whole{std::vector<float>(kFlat, 0.0f), std::vector<uint8_t>(kFlat, 127),
               std::vector<uint8_t>(kFlat, 0), std::vector<float>(3, 0.0f),
               std::vector<float>(3, 0.0f)};
  for (size_t i = 0; i < 705; ++i) whole.params[i] = 0.1f * dist(gen);
  State8 sharded = whole, threaded = whole;
  for (int64_t t = 1; t <= 3; ++t) {
    for (size_t i = 0; i < 705; ++i) g[i] = dist(gen);
    cpu::set_compute_threads(1);
    cpu::adamw8bit_update(kTensors, whole_range(whole, g), cfg, 1e-3, 1.0f, t);
    // Two shards, [0, 256) and [256, 768), each with its state from its own first block.
    const std::pair<size_t, size_t> shards[] = {{0, B}, {B, kFlat}};
    for (const auto& [b, e] : shards) {
      AdamW8bitRange r{b,
                       e,
                       sharded.params.data(),
                       0,
                       g.data() + b,
                       b,
                       sharded.m_codes.data() + b,
                       sharded.v_codes.data() + b,
                       sharded.m_absmax.data() + b / B,
                       sharded.v_absmax.data() + b / B,
                       b};
      cpu::adamw8bit_update(kTensors, r, cfg, 1e-3, 1.0f, t);
    }
    cpu::set_compute_threads(3);
    cpu::adamw8bit_update(kTensors, whole_range(threaded, g), cfg, 1e-3, 1.0f, t);
  }
  cpu::set_compute_threads(1);
  for (const State8* other : {&sharded, &threaded}) {
    EXPECT_EQ(whole.params, other->params);
    EXPECT_EQ(whole.m_codes, other->m_codes);
    EXPECT_EQ(whole.v_codes, other->v_codes);
    EXPECT_EQ(whole.m_absmax, other->m_absmax);
    EXPECT_EQ(whole.v_absmax, other->v_absmax);
  }
}

TEST(AdamW8bit, OptimizerNames) {
  EXPECT_EQ(parse_optimizer("adamw"), Optimizer::adamw);
  EXPECT_EQ(parse_optimizer("adamw8bit"), Optimizer::adamw8bit);
  EXPECT_STREQ(optimizer_name(Optimizer::adamw8bit), "adamw8bit");
  EXPECT_THROW(parse_optimizer("adam8"), UsageError);
  EXPECT_NE(step_backend(Device::cpu).adamw8bit_update, nullptr);
}
