#include "src/model/precision.hpp"

#include <Eigen/Core>
#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

#include "base/check.hpp"

namespace mpitron {

DType parse_precision(const std::string& name) {
  if (name == "fp32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  if (name == "fp16") return DType::f16;
  throw UsageError("--precision " + name + ": not a precision (fp32, bf16 or fp16)");
}

const char* precision_name(DType t) {
  switch (t) {
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "fp16";
    case DType::f32:
      break;
  }
  return "fp32";
}

namespace {

// Eigen's 16-bit types: their conversions round to nearest even, keep NaNs and saturate fp16 to
// infinity; bit_cast moves the format's bits in and out.
template <class Eigen16, class Storage>
void round_with(Storage* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i].bits = Eigen::numext::bit_cast<uint16_t>(Eigen16(src[i]));
}
template <class Eigen16, class Storage>
void widen_with(float* dst, const Storage* src, size_t n) {
  for (size_t i = 0; i < n; ++i)
    dst[i] = static_cast<float>(Eigen::numext::bit_cast<Eigen16>(src[i].bits));
}

}  // namespace

void round_to(bf16_t* dst, const float* src, size_t n) {
  round_with<Eigen::bfloat16>(dst, src, n);
}
void round_to_reference(fp16_t* dst, const float* src, size_t n) {
  round_with<Eigen::half>(dst, src, n);
}
void round_to(fp16_t* dst, const float* src, size_t n) {
#if defined(__F16C__) && defined(__AVX__)
  // vcvtps2ph rounds to nearest even and overflows to infinity as Eigen's scalar conversion (about
  // ten times slower) does. NaNs alone differ: it keeps the payload's top bits where Eigen writes
  // the sign and 0x7e00, so a group holding a NaN takes Eigen's.
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0)
      round_with<Eigen::half>(dst + i, src + i, 8);
  }
  round_with<Eigen::half>(dst + i, src + i, n - i);
#else
  round_with<Eigen::half>(dst, src, n);
#endif
}
void widen(float* dst, const bf16_t* src, size_t n) {
  widen_with<Eigen::bfloat16>(dst, src, n);
}
void widen(float* dst, const fp16_t* src, size_t n) {
  widen_with<Eigen::half>(dst, src, n);
}

}  // namespace mpitron
