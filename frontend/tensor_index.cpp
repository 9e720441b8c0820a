// Tensor: indexing by integer tensors (index_select, scatter, scatter_add, one_hot) and masks
// (masked_fill, triu, tril). Indices become comparisons with an arange (a one-hot mask) and a
// masked sum, as tinygrad does: no gather or scatter primitive, and the gradients come from autograd
// of where and sum. Index values are checked on the host, since an index out of range would
// otherwise silently select nothing: these ops wait for their indices.
#include "frontend/detail.h"

namespace kiln {

using detail::normalize_axis;

namespace {
std::vector<int64_t> host_indices(const Tensor& index, const char* op) {
  if (!is_int(index.dtype())) throw Error(kiln::cat(op, ": index must be an integer tensor, got ", index.dtype().name()));
  return index.cast(dtypes::int64).to_vector<int64_t>();
}

}  // namespace

void detail::check_index_range(const Tensor& index, int64_t n, int64_t axis, const Shape& shape, const char* op) {
  if (!is_int(index.dtype())) throw Error(kiln::cat(op, ": index must be an integer tensor, got ", index.dtype().name()));
  if (index.numel() == 0) return;
  Tensor wide = index.cast(dtypes::int64);
  std::string name = op;
  detail::check_on_host(Tensor::stack({wide.min(), wide.max()}), [n, axis, shape, name](const std::vector<int64_t>& range) {
    for (int64_t e : range)
      if (e < 0 || e >= n)
        throw Error(kiln::cat(name, ": index ", e, " is out of range for axis ", axis, " of size ", n, " (shape ", shape_str(shape), ")"));
  });
}

Tensor Tensor::index_select(int64_t axis, const Tensor& index) const {
  if (index.ndim() > 1) throw Error(kiln::cat("index_select: index must be 0-D or 1-D, got shape ", shape_str(index.shape())));
  if (ndim() == 0) throw Error("index_select: a 0-dimensional tensor has no axis to select from");
  int64_t a = normalize_axis(axis, ndim(), "index_select"), m = index.numel();
  detail::check_index_range(index, shape()[static_cast<size_t>(a)], a, shape(), "index_select");
  // A gather with the index laid along `axis` and broadcast over the others (checked once, above).
  Shape along(static_cast<size_t>(ndim()), 1), full = shape();
  along[static_cast<size_t>(a)] = m;
  full[static_cast<size_t>(a)] = m;
  return gather_in_range(a, index.reshape(along).expand(full), "index_select");
}

Tensor detail::index_mask(const Tensor& index, int64_t n) {
  Shape full = index.shape(), along(static_cast<size_t>(index.ndim()) + 1, 1);
  full.push_back(n);
  along.back() = n;
  return index.unsqueeze(-1).expand(full).eq(Tensor::arange(n, index.dtype(), index.device()).reshape(along).expand(full));
}

namespace {
// scatter and scatter_add: axis moved last, src[..., i] goes to position index[..., i] of self's axis.
// Returns (the sum of what lands on each position, how many land there), both of self's shape.
std::pair<Tensor, Tensor> scattered(const Tensor& self, int64_t a, const Tensor& index, const Tensor& src, bool unique, const char* op) {
  if (index.ndim() != self.ndim() || src.ndim() != self.ndim())
    throw Error(kiln::cat(op, ": self ", shape_str(self.shape()), ", index ", shape_str(index.shape()), " and src ", shape_str(src.shape()),
                          " need the same number of dimensions"));
  for (int64_t i = 0; i < self.ndim(); ++i) {
    size_t u = static_cast<size_t>(i);
    if (index.shape()[u] > src.shape()[u] || (i != a && index.shape()[u] > self.shape()[u]))
      throw Error(kiln::cat(op, ": index ", shape_str(index.shape()), " must be no larger than src ", shape_str(src.shape()),
                            " on every axis, and than self ", shape_str(self.shape()), " on every axis but ", a));
  }
  int64_t n = self.shape()[static_cast<size_t>(a)];
  detail::check_index_range(index, n, a, self.shape(), op);
  // src cut to index's shape; index padded to self's shape outside `axis` with -1 (lands nowhere).
  Pairs cut, grow;
  for (int64_t i = 0; i < self.ndim(); ++i) {
    size_t u = static_cast<size_t>(i);
    cut.push_back({0, index.shape()[u]});
    grow.push_back({0, i == a ? 0 : self.shape()[u] - index.shape()[u]});
  }
  Tensor s = src.shrink(cut).cast(self.dtype()).transpose(a, -1);          // (..., m)
  Tensor idx = index.cast(dtypes::int64).pad(grow, -1.0).transpose(a, -1);  // (..., m)
  Tensor mask = detail::index_mask(idx, n);  // (..., m, n): [.., i, p] = index i lands on position p
  Shape full = mask.shape();
  Shape grown = s.shape();  // s padded like idx (its pad lands nowhere)
  Pairs s_grow(grown.size(), {0, 0});
  for (size_t i = 0; i + 1 < grown.size(); ++i) s_grow[i].second = idx.shape()[i] - grown[i];
  Tensor sx = s.pad(s_grow).unsqueeze(-1).expand(full);
  Tensor sum = mask.where(sx, sx.zeros_like()).sum({-2}).cast(self.dtype()).transpose(a, -1);
  Tensor count = mask.cast(dtypes::int32).sum({-2}).transpose(a, -1);
  if (unique) {
    if (count.numel() > 0) {  // read as host work, like the range: a captured step checks every replay
      std::string what = kiln::cat(op, ": index ", shape_str(index.shape()),
                                   " sends two values to one position; torch leaves which one wins unspecified: use scatter_add, or unique indices");
      detail::check_on_host(count.max(), [what](const std::vector<int64_t>& most) {
        if (most[0] > 1) throw Error(what);
      });
    }
  }
  return {sum, count};
}
}  // namespace

Tensor Tensor::scatter(int64_t axis, const Tensor& index, const Tensor& src) const {
  int64_t a = normalize_axis(axis, ndim(), "scatter");
  auto [sum, count] = scattered(*this, a, index, src, true, "scatter");
  return count.gt(count.zeros_like()).where(sum, *this);
}

Tensor Tensor::scatter_add(int64_t axis, const Tensor& index, const Tensor& src) const {
  int64_t a = normalize_axis(axis, ndim(), "scatter_add");
  return *this + scattered(*this, a, index, src, false, "scatter_add").first;
}

Tensor Tensor::masked_fill(const Tensor& mask, double value) const {
  if (!is_bool(mask.dtype())) throw Error(kiln::cat("masked_fill: mask must be bool, got ", mask.dtype().name(), "; compare to make one"));
  if (detail::broadcast_shapes(mask.shape(), shape(), "masked_fill") != shape())
    throw Error(kiln::cat("masked_fill: mask ", shape_str(mask.shape()), " must broadcast to the tensor's shape ", shape_str(shape())));
  return mask.expand(shape()).where(full_like(value), *this);
}

namespace {
// The (rows, cols) mask of the last two axes where col - row compares with `diagonal` as `keep` says.
Tensor band(const Tensor& x, int64_t diagonal, bool upper, const char* op) {
  if (x.ndim() < 2) throw Error(kiln::cat(op, ": needs at least 2 dimensions, got shape ", shape_str(x.shape())));
  int64_t r = x.shape()[x.shape().size() - 2], c = x.shape().back();
  Tensor i = Tensor::arange(r, dtypes::int64, x.device()).reshape({r, 1}) + static_cast<double>(diagonal);
  Tensor j = Tensor::arange(c, dtypes::int64, x.device()).reshape({1, c});
  Tensor keep = upper ? j.ge(i) : j.le(i);  // col - row >= diagonal (triu) or <= (tril)
  return keep.expand(x.shape()).where(x, x.zeros_like());
}
}  // namespace

Tensor Tensor::triu(int64_t diagonal) const { return band(*this, diagonal, true, "triu"); }
Tensor Tensor::tril(int64_t diagonal) const { return band(*this, diagonal, false, "tril"); }

Tensor Tensor::one_hot(int64_t num_classes) const {
  if (!is_int(dtype()) || is_bool(dtype())) throw Error(kiln::cat("one_hot: needs integer class indices, got ", dtype().name()));
  std::vector<int64_t> values = host_indices(*this, "one_hot");
  if (num_classes == -1) {
    if (values.empty()) throw Error("one_hot: cannot infer the number of classes of an empty tensor; pass num_classes");
    num_classes = *std::max_element(values.begin(), values.end()) + 1;
  }
  if (num_classes < 0) throw Error(kiln::cat("one_hot: num_classes ", num_classes, " must be positive or -1 (infer)"));
  for (int64_t v : values)
    if (v < 0 || v >= num_classes) throw Error(kiln::cat("one_hot: class ", v, " is outside 0..", num_classes - 1));
  return detail::index_mask(cast(dtypes::int64), num_classes).cast(dtypes::int64);
}

}  // namespace kiln
