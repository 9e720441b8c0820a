// Specification of uop/dtype.h and uop/half.h. The references are written out independently: the
// promotion table from PyTorch's documented torch.promote_types, float formats decoded with ldexp
// from their IEEE definitions, limits from std::numeric_limits.
#include <catch2/catch.hpp>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <limits>
#include <random>

#include "uop/dtype.h"
#include "uop/half.h"

using namespace kiln;
namespace dt = kiln::dtypes;

namespace {

std::string show(ConstValue v) {
  static const char* const kAlternative[] = {"bool", "int64_t", "uint64_t", "double"};
  const char* alternative = kAlternative[v.index()];
  return std::visit([&](auto x) { return cat(std::setprecision(17), x, " (", alternative, ")"); }, v);
}

// cast_const(in, to) holds exactly `want`: same value and same variant alternative.
void check_cast(ConstValue in, DType to, ConstValue want) {
  ConstValue got = cast_const(in, to);
  INFO("cast_const(" << show(in) << ", " << to.name() << ") = " << show(got) << ", expected " << show(want));
  CHECK(got == want);
}

// Runs fn and returns the message of the kiln::Error it threw; an InternalError (a kiln bug) or no
// throw at all is a failure.
std::string user_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InternalError& e) {
    FAIL("expected a user Error, got InternalError: " << e.what());
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("expected a kiln::Error, nothing was thrown");
  return "";
}

// IEEE decoding by definition, independent of the bit tricks in half.cpp.
double decode_float_bits(uint32_t bits, int exp_bits, int mant_bits) {
  int bias = (1 << (exp_bits - 1)) - 1;
  uint32_t mant = bits & ((1u << mant_bits) - 1), exp = (bits >> mant_bits) & ((1u << exp_bits) - 1);
  double sign = (bits >> (exp_bits + mant_bits)) & 1 ? -1.0 : 1.0;
  if (exp == (1u << exp_bits) - 1) return mant ? std::nan("") : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(mant, 1 - bias - mant_bits);
  return sign * std::ldexp(mant + (1u << mant_bits), static_cast<int>(exp) - bias - mant_bits);
}

}  // namespace

TEST_CASE("promote_types matches torch.promote_types on all 13x13 pairs", "[dtype]") {
  // PyTorch's table (c10 promoteTypes, PyTorch 2.3+). X: PyTorch raises "Promotion for uint16,
  // uint32, uint64 types is not supported", which includes pairing them with bool.
  const DType X = dt::void_;
  const DType b1 = dt::bool_, i1 = dt::int8, i2 = dt::int16, i4 = dt::int32, i8 = dt::int64, u1 = dt::uint8,
              u2 = dt::uint16, u4 = dt::uint32, u8 = dt::uint64, f2 = dt::float16, bf = dt::bfloat16,
              f4 = dt::float32, f8 = dt::float64;
  const DType order[13] = {b1, i1, i2, i4, i8, u1, u2, u4, u8, f2, bf, f4, f8};
  const DType table[13][13] = {
      /*         b1  i1  i2  i4  i8  u1  u2  u4  u8  f2  bf  f4  f8 */
      /* b1 */ {b1, i1, i2, i4, i8, u1, X, X, X, f2, bf, f4, f8},
      /* i1 */ {i1, i1, i2, i4, i8, i2, X, X, X, f2, bf, f4, f8},
      /* i2 */ {i2, i2, i2, i4, i8, i2, X, X, X, f2, bf, f4, f8},
      /* i4 */ {i4, i4, i4, i4, i8, i4, X, X, X, f2, bf, f4, f8},
      /* i8 */ {i8, i8, i8, i8, i8, i8, X, X, X, f2, bf, f4, f8},
      /* u1 */ {u1, i2, i2, i4, i8, u1, X, X, X, f2, bf, f4, f8},
      /* u2 */ {X, X, X, X, X, X, u2, X, X, f2, bf, f4, f8},
      /* u4 */ {X, X, X, X, X, X, X, u4, X, f2, bf, f4, f8},
      /* u8 */ {X, X, X, X, X, X, X, X, u8, f2, bf, f4, f8},
      /* f2 */ {f2, f2, f2, f2, f2, f2, f2, f2, f2, f2, f4, f4, f8},
      /* bf */ {bf, bf, bf, bf, bf, bf, bf, bf, bf, f4, bf, f4, f8},
      /* f4 */ {f4, f4, f4, f4, f4, f4, f4, f4, f4, f4, f4, f4, f8},
      /* f8 */ {f8, f8, f8, f8, f8, f8, f8, f8, f8, f8, f8, f8, f8},
  };
  for (int r = 0; r < 13; ++r) {
    for (int c = 0; c < 13; ++c) {
      DType a = order[r], b = order[c], want = table[r][c];
      INFO("promote_types(" << a.name() << ", " << b.name() << "), expected "
                            << (want == X ? std::string("an Error") : want.name()));
      CHECK(table[c][r] == want);  // the reference itself is symmetric
      if (want == X) {
        std::string msg = user_error_of([&] { promote_types(a, b); });
        CHECK_THAT(msg, Catch::Contains(a.name()) && Catch::Contains(b.name()) && Catch::Contains("cast"));
      } else {
        CHECK(promote_types(a, b) == want);
      }
    }
  }
}

