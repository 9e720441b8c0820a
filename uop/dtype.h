// DType: the element type of every UOp (a scalar, a short vector, or a pointer), plus constants and
// PyTorch's type promotion.
//
//   DType t = promote_types(dtypes::uint8, dtypes::int8);        // int16, as torch.promote_types
//   DType p = dtypes::float32.vec(4).ptr(AddrSpace::Local);       // name() == "float32x4*local"
//   ConstValue c = cast_const(int64_t{300}, dtypes::int8);        // int64_t{44}: wraps like C
//   std::string s = const_to_string(0.1, dtypes::float32);        // "0.10000000149011612"
//
// Constants are held in one variant alternative per kind of dtype (see ConstValue), so folding code
// never has to ask how wide an int8 is stored.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "uop/error.h"
#include "uop/hash.h"

namespace kiln {

enum class ScalarType : uint8_t {
  Void, Bool, Int8, Int16, Int32, Int64, UInt8, UInt16, UInt32, UInt64, Float16, BFloat16, Float32, Float64
};

// Where a pointer points: device memory, workgroup-shared memory, or a thread's registers.
enum class AddrSpace : uint8_t { Global, Local, Reg };

struct DType {
  ScalarType scalar = ScalarType::Void;
  uint16_t count = 1;  // vector width, >1 after upcasting in lowering
  bool is_ptr = false;  // a pointer to (scalar x count) in address space `addr`
  AddrSpace addr = AddrSpace::Global;  // Global unless is_ptr, so == compares only what matters

  constexpr bool operator==(const DType&) const = default;

  constexpr DType vec(int n) const {
    KILN_ASSERT(n >= 1 && n <= UINT16_MAX && !is_ptr, "vec(", n, ") needs 1 <= n <= 65535 and a non-pointer");
    return DType{scalar, static_cast<uint16_t>(n)};
  }
  constexpr DType scalar_of() const { return DType{scalar}; }
  constexpr DType ptr(AddrSpace a = AddrSpace::Global) const {
    KILN_ASSERT(!is_ptr, "kiln has no pointers to pointers");
    return DType{scalar, count, true, a};
  }
  constexpr DType deref() const {
    KILN_ASSERT(is_ptr, "deref() of a non-pointer dtype");
    return DType{scalar, count};
  }
  size_t itemsize() const;  // bytes of scalar x count; a pointer is 8
  std::string name() const;  // "float32", "float32x4", "float32*", "float32x4*local"
};

// A stable hash of every field (uop/hash.h), one mix of them packed: hash-consing pays it per node.
inline uint64_t hash_dtype(DType d) {
  return hash_mix(static_cast<uint64_t>(d.scalar) | uint64_t{d.count} << 8 | uint64_t{d.is_ptr} << 24 |
                  static_cast<uint64_t>(d.addr) << 32);
}

namespace dtypes {
inline constexpr DType void_{ScalarType::Void};
inline constexpr DType bool_{ScalarType::Bool};
inline constexpr DType int8{ScalarType::Int8};
inline constexpr DType int16{ScalarType::Int16};
inline constexpr DType int32{ScalarType::Int32};
inline constexpr DType int64{ScalarType::Int64};
inline constexpr DType uint8{ScalarType::UInt8};
inline constexpr DType uint16{ScalarType::UInt16};
inline constexpr DType uint32{ScalarType::UInt32};
inline constexpr DType uint64{ScalarType::UInt64};
inline constexpr DType float16{ScalarType::Float16};
inline constexpr DType bfloat16{ScalarType::BFloat16};
inline constexpr DType float32{ScalarType::Float32};
inline constexpr DType float64{ScalarType::Float64};
inline constexpr DType default_float = float32;
inline constexpr DType default_int = int64;
}  // namespace dtypes

std::span<const DType> all_scalar_dtypes();  // the 13 non-void scalars, in enum order

// Storage bits of one element: bool takes a byte (8), void 0.
int bits(ScalarType s);

// These look only at .scalar, so they answer for vectors and pointees alike.
bool is_bool(DType t);
bool is_int(DType t);  // signed or unsigned integer, not bool
bool is_unsigned(DType t);
bool is_float(DType t);

// A scalar's name() or one of the C/PyTorch aliases float, double, half, int, long.
std::optional<DType> dtype_from_name(std::string_view name);

// A constant, held in the canonical alternative of its dtype: bool for bool, int64_t for signed
// ints, uint64_t for unsigned ints, double for every float (already rounded to the float's values).
using ConstValue = std::variant<bool, int64_t, uint64_t, double>;

// Converts `v` into the values of `to` (its scalar) and returns to's canonical alternative.
//  - int -> narrower int wraps two's complement, as C does (int8: 300 -> 44, uint8: -1 -> 255).
//  - float -> int truncates toward zero; NaN gives 0, and out-of-range values saturate to the
//    target's limits (C leaves both undefined; saturating is what PTX cvt.rzi.sat and Rust `as` do,
//    and it keeps constant folding deterministic).
//  - anything -> bool is v != 0 (NaN is true).
//  - -> float32/float16/bfloat16 rounds to nearest even, exactly once; -> float64 is the C conversion.
ConstValue cast_const(ConstValue v, DType to);

double as_double(ConstValue v);  // the numeric value (bool: 0 or 1)
int64_t as_int64(ConstValue v);  // the numeric value, a double truncated; asserts it fits in int64

// "3", "true", "1.5", "inf", "-inf", "nan". `v` is first cast to `t`; floats print the shortest
// decimal that reads back (strtod) as the same double.
std::string const_to_string(ConstValue v, DType t);

ConstValue lowest(DType t);   // most negative finite value of t's scalar (unsigned, bool: 0 / false)
ConstValue highest(DType t);  // largest finite value

// torch.promote_types on scalars. Like PyTorch (2.3+), uint16/uint32/uint64 promote only with
// themselves and with floats; any other pairing throws Error.
DType promote_types(DType a, DType b);

// The dtype that `x / y` or `exp(x)` computes in: floats stay, bool and ints become default_float.
// Keeps the vector width.
DType to_floating(DType t);

}  // namespace kiln
