// Elementwise ops: one loop over the broadcast output, one scalar function per op.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "reference/detail.h"

namespace kiln::ref {

using namespace detail;

namespace {

Shape broadcast_named(const char* op, const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (size_t i = 0; i < out.size(); ++i) {  // i counts from the right
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1, db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      fail(message(op, ": shapes ", shape_str(a), " and ", shape_str(b), " do not broadcast (", da, " vs ", db,
                   " at axis ", -1 - static_cast<int64_t>(i), ")"));
    out[out.size() - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

Array binary_named(const char* op, const Array& a, const Array& b, const BinaryFn& fn, DType out_dtype) {
  Array out = zeros(broadcast_named(op, a.shape, b.shape), out_dtype);
  for (int64_t i = 0; i < out.numel(); ++i) {
    Shape index = index_of(i, out.shape);
    double x = a.data[broadcast_flat(a.shape, index)], y = b.data[broadcast_flat(b.shape, index)];
    out.data[i] = round_to(out_dtype, fn(x, y));
  }
  return out;
}

DType promoted(const Array& a, const Array& b) { return promote_types(a.dtype, b.dtype); }
DType floating(const Array& a) { return to_floating(a.dtype); }

Array arithmetic(const char* op, const Array& a, const Array& b, const BinaryFn& fn) {
  return binary_named(op, a, b, fn, promoted(a, b));
}

Array compare(const char* op, const Array& a, const Array& b, bool (*fn)(double, double)) {
  return binary_named(op, a, b, [&](double x, double y) { return fn(x, y) ? 1.0 : 0.0; }, dtypes::bool_);
}

void require_int(const char* op, const Array& a, bool bool_ok) {
  if (is_int(a.dtype) || (bool_ok && is_bool(a.dtype))) return;
  fail(message(op, ": needs ", bool_ok ? "integer or bool" : "integer", " operands, got ", a.dtype.name()));
}

// Two's complement bits of an integer value (exact: values are integers of their dtype), and the
// value a bit pattern reads as. Only uint64 reads the top bit as 2^63; everything else is signed
// and round_to then wraps it at the dtype's width.
uint64_t bits_of(double v) { return v < 0 ? static_cast<uint64_t>(static_cast<int64_t>(v)) : static_cast<uint64_t>(v); }
double value_of(uint64_t bits, DType t) {
  return t == dtypes::uint64 ? static_cast<double>(bits) : static_cast<double>(static_cast<int64_t>(bits));
}

Array bitwise(const char* op, const Array& a, const Array& b, uint64_t (*fn)(uint64_t, uint64_t)) {
  require_int(op, a, true);
  require_int(op, b, true);
  DType out = promoted(a, b);
  return binary_named(op, a, b, [&](double x, double y) { return value_of(fn(bits_of(x), bits_of(y)), out); }, out);
}

// Integer division by zero is undefined in C and an error in torch; float division gives inf/NaN.
Array divide(const char* op, const Array& a, const Array& b, double (*float_fn)(double, double),
             int64_t (*int_fn)(int64_t, int64_t)) {
  DType out = promoted(a, b);
  if (!is_int(out) && !is_bool(out)) return binary_named(op, a, b, float_fn, out);
  return binary_named(op, a, b, [&](double x, double y) {
    if (y == 0) fail(message(op, ": integer division by zero"));
    return static_cast<double>(int_fn(static_cast<int64_t>(x), static_cast<int64_t>(y)));
  }, out);
}

double sigmoid_of(double x) { return 1 / (1 + std::exp(-x)); }

double round_half_even(double x) {
  double below = std::floor(x), rest = x - below;  // exact
  if (rest > 0.5) return below + 1;
  if (rest < 0.5) return below;
  return std::fmod(below, 2) == 0 ? below : below + 1;
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b) { return broadcast_named("broadcast", a, b); }

Array unary(const Array& a, const UnaryFn& fn, DType out) {
  Array result = zeros(a.shape, out);
  for (int64_t i = 0; i < a.numel(); ++i) result.data[i] = round_to(out, fn(a.data[i]));
  return result;
}

Array binary(const Array& a, const Array& b, const BinaryFn& fn, DType out) {
  return binary_named("binary", a, b, fn, out);
}

Array where(const Array& cond, const Array& a, const Array& b, DType out_dtype) {
  Shape shape = broadcast_named("where", cond.shape, broadcast_named("where", a.shape, b.shape));
  Array out = zeros(shape, out_dtype);
  for (int64_t i = 0; i < out.numel(); ++i) {
    Shape index = index_of(i, shape);
    double c = cond.data[broadcast_flat(cond.shape, index)];
    double x = a.data[broadcast_flat(a.shape, index)], y = b.data[broadcast_flat(b.shape, index)];
    out.data[i] = round_to(out_dtype, c != 0 ? x : y);
  }
  return out;
}

Array where(const Array& cond, const Array& a, const Array& b) { return where(cond, a, b, promoted(a, b)); }

// ---- arithmetic ----

Array add(const Array& a, const Array& b) { return arithmetic("add", a, b, [](double x, double y) { return x + y; }); }
Array sub(const Array& a, const Array& b) { return arithmetic("sub", a, b, [](double x, double y) { return x - y; }); }
Array mul(const Array& a, const Array& b) { return arithmetic("mul", a, b, [](double x, double y) { return x * y; }); }

Array div(const Array& a, const Array& b) {
  return binary_named("div", a, b, [](double x, double y) { return x / y; }, to_floating(promoted(a, b)));
}

Array pow(const Array& a, const Array& b) {
  DType out = promoted(a, b);
  return binary_named("pow", a, b, [&](double x, double y) {
    if (!is_float(out) && y < 0)
      fail(message("pow: integer ", x, " to the negative power ", y, "; use a float dtype"));
    return std::pow(x, y);
  }, out);
}

Array maximum(const Array& a, const Array& b) {
  return arithmetic("maximum", a, b,
                    [](double x, double y) { return std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y); });
}

Array minimum(const Array& a, const Array& b) {
  return arithmetic("minimum", a, b,
                    [](double x, double y) { return std::isnan(x) || std::isnan(y) ? NAN : std::min(x, y); });
}

// For float32 and narrower inputs the double quotient is never rounded across an integer, so
// floor(x / y) and trunc(x / y) are the exact floor and truncation of the true quotient.
Array floor_divide(const Array& a, const Array& b) {
  return divide("floor_divide", a, b, [](double x, double y) { return std::floor(x / y); },
                [](int64_t x, int64_t y) { return x / y - ((x % y != 0) && ((x < 0) != (y < 0)) ? 1 : 0); });
}

Array remainder(const Array& a, const Array& b) {
  return divide("remainder", a, b,
                [](double x, double y) {
                  double r = std::fmod(x, y);
                  return r != 0 && ((r < 0) != (y < 0)) ? r + y : r;
                },
                [](int64_t x, int64_t y) {
                  int64_t r = x % y;
                  return r != 0 && ((r < 0) != (y < 0)) ? r + y : r;
                });
}

Array trunc_divide(const Array& a, const Array& b) {
  return divide("trunc_divide", a, b, [](double x, double y) { return std::trunc(x / y); },
                [](int64_t x, int64_t y) { return x / y; });
}

Array fmod(const Array& a, const Array& b) {
  return divide("fmod", a, b, [](double x, double y) { return std::fmod(x, y); },
                [](int64_t x, int64_t y) { return x % y; });
}

// ---- unary, same dtype ----

Array neg(const Array& a) { return unary(a, [](double x) { return -x; }, a.dtype); }
Array abs(const Array& a) { return unary(a, [](double x) { return std::abs(x); }, a.dtype); }
Array sign(const Array& a) { return unary(a, [](double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }, a.dtype); }
Array floor(const Array& a) { return unary(a, [](double x) { return std::floor(x); }, a.dtype); }
Array ceil(const Array& a) { return unary(a, [](double x) { return std::ceil(x); }, a.dtype); }
Array round(const Array& a) { return unary(a, round_half_even, a.dtype); }
Array trunc(const Array& a) { return unary(a, [](double x) { return std::trunc(x); }, a.dtype); }
Array relu(const Array& a) { return unary(a, [](double x) { return x > 0 || std::isnan(x) ? x : 0.0; }, a.dtype); }

Array clamp(const Array& a, std::optional<double> lo, std::optional<double> hi) {
  return unary(a, [&](double x) {
    if (std::isnan(x)) return x;
    if (lo && x < *lo) x = *lo;
    if (hi && x > *hi) x = *hi;  // after lo, so lo > hi gives hi, as torch
    return x;
  }, a.dtype);
}

// ---- unary, floating ----

Array exp(const Array& a) { return unary(a, [](double x) { return std::exp(x); }, floating(a)); }
Array log(const Array& a) { return unary(a, [](double x) { return std::log(x); }, floating(a)); }
Array exp2(const Array& a) { return unary(a, [](double x) { return std::exp2(x); }, floating(a)); }
Array log2(const Array& a) { return unary(a, [](double x) { return std::log2(x); }, floating(a)); }
Array sqrt(const Array& a) { return unary(a, [](double x) { return std::sqrt(x); }, floating(a)); }
Array rsqrt(const Array& a) { return unary(a, [](double x) { return 1 / std::sqrt(x); }, floating(a)); }
Array reciprocal(const Array& a) { return unary(a, [](double x) { return 1 / x; }, floating(a)); }
Array sin(const Array& a) { return unary(a, [](double x) { return std::sin(x); }, floating(a)); }
Array cos(const Array& a) { return unary(a, [](double x) { return std::cos(x); }, floating(a)); }
Array tan(const Array& a) { return unary(a, [](double x) { return std::tan(x); }, floating(a)); }
Array tanh(const Array& a) { return unary(a, [](double x) { return std::tanh(x); }, floating(a)); }
Array erf(const Array& a) { return unary(a, [](double x) { return std::erf(x); }, floating(a)); }
Array sigmoid(const Array& a) { return unary(a, sigmoid_of, floating(a)); }
Array silu(const Array& a) { return unary(a, [](double x) { return x * sigmoid_of(x); }, floating(a)); }

Array leaky_relu(const Array& a, double slope) {
  return unary(a, [&](double x) { return x > 0 ? x : x * slope; }, floating(a));
}

Array gelu(const Array& a) {
  return unary(a, [](double x) { return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2)); }, floating(a));
}

Array gelu_tanh(const Array& a) {
  const double k = std::sqrt(2 / std::numbers::pi);
  return unary(a, [&](double x) { return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x))); },
               floating(a));
}

