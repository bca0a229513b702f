// The CUDA flash attention (layers/cuda/attention.cuh) against cpu::attention_forward/backward in
// float on random data: out, lse (computed here in double from q and k) and dqkv, causal and not,
// with and without a padding mask, for HS = 32, 64, 128, odd T and GPT-2's shape; padded keys get
// gradients exactly 0, every output element is written (buffers start as NaN), backward repeats
// bitwise, an unsupported head size is refused. Skips (GTEST_SKIP) on a machine with no device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "layers/attention.hpp"
#include "layers/cuda/attention.cuh"
#include "base/cuda_check.hpp"
#include "tests/cuda_test_support.hpp"

using namespace mpitron;
using cuda_test::DeviceArray;
using cuda_test::Stream;

namespace {

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

TEST(CudaAttention, Bf16MatchesCpuOnRoundedInputs) {
  SKIP_WITHOUT_DEVICE();
  check_all<__nv_bfloat16>(kBf16Tol, true);
}

TEST(CudaAttention, Fp16MatchesCpuOnRoundedInputs) {
  SKIP_WITHOUT_DEVICE();
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
