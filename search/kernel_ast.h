// What a kernel AST from the scheduler looks like, checked node by node: a kernel AST read from a file
// (a tuning cache entry's "ast") is untrusted, and lowering assumes this shape.
//
//   UOpPtr ast = parse_ast_text(entry.ast);   // calls check_kernel_ast: throws Error naming the node
//
// The shape: SINK(STORE...) at the root, each STORE(INDEX(DEFINE_GLOBAL slot, index[, valid]), value[, gate]);
// LOAD(INDEX(...)) reads; RANGE(end) loops with distinct axis ids; REDUCE(value, RANGE...) with ADD, MUL,
// MAX or MIN; ALU ops, CAST and BITCAST on scalars whose dtypes agree; CONST and DEFINE_VAR leaves.
// Every dtype is a scalar (vectors appear only in lowering), DEFINE_GLOBAL slots are 0..n-1, and an
// index without a validity condition is never negative (a buffer is sized by its largest index).
#pragma once
#include <cstddef>

#include "uop/uop.h"

namespace kiln {

inline constexpr size_t kMaxKernelAstNodes = 100'000;  // a big fused kernel has a few thousand

// Throws Error naming the first node that breaks the shape above, and what it should be.
void check_kernel_ast(const UOpPtr& ast);

}  // namespace kiln
