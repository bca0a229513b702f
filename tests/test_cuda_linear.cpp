// The CUDA linear layer (layers/cuda/linear) against the CPU's (layers/cpu/linear, float) on random
// data, for float, bf16 and f16 storage: forward with and without bias, backward with dinp and
// dbias present or skipped, += accumulation of the parameter gradients from non-zero values, the
// fused linear + GELU against cpu linear + cpu gelu, both on the cuBLASLt path (aligned pointers)
// and on the cublasGemmEx fallback (pointers one element off 16 bytes), and the same bits from two
// identical calls. Every case skips without a device.
//
// Tolerances, relative to the largest |cpu| element of each tensor:
// fp32: 1e-4, a matrix product summed in another order (no TF32 anywhere).
// bf16/f16: the CPU runs in fp32 on exactly the device's inputs (rounded to T, widened), so the
// products are exact in fp32 on both sides (8- or 11-bit significands) and only the order of the
// fp32 sums (1e-4 as above) and the one rounding of a T output differ (the bias is added in fp32
// before it on every path): round-to-nearest errs by at most the unit roundoff u = 2^-8 (bf16) or
// 2^-11 (f16) of the element, so by at most u max|cpu|. The float parameter gradients keep 1e-4.
// GELU output, relative to max|pre|: the pre-activation's error times GELU's largest slope 1.13,
// plus the output's rounding u, plus 5e-4 for the epilogue's tanh (cuBLASLt may use the hardware
// tanh.approx.f32, relative error 2^-11: 0.5 |x| 2^-11 < 2.5e-4 |x|); the unfused path takes GELU
// of the rounded pre (1.13 u more). 2.2 u + 5e-4 bounds both.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/cuda_check.hpp"
#include "layers/cuda/linear.cuh"
#include "layers/gelu.hpp"
#include "layers/linear.hpp"
#include "tests/cuda_test_support.hpp"

using namespace mpitron;
using cuda_test::DeviceArray;
using cuda_test::Stream;

namespace {

float to_f(float x) {
  return x;
}
float to_f(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
float to_f(__half x) {
  return __half2float(x);
}

template <class T>
T from_f(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16(x);
  else
    return __float2half(x);
}

// Unit roundoff of T (0 for float: its outputs are held to the fp32 tolerance alone).
template <class T>
constexpr double kRound = std::is_same_v<T, float>           ? 0.0
                          : std::is_same_v<T, __nv_bfloat16> ? 0x1p-8
                                                             : 0x1p-11;
constexpr double kSum = 1e-4;  // fp32 sums in another order

// Values of T (rounded from N(0, scale^2)) and the same values as float.
template <class T>
std::pair<std::vector<T>, std::vector<float>> random_values(size_t n, uint32_t seed,
                                                            float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<T> t(n);
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) {
    t[i] = from_f<T>(dist(gen));
    f[i] = to_f(t[i]);
  }
  return {t, f};
}

template <class T>
std::vector<float> widen(const std::vector<T>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = to_f(v[i]);
  return f;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

// max |got - want| / scale (scale 0: the absolute difference).
double relative_error(const std::vector<float>& got, const std::vector<float>& want, double scale) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    err = std::max(err, double(std::fabs(got[i] - want[i])));
  return scale > 0 ? err / scale : err;
}
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  return relative_error(got, want, max_abs(want));
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// n elements of T on the device, `offset` elements into their allocation: offset 1 puts them off
// 16-byte alignment (cudaMalloc gives 256), which the cuBLASLt path refuses.
template <class T>
struct Placed {
  DeviceArray<T> mem;
  size_t offset, n;
  T* ptr;
  Placed(size_t count, size_t off) : mem(count + off), offset(off), n(count), ptr(mem.ptr + off) {}
  Placed(const std::vector<T>& host, size_t off) : Placed(host.size(), off) { upload(host); }
  void upload(const std::vector<T>& host) {
    std::vector<T> padded(offset, from_f<T>(0.0f));
    padded.insert(padded.end(), host.begin(), host.end());
    mem.upload(padded);
  }
  std::vector<T> download() const {
    const std::vector<T> all = mem.download();
    return std::vector<T>(all.begin() + ptrdiff_t(offset), all.end());
  }
};

bool compute_capability_at_least(int major) {
  int device = 0, have = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&have, cudaDevAttrComputeCapabilityMajor, device));
  return have >= major;
}

