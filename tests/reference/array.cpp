// The Array itself: rounding to a dtype, creation, index arithmetic, comparison and printing.
#include <algorithm>
#include <bit>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <stdexcept>

#include "reference/detail.h"
#include "uop/half.h"

namespace kiln::ref {

namespace detail {

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void fail(const std::string& what) { throw std::invalid_argument(what); }

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Shape index_of(int64_t flat, const Shape& shape) {
  Shape index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

int64_t flat_of(const Shape& index, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

int64_t broadcast_flat(const Shape& shape, const Shape& out_index) {
  size_t lead = out_index.size() - shape.size();
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + (shape[d] == 1 ? 0 : out_index[lead + d]);
  return flat;
}

int64_t normalize_axis(const char* op, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    fail(message(op, ": axis ", axis, " is out of range for rank ", rank, "; use an axis in [", -rank, ", ", rank,
                 ")"));
  return axis < 0 ? axis + rank : axis;
}

std::vector<bool> axis_mask(const char* op, const Axes& axes, int64_t rank) {
  std::vector<bool> mask(rank, axes.empty());
  for (int64_t axis : axes) {
    int64_t d = normalize_axis(op, axis, rank);
    if (mask[d]) fail(message(op, ": axis ", axis, " is listed twice"));
    mask[d] = true;
  }
  return mask;
}

Array zeros(const Shape& shape, DType dtype) {
  return Array{shape, std::vector<double>(numel_of(shape), 0.0), dtype};
}

}  // namespace detail

using namespace detail;

namespace {

// Rounding a double to float and then to float16 can round twice: 1 + 2^-11 + 2^-40 becomes the
// float 1 + 2^-11, a float16 tie, which goes to even (1.0) where the double should go up. Rounding
// the inexact case to the odd float neighbour instead keeps "above or below the tie" in the last
// bit, which makes the second rounding correct (float has more than two extra bits of precision).
float to_float_round_odd(double v) {
  float f = static_cast<float>(v);
  if (std::isfinite(f) && static_cast<double>(f) != v && (std::bit_cast<uint32_t>(f) & 1) == 0)
    f = std::nextafter(f, v > f ? INFINITY : -INFINITY);
  return f;
}

double wrap_int(DType t, double v) {
  if (std::isnan(v)) return 0;
  if (std::isinf(v)) return as_double(v > 0 ? highest(t) : lowest(t));
  double x = std::trunc(v);
  // In range: the value itself. (Wrapping an in-range negative 64-bit value through r += 2^64 would
  // round in double and lose it.)
  if (x >= as_double(lowest(t)) && x <= as_double(highest(t))) return x + 0.0;
  double modulus = std::ldexp(1.0, bits(t.scalar));
  double r = std::fmod(x, modulus);  // exact, in (-modulus, modulus)
  if (r < 0) r += modulus;
  if (!is_unsigned(t) && r >= modulus / 2) r -= modulus;
  return r + 0.0;  // no -0 among integers
}

}  // namespace

double round_to(DType t, double v) {
  switch (t.scalar) {
    case ScalarType::Void: fail("round_to: void has no values");
    case ScalarType::Bool: return v != 0 ? 1 : 0;
    case ScalarType::Int8:
    case ScalarType::Int16:
    case ScalarType::Int32:
    case ScalarType::Int64:
    case ScalarType::UInt8:
    case ScalarType::UInt16:
    case ScalarType::UInt32:
    case ScalarType::UInt64: return wrap_int(t, v);
    case ScalarType::Float16: return half_bits_to_float(float_to_half_bits(to_float_round_odd(v)));
    case ScalarType::BFloat16: return bf16_bits_to_float(float_to_bf16_bits(to_float_round_odd(v)));
    case ScalarType::Float32: return static_cast<float>(v);
    case ScalarType::Float64: return v;
  }
  fail("round_to: unknown scalar type");
}

int64_t Array::numel() const { return numel_of(shape); }

double Array::at(std::vector<int64_t> index) const {
  if (index.size() != shape.size())
    throw std::out_of_range(message("at: ", index.size(), " indices for an array of shape ", shape_str(shape)));
  for (size_t d = 0; d < shape.size(); ++d)
    if (index[d] < 0 || index[d] >= shape[d])
      throw std::out_of_range(message("at: index ", shape_str(index), " is outside shape ", shape_str(shape)));
  return data[flat_of(index, shape)];
}

Array array(Shape shape, std::vector<double> values, DType dtype) {
  for (int64_t d : shape)
    if (d < 0) fail(message("array: negative dimension in shape ", shape_str(shape)));
  if (static_cast<int64_t>(values.size()) != numel_of(shape))
    fail(message("array: ", values.size(), " values do not fill shape ", shape_str(shape)));
  for (double& v : values) v = round_to(dtype, v);
  return Array{std::move(shape), std::move(values), dtype};
}

Array scalar(double v, DType dtype) { return array({}, {v}, dtype); }

Array full(Shape shape, double v, DType dtype) {
  int64_t n = std::max<int64_t>(numel_of(shape), 0);  // array() reports a negative dimension
  return array(std::move(shape), std::vector<double>(n, v), dtype);
}

Array arange(int64_t n, DType dtype) {
  if (n < 0) fail(message("arange: negative length ", n));
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<double>(i);
  return array({n}, std::move(values), dtype);
}

Array cast(const Array& a, DType dtype) { return array(a.shape, a.data, dtype); }

bool allclose(const Array& got, const Array& want, double rtol, double atol, std::string* why) {
  if (got.shape != want.shape) {
    if (why) *why = message("shape ", shape_str(got.shape), " != expected ", shape_str(want.shape));
    return false;
  }
  auto close = [&](double g, double w) {
    if (std::isnan(g) || std::isnan(w)) return std::isnan(g) && std::isnan(w);
    if (std::isinf(g) || std::isinf(w)) return g == w;  // else rtol * inf would accept anything
    return std::abs(g - w) <= atol + rtol * std::abs(w);
  };
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (close(got.data[i], want.data[i])) continue;
    if (bad++ == 0) first = i;
  }
  if (bad > 0 && why) {
    *why = message(std::setprecision(17), "at index ", shape_str(index_of(first, got.shape)), ": got ",
                   got.data[first], ", expected ", want.data[first], " (rtol ", rtol, ", atol ", atol, "); ", bad,
                   " of ", got.numel(), " elements differ");
  }
  return bad == 0;
}

std::string to_string(const Array& a) {
  constexpr int64_t kShown = 20;
  std::ostringstream out;
  // Enough digits to tell neighbouring values of the dtype apart, no more.
  out << std::setprecision(a.dtype == dtypes::float64 ? 17 : 9) << a.dtype.name() << shape_str(a.shape) << " {";
  for (int64_t i = 0; i < std::min(a.numel(), kShown); ++i) out << (i ? ", " : "") << a.data[i];
  if (a.numel() > kShown) out << ", ... (" << a.numel() << " values)";
  out << "}";
  return out.str();
}

}  // namespace kiln::ref
