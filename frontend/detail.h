// Helpers shared by the files that implement Tensor (not part of the public API).
#pragma once
#include "frontend/realize.h"
#include "frontend/tensor.h"

namespace kiln::detail {

UOpPtr movement(Op op, const UOpPtr& x, Arg arg);
int64_t normalize_axis(int64_t axis, int64_t ndim, const char* op);
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// A tensor of `shape` filled with v (exactly: no trip through double, unlike Tensor::full).
Tensor constant(ConstValue v, DType dtype, const Shape& shape, const std::string& device);

}  // namespace kiln::detail
