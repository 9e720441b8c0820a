#include "uop/half.h"

#include <bit>
#include <cmath>

namespace kiln {

namespace {

// Drops the low `shift` bits of `m`, rounding to nearest with ties to even. A carry out of the
// mantissa lands in the exponent field, which is exactly the next binade.
uint32_t shift_round_even(uint32_t m, int shift) {
  uint32_t kept = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  return kept + (rest > half || (rest == half && (kept & 1)));
}

}  // namespace

uint16_t float_to_half_bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t mag = x & 0x7fffffff;
  // NaN: keep the top of the payload, set the quiet bit so a payload that lived only in the low
  // bits does not turn into inf.
  if (mag > 0x7f800000) return sign | 0x7e00 | ((mag >> 13) & 0x3ff);
  // 65520 = 65504 + half an ulp: from there on (ties to even) the result is inf.
  if (mag >= 0x477ff000) return sign | 0x7c00;
  // Normal half (>= 2^-14): rebias the exponent from 127 to 15 and drop 13 mantissa bits.
  if (mag >= 0x38800000) return sign | static_cast<uint16_t>(shift_round_even(mag - (112u << 23), 13));
  // Below 2^-25 everything rounds to zero (2^-25 itself is a tie, and zero is even).
  if (mag < 0x33000000) return sign;
  // Subnormal half: count units of 2^-24. The float is m * 2^(e-150) with the implicit bit in m.
  uint32_t e = mag >> 23, m = (mag & 0x7fffff) | 0x800000;
  return sign | static_cast<uint16_t>(shift_round_even(m, static_cast<int>(126 - e)));
}

float half_bits_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  // inf and NaN keep their payload bits; widening never changes a value.
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000 | (mant << 13));
  if (exp == 0) {
    float mag = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal, exact in float
    return sign ? -mag : mag;
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t float_to_bf16_bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  // NaN: truncating could clear every payload bit left and make inf, so force the quiet bit.
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x0040);
  // bfloat16 is the top half of a float, so rounding is one add; overflow carries into inf.
  return static_cast<uint16_t>(shift_round_even(x, 16));
}

float bf16_bits_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

}  // namespace kiln