TEST_CASE("promote_types rejects vectors, pointers and void", "[dtype]") {
  CHECK_THROWS_AS(promote_types(dt::float32.vec(4), dt::float32), InternalError);
  CHECK_THROWS_AS(promote_types(dt::int32, dt::int32.ptr()), InternalError);
  CHECK_THROWS_AS(promote_types(dt::void_, dt::int32), InternalError);
}

TEST_CASE("to_floating keeps floats and sends bool and ints to float32", "[dtype]") {
  CHECK(to_floating(dt::float16) == dt::float16);
  CHECK(to_floating(dt::bfloat16) == dt::bfloat16);
  CHECK(to_floating(dt::float64) == dt::float64);
  CHECK(to_floating(dt::bool_) == dt::float32);
  CHECK(to_floating(dt::int64) == dt::float32);
  CHECK(to_floating(dt::uint16) == dt::float32);
  CHECK(to_floating(dt::int32.vec(4)) == dt::float32.vec(4));
}

TEST_CASE("every scalar dtype: name, bits, itemsize, kind, parse round trip", "[dtype]") {
  struct Row {
    DType t;
    const char* name;
    int bits;
    bool is_bool, is_int, is_unsigned, is_float;
  };
  const Row rows[] = {
      {dt::bool_, "bool", 8, true, false, false, false},
      {dt::int8, "int8", 8, false, true, false, false},
      {dt::int16, "int16", 16, false, true, false, false},
      {dt::int32, "int32", 32, false, true, false, false},
      {dt::int64, "int64", 64, false, true, false, false},
      {dt::uint8, "uint8", 8, false, true, true, false},
      {dt::uint16, "uint16", 16, false, true, true, false},
      {dt::uint32, "uint32", 32, false, true, true, false},
      {dt::uint64, "uint64", 64, false, true, true, false},
      {dt::float16, "float16", 16, false, false, false, true},
      {dt::bfloat16, "bfloat16", 16, false, false, false, true},
      {dt::float32, "float32", 32, false, false, false, true},
      {dt::float64, "float64", 64, false, false, false, true},
  };
  auto all = all_scalar_dtypes();
  REQUIRE(all.size() == 13);
  for (size_t i = 0; i < 13; ++i) {
    const Row& r = rows[i];
    INFO(r.name);
    CHECK(all[i] == r.t);  // enum order
    CHECK(static_cast<size_t>(r.t.scalar) == i + 1);
    CHECK(r.t.name() == r.name);
    CHECK(bits(r.t.scalar) == r.bits);
    CHECK(r.t.itemsize() == static_cast<size_t>(r.bits / 8));
    CHECK(dtype_from_name(r.name) == r.t);
    CHECK(is_bool(r.t) == r.is_bool);
    CHECK(is_int(r.t) == r.is_int);
    CHECK(is_unsigned(r.t) == r.is_unsigned);
    CHECK(is_float(r.t) == r.is_float);
  }
  CHECK(dt::void_.name() == "void");
  CHECK(dtype_from_name("void") == dt::void_);
  CHECK(dt::void_.itemsize() == 0);
  CHECK(dt::default_float == dt::float32);
  CHECK(dt::default_int == dt::int64);
}

