// Tensor: division with rounding (div with rounding_mode, floor_divide, remainder, fmod), add with
// alpha, and shifts by a tensor of amounts, with PyTorch's semantics, from the IR's IDIV, MOD, TRUNC
// and arithmetic.
//
// Integers: an integer division by zero is an error (PyTorch raises too); it is checked on the host,
// so these ops wait for the divisor. Floats: fmod and remainder are computed in float64 (exact for
// float32 operands while |a/b| < 2^29; for float64 operands off by at most half an ulp of a/b's
// product with b, that is of a, when |a/b| is large); division by zero gives inf or NaN as in C.
#include <cmath>

#include "frontend/detail.h"

namespace kiln {

namespace {

enum class Rounding { Trunc, Floor };

void require_no_bool(const Tensor& a, const Tensor& b, const char* op) {
  if (is_bool(a.dtype()) && is_bool(b.dtype()))
    throw Error(kiln::cat(op, ": both operands are bool; cast them to an integer or float type first"));
}

// Integer division by zero traps on the CPU (and means nothing): refuse it before building the graph.
void check_nonzero_divisor(const Tensor& b, const char* op) {
  if (b.numel() == 0) return;
  Tensor zeros = b.eq(b.zeros_like()).cast(dtypes::int64).sum();
  int64_t n = zeros.item<int64_t>();
  if (n > 0)
    throw Error(kiln::cat(op, ": integer division by zero (", n, " of the ", b.numel(), " divisors of shape ", shape_str(b.shape()),
                          " are 0); use float operands for inf/NaN results, or mask the zeros"));
}

struct IntOperands {
  Tensor a, b;
};
IntOperands int_operands(const Tensor& a, const Tensor& b, const char* op) {
  require_no_bool(a, b, op);
  DType d = detail::result_type(a, b);
  if (is_bool(d)) d = dtypes::int64;
  Shape out = detail::broadcast_shapes(a.shape(), b.shape(), op);
  Tensor x = a.cast(d).expand(out), y = b.cast(d).expand(out);
  check_nonzero_divisor(b.cast(d), op);
  return {x, y};
}

// C's a / b and a % b without the cases that trap on x86: INT_MIN / -1, so a divisor of -1 divides as
// -a (which wraps to INT_MIN, as in PyTorch) and leaves 0; and a divisor of 0, which the caller has
// ruled out in b's values but which a kernel still meets where b is read through a pad (padding
// reads as 0, and both sides of a where are computed): it divides by 1 there.
std::pair<Tensor, Tensor> c_divmod(const Tensor& a, const Tensor& b) {
  Tensor minus_one = b.full_like(-1.0);
  Tensor by_minus_one = is_unsigned(b.dtype()) ? b.ne(b) : b.eq(minus_one);
  Tensor safe = by_minus_one.logical_or(b.eq(b.zeros_like())).where(b.ones_like(), b);
  Tensor q = Tensor(UOp::make(Op::IDIV, a.dtype(), {a.uop(), safe.uop()}), a.shape());
  Tensor r = Tensor(UOp::make(Op::MOD, a.dtype(), {a.uop(), safe.uop()}), a.shape());
  return {by_minus_one.where(-a, q), by_minus_one.where(a.zeros_like(), r)};
}

// Values of opposite sign (neither zero): the case where truncation and flooring differ.
Tensor opposite_signs(const Tensor& r, const Tensor& b) {
  Tensor zero = r.zeros_like();
  return r.ne(zero).logical_and(r.lt(zero).ne(b.lt(zero)));
}

// Float operands broadcast, in the type they compute in (float32 for float16/bfloat16), and the
// result type.
struct FloatOperands {
  Tensor a, b;
  DType result;
};
FloatOperands float_operands(const Tensor& a, const Tensor& b, const char* op) {
  DType d = detail::result_type(a, b);
  Shape out = detail::broadcast_shapes(a.shape(), b.shape(), op);
  DType c = detail::compute_dtype(d);
  return {a.cast(d).cast(c).expand(out), b.cast(d).cast(c).expand(out), d};
}

// C's fmod (the sign of a), computed in float64: a - trunc(a/b) b, with the quotient corrected by
// one where a/b rounded across an integer; a zero result keeps a's sign; fmod(finite, +-inf) is a.
// The result is exact, so it fits the operands' type.
Tensor fmod_exact(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in.cast(dtypes::float64), b = b_in.cast(dtypes::float64);
  Tensor zero = a.zeros_like();
  Tensor r = a - (a / b).trunc() * b;
  Tensor ab = b.abs();
  Tensor a_neg = a.lt(zero);
  Tensor step = a_neg.where(-ab, ab);                      // toward a's side
  r = opposite_signs(r, step).where(r + step, r);          // the quotient was one too large
  r = r.abs().ge(ab).logical_and(ab.ne(zero)).where(r - step, r);  // one too small
  Tensor inf = a.full_like(INFINITY);
  r = b.abs().eq(inf).logical_and(a.abs().lt(inf)).where(a, r);
  return r.eq(zero).where(detail::signed_zero(a), r).cast(a_in.dtype());
}

Tensor divide_rounded(const Tensor& a, const Tensor& b, Rounding mode, const char* op) {
  DType d = detail::result_type(a, b);
  if (!is_float(d) && !(is_bool(a.dtype()) && is_bool(b.dtype()))) {
    IntOperands p = int_operands(a, b, op);
    auto [q, r] = c_divmod(p.a, p.b);
    if (mode == Rounding::Trunc) return q;
    return opposite_signs(r, p.b).where(q - q.ones_like(), q);
  }
  require_no_bool(a, b, op);
  if (mode == Rounding::Trunc) return (a / b).trunc();
  // Python's float //, as torch computes it (in the operands' type): (a - fmod(a, b)) / b is an
  // integer up to rounding; step down one where the remainder and b differ in sign, and round the
  // rest to the nearest integer. A zero quotient has the sign of a / b; b = 0 gives a / b.
  FloatOperands p = float_operands(a, b, op);
  Tensor zero = p.a.zeros_like();
  Tensor m = fmod_exact(p.a, p.b);
  Tensor q = (p.a - m) / p.b;
  q = opposite_signs(m, p.b).where(q - 1.0, q);
  Tensor f = q.floor();
  Tensor rounded = (q - f).gt(q.full_like(0.5)).where(f + 1.0, f);
  Tensor out = q.eq(zero).where(detail::signed_zero(p.a / p.b), rounded);
  return p.b.eq(zero).where(p.a / p.b, out).cast(p.result);
}

}  // namespace

Tensor Tensor::add(const Tensor& other, double alpha) const {
  if (alpha == 1.0) return *this + other;
  if (!is_float(detail::result_type(*this, other)) && std::floor(alpha) != alpha)
    throw Error(kiln::cat("add: alpha ", alpha, " is not an integer, but the operands (", dtype().name(), ", ", other.dtype().name(),
                          ") are; use float operands"));
  DType d = detail::result_type(*this, other);
  return *this + (is_bool(other.dtype()) ? other.cast(d) : other) * alpha;
}

Tensor Tensor::div(const Tensor& other, const std::string& rounding_mode) const {
  if (rounding_mode.empty() || rounding_mode == "none") return *this / other;
  if (rounding_mode == "trunc") return divide_rounded(*this, other, Rounding::Trunc, "div");
  if (rounding_mode == "floor") return divide_rounded(*this, other, Rounding::Floor, "div");
  throw Error(kiln::cat("div: rounding_mode \"", rounding_mode, "\" is not one of \"trunc\", \"floor\" or \"\" (true division)"));
}

Tensor Tensor::floor_divide(const Tensor& other) const { return divide_rounded(*this, other, Rounding::Floor, "floor_divide"); }

Tensor Tensor::fmod(const Tensor& other) const {
  if (!is_float(detail::result_type(*this, other))) {
    IntOperands p = int_operands(*this, other, "fmod");
    return c_divmod(p.a, p.b).second;
  }
  require_no_bool(*this, other, "fmod");
  FloatOperands p = float_operands(*this, other, "fmod");
  return fmod_exact(p.a, p.b).cast(p.result);
}

Tensor Tensor::remainder(const Tensor& other) const {
  if (!is_float(detail::result_type(*this, other))) {
    IntOperands p = int_operands(*this, other, "remainder");
    Tensor r = c_divmod(p.a, p.b).second;
    return opposite_signs(r, p.b).where(r + p.b, r);
  }
  require_no_bool(*this, other, "remainder");
  // Python's %, as torch computes it: fmod moved to b's side where they differ in sign (a zero keeps
  // fmod's sign). remainder(finite, inf) is a when a and b agree in sign, else b.
  FloatOperands p = float_operands(*this, other, "remainder");
  Tensor m = fmod_exact(p.a, p.b);
  return opposite_signs(m, p.b).where(m + p.b, m).cast(p.result);
}

// Shifts by a tensor of amounts: amounts outside 0..width-1 shift everything out (0, or -1 for a
// negative value shifted right) instead of C's undefined behaviour.
Tensor Tensor::shift_by(Op op, const Tensor& bits, const char* name) const {
  if (is_float(dtype()) || is_float(bits.dtype()) || is_bool(dtype()) || is_bool(bits.dtype()))
    throw Error(kiln::cat(name, ": needs integer tensors, got ", dtype().name(), " and ", bits.dtype().name()));
  DType d = detail::result_type(*this, bits);
  Shape out = detail::broadcast_shapes(shape(), bits.shape(), name);
  Tensor x = cast(d).expand(out), n = bits.cast(d).expand(out);
  Tensor in_range = n.lt(n.full_like(static_cast<double>(d.itemsize() * 8)));
  if (!is_unsigned(d)) in_range = in_range.logical_and(n.ge(n.zeros_like()));
  Tensor shifted = x.binary(op, in_range.where(n, n.zeros_like()), name);
  Tensor fill = op == Op::SHR && !is_unsigned(d) ? x.lt(x.zeros_like()).where(x.full_like(-1.0), x.zeros_like()) : x.zeros_like();
  return in_range.where(shifted, fill);
}

Tensor Tensor::shl(const Tensor& bits) const { return shift_by(Op::SHL, bits, "shl"); }
Tensor Tensor::shr(const Tensor& bits) const { return shift_by(Op::SHR, bits, "shr"); }

}  // namespace kiln
