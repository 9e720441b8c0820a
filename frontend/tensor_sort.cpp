// Tensor: sort, argsort and topk by comparison counting. Each element's position in the sorted
// order is the number of elements that sort before it (an (n x n) comparison and a sum): O(n^2)
// work, but one fused kernel made of compares and sums, with no data-dependent control flow, which
// every device runs. Hence the limit kMaxSortLength on the sorted axis.
//
// Ties keep their original order (a stable sort). NaN sorts after every number (first when
// descending), as in PyTorch. The values are moved bit for bit (-0.0 and NaN payloads included).
#include "frontend/detail.h"

namespace kiln {

namespace {
DType bits_type(DType d) {
  switch (d.itemsize()) {
    case 1: return dtypes::int8;
    case 2: return dtypes::int16;
    case 4: return dtypes::int32;
    default: return dtypes::int64;
  }
}
}  // namespace

std::pair<Tensor, Tensor> Tensor::sort(int64_t axis, bool descending) const {
  if (ndim() == 0) return {*this, zeros({}, dtypes::int64, device())};
  int64_t a = detail::normalize_axis(axis, ndim(), "sort");
  Tensor x = transpose(a, -1);
  int64_t n = x.shape().back();
  if (n > kMaxSortLength)
    throw Error(kiln::cat("sort: the axis has ", n, " elements; kiln sorts by comparison counts, O(n^2), up to ", kMaxSortLength,
                          " (sort smaller pieces, or reshape so the sorted axis is shorter)"));
  Shape square = x.shape();  // (..., n, n): [i][j] compares element i with element j
  square.push_back(n);
  Tensor xi = x.unsqueeze(-1).expand(square), xj = x.unsqueeze(-2).expand(square);
  // less(a, b): a sorts before b by value; NaN after every number.
  auto less = [&](const Tensor& p, const Tensor& q) {
    Tensor lt = p.lt(q);
    if (is_float(dtype())) lt = lt.logical_or(q.ne(q).logical_and(p.eq(p)));
    return lt;
  };
  Tensor same = xi.eq(xj);
  if (is_float(dtype())) same = same.logical_or(xi.ne(xi).logical_and(xj.ne(xj)));
  Tensor i_idx = arange(n, dtypes::int64, device()).reshape({n, 1}), j_idx = arange(n, dtypes::int64, device()).reshape({1, n});
  Tensor earlier = j_idx.lt(i_idx).expand(square);
  Tensor before = (descending ? less(xi, xj) : less(xj, xi)).logical_or(same.logical_and(earlier));  // j sorts before i
  Tensor rank = before.cast(dtypes::int64).sum({-1});  // (..., n): where element i goes
  // picks[k][i]: element i goes to position k.
  Tensor picks = rank.unsqueeze(-2).expand(square).eq(arange(n, dtypes::int64, device()).reshape({n, 1}).expand(square));
  Tensor positions = arange(n, dtypes::int64, device()).reshape({1, n}).expand(square);
  Tensor indices = picks.where(positions, positions.zeros_like()).sum({-1});
  Tensor values;
  if (is_float(dtype())) {
    Tensor bits = xj.bitcast(bits_type(dtype())).cast(dtypes::int64);
    values = picks.where(bits, bits.zeros_like()).sum({-1}).cast(bits_type(dtype())).bitcast(dtype());
  } else {
    Tensor v = xj.cast(dtypes::int64);
    values = picks.where(v, v.zeros_like()).sum({-1}).cast(dtype());
  }
  values = values.transpose(a, -1);
  if (grad_enabled() && is_float(dtype())) {
    // The values are a permutation of the input: element i's gradient is that of position rank[i].
    // Gradients only flow along float nodes, and the bits are integers: a where that always takes the
    // bits, beside the input itself, puts the values on the input's gradient path.
    values = Tensor::full(values.shape(), 1.0, dtypes::bool_, device()).where(values, *this);
    // picks is held weakly (values' graph keeps it alive), as custom gradients must not own graph nodes.
    std::weak_ptr<const UOp> picks_node = picks.uop();
    Shape square_shape = picks.shape();
    detail::set_custom_gradient(values, {*this}, [picks_node, square_shape, a](const Tensor& g, const std::vector<bool>&) {
      UOpPtr p = picks_node.lock();
      if (!p) throw InternalError("sort's gradient outlived its graph");
      Tensor mask(p, square_shape);
      Tensor gk = g.transpose(a, -1).unsqueeze(-1).expand(square_shape);  // [k][i] = g_k
      return std::vector<std::optional<Tensor>>{mask.where(gk, gk.zeros_like()).sum({-2}).transpose(a, -1)};
    });
  }
  return {values, indices.transpose(a, -1)};
}

Tensor Tensor::argsort(int64_t axis, bool descending) const { return sort(axis, descending).second; }

std::pair<Tensor, Tensor> Tensor::topk(int64_t k, int64_t axis, bool largest) const {
  int64_t a = detail::normalize_axis(axis, ndim(), "topk");
  int64_t n = ndim() == 0 ? 1 : shape()[static_cast<size_t>(a)];
  if (k < 0 || k > n) throw Error(kiln::cat("topk: k ", k, " is outside 0..", n, " (the size of axis ", a, " of ", shape_str(shape()), ")"));
  auto [values, indices] = sort(a, largest);
  if (ndim() == 0) return {values, indices};
  return {values.slice(a, 0, k), indices.slice(a, 0, k)};
}

}  // namespace kiln
