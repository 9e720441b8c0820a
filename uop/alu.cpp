#include "uop/alu.h"

#include <cmath>
#include <limits>
#include <vector>

#include "uop/error.h"

namespace kiln {

namespace {

std::optional<double> exec_float(Op op, std::span<const double> x) {
  switch (op) {
    case Op::NEG: return -x[0];
    case Op::RECIP: return 1.0 / x[0];
    case Op::SQRT: return std::sqrt(x[0]);
    case Op::EXP2: return std::exp2(x[0]);
    case Op::LOG2: return std::log2(x[0]);
    case Op::SIN: return std::sin(x[0]);
    case Op::TRUNC: return std::trunc(x[0]);
    case Op::ADD: return x[0] + x[1];
    case Op::SUB: return x[0] - x[1];
    case Op::MUL: return x[0] * x[1];
    case Op::FDIV: return x[0] / x[1];
    case Op::POW: return std::pow(x[0], x[1]);
    case Op::MAX:
      if (std::isnan(x[0]) || std::isnan(x[1])) return std::nullopt;
      return std::max(x[0], x[1]);
    case Op::MIN:
      if (std::isnan(x[0]) || std::isnan(x[1])) return std::nullopt;
      return std::min(x[0], x[1]);
    case Op::CMPLT: return x[0] < x[1] ? 1.0 : 0.0;
    case Op::CMPNE: return x[0] != x[1] ? 1.0 : 0.0;
    case Op::CMPEQ: return x[0] == x[1] ? 1.0 : 0.0;
    case Op::MULACC: return x[0] * x[1] + x[2];
    case Op::IDIV: case Op::MOD: case Op::AND: case Op::OR: case Op::XOR: case Op::SHL: case Op::SHR:
    case Op::WHERE: case Op::SINK: case Op::NOOP: case Op::CONST: case Op::DEFINE_VAR: case Op::DEVICE:
    case Op::BUFFER: case Op::CONTIGUOUS: case Op::COPY: case Op::ASSIGN: case Op::DETACH: case Op::REDUCE_AXIS: case Op::IOTA: case Op::GATHER: case Op::SCATTER_ADD:
    case Op::RESHAPE: case Op::PERMUTE: case Op::EXPAND: case Op::PAD: case Op::SHRINK: case Op::FLIP:
    case Op::DEFINE_GLOBAL: case Op::DEFINE_LOCAL: case Op::DEFINE_REG: case Op::INDEX: case Op::LOAD:
    case Op::STORE: case Op::RANGE: case Op::END: case Op::REDUCE: case Op::SPECIAL: case Op::BARRIER:
    case Op::IF: case Op::ENDIF: case Op::VECTORIZE: case Op::GEP: case Op::CAST: case Op::BITCAST:
      return std::nullopt;
  }
  return std::nullopt;
}

// Integer ops on the 64-bit pattern; the caller wraps the result to the dtype's width. Arithmetic is
// done on uint64_t so that wrapping is defined behaviour, then read back as signed where it matters.
std::optional<uint64_t> exec_int(Op op, std::span<const uint64_t> x, bool is_signed, int bits) {
  auto s = [&](int i) { return static_cast<int64_t>(x[i]); };
  switch (op) {
    case Op::NEG: return uint64_t{0} - x[0];
    case Op::ADD: return x[0] + x[1];
    case Op::SUB: return x[0] - x[1];
    case Op::MUL: return x[0] * x[1];
    case Op::MULACC: return x[0] * x[1] + x[2];
    case Op::IDIV:
    case Op::MOD:
      if (x[1] == 0) return std::nullopt;
      if (!is_signed) return op == Op::IDIV ? x[0] / x[1] : x[0] % x[1];
      if (s(0) == INT64_MIN && s(1) == -1) return std::nullopt;
      return static_cast<uint64_t>(op == Op::IDIV ? s(0) / s(1) : s(0) % s(1));
    case Op::MAX: return (is_signed ? s(0) >= s(1) : x[0] >= x[1]) ? x[0] : x[1];
    case Op::MIN: return (is_signed ? s(0) <= s(1) : x[0] <= x[1]) ? x[0] : x[1];
    case Op::CMPLT: return (is_signed ? s(0) < s(1) : x[0] < x[1]) ? 1 : 0;
    case Op::CMPNE: return x[0] != x[1] ? 1 : 0;
    case Op::CMPEQ: return x[0] == x[1] ? 1 : 0;
    case Op::AND: return x[0] & x[1];
    case Op::OR: return x[0] | x[1];
    case Op::XOR: return x[0] ^ x[1];
    case Op::SHL:
      if (x[1] >= static_cast<uint64_t>(bits)) return std::nullopt;
      return x[0] << x[1];
    case Op::SHR:
      if (x[1] >= static_cast<uint64_t>(bits)) return std::nullopt;
      return is_signed ? static_cast<uint64_t>(s(0) >> x[1]) : x[0] >> x[1];
    case Op::RECIP: case Op::SQRT: case Op::EXP2: case Op::LOG2: case Op::SIN: case Op::TRUNC: case Op::FDIV:
    case Op::POW: case Op::WHERE: case Op::SINK: case Op::NOOP: case Op::CONST: case Op::DEFINE_VAR:
    case Op::DEVICE: case Op::BUFFER: case Op::CONTIGUOUS: case Op::COPY: case Op::ASSIGN: case Op::DETACH:
    case Op::REDUCE_AXIS: case Op::IOTA: case Op::GATHER: case Op::SCATTER_ADD: case Op::RESHAPE: case Op::PERMUTE: case Op::EXPAND: case Op::PAD: case Op::SHRINK:
    case Op::FLIP: case Op::DEFINE_GLOBAL: case Op::DEFINE_LOCAL: case Op::DEFINE_REG: case Op::INDEX:
    case Op::LOAD: case Op::STORE: case Op::RANGE: case Op::END: case Op::REDUCE: case Op::SPECIAL:
    case Op::BARRIER: case Op::IF: case Op::ENDIF: case Op::VECTORIZE: case Op::GEP: case Op::CAST:
    case Op::BITCAST:
      return std::nullopt;
  }
  return std::nullopt;
}

uint64_t to_bits(const ConstValue& v) {
  return std::visit(
      [](auto x) -> uint64_t {
        if constexpr (std::is_same_v<decltype(x), double>) return static_cast<uint64_t>(static_cast<int64_t>(x));
        else return static_cast<uint64_t>(x);
      },
      v);
}

}  // namespace

std::optional<ConstValue> exec_alu(Op op, DType out, std::span<const ConstValue> src, DType in) {
  if (op == Op::CAST) return cast_const(src[0], out);
  if (op == Op::WHERE) {
    KILN_ASSERT(src.size() == 3, "WHERE has three sources");
    bool cond = std::get<bool>(cast_const(src[0], dtypes::bool_));
    return cast_const(cond ? src[1] : src[2], out);
  }
  if (!is_alu(op)) return std::nullopt;
  if (is_float(in)) {
    std::vector<double> x;
    for (const ConstValue& v : src) x.push_back(as_double(v));
    std::optional<double> r = exec_float(op, x);
    if (!r) return std::nullopt;
    return cast_const(*r, out);
  }
  std::vector<uint64_t> x;
  for (const ConstValue& v : src) x.push_back(to_bits(cast_const(v, in)));
  int width = is_bool(in) ? 1 : bits(in.scalar);
  std::optional<uint64_t> r = exec_int(op, x, !is_unsigned(in) && !is_bool(in), width);
  if (!r) return std::nullopt;
  // Wrap to the result's width: through int64 for signed results, uint64 for unsigned ones.
  if (is_unsigned(out)) return cast_const(*r, out);
  return cast_const(static_cast<int64_t>(*r), out);
}

}  // namespace kiln

namespace kiln {

ConstValue reduce_identity(Op op, DType dtype) {
  if (op == Op::ADD) return cast_const(int64_t{0}, dtype);
  if (op == Op::MUL) return cast_const(int64_t{1}, dtype);
  if (is_float(dtype)) return op == Op::MAX ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  KILN_ASSERT(op == Op::MAX || op == Op::MIN, "reduce ops are ADD, MUL, MAX and MIN, not ", op_name(op));
  return op == Op::MAX ? lowest(dtype) : highest(dtype);
}

}  // namespace kiln
