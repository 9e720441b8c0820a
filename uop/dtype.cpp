#include "uop/dtype.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <utility>

#include "uop/half.h"

namespace kiln {

namespace {

// The category of a scalar: promotion, casting and limits are decided per category and width.
enum class Kind { Void, Bool, Signed, Unsigned, Float };

struct ScalarInfo {
  const char* name;
  int bits;
  Kind kind;
};

ScalarInfo info(ScalarType s) {
  switch (s) {
    case ScalarType::Void: return {"void", 0, Kind::Void};
    case ScalarType::Bool: return {"bool", 8, Kind::Bool};
    case ScalarType::Int8: return {"int8", 8, Kind::Signed};
    case ScalarType::Int16: return {"int16", 16, Kind::Signed};
    case ScalarType::Int32: return {"int32", 32, Kind::Signed};
    case ScalarType::Int64: return {"int64", 64, Kind::Signed};
    case ScalarType::UInt8: return {"uint8", 8, Kind::Unsigned};
    case ScalarType::UInt16: return {"uint16", 16, Kind::Unsigned};
    case ScalarType::UInt32: return {"uint32", 32, Kind::Unsigned};
    case ScalarType::UInt64: return {"uint64", 64, Kind::Unsigned};
    case ScalarType::Float16: return {"float16", 16, Kind::Float};
    case ScalarType::BFloat16: return {"bfloat16", 16, Kind::Float};
    case ScalarType::Float32: return {"float32", 32, Kind::Float};
    case ScalarType::Float64: return {"float64", 64, Kind::Float};
  }
  throw_internal("ScalarType is a declared enumerator", cat(static_cast<int>(s)), __FILE__, __LINE__);
}

Kind kind(DType t) { return info(t.scalar).kind; }

constexpr std::array<DType, 13> kScalars = {
    dtypes::bool_,   dtypes::int8,     dtypes::int16,   dtypes::int32,  dtypes::int64,
    dtypes::uint8,   dtypes::uint16,   dtypes::uint32,  dtypes::uint64,
    dtypes::float16, dtypes::bfloat16, dtypes::float32, dtypes::float64};

void check_value_dtype(DType t, const char* what) {
  KILN_ASSERT(!t.is_ptr && t.scalar != ScalarType::Void, what, " needs a value dtype, got ", t.name());
}

// ---- rounding a constant into a narrow float exactly once ----
//
// Going double -> float -> half rounds twice and can be wrong: 1 + 2^-11 + 2^-40 becomes the tie
// 1 + 2^-11 in float, which then rounds to even (1.0) instead of up. Rounding the wider steps "to odd"
// (truncate, and set the last bit if anything was dropped) keeps the sticky information, and then one
// final round-to-nearest-even to at least 2 fewer bits is correctly rounded.

double odd_double(uint64_t magnitude) {
  int drop = std::max(0, static_cast<int>(std::bit_width(magnitude)) - 53);
  uint64_t kept = magnitude >> drop;
  if ((kept << drop) != magnitude) kept |= 1;
  return std::ldexp(static_cast<double>(kept), drop);
}

float odd_float(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(f) == d) return f;
  if (std::isinf(f)) return std::copysign(FLT_MAX, f);  // FLT_MAX has an odd mantissa
  if (std::bit_cast<uint32_t>(f) & 1) return f;
  return std::nextafter(f, d > f ? INFINITY : -INFINITY);  // the other neighbour of d is odd
}

float odd_float_of(ConstValue v) {
  if (auto* i = std::get_if<int64_t>(&v)) {
    double mag = odd_double(*i < 0 ? 0 - static_cast<uint64_t>(*i) : static_cast<uint64_t>(*i));
    return odd_float(*i < 0 ? -mag : mag);
  }
  if (auto* u = std::get_if<uint64_t>(&v)) return odd_float(odd_double(*u));
  return odd_float(as_double(v));
}

double to_float_value(ConstValue v, ScalarType s) {
  switch (s) {
    case ScalarType::Float64: return as_double(v);
    case ScalarType::Float32:
      // One hardware conversion from the source type is a single correct rounding.
      return std::visit([](auto x) { return static_cast<double>(static_cast<float>(x)); }, v);
    case ScalarType::Float16: return half_bits_to_float(float_to_half_bits(odd_float_of(v)));
    case ScalarType::BFloat16: return bf16_bits_to_float(float_to_bf16_bits(odd_float_of(v)));
    case ScalarType::Void: case ScalarType::Bool: case ScalarType::Int8: case ScalarType::Int16:
    case ScalarType::Int32: case ScalarType::Int64: case ScalarType::UInt8: case ScalarType::UInt16:
    case ScalarType::UInt32: case ScalarType::UInt64: break;
  }
  throw_internal("to_float_value gets a float dtype", info(s).name, __FILE__, __LINE__);
}

ConstValue to_int_value(ConstValue v, DType t) {
  int b = bits(t.scalar);
  bool is_signed = kind(t) == Kind::Signed;
  if (auto* d = std::get_if<double>(&v)) {
    if (std::isnan(*d)) return is_signed ? ConstValue{int64_t{0}} : ConstValue{uint64_t{0}};
    double x = std::trunc(*d);
    // [lo, end) are exactly the integers of the target; both bounds are powers of two, exact in double.
    double lo = is_signed ? -std::ldexp(1.0, b - 1) : 0.0, end = std::ldexp(1.0, is_signed ? b - 1 : b);
    if (x < lo) return lowest(t);
    if (x >= end) return highest(t);
    return is_signed ? ConstValue{static_cast<int64_t>(x)} : ConstValue{static_cast<uint64_t>(x)};
  }
  // Integers (and bool) wrap: keep the low `b` bits of the two's complement pattern.
  uint64_t raw = std::visit([](auto x) { return static_cast<uint64_t>(x); }, v);
  int drop = 64 - b;
  if (is_signed) return static_cast<int64_t>(raw << drop) >> drop;  // arithmetic shift sign-extends
  return (raw << drop) >> drop;
}

double float_max(ScalarType s) {
  switch (s) {
    case ScalarType::Float16: return 65504.0;      // (2 - 2^-10) * 2^15
    case ScalarType::BFloat16: return 0x1.fep127;  // (2 - 2^-7) * 2^127
    case ScalarType::Float32: return FLT_MAX;
    case ScalarType::Float64: return DBL_MAX;
    case ScalarType::Void: case ScalarType::Bool: case ScalarType::Int8: case ScalarType::Int16:
    case ScalarType::Int32: case ScalarType::Int64: case ScalarType::UInt8: case ScalarType::UInt16:
    case ScalarType::UInt32: case ScalarType::UInt64: break;
  }
  throw_internal("float_max gets a float dtype", info(s).name, __FILE__, __LINE__);
}

DType signed_int_of_bits(int b) {
  for (DType t : {dtypes::int8, dtypes::int16, dtypes::int32, dtypes::int64})
    if (bits(t.scalar) >= b) return t;
  throw_internal("a signed int is at least as wide as requested", cat(b, " bits"), __FILE__, __LINE__);
}

// PyTorch's "barebones" unsigned types: storage exists, but promotion with other ints does not.
bool is_barebones_unsigned(DType t) { return is_unsigned(t) && t.scalar != ScalarType::UInt8; }

}  // namespace