struct Shape {
  int N, IC, OC;
};
// Awkward shapes (N = 1, IC = 1, nothing a multiple of 8) and ones the cuBLASLt path takes when
// aligned: GPT-2's c_attn (768 -> 2304), N = 1, N = 130.
const Shape kShapes[] = {{1, 3, 5},       {7, 1, 9},     {37, 53, 29},
                         {64, 768, 2304}, {1, 768, 768}, {130, 256, 384}};

std::string describe(const Shape& sh) {
  return "N=" + std::to_string(sh.N) + " IC=" + std::to_string(sh.IC) +
         " OC=" + std::to_string(sh.OC);
}

// Whether IC and OC are multiples of 16 bytes of T (the cuBLASLt path's leading dimensions).
template <class T>
bool lt_shape(const Shape& sh) {
  const int per16 = int(16 / sizeof(T));
  return sh.IC % per16 == 0 && sh.OC % per16 == 0;
}

struct Options {
  bool bias = true, dinp = true, dbias = true;
  bool dweight = true;  // false: dweight and inp nullptr, as tensor parallelism's input product
  size_t offset = 0;    // elements every device pointer sits into its allocation
};

template <class T>
void check_linear(const Shape& sh, const Options& o) {
  SCOPED_TRACE(describe(sh) + (o.bias ? " bias" : "") + (o.dinp ? " dinp" : "") +
               (o.dbias ? " dbias" : "") + (o.dweight ? " dweight" : "") +
               " offset=" + std::to_string(o.offset));
  const int N = sh.N, IC = sh.IC, OC = sh.OC;
  auto [inp_t, inp] = random_values<T>(size_t(N) * IC, 1);
  auto [w_t, w] = random_values<T>(size_t(OC) * IC, 2, 0.2f);
  auto [b_t, b] = random_values<T>(size_t(OC), 3);
  auto [dout_t, dout] = random_values<T>(size_t(N) * OC, 4);
  auto [dw0_t, dw0] = random_values<float>(size_t(OC) * IC, 5);  // += starts from these
  auto [db0_t, db0] = random_values<float>(size_t(OC), 6);

  std::vector<float> out_ref(size_t(N) * OC), dinp_ref(size_t(N) * IC), dw_ref = dw0, db_ref = db0;
  cpu::linear_forward(out_ref.data(), inp.data(), w.data(), o.bias ? b.data() : nullptr, N, IC, OC);
  cpu::linear_backward(o.dinp ? dinp_ref.data() : nullptr, o.dweight ? dw_ref.data() : nullptr,
                       o.dbias ? db_ref.data() : nullptr, dout.data(), inp.data(), w.data(), N, IC,
                       OC);

  Stream s;
  const size_t off = o.offset;
  Placed<T> d_inp(inp_t, off), d_w(w_t, off), d_b(b_t, off), d_dout(dout_t, off),
      d_out(size_t(N) * OC, off), d_dinp(size_t(N) * IC, off);
  Placed<float> d_dw(dw0, off), d_db(db0, off);
  const T* bias = o.bias ? d_b.ptr : nullptr;
  T* dinp = o.dinp ? d_dinp.ptr : nullptr;
  float* dbias = o.dbias ? d_db.ptr : nullptr;
  float* dweight = o.dweight ? d_dw.ptr : nullptr;
  const T* saved_inp = o.dweight ? d_inp.ptr : nullptr;  // only the weight product reads it

  cuda::linear_forward(d_out.ptr, d_inp.ptr, d_w.ptr, bias, N, IC, OC, s.s);
  const bool used_lt = cuda::linear_forward_used_lt();
  cuda::linear_backward(dinp, dweight, dbias, d_dout.ptr, saved_inp, d_w.ptr, N, IC, OC, s.s);
  s.sync();
  if (off % (16 / sizeof(T)) != 0) {
    EXPECT_FALSE(used_lt) << "misaligned pointers took cuBLASLt";
  }
  // The fast path: plain and bias epilogues that cuBLASLt offers on any sm_80+ device. Where this
  // fails the results are still right (the fallback), only slower.
  if (off == 0 && N > 1 && lt_shape<T>(sh) && compute_capability_at_least(8)) {
    EXPECT_TRUE(used_lt) << "cuBLASLt found no algorithm: linear_forward fell back to GemmEx";
  }

  const double act_tol = kRound<T> + kSum;
  EXPECT_LE(relative_error(widen(d_out.download()), out_ref), act_tol) << "out";
  if (o.dinp) {
    EXPECT_LE(relative_error(widen(d_dinp.download()), dinp_ref), act_tol) << "dinp";
  }
  EXPECT_LE(relative_error(d_dw.download(), dw_ref), kSum) << "dweight (+=, or untouched)";
  EXPECT_LE(relative_error(d_db.download(), db_ref), kSum) << "dbias (+=, or untouched)";

  // The same calls again from the same start: the same bits.
  const std::vector<T> out_first = d_out.download(), dinp_first = d_dinp.download();
  const std::vector<float> dw_first = d_dw.download(), db_first = d_db.download();
  d_out.upload(std::vector<T>(size_t(N) * OC, from_f<T>(0.0f)));
  d_dinp.upload(std::vector<T>(size_t(N) * IC, from_f<T>(0.0f)));
  d_dw.upload(dw0);
  d_db.upload(db0);
  cuda::linear_forward(d_out.ptr, d_inp.ptr, d_w.ptr, bias, N, IC, OC, s.s);
  cuda::linear_backward(dinp, dweight, dbias, d_dout.ptr, saved_inp, d_w.ptr, N, IC, OC, s.s);
  s.sync();
  EXPECT_TRUE(same_bits(out_first, d_out.download())) << "out repeat";
  if (o.dinp) {
    EXPECT_TRUE(same_bits(dinp_first, d_dinp.download())) << "dinp repeat";
  }
  EXPECT_TRUE(same_bits(dw_first, d_dw.download())) << "dweight repeat";
  EXPECT_TRUE(same_bits(db_first, d_db.download())) << "dbias repeat";
}

