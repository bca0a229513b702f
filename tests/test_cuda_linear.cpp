// The CUDA linear layer (layers/cuda/linear) against the CPU's (layers/cpu/linear, float) on random
// data, for float, bf16 and f16 storage: forward with and without bias, backward with dinp and
// dbias present or skipped, += accumulation of the parameter gradients from non-zero values, the
// fused bias-GELU forward against linear + gelu, and the same bits from two identical calls.
// Skips (GTEST_SKIP) on a machine with no device.
//
// Tolerances are relative to the largest |cpu| element of each tensor: fp32 1e-4 (a matrix
// product summed in another order; no TF32). For bf16/f16 the CPU runs in fp32 on exactly the
// device's inputs (rounded to T and widened): a T output then differs by its own rounding, at most
// the unit roundoff u of T (bf16 2^-8, f16 2^-11) times max|cpu|, plus the fp32 term; the float
// parameter gradients keep 1e-4 (their products of T inputs are exact in fp32, only the order of
// the sums differs). The bias is added to the rounded product, a second rounding: 2u for out.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "layers/cuda/linear.cuh"
#include "layers/gelu.hpp"
#include "layers/linear.hpp"
#include "src/cuda/cuda_check.hpp"
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

template <class T>
constexpr double kRound = std::is_same_v<T, float>           ? 0.0
                          : std::is_same_v<T, __nv_bfloat16> ? 0x1p-8
                                                             : 0x1p-11;

// Values of T (rounded from N(0, scale)) and the same values as float.
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

// max |got - want| / max |want| (want all zero: the absolute difference).
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double scale = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, double(std::fabs(want[i])));
    err = std::max(err, double(std::fabs(got[i] - want[i])));
  }
  return scale > 0 ? err / scale : err;
}

struct Shape {
  int N, IC, OC;
};
const Shape kShapes[] = {{1, 3, 5}, {7, 1, 9}, {37, 53, 29}, {64, 128, 384}, {130, 768, 2304}};

template <class T>
void check_linear(const Shape& sh, bool with_bias, bool with_dinp, bool with_dbias) {
  SCOPED_TRACE("N=" + std::to_string(sh.N) + " IC=" + std::to_string(sh.IC) +
               " OC=" + std::to_string(sh.OC) + (with_bias ? " bias" : "") +
               (with_dinp ? " dinp" : "") + (with_dbias ? " dbias" : ""));
  const int N = sh.N, IC = sh.IC, OC = sh.OC;
  auto [inp_t, inp] = random_values<T>(size_t(N) * IC, 1);
  auto [w_t, w] = random_values<T>(size_t(OC) * IC, 2, 0.2f);
  auto [b_t, b] = random_values<T>(size_t(OC), 3);
  auto [dout_t, dout] = random_values<T>(size_t(N) * OC, 4);
  auto [dw0_t, dw0] = random_values<float>(size_t(OC) * IC, 5);  // += starts from these
  auto [db0_t, db0] = random_values<float>(size_t(OC), 6);

  std::vector<float> out_ref(size_t(N) * OC), dinp_ref(size_t(N) * IC), dw_ref = dw0, db_ref = db0;
  cpu::linear_forward(out_ref.data(), inp.data(), w.data(), with_bias ? b.data() : nullptr, N, IC,
                      OC);
  cpu::linear_backward(with_dinp ? dinp_ref.data() : nullptr, dw_ref.data(),
                       with_dbias ? db_ref.data() : nullptr, dout.data(), inp.data(), w.data(), N,
                       IC, OC);

  Stream s;
  DeviceArray<T> d_inp(inp_t), d_w(w_t), d_b(b_t), d_dout(dout_t), d_out(size_t(N) * OC),
      d_dinp(size_t(N) * IC);
  DeviceArray<float> d_dw(dw0), d_db(db0);
  cuda::linear_forward(d_out.ptr, d_inp.ptr, d_w.ptr, with_bias ? d_b.ptr : nullptr, N, IC, OC,
                       s.s);
  cuda::linear_backward(with_dinp ? d_dinp.ptr : nullptr, d_dw.ptr, with_dbias ? d_db.ptr : nullptr,
                        d_dout.ptr, d_inp.ptr, d_w.ptr, N, IC, OC, s.s);
  s.sync();
  const double out_tol = 2 * kRound<T> + 1e-4, act_tol = kRound<T> + 1e-4;
  EXPECT_LE(relative_error(widen(d_out.download()), out_ref), out_tol) << "out";
  if (with_dinp) EXPECT_LE(relative_error(widen(d_dinp.download()), dinp_ref), act_tol) << "dinp";
  EXPECT_LE(relative_error(d_dw.download(), dw_ref), 1e-4) << "dweight (+=)";
  EXPECT_LE(relative_error(d_db.download(), db_ref), 1e-4) << "dbias (+=, or untouched)";

  // The same call again from the same start: the same bits.
  const std::vector<float> dw_first = d_dw.download(), db_first = d_db.download();
  d_dw.upload(dw0);
  d_db.upload(db0);
  cuda::linear_backward(with_dinp ? d_dinp.ptr : nullptr, d_dw.ptr, with_dbias ? d_db.ptr : nullptr,
                        d_dout.ptr, d_inp.ptr, d_w.ptr, N, IC, OC, s.s);
  s.sync();
  EXPECT_EQ(0, std::memcmp(dw_first.data(), d_dw.download().data(), dw_first.size() * 4));
  EXPECT_EQ(0, std::memcmp(db_first.data(), d_db.download().data(), db_first.size() * 4));
}

