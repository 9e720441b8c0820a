// Tensor reductions beyond sum/max/min/mean (tensor.cpp), built from REDUCE_AXIS and elementwise ops.
#include <cmath>
#include <functional>
#include <limits>

#include "frontend/detail.h"

namespace kiln {

using detail::normalize_axis;

Tensor Tensor::prod(std::vector<int64_t> axes, bool keepdim) const { return reduce(Op::MUL, std::move(axes), keepdim, "prod"); }

Tensor Tensor::var(std::vector<int64_t> axes, bool keepdim, double correction) const {
  if (detail::is_narrow_float(dtype()))
    return in_float([&](const Tensor& x) { return x.var(axes, keepdim, correction); });
  axes = normalize_axes(std::move(axes), "var");
  int64_t n = 1;
  for (int64_t a : axes) n *= shape()[static_cast<size_t>(a)];
  Tensor x = cast(to_floating(dtype()));
  Tensor centered = x - x.mean(axes, true);
  Tensor ss = (centered * centered).sum(axes, keepdim);
  // PyTorch divides by max(0, n - correction): inf (or NaN for a constant slice) when it is 0.
  return ss / ss.full_like(std::max(0.0, static_cast<double>(n) - correction));
}

Tensor Tensor::std(std::vector<int64_t> axes, bool keepdim, double correction) const {
  return var(std::move(axes), keepdim, correction).sqrt();
}

// any/all of nothing are false/true: as sums of bools compared with 0 / the count, they need no identity.
// PyTorch keeps uint8 for any/all of a uint8 tensor (0 or 1); every other dtype gives bool.
Tensor Tensor::any(std::vector<int64_t> axes, bool keepdim) const {
  Tensor r = cast(dtypes::bool_).sum(std::move(axes), keepdim).ne(Tensor::zeros({}, dtypes::int64, device()));
  return dtype() == dtypes::uint8 ? r.cast(dtypes::uint8) : r;
}
Tensor Tensor::all(std::vector<int64_t> axes, bool keepdim) const {
  Tensor r = cast(dtypes::bool_).logical_not().any(std::move(axes), keepdim).logical_not();
  return dtype() == dtypes::uint8 ? r.cast(dtypes::uint8) : r;
}

namespace {
// The first index along `axis` where `hit` is true (int64), as torch.argmax/argmin report ties.
Tensor first_index(const Tensor& hit, int64_t axis, bool keepdim) {
  int64_t n = hit.shape()[static_cast<size_t>(axis)];
  Shape s(hit.shape().size(), 1);
  s[static_cast<size_t>(axis)] = n;
  Tensor idx = Tensor::arange(n, dtypes::int64, hit.device()).reshape(s).expand(hit.shape());
  Tensor big = Tensor::full(hit.shape(), static_cast<double>(n), dtypes::int64, hit.device());
  return hit.where(idx, big).min({axis}, keepdim);
}

Tensor arg_extreme(const Tensor& t, std::optional<int64_t> axis, bool keepdim, bool is_max, const char* name) {
  if (t.numel() == 0) throw Error(kiln::cat(name, ": cannot take the ", name, " of an empty tensor of shape ", shape_str(t.shape())));
  if (!axis) {
    Tensor flat = t.reshape({t.numel()});
    Tensor r = arg_extreme(flat, 0, false, is_max, name);
    return keepdim ? r.reshape(Shape(t.shape().size(), 1)) : r;
  }
  int64_t a = normalize_axis(*axis, t.ndim(), name);
  if (t.ndim() == 0) return Tensor::zeros({}, dtypes::int64, t.device());
  Tensor m = is_max ? t.max({a}, true) : t.min({a}, true);
  Tensor hit = t.eq(m.expand(t.shape()));
  if (is_float(t.dtype())) hit = hit.logical_or(t.ne(t));  // NaN counts as the extreme, as in PyTorch
  return first_index(hit, a, keepdim);
}
}  // namespace

Tensor Tensor::argmax(std::optional<int64_t> axis, bool keepdim) const { return arg_extreme(*this, axis, keepdim, true, "argmax"); }
Tensor Tensor::argmin(std::optional<int64_t> axis, bool keepdim) const { return arg_extreme(*this, axis, keepdim, false, "argmin"); }

Tensor Tensor::logsumexp(std::vector<int64_t> axes, bool keepdim) const {
  Tensor x = cast(to_floating(dtype()));
  std::vector<int64_t> ax = normalize_axes(axes, "logsumexp");
  int64_t reduced = 1;
  for (int64_t a : ax) reduced *= shape()[static_cast<size_t>(a)];
  // The log of an empty sum is -inf, as in PyTorch. There is no max to shift by; the empty sum keeps
  // the result on x's gradient path (its gradient is x's, empty).
  if (reduced == 0) return x.sum(ax, keepdim) + -std::numeric_limits<double>::infinity();
  Tensor m = x.max(axes, true);
  // Shift by the max unless it is infinite (all -inf, or a +inf present): then shift by 0.
  Tensor inf = m.full_like(std::numeric_limits<double>::infinity());
  Tensor shift = m.abs().eq(inf).where(m.zeros_like(), m);
  Tensor out = (x - shift).exp().sum(axes, true).log() + shift;
  if (keepdim) return out;
  Shape kept;
  for (size_t i = 0; i < shape().size(); ++i)
    if (std::find(ax.begin(), ax.end(), static_cast<int64_t>(i)) == ax.end()) kept.push_back(shape()[i]);
  return out.reshape(kept);
}

Tensor Tensor::softmax(int64_t axis) const {
  if (detail::is_narrow_float(dtype()))
    return in_float([&](const Tensor& x) { return x.softmax(axis); });
  Tensor x = cast(to_floating(dtype()));
  Tensor e = (x - x.max({axis}, true)).exp();
  return e / e.sum({axis}, true);
}

Tensor Tensor::log_softmax(int64_t axis) const {
  if (detail::is_narrow_float(dtype()))
    return in_float([&](const Tensor& x) { return x.log_softmax(axis); });
  Tensor x = cast(to_floating(dtype()));
  return x - x.logsumexp({axis}, true);
}

namespace {
// out[..., i] = reduce over j <= i of x[..., j], along `axis`: x moved last and expanded to (..., n, n),
// with the identity where j > i, reduced by `reduce`.
Tensor cumulative(const Tensor& t, int64_t axis, double identity, const std::function<Tensor(const Tensor&)>& reduce, const char* name) {
  int64_t a = normalize_axis(axis, t.ndim(), name);
  if (t.ndim() == 0) return t;
  Tensor x = t.transpose(a, -1);
  int64_t n = x.shape().back();
  Tensor i = Tensor::arange(n, dtypes::int32, t.device());
  Tensor mask = i.reshape({1, n}).le(i.reshape({n, 1}));  // [i][j]: j <= i
  Shape expanded = x.shape();
  expanded.insert(expanded.end() - 1, n);
  Tensor xs = x.unsqueeze(-2).expand(expanded);
  return reduce(mask.expand(expanded).where(xs, xs.full_like(identity))).transpose(a, -1);
}
}  // namespace

Tensor Tensor::cumsum(int64_t axis) const {
  return cumulative(*this, axis, 0.0, [](const Tensor& x) { return x.sum({-1}); }, "cumsum");
}
Tensor Tensor::cumprod(int64_t axis) const {
  return cumulative(*this, axis, 1.0, [](const Tensor& x) { return x.prod({-1}); }, "cumprod");
}
Tensor Tensor::logcumsumexp(int64_t axis) const {
  if (!is_float(dtype())) throw Error(kiln::cat("logcumsumexp: needs a float tensor, got ", dtype().name()));
  return cumulative(*this, axis, -INFINITY, [](const Tensor& x) { return x.logsumexp({-1}); }, "logcumsumexp");
}

}  // namespace kiln
