// Helper functions of a SPIR-V module: the float math kiln's IR needs, written in plain SPIR-V
// arithmetic, and the conversions of the narrow float types (held as their 16 bits).
//
//   SpirvMath math(module);
//   Id y = math.call(Op::EXP2, 64, {x});        // an OpFunctionCall; the function is made on first use
//   Id f = math.half_to_float(bits);             // float16 bits (uint16) -> float32
//
// Why not GLSL.std.450: its Exp2/Log2/Sin/Pow take 16- and 32-bit floats only, Vulkan allows them
// errors far beyond kiln's tests (Sin: 2^-11 absolute), and Pow is undefined for x < 0. These are
// Cody-Waite reductions and Taylor polynomials with enough terms for 32- or 64-bit results (about
// 1-2 ulp). sin reduces large arguments (|x| >= 2^12 in float32, 2^21 in float64) by Payne-Hanek in
// 32-bit integer words, so it keeps that accuracy over the whole range, next to multiples of pi/2
// included. Each follows C's special cases (NaN, inf, signed zero); all are branch-free but sin,
// whose large-argument reduction sits behind a structured branch.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <utility>

#include "lower/renderers/spirv_module.h"
#include "uop/ops.h"

namespace kiln {

// The bits of 2/pi sin's large-argument reduction uses: two zero words, then 2/pi's fraction bits, 32 to
// a word, most significant first (exposed for the test that recomputes them).
std::span<const uint32_t> two_over_pi_words();

class SpirvMath {
 public:
  using Id = SpirvModule::Id;
  explicit SpirvMath(SpirvModule& m) : m_(m) {}

  // EXP2, LOG2, SIN, SQRT (NaN below 0) of one argument, POW of two; width 32 or 64.
  Id call(Op op, int width, const std::vector<Id>& args);

  Id half_to_float(Id bits);  // uint16 -> float32, exact
  Id float_to_half(Id x);     // float32 -> uint16, round to nearest even (NaN stays NaN, overflow -> inf)
  Id bf16_to_float(Id bits);
  Id float_to_bf16(Id x);

 private:
  Id helper(int key, int width, int arity, Id arg_type, Id result_type);
  void build(int key, int width, const std::vector<Id>& params);
  Id exp2_body(Id x, int width);
  Id log2_body(Id x, int width);
  Id sin_body(Id x, int width);
  Id reduce_large(Id ax, int width, Id* quadrant);  // Payne-Hanek, for sin of a large |x|
  Id two_over_pi_table();                           // the Private array of 2/pi's bits, made once
  Id pow_body(Id x, Id y, int width);
  Id half_to_float_body(Id h);
  Id float_to_half_body(Id x);

  // Small builders on the module, in the float type of `width` (and its integer types).
  Id f(int width) { return m_.type_float(width); }
  Id u(int width) { return m_.type_int(width, false); }
  Id s(int width) { return m_.type_int(width, true); }
  Id fc(int width, double value);
  Id uc(int width, uint64_t value) { return m_.constant(u(width), value); }
  Id bin(spv::Op op, Id type, Id a, Id b) { return m_.op(op, type, {a, b}); }
  Id cmp(spv::Op op, Id a, Id b) { return m_.op(op, m_.type_bool(), {a, b}); }
  Id select(Id type, Id c, Id a, Id b) { return m_.op(spv::Op::OpSelect, type, {c, a, b}); }
  Id horner(Id x, const std::vector<long double>& coefficients, int width);  // c0 + x*(c1 + x*(...))
  Id pow2i(Id k, int width);  // 2^k as a float of `width`, for an int32 k in the normal exponent range
  // The low `keep` words of a * b, numbers held as uint32 words, least significant first.
  std::vector<Id> mul_words(const std::vector<Id>& a, const std::vector<Id>& b, size_t keep);

  SpirvModule& m_;
  std::map<std::pair<int, int>, Id> functions_;  // (key, width) -> function id
  Id two_over_pi_ = 0;
};

}  // namespace kiln
