// Storage precision of a model's activations and of the weight copy its layers read
// (--precision fp32|bf16|fp16). Master weights, gradients of parameters, optimizer moments, losses
// and normalisation statistics stay fp32 whatever it is; arithmetic inside every layer is fp32.
// bf16_t and fp16_t are the two 16-bit formats as opaque storage (the bits): the host never does
// arithmetic on them, it only converts, and CUDA code reads them as __nv_bfloat16 and __half.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace mpitron {

enum class DType { f32, bf16, f16 };

// The --precision names fp32, bf16, fp16; UsageError for anything else.
DType parse_precision(const std::string& name);
const char* precision_name(DType t);

struct bf16_t {  // 1 sign, 8 exponent, 7 mantissa bits: fp32's range
  uint16_t bits;
};
struct fp16_t {  // IEEE binary16: 1 sign, 5 exponent, 10 mantissa bits; largest finite 65504
  uint16_t bits;
};

template <class A>
constexpr DType dtype_of() {
  static_assert(std::is_same_v<A, float> || std::is_same_v<A, bf16_t> || std::is_same_v<A, fp16_t>);
  if constexpr (std::is_same_v<A, bf16_t>) return DType::bf16;
  if constexpr (std::is_same_v<A, fp16_t>) return DType::f16;
  return DType::f32;
}

// Host conversions, round to nearest even (NaN stays NaN; fp16 overflows to infinity), as
// CUDA's __float2bfloat16 and __float2half.
void round_to(bf16_t* dst, const float* src, size_t n);
void round_to(fp16_t* dst, const float* src, size_t n);
// The element-at-a-time conversion round_to(fp16_t*) vectorizes, kept as its reference.
void round_to_reference(fp16_t* dst, const float* src, size_t n);
void widen(float* dst, const bf16_t* src, size_t n);
void widen(float* dst, const fp16_t* src, size_t n);

}  // namespace mpitron
