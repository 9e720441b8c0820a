#include "lower/renderers/spirv_math.h"

#include <bit>
#include <cmath>
#include <limits>
#include <span>

#include "uop/error.h"

namespace kiln {

using SOp = spv::Op;  // SPIR-V opcodes (SOp::OpFAdd); kiln's ops stay kiln::Op
using Id = SpirvMath::Id;

namespace {

// Keys of helper functions beyond the math ops (which use their Op value).
enum Helper : int { kHalfToFloat = 1000, kFloatToHalf, kBf16ToFloat, kFloatToBf16 };

int mantissa_bits(int width) { return width == 32 ? 23 : 52; }
int exponent_bias(int width) { return width == 32 ? 127 : 1023; }

// pi/2 to the precision of long double (64 bits on x86), from its decimal expansion.
constexpr long double kHalfPi = 1.57079632679489661923132169163975144209858L;
constexpr long double kLn2 = 0.693147180559945309417232121458176568075500L;

}  // namespace

Id SpirvMath::fc(int width, double value) {
  if (width == 32) return m_.constant(f(32), std::bit_cast<uint32_t>(static_cast<float>(value)));
  return m_.constant(f(64), std::bit_cast<uint64_t>(value));
}

Id SpirvMath::horner(Id x, const std::vector<long double>& coefficients, int width) {
  Id acc = fc(width, static_cast<double>(coefficients.back()));
  for (size_t i = coefficients.size() - 1; i-- > 0;)
    acc = bin(SOp::OpFAdd, f(width), bin(SOp::OpFMul, f(width), acc, x), fc(width, static_cast<double>(coefficients[i])));
  return acc;
}

Id SpirvMath::pow2i(Id k, int width) {
  Id biased = m_.op(SOp::OpBitcast, u(32), {bin(SOp::OpIAdd, s(32), k, m_.constant(s(32), exponent_bias(width)))});
  if (width == 64) biased = m_.op(SOp::OpUConvert, u(64), {biased});
  Id bits = bin(SOp::OpShiftLeftLogical, u(width), biased, uc(32, mantissa_bits(width)));
  return m_.op(SOp::OpBitcast, f(width), {bits});
}

// 2^x = 2^n * 2^r with n = round(x), |r| <= 1/2; 2^r = e^(r ln2) by its Taylor series (the omitted
// term is below 1e-8 for float32 and 5e-18 for float64). 2^n is applied in two halves, so subnormal
// results round once and n never leaves the exponent range.
Id SpirvMath::exp2_body(Id x, int width) {
  Id t = f(width);
  double hi = width == 32 ? 128 : 1024, lo = width == 32 ? -150 : -1075;
  Id in_range = m_.op(SOp::OpLogicalAnd, m_.type_bool(), {cmp(SOp::OpFOrdLessThan, x, fc(width, hi)),
                                                         cmp(SOp::OpFOrdGreaterThan, x, fc(width, lo))});
  Id xs = select(t, in_range, x, fc(width, 0));
  Id n = m_.glsl(GLSLstd450RoundEven, t, {xs});
  Id r = bin(SOp::OpFSub, t, xs, n);
  std::vector<long double> c{1.0L};
  for (int k = 1; k <= (width == 32 ? 7 : 13); ++k) c.push_back(c.back() * kLn2 / k);
  Id p = horner(r, c, width);
  Id ni = m_.op(SOp::OpConvertFToS, s(32), {n});
  Id half = bin(SOp::OpSDiv, s(32), ni, m_.constant(s(32), 2));
  Id value = bin(SOp::OpFMul, t, bin(SOp::OpFMul, t, p, pow2i(half, width)), pow2i(bin(SOp::OpISub, s(32), ni, half), width));
  value = select(t, cmp(SOp::OpFOrdGreaterThanEqual, x, fc(width, hi)), fc(width, INFINITY), value);
  value = select(t, cmp(SOp::OpFOrdLessThanEqual, x, fc(width, lo)), fc(width, 0), value);
  return select(t, m_.op(SOp::OpIsNan, m_.type_bool(), {x}), x, value);
}

// log2(x) = e + log2(m) with m in [sqrt(1/2), sqrt(2)); ln(m) = 2 atanh(s), s = (m-1)/(m+1), |s| < 0.172,
// by its series in s^2. Subnormal inputs are scaled into the normal range first.
Id SpirvMath::log2_body(Id x, int width) {
  Id t = f(width), b = m_.type_bool();
  int mb = mantissa_bits(width), scale = width == 32 ? 24 : 54;
  Id tiny = cmp(SOp::OpFOrdLessThan, x, fc(width, std::ldexp(1.0, 1 - exponent_bias(width))));
  Id xs = select(t, tiny, bin(SOp::OpFMul, t, x, fc(width, std::ldexp(1.0, scale))), x);
  Id bits = m_.op(SOp::OpBitcast, u(width), {xs});
  Id e = m_.op(SOp::OpConvertUToF, t, {bin(SOp::OpShiftRightLogical, u(width), bits, uc(32, mb))});
  e = bin(SOp::OpFSub, t, e, select(t, tiny, fc(width, exponent_bias(width) + scale), fc(width, exponent_bias(width))));
  uint64_t mantissa_mask = (uint64_t{1} << mb) - 1, one = uint64_t(exponent_bias(width)) << mb;
  Id m = m_.op(SOp::OpBitcast, t, {bin(SOp::OpBitwiseOr, u(width), bin(SOp::OpBitwiseAnd, u(width), bits, uc(width, mantissa_mask)),
                                      uc(width, one))});
  Id big = cmp(SOp::OpFOrdGreaterThan, m, fc(width, std::sqrt(2.0)));
  m = select(t, big, bin(SOp::OpFMul, t, m, fc(width, 0.5)), m);
  e = select(t, big, bin(SOp::OpFAdd, t, e, fc(width, 1)), e);
  Id sv = bin(SOp::OpFDiv, t, bin(SOp::OpFSub, t, m, fc(width, 1)), bin(SOp::OpFAdd, t, m, fc(width, 1)));
  std::vector<long double> c;
  for (int k = 0; k <= (width == 32 ? 5 : 11); ++k) c.push_back(1.0L / (2 * k + 1));
  Id series = horner(bin(SOp::OpFMul, t, sv, sv), c, width);
  Id ln_m = bin(SOp::OpFMul, t, bin(SOp::OpFMul, t, sv, fc(width, 2)), series);
  Id value = bin(SOp::OpFAdd, t, e, bin(SOp::OpFMul, t, ln_m, fc(width, static_cast<double>(1.0L / kLn2))));
  value = select(t, cmp(SOp::OpFOrdEqual, x, fc(width, 0)), fc(width, -INFINITY), value);
  value = select(t, cmp(SOp::OpFOrdLessThan, x, fc(width, 0)), fc(width, NAN), value);
  value = select(t, cmp(SOp::OpFOrdEqual, x, fc(width, INFINITY)), x, value);
  (void)b;
  return select(t, m_.op(SOp::OpIsNan, m_.type_bool(), {x}), x, value);
}

// The bits of 2/pi, 32 to a word, most significant first, after two zero words: bit s of the table
// (counting from the top of word 0) has the weight 2^-(s - 63). Enough for the float64 range, with the
// window of reduce_large. tests/test_spirv.cpp checks every bit: it computes pi with Machin's formula in
// integers and multiplies.
constexpr uint32_t kTwoOverPiWords[] = {
    0x00000000u, 0x00000000u, 0xa2f9836eu, 0x4e441529u, 0xfc2757d1u, 0xf534ddc0u, 0xdb629599u,
    0x3c439041u, 0xfe5163abu, 0xdebbc561u, 0xb7246e3au, 0x424dd2e0u, 0x06492eeau, 0x09d1921cu,
    0xfe1deb1cu, 0xb129a73eu, 0xe88235f5u, 0x2ebb4484u, 0xe99c7026u, 0xb45f7e41u, 0x3991d639u,
    0x835339f4u, 0x9c845f8bu, 0xbdf9283bu, 0x1ff897ffu, 0xde05980fu, 0xef2f118bu, 0x5a0a6d1fu,
    0x6d367ecfu, 0x27cb09b7u, 0x4f463f66u, 0x9e5fea2du, 0x7527bac7u, 0xebe5f17bu, 0x3d0739f7u,
    0x8a5292eau, 0x6bfb5fb1u, 0x1f8d5d08u, 0x56033046u, 0xfc7b6babu, 0xf0cfbc20u, 0x9af4361du,
};
constexpr uint32_t kTableWords = sizeof(kTwoOverPiWords) / sizeof(uint32_t);

std::span<const uint32_t> two_over_pi_words() { return kTwoOverPiWords; }

std::vector<Id> SpirvMath::mul_words(const std::vector<Id>& a, const std::vector<Id>& b, size_t keep) {
  Id u32 = u(32), pair = m_.type_struct({u32, u32});
  std::vector<std::vector<Id>> column(keep);  // the 32-bit addends of each result word
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; i + j < keep && j < b.size(); ++j) {
      Id product = bin(SOp::OpUMulExtended, pair, a[i], b[j]);
      column[i + j].push_back(m_.op(SOp::OpCompositeExtract, u32, {product, 0}));
      if (i + j + 1 < keep) column[i + j + 1].push_back(m_.op(SOp::OpCompositeExtract, u32, {product, 1}));
    }
  std::vector<Id> out;
  Id carry = 0;  // how many carries the column below sent up
  for (size_t c = 0; c < keep; ++c) {
    Id sum = carry, next = 0;
    for (Id addend : column[c]) {
      if (sum == 0) { sum = addend; continue; }
      Id added = bin(SOp::OpIAddCarry, pair, sum, addend);
      sum = m_.op(SOp::OpCompositeExtract, u32, {added, 0});
      Id carried = m_.op(SOp::OpCompositeExtract, u32, {added, 1});
      next = next == 0 ? carried : bin(SOp::OpIAdd, u32, next, carried);
    }
    out.push_back(sum == 0 ? uc(32, 0) : sum);
    carry = next;
  }
  return out;
}

