#include "src/cpu/adamw.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "base/check.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace mpitron::cpu {

namespace {

// PyTorch's AdamW arithmetic with its per-step constants folded: w <- w (1 - lr decay) -
// (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps), with 1 / sqrt(bc2) a multiplier. One division and
// one square root an element, against three and one when written out (adamw_update_reference).

// One element; keep = 1 - lr decay for its tensor.
inline void adamw_element(const AdamWStep& c, float keep, float& w, float& m, float& v, float g) {
  const float mi = c.b1 * m + c.one_minus_b1 * g;
  const float vi = c.b2 * v + c.one_minus_b2 * g * g;
  m = mi;
  v = vi;
  w = w * keep - c.step_size * mi / (std::sqrt(vi) * c.inv_sqrt_bc2 + c.eps);
}

// Elements [0, n) of one tensor.
inline void adamw_span(const AdamWStep& c, float keep, float* __restrict w,
                       const float* __restrict g, float* __restrict m, float* __restrict v,
                       size_t n, float grad_scale) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) adamw_element(c, keep, w[i], m[i], v[i], g[i] * grad_scale);
}

}  // namespace

void adamw_update(std::span<const AdamWTensor> tensors, const AdamWRange& r, const AdamWConfig& cfg,
                  double lr, float grad_scale, int64_t t) {
  MPITRON_REQUIRE(r.weights == nullptr, "the CPU backend trains in fp32 only");
  if (r.begin >= r.end) return;
  const AdamWStep c(cfg, lr, t);
  const float keep_decayed = 1.0f - c.lr_decay;
  // One parallel region over the flat range (not one per tensor: most are small), each thread a
  // contiguous stretch walking the tensors that overlap it; element-wise, so no thread count
  // changes a bit.
#pragma omp parallel
  {
#ifdef _OPENMP
    const size_t threads = size_t(omp_get_num_threads()), me = size_t(omp_get_thread_num());
#else
    const size_t threads = 1, me = 0;
#endif
    const size_t total = r.end - r.begin, per = (total + threads - 1) / threads;
    const size_t lo = r.begin + std::min(total, me * per),
                 hi = r.begin + std::min(total, (me + 1) * per);
    auto p = std::upper_bound(tensors.begin(), tensors.end(), lo,
                              [](size_t f, const AdamWTensor& q) { return f < q.offset; });
    if (p != tensors.begin()) --p;
    for (; p != tensors.end() && p->offset < hi; ++p) {
      const size_t begin = std::max(lo, p->offset), end = std::min(hi, p->offset + p->numel);
      if (begin >= end) continue;
      adamw_span(c, p->weight_decay ? keep_decayed : 1.0f, r.params + (begin - r.p_offset),
                 r.grads + (begin - r.g_offset), r.m + (begin - r.m_offset),
                 r.v + (begin - r.m_offset), end - begin, grad_scale);
    }
  }
}

void adamw_update_reference(std::span<const AdamWTensor> tensors, const AdamWRange& r,
                            const AdamWConfig& cfg, double lr, float grad_scale, int64_t t) {
  MPITRON_REQUIRE(r.weights == nullptr, "the CPU backend trains in fp32 only");
  const float b1 = float(cfg.beta1), b2 = float(cfg.beta2), eps = float(cfg.eps);
  const float bc1 = float(1.0 - std::pow(cfg.beta1, double(t)));
  const float bc2 = float(1.0 - std::pow(cfg.beta2, double(t)));
  const float flr = float(lr);
  for (const AdamWTensor& p : tensors) {
    const size_t begin = std::max(r.begin, p.offset), end = std::min(r.end, p.offset + p.numel);
    if (begin >= end) continue;
    const float decay = p.weight_decay ? float(cfg.weight_decay) : 0.0f;
    float* w = r.params + (begin - r.p_offset);
    const float* g = r.grads + (begin - r.g_offset);
    float* m = r.m + (begin - r.m_offset);
    float* v = r.v + (begin - r.m_offset);
    for (size_t i = 0; i < end - begin; ++i) {
      const float gi = g[i] * grad_scale;
      m[i] = b1 * m[i] + (1.0f - b1) * gi;
      v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
      const float mhat = m[i] / bc1, vhat = v[i] / bc2;
      w[i] -= flr * (mhat / (std::sqrt(vhat) + eps) + decay * w[i]);
    }
  }
}

