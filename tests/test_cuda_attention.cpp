// The CUDA flash attention (layers/cuda/attention.cuh) against cpu::attention_forward/backward in
// float on random data: out, lse (computed here in double from q and k) and dqkv, causal and not,
// with and without a padding mask, for HS = 32, 64, 128, odd T and GPT-2's shape; padded keys get
// gradients exactly 0, every output element is written (buffers start as NaN), backward repeats
// bitwise, an unsupported head size is refused; then the same for the tensor-core path of 16-bit
// storage, also against the reference kernels, and a timing print (CudaAttentionMma.TimingPrint).
// Skips (GTEST_SKIP) on a machine with no device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/cuda_check.hpp"
#include "layers/attention.hpp"
#include "layers/cuda/attention.cuh"
#include "layers/cuda/attention_mma.cuh"
#include "tests/cuda_test_support.hpp"

using namespace mpitron;
using cuda_test::DeviceArray;
using cuda_test::Stream;

namespace {

// The reference kernels for the guard's lifetime, then the previous choice.
struct ForceReference {
  bool before;
  explicit ForceReference(bool on = true) : before(cuda::detail::reference_attention_forced()) {
    cuda::detail::force_reference_attention(on);
  }
  ~ForceReference() { cuda::detail::force_reference_attention(before); }
};

float to_float(float x) {
  return x;
}
float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
float to_float(__half x) {
  return __half2float(x);
}
template <class F>
F from_float(float x);
template <>
float from_float<float>(float x) {
  return x;
}
template <>
__nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}
template <>
__half from_float<__half>(float x) {
  return __float2half(x);
}

template <class F>
std::vector<float> to_floats(const std::vector<F>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = to_float(x[i]);
  return y;
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist;
  std::vector<float> x(n);
  for (auto& e : x) e = dist(gen);
  return x;
}

struct Shape {
  int B, T, C, NH;
};

std::string describe(const Shape& s, bool causal, bool padded) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " C=" + std::to_string(s.C) +
         " NH=" + std::to_string(s.NH) + " HS=" + std::to_string(s.C / s.NH) +
         (causal ? " causal" : " bidirectional") + (padded ? " padded" : "");
}

// Padding lengths cycling T, T/2 + 1, 1 over the batch; a lone sequence gets T/2 + 1 so that the
// mask is exercised.
std::vector<int32_t> padding_lengths(int B, int T) {
  std::vector<int32_t> len(B);
  for (int b = 0; b < B; ++b) {
    const int k = B == 1 ? 1 : b % 3;
    len[b] = k == 0 ? T : (k == 1 ? T / 2 + 1 : 1);
  }
  return len;
}

// lse[b,h,i] = log sum_{j visible} exp(q_i . k_j / sqrt(HS)) in double, straight from qkv (the CPU
// layer keeps only the normalised probabilities).
std::vector<float> reference_lse(const std::vector<float>& qkv, const Shape& s, bool causal,
                                 const int32_t* lengths) {
  const int HS = s.C / s.NH, C3 = 3 * s.C;
  const double scale = 1.0 / std::sqrt(double(HS));
  std::vector<float> lse(size_t(s.B) * s.NH * s.T);
  std::vector<double> row(s.T);
  for (int b = 0; b < s.B; ++b) {
    const int L = lengths ? lengths[b] : s.T;
    for (int h = 0; h < s.NH; ++h)
      for (int i = 0; i < s.T; ++i) {
        const float* q = qkv.data() + (size_t(b) * s.T + i) * C3 + h * HS;
        const int vis = causal ? std::min(i + 1, L) : L;
        double mx = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < vis; ++j) {
          const float* k = qkv.data() + (size_t(b) * s.T + j) * C3 + s.C + h * HS;
          double dot = 0;
          for (int d = 0; d < HS; ++d) dot += double(q[d]) * double(k[d]);
          row[j] = dot * scale;
          mx = std::max(mx, row[j]);
        }
        double sum = 0;
        for (int j = 0; j < vis; ++j) sum += std::exp(row[j] - mx);
        lse[(size_t(b) * s.NH + h) * s.T + i] = float(mx + std::log(sum));
      }
  }
  return lse;
}