Array softplus(const Array& a, double beta, double threshold) {
  return unary(a, [&](double x) { return beta * x > threshold ? x : std::log1p(std::exp(beta * x)) / beta; },
               floating(a));
}

// ---- comparisons and logic ----

Array eq(const Array& a, const Array& b) { return compare("eq", a, b, [](double x, double y) { return x == y; }); }
Array ne(const Array& a, const Array& b) { return compare("ne", a, b, [](double x, double y) { return x != y; }); }
Array lt(const Array& a, const Array& b) { return compare("lt", a, b, [](double x, double y) { return x < y; }); }
Array le(const Array& a, const Array& b) { return compare("le", a, b, [](double x, double y) { return x <= y; }); }
Array gt(const Array& a, const Array& b) { return compare("gt", a, b, [](double x, double y) { return x > y; }); }
Array ge(const Array& a, const Array& b) { return compare("ge", a, b, [](double x, double y) { return x >= y; }); }

Array logical_and(const Array& a, const Array& b) {
  return compare("logical_and", a, b, [](double x, double y) { return x != 0 && y != 0; });
}
Array logical_or(const Array& a, const Array& b) {
  return compare("logical_or", a, b, [](double x, double y) { return x != 0 || y != 0; });
}
Array logical_not(const Array& a) { return unary(a, [](double x) { return double(x == 0); }, dtypes::bool_); }

