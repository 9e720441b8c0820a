// Evaluation of one ALU op on constants: constant folding in the simplifier, and the reference
// semantics of uop/ops.h in executable form.
//
//   exec_alu(Op::IDIV, dtypes::int32, {int64_t{-7}, int64_t{2}}, dtypes::int32)  // -> -3 (truncates)
//
// Returns nullopt where the result is undefined (division by zero, over-wide shifts) or where kiln
// does not fold on purpose (MAX/MIN with a NaN, whose device semantics differ; POW on integers;
// BITCAST), so callers simply leave the expression alone.
#pragma once
#include <optional>
#include <span>

#include "uop/dtype.h"
#include "uop/ops.h"

namespace kiln {

// `out` is the result dtype; `in` is the operands' dtype (for WHERE, that of the two values).
std::optional<ConstValue> exec_alu(Op op, DType out, std::span<const ConstValue> src, DType in);

// The identity element of a reduce op for dtype (0 for ADD, 1 for MUL, the lowest value for MAX...):
// what a reduction over no elements gives.
ConstValue reduce_identity(Op op, DType dtype);

}  // namespace kiln