// Every element within tol * max(max|ref|, floor) of ref (NaN fails), reporting the count and the
// worst.
::testing::AssertionResult close(const char* what, const std::vector<float>& got,
                                 const std::vector<float>& ref, double tol, double floor = 0) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << what << ": size differs";
  double ref_max = floor;
  for (float x : ref) ref_max = std::max(ref_max, double(std::abs(x)));
  const double bound = tol * ref_max;
  size_t bad = 0, worst = 0;
  double worst_err = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - double(ref[i]));
    if (!(err <= bound)) {
      ++bad;
      if (!(err <= worst_err)) {  // NaN becomes the worst
        worst_err = err;
        worst = i;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << got.size() << " elements off by more than " << tol
         << " * max(max|cpu|, " << floor << ") = " << bound << "; worst at " << worst << ": gpu "
         << got[worst] << ", cpu " << ref[worst];
}

// Tolerances relative to max|cpu| of each tensor (for lse, to max(max|cpu|, 1): it is a logarithm,
// and with T = 1 a single small value would otherwise make the bound vanish).
struct Tolerance {
  double out, lse, dqkv;
};
// fp32: same inputs, fp32 arithmetic in another order (and the CPU's exp_fast, about 2 ulp);
// differences are ~1e-6 of the maximum.
constexpr Tolerance kFloatTol{1e-4, 1e-4, 1e-4};
// bf16 (8-bit significand, unit roundoff u = 2^-8 ~ 3.9e-3): the CPU runs in fp32 on the same
// rounded inputs, so the differences are the final rounding of out and dqkv (at most u |x| <=
// u max) plus, in backward, delta = rowsum(dout * out) taken from the bf16-rounded out (the CPU
// uses the exact fp32 P and dP). out: 2u; dqkv: 5u; lse is fp32 from the same inputs.
constexpr Tolerance kBf16Tol{8e-3, 1e-4, 2e-2};
// fp16 (11-bit significand, u = 2^-11 ~ 4.9e-4): the same reasoning, out 2u, dqkv 4u.
constexpr Tolerance kHalfTol{1e-3, 1e-4, 2e-3};

struct GpuResult {
  std::vector<float> out, lse, dqkv;
};

// Forward then backward on the device; outputs and scratch start as NaN (0xFF bytes) so that an
// element never written fails the comparison.
template <class F>
GpuResult run_gpu(const std::vector<F>& qkv, const std::vector<F>& dout, const Shape& s,
                  bool causal, const std::vector<int32_t>& lengths) {
  const size_t n_qkv = size_t(s.B) * s.T * 3 * s.C, n_out = size_t(s.B) * s.T * s.C,
               n_lse = size_t(s.B) * s.NH * s.T;
  Stream stream;
  DeviceArray<F> d_qkv(qkv), d_dout(dout), d_out(n_out), d_dqkv(n_qkv);
  DeviceArray<float> d_lse(n_lse), d_delta(n_lse);
  DeviceArray<int32_t> d_len(lengths);
  CUDA_CHECK(cudaMemsetAsync(d_out.ptr, 0xFF, n_out * sizeof(F), stream.s));
  CUDA_CHECK(cudaMemsetAsync(d_dqkv.ptr, 0xFF, n_qkv * sizeof(F), stream.s));
  CUDA_CHECK(cudaMemsetAsync(d_lse.ptr, 0xFF, n_lse * sizeof(float), stream.s));
  CUDA_CHECK(cudaMemsetAsync(d_delta.ptr, 0xFF, n_lse * sizeof(float), stream.s));
  const int32_t* len = lengths.empty() ? nullptr : d_len.ptr;
  cuda::attention_forward<F>(d_out.ptr, d_lse.ptr, d_qkv.ptr, s.B, s.T, s.C, s.NH, causal, len,
                             stream.s);
  cuda::attention_backward<F>(d_dqkv.ptr, d_delta.ptr, d_dout.ptr, d_out.ptr, d_qkv.ptr, d_lse.ptr,
                              s.B, s.T, s.C, s.NH, causal, len, stream.s);
  stream.sync();
  return {to_floats(d_out.download()), d_lse.download(), to_floats(d_dqkv.download())};
}

template <class F>
void check_against_cpu(const Shape& s, bool causal, bool padded, const Tolerance& tol) {
  SCOPED_TRACE(describe(s, causal, padded));
  const size_t n_qkv = size_t(s.B) * s.T * 3 * s.C, n_out = size_t(s.B) * s.T * s.C;
  const uint32_t seed = uint32_t(s.B * 1000003 + s.T * 1009 + s.C * 31 + s.NH);
  // Inputs rounded to F; the CPU sees exactly the values the device sees.
  std::vector<F> qkv(n_qkv), dout(n_out);
  {
    const std::vector<float> a = random_floats(n_qkv, seed), g = random_floats(n_out, seed + 1);
    for (size_t i = 0; i < n_qkv; ++i) qkv[i] = from_float<F>(a[i]);
    for (size_t i = 0; i < n_out; ++i) dout[i] = from_float<F>(g[i]);
  }
  const std::vector<float> qkv_f = to_floats(qkv), dout_f = to_floats(dout);
  const std::vector<int32_t> lengths = padded ? padding_lengths(s.B, s.T) : std::vector<int32_t>{};
  const int32_t* len = padded ? lengths.data() : nullptr;

  std::vector<float> out(n_out), att(size_t(s.B) * s.NH * s.T * s.T), dqkv(n_qkv), datt(att.size());
  cpu::attention_forward<float>(out.data(), att.data(), qkv_f.data(), s.B, s.T, s.C, s.NH, causal,
                                len);
  cpu::attention_backward<float>(dqkv.data(), datt.data(), dout_f.data(), qkv_f.data(), att.data(),
                                 s.B, s.T, s.C, s.NH, causal, len);
  const std::vector<float> lse = reference_lse(qkv_f, s, causal, len);

  const GpuResult gpu = run_gpu(qkv, dout, s, causal, lengths);
  EXPECT_TRUE(close("out", gpu.out, out, tol.out));
  EXPECT_TRUE(close("lse", gpu.lse, lse, tol.lse, 1.0));
  EXPECT_TRUE(close("dqkv", gpu.dqkv, dqkv, tol.dqkv));

  if (padded) {  // padded keys and values: gradient exactly 0
    const int HS = s.C / s.NH;
    size_t nonzero = 0;
    for (int b = 0; b < s.B; ++b)
      for (int j = lengths[b]; j < s.T; ++j)
        for (int c = s.C; c < 3 * s.C; ++c)
          nonzero += gpu.dqkv[(size_t(b) * s.T + j) * 3 * s.C + c] != 0.0f;
    EXPECT_EQ(nonzero, 0u) << "dK/dV elements of padded keys that are not exactly 0 (HS=" << HS
                           << ")";
  }
}

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all = {
      {2, 64, 128, 4},   // HS 32, T one tile
      {3, 100, 96, 3},   // HS 32, several tiles, T not a multiple of any tile
      {1, 37, 128, 2},   // HS 64, odd T
      {2, 130, 256, 2},  // HS 128, T just past two tiles
      {1, 1, 64, 1},     // a single token
  };
  return all;
}
constexpr Shape kGpt2{2, 1024, 768, 12};  // HS 64

