// What a kernel AST from the scheduler looks like, checked node by node: a kernel AST read from a file
// (a tuning cache entry's "ast") is untrusted, and lowering assumes this shape.
//
//   UOpPtr ast = parse_ast_text(entry.ast);   // calls check_kernel_ast: throws Error naming the node
//
// The shape: SINK(STORE...) at the root, each STORE(INDEX(DEFINE_GLOBAL slot, index[, valid]), value[, gate]);
// LOAD(INDEX(...)) reads; RANGE(end) loops with distinct axis ids; REDUCE(value, RANGE...) with ADD, MUL,
// MAX or MIN; ALU ops, CAST and BITCAST on scalars whose dtypes agree; CONST and DEFINE_VAR leaves.
// Every dtype is a scalar (vectors appear only in lowering), DEFINE_GLOBAL slots are 0..n-1, indices stay
// below 2^48, and each loop belongs to the store (its index runs over it) or to one REDUCE (closed inside
// it), not both. Not checked: that an index is never negative. Value ranges are conservative (a conv2d
// gradient's scheduler-made AST has loads whose index range dips below 0 and never does), so the check
// would refuse real kernels; `kiln cache verify` runs a stored kernel as it is.
#pragma once
#include <cstddef>

#include "uop/uop.h"

namespace kiln {

inline constexpr size_t kMaxKernelAstNodes = 100'000;  // a big fused kernel has a few thousand

// Throws Error naming the first node that breaks the shape above, and what it should be.
void check_kernel_ast(const UOpPtr& ast);

}  // namespace kiln
