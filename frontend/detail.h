// Helpers shared by the files that implement Tensor (not part of the public API).
#pragma once
#include <functional>
#include <optional>

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
inline Shape channel_shape(int64_t channels, int64_t ndim) {  // (1, C, 1, ...) to broadcast over (N, C, ...)
  Shape s(static_cast<size_t>(ndim), 1);
  s[1] = channels;
  return s;
}
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
DType result_type(const Tensor& a, const Tensor& b);  // torch.result_type (0-d tensors count less)
// The one-hot mask of integer indices over a new last axis of n: [..., p] = index[...] == p, p in 0..n-1.
// one_hot, scatter and GATHER's gradient are sums through it; the caller checks the range.
Tensor index_mask(const Tensor& index, int64_t n);
// A zero with the sign of each x (float): from x's sign bit, not x * 0, which devices may compute
// without signed zeros (Vulkan's float arithmetic need not keep them).
Tensor signed_zero(const Tensor& x);
// autograd hooks (frontend/autograd.cpp): under NoGradGuard new nodes are wrapped in DETACH; after
// realize, a tensor computed from leaves keeps its graph for backward().
UOpPtr no_grad_wrap(UOpPtr u);
// The BUFFER behind a realized tensor's node (BUFFER, or RESHAPE of one), else null.
UOpPtr realized_buffer(const UOpPtr& u);
void after_realize(std::vector<Tensor>& tensors, const std::vector<UOpPtr>& befores);  // befores[j]: tensors[j]'s node before

// Host values a step computes (an optimizer's step count and bias corrections, the RNG's counter).
// host_work runs `work` now and, inside a step being captured (frontend/jit.h), again before the
// launches that follow it on every replay. host_tensor is a new tensor whose bytes fill(dst) writes on
// the host in the same way: a replay refills it, so its value is never frozen into the capture.
void host_work(std::function<void()> work);
Tensor host_tensor(Shape shape, DType dtype, const std::string& device, std::function<void(void* dst)> fill);
// A check on a few integers the device computed (the smallest and largest index, a count of bad
// targets): they are realized, and read back on the host as host work, where `check` throws if they are
// wrong. Eagerly it runs now; in a captured step (frontend/jit.h) on every replay too.
void check_on_host(const Tensor& values, std::function<void(const std::vector<int64_t>& values)> check);
// Integer indices must lie in [0, n): the device finds their smallest and largest value, and the host
// reads those two numbers as host work (so a captured step checks every replay's indices), throwing
// "<op>: index v is out of range for axis <axis> of size n (shape <shape>)" for the first bad one.
void check_index_range(const Tensor& index, int64_t n, int64_t axis, const Shape& shape, const char* op);

// Custom gradients for composite ops whose gradient, derived op by op, would be costly (conv2d's input
// gradient through the window view is a scatter; as a convolution of the output gradient it is a
// gather). backward() reaching `out` calls vjp(gradient of out, which inputs need one) for the
// gradients of `inputs` instead of differentiating out's own graph. An entry lives as long as out's
// node; vjp must not hold out or the inputs (capture weak references).
using CustomVjp = std::function<std::vector<std::optional<Tensor>>(const Tensor& grad, const std::vector<bool>& wanted)>;
void set_custom_gradient(const Tensor& out, const std::vector<Tensor>& inputs, CustomVjp vjp);
// Inside a vjp: the gradient of out's own graph with respect to input (out's custom gradient ignored).
Tensor plain_gradient(const UOpPtr& out, const Tensor& input, const Tensor& grad);
// The gradient of an elementwise `out` made from x, with respect to x, is g * local(x, out): a closed form
// instead of out's graph differentiated op by op (nothing is set without grad mode or for non-float x).
void set_elementwise_gradient(const Tensor& out, const Tensor& x, std::function<Tensor(const Tensor& x, const Tensor& out)> local);

}  // namespace kiln::detail