// Payne-Hanek: |x| = M 2^E with M the integer significand, so x 2/pi mod 4 needs only the bits of 2/pi
// from 2^-(E-1) on (those before it give multiples of 4): a window of nw words of them, times M, in
// 32-bit words, is exact but for the bits after the window (below 2^-71 for float32, 2^-137 for
// float64). The top two bits of the product are the quadrant, the rest the fraction f, which is rounded
// to the nearest quadrant (|f| <= 1/2), normalized (next to a multiple of pi/2 it starts with up to 61
// zeros in float64, fewer in float32) and multiplied by pi/2 in fixed point, 32 or 64 bits. Returns r
// with |x| = q pi/2 + r, |r| <= pi/4, rounded once; *quadrant = q mod 4 (uint32).
Id SpirvMath::reduce_large(Id ax, int width, Id* quadrant) {
  const size_t nw = width == 32 ? 3 : 6, nt = width == 32 ? 1 : 2;  // words of the window, of the result
  Id u32 = u(32), i32 = s(32);
  auto shl = [&](Id a, Id by) { return bin(SOp::OpShiftLeftLogical, u32, a, by); };
  auto shr = [&](Id a, Id by) { return bin(SOp::OpShiftRightLogical, u32, a, by); };
  auto or_ = [&](Id a, Id c) { return bin(SOp::OpBitwiseOr, u32, a, c); };
  // (hi << by) | (lo >> (32 - by)) for by in [0, 31], with no shift by 32.
  auto funnel = [&](Id hi, Id lo, Id by) { return or_(shl(hi, by), shr(shr(lo, uc(32, 1)), bin(SOp::OpISub, u32, uc(32, 31), by))); };

  // The significand, least significant word first, and the biased exponent.
  std::vector<Id> m;
  Id biased;
  if (width == 32) {
    Id bits = m_.op(SOp::OpBitcast, u32, {ax});
    m = {or_(bin(SOp::OpBitwiseAnd, u32, bits, uc(32, 0x7fffffu)), uc(32, 0x800000u))};
    biased = shr(bits, uc(32, 23));
  } else {
    Id bits = m_.op(SOp::OpBitcast, u(64), {ax});
    Id high = m_.op(SOp::OpUConvert, u32, {bin(SOp::OpShiftRightLogical, u(64), bits, uc(32, 32))});
    m = {m_.op(SOp::OpUConvert, u32, {bits}), or_(bin(SOp::OpBitwiseAnd, u32, high, uc(32, 0xfffffu)), uc(32, 0x100000u))};
    biased = shr(high, uc(32, 20));
  }
  // The window starts at table bit s = (E - 1) + 63, E = biased - bias - mantissa bits. Clamped into the
  // table, which only matters to lanes that do not take this path.
  Id start = bin(SOp::OpISub, u32, biased, uc(32, exponent_bias(width) + mantissa_bits(width) - 62));
  Id word = m_.glsl(GLSLstd450UMin, u32, {shr(start, uc(32, 5)), uc(32, kTableWords - nw - 1)});
  Id bit = bin(SOp::OpBitwiseAnd, u32, start, uc(32, 31));
  Id table = two_over_pi_table(), word_ptr = m_.type_pointer(spv::StorageClass::Private, u32);
  std::vector<Id> loaded;
  for (size_t k = 0; k <= nw; ++k)
    loaded.push_back(m_.op(SOp::OpLoad, u32, {m_.op(SOp::OpAccessChain, word_ptr, {table, bin(SOp::OpIAdd, u32, word, uc(32, k))})}));
  std::vector<Id> window(nw);  // least significant first
  for (size_t k = 0; k < nw; ++k) window[nw - 1 - k] = funnel(loaded[k], loaded[k + 1], bit);

  // x 2/pi = product 2^(2 - 32 nw): the top two bits are the quadrant, the others f.
  std::vector<Id> p = mul_words(m, window, nw);
  std::vector<Id> frac(nw);
  for (size_t k = 0; k < nw; ++k) frac[k] = k == 0 ? shl(p[0], uc(32, 2)) : funnel(p[k], p[k - 1], uc(32, 2));
  // f >= 1/2: round up to the next quadrant; |f - 1| is ~f (off by 2^-32nw).
  Id up = shr(frac[nw - 1], uc(32, 31));
  *quadrant = bin(SOp::OpBitwiseAnd, u32, bin(SOp::OpIAdd, u32, shr(p[nw - 1], uc(32, 30)), up), uc(32, 3));
  Id flip = bin(SOp::OpISub, u32, uc(32, 0), up);
  for (Id& w : frac) w = bin(SOp::OpBitwiseXor, u32, w, flip);

  // Normalize: skip up to two zero words, then shift the leading one to the top.
  Id zero_word = cmp(SOp::OpIEqual, frac[nw - 1], uc(32, 0)), zero_two = cmp(SOp::OpIEqual, frac[nw - 2], uc(32, 0));
  auto at = [&](size_t k, size_t skip) { return k >= skip ? frac[k - skip] : uc(32, 0); };
  std::vector<Id> top;  // nt + 1 words, most significant first
  for (size_t k = 0; k <= nt; ++k) {
    size_t index = nw - 1 - k;
    top.push_back(select(u32, zero_word, select(u32, zero_two, at(index, 2), at(index, 1)), at(index, 0)));
  }
  Id msb = m_.op(SOp::OpBitcast, u32, {m_.glsl(GLSLstd450FindUMsb, i32, {top[0]})});
  Id lead = m_.glsl(GLSLstd450UMin, u32, {bin(SOp::OpISub, u32, uc(32, 31), msb), uc(32, 31)});
  std::vector<Id> t(nt);  // least significant first
  for (size_t k = 0; k < nt; ++k) t[nt - 1 - k] = funnel(top[k], top[k + 1], lead);
  Id zeros = bin(SOp::OpIAdd, u32, lead, select(u32, zero_word, select(u32, zero_two, uc(32, 64), uc(32, 32)), uc(32, 0)));

  // r = 0.t 2^-zeros * pi/2 = t (pi/4 2^(32 nt)) 2^-(64 nt - 1 + zeros); the top nt words of the
  // product, converted with one rounding.
  uint64_t quarter_pi = static_cast<uint64_t>(std::ldexp(kHalfPi, 63));  // pi/4 2^64
  std::vector<Id> c = nt == 1 ? std::vector<Id>{uc(32, (quarter_pi >> 32) + ((quarter_pi >> 31) & 1))}
                              : std::vector<Id>{uc(32, quarter_pi & 0xffffffffu), uc(32, quarter_pi >> 32)};
  std::vector<Id> product = mul_words(t, c, 2 * nt);
  Id tf = f(width);
  Id value = m_.op(SOp::OpConvertUToF, tf, {product[2 * nt - 1]});
  if (nt == 2)
    value = bin(SOp::OpFAdd, tf, bin(SOp::OpFMul, tf, value, fc(width, 0x1p32)), m_.op(SOp::OpConvertUToF, tf, {product[2]}));
  Id scale = bin(SOp::OpISub, i32, m_.constant(i32, -(32 * static_cast<int>(nt) - 1)), m_.op(SOp::OpBitcast, i32, {zeros}));
  Id r = bin(SOp::OpFMul, tf, value, pow2i(scale, width));
  return select(tf, cmp(SOp::OpINotEqual, up, uc(32, 0)), m_.op(SOp::OpFNegate, tf, {r}), r);
}