TEST_CASE("dtype_from_name accepts the C/PyTorch aliases and nothing else", "[dtype]") {
  CHECK(dtype_from_name("float") == dt::float32);
  CHECK(dtype_from_name("double") == dt::float64);
  CHECK(dtype_from_name("half") == dt::float16);
  CHECK(dtype_from_name("int") == dt::int32);
  CHECK(dtype_from_name("long") == dt::int64);
  for (const char* bad : {"", "Float32", "float8", "int128", "float32x4", "float32*", "bf16"}) {
    INFO(bad);
    CHECK_FALSE(dtype_from_name(bad).has_value());
  }
}

TEST_CASE("vectors and pointers: names, sizes, element types", "[dtype]") {
  static_assert(dt::float32.vec(4).count == 4);  // usable in constant expressions
  static_assert(dt::float32.vec(4).ptr().deref() == dt::float32.vec(4));
  DType v4 = dt::float32.vec(4);
  CHECK(v4.name() == "float32x4");
  CHECK(v4.itemsize() == 16);
  CHECK(v4.scalar_of() == dt::float32);
  CHECK(dt::float16.vec(2).itemsize() == 4);
  CHECK(dt::float32.ptr().name() == "float32*");
  CHECK(v4.ptr(AddrSpace::Local).name() == "float32x4*local");
  CHECK(dt::int8.vec(3).ptr(AddrSpace::Reg).name() == "int8x3*reg");
  CHECK(dt::void_.ptr().name() == "void*");
  CHECK(v4.ptr().itemsize() == 8);
  CHECK(dt::bool_.ptr().itemsize() == 8);
  CHECK(v4.ptr(AddrSpace::Local).deref() == v4);
  CHECK(v4.ptr().scalar_of() == dt::float32);
  CHECK(dt::float32.ptr(AddrSpace::Local) != dt::float32.ptr(AddrSpace::Global));
  CHECK(dt::float32.vec(1) == dt::float32);
  CHECK(is_float(v4.ptr()));  // predicates look at the element
  CHECK_THROWS_AS(dt::float32.vec(0), InternalError);
  CHECK_THROWS_AS(dt::float32.ptr().vec(4), InternalError);
  CHECK_THROWS_AS(dt::float32.deref(), InternalError);
  CHECK_THROWS_AS(dt::float32.ptr().ptr(), InternalError);
}