template <class F>
void check_all(const Tolerance& tol, bool with_gpt2) {
  for (const Shape& s : shapes())
    for (bool causal : {true, false})
      for (bool padded : {false, true}) check_against_cpu<F>(s, causal, padded, tol);
  if (with_gpt2) {
    check_against_cpu<F>(kGpt2, true, false, tol);
    check_against_cpu<F>(kGpt2, true, true, tol);
  }
}

}  // namespace

TEST(CudaAttention, Float32MatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  check_all<float>(kFloatTol, true);
}

TEST(CudaAttention, Float32Gpt2BidirectionalMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  check_against_cpu<float>(kGpt2, false, false, kFloatTol);
  check_against_cpu<float>(kGpt2, false, true, kFloatTol);
}

// The 16-bit tests of this part run the reference kernels; the tensor-core path is tested below.
TEST(CudaAttention, Bf16MatchesCpuOnRoundedInputs) {
  SKIP_WITHOUT_DEVICE();
  ForceReference reference;
  check_all<__nv_bfloat16>(kBf16Tol, true);
}

TEST(CudaAttention, Fp16MatchesCpuOnRoundedInputs) {
  SKIP_WITHOUT_DEVICE();
  ForceReference reference;
  check_all<__half>(kHalfTol, false);
}