Id SpirvMath::two_over_pi_table() {
  if (two_over_pi_ != 0) return two_over_pi_;
  Id u32 = u(32);
  std::vector<Id> words;
  for (uint32_t w : kTwoOverPiWords) words.push_back(uc(32, w));
  Id type = m_.type_array(u32, uc(32, kTableWords));
  two_over_pi_ = m_.global_variable(m_.type_pointer(spv::StorageClass::Private, type), spv::StorageClass::Private,
                                    m_.constant_composite(type, words));
  return two_over_pi_;
}

// sin(x): |x| = q pi/2 + r, then sin or cos of r by Taylor series on |r| <= pi/4, picked and signed by q
// mod 4 (and x's sign). Small |x| (below 2^12 in float32, 2^21 in float64) reduce by Cody-Waite:
// k = round(x * 2/pi), r = x - k*pi/2 with pi/2 in parts (k*part is exact for |k| below 2^12 / 2^21).
// The parts hold pi/2 to 78 / 149 bits, so that r keeps its relative accuracy next to multiples of
// pi/2 too, where it is tiny (cos and tan divide by sin 2x there); they are written out because long
// double holds only 64 bits of pi/2. Larger |x| take a branch to reduce_large. inf and NaN give NaN.
// A GPU skips the branch where no lane needs it; lavapipe runs it under a mask for every lane, so
// there a sine costs ~1.5x (float32) to ~2.5x (float64) what Cody-Waite alone did, and compiling a
// kernel with one takes ~40 ms longer.
constexpr double kHalfPiParts32[] = {0x1.92p+0, 0x1.fb4p-12, 0x1.444p-24, 0x1.68cp-39, 0x1.1a6264p-54};
constexpr double kHalfPiParts64[] = {0x1.921fb544p+0, 0x1.0b4611a6p-34, 0x1.3198a2ep-69, 0x1.b839a252049c1p-104};
Id SpirvMath::sin_body(Id x, int width) {
  Id t = f(width), i32 = s(32);
  std::span<const double> parts = width == 32 ? std::span<const double>(kHalfPiParts32) : std::span<const double>(kHalfPiParts64);
  Id finite = cmp(SOp::OpFOrdLessThan, m_.glsl(GLSLstd450FAbs, t, {x}), fc(width, INFINITY));
  Id xs = select(t, finite, x, fc(width, 0));
  Id k = m_.glsl(GLSLstd450RoundEven, t, {bin(SOp::OpFMul, t, xs, fc(width, static_cast<double>(1.0L / kHalfPi)))});
  Id r_small = xs;
  for (double part : parts) r_small = bin(SOp::OpFSub, t, r_small, bin(SOp::OpFMul, t, k, fc(width, part)));
  Id quarter = m_.glsl(GLSLstd450Floor, t, {bin(SOp::OpFMul, t, k, fc(width, 0.25))});
  Id q_small = m_.op(SOp::OpConvertFToS, i32, {bin(SOp::OpFSub, t, k, bin(SOp::OpFMul, t, quarter, fc(width, 4)))});

  // A structured branch, so that only the lanes (or groups) with a large argument pay for it.
  Id ax = m_.glsl(GLSLstd450FAbs, t, {xs});
  Id large = cmp(SOp::OpFOrdGreaterThanEqual, ax, fc(width, width == 32 ? 0x1p12 : 0x1p21));
  Id small_block = m_.current_block(), large_block = m_.fresh(), merge = m_.fresh();
  m_.op_void(SOp::OpSelectionMerge, {merge, static_cast<uint32_t>(spv::SelectionControlMask::MaskNone)});
  m_.op_void(SOp::OpBranchConditional, {large, large_block, merge});
  m_.label(large_block);
  Id q_abs = 0;
  Id r_abs = reduce_large(ax, width, &q_abs);
  Id negative = cmp(SOp::OpFOrdLessThan, xs, fc(width, 0));  // -|x| = (-q) pi/2 + (-r)
  Id r_large = select(t, negative, m_.op(SOp::OpFNegate, t, {r_abs}), r_abs);
  Id q_large = m_.op(SOp::OpBitcast, i32, {select(u(32), negative, bin(SOp::OpISub, u(32), uc(32, 0), q_abs), q_abs)});
  Id large_end = m_.current_block();
  m_.op_void(SOp::OpBranch, {merge});
  m_.label(merge);
  Id r = m_.op(SOp::OpPhi, t, {r_small, small_block, r_large, large_end});
  Id q = m_.op(SOp::OpPhi, i32, {q_small, small_block, q_large, large_end});

  Id z = bin(SOp::OpFMul, t, r, r);
  std::vector<long double> sin_c, cos_c;
  long double term = 1.0L;
  for (int n = 1; n <= (width == 32 ? 10 : 16); ++n) {  // term = 1/n!, alternating signs
    term /= n;
    long double signed_term = ((n / 2) % 2 == 0 ? 1 : -1) * term;
    (n % 2 ? sin_c : cos_c).push_back(signed_term);
  }
  Id sin_r = bin(SOp::OpFAdd, t, r, bin(SOp::OpFMul, t, bin(SOp::OpFMul, t, r, z), horner(z, {sin_c.begin() + 1, sin_c.end()}, width)));
  Id cos_r = bin(SOp::OpFAdd, t, fc(width, 1), bin(SOp::OpFMul, t, z, horner(z, cos_c, width)));
  auto bit_set = [&](uint32_t mask) {
    return cmp(SOp::OpINotEqual, bin(SOp::OpBitwiseAnd, i32, q, m_.constant(i32, mask)), m_.constant(i32, 0));
  };
  Id value = select(t, bit_set(1), cos_r, sin_r);
  value = select(t, bit_set(2), m_.op(SOp::OpFNegate, t, {value}), value);
  return select(t, finite, value, fc(width, NAN));
}