template <class T>
void check_linear_gelu(const Shape& sh, bool with_bias, size_t off) {
  SCOPED_TRACE(describe(sh) + (with_bias ? " bias" : "") + " offset=" + std::to_string(off));
  const int N = sh.N, IC = sh.IC, OC = sh.OC;
  // Weights ~ 1/sqrt(IC): pre-activations of order 1, where GELU bends.
  auto [inp_t, inp] = random_values<T>(size_t(N) * IC, 11);
  auto [w_t, w] = random_values<T>(size_t(OC) * IC, 12, 1.0f / std::sqrt(float(IC)));
  auto [b_t, b] = random_values<T>(size_t(OC), 13, 0.5f);
  std::vector<float> pre_ref(size_t(N) * OC), out_ref(size_t(N) * OC);
  cpu::linear_forward(pre_ref.data(), inp.data(), w.data(), with_bias ? b.data() : nullptr, N, IC,
                      OC);
  cpu::gelu_forward(out_ref.data(), pre_ref.data(), pre_ref.size());

  Stream s1, s2;
  Placed<T> d_inp(inp_t, off), d_w(w_t, off), d_b(b_t, off), d_pre(size_t(N) * OC, off),
      d_out(size_t(N) * OC, off);
  const T* bias = with_bias ? d_b.ptr : nullptr;
  cuda::linear_gelu_forward(d_pre.ptr, d_out.ptr, d_inp.ptr, d_w.ptr, bias, N, IC, OC, s1.s);
  const bool used_lt = cuda::linear_forward_used_lt();
  s1.sync();
  if (off % (16 / sizeof(T)) != 0) {
    EXPECT_FALSE(used_lt) << "misaligned pointers took cuBLASLt";
  }
  std::cout << "  [" << describe(sh) << (with_bias ? " bias" : "") << " offset=" << off
            << "] linear_gelu_forward: " << (used_lt ? "cuBLASLt epilogue" : "GemmEx + kernels")
            << "\n";

  const std::vector<T> pre_first = d_pre.download(), out_first = d_out.download();
  EXPECT_LE(relative_error(widen(pre_first), pre_ref), kRound<T> + kSum) << "pre";
  EXPECT_LE(relative_error(widen(out_first), out_ref, max_abs(pre_ref)), 2.2 * kRound<T> + 5e-4)
      << "out";

  // Again on another stream (the thread's streams share the cuBLASLt workspace): the same bits.
  d_pre.upload(std::vector<T>(size_t(N) * OC, from_f<T>(0.0f)));
  d_out.upload(std::vector<T>(size_t(N) * OC, from_f<T>(0.0f)));
  cuda::linear_gelu_forward(d_pre.ptr, d_out.ptr, d_inp.ptr, d_w.ptr, bias, N, IC, OC, s2.s);
  s2.sync();
  EXPECT_TRUE(same_bits(pre_first, d_pre.download())) << "pre repeat";
  EXPECT_TRUE(same_bits(out_first, d_out.download())) << "out repeat";
}