// Two forward + backward runs on the same inputs give the same bits (no atomics, fixed sum order).
TEST(CudaAttention, BackwardRepeatsBitwise) {
  SKIP_WITHOUT_DEVICE();
  for (const Shape& s : {Shape{2, 130, 256, 2}, Shape{3, 100, 96, 3}, kGpt2}) {
    SCOPED_TRACE(describe(s, true, true));
    const size_t n_qkv = size_t(s.B) * s.T * 3 * s.C, n_out = size_t(s.B) * s.T * s.C;
    const std::vector<float> qkv = random_floats(n_qkv, 7), dout = random_floats(n_out, 8);
    const std::vector<int32_t> lengths = padding_lengths(s.B, s.T);
    const GpuResult a = run_gpu(qkv, dout, s, true, lengths);
    const GpuResult b = run_gpu(qkv, dout, s, true, lengths);
    EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), n_out * sizeof(float)), 0) << "out";
    EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)), 0) << "lse";
    EXPECT_EQ(std::memcmp(a.dqkv.data(), b.dqkv.data(), n_qkv * sizeof(float)), 0) << "dqkv";
  }
}

// A sequence with no valid key (lengths[b] = 0, outside the contract, clamped on the device): its
// rows give out = 0, lse = -inf and gradients 0, never NaN; the other sequence is unaffected.
TEST(CudaAttention, RowsWithoutKeysGiveZerosNotNaN) {
  SKIP_WITHOUT_DEVICE();
  const Shape s{2, 70, 128, 2};
  const size_t n_qkv = size_t(s.B) * s.T * 3 * s.C, n_out = size_t(s.B) * s.T * s.C;
  const std::vector<float> qkv = random_floats(n_qkv, 21), dout = random_floats(n_out, 22);
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "bidirectional");
    const GpuResult g = run_gpu(qkv, dout, s, causal, {0, s.T});
    size_t bad = 0;
    for (size_t i = 0; i < n_out / 2; ++i) bad += g.out[i] != 0.0f;  // sequence 0
    for (size_t i = 0; i < g.lse.size() / 2; ++i) bad += !(std::isinf(g.lse[i]) && g.lse[i] < 0);
    for (size_t i = 0; i < n_qkv / 2; ++i) bad += g.dqkv[i] != 0.0f;
    for (size_t i = n_out / 2; i < n_out; ++i) bad += !std::isfinite(g.out[i]);  // sequence 1
    for (size_t i = g.lse.size() / 2; i < g.lse.size(); ++i) bad += !std::isfinite(g.lse[i]);
    for (size_t i = n_qkv / 2; i < n_qkv; ++i) bad += !std::isfinite(g.dqkv[i]);
    EXPECT_EQ(bad, 0u);
  }
}

// A head size the kernels do not take stops the job naming it (fail_at aborts without MPI).
TEST(CudaAttentionDeathTest, RefusesUnsupportedHeadSize) {
  SKIP_WITHOUT_DEVICE();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // C = 96, NH = 2: HS = 48. The shape is checked before any pointer is used.
  EXPECT_DEATH(cuda::attention_forward<float>(nullptr, nullptr, nullptr, 1, 8, 96, 2, true, nullptr,
                                              nullptr),
               "head size HS = C/NH = 48 is not supported");
  EXPECT_DEATH(
      cuda::attention_backward<__nv_bfloat16>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                              1, 8, 96, 2, false, nullptr, nullptr),
      "head size HS = C/NH = 48 is not supported");
}

// ---- tensor-core path (layers/cuda/attention_mma.cu) --------------------------------------------
// bf16/fp16 storage runs on mma.sync kernels from sm_80 on. Their results against (a) the CPU layer
// in float on the same 16-bit inputs and (b) the SIMT reference kernels (forced through
// cuda::detail::force_reference_attention), on shapes whose T is 1, below, at and past the 64-row
// tiles, with padding lengths that are not tile multiples (and 0 against the reference), for HS 32,
// 64 and 128. Random operands make any wrong fragment layout, mask or tile bound an O(1) error.