// pow as C's pow: |x|^y = exp2(y log2|x|), negated for x < 0 (or -0) and odd integer y, NaN for x < 0
// and non-integer y; pow(x, 0) = pow(1, y) = 1 even for NaN, pow(-1, +-inf) = 1.
Id SpirvMath::pow_body(Id x, Id y, int width) {
  Id t = f(width), b = m_.type_bool();
  Id ax = m_.glsl(GLSLstd450FAbs, t, {x});
  Id value = call(kiln::Op::EXP2, width, {bin(SOp::OpFMul, t, y, call(kiln::Op::LOG2, width, {ax}))});
  Id y_int = cmp(SOp::OpFOrdEqual, m_.glsl(GLSLstd450Trunc, t, {y}), y);
  Id half_y = bin(SOp::OpFMul, t, y, fc(width, 0.5));
  Id y_odd = m_.op(SOp::OpLogicalAnd, b, {y_int, cmp(SOp::OpFOrdNotEqual, m_.glsl(GLSLstd450Trunc, t, {half_y}), half_y)});
  Id negative = cmp(SOp::OpSLessThan, m_.op(SOp::OpBitcast, s(width), {x}), m_.constant(s(width), 0));  // the sign bit
  value = select(t, m_.op(SOp::OpLogicalAnd, b, {negative, y_odd}), m_.op(SOp::OpFNegate, t, {value}), value);
  Id bad = m_.op(SOp::OpLogicalAnd, b, {cmp(SOp::OpFOrdLessThan, x, fc(width, 0)), m_.op(SOp::OpLogicalNot, b, {y_int})});
  value = select(t, bad, fc(width, NAN), value);
  Id unit_inf = m_.op(SOp::OpLogicalAnd, b, {cmp(SOp::OpFOrdEqual, ax, fc(width, 1)), m_.op(SOp::OpIsInf, b, {y})});
  Id one = m_.op(SOp::OpLogicalOr, b, {unit_inf, m_.op(SOp::OpLogicalOr, b, {cmp(SOp::OpFOrdEqual, x, fc(width, 1)),
                                                                         cmp(SOp::OpFOrdEqual, y, fc(width, 0))})});
  return select(t, one, fc(width, 1), value);
}

