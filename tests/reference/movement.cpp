// Movement ops: each output element is copied from the input element its index maps to.
#include <algorithm>
#include <tuple>

#include "reference/detail.h"

namespace kiln::ref {

using namespace detail;

namespace {

// out[i] = a[source(i)] for every output index; `source` returns nullopt for "outside a" (padding).
using SourceFn = std::function<std::optional<Shape>(const Shape&)>;

Array copy_from(const Array& a, const Shape& out_shape, const SourceFn& source, double fill = 0) {
  Array out = zeros(out_shape, a.dtype);
  for (int64_t i = 0; i < out.numel(); ++i) {
    std::optional<Shape> from = source(index_of(i, out_shape));
    out.data[i] = from ? a.data[flat_of(*from, a.shape)] : round_to(a.dtype, fill);
  }
  return out;
}

void require_one_per_axis(const char* op, size_t count, const Array& a) {
  if (static_cast<int64_t>(count) != a.rank())
    fail(message(op, ": got ", count, " entries for an array of shape ", shape_str(a.shape), "; give one per axis"));
}

// Python's slice.indices(n) followed by len(range(...)): the first index read and how many.
std::pair<int64_t, int64_t> slice_span(const Slice& s, int64_t n) {
  if (s.step == 0) fail("slice: step cannot be zero");
  auto clamp_bound = [&](std::optional<int64_t> v, int64_t if_missing) {
    if (!v) return if_missing;
    int64_t x = *v < 0 ? *v + n : *v;
    return s.step > 0 ? std::clamp<int64_t>(x, 0, n) : std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t start = clamp_bound(s.start, s.step > 0 ? 0 : n - 1);
  int64_t stop = clamp_bound(s.stop, s.step > 0 ? n : -1);
  int64_t distance = s.step > 0 ? stop - start : start - stop, step = s.step > 0 ? s.step : -s.step;
  return {start, distance <= 0 ? 0 : (distance + step - 1) / step};
}

}  // namespace

Array reshape(const Array& a, Shape shape) {
  int64_t inferred = -1, known = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1 && inferred < 0) {
      inferred = static_cast<int64_t>(d);
    } else if (shape[d] < 0) {
      fail(message("reshape: bad target shape ", shape_str(shape), " (at most one -1, no other negatives)"));
    } else {
      known *= shape[d];
    }
  }
  if (inferred >= 0) {
    if (known == 0 || a.numel() % known != 0)
      fail(message("reshape: cannot infer the -1 in ", shape_str(shape), " for ", a.numel(), " elements of shape ",
                   shape_str(a.shape)));
    shape[inferred] = a.numel() / known;
  }
  if (numel_of(shape) != a.numel())
    fail(message("reshape: cannot view shape ", shape_str(a.shape), " (", a.numel(), " elements) as ",
                 shape_str(shape)));
  return Array{shape, a.data, a.dtype};
}

Array permute(const Array& a, Axes order) {
  require_one_per_axis("permute", order.size(), a);
  axis_mask("permute", order, a.rank());  // throws on a bad or repeated axis
  Shape out_shape;
  for (int64_t& d : order) {
    d = normalize_axis("permute", d, a.rank());
    out_shape.push_back(a.shape[d]);
  }
  return copy_from(a, out_shape, [&](const Shape& out) {
    Shape in(a.rank());
    for (size_t i = 0; i < order.size(); ++i) in[order[i]] = out[i];
    return std::optional<Shape>(in);
  });
}

Array transpose(const Array& a, int64_t axis0, int64_t axis1) {
  Axes order(a.rank());
  for (int64_t d = 0; d < a.rank(); ++d) order[d] = d;
  std::swap(order[normalize_axis("transpose", axis0, a.rank())], order[normalize_axis("transpose", axis1, a.rank())]);
  return permute(a, order);
}

Array expand(const Array& a, Shape shape) {
  if (shape.size() < a.shape.size())
    fail(message("expand: cannot expand shape ", shape_str(a.shape), " to fewer axes, ", shape_str(shape)));
  size_t lead = shape.size() - a.shape.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t from = d < lead ? 1 : a.shape[d - lead];
    if (shape[d] == -1 && d >= lead) shape[d] = from;
    if (shape[d] < 0 || (from != 1 && from != shape[d]))
      fail(message("expand: cannot expand shape ", shape_str(a.shape), " to ", shape_str(shape),
                   "; only size-1 axes stretch"));
  }
  return copy_from(a, shape, [&](const Shape& out) {
    return std::optional<Shape>(index_of(broadcast_flat(a.shape, out), a.shape));
  });
}