// ---- bitwise ----

Array bitwise_and(const Array& a, const Array& b) {
  return bitwise("bitwise_and", a, b, [](uint64_t x, uint64_t y) { return x & y; });
}
Array bitwise_or(const Array& a, const Array& b) {
  return bitwise("bitwise_or", a, b, [](uint64_t x, uint64_t y) { return x | y; });
}
Array bitwise_xor(const Array& a, const Array& b) {
  return bitwise("bitwise_xor", a, b, [](uint64_t x, uint64_t y) { return x ^ y; });
}

Array bitwise_not(const Array& a) {
  require_int("bitwise_not", a, true);
  if (is_bool(a.dtype)) return logical_not(a);
  return unary(a, [&](double x) { return value_of(~bits_of(x), a.dtype); }, a.dtype);
}

Array shl(const Array& a, const Array& b) {
  require_int("shl", a, false);
  require_int("shl", b, false);
  DType out = promoted(a, b);
  return binary_named("shl", a, b, [&](double x, double y) {
    if (y < 0) fail(message("shl: negative shift amount ", y));
    return y >= 64 ? 0.0 : value_of(bits_of(x) << static_cast<int>(y), out);  // round_to wraps to the width
  }, out);
}

Array shr(const Array& a, const Array& b) {
  require_int("shr", a, false);
  require_int("shr", b, false);
  DType out = promoted(a, b);
  return binary_named("shr", a, b, [&](double x, double y) {
    if (y < 0) fail(message("shr: negative shift amount ", y));
    if (y >= 64) return x < 0 ? -1.0 : 0.0;
    int shift = static_cast<int>(y);
    if (out == dtypes::uint64) return static_cast<double>(bits_of(x) >> shift);
    return static_cast<double>(static_cast<int64_t>(x) >> shift);  // arithmetic; non-negatives shift in zeros
  }, out);
}

}  // namespace kiln::ref