// float16 bits -> float32: subnormals through an exact multiply, inf/NaN keep their payload.
Id SpirvMath::half_to_float_body(Id h) {
  Id u32 = u(32);
  Id hu = m_.op(SOp::OpUConvert, u32, {h});
  auto and_ = [&](Id a, uint32_t mask) { return bin(SOp::OpBitwiseAnd, u32, a, uc(32, mask)); };
  auto shl = [&](Id a, uint32_t by) { return bin(SOp::OpShiftLeftLogical, u32, a, uc(32, by)); };
  auto or_ = [&](Id a, Id c) { return bin(SOp::OpBitwiseOr, u32, a, c); };
  Id sign = shl(and_(hu, 0x8000u), 16);
  Id e = and_(bin(SOp::OpShiftRightLogical, u32, hu, uc(32, 10)), 0x1fu), mant = and_(hu, 0x3ffu);
  Id sub = m_.op(SOp::OpBitcast, u32, {bin(SOp::OpFMul, f(32), m_.op(SOp::OpConvertUToF, f(32), {mant}), fc(32, 0x1p-24))});
  Id special = or_(or_(sign, uc(32, 0x7f800000u)), shl(mant, 13));
  Id normal = or_(or_(sign, shl(bin(SOp::OpIAdd, u32, e, uc(32, 112)), 23)), shl(mant, 13));
  Id bits = select(u32, cmp(SOp::OpIEqual, e, uc(32, 0)), or_(sub, sign),
                   select(u32, cmp(SOp::OpIEqual, e, uc(32, 31)), special, normal));
  return m_.op(SOp::OpBitcast, f(32), {bits});
}