namespace {

bool device_has_mma() {
  int dev = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major >= 8;
}

#define SKIP_WITHOUT_MMA()                                                  \
  do {                                                                      \
    SKIP_WITHOUT_DEVICE();                                                  \
    if (!device_has_mma()) GTEST_SKIP() << "tensor-core path needs sm_80+"; \
  } while (0)

// sqrt(sum (got - ref)^2 / sum ref^2); NaN anywhere gives NaN (which fails any <= bound).
double rel_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// MPITRON_ATTENTION_TEST_VERBOSE set: every relative error is printed (to re-derive the bounds).
::testing::AssertionResult l2_within(const char* what, const std::vector<float>& got,
                                     const std::vector<float>& ref, double bound) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << what << ": size differs";
  const double e = rel_l2(got, ref);
  static const bool verbose = std::getenv("MPITRON_ATTENTION_TEST_VERBOSE") != nullptr;
  if (verbose)
    std::printf("  %-5s relative L2 %.3e (bound %.3e, %.2f of it)\n", what, e, bound, e / bound);
  if (e <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": relative L2 error " << e << " > " << bound;
}

// Lengths cycling over the batch: 2T/3 + 1 (not a tile multiple for the shapes below), T, then
// (with zero_ok) 0, a sequence with no key; a lone sequence gets T/2 + 1.
std::vector<int32_t> mma_lengths(int B, int T, bool zero_ok) {
  std::vector<int32_t> len(B);
  for (int b = 0; b < B; ++b) {
    const int k = B == 1 ? 3 : b % (zero_ok ? 3 : 2);
    len[b] = k == 0 ? 2 * T / 3 + 1 : (k == 1 ? T : (k == 2 ? 0 : T / 2 + 1));
    len[b] = std::min(len[b], T);
  }
  return len;
}

// Random inputs rounded to F, queries times qgain (a larger gain makes softmax peaked, so that
// the online max moves between key tiles).
template <class F>
void random_inputs(const Shape& s, uint32_t seed, float qgain, std::vector<F>& qkv,
                   std::vector<F>& dout) {
  const size_t n_qkv = size_t(s.B) * s.T * 3 * s.C, n_out = size_t(s.B) * s.T * s.C;
  const std::vector<float> a = random_floats(n_qkv, seed), g = random_floats(n_out, seed + 1);
  qkv.resize(n_qkv);
  dout.resize(n_out);
  for (size_t i = 0; i < n_qkv; ++i)
    qkv[i] = from_float<F>(i % (3 * size_t(s.C)) < size_t(s.C) ? a[i] * qgain : a[i]);
  for (size_t i = 0; i < n_out; ++i) dout[i] = from_float<F>(g[i]);
}

// Backward alone on given out and lse (so that two paths can be compared on the same inputs).
template <class F>
std::vector<float> run_backward(const std::vector<F>& qkv, const std::vector<F>& dout,
                                const std::vector<F>& out, const std::vector<float>& lse,
                                const Shape& s, bool causal, const std::vector<int32_t>& lengths) {
  const size_t n_qkv = size_t(s.B) * s.T * 3 * s.C;
  Stream stream;
  DeviceArray<F> d_qkv(qkv), d_dout(dout), d_out(out), d_dqkv(n_qkv);
  DeviceArray<float> d_lse(lse), d_delta(lse.size());
  DeviceArray<int32_t> d_len(lengths);
  CUDA_CHECK(cudaMemsetAsync(d_dqkv.ptr, 0xFF, n_qkv * sizeof(F), stream.s));
  cuda::attention_backward<F>(d_dqkv.ptr, d_delta.ptr, d_dout.ptr, d_out.ptr, d_qkv.ptr, d_lse.ptr,
                              s.B, s.T, s.C, s.NH, causal, lengths.empty() ? nullptr : d_len.ptr,
                              stream.s);
  stream.sync();
  return to_floats(d_dqkv.download());
}

// Relative L2 bounds in units of the format's unit roundoff u (bf16 2^-8, fp16 2^-11). Against the
// CPU in float on the same inputs the differences are: out rounded to F (<= u each), P rounded to
// F before P V (u per term, averaging), and in backward dS and P rounded to F plus delta taken
// from the rounded out; each contributes about u/sqrt(3) to a relative L2 error. Bounds: out 2u,
// dqkv 4u (about 3x the expected error; a wrong layout or mask gives O(1)). Element-wise bounds
// relative to max|cpu| (the `close` test of the reference path) catch a single bad row or tile.
struct MmaTolerance {
  double out_l2, dqkv_l2, out_max, dqkv_max;
};
constexpr double kBf16U = 1.0 / 256, kHalfU = 1.0 / 2048;
constexpr MmaTolerance kBf16Mma{2 * kBf16U, 4 * kBf16U, 5 * kBf16U, 8 * kBf16U};
constexpr MmaTolerance kHalfMma{2 * kHalfU, 4 * kHalfU, 6 * kHalfU, 10 * kHalfU};

const std::vector<Shape>& mma_shapes() {
  static const std::vector<Shape> all = {
      {2, 1, 128, 2},    // HS 64, a single token
      {3, 17, 192, 3},   // HS 64, T below one tile
      {2, 64, 128, 2},   // HS 64, exactly one tile
      {2, 257, 128, 2},  // HS 64, one past four tiles
      {2, 100, 256, 2},  // HS 128, T not a tile multiple
      {1, 257, 384, 3},  // HS 128, B = 1
      {3, 100, 64, 2},   // HS 32
      {2, 257, 96, 3},   // HS 32
  };
  return all;
}

template <class F>
void check_mma_against_cpu(const Shape& s, bool causal, bool padded, float qgain,
                           const MmaTolerance& tol) {
  SCOPED_TRACE(describe(s, causal, padded) + " qgain=" + std::to_string(qgain));
  const size_t n_qkv = size_t(s.B) * s.T * 3 * s.C, n_out = size_t(s.B) * s.T * s.C;
  std::vector<F> qkv, dout;
  random_inputs<F>(s, uint32_t(s.B * 7919 + s.T * 104729 + s.C * 13 + s.NH), qgain, qkv, dout);
  const std::vector<float> qkv_f = to_floats(qkv), dout_f = to_floats(dout);
  const std::vector<int32_t> lengths =
      padded ? mma_lengths(s.B, s.T, false) : std::vector<int32_t>{};
  const int32_t* len = padded ? lengths.data() : nullptr;

  std::vector<float> out(n_out), att(size_t(s.B) * s.NH * s.T * s.T), dqkv(n_qkv), datt(att.size());
  cpu::attention_forward<float>(out.data(), att.data(), qkv_f.data(), s.B, s.T, s.C, s.NH, causal,
                                len);
  cpu::attention_backward<float>(dqkv.data(), datt.data(), dout_f.data(), qkv_f.data(), att.data(),
                                 s.B, s.T, s.C, s.NH, causal, len);
  const std::vector<float> lse = reference_lse(qkv_f, s, causal, len);

  const GpuResult gpu = run_gpu(qkv, dout, s, causal, lengths);
  EXPECT_TRUE(l2_within("out", gpu.out, out, tol.out_l2));
  EXPECT_TRUE(l2_within("dqkv", gpu.dqkv, dqkv, tol.dqkv_l2));
  EXPECT_TRUE(close("out", gpu.out, out, tol.out_max));
  EXPECT_TRUE(close("lse", gpu.lse, lse, 1e-4, 1.0));
  EXPECT_TRUE(close("dqkv", gpu.dqkv, dqkv, tol.dqkv_max));
  // Each third (q, k, v) separately: a small one (dq of a peaked softmax) is not hidden by the
  // others.
  for (int part = 0; part < 3; ++part) {
    std::vector<float> g, r;
    for (size_t i = 0; i < n_qkv; ++i)
      if (int(i % (3 * size_t(s.C)) / s.C) == part) {
        g.push_back(gpu.dqkv[i]);
        r.push_back(dqkv[i]);
      }
    EXPECT_TRUE(l2_within(part == 0 ? "dq" : (part == 1 ? "dk" : "dv"), g, r, tol.dqkv_l2));
  }
  if (padded) {
    size_t nonzero = 0;
    for (int b = 0; b < s.B; ++b)
      for (int j = lengths[b]; j < s.T; ++j)
        for (int c = s.C; c < 3 * s.C; ++c)
          nonzero += gpu.dqkv[(size_t(b) * s.T + j) * 3 * s.C + c] != 0.0f;
    EXPECT_EQ(nonzero, 0u) << "dK/dV elements of padded keys that are not exactly 0";
  }
}

template <class F>
void check_mma_all_against_cpu(const MmaTolerance& tol) {
  ASSERT_FALSE(cuda::detail::reference_attention_forced()) << "MPITRON_ATTENTION=reference is set";
  for (const Shape& s : mma_shapes())
    for (bool causal : {true, false})
      for (bool padded : {false, true}) check_mma_against_cpu<F>(s, causal, padded, 1.f, tol);
  check_mma_against_cpu<F>(Shape{2, 200, 128, 2}, true, true, 4.f, tol);  // peaked softmax
  check_mma_against_cpu<F>(Shape{2, 200, 256, 2}, false, false, 4.f, tol);
}

// The tensor-core path against the reference kernels on the same inputs, lengths 0 included:
// forward, and backward fed the reference's out and lse (so only the paths differ).
template <class F>
void check_mma_against_reference(double u) {
  for (const Shape& s :
       {Shape{3, 130, 128, 2}, Shape{3, 70, 256, 2}, Shape{3, 45, 64, 2}, Shape{2, 1024, 768, 12}})
    for (bool causal : {true, false})
      for (bool padded : {false, true}) {
        SCOPED_TRACE(describe(s, causal, padded));
        std::vector<F> qkv, dout;
        random_inputs<F>(s, uint32_t(s.T * 31 + s.C), 1.f, qkv, dout);
        const std::vector<int32_t> lengths =
            padded ? mma_lengths(s.B, s.T, true) : std::vector<int32_t>{};
        GpuResult ref, mma;
        {
          ForceReference on;
          ref = run_gpu(qkv, dout, s, causal, lengths);
        }
        mma = run_gpu(qkv, dout, s, causal, lengths);
        EXPECT_TRUE(l2_within("out", mma.out, ref.out, 2 * u));
        EXPECT_TRUE(close("out", mma.out, ref.out, 5 * u));
        size_t lse_bad = 0;  // same -inf rows; finite ones within 1e-5 relative
        for (size_t i = 0; i < ref.lse.size(); ++i)
          lse_bad += std::isinf(ref.lse[i]) ? !(std::isinf(mma.lse[i]) && mma.lse[i] < 0)
                                            : !(std::abs(mma.lse[i] - ref.lse[i]) <=
                                                1e-5 * std::max(1.f, std::abs(ref.lse[i])));
        EXPECT_EQ(lse_bad, 0u) << "lse entries that differ";

        std::vector<F> out16(ref.out.size());
        for (size_t i = 0; i < out16.size(); ++i) out16[i] = from_float<F>(ref.out[i]);  // exact
        std::vector<float> dref, dmma;
        {
          ForceReference on;
          dref = run_backward(qkv, dout, out16, ref.lse, s, causal, lengths);
        }
        dmma = run_backward(qkv, dout, out16, ref.lse, s, causal, lengths);
        EXPECT_TRUE(l2_within("dqkv", dmma, dref, 3 * u));
        EXPECT_TRUE(close("dqkv", dmma, dref, 8 * u));
        // Sequences of length 0: out 0, gradients 0, exactly, on both paths.
        if (padded)
          for (int b = 0; b < s.B; ++b)
            if (lengths[b] == 0) {
              size_t bad = 0;
              for (size_t i = size_t(b) * s.T * s.C; i < size_t(b + 1) * s.T * s.C; ++i)
                bad += mma.out[i] != 0.0f;
              for (size_t i = size_t(b) * s.T * 3 * s.C; i < size_t(b + 1) * s.T * 3 * s.C; ++i)
                bad += dmma[i] != 0.0f;
              EXPECT_EQ(bad, 0u) << "sequence " << b << " (length 0): nonzero out or dqkv";
            }
      }
}

template <class F>
void check_mma_repeats_bitwise() {
  for (const Shape& s : {Shape{2, 257, 256, 2}, Shape{3, 100, 192, 3}, Shape{2, 1024, 768, 12}}) {
    SCOPED_TRACE(describe(s, true, true));
    std::vector<F> qkv, dout;
    random_inputs<F>(s, 5, 1.f, qkv, dout);
    const std::vector<int32_t> lengths = mma_lengths(s.B, s.T, true);
    const GpuResult a = run_gpu(qkv, dout, s, true, lengths);
    const GpuResult b = run_gpu(qkv, dout, s, true, lengths);
    EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(float)), 0) << "out";
    EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)), 0) << "lse";
    EXPECT_EQ(std::memcmp(a.dqkv.data(), b.dqkv.data(), a.dqkv.size() * sizeof(float)), 0)
        << "dqkv";
  }
}

}  // namespace

