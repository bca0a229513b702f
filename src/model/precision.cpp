#include "src/model/precision.hpp"

#include <Eigen/Core>

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
void round_to(fp16_t* dst, const float* src, size_t n) {
  round_with<Eigen::half>(dst, src, n);
}
void widen(float* dst, const bf16_t* src, size_t n) {
  widen_with<Eigen::bfloat16>(dst, src, n);
}
void widen(float* dst, const fp16_t* src, size_t n) {
  widen_with<Eigen::half>(dst, src, n);
}

}  // namespace mpitron