// float32 -> float16 bits, rounding to nearest even: subnormal results by an exact scale and
// RoundEven, normal ones by adding the rounding bias to the bits.
Id SpirvMath::float_to_half_body(Id x) {
  Id u32 = u(32);
  auto and_ = [&](Id a, uint32_t mask) { return bin(SOp::OpBitwiseAnd, u32, a, uc(32, mask)); };
  auto shr = [&](Id a, uint32_t by) { return bin(SOp::OpShiftRightLogical, u32, a, uc(32, by)); };
  auto or_ = [&](Id a, Id c) { return bin(SOp::OpBitwiseOr, u32, a, c); };
  Id bits = m_.op(SOp::OpBitcast, u32, {x});
  Id sign = and_(shr(bits, 16), 0x8000u), a = and_(bits, 0x7fffffffu);
  Id nan = or_(or_(sign, uc(32, 0x7e00u)), and_(shr(a, 13), 0x3ffu));
  Id inf = or_(sign, uc(32, 0x7c00u));
  Id scaled = bin(SOp::OpFMul, f(32), m_.op(SOp::OpBitcast, f(32), {a}), fc(32, 16777216.0));
  Id sub = or_(sign, m_.op(SOp::OpConvertFToU, u32, {m_.glsl(GLSLstd450RoundEven, f(32), {scaled})}));
  Id mm = bin(SOp::OpISub, u32, a, uc(32, 0x38000000u));
  Id normal = or_(sign, shr(bin(SOp::OpIAdd, u32, bin(SOp::OpIAdd, u32, mm, uc(32, 0x0fffu)), and_(shr(mm, 13), 1)), 13));
  Id r = select(u32, cmp(SOp::OpULessThan, a, uc(32, 0x38800000u)), sub, normal);
  r = select(u32, cmp(SOp::OpUGreaterThanEqual, a, uc(32, 0x477ff000u)), inf, r);
  r = select(u32, cmp(SOp::OpUGreaterThan, a, uc(32, 0x7f800000u)), nan, r);
  return m_.op(SOp::OpUConvert, u(16), {r});
}

