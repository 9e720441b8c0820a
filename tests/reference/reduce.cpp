// Reductions: the elements are grouped by output position (in row-major order, so along a single
// axis a group is that axis in order), then one plain function turns each group into one value.
#include <algorithm>
#include <cmath>

#include "reference/detail.h"

namespace kiln::ref {

using namespace detail;

namespace {

using Group = std::vector<double>;

// Applies fn to the values of each output position; reduced axes keep size 1 with keepdim and
// vanish without.
Array reduce(const char* op, const Array& a, const Axes& axes, bool keepdim, DType out_dtype,
             const std::function<double(const Group&)>& fn) {
  std::vector<bool> reduced = axis_mask(op, axes, a.rank());
  Shape kept_shape = a.shape, out_shape;  // kept_shape: with keepdim
  for (int64_t d = 0; d < a.rank(); ++d) {
    if (reduced[d]) kept_shape[d] = 1;
    if (!reduced[d] || keepdim) out_shape.push_back(kept_shape[d]);
  }
  std::vector<Group> groups(numel_of(kept_shape));
  for (int64_t i = 0; i < a.numel(); ++i) groups[broadcast_flat(kept_shape, index_of(i, a.shape))].push_back(a.data[i]);
  Array out = zeros(out_shape, out_dtype);
  for (size_t g = 0; g < groups.size(); ++g) out.data[g] = round_to(out_dtype, fn(groups[g]));
  return out;
}

// sum, prod and cumsum of bool or integers give int64, as torch.
DType accumulate_dtype(DType t) { return is_float(t) ? t : dtypes::int64; }

double sum_of(const Group& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}

double variance_of(const Group& g, int64_t correction) {
  double mean = sum_of(g) / static_cast<double>(g.size()), squares = 0;
  for (double v : g) squares += (v - mean) * (v - mean);
  return squares / std::max(0.0, static_cast<double>(g.size()) - static_cast<double>(correction));
}

// First position of the extreme; `better(v, best)` says v beats the best so far. A NaN beats all.
double index_of_extreme(const char* op, const Group& g, bool (*better)(double, double)) {
  if (g.empty()) fail(message(op, ": reduction over an empty axis has no index"));
  size_t best = 0;
  for (size_t i = 1; i < g.size() && !std::isnan(g[best]); ++i)
    if (std::isnan(g[i]) || better(g[i], g[best])) best = i;
  return static_cast<double>(best);
}

double extreme_of(const char* op, const Group& g, bool (*better)(double, double)) {
  if (g.empty()) fail(message(op, ": reduction over an empty axis has no identity; reduce a non-empty axis"));
  return g[static_cast<size_t>(index_of_extreme(op, g, better))];
}

bool greater(double x, double y) { return x > y; }
bool less(double x, double y) { return x < y; }

Array arg_extreme(const char* op, const Array& a, std::optional<int64_t> axis, bool keepdim,
                  bool (*better)(double, double)) {
  auto fn = [&](const Group& g) { return index_of_extreme(op, g, better); };
  if (!axis) return reduce(op, reshape(a, {-1}), {0}, false, dtypes::int64, fn);
  return reduce(op, a, {*axis}, keepdim, dtypes::int64, fn);
}

Array squeeze_reduced(const char* op, const Array& kept, const Axes& axes, bool keepdim) {
  if (keepdim) return kept;
  std::vector<bool> reduced = axis_mask(op, axes, kept.rank());
  Shape shape;
  for (int64_t d = 0; d < kept.rank(); ++d)
    if (!reduced[d]) shape.push_back(kept.shape[d]);
  return reshape(kept, shape);
}

}  // namespace

Array sum(const Array& a, Axes axes, bool keepdim) {
  return reduce("sum", a, axes, keepdim, accumulate_dtype(a.dtype), sum_of);
}

Array prod(const Array& a, Axes axes, bool keepdim) {
  return reduce("prod", a, axes, keepdim, accumulate_dtype(a.dtype), [](const Group& g) {
    double p = 1;
    for (double v : g) p *= v;
    return p;
  });
}

Array max(const Array& a, Axes axes, bool keepdim) {
  return reduce("max", a, axes, keepdim, a.dtype, [](const Group& g) { return extreme_of("max", g, greater); });
}

Array min(const Array& a, Axes axes, bool keepdim) {
  return reduce("min", a, axes, keepdim, a.dtype, [](const Group& g) { return extreme_of("min", g, less); });
}

Array mean(const Array& a, Axes axes, bool keepdim) {
  return reduce("mean", a, axes, keepdim, to_floating(a.dtype),
                [](const Group& g) { return sum_of(g) / static_cast<double>(g.size()); });
}

Array var(const Array& a, Axes axes, int64_t correction, bool keepdim) {
  return reduce("var", a, axes, keepdim, to_floating(a.dtype),
                [&](const Group& g) { return variance_of(g, correction); });
}

Array stddev(const Array& a, Axes axes, int64_t correction, bool keepdim) {
  return reduce("stddev", a, axes, keepdim, to_floating(a.dtype),
                [&](const Group& g) { return std::sqrt(variance_of(g, correction)); });
}

Array argmax(const Array& a, std::optional<int64_t> axis, bool keepdim) {
  return arg_extreme("argmax", a, axis, keepdim, greater);
}

Array argmin(const Array& a, std::optional<int64_t> axis, bool keepdim) {
  return arg_extreme("argmin", a, axis, keepdim, less);
}

Array any(const Array& a, Axes axes, bool keepdim) {
  // torch.any keeps uint8 for uint8 input (values 0/1); bool for everything else.
  return reduce("any", a, axes, keepdim, a.dtype == dtypes::uint8 ? dtypes::uint8 : dtypes::bool_, [](const Group& g) {
    for (double v : g)
      if (v != 0) return 1.0;
    return 0.0;
  });
}

Array all(const Array& a, Axes axes, bool keepdim) {
  return reduce("all", a, axes, keepdim, a.dtype == dtypes::uint8 ? dtypes::uint8 : dtypes::bool_, [](const Group& g) {
    for (double v : g)
      if (v == 0) return 0.0;
    return 1.0;
  });
}

// softmax(x) = exp(x - m) / sum(exp(x - m)) with m the maximum: the same value, no overflow.
Array softmax(const Array& a, int64_t axis) {
  Array x = cast(a, dtypes::float64);
  Array e = exp(sub(x, max(x, {axis}, true)));
  return cast(div(e, sum(e, {axis}, true)), to_floating(a.dtype));
}

Array log_softmax(const Array& a, int64_t axis) {
  Array x = cast(a, dtypes::float64);
  Array shifted = sub(x, max(x, {axis}, true));
  return cast(sub(shifted, log(sum(exp(shifted), {axis}, true))), to_floating(a.dtype));
}

// An infinite maximum shifts by 0 instead (inf - inf would be NaN), as torch.logsumexp does.
Array logsumexp(const Array& a, Axes axes, bool keepdim) {
  Array x = cast(a, dtypes::float64);
  Array m = unary(max(x, axes, true), [](double v) { return std::isinf(v) ? 0.0 : v; }, dtypes::float64);
  Array kept = add(log(sum(exp(sub(x, m)), axes, true)), m);
  return cast(squeeze_reduced("logsumexp", kept, axes, keepdim), to_floating(a.dtype));
}

Array cumsum(const Array& a, int64_t axis) {
  int64_t d = normalize_axis("cumsum", axis, a.rank());
  int64_t stride = numel_of(Shape(a.shape.begin() + d + 1, a.shape.end()));
  std::vector<double> running(a.data.size());
  Array out = zeros(a.shape, accumulate_dtype(a.dtype));
  for (int64_t i = 0; i < a.numel(); ++i) {
    // Row-major order visits the previous element along the axis (i - stride) first.
    bool first_along_axis = index_of(i, a.shape)[d] == 0;
    running[i] = a.data[i] + (first_along_axis ? 0.0 : running[i - stride]);
    out.data[i] = round_to(out.dtype, running[i]);
  }
  return out;
}

}  // namespace kiln::ref
