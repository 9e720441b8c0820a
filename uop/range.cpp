#include "uop/range.h"

#include <algorithm>
#include <limits>

namespace kiln {

namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
using Range = std::pair<int64_t, int64_t>;

// Saturating helpers: an overflow means "no useful bound", which fit() turns into the dtype's range.
bool add_ok(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }
bool sub_ok(int64_t a, int64_t b, int64_t* out) { return !__builtin_sub_overflow(a, b, out); }
bool mul_ok(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// A computed range that leaves the dtype's limits may wrap at run time: then nothing is known.
Range fit(DType dtype, bool ok, int64_t lo, int64_t hi) {
  Range limits = dtype_range(dtype);
  if (!ok || lo < limits.first || hi > limits.second) return limits;
  return {lo, hi};
}

Range corners(DType dtype, Range a, Range b, bool (*f)(int64_t, int64_t, int64_t*)) {
  int64_t v[4];
  bool ok = f(a.first, b.first, &v[0]) && f(a.first, b.second, &v[1]) && f(a.second, b.first, &v[2]) &&
            f(a.second, b.second, &v[3]);
  if (!ok) return dtype_range(dtype);
  return fit(dtype, true, *std::min_element(v, v + 4), *std::max_element(v, v + 4));
}

bool div_ok(int64_t a, int64_t b, int64_t* out) {
  if (b == 0 || (a == kMin && b == -1)) return false;
  *out = a / b;
  return true;
}

Range mod_range(DType dtype, Range a, Range b) {
  if (b.first <= 0 && b.second >= 0) return dtype_range(dtype);  // the divisor may be 0
  // |a % b| < |b|, and C's remainder has the dividend's sign; a % b == a when |a| < |b| for every b.
  auto magnitude = [](int64_t v) { return v == kMin ? kMax : (v < 0 ? -v : v); };
  int64_t small = std::min(magnitude(b.first), magnitude(b.second));
  int64_t bound = std::max(magnitude(b.first), magnitude(b.second)) - 1;
  if (a.first >= 0) return a.second < small ? a : Range{0, std::min(a.second, bound)};
  if (a.second <= 0) return a.first > -small ? a : Range{std::max(a.first, -bound), 0};
  return {std::max(a.first, -bound), std::min(a.second, bound)};
}

// Comparisons decided by ranges give a constant bool range.
Range bool_range(bool can_be_false, bool can_be_true) { return {can_be_true && !can_be_false ? 1 : 0, can_be_true ? 1 : 0}; }

Range compare_range(Op op, Range a, Range b) {
  bool disjoint = a.second < b.first || b.second < a.first;
  bool same_const = a.first == a.second && b.first == b.second && a.first == b.first;
  if (op == Op::CMPLT) return bool_range(a.second >= b.first, a.first < b.second);
  if (op == Op::CMPNE) return bool_range(!disjoint, !same_const);
  KILN_ASSERT(op == Op::CMPEQ, "compare_range of a comparison, not ", op_name(op));
  return bool_range(!same_const, !disjoint);
}

int64_t next_pow2_minus1(int64_t x) {  // smallest 2^k-1 >= x, for x >= 0
  int64_t m = 0;
  while (m < x) m = m * 2 + 1;
  return m;
}

}  // namespace

std::pair<int64_t, int64_t> dtype_range(DType dtype) {
  if (dtype.is_ptr) return {kMin, kMax};
  switch (dtype.scalar) {
    case ScalarType::Bool: return {0, 1};
    case ScalarType::Int8: return {-128, 127};
    case ScalarType::Int16: return {-32768, 32767};
    case ScalarType::Int32: return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case ScalarType::Int64: return {kMin, kMax};
    case ScalarType::UInt8: return {0, 255};
    case ScalarType::UInt16: return {0, 65535};
    case ScalarType::UInt32: return {0, std::numeric_limits<uint32_t>::max()};
    case ScalarType::UInt64: return {0, kMax};  // saturated: see has_exact_range
    case ScalarType::Void:
    case ScalarType::Float16:
    case ScalarType::BFloat16:
    case ScalarType::Float32:
    case ScalarType::Float64: return {kMin, kMax};
  }
  return {kMin, kMax};
}

bool has_exact_range(DType dtype) {
  if (dtype.is_ptr) return false;
  switch (dtype.scalar) {  // asked for every new node and its sources, so spelled out rather than via is_int
    case ScalarType::Bool:
    case ScalarType::Int8:
    case ScalarType::Int16:
    case ScalarType::Int32:
    case ScalarType::Int64:
    case ScalarType::UInt8:
    case ScalarType::UInt16:
    case ScalarType::UInt32: return true;
    case ScalarType::UInt64:  // saturated at INT64_MAX: not exact
    case ScalarType::Void:
    case ScalarType::Float16:
    case ScalarType::BFloat16:
    case ScalarType::Float32:
    case ScalarType::Float64: return false;
  }
  return false;
}

std::pair<int64_t, int64_t> compute_range(Op op, DType dtype, const std::vector<UOpPtr>& src, const Arg& arg) {
  if (!has_exact_range(dtype)) return dtype_range(dtype);
  auto r = [&](size_t i) -> Range {
    if (!has_exact_range(src[i]->dtype)) return {kMin, kMax};
    return {src[i]->vmin(), src[i]->vmax()};
  };
  int64_t lo = 0, hi = 0;
  switch (op) {
    case Op::CONST: {
      const ConstValue& c = std::get<ConstValue>(arg);
      int64_t v = as_int64(c);
      return {v, v};
    }
    case Op::DEFINE_VAR: {
      const VarArg& v = std::get<VarArg>(arg);
      return fit(dtype, true, v.min, v.max);
    }
    case Op::RANGE:
    case Op::SPECIAL: return {0, r(0).second <= 0 ? 0 : r(0).second - 1};  // loops run 0..end-1
    case Op::ADD: {
      bool ok = add_ok(r(0).first, r(1).first, &lo) && add_ok(r(0).second, r(1).second, &hi);
      return fit(dtype, ok, lo, hi);
    }
    case Op::SUB: {
      bool ok = sub_ok(r(0).first, r(1).second, &lo) && sub_ok(r(0).second, r(1).first, &hi);
      return fit(dtype, ok, lo, hi);
    }
    case Op::NEG: {
      bool ok = sub_ok(0, r(0).second, &lo) && sub_ok(0, r(0).first, &hi);
      return fit(dtype, ok, lo, hi);
    }
    case Op::MUL: return corners(dtype, r(0), r(1), mul_ok);
    case Op::IDIV:
      if (r(1).first <= 0 && r(1).second >= 0) return dtype_range(dtype);
      return corners(dtype, r(0), r(1), div_ok);
    case Op::MOD: return mod_range(dtype, r(0), r(1));
    case Op::MAX: return {std::max(r(0).first, r(1).first), std::max(r(0).second, r(1).second)};
    case Op::MIN: return {std::min(r(0).first, r(1).first), std::min(r(0).second, r(1).second)};
    case Op::CMPLT:
    case Op::CMPNE:
    case Op::CMPEQ: return compare_range(op, r(0), r(1));
    case Op::WHERE:
      if (r(0).first == 1) return r(1);
      if (r(0).second == 0) return r(2);
      return {std::min(r(1).first, r(2).first), std::max(r(1).second, r(2).second)};
    case Op::AND:
      if (is_bool(dtype)) return {r(0).first & r(1).first, r(0).second & r(1).second};
      if (r(0).first >= 0 && r(1).first >= 0) return {0, std::min(r(0).second, r(1).second)};
      return dtype_range(dtype);
    case Op::OR:
    case Op::XOR:
      if (is_bool(dtype) && op == Op::OR) return {r(0).first | r(1).first, r(0).second | r(1).second};
      if (r(0).first >= 0 && r(1).first >= 0) return fit(dtype, true, 0, next_pow2_minus1(std::max(r(0).second, r(1).second)));
      return dtype_range(dtype);
    case Op::SHR:
      if (r(0).first >= 0 && r(1).first >= 0 && r(1).second < 63) return {r(0).first >> r(1).second, r(0).second >> r(1).first};
      return dtype_range(dtype);
    case Op::SHL:
      if (r(0).first >= 0 && r(1).first >= 0 && r(1).second < 62) {
        bool ok = mul_ok(r(0).second, int64_t{1} << r(1).second, &hi);
        return fit(dtype, ok, r(0).first << r(1).first, hi);
      }
      return dtype_range(dtype);
    case Op::CAST: {
      if (!has_exact_range(src[0]->dtype)) return dtype_range(dtype);  // from float or uint64
      return fit(dtype, true, r(0).first, r(0).second);  // wraps unless the source range fits
    }
    case Op::MULACC: {
      Range p = corners(dtype, r(0), r(1), mul_ok);
      bool ok = add_ok(p.first, r(2).first, &lo) && add_ok(p.second, r(2).second, &hi);
      return fit(dtype, ok, lo, hi);
    }
    case Op::GEP:
    case Op::NOOP: return r(0);
    case Op::VECTORIZE: {
      Range out = r(0);
      for (size_t i = 1; i < src.size(); ++i) out = {std::min(out.first, r(i).first), std::max(out.second, r(i).second)};
      return out;
    }
    case Op::SINK: case Op::DEVICE: case Op::BUFFER: case Op::CONTIGUOUS: case Op::COPY: case Op::ASSIGN:
    case Op::DETACH: case Op::REDUCE_AXIS: case Op::IOTA: case Op::GATHER: case Op::SCATTER_ADD: case Op::RESHAPE: case Op::PERMUTE: case Op::EXPAND: case Op::PAD:
    case Op::SHRINK: case Op::FLIP: case Op::DEFINE_GLOBAL: case Op::DEFINE_LOCAL: case Op::DEFINE_REG:
    case Op::INDEX: case Op::LOAD: case Op::STORE: case Op::END: case Op::REDUCE: case Op::BARRIER: case Op::IF:
    case Op::ENDIF: case Op::BITCAST: case Op::RECIP: case Op::SQRT: case Op::EXP2: case Op::LOG2: case Op::SIN:
    case Op::TRUNC: case Op::FDIV: case Op::POW:
      return dtype_range(dtype);
  }
  return dtype_range(dtype);
}

}  // namespace kiln
