// exp2 and log2 of float32 as ALU ops: a pass for devices whose compiler would otherwise call a
// scalar library function per element (the CPU: a vector loop of exp2f calls runs lane by lane).
//
//   sink = graph_rewrite(sink, pm_transcendental());   // a pass of lower_with_opts (lower.cpp)
//
// The results are polynomials, comparisons, selects, integer adds and shifts and bitcasts, all of
// which upcast_vector turns into vector ops, so a GELU, a softmax or a sigmoid vectorizes like any
// elementwise kernel. Both are exact to ~1 ulp over the whole float32 range, subnormals included,
// and keep the library's special values: exp2(-inf) = 0, exp2(+inf) = inf, log2(0) = -inf,
// log2(x < 0) = NaN, log2(inf) = inf, NaN -> NaN. Devices select it with
// DeviceSpec::alu_transcendentals; other dtypes and ops (sin, sqrt) stay as they are.
#pragma once
#include "uop/pattern.h"

namespace kiln {

const PatternMatcher& pm_transcendental();

}  // namespace kiln