Array pad(const Array& a, std::vector<std::pair<int64_t, int64_t>> pads, double value) {
  require_one_per_axis("pad", pads.size(), a);
  Shape out_shape = a.shape;
  for (int64_t d = 0; d < a.rank(); ++d) {
    out_shape[d] += pads[d].first + pads[d].second;
    if (out_shape[d] < 0) fail(message("pad: pads crop axis ", d, " of shape ", shape_str(a.shape), " below size 0"));
  }
  return copy_from(a, out_shape, [&](const Shape& out) -> std::optional<Shape> {
    Shape in = out;
    for (int64_t d = 0; d < a.rank(); ++d) {
      in[d] -= pads[d].first;
      if (in[d] < 0 || in[d] >= a.shape[d]) return std::nullopt;
    }
    return in;
  }, value);
}

Array shrink(const Array& a, std::vector<std::pair<int64_t, int64_t>> bounds) {
  require_one_per_axis("shrink", bounds.size(), a);
  Shape out_shape(a.rank());
  for (int64_t d = 0; d < a.rank(); ++d) {
    auto [begin, end] = bounds[d];
    if (begin < 0 || begin > end || end > a.shape[d])
      fail(message("shrink: bounds [", begin, ", ", end, ") on axis ", d, " of shape ", shape_str(a.shape),
                   " need 0 <= begin <= end <= size"));
    out_shape[d] = end - begin;
  }
  return copy_from(a, out_shape, [&](const Shape& out) {
    Shape in = out;
    for (int64_t d = 0; d < a.rank(); ++d) in[d] += bounds[d].first;
    return std::optional<Shape>(in);
  });
}

Array flip(const Array& a, Axes axes) {
  if (axes.empty()) return a;  // flip of no axes, not of all
  std::vector<bool> flipped = axis_mask("flip", axes, a.rank());
  return copy_from(a, a.shape, [&](const Shape& out) {
    Shape in = out;
    for (int64_t d = 0; d < a.rank(); ++d)
      if (flipped[d]) in[d] = a.shape[d] - 1 - out[d];
    return std::optional<Shape>(in);
  });
}

Array squeeze(const Array& a, Axes axes) {
  std::vector<bool> listed = axis_mask("squeeze", axes, a.rank());
  Shape shape;
  for (int64_t d = 0; d < a.rank(); ++d)
    if (!(listed[d] && a.shape[d] == 1)) shape.push_back(a.shape[d]);  // listed axes of other sizes stay, as torch
  return reshape(a, shape);
}

Array unsqueeze(const Array& a, int64_t axis) {
  int64_t d = normalize_axis("unsqueeze", axis, a.rank() + 1);
  Shape shape = a.shape;
  shape.insert(shape.begin() + d, 1);
  return reshape(a, shape);
}

Array flatten(const Array& a, int64_t start, int64_t end) {
  if (a.rank() == 0) return reshape(a, {1});
  int64_t s = normalize_axis("flatten", start, a.rank()), e = normalize_axis("flatten", end, a.rank());
  if (s > e) fail(message("flatten: start axis ", start, " comes after end axis ", end));
  Shape shape(a.shape.begin(), a.shape.begin() + s);
  shape.push_back(numel_of(Shape(a.shape.begin() + s, a.shape.begin() + e + 1)));
  shape.insert(shape.end(), a.shape.begin() + e + 1, a.shape.end());
  return reshape(a, shape);
}

Array slice(const Array& a, std::vector<Slice> slices) {
  if (static_cast<int64_t>(slices.size()) > a.rank())
    fail(message("slice: ", slices.size(), " slices for an array of shape ", shape_str(a.shape)));
  slices.resize(a.rank());  // Slice{} is the whole axis
  Shape out_shape(a.rank()), first(a.rank());
  for (int64_t d = 0; d < a.rank(); ++d) std::tie(first[d], out_shape[d]) = slice_span(slices[d], a.shape[d]);
  return copy_from(a, out_shape, [&](const Shape& out) {
    Shape in(a.rank());
    for (int64_t d = 0; d < a.rank(); ++d) in[d] = first[d] + out[d] * slices[d].step;
    return std::optional<Shape>(in);
  });
}

Array cat(const std::vector<Array>& arrays, int64_t axis) {
  if (arrays.empty()) fail("cat: needs at least one array");
  const Array& head = arrays[0];
  int64_t d = normalize_axis("cat", axis, head.rank());
  Shape out_shape = head.shape;
  out_shape[d] = 0;
  DType dtype = head.dtype;
  for (const Array& a : arrays) {
    Shape other = a.shape;
    if (a.rank() == head.rank()) other[d] = head.shape[d];
    if (other != head.shape)
      fail(message("cat: shapes ", shape_str(head.shape), " and ", shape_str(a.shape), " differ outside axis ", axis));
    out_shape[d] += a.shape[d];
    dtype = promote_types(dtype, a.dtype);
  }
  Array out = zeros(out_shape, dtype);
  int64_t offset = 0;  // where the current piece starts along the axis
  for (const Array& a : arrays) {
    for (int64_t i = 0; i < a.numel(); ++i) {
      Shape index = index_of(i, a.shape);
      index[d] += offset;
      out.data[flat_of(index, out_shape)] = round_to(dtype, a.data[i]);
    }
    offset += a.shape[d];
  }
  return out;
}

