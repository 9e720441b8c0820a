// Tensor movement beyond the primitive views (tensor.cpp): all of these are compositions of reshape,
// permute, expand, pad, shrink and flip, so none of them copies data until realized.
#include "frontend/detail.h"

namespace kiln {

using detail::normalize_axis;

Tensor Tensor::squeeze(std::optional<int64_t> axis) const {
  Shape out;
  if (axis) {
    int64_t a = normalize_axis(*axis, ndim(), "squeeze");
    if (ndim() == 0 || shape()[static_cast<size_t>(a)] != 1) return *this;
    out = shape();
    out.erase(out.begin() + a);
  } else {
    for (int64_t d : shape())
      if (d != 1) out.push_back(d);
  }
  return reshape(out);
}

Tensor Tensor::unsqueeze(int64_t axis) const {
  int64_t a = axis < 0 ? axis + ndim() + 1 : axis;
  if (a < 0 || a > ndim()) throw Error(kiln::cat("unsqueeze: axis ", axis, " is out of range for ", ndim(), " dimensions (use ", -ndim() - 1, "..", ndim(), ")"));
  Shape out = shape();
  out.insert(out.begin() + a, 1);
  return reshape(out);
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  if (ndim() == 0) return reshape({1});
  int64_t s = normalize_axis(start, ndim(), "flatten"), e = normalize_axis(end, ndim(), "flatten");
  if (s > e) throw Error(kiln::cat("flatten: start axis ", start, " comes after end axis ", end));
  Shape out(shape().begin(), shape().begin() + s);
  int64_t n = 1;
  for (int64_t i = s; i <= e; ++i) n *= shape()[static_cast<size_t>(i)];
  out.push_back(n);
  out.insert(out.end(), shape().begin() + e + 1, shape().end());
  return reshape(out);
}

Tensor Tensor::slice(int64_t axis, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) const {
  int64_t a = normalize_axis(axis, ndim(), "slice");
  if (ndim() == 0) throw Error("slice: a 0-dimensional tensor has no axis to slice");
  if (step == 0) throw Error("slice: step must not be 0");
  int64_t n = shape()[static_cast<size_t>(a)];
  // Python's rules: negative values count from the end, then clamp; defaults depend on the step's sign.
  auto resolve = [&](std::optional<int64_t> v, int64_t fallback, int64_t lo, int64_t hi) {
    if (!v) return fallback;
    int64_t x = *v < 0 ? *v + n : *v;
    return std::clamp(x, lo, hi);
  };
  Tensor x = *this;
  int64_t b, e, count;
  if (step > 0) {
    b = resolve(start, 0, 0, n);
    e = resolve(stop, n, 0, n);
    count = e > b ? (e - b + step - 1) / step : 0;
  } else {
    b = resolve(start, n - 1, -1, n - 1);
    e = resolve(stop, -1, -1, n - 1);
    count = b > e ? (b - e - step - 1) / -step : 0;
    // Flip, then it is a positive-step slice starting at the mirrored index.
    x = x.flip({a});
    b = n - 1 - b;
    step = -step;
  }
  Pairs bounds;
  for (int64_t i = 0; i < ndim(); ++i) bounds.push_back({0, shape()[static_cast<size_t>(i)]});
  if (count == 0) {
    bounds[static_cast<size_t>(a)] = {0, 0};
    return x.shrink(bounds);
  }
  int64_t span = (count - 1) * step + 1;
  bounds[static_cast<size_t>(a)] = {b, b + span};
  x = x.shrink(bounds);
  if (step == 1) return x;
  // Every step-th element: pad to count*step, view as (count, step), keep column 0.
  Pairs pad(static_cast<size_t>(ndim()), {0, 0});
  pad[static_cast<size_t>(a)] = {0, count * step - span};
  x = x.pad(pad);
  Shape split = x.shape();
  split[static_cast<size_t>(a)] = count;
  split.insert(split.begin() + a + 1, step);
  Pairs keep;
  for (int64_t d : split) keep.push_back({0, d});
  keep[static_cast<size_t>(a + 1)] = {0, 1};
  Shape out = shape();
  out[static_cast<size_t>(a)] = count;
  return x.reshape(split).shrink(keep).reshape(out);
}

Tensor Tensor::cat(const std::vector<Tensor>& tensors, int64_t axis) {
  if (tensors.empty()) throw Error("cat: needs at least one tensor");
  const Tensor& first = tensors[0];
  if (first.ndim() == 0) throw Error("cat: zero-dimensional tensors cannot be concatenated; use stack, or unsqueeze them first");
  int64_t a = normalize_axis(axis, first.ndim(), "cat");
  int64_t total = 0;
  DType dtype = first.dtype();
  for (const Tensor& t : tensors) {
    if (t.ndim() != first.ndim())
      throw Error(kiln::cat("cat: tensors have different numbers of dimensions: ", shape_str(first.shape()), " and ", shape_str(t.shape())));
    for (int64_t i = 0; i < t.ndim(); ++i)
      if (i != a && t.shape()[static_cast<size_t>(i)] != first.shape()[static_cast<size_t>(i)])
        throw Error(kiln::cat("cat: shapes ", shape_str(first.shape()), " and ", shape_str(t.shape()), " differ outside axis ", a));
    total += t.shape()[static_cast<size_t>(a)];
    dtype = promote_types(dtype, t.dtype());
  }
  // Each piece padded into its place along the axis; the padded pieces are disjoint, so they add.
  std::optional<Tensor> out;
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    Pairs pad(static_cast<size_t>(t.ndim()), {0, 0});
    int64_t d = t.shape()[static_cast<size_t>(a)];
    pad[static_cast<size_t>(a)] = {offset, total - offset - d};
    offset += d;
    Tensor piece = t.cast(dtype).pad(pad);
    out = out ? *out + piece : piece;
  }
  return *out;
}

