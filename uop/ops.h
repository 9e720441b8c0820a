// The Op enum and its groups, generated from uop/ops.def.
//
//   Op op = Op::ADD;  op_name(op) == "ADD";  is_binary(op) && is_commutative(op);
//
// Semantics of the IR, written once (every stage and every device must agree with these):
// - Integer arithmetic wraps in two's complement at the dtype's width. IDIV truncates toward zero and
//   MOD takes the sign of the dividend, as in C, OpenCL, CUDA and SPIR-V's OpSDiv/OpSRem. Division by
//   zero is undefined; the simplifier never folds it.
// - Floats follow IEEE 754 with round to nearest even; float16 and bfloat16 are storage types whose
//   arithmetic may be done in float32 and rounded on store. The simplifier never applies a rule to a
//   float expression that changes NaN, inf or signed-zero results (no x*0 -> 0 for floats).
// - CMPLT/CMPNE/CMPEQ produce bool. WHERE(c, a, b) reads c as bool.
// - CAST float->int truncates toward zero; int->int wraps; anything->bool is (x != 0).
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

namespace kiln {

enum class Op : uint8_t {
#define KILN_OP(name, group, commutative) name,
#include "uop/ops.def"
#undef KILN_OP
};

enum class OpGroup : uint8_t { Meta, Leaf, Tensor, Movement, Memory, Control, Vector, Cast, Unary, Binary, Ternary };

inline constexpr int kNumOps = 0
#define KILN_OP(name, group, commutative) +1
#include "uop/ops.def"
#undef KILN_OP
    ;

namespace detail {
struct OpInfo {
  std::string_view name;
  OpGroup group;
  bool commutative;
};
inline constexpr std::array<OpInfo, kNumOps> kOpInfo = {{
#define KILN_OP(name, group, commutative) {#name, OpGroup::group, commutative},
#include "uop/ops.def"
#undef KILN_OP
}};
}  // namespace detail

constexpr std::string_view op_name(Op op) { return detail::kOpInfo[static_cast<int>(op)].name; }
constexpr OpGroup op_group(Op op) { return detail::kOpInfo[static_cast<int>(op)].group; }
constexpr bool is_commutative(Op op) { return detail::kOpInfo[static_cast<int>(op)].commutative; }
constexpr bool is_unary(Op op) { return op_group(op) == OpGroup::Unary; }
constexpr bool is_binary(Op op) { return op_group(op) == OpGroup::Binary; }
constexpr bool is_ternary(Op op) { return op_group(op) == OpGroup::Ternary; }
constexpr bool is_alu(Op op) { return is_unary(op) || is_binary(op) || is_ternary(op); }
constexpr bool is_movement(Op op) { return op_group(op) == OpGroup::Movement; }
constexpr bool is_comparison(Op op) { return op == Op::CMPLT || op == Op::CMPNE || op == Op::CMPEQ; }

}  // namespace kiln