size_t DType::itemsize() const {
  if (is_ptr) return 8;
  return static_cast<size_t>(bits(scalar) / 8) * count;
}

std::string DType::name() const {
  std::string s = info(scalar).name;
  if (count > 1) s += cat("x", count);
  if (!is_ptr) return s;
  switch (addr) {
    case AddrSpace::Global: return s + "*";
    case AddrSpace::Local: return s + "*local";
    case AddrSpace::Reg: return s + "*reg";
  }
  throw_internal("AddrSpace is a declared enumerator", cat(static_cast<int>(addr)), __FILE__, __LINE__);
}

std::span<const DType> all_scalar_dtypes() { return kScalars; }

int bits(ScalarType s) { return info(s).bits; }

bool is_bool(DType t) { return kind(t) == Kind::Bool; }
bool is_int(DType t) { return kind(t) == Kind::Signed || kind(t) == Kind::Unsigned; }
bool is_unsigned(DType t) { return kind(t) == Kind::Unsigned; }
bool is_float(DType t) { return kind(t) == Kind::Float; }

std::optional<DType> dtype_from_name(std::string_view name) {
  static constexpr std::pair<std::string_view, DType> kAliases[] = {
      {"float", dtypes::float32}, {"double", dtypes::float64}, {"half", dtypes::float16},
      {"int", dtypes::int32},     {"long", dtypes::int64}};
  if (name == "void") return dtypes::void_;
  for (DType t : kScalars)
    if (name == info(t.scalar).name) return t;
  for (auto [alias, t] : kAliases)
    if (name == alias) return t;
  return std::nullopt;
}

