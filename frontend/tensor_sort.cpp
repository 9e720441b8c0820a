// Tensor: sort, argsort and topk, along the last axis (the sorted axis is moved there and back).
//
// Two mechanisms with one order: ties keep their original order (a stable sort), NaN sorts after
// every number (first when descending), as in PyTorch, and values move bit for bit (-0.0 and NaN
// payloads included).
// - Up to kCountSortLength elements, comparison counting: each element's position is the number of
//   elements that sort before it (an (n x n) comparison and a sum), then a masked sum picks the
//   element for each position. O(n^2) work, but one fused kernel of compares and sums.
// - Longer axes, a bitonic network over the axis padded to a power of two P: log2(P) merges of
//   sorted runs, each a few compare-exchange stages in which every element meets a partner that a
//   view gives (a reshape and a flip), and keeps the one that sorts first or last. O(P log^2 P) work
//   in log2(P) (log2(P) + 1) / 2 stages, each one elementwise kernel per output. The network compares
//   (value, original index) pairs, which are all distinct, so it gives exactly the stable order; the
//   padding compares by position alone, after every element, so no sentinel value is needed.
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

// p sorts before q by value alone: NaN after every number.
Tensor sorts_before(const Tensor& p, const Tensor& q) {
  Tensor lt = p.lt(q);
  if (is_float(p.dtype())) lt = lt.logical_or(q.ne(q).logical_and(p.eq(p)));
  return lt;
}
Tensor same_key(const Tensor& p, const Tensor& q) {
  Tensor eq = p.eq(q);
  if (is_float(p.dtype())) eq = eq.logical_or(p.ne(p).logical_and(q.ne(q)));
  return eq;
}

// x: (..., n), sorted along the last axis by comparison counts.
std::pair<Tensor, Tensor> count_sort(const Tensor& x, bool descending) {
  int64_t n = x.shape().back();
  std::string dev = x.device();
  Shape square = x.shape();  // (..., n, n): [i][j] compares element i with element j
  square.push_back(n);
  Tensor xi = x.unsqueeze(-1).expand(square), xj = x.unsqueeze(-2).expand(square);
  Tensor i_idx = Tensor::arange(n, dtypes::int64, dev).reshape({n, 1}), j_idx = Tensor::arange(n, dtypes::int64, dev).reshape({1, n});
  Tensor earlier = j_idx.lt(i_idx).expand(square);
  Tensor before = (descending ? sorts_before(xi, xj) : sorts_before(xj, xi)).logical_or(same_key(xi, xj).logical_and(earlier));  // j sorts before i
  Tensor rank = before.cast(dtypes::int64).sum({-1});  // (..., n): where element i goes
  // picks[k][i]: element i goes to position k.
  Tensor picks = rank.unsqueeze(-2).expand(square).eq(Tensor::arange(n, dtypes::int64, dev).reshape({n, 1}).expand(square));
  Tensor positions = Tensor::arange(n, dtypes::int64, dev).reshape({1, n}).expand(square);
  Tensor indices = picks.where(positions, positions.zeros_like()).sum({-1});
  Tensor values;
  if (is_float(x.dtype())) {
    Tensor bits = xj.bitcast(bits_type(x.dtype())).cast(dtypes::int64);
    values = picks.where(bits, bits.zeros_like()).sum({-1}).cast(bits_type(x.dtype())).bitcast(x.dtype());
  } else {
    Tensor v = xj.cast(dtypes::int64);
    values = picks.where(v, v.zeros_like()).sum({-1}).cast(x.dtype());
  }
  if (grad_enabled() && is_float(x.dtype())) {
    // The values are a permutation of the input: element i's gradient is that of position rank[i].
    // Gradients only flow along float nodes, and the bits are integers: a where that always takes the
    // bits, beside the input itself, puts the values on the input's gradient path.
    values = Tensor::full(values.shape(), 1.0, dtypes::bool_, dev).where(values, x);
    // picks is held weakly (values' graph keeps it alive), as custom gradients must not own graph nodes.
    std::weak_ptr<const UOp> picks_node = picks.uop();
    detail::set_custom_gradient(values, {x}, [picks_node, square](const Tensor& g, const std::vector<bool>&) {
      UOpPtr p = picks_node.lock();
      if (!p) throw InternalError("sort's gradient outlived its graph");
      Tensor mask(p, square);
      Tensor gk = g.unsqueeze(-1).expand(square);  // [k][i] = g_k
      return std::vector<std::optional<Tensor>>{mask.where(gk, gk.zeros_like()).sum({-2})};
    });
  }
  return {values, indices};
}

// The pairs a bitonic network sorts, along the last axis (of size P, a power of two): value, original
// position (the tie-break), and a payload that travels with them (the gradient's).
struct Keyed {
  Tensor value, index;
  std::optional<Tensor> payload;
};

// A view of t (..., P) in which each position holds its partner's element: in blocks of 2h, the
// element h away (flip of the block's halves), or with `mirror` the one at the mirrored place.
Tensor partner(const Tensor& t, int64_t h, bool mirror) {
  Shape blocks(t.shape().begin(), t.shape().end() - 1);
  int64_t p = t.shape().back();
  blocks.insert(blocks.end(), {p / (2 * h), 2, h});
  Tensor b = t.reshape(blocks);
  return (mirror ? b.flip({-2, -1}) : b.flip({-2})).reshape(t.shape());
}

