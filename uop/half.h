// float16 (IEEE binary16) and bfloat16 as raw bits, converted to and from float.
//
//   uint16_t h = float_to_half_bits(1.5f);     // 0x3e00
//   float f = half_bits_to_float(h);           // 1.5f
//   uint16_t b = float_to_bf16_bits(3.0f);     // 0x4040
//
// Narrowing rounds to nearest, ties to even, as hardware conversions do; overflow gives inf and a NaN
// stays a NaN (made quiet). Widening is exact. Written as bit manipulation rather than with
// _Float16/__bf16 so the result does not depend on the compiler or the host CPU.
#pragma once
#include <cstdint>

namespace kiln {

uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);

uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(uint16_t b);

}  // namespace kiln