namespace {

// No heap: the maps are built at their first use, which may be inside a step.
QuantizationMap dynamic_map(bool is_signed) {
  std::array<double, 256> values{};  // zeros: the map's 0, and padding should it fall short
  size_t n = 0;
  for (int i = 0; i < 7; ++i) {
    const int k = is_signed ? 1 << i : 1 << (i + 1);
    const double scale = std::pow(10.0, i - 6);
    for (int j = 0; j < k; ++j) {  // midpoint of linspace(0.1, 1, k + 1)'s j-th interval
      const double lo = 0.1 + 0.9 * j / k, hi = 0.1 + 0.9 * (j + 1) / k;
      values[n++] = scale * (lo + hi) / 2;
      if (is_signed) values[n++] = -scale * (lo + hi) / 2;
    }
  }
  ++n;  // 0
  values[n++] = 1.0;
  MPITRON_REQUIRE(n <= values.size(), "a dynamic map has at most 256 values");
  std::sort(values.begin(), values.end());
  QuantizationMap map;
  for (size_t i = 0; i < map.size(); ++i) map[i] = float(values[i]);
  return map;
}

constexpr size_t B = kAdamW8bitBlock;

// The midpoints rounded down to float: for a float x, mid < x exactly when that float is below x
// (no float lies between it and mid), so the search compares floats, twice the lanes a gather.
using FloatMidpoints = std::array<float, 256>;
FloatMidpoints float_midpoints(const Midpoints& mid) {
  FloatMidpoints low;
  for (size_t k = 0; k < mid.size(); ++k) {
    low[k] = float(mid[k]);
    if (double(low[k]) > mid[k]) low[k] = std::nextafter(low[k], -INFINITY);
  }
  return low;
}

// quantize_nearest of value / absmax for a block's values: a branch-free binary search over the
// midpoints, each step over the whole block so that it vectorizes (gathers). The simple path
// quantize_block_by_buckets replaced (tests compare the two).
void quantize_block_by(const FloatMidpoints& mid, const float* value, float absmax, uint8_t* code) {
  float x[B];
  int32_t i[B];
  for (size_t j = 0; j < B; ++j) x[j] = value[j] / absmax, i[j] = 0;
  for (int32_t half = 128; half > 0; half /= 2)
    for (size_t j = 0; j < B; ++j) i[j] += mid[size_t(i[j] + half - 1)] < x[j] ? half : 0;
  for (size_t j = 0; j < B; ++j) code[j] = uint8_t(i[j] + (mid[size_t(i[j])] < x[j]));
}

// The code of a float x without a search: x's sign, exponent and top 7 mantissa bits name a bucket
// of floats, and no bucket holds two midpoints (checked when built), so the code is the number of
// midpoints below the bucket's least float, plus one where the bucket's midpoint is below x.
// Magnitudes are clamped to [2^-24, 2): |value / absmax| <= 1, and no midpoint lies in the clamped
// range below (checked), so a smaller magnitude has the code of 2^-24 with its sign. NaN gets code
// 0, as in the search (no midpoint is below it).
struct QuantizationBuckets {
  static constexpr uint32_t kLowest = 103u << 23, kHighest = (128u << 23) - 1;  // 2^-24, 2^1 - ulp
  static constexpr uint32_t kShift = 16, kFirst = kLowest >> kShift;
  static constexpr uint32_t kPerSign = (kHighest >> kShift) - kFirst + 1;
  FloatMidpoints mid;
  std::array<int32_t, 2 * kPerSign> below;  // midpoints below the bucket's least float