TEST_CASE("float16: all 65536 bit patterns decode by definition and round-trip", "[dtype][half]") {
  int mismatches = 0;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    auto bits16 = static_cast<uint16_t>(h);
    float f = half_bits_to_float(bits16);
    double want = decode_float_bits(h, 5, 10);
    bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    bool ok = is_nan ? std::isnan(f) && float_to_half_bits(f) == (bits16 | 0x0200)  // made quiet
                     : static_cast<double>(f) == want && std::signbit(f) == bool(h & 0x8000) &&
                           float_to_half_bits(f) == bits16;
    if (!ok && ++mismatches <= 5)
      FAIL_CHECK("half 0x" << std::hex << h << " -> " << f << " -> 0x" << float_to_half_bits(f)
                           << ", expected " << want);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("float16: narrowing rounds to nearest even, overflows to inf, keeps NaN", "[dtype][half]") {
  struct Case {
    float in;
    uint16_t want;
  };
  const Case cases[] = {
      {1.0f, 0x3c00},
      {std::ldexp(1.0f, -11) + 1.0f, 0x3c00},           // tie between 1 and 1+2^-10: even is 1
      {1.0f + 3 * std::ldexp(1.0f, -11), 0x3c02},       // tie between 1+2^-10 and 1+2^-9: even is 1+2^-9
      {1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20), 0x3c01},  // just above the tie
      {2049.0f, 0x6800},                                // tie -> 2048
      {2051.0f, 0x6802},                                // tie -> 2052
      {65504.0f, 0x7bff},
      {65519.0f, 0x7bff},
      {65520.0f, 0x7c00},                               // the tie above the largest half goes to inf
      {-65520.0f, 0xfc00},
      {1e10f, 0x7c00},
      {INFINITY, 0x7c00},
      {-INFINITY, 0xfc00},
      {-0.0f, 0x8000},
      {std::ldexp(1.0f, -14), 0x0400},                  // smallest normal
      {std::ldexp(1.0f, -24), 0x0001},                  // smallest subnormal
      {std::ldexp(1.0f, -25), 0x0000},                  // tie between 0 and 2^-24: even is 0
      {-std::ldexp(1.0f, -25), 0x8000},
      {1.5f * std::ldexp(1.0f, -25), 0x0001},
      {3 * std::ldexp(1.0f, -25), 0x0002},              // 1.5 units: tie -> 2
      {5 * std::ldexp(1.0f, -25), 0x0002},              // 2.5 units: tie -> 2
      {std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26), 0x0400},  // 1023.75 units round up into the normals
      {std::ldexp(1.0f, -30), 0x0000},
      {0.1f, 0x2e66},
  };
  for (const Case& c : cases) {
    INFO("float_to_half_bits(" << c.in << ") = 0x" << std::hex << float_to_half_bits(c.in) << ", expected 0x"
                               << c.want);
    CHECK(float_to_half_bits(c.in) == c.want);
  }
  for (uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7fa00000u}) {
    uint16_t h = float_to_half_bits(std::bit_cast<float>(nan_bits));
    INFO("NaN 0x" << std::hex << nan_bits << " -> 0x" << h);
    CHECK((h & 0x7c00) == 0x7c00);
    CHECK((h & 0x0200) != 0);  // quiet, so never inf
    CHECK(bool(h & 0x8000) == bool(nan_bits >> 31));
  }
}

TEST_CASE("bfloat16: all 65536 bit patterns decode by definition and round-trip", "[dtype][half]") {
  int mismatches = 0;
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    auto bits16 = static_cast<uint16_t>(b);
    float f = bf16_bits_to_float(bits16);
    double want = decode_float_bits(b, 8, 7);
    bool is_nan = (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
    bool ok = is_nan ? std::isnan(f) && float_to_bf16_bits(f) == (bits16 | 0x0040)
                     : static_cast<double>(f) == want && std::signbit(f) == bool(b & 0x8000) &&
                           float_to_bf16_bits(f) == bits16;
    if (!ok && ++mismatches <= 5)
      FAIL_CHECK("bf16 0x" << std::hex << b << " -> " << f << " -> 0x" << float_to_bf16_bits(f)
                           << ", expected " << want);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("bfloat16: narrowing rounds to nearest even, overflows to inf, keeps NaN", "[dtype][half]") {
  struct Case {
    float in;
    uint16_t want;
  };
  const Case cases[] = {
      {1.0f, 0x3f80},
      {1.0f + std::ldexp(1.0f, -8), 0x3f80},            // tie -> even 1.0
      {1.0f + 3 * std::ldexp(1.0f, -8), 0x3f82},        // tie -> even 1+2^-6
      {1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20), 0x3f81},
      {-1.0f - std::ldexp(1.0f, -8), 0xbf80},
      {3.0f, 0x4040},
      {0.1f, 0x3dcd},
      {FLT_MAX, 0x7f80},                                // above the largest bf16 + half an ulp
      {0x1.fep127f, 0x7f7f},
      {INFINITY, 0x7f80},
      {-0.0f, 0x8000},
      {std::ldexp(1.0f, -133), 0x0001},                 // smallest subnormal
      {std::ldexp(1.0f, -134), 0x0000},                 // tie -> 0
      {1.5f * std::ldexp(1.0f, -134), 0x0001},
  };
  for (const Case& c : cases) {
    INFO("float_to_bf16_bits(" << c.in << ") = 0x" << std::hex << float_to_bf16_bits(c.in) << ", expected 0x"
                               << c.want);
    CHECK(float_to_bf16_bits(c.in) == c.want);
  }
  for (uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xff800001u}) {
    uint16_t b = float_to_bf16_bits(std::bit_cast<float>(nan_bits));
    INFO("NaN 0x" << std::hex << nan_bits << " -> 0x" << b);
    CHECK(std::isnan(bf16_bits_to_float(b)));
    CHECK(bool(b & 0x8000) == bool(nan_bits >> 31));
  }
}