void SpirvMath::build(int key, int width, const std::vector<Id>& p) {
  Id result = 0;
  switch (key) {
    case static_cast<int>(kiln::Op::EXP2): result = exp2_body(p[0], width); break;
    case static_cast<int>(kiln::Op::LOG2): result = log2_body(p[0], width); break;
    case static_cast<int>(kiln::Op::SIN): result = sin_body(p[0], width); break;
    case static_cast<int>(kiln::Op::POW): result = pow_body(p[0], p[1], width); break;
    case static_cast<int>(kiln::Op::SQRT): {
      Id t = f(width), root = m_.glsl(GLSLstd450Sqrt, t, {p[0]});
      result = select(t, cmp(SOp::OpFOrdLessThan, p[0], fc(width, 0)), fc(width, NAN), root);
      break;
    }
    case kHalfToFloat: result = half_to_float_body(p[0]); break;
    case kFloatToHalf: result = float_to_half_body(p[0]); break;
    case kBf16ToFloat:
      result = m_.op(SOp::OpBitcast, f(32), {bin(SOp::OpShiftLeftLogical, u(32), m_.op(SOp::OpUConvert, u(32), {p[0]}), uc(32, 16))});
      break;
    case kFloatToBf16: {  // round to nearest even on the bits; a NaN stays a (quiet) NaN
      Id u32 = u(32), bits = m_.op(SOp::OpBitcast, u32, {p[0]});
      Id high = bin(SOp::OpShiftRightLogical, u32, bits, uc(32, 16));
      Id rounded = bin(SOp::OpShiftRightLogical, u32,
                       bin(SOp::OpIAdd, u32, bin(SOp::OpIAdd, u32, bits, uc(32, 0x7fffu)), bin(SOp::OpBitwiseAnd, u32, high, uc(32, 1))),
                       uc(32, 16));
      Id nan = cmp(SOp::OpUGreaterThan, bin(SOp::OpBitwiseAnd, u32, bits, uc(32, 0x7fffffffu)), uc(32, 0x7f800000u));
      result = m_.op(SOp::OpUConvert, u(16), {select(u32, nan, bin(SOp::OpBitwiseOr, u32, high, uc(32, 0x40u)), rounded)});
      break;
    }
    default: throw_internal("SpirvMath builds the helpers it declares", std::to_string(key), __FILE__, __LINE__);
  }
  m_.op_void(SOp::OpReturnValue, {result});
}

