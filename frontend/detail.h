// Helpers shared by the files that implement Tensor (not part of the public API).
#pragma once
#include "frontend/realize.h"
#include "frontend/tensor.h"

namespace kiln::detail {

UOpPtr movement(Op op, const UOpPtr& x, Arg arg);
// Sources for UOp::make without the extra copy of each that an initializer list makes: every copy of
// a UOpPtr is an atomic increment, and the frontend makes a node per operation.
template <typename... Ts>
std::vector<UOpPtr> sources(Ts&&... src) {
  std::vector<UOpPtr> v;
  v.reserve(sizeof...(src));
  (v.push_back(std::forward<Ts>(src)), ...);
  return v;
}
// float16 and bfloat16: stored narrow, computed in float32 (compute_dtype).
inline bool is_narrow_float(DType d) { return d.scalar == ScalarType::Float16 || d.scalar == ScalarType::BFloat16; }
inline DType compute_dtype(DType d) { return is_narrow_float(d) ? dtypes::float32.vec(d.count) : d; }
int64_t normalize_axis(int64_t axis, int64_t ndim, const char* op);
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
DType result_type(const Tensor& a, const Tensor& b);  // torch.result_type (0-d tensors count less)
// autograd hooks (frontend/autograd.cpp): under NoGradGuard new nodes are wrapped in DETACH; after
// realize, a tensor computed from leaves keeps its graph for backward().
UOpPtr no_grad_wrap(UOpPtr u);
void after_realize(Tensor& t, const UOpPtr& before);

}  // namespace kiln::detail