Tensor Tensor::stack(const std::vector<Tensor>& tensors, int64_t axis) {
  if (tensors.empty()) throw Error("stack: needs at least one tensor");
  std::vector<Tensor> parts;
  for (const Tensor& t : tensors) {
    if (t.shape() != tensors[0].shape())
      throw Error(kiln::cat("stack: all tensors need one shape, got ", shape_str(tensors[0].shape()), " and ", shape_str(t.shape())));
    parts.push_back(t.unsqueeze(axis));
  }
  return cat(parts, axis);
}

std::vector<Tensor> Tensor::split(std::vector<int64_t> sizes, int64_t axis) const {
  int64_t a = normalize_axis(axis, ndim(), "split");
  int64_t n = shape()[static_cast<size_t>(a)], sum = 0;
  for (int64_t s : sizes) {
    if (s < 0) throw Error(kiln::cat("split: negative size ", s));
    sum += s;
  }
  if (sum != n) throw Error(kiln::cat("split: sizes add up to ", sum, " but axis ", a, " has ", n, " elements"));
  std::vector<Tensor> out;
  int64_t offset = 0;
  for (int64_t s : sizes) {
    out.push_back(slice(a, offset, offset + s));
    offset += s;
  }
  return out;
}

std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t axis) const {
  if (chunks <= 0) throw Error(kiln::cat("chunk: chunks must be positive, got ", chunks));
  int64_t a = normalize_axis(axis, ndim(), "chunk");
  int64_t n = shape()[static_cast<size_t>(a)];
  int64_t size = (n + chunks - 1) / chunks;
  std::vector<int64_t> sizes;
  for (int64_t left = n; left > 0; left -= size) sizes.push_back(std::min(size, left));
  if (sizes.empty()) sizes.push_back(0);
  return split(sizes, a);
}

Tensor Tensor::repeat(std::vector<int64_t> times) const {
  if (static_cast<int64_t>(times.size()) < ndim())
    throw Error(kiln::cat("repeat: ", times.size(), " repeat counts for a tensor with ", ndim(), " dimensions; give at least one per axis"));
  Shape base(times.size() - shape().size(), 1);
  base.insert(base.end(), shape().begin(), shape().end());
  // (d) -> (1, d) -> (r, d) -> (r*d) per axis: the whole tensor tiled r times along it.
  Shape unit, big, out;
  for (size_t i = 0; i < base.size(); ++i) {
    if (times[i] < 0) throw Error(kiln::cat("repeat: negative count ", times[i]));
    unit.insert(unit.end(), {1, base[i]});
    big.insert(big.end(), {times[i], base[i]});
    out.push_back(times[i] * base[i]);
  }
  return reshape(unit).expand(big).reshape(out);
}

Tensor Tensor::gather(int64_t axis, const Tensor& index) const {
  int64_t a = normalize_axis(axis, ndim(), "gather");
  if (!is_int(index.dtype())) throw Error(kiln::cat("gather: index must be an integer tensor, got ", index.dtype().name()));
  if (index.ndim() != ndim())
    throw Error(kiln::cat("gather: index ", shape_str(index.shape()), " and input ", shape_str(shape()), " need the same number of dimensions"));
  for (int64_t i = 0; i < ndim(); ++i)
    if (i != a && index.shape()[static_cast<size_t>(i)] > shape()[static_cast<size_t>(i)])
      throw Error(kiln::cat("gather: index ", shape_str(index.shape()), " is larger than input ", shape_str(shape()), " on axis ", i));
  // out[..., j, ...] = x[..., index[..., j, ...], ...].
  int64_t n = shape()[static_cast<size_t>(a)];
  // An index outside the axis would silently read 0 (the kernel's gate): check them (this waits for the
  // index's smallest and largest value, not for the whole index: an Embedding's is expanded over the
  // embedding width, and copying it out stored and moved n*dim int64 values per lookup, a GPT's step 3 MB).
  detail::check_index_range(index, n, a, shape(), "gather");
  return gather_in_range(a, index, "gather");
}

Tensor Tensor::gather_in_range(int64_t a, const Tensor& index, const char* op) const {
  if (index.device_uop() != device_uop())
    throw Error(kiln::cat(op, ": index is on ", index.device(), " and the input on ", device(), "; move one with to()"));
  // x cut to the index's sizes on the other axes; the kernel reads x at the index's values (GATHER),
  // n*m reads where a one-hot mask over the axis took n*m compares per output.
  Pairs bounds;
  for (int64_t i = 0; i < ndim(); ++i) bounds.push_back({0, i == a ? shape()[static_cast<size_t>(a)] : index.shape()[static_cast<size_t>(i)]});
  Tensor x = shrink(bounds), idx = index.cast(dtypes::int32);
  return derived(UOp::make(Op::GATHER, dtype(), detail::sources(x.uop(), idx.uop()), a), idx.shape());
}

Tensor Tensor::to(const std::string& device_name) const {
  UOpPtr dst = device_node(device_name);
  if (dst->arg_as<std::string>() == device()) return *this;
  return Tensor(UOp::make(Op::COPY, dtype(), {uop(), dst}), shape(), dst);
}

}  // namespace kiln