Id SpirvMath::helper(int key, int width, int arity, Id arg_type, Id result_type) {
  auto [it, added] = functions_.emplace(std::make_pair(key, width), 0);
  if (!added) return it->second;
  std::vector<Id> params;
  it->second = m_.begin_function(result_type, std::vector<Id>(static_cast<size_t>(arity), arg_type), &params);
  build(key, width, params);
  m_.end_function();
  return it->second;
}

Id SpirvMath::call(Op op, int width, const std::vector<Id>& args) {
  KILN_ASSERT(width == 32 || width == 64, "SpirvMath works on float32 and float64");
  Id fn = helper(static_cast<int>(op), width, static_cast<int>(args.size()), f(width), f(width));
  SpirvModule::Words operands{fn};
  operands.insert(operands.end(), args.begin(), args.end());
  return m_.op(SOp::OpFunctionCall, f(width), operands);
}

Id SpirvMath::half_to_float(Id bits) {
  return m_.op(SOp::OpFunctionCall, f(32), {helper(kHalfToFloat, 32, 1, u(16), f(32)), bits});
}
Id SpirvMath::float_to_half(Id x) { return m_.op(SOp::OpFunctionCall, u(16), {helper(kFloatToHalf, 32, 1, f(32), u(16)), x}); }
Id SpirvMath::bf16_to_float(Id bits) {
  return m_.op(SOp::OpFunctionCall, f(32), {helper(kBf16ToFloat, 32, 1, u(16), f(32)), bits});
}
Id SpirvMath::float_to_bf16(Id x) { return m_.op(SOp::OpFunctionCall, u(16), {helper(kFloatToBf16, 32, 1, f(32), u(16)), x}); }

}  // namespace kiln