// Along the last axis (..., P): t with ones of its rank before `shape`, to broadcast over it.
Tensor leading_ones(const Tensor& t, size_t rank) {
  Shape s(rank - t.shape().size(), 1);
  s.insert(s.end(), t.shape().begin(), t.shape().end());
  return t.reshape(s);
}

// One compare-exchange stage: the first half of each block of 2h keeps the element of each pair that
// sorts first, the second half the other. `halves` is (1, 2, 1) bool {true, false}. Each output is
// stored (contiguous): the next stage reads every element twice, and fusing stages would recompute
// them exponentially.
Keyed exchange(const Keyed& k, int64_t n, int64_t h, bool mirror, bool descending, const Tensor& halves) {
  Tensor pv = partner(k.value, h, mirror), pi = partner(k.index, h, mirror);
  Tensor first = descending ? sorts_before(pv, k.value) : sorts_before(k.value, pv);
  first = first.logical_or(same_key(k.value, pv).logical_and(k.index.lt(pi)));  // this element sorts before its partner
  // Padding (positions n and above) sorts after every element, whatever its value: by position alone.
  Tensor padding = k.index.maximum(pi).ge(Tensor::full({}, static_cast<double>(n), dtypes::int64, k.index.device()));
  first = padding.where(k.index.lt(pi), first);
  int64_t p = k.value.shape().back();
  Tensor lower = leading_ones(halves.expand({p / (2 * h), 2, h}).reshape({p}), first.shape().size()).expand(first.shape());
  Tensor keep = first.eq(lower);
  Keyed out{keep.where(k.value, pv).contiguous(), keep.where(k.index, pi).contiguous(), std::nullopt};
  if (k.payload) out.payload = keep.where(*k.payload, partner(*k.payload, h, mirror)).contiguous();
  return out;
}

// The bitonic network: merges of sorted runs of h into runs of 2h, each a mirrored exchange (which
// leaves both halves bitonic) and then half-cleaners at distances h/2, ..., 1.
Keyed bitonic(Keyed k, int64_t n, bool descending) {
  int64_t p = k.value.shape().back();
  // From an arange, not a buffer: a gradient that rebuilds the network gets the same (interned) nodes.
  Tensor halves = Tensor::arange(2, dtypes::int32, k.value.device()).reshape({1, 2, 1}).eq(Tensor::zeros({1, 1, 1}, dtypes::int32, k.value.device()));
  for (int64_t run = 1; run < p; run *= 2) {
    k = exchange(k, n, run, true, descending, halves);
    for (int64_t h = run / 2; h >= 1; h /= 2) k = exchange(k, n, h, false, descending, halves);
  }
  return k;
}

int64_t power_of_two_above(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// x: (..., n), sorted along the last axis by a bitonic network, with the values' payload when given.
Keyed network(const Tensor& x, bool descending, std::optional<Tensor> payload = std::nullopt) {
  int64_t n = x.shape().back(), p = power_of_two_above(n);
  Pairs pad(x.shape().size(), {0, 0}), cut;
  pad.back() = {0, p - n};
  for (int64_t d : x.shape()) cut.push_back({0, d});
  Shape padded = x.shape();
  padded.back() = p;
  Tensor positions = leading_ones(Tensor::arange(p, dtypes::int64, x.device()), padded.size()).expand(padded);
  Keyed k{x.pad(pad), positions, payload ? std::optional<Tensor>(payload->pad(pad)) : std::nullopt};
  Keyed sorted = bitonic(k, n, descending);
  return {sorted.value.shrink(cut), sorted.index.shrink(cut), sorted.payload ? std::optional<Tensor>(sorted.payload->shrink(cut)) : std::nullopt};
}

std::pair<Tensor, Tensor> network_sort(const Tensor& x, bool descending) {
  Keyed sorted = network(x, descending);
  if (grad_enabled() && is_float(x.dtype())) {
    // Element i's gradient is that of the position it went to: the output gradient, carried through a
    // network that sorts the indices back (ascending, all distinct), lands in the input's order. The
    // indices are rebuilt from x's node (the same nodes, interned), held weakly like sort's own.
    std::weak_ptr<const UOp> x_node = x.uop();
    Shape shape = x.shape();
    detail::set_custom_gradient(sorted.value, {x}, [x_node, shape, descending](const Tensor& g, const std::vector<bool>&) {
      UOpPtr u = x_node.lock();
      if (!u) throw InternalError("sort's gradient outlived its graph");
      Tensor order = network(Tensor(u, shape), descending).index;
      return std::vector<std::optional<Tensor>>{network(order, false, g).payload};
    });
  }
  return {sorted.value, sorted.index};
}
}  // namespace

std::pair<Tensor, Tensor> Tensor::sort(int64_t axis, bool descending) const {
  if (ndim() == 0) return {*this, zeros({}, dtypes::int64, device())};
  int64_t a = detail::normalize_axis(axis, ndim(), "sort");
  Tensor x = transpose(a, -1);
  auto [values, indices] = x.shape().back() <= kCountSortLength ? count_sort(x, descending) : network_sort(x, descending);
  return {values.transpose(a, -1), indices.transpose(a, -1)};
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