template <class T>
class CudaLinear : public ::testing::Test {};
using StorageTypes = ::testing::Types<float, __nv_bfloat16, __half>;
TYPED_TEST_SUITE(CudaLinear, StorageTypes);

TYPED_TEST(CudaLinear, ForwardAndBackwardMatchTheCpu) {
  SKIP_WITHOUT_DEVICE();
  for (const Shape& sh : kShapes) check_linear<TypeParam>(sh, Options{});
}

TYPED_TEST(CudaLinear, NoBiasAndSkippedGradients) {
  SKIP_WITHOUT_DEVICE();
  Options none;
  none.bias = none.dinp = none.dbias = false;
  for (const Shape& sh : kShapes) check_linear<TypeParam>(sh, none);
  Options no_dinp, no_bias_dbias, input_only;
  no_dinp.dinp = false;
  no_bias_dbias.bias = no_bias_dbias.dbias = false;
  input_only.bias = input_only.dbias = input_only.dweight = false;  // the TP input product
  for (const Shape& sh : {kShapes[2], kShapes[3]}) {
    check_linear<TypeParam>(sh, no_dinp);
    check_linear<TypeParam>(sh, no_bias_dbias);
    check_linear<TypeParam>(sh, input_only);
  }
}

TYPED_TEST(CudaLinear, MisalignedPointersTakeTheFallback) {
  SKIP_WITHOUT_DEVICE();
  Options off;
  off.offset = 1;
  for (const Shape& sh : kShapes) check_linear<TypeParam>(sh, off);
  off.bias = false;
  check_linear<TypeParam>(kShapes[3], off);
}

TYPED_TEST(CudaLinear, FusedGeluMatchesLinearThenGelu) {
  SKIP_WITHOUT_DEVICE();
  for (const Shape& sh : kShapes) {
    check_linear_gelu<TypeParam>(sh, true, 0);
    check_linear_gelu<TypeParam>(sh, true, 1);
  }
  check_linear_gelu<TypeParam>(kShapes[3], false, 0);
  check_linear_gelu<TypeParam>(kShapes[3], false, 1);
  check_linear_gelu<TypeParam>(kShapes[2], false, 0);
}

// The chunked bias gradient (linear_backward's) against the simple kernel it replaced and a
// double-precision sum: the same column sums in another fp32 order (kSum), += onto the values
// there, the same bits on a repeat, and shapes around the chunk size (256 rows) and the 32-column
// tiles.
TYPED_TEST(CudaLinear, ChunkedBiasGradientMatchesTheReference) {
  SKIP_WITHOUT_DEVICE();
  using T = TypeParam;
  Stream s;
  for (const auto& [N, OC] : std::vector<std::pair<int, int>>{
           {1, 5}, {255, 33}, {256, 768}, {257, 64}, {1000, 31}, {16384, 768}, {8192, 3072}}) {
    SCOPED_TRACE("N=" + std::to_string(N) + " OC=" + std::to_string(OC));
    const auto [dout, dout_f] = random_values<T>(size_t(N) * OC, 11u + uint32_t(N));
    const auto [db0_t, db0] = random_values<float>(size_t(OC), 12u);
    std::vector<float> expect(OC);
    for (int c = 0; c < OC; ++c) {
      double acc = db0[c];
      for (int r = 0; r < N; ++r) acc += dout_f[size_t(r) * OC + c];
      expect[c] = float(acc);
    }
    DeviceArray<T> d_dout(dout);
    DeviceArray<float> fast(db0), ref(db0), again(db0);
    cuda::bias_gradient(fast.ptr, d_dout.ptr, N, OC, s.s);
    cuda::bias_gradient_reference(ref.ptr, d_dout.ptr, N, OC, s.s);
    cuda::bias_gradient(again.ptr, d_dout.ptr, N, OC, s.s);
    s.sync();
    const std::vector<float> f = fast.download(), r = ref.download();
    EXPECT_LE(relative_error(f, expect), kSum) << "chunked against double";
    EXPECT_LE(relative_error(r, expect), kSum) << "reference against double";
    EXPECT_LE(relative_error(f, r), kSum) << "chunked against reference";
    EXPECT_TRUE(same_bits(f, again.download())) << "repeat";
  }
}

}  // namespace