// On sm_80+ the tensor-core kernels must be the ones that run (else every test below would only
// test the reference again).
TEST(CudaAttentionMma, AvailableOnSm80AndLater) {
  SKIP_WITHOUT_MMA();
  for (int hs : {32, 64, 128}) EXPECT_TRUE(cuda::detail::attention_mma_available(hs)) << hs;
  EXPECT_FALSE(cuda::detail::attention_mma_available(48));
}

TEST(CudaAttentionMma, Bf16MatchesCpu) {
  SKIP_WITHOUT_MMA();
  check_mma_all_against_cpu<__nv_bfloat16>(kBf16Mma);
}

TEST(CudaAttentionMma, Fp16MatchesCpu) {
  SKIP_WITHOUT_MMA();
  check_mma_all_against_cpu<__half>(kHalfMma);
}

TEST(CudaAttentionMma, Bf16MatchesReferenceKernels) {
  SKIP_WITHOUT_MMA();
  check_mma_against_reference<__nv_bfloat16>(kBf16U);
}

TEST(CudaAttentionMma, Fp16MatchesReferenceKernels) {
  SKIP_WITHOUT_MMA();
  check_mma_against_reference<__half>(kHalfU);
}

TEST(CudaAttentionMma, BackwardRepeatsBitwise) {
  SKIP_WITHOUT_MMA();
  check_mma_repeats_bitwise<__nv_bfloat16>();
  check_mma_repeats_bitwise<__half>();
}