TEST_CASE("cast_const: integers wrap two's complement", "[dtype]") {
  check_cast(int64_t{300}, dt::int8, int64_t{44});
  check_cast(int64_t{128}, dt::int8, int64_t{-128});
  check_cast(int64_t{-1}, dt::uint8, uint64_t{255});
  check_cast(int64_t{-1}, dt::uint64, uint64_t{UINT64_MAX});
  check_cast(int64_t{65536 + 5}, dt::int16, int64_t{5});
  check_cast(int64_t{INT64_MIN}, dt::int32, int64_t{0});
  check_cast(uint64_t{UINT64_MAX}, dt::int64, int64_t{-1});
  check_cast(uint64_t{0x1'0000'0007}, dt::uint32, uint64_t{7});
  check_cast(int64_t{-5}, dt::int64, int64_t{-5});
  check_cast(true, dt::int32, int64_t{1});
  check_cast(false, dt::uint16, uint64_t{0});
  check_cast(int64_t{300}, dt::int8.vec(4), int64_t{44});  // a vector casts per element
}

TEST_CASE("cast_const: float to int truncates, NaN is 0, out of range saturates", "[dtype]") {
  check_cast(2.9, dt::int32, int64_t{2});
  check_cast(-2.9, dt::int32, int64_t{-2});
  check_cast(255.9, dt::uint8, uint64_t{255});
  check_cast(300.5, dt::int8, int64_t{127});  // saturates, unlike int 300 which wraps
  check_cast(256.0, dt::uint8, uint64_t{255});
  check_cast(-5.5, dt::uint8, uint64_t{0});
  check_cast(-0.5, dt::uint32, uint64_t{0});
  check_cast(-129.0, dt::int8, int64_t{-128});
  check_cast(1e20, dt::int32, int64_t{INT32_MAX});
  check_cast(-1e20, dt::int64, int64_t{INT64_MIN});
  check_cast(1e20, dt::uint64, uint64_t{UINT64_MAX});
  check_cast(0x1p63, dt::int64, int64_t{INT64_MAX});
  check_cast(-0x1p63, dt::int64, int64_t{INT64_MIN});
  check_cast(0x1p63, dt::uint64, uint64_t{1} << 63);
  check_cast(0x1p64, dt::uint64, uint64_t{UINT64_MAX});
  check_cast(std::nan(""), dt::int32, int64_t{0});
  check_cast(std::nan(""), dt::uint8, uint64_t{0});
  check_cast(INFINITY, dt::int8, int64_t{127});
  check_cast(-INFINITY, dt::uint32, uint64_t{0});
}

TEST_CASE("cast_const: to bool is v != 0", "[dtype]") {
  check_cast(0.0, dt::bool_, false);
  check_cast(-0.0, dt::bool_, false);
  check_cast(0.25, dt::bool_, true);
  check_cast(std::nan(""), dt::bool_, true);
  check_cast(int64_t{2}, dt::bool_, true);
  check_cast(int64_t{-1}, dt::bool_, true);
  check_cast(uint64_t{0}, dt::bool_, false);
  check_cast(true, dt::bool_, true);
}