ConstValue cast_const(ConstValue v, DType to) {
  check_value_dtype(to, "cast_const");
  switch (kind(to)) {
    case Kind::Bool: return std::visit([](auto x) { return x != decltype(x){0}; }, v);
    case Kind::Signed:
    case Kind::Unsigned: return to_int_value(v, to);
    case Kind::Float: return to_float_value(v, to.scalar);
    case Kind::Void: break;
  }
  throw_internal("cast_const target is not void", to.name(), __FILE__, __LINE__);
}

double as_double(ConstValue v) {
  return std::visit([](auto x) { return static_cast<double>(x); }, v);
}

int64_t as_int64(ConstValue v) {
  if (auto* d = std::get_if<double>(&v)) {
    KILN_ASSERT(*d >= -0x1p63 && *d < 0x1p63, "as_int64: ", *d, " does not fit in int64");
    return static_cast<int64_t>(*d);
  }
  if (auto* u = std::get_if<uint64_t>(&v)) {
    KILN_ASSERT(*u <= static_cast<uint64_t>(INT64_MAX), "as_int64: ", *u, " does not fit in int64");
    return static_cast<int64_t>(*u);
  }
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  return std::get<bool>(v);
}

std::string const_to_string(ConstValue v, DType t) {
  ConstValue c = cast_const(v, t);
  if (auto* b = std::get_if<bool>(&c)) return *b ? "true" : "false";
  if (auto* i = std::get_if<int64_t>(&c)) return std::to_string(*i);
  if (auto* u = std::get_if<uint64_t>(&c)) return std::to_string(*u);
  double d = std::get<double>(c);
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[32];  // the longest shortest-form double, "-2.2250738585072014e-308", is 24 chars
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
  KILN_ASSERT(ec == std::errc(), "to_chars of a finite double fits in 32 chars");
  return std::string(buf, end);
}

ConstValue lowest(DType t) {
  check_value_dtype(t, "lowest");
  switch (kind(t)) {
    case Kind::Bool: return false;
    case Kind::Signed: return -std::get<int64_t>(highest(t)) - 1;
    case Kind::Unsigned: return uint64_t{0};
    case Kind::Float: return -float_max(t.scalar);
    case Kind::Void: break;
  }
  throw_internal("lowest of a value dtype", t.name(), __FILE__, __LINE__);
}

ConstValue highest(DType t) {
  check_value_dtype(t, "highest");
  int b = bits(t.scalar);
  switch (kind(t)) {
    case Kind::Bool: return true;
    case Kind::Signed: return static_cast<int64_t>(UINT64_MAX >> (65 - b));
    case Kind::Unsigned: return UINT64_MAX >> (64 - b);
    case Kind::Float: return float_max(t.scalar);
    case Kind::Void: break;
  }
  throw_internal("highest of a value dtype", t.name(), __FILE__, __LINE__);
}

DType promote_types(DType a, DType b) {
  for (DType t : {a, b})
    KILN_ASSERT(t.count == 1 && !t.is_ptr && t.scalar != ScalarType::Void,
                "promote_types takes scalar value dtypes, got ", t.name());
  if (a == b) return a;
  // PyTorch (c10 promoteTypes) lets uint16/32/64 meet only floats: with int64 a uint64 would
  // overflow, and extending the uint8 -> signed rule was left for later. Bool is not special here.
  if (is_barebones_unsigned(a) || is_barebones_unsigned(b)) {
    if (is_float(a)) return a;
    if (is_float(b)) return b;
    throw Error(cat("promote_types(", a.name(), ", ", b.name(), "): PyTorch does not promote ",
                    "uint16/uint32/uint64 with other integer or bool types; cast one operand explicitly ",
                    "(e.g. to int64 or float64)"));
  }
  // Category lattice: bool < int < float; within a category, the wider type wins.
  if (is_bool(a)) return b;
  if (is_bool(b)) return a;
  if (is_float(a) != is_float(b)) return is_float(a) ? a : b;
  int wa = bits(a.scalar), wb = bits(b.scalar);
  if (is_float(a)) {
    // float16 and bfloat16 each hold values the other cannot; float32 holds both.
    if (wa == wb) return dtypes::float32;
    return wa > wb ? a : b;
  }
  if (is_unsigned(a) == is_unsigned(b)) return wa > wb ? a : b;
  // uint8 with a signed int: the smallest signed int that holds every value of both.
  int wu = is_unsigned(a) ? wa : wb, ws = is_unsigned(a) ? wb : wa;
  return signed_int_of_bits(std::max(ws, 2 * wu));
}

DType to_floating(DType t) {
  KILN_ASSERT(!t.is_ptr && t.scalar != ScalarType::Void, "to_floating needs a value dtype, got ", t.name());
  if (is_float(t)) return t;
  return dtypes::default_float.vec(t.count);
}

}  // namespace kiln