// Milliseconds of GPT-2 124M's attention (B16, T1024, NH12, HS64, bf16, causal), tensor cores
// against the reference kernels; prints only, asserts nothing about time.
TEST(CudaAttentionMma, TimingPrint) {
  SKIP_WITHOUT_MMA();
  const Shape s{16, 1024, 768, 12};
  using F = __nv_bfloat16;
  std::vector<F> qkv, dout;
  random_inputs<F>(s, 3, 1.f, qkv, dout);
  const size_t n_qkv = qkv.size(), n_out = dout.size(), n_lse = size_t(s.B) * s.NH * s.T;
  Stream stream;
  DeviceArray<F> d_qkv(qkv), d_dout(dout), d_out(n_out), d_dqkv(n_qkv);
  DeviceArray<float> d_lse(n_lse), d_delta(n_lse);
  cudaEvent_t e0, e1, e2;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  CUDA_CHECK(cudaEventCreate(&e2));
  for (bool reference : {false, true}) {
    ForceReference guard(reference);
    const int iters = reference ? 3 : 20;
    float fwd = 0, bwd = 0;
    for (int it = -1; it < iters; ++it) {  // it = -1: warm-up
      CUDA_CHECK(cudaEventRecord(e0, stream.s));
      cuda::attention_forward<F>(d_out.ptr, d_lse.ptr, d_qkv.ptr, s.B, s.T, s.C, s.NH, true,
                                 nullptr, stream.s);
      CUDA_CHECK(cudaEventRecord(e1, stream.s));
      cuda::attention_backward<F>(d_dqkv.ptr, d_delta.ptr, d_dout.ptr, d_out.ptr, d_qkv.ptr,
                                  d_lse.ptr, s.B, s.T, s.C, s.NH, true, nullptr, stream.s);
      CUDA_CHECK(cudaEventRecord(e2, stream.s));
      CUDA_CHECK(cudaEventSynchronize(e2));
      float a = 0, b = 0;
      CUDA_CHECK(cudaEventElapsedTime(&a, e0, e1));
      CUDA_CHECK(cudaEventElapsedTime(&b, e1, e2));
      if (it >= 0) {
        fwd += a;
        bwd += b;
      }
    }
    std::printf(
        "attention B16 T1024 NH12 HS64 bf16 causal, %s: forward %.3f ms, backward %.3f ms\n",
        reference ? "reference SIMT" : "tensor cores", fwd / iters, bwd / iters);
  }
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  CUDA_CHECK(cudaEventDestroy(e2));
}