TEST_CASE("cast_const: to floats rounds to the target's values exactly once", "[dtype]") {
  check_cast(0.1, dt::float64, 0.1);
  check_cast(int64_t{(int64_t{1} << 53) + 1}, dt::float64, 0x1p53);
  check_cast(true, dt::float64, 1.0);
  check_cast(0.1, dt::float32, static_cast<double>(0.1f));
  check_cast(int64_t{16777217}, dt::float32, 16777216.0);
  check_cast(uint64_t{UINT64_MAX}, dt::float32, 0x1p64);
  check_cast(1e39, dt::float32, static_cast<double>(INFINITY));
  CHECK(std::isnan(std::get<double>(cast_const(std::nan(""), dt::float32))));
  CHECK(std::isnan(std::get<double>(cast_const(std::nan(""), dt::float16))));
  check_cast(0.1, dt::float16, 0.0999755859375);  // 0x2e66
  check_cast(70000.0, dt::float16, static_cast<double>(INFINITY));
  check_cast(65519.99, dt::float16, 65504.0);
  check_cast(int64_t{2049}, dt::float16, 2048.0);
  check_cast(int64_t{2051}, dt::float16, 2052.0);
  check_cast(int64_t{-100000}, dt::float16, -static_cast<double>(INFINITY));
  check_cast(0.1, dt::bfloat16, 0.10009765625);  // 0x3dcd
  check_cast(int64_t{3}, dt::bfloat16, 3.0);
  // Rounding through float first would land on a tie and round the wrong way in these.
  check_cast(1.0 + 0x1p-11 + 0x1p-40, dt::float16, 1.0 + 0x1p-10);
  check_cast(int64_t{(1 << 30) + (1 << 22) + 1}, dt::bfloat16, 0x1p30 + 0x1p23);
  check_cast(uint64_t{(uint64_t{1} << 63) + (uint64_t{1} << 55) + 1}, dt::bfloat16, 0x1p63 + 0x1p56);
  check_cast(-(1.0 + 0x1p-8 + 0x1p-50), dt::bfloat16, -(1.0 + 0x1p-7));
}

TEST_CASE("cast_const: void and pointer targets are kiln bugs", "[dtype]") {
  CHECK_THROWS_AS(cast_const(1.0, dt::void_), InternalError);
  CHECK_THROWS_AS(cast_const(1.0, dt::float32.ptr()), InternalError);
}

TEST_CASE("as_double and as_int64 give the numeric value", "[dtype]") {
  CHECK(as_double(true) == 1.0);
  CHECK(as_double(int64_t{-7}) == -7.0);
  CHECK(as_double(uint64_t{1} << 63) == 0x1p63);
  CHECK(as_double(2.5) == 2.5);
  CHECK(as_int64(2.9) == 2);
  CHECK(as_int64(-2.9) == -2);
  CHECK(as_int64(-0x1p63) == INT64_MIN);
  CHECK(as_int64(true) == 1);
  CHECK(as_int64(uint64_t{42}) == 42);
  CHECK(as_int64(int64_t{INT64_MIN}) == INT64_MIN);
  CHECK_THROWS_AS(as_int64(uint64_t{UINT64_MAX}), InternalError);
  CHECK_THROWS_AS(as_int64(0x1p63), InternalError);
  CHECK_THROWS_AS(as_int64(std::nan("")), InternalError);
}

namespace {
template <typename T>
void check_int_limits(DType t) {
  INFO(t.name());
  if constexpr (std::is_signed_v<T>) {
    CHECK(lowest(t) == ConstValue{int64_t{std::numeric_limits<T>::lowest()}});
    CHECK(highest(t) == ConstValue{int64_t{std::numeric_limits<T>::max()}});
  } else {
    CHECK(lowest(t) == ConstValue{uint64_t{0}});
    CHECK(highest(t) == ConstValue{uint64_t{std::numeric_limits<T>::max()}});
  }
}
}  // namespace

