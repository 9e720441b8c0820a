#include "lower/transcendental.h"

#include <cmath>
#include <numbers>

namespace kiln {

namespace {

bool is_f32(DType t) { return t.scalar == ScalarType::Float32 && t.count == 1 && !t.is_ptr; }

UOpPtr f32(double v) { return const_of(dtypes::float32, v); }
UOpPtr i32(int64_t v) { return const_int(v, dtypes::int32); }
UOpPtr bitcast(const UOpPtr& x, DType to) { return UOp::make(Op::BITCAST, to, {x}); }
UOpPtr shl(const UOpPtr& x, int64_t n) { return alu(Op::SHL, {x, i32(n)}); }
UOpPtr shr(const UOpPtr& x, int64_t n) { return alu(Op::SHR, {x, i32(n)}); }
UOpPtr bit_and(const UOpPtr& a, const UOpPtr& b) { return alu(Op::AND, {a, b}); }

// A small integer (|v| < 2^22) as float32 without a CAST (which stays scalar in a vector loop): its
// bits added to those of 1.5 * 2^23 are the float 1.5 * 2^23 + v.
UOpPtr int_to_f32(const UOpPtr& v) { return bitcast(v + i32(0x4B400000), dtypes::float32) - f32(12582912.0); }

// Horner's rule, highest coefficient first.
UOpPtr polynomial(const UOpPtr& x, std::initializer_list<double> coefficients) {
  UOpPtr p;
  for (double c : coefficients) p = p ? p * x + f32(c) : f32(c);
  return p;
}

// 2^x = 2^n * 2^r with n = round(x), |r| <= 1/2, 2^r by its Taylor series (the terms are ln2^k / k!;
// the first omitted is below 1e-8). n comes from adding 1.5 * 2^23, which rounds x to an integer in
// the low mantissa bits (ties to even, as rint); the float ops are never reassociated (no fast-math,
// and kiln's simplifier folds no float algebra). 2^n is applied in two halves so that a subnormal
// result rounds once and no exponent leaves the range. Outside (-150, 128) the result is 0 or inf.
UOpPtr exp2_f32(const UOpPtr& x) {
  constexpr double kRound = 12582912.0;  // 1.5 * 2^23
  UOpPtr inside = bit_and(lt(x, f32(128.0)), lt(f32(-150.0), x));
  UOpPtr xs = where(inside, x, f32(0.0));
  UOpPtr shifted = xs + f32(kRound);
  UOpPtr n = shifted - f32(kRound);
  UOpPtr r = xs - n;
  UOpPtr p = polynomial(r, {1.525273380e-05, 1.540353039e-04, 1.333355815e-03, 9.618129108e-03, 5.550410866e-02,
                            2.402265070e-01, 6.931471806e-01, 1.0});
  UOpPtr ni = bitcast(shifted, dtypes::int32) - i32(0x4B400000);  // the bits of 1.5 * 2^23
  UOpPtr half = shr(ni, 1), rest = shr(ni + i32(1), 1);  // floor and ceil of n/2
  auto power = [](const UOpPtr& e) { return bitcast(shl(e + i32(127), 23), dtypes::float32); };
  UOpPtr v = p * power(half) * power(rest);
  v = where(lt(x, f32(128.0)), v, f32(INFINITY));
  v = where(lt(f32(-150.0), x), v, f32(0.0));
  return where(ne(x, x), x, v);
}

// log2 x = e + log2 m with x = m * 2^e, m in [sqrt(1/2), sqrt(2)) (subnormal x scaled by 2^23 first),
// and ln m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...) with s = (m - 1) / (m + 1), |s| <= 0.172: the
// first omitted term (s^13/13) is below 1e-10 of s.
UOpPtr log2_f32(const UOpPtr& x) {
  UOpPtr subnormal = lt(x, f32(0x1p-126));
  UOpPtr xn = where(subnormal, x * f32(0x1p23), x);
  UOpPtr bits = bitcast(xn, dtypes::int32);
  UOpPtr e = int_to_f32(shr(bits, 23)) + where(subnormal, f32(-127.0 - 23), f32(-127.0));
  UOpPtr m = bitcast(alu(Op::OR, {bit_and(bits, i32(0x007FFFFF)), i32(0x3F800000)}), dtypes::float32);  // [1, 2)
  UOpPtr big = lt(f32(std::numbers::sqrt2), m);
  m = where(big, m * f32(0.5), m);
  e = e + where(big, f32(1.0), f32(0.0));
  UOpPtr s = (m - f32(1.0)) / (m + f32(1.0));
  UOpPtr s2 = s * s;
  UOpPtr series = polynomial(s2, {1.0 / 11, 1.0 / 9, 1.0 / 7, 1.0 / 5, 1.0 / 3, 1.0});
  UOpPtr v = e + s * series * f32(2.0 / std::numbers::ln2);
  v = where(eq(x, f32(INFINITY)), x, v);
  v = where(eq(x, f32(0.0)), f32(-INFINITY), v);  // -0 too
  v = where(lt(x, f32(0.0)), f32(NAN), v);
  return where(ne(x, x), x, v);
}

}  // namespace

const PatternMatcher& pm_transcendental() {
  static const PatternMatcher pm{
      {UPat::op(Op::EXP2, {UPat::var("x").dtype_is(is_f32)}), [](const Match& m) { return exp2_f32(m["x"]); }},
      {UPat::op(Op::LOG2, {UPat::var("x").dtype_is(is_f32)}), [](const Match& m) { return log2_f32(m["x"]); }},
  };
  return pm;
}

}  // namespace kiln
