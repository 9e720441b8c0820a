// The symbolic simplifier: integer index math made clean, as a rule table for graph_rewrite.
//
//   UOpPtr x = var("x", 0, 9), y = var("y", 0, 3);
//   simplify((x * 4 + y) / 4) == x;      simplify((x * 4 + y) % 4) == y;
//   UOpPtr e = graph_rewrite(kernel, pm_symbolic + pm_my_pass);   // compose with other rules
//
// What it does (each rule in symbolic.cpp states its algebra):
// - folds constants (exec_alu) and any integer node whose value range is a single value, which also
//   decides comparisons by ranges (x < 10 is true when x.vmax < 10);
// - applies identities (x*1, x*0, x+0, x//1, x%1, where with a constant condition, ...);
// - puts sums in a canonical form: flattened, like terms combined, constants last, terms ordered by
//   structural hash, (x//c)*c + x%c recombined into x, constant factors distributed over sums;
// - folds // and % by a positive constant over sums of scaled terms when value ranges allow it:
//   (x*4+y)//4 -> x and (x*4+y)%4 -> y for 0 <= y < 4, common factors divided out, nested div/mod.
// Integer rules that need value ranges never fire for uint64 (see uop/range.h), and no rule changes a
// float result: float expressions only get constant folding and exact identities (x*1, x/1).
#pragma once
#include <optional>

#include "uop/pattern.h"

namespace kiln {

const PatternMatcher& pm_symbolic();
UOpPtr simplify(const UOpPtr& x);

// How much the integer expression `index` grows when the RANGE r grows by 1, when that is a constant.
std::optional<int64_t> index_stride(const UOpPtr& index, const UOpPtr& r);
bool is_contiguous(const UOpPtr& index, const UOpPtr& r);  // index_stride(index, r) == 1
bool depends_on(const UOpPtr& u, const UOpPtr& r);          // whether r is among u's sources, at any depth

}  // namespace kiln
