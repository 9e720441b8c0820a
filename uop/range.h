// Value ranges of integer and bool UOps: the facts the symbolic simplifier decides things with.
//
//   auto [lo, hi] = compute_range(Op::ADD, dtypes::int32, {x, y}, {});   // [x.vmin+y.vmin, x.vmax+y.vmax]
//
// Ranges are sound: every value a node can take at run time lies in [vmin, vmax]. A result that might
// wrap past its dtype's limits gets the dtype's whole range. Non-integer dtypes get the int64 range,
// which rules treat as "unknown" (they check the dtype first). uint64 ranges saturate at INT64_MAX,
// so range-based rules skip uint64.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "uop/uop.h"

namespace kiln {

std::pair<int64_t, int64_t> compute_range(Op op, DType dtype, const std::vector<UOpPtr>& src, const Arg& arg);

// The range of every value of dtype, as int64 (bool: [0, 1]; unknown/float: the int64 range).
std::pair<int64_t, int64_t> dtype_range(DType dtype);

// Whether range-based rules may rely on vmin/vmax of this dtype.
bool has_exact_range(DType dtype);

}  // namespace kiln