  explicit QuantizationBuckets(const FloatMidpoints& m) : mid(m) {
    auto count_below = [&](float x) {
      return int32_t(std::count_if(mid.begin(), mid.end(), [&](float q) { return q < x; }));
    };
    for (uint32_t sign = 0; sign < 2; ++sign)
      for (uint32_t k = 0; k < kPerSign; ++k) {
        const uint32_t first = ((k + kFirst) << kShift) | (sign << 31),
                       last = first | ((1u << kShift) - 1);
        const float a = std::bit_cast<float>(first), z = std::bit_cast<float>(last);
        const int32_t lo = count_below(sign ? z : a), hi = count_below(sign ? a : z);
        // hi counts the midpoints below the bucket's greatest float; one more code at most.
        MPITRON_REQUIRE(hi - lo <= 1, "a quantization bucket holds at most one midpoint");
        below[sign * kPerSign + k] = lo;
      }
    const float tiny = std::bit_cast<float>(kLowest);
    MPITRON_REQUIRE(
        count_below(tiny) == count_below(0.0f) && count_below(-tiny) == count_below(-0.0f),
        "no midpoint between 0 and the smallest bucket");
  }
};

void quantize_block_by_buckets(const QuantizationBuckets& q, const float* value, float absmax,
                               uint8_t* code) {
  using Q = QuantizationBuckets;
  float x[B];
  uint32_t u[B];
  int32_t base[B], c[B];
  // Loops apart, each gather by a local index array into 32-bit lanes: GCC vectorizes these.
  for (size_t j = 0; j < B; ++j) x[j] = value[j] / absmax, u[j] = std::bit_cast<uint32_t>(x[j]);
  for (size_t j = 0; j < B; ++j) {
    const uint32_t bits = u[j] & 0x7fffffffu;
    const uint32_t magnitude = std::min(std::max(bits, Q::kLowest), Q::kHighest);
    const int32_t below =
        q.below[size_t((u[j] >> 31) * Q::kPerSign + (magnitude >> Q::kShift) - Q::kFirst)];
    base[j] = bits > 0x7f800000u ? 0 : below;  // NaN: 0, and no midpoint is below it
  }
  const float* mid = q.mid.data();
  for (size_t j = 0; j < B; ++j) c[j] = base[j] + (mid[size_t(base[j])] < x[j]);
  for (size_t j = 0; j < B; ++j) code[j] = uint8_t(c[j]);
}

// max |value[j]| over a block, NaN skipped, 0 if all are (as std::max from 0 gives). Eigen's
// vectorized max over the numbers: a max is exact, so its order gives the same float.
float block_absmax(const float* value) {
  const float absmax =
      Eigen::Map<const Eigen::Array<float, B, 1>>(value).abs().maxCoeff<Eigen::PropagateNumbers>();
  return std::max(0.0f, absmax);  // all NaN: NaN, and max(0, NaN) is 0
}

// value[j] = map[code[j]] x absmax for a block. Through 32-bit lanes and unaliased pointers, so
// that GCC gathers.
void dequantize_block(const float* __restrict map, const uint8_t* __restrict code, float absmax,
                      float* __restrict value) {
  int32_t index[B];
  for (size_t j = 0; j < B; ++j) index[j] = code[j];
  for (size_t j = 0; j < B; ++j) value[j] = map[index[j]] * absmax;
}

// The two dynamic maps' tables, built at first use (the maps' own addresses tell them apart).
const QuantizationBuckets& buckets_of(const QuantizationMap& map);

}  // namespace

Midpoints quantization_midpoints(const QuantizationMap& map) {
  Midpoints mid;
  for (size_t k = 0; k + 1 < map.size(); ++k) mid[k] = (double(map[k]) + double(map[k + 1])) / 2;
  mid[map.size() - 1] = std::numeric_limits<double>::infinity();
  return mid;
}

void quantize_block(const QuantizationMap& map, const float* value, float absmax, uint8_t* code) {
  quantize_block_by_buckets(buckets_of(map), value, absmax, code);
}

void quantize_block_reference(const QuantizationMap& map, const float* value, float absmax,
                              uint8_t* code) {
  quantize_block_by(float_midpoints(quantization_midpoints(map)), value, absmax, code);
}

const QuantizationMap& signed_dynamic_map() {
  static const QuantizationMap map = dynamic_map(true);
  return map;
}

const QuantizationMap& unsigned_dynamic_map() {
  static const QuantizationMap map = dynamic_map(false);
  return map;
}