template <class T>
void check_linear_gelu(const Shape& sh) {
  SCOPED_TRACE("N=" + std::to_string(sh.N) + " IC=" + std::to_string(sh.IC) +
               " OC=" + std::to_string(sh.OC));
  const int N = sh.N, IC = sh.IC, OC = sh.OC;
  auto [inp_t, inp] = random_values<T>(size_t(N) * IC, 11);
  auto [w_t, w] = random_values<T>(size_t(OC) * IC, 12, 0.2f);
  auto [b_t, b] = random_values<T>(size_t(OC), 13);
  std::vector<float> pre_ref(size_t(N) * OC), out_ref(size_t(N) * OC);
  cpu::linear_forward(pre_ref.data(), inp.data(), w.data(), b.data(), N, IC, OC);
  cpu::gelu_forward(out_ref.data(), pre_ref.data(), pre_ref.size());
  Stream s;
  DeviceArray<T> d_inp(inp_t), d_w(w_t), d_b(b_t), d_pre(size_t(N) * OC), d_out(size_t(N) * OC);
  cuda::linear_gelu_forward(d_pre.ptr, d_out.ptr, d_inp.ptr, d_w.ptr, d_b.ptr, N, IC, OC, s.s);
  s.sync();
  // GELU's slope is at most 1.13: the pre-activation's error passes on, plus one more rounding.
  EXPECT_LE(relative_error(widen(d_pre.download()), pre_ref), 2 * kRound<T> + 1e-4) << "pre";
  EXPECT_LE(relative_error(widen(d_out.download()), out_ref), 4 * kRound<T> + 2e-4) << "out";
}

template <class T>
class CudaLinear : public ::testing::Test {};
using StorageTypes = ::testing::Types<float, __nv_bfloat16, __half>;
TYPED_TEST_SUITE(CudaLinear, StorageTypes);

TYPED_TEST(CudaLinear, ForwardAndBackwardMatchTheCpu) {
  SKIP_WITHOUT_DEVICE();
  for (const Shape& sh : kShapes) check_linear<TypeParam>(sh, true, true, true);
}

TYPED_TEST(CudaLinear, NoBiasAndSkippedGradients) {
  SKIP_WITHOUT_DEVICE();
  for (const Shape& sh : kShapes) check_linear<TypeParam>(sh, false, false, false);
  check_linear<TypeParam>(kShapes[2], true, false, true);
  check_linear<TypeParam>(kShapes[2], false, true, false);
}

TYPED_TEST(CudaLinear, FusedBiasGeluMatchesLinearThenGelu) {
  SKIP_WITHOUT_DEVICE();
  // 64x128x384 and 130x768x2304 take cuBLASLt's epilogue; the odd shapes the unfused path.
  for (const Shape& sh : kShapes) check_linear_gelu<TypeParam>(sh);
}

}  // namespace