Array stack(const std::vector<Array>& arrays, int64_t axis) {
  if (arrays.empty()) fail("stack: needs at least one array");
  std::vector<Array> pieces;
  for (const Array& a : arrays) {
    if (a.shape != arrays[0].shape)
      fail(message("stack: shapes ", shape_str(arrays[0].shape), " and ", shape_str(a.shape),
                   " differ; stack needs equal shapes"));
    pieces.push_back(unsqueeze(a, axis));
  }
  return cat(pieces, normalize_axis("stack", axis, arrays[0].rank() + 1));
}

std::vector<Array> split(const Array& a, int64_t size, int64_t axis) {
  if (size <= 0) fail(message("split: piece size ", size, " must be positive"));
  int64_t n = a.shape[normalize_axis("split", axis, a.rank())];
  // ceil(n / size) pieces, the last one short; an empty axis still gives one (empty) piece.
  std::vector<int64_t> sizes(std::max<int64_t>(1, (n + size - 1) / size), size);
  sizes.back() = n - size * static_cast<int64_t>(sizes.size() - 1);
  return split_sizes(a, sizes, axis);
}

std::vector<Array> split_sizes(const Array& a, std::vector<int64_t> sizes, int64_t axis) {
  int64_t d = normalize_axis("split", axis, a.rank()), total = 0;
  for (int64_t s : sizes) total += s < 0 ? a.shape[d] + 1 : s;  // a negative size can never add up
  if (total != a.shape[d])
    fail(message("split: sizes ", shape_str(sizes), " do not add up to ", a.shape[d], " (axis ", axis, " of ",
                 shape_str(a.shape), ")"));
  std::vector<Array> pieces;
  std::vector<std::pair<int64_t, int64_t>> bounds(a.rank());
  for (int64_t e = 0; e < a.rank(); ++e) bounds[e] = {0, a.shape[e]};
  int64_t begin = 0;
  for (int64_t s : sizes) {
    bounds[d] = {begin, begin + s};
    pieces.push_back(shrink(a, bounds));
    begin += s;
  }
  return pieces;
}

std::vector<Array> chunk(const Array& a, int64_t chunks, int64_t axis) {
  if (chunks <= 0) fail(message("chunk: number of chunks ", chunks, " must be positive"));
  int64_t n = a.shape[normalize_axis("chunk", axis, a.rank())];
  return split(a, std::max<int64_t>(1, (n + chunks - 1) / chunks), axis);
}

Array repeat(const Array& a, Shape times) {
  if (static_cast<int64_t>(times.size()) < a.rank())
    fail(message("repeat: ", times.size(), " repeat counts for shape ", shape_str(a.shape),
                 "; give at least one per axis"));
  Shape in_shape(times.size() - a.shape.size(), 1);  // a, with leading axes of size 1 added
  in_shape.insert(in_shape.end(), a.shape.begin(), a.shape.end());
  Shape out_shape(times.size());
  for (size_t d = 0; d < times.size(); ++d) {
    if (times[d] < 0) fail(message("repeat: negative repeat count in ", shape_str(times)));
    out_shape[d] = in_shape[d] * times[d];
  }
  Array padded = reshape(a, in_shape);
  return copy_from(padded, out_shape, [&](const Shape& out) {
    Shape in(out.size());
    for (size_t d = 0; d < out.size(); ++d) in[d] = out[d] % in_shape[d];
    return std::optional<Shape>(in);
  });
}

Array gather(const Array& a, int64_t axis, const Array& index) {
  int64_t d = normalize_axis("gather", axis, a.rank());
  if (!is_int(index.dtype)) fail(message("gather: index must have an integer dtype, got ", index.dtype.name()));
  if (index.rank() != a.rank())
    fail(message("gather: index shape ", shape_str(index.shape), " must have the rank of input shape ",
                 shape_str(a.shape)));
  for (int64_t e = 0; e < a.rank(); ++e)
    if (e != d && index.shape[e] > a.shape[e])
      fail(message("gather: index shape ", shape_str(index.shape), " exceeds input shape ", shape_str(a.shape),
                   " at axis ", e));
  return copy_from(a, index.shape, [&](const Shape& out) {
    Shape in = out;
    double i = index.data[flat_of(out, index.shape)];
    if (i < 0 || i >= static_cast<double>(a.shape[d]))
      fail(message("gather: index ", i, " is out of range for axis ", axis, " of size ", a.shape[d]));
    in[d] = static_cast<int64_t>(i);
    return std::optional<Shape>(in);
  });
}

}  // namespace kiln::ref