namespace {
const QuantizationBuckets& buckets_of(const QuantizationMap& map) {
  static const QuantizationBuckets m(float_midpoints(quantization_midpoints(signed_dynamic_map())));
  static const QuantizationBuckets v(
      float_midpoints(quantization_midpoints(unsigned_dynamic_map())));
  MPITRON_REQUIRE(&map == &signed_dynamic_map() || &map == &unsigned_dynamic_map(),
                  "8-bit AdamW quantizes to its two dynamic maps");
  return &map == &signed_dynamic_map() ? m : v;
}
}  // namespace

uint8_t quantize_nearest(const QuantizationMap& map, float x) {
  // Branch-free lower bound: every value below index i is below x.
  size_t i = 0;
  for (size_t half = map.size() / 2; half > 0; half /= 2) i += map[i + half - 1] < x ? half : 0;
  i += map[i] < x;  // i: the first value >= x (map.size() when none)
  if (i == 0) return 0;
  if (i == map.size()) return uint8_t(map.size() - 1);
  return uint8_t(double(x) - double(map[i - 1]) <= double(map[i]) - double(x) ? i - 1 : i);
}

void adamw8bit_update(std::span<const AdamWTensor> tensors, const AdamW8bitRange& r,
                      const AdamWConfig& cfg, double lr, float grad_scale, int64_t t) {
  MPITRON_REQUIRE(r.weights == nullptr, "the CPU backend trains in fp32 only");
  MPITRON_REQUIRE(r.begin % B == 0 && r.end % B == 0 && r.state_offset % B == 0 &&
                      r.state_offset <= r.begin && r.begin <= r.end,
                  "8-bit AdamW updates whole blocks of 256 flat elements");
  for (size_t k = 1; k < tensors.size(); ++k)
    MPITRON_REQUIRE(tensors[k].offset >= tensors[k - 1].offset + tensors[k - 1].numel,
                    "8-bit AdamW takes tensors in flat order");
  const AdamWStep c(cfg, lr, t);
  const float keep_decayed = 1.0f - c.lr_decay;
  const QuantizationMap& m_map = signed_dynamic_map();
  const QuantizationMap& v_map = unsigned_dynamic_map();
  const QuantizationBuckets &m_buckets = buckets_of(m_map), &v_buckets = buckets_of(v_map);
  const uint8_t m_zero = quantize_nearest(m_map, 0.0f), v_zero = quantize_nearest(v_map, 0.0f);
  const long blocks = long((r.end - r.begin) / B);
#pragma omp parallel for schedule(static)
  for (long b = 0; b < blocks; ++b) {
    const size_t first = r.begin + size_t(b) * B;  // flat position of the block's first element
    const size_t s = first - r.state_offset, k = s / B;
    uint8_t* m_codes = r.m_codes + s;
    uint8_t* v_codes = r.v_codes + s;
    float m[B], v[B];
    dequantize_block(m_map.data(), m_codes, r.m_absmax[k], m);
    dequantize_block(v_map.data(), v_codes, r.v_absmax[k], v);
    // The tensors overlapping the block, from the last one that starts at or before it.
    auto p = std::upper_bound(tensors.begin(), tensors.end(), first,
                              [](size_t f, const AdamWTensor& q) { return f < q.offset; });
    if (p != tensors.begin()) --p;
    for (; p != tensors.end() && p->offset < first + B; ++p) {
      const size_t begin = std::max(first, p->offset);
      const size_t end = std::min(first + B, p->offset + p->numel);
      if (begin >= end) continue;
      const float keep = p->weight_decay ? keep_decayed : 1.0f;
      float* w = r.params + (begin - r.p_offset);
      const float* g = r.grads + (begin - r.g_offset);
      const size_t j = begin - first;
      adamw_span(c, keep, w, g, m + j, v + j, end - begin, grad_scale);
    }
    const float m_absmax = block_absmax(m), v_absmax = block_absmax(v);
    r.m_absmax[k] = m_absmax;
    r.v_absmax[k] = v_absmax;
    if (m_absmax > 0.0f)
      quantize_block_by_buckets(m_buckets, m, m_absmax, m_codes);
    else
      std::fill_n(m_codes, B, m_zero);
    if (v_absmax > 0.0f)
      quantize_block_by_buckets(v_buckets, v, v_absmax, v_codes);
    else
      std::fill_n(v_codes, B, v_zero);
  }
}

}  // namespace mpitron::cpu