TEST_CASE("lowest and highest are the finite limits of each dtype", "[dtype]") {
  CHECK(lowest(dt::bool_) == ConstValue{false});
  CHECK(highest(dt::bool_) == ConstValue{true});
  check_int_limits<int8_t>(dt::int8);
  check_int_limits<int16_t>(dt::int16);
  check_int_limits<int32_t>(dt::int32);
  check_int_limits<int64_t>(dt::int64);
  check_int_limits<uint8_t>(dt::uint8);
  check_int_limits<uint16_t>(dt::uint16);
  check_int_limits<uint32_t>(dt::uint32);
  check_int_limits<uint64_t>(dt::uint64);
  CHECK(highest(dt::float16) == ConstValue{65504.0});
  CHECK(lowest(dt::float16) == ConstValue{-65504.0});
  CHECK(highest(dt::bfloat16) == ConstValue{3.3895313892515355e38});
  CHECK(lowest(dt::bfloat16) == ConstValue{-3.3895313892515355e38});
  CHECK(highest(dt::float32) == ConstValue{double{std::numeric_limits<float>::max()}});
  CHECK(lowest(dt::float32) == ConstValue{double{std::numeric_limits<float>::lowest()}});
  CHECK(highest(dt::float64) == ConstValue{std::numeric_limits<double>::max()});
  CHECK(lowest(dt::float64) == ConstValue{std::numeric_limits<double>::lowest()});
  // The narrow-float limits are the largest finite encodings.
  CHECK(float_to_half_bits(static_cast<float>(std::get<double>(highest(dt::float16)))) == 0x7bff);
  CHECK(float_to_bf16_bits(static_cast<float>(std::get<double>(highest(dt::bfloat16)))) == 0x7f7f);
  CHECK(highest(dt::int8.vec(4)) == ConstValue{int64_t{127}});
  CHECK_THROWS_AS(highest(dt::void_), InternalError);
}

TEST_CASE("const_to_string prints the value as its dtype holds it", "[dtype]") {
  CHECK(const_to_string(int64_t{3}, dt::int32) == "3");
  CHECK(const_to_string(int64_t{INT64_MIN}, dt::int64) == "-9223372036854775808");
  CHECK(const_to_string(uint64_t{UINT64_MAX}, dt::uint64) == "18446744073709551615");
  CHECK(const_to_string(true, dt::bool_) == "true");
  CHECK(const_to_string(false, dt::bool_) == "false");
  CHECK(const_to_string(1.5, dt::float32) == "1.5");
  CHECK(const_to_string(INFINITY, dt::float32) == "inf");
  CHECK(const_to_string(-INFINITY, dt::float64) == "-inf");
  CHECK(const_to_string(std::nan(""), dt::float16) == "nan");
  CHECK(const_to_string(-0.0, dt::float64) == "-0");
  CHECK(const_to_string(0.1, dt::float64) == "0.1");
  CHECK(const_to_string(0.1, dt::float32) == "0.10000000149011612");  // the float's exact double
  CHECK(const_to_string(int64_t{3}, dt::float32) == "3");
  CHECK(const_to_string(int64_t{300}, dt::int8) == "44");
  CHECK(const_to_string(2.0, dt::bool_) == "true");
}

TEST_CASE("const_to_string round-trips doubles through strtod", "[dtype]") {
  std::mt19937_64 rng(20240611);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  int checked = 0, mismatches = 0;
  for (int i = 0; i < 600; ++i) {
    // Half are arbitrary bit patterns (every exponent, subnormals), half ordinary magnitudes.
    int scale = static_cast<int>(rng() % 64) - 32;
    double d = i % 2 ? std::bit_cast<double>(rng()) : unit(rng) * std::ldexp(1.0, scale);
    if (!std::isfinite(d)) continue;
    std::string s = const_to_string(d, dt::float64);
    double back = std::strtod(s.c_str(), nullptr);
    ++checked;
    if (std::bit_cast<uint64_t>(back) != std::bit_cast<uint64_t>(d) || s.size() > 24)
      if (++mismatches <= 5) FAIL_CHECK(cat(std::hexfloat, d, " printed as ", s, " reads back as ", back));
  }
  CHECK(checked > 500);
  CHECK(mismatches == 0);
}
