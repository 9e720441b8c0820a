// Tensor: matmul, sliding windows, conv2d and pooling. Everything is views plus one reduce, so a
// convolution is a single kernel whose index math the symbolic simplifier keeps clean.
#include <limits>

#include "frontend/detail.h"

namespace kiln {

using detail::broadcast_shapes;

Tensor Tensor::matmul(const Tensor& other) const {
  if (ndim() == 0 || other.ndim() == 0)
    throw Error(kiln::cat("matmul: operands must have at least 1 dimension, got ", shape_str(shape()), " and ", shape_str(other.shape())));
  // torch.matmul: a 1-D left operand is a row (removed after), a 1-D right operand a column.
  Tensor a = ndim() == 1 ? unsqueeze(0) : *this;
  Tensor b = other.ndim() == 1 ? other.unsqueeze(1) : other;
  int64_t m = a.shape()[a.shape().size() - 2], k = a.shape().back();
  int64_t k2 = b.shape()[b.shape().size() - 2], n = b.shape().back();
  if (k != k2)
    throw Error(kiln::cat("matmul: inner sizes differ: ", shape_str(shape()), " @ ", shape_str(other.shape()), " (", k, " vs ", k2,
                    "); the last axis of the left must equal the second-to-last of the right"));
  Shape batch_a(a.shape().begin(), a.shape().end() - 2), batch_b(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  DType d = promote_types(a.dtype(), b.dtype());
  // (..., m, 1, k) * (..., 1, n, k) summed over k.
  Shape full = batch;
  full.insert(full.end(), {m, n, k});
  Shape sa = batch, sb = batch;
  sa.insert(sa.end(), {m, 1, k});
  sb.insert(sb.end(), {1, n, k});
  Shape ea = batch_a, eb = batch_b;
  ea.insert(ea.end(), {m, 1, k});
  eb.insert(eb.end(), {1, n, k});
  Tensor x = a.cast(d).reshape(ea).expand(full);
  Tensor y = b.cast(d).transpose(-1, -2).reshape(eb).expand(full);
  Tensor out = (x * y).sum({-1}).cast(d);  // integer sums run in int64; torch.matmul keeps the operand dtype
  if (ndim() == 1) out = out.squeeze(-2);
  if (other.ndim() == 1) out = out.squeeze(-1);
  return out;
}

// One spatial axis at a time: x's `axis` (size H) becomes OH and a new last axis K is appended, with
// out[..., o, ..., k] = x[..., o*stride + k*dilation, ...]. Repeating the axis and re-reading the repeats
// with a row length of H + dilation shifts each row by k*dilation; a strided slice then keeps every
// stride-th column. All views: the simplifier folds the resulting % and // away.
static Tensor window_axis(const Tensor& x, int64_t axis, int64_t kernel, int64_t stride, int64_t dilation) {
  int64_t h = x.shape()[static_cast<size_t>(axis)];
  int64_t span = (kernel - 1) * dilation + 1;
  if (span > h) throw Error(kiln::cat("windows: a kernel spanning ", span, " does not fit in an axis of size ", h));
  int64_t out = (h - span) / stride + 1;
  int64_t last = x.ndim() - 1;
  Tensor t = x.transpose(axis, last);  // the windowed axis last
  Shape lead(t.shape().begin(), t.shape().end() - 1);
  if (dilation == 1 && stride == kernel) {
    // Windows that tile the axis (2x2 pooling): a crop and a reshape, nothing repeated, so the
    // gradient is a plain reshape too.
    Pairs crop;
    for (int64_t d : lead) crop.push_back({0, d});
    crop.push_back({0, out * kernel});
    Shape tiles = lead;
    tiles.insert(tiles.end(), {out, kernel});
    Tensor cols = t.shrink(crop).reshape(tiles);
    return axis == last ? cols : cols.transpose(axis, last);
  }
  int64_t row = h + dilation;
  int64_t reps = (kernel * row + h - 1) / h;
  Shape rep_shape = lead, flat_shape = lead, rows_shape = lead;
  rep_shape.insert(rep_shape.end(), {reps, h});
  flat_shape.push_back(reps * h);
  rows_shape.insert(rows_shape.end(), {kernel, row});
  Pairs cut;
  for (int64_t d : lead) cut.push_back({0, d});
  cut.push_back({0, kernel * row});
  Tensor rows = t.unsqueeze(-2).expand(rep_shape).reshape(flat_shape).shrink(cut).reshape(rows_shape);  // [k][j] = x[j + k*dilation]
  Tensor cols = rows.slice(-1, 0, (out - 1) * stride + 1, stride).transpose(-1, -2);                     // (lead..., OH, K)
  // lead holds x's last axis at `axis`; swap it with OH so OH sits at `axis` and that axis returns last-but-one.
  return axis == last ? cols : cols.transpose(axis, last);
}

Tensor Tensor::windows(std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride, std::array<int64_t, 2> dilation) const {
  if (ndim() < 2) throw Error(kiln::cat("windows: needs at least 2 dimensions, got shape ", shape_str(shape())));
  for (int i = 0; i < 2; ++i)
    if (kernel[i] <= 0 || stride[i] <= 0 || dilation[i] <= 0)
      throw Error(kiln::cat("windows: kernel, stride and dilation must be positive, got kernel ", kernel[i], ", stride ", stride[i],
                      ", dilation ", dilation[i]));
  Tensor t = window_axis(*this, ndim() - 2, kernel[0], stride[0], dilation[0]);  // (..., OH, W, KH)
  return window_axis(t, ndim() - 1, kernel[1], stride[1], dilation[1]);          // (..., OH, OW, KH, KW)
}

Tensor Tensor::unfold(int64_t axis, int64_t size, int64_t step) const {
  if (ndim() == 0) {  // torch: a 0-d tensor has one element along its only axis, and no window axis
    detail::normalize_axis(axis, 0, "unfold");
    if (size > 1 || size < 0 || step <= 0)
      throw Error(kiln::cat("unfold: a 0-d tensor takes a window of size 0 or 1 and a positive step, got size ", size, ", step ", step));
    return reshape({1}).shrink({{0, size}});
  }
  int64_t a = detail::normalize_axis(axis, ndim(), "unfold");
  int64_t n = shape()[static_cast<size_t>(a)];
  if (size < 0 || size > n || step <= 0)
    throw Error(kiln::cat("unfold: a window of size ", size, " every ", step, " along axis ", a, " of ", shape_str(shape()),
                          " needs 0 <= size <= ", n, " and step > 0"));
  if (size > 0) return window_axis(*this, a, size, step, 1);
  // Empty windows, one per step over all n + 1 positions: no element is read, but the result stays on
  // this tensor's gradient path (pad with a negative amount crops).
  Pairs amounts(static_cast<size_t>(ndim()) + 1, {0, 0});
  amounts[static_cast<size_t>(a)] = {0, n / step + 1 - n};
  amounts.back() = {0, -1};
  return unsqueeze(-1).pad(amounts);
}

namespace {

// conv2d keeps its output channels innermost inside the kernel when a group has at least this many (a
// vector of them per input value), else its output pixels (see Tensor::conv2d).
constexpr int64_t kMinChannelsInnermost = 8;

// A conv's padded input, stored when its output has too few channels per group to keep them innermost:
// then the conv runs along rows of pixels, where a padded view would be masked lane by lane.
Tensor conv_input(const Tensor& padded, int64_t out_channels_per_group, bool pads) {
  return out_channels_per_group < kMinChannelsInnermost && pads ? padded.contiguous() : padded;
}

// Pads (amount > 0) or crops (amount < 0) each end of each axis.
Tensor pad_or_crop(const Tensor& x, const Pairs& amounts) {
  Pairs pad, crop;
  for (size_t i = 0; i < amounts.size(); ++i) {
    auto [lo, hi] = amounts[i];
    pad.push_back({std::max<int64_t>(lo, 0), std::max<int64_t>(hi, 0)});
  }
  Tensor padded = x.pad(pad);
  for (size_t i = 0; i < amounts.size(); ++i) {
    auto [lo, hi] = amounts[i];
    int64_t size = padded.shape()[i];
    crop.push_back({std::max<int64_t>(-lo, 0), size - std::max<int64_t>(-hi, 0)});
  }
  return padded.shrink(crop);
}

// The gradient of conv2d with respect to its (N, C, H, W) input: the output gradient, dilated by the
// stride and padded so that every input position sees the outputs its taps fed, convolved with the
// weights flipped and their channel axes swapped within each group. A gather, like the forward
// convolution, instead of the scatter that differentiating the window view gives.
// Flipped weights with their channel axes swapped within each group: (K, Cg, R, S) -> (G*Cg, K/G, R, S).
Tensor flipped_for_input_grad(const Tensor& weight, int64_t groups) {
  int64_t k = weight.shape()[0], cg = weight.shape()[1], kg = k / groups, r = weight.shape()[2], s = weight.shape()[3];
  return weight.reshape({groups, kg, cg, r, s}).permute({0, 2, 1, 3, 4}).reshape({groups * cg, kg, r, s}).flip({2, 3});
}

// The input gradient of a strided, undilated conv2d, one phase at a time. The input positions
// ih = a + i*stride of phase a see only the taps r = r0 + j*stride (r0 = (a + padding) mod stride),
// through the outputs oh = i + (a + padding - r0)/stride - j: per phase, a stride-1 convolution of g
// with that sub-kernel, flipped. The phases go back into their slots of an (H/stride, stride) view,
// summed in one elementwise kernel. Every multiply-add is one the gradient needs; convolving g dilated
// with zeros did stride^2 times the work, through loads masked lane by lane (the N8 16->32 28x28 stride-2
// input gradient of `kiln bench sweep` ran at 1% of the FMA peak).
Tensor conv2d_input_grad_phases(const Tensor& g, const Tensor& weight, const Shape& input, std::array<int64_t, 2> stride,
                                std::array<int64_t, 2> padding, int64_t groups) {
  int64_t n = g.shape()[0], c = input[1];
  std::array<int64_t, 2> taps{weight.shape()[2], weight.shape()[3]}, size{input[2], input[3]}, out{g.shape()[2], g.shape()[3]};
  std::array<int64_t, 2> cells{(size[0] + stride[0] - 1) / stride[0], (size[1] + stride[1] - 1) / stride[1]};
  struct Phase {
    std::array<int64_t, 2> at, first, count, positions, base;  // base: g's row under tap 0 of row 0
  };
  std::vector<Phase> phases;
  std::array<int64_t, 2> before{}, after{};  // g's padding that every phase's window fits in
  for (int64_t a = 0; a < stride[0]; ++a)
    for (int64_t b = 0; b < stride[1]; ++b) {
      Phase p{{a, b}, {}, {}, {}, {}};
      bool empty = false;
      for (int i = 0; i < 2; ++i) {
        p.first[i] = (p.at[i] + padding[i]) % stride[i];
        p.count[i] = p.first[i] < taps[i] ? (taps[i] - p.first[i] + stride[i] - 1) / stride[i] : 0;
        p.positions[i] = size[i] > p.at[i] ? (size[i] - p.at[i] + stride[i] - 1) / stride[i] : 0;
        empty |= p.count[i] == 0 || p.positions[i] == 0;
        p.base[i] = (p.at[i] + padding[i] - p.first[i]) / stride[i] - (p.count[i] - 1);
      }
      if (empty) continue;  // no tap reaches these positions: their gradient is 0
      for (int i = 0; i < 2; ++i) {
        before[i] = std::max(before[i], -p.base[i]);
        after[i] = std::max(after[i], p.base[i] + p.positions[i] + p.count[i] - 1 - out[i]);
      }
      phases.push_back(p);
    }
  if (phases.empty()) return Tensor::zeros(input, g.dtype(), g.device());
  // One padded g that each phase views a window of. With few channels per group the phases' convs run
  // along rows of pixels, where a padded view is masked lane by lane: they read one stored copy instead.
  Tensor padded = conv_input(g.pad({{0, 0}, {0, 0}, {before[0], after[0]}, {before[1], after[1]}}), c / groups,
                             before != std::array<int64_t, 2>{} || after != std::array<int64_t, 2>{});
  std::optional<Tensor> total;
  for (const Phase& p : phases) {
    Pairs window{{0, n}, {0, g.shape()[1]}};
    for (int i = 0; i < 2; ++i) window.push_back({before[i] + p.base[i], before[i] + p.base[i] + p.positions[i] + p.count[i] - 1});
    Tensor sub = weight.slice(2, p.first[0], std::nullopt, stride[0]).slice(3, p.first[1], std::nullopt, stride[1]);
    Tensor part = padded.shrink(window).conv2d(flipped_for_input_grad(sub, groups), std::nullopt, {1, 1}, {0, 0}, {1, 1}, groups);
    part = part.pad({{0, 0}, {0, 0}, {0, cells[0] - p.positions[0]}, {0, cells[1] - p.positions[1]}})
               .reshape({n, c, cells[0], 1, cells[1], 1})
               .pad({{0, 0}, {0, 0}, {0, 0}, {p.at[0], stride[0] - 1 - p.at[0]}, {0, 0}, {p.at[1], stride[1] - 1 - p.at[1]}});
    total = total ? *total + part : part;
  }
  return total->reshape({n, c, cells[0] * stride[0], cells[1] * stride[1]}).shrink({{0, n}, {0, c}, {0, size[0]}, {0, size[1]}});
}

Tensor conv2d_input_grad(const Tensor& g, const Tensor& weight, const Shape& input, std::array<int64_t, 2> stride,
                         std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation, int64_t groups) {
  if ((stride[0] > 1 || stride[1] > 1) && dilation[0] == 1 && dilation[1] == 1)
    return conv2d_input_grad_phases(g, weight, input, stride, padding, groups);
  int64_t n = g.shape()[0], k = g.shape()[1], oh = g.shape()[2], ow = g.shape()[3];
  std::array<int64_t, 2> taps{weight.shape()[2], weight.shape()[3]}, size{input[2], input[3]};
  Tensor d = g;
  if (stride[0] > 1 || stride[1] > 1)  // dilated and strided: zeros between the outputs: (OH-1)*stride+1 positions
    d = g.reshape({n, k, oh, 1, ow, 1})
            .pad({{0, 0}, {0, 0}, {0, 0}, {0, stride[0] - 1}, {0, 0}, {0, stride[1] - 1}})
            .reshape({n, k, oh * stride[0], ow * stride[1]})
            .shrink({{0, n}, {0, k}, {0, (oh - 1) * stride[0] + 1}, {0, (ow - 1) * stride[1] + 1}});
  Pairs amounts{{0, 0}, {0, 0}};
  for (int i = 0; i < 2; ++i) {
    int64_t span = dilation[i] * (taps[i] - 1);
    int64_t covered = (i == 0 ? oh - 1 : ow - 1) * stride[i] + span + 1;  // padded input positions the windows reach
    amounts.push_back({span - padding[i], span - padding[i] + size[i] + 2 * padding[i] - covered});
  }
  bool pads = std::any_of(amounts.begin(), amounts.end(), [](const std::pair<int64_t, int64_t>& a) { return a.first > 0 || a.second > 0; });
  Tensor padded = conv_input(pad_or_crop(d, amounts), input[1] / groups, pads);
  return padded.conv2d(flipped_for_input_grad(weight, groups), std::nullopt, {1, 1}, {0, 0}, dilation, groups);
}

}  // namespace

Tensor Tensor::conv2d(const Tensor& weight, std::optional<Tensor> bias, std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                      std::array<int64_t, 2> dilation, int64_t groups) const {
  if (ndim() != 4 || weight.ndim() != 4)
    throw Error(kiln::cat("conv2d: input must be (N, C, H, W) and weight (K, C/groups, R, S), got ", shape_str(shape()), " and ", shape_str(weight.shape())));
  int64_t n = shape()[0], c = shape()[1], k = weight.shape()[0], cg = weight.shape()[1];
  if (groups <= 0 || c % groups != 0 || k % groups != 0 || cg * groups != c)
    throw Error(kiln::cat("conv2d: ", c, " input channels and ", k, " output channels with groups=", groups, " need weight of shape (", k, ", ",
                    groups > 0 ? c / groups : 0, ", R, S), got ", shape_str(weight.shape())));
  for (int i = 0; i < 2; ++i)
    if (padding[i] < 0) throw Error(kiln::cat("conv2d: padding must be >= 0, got ", padding[i]));
  int64_t r = weight.shape()[2], s = weight.shape()[3];
  int64_t kg = k / groups;
  bool channels_inner = kg >= kMinChannelsInnermost;
  Tensor x = conv_input(pad({{0, 0}, {0, 0}, {padding[0], padding[0]}, {padding[1], padding[1]}}), kg, padding[0] > 0 || padding[1] > 0);
  Tensor win = x.windows({r, s}, stride, dilation);  // (N, C, OH, OW, R, S)
  int64_t oh = win.shape()[2], ow = win.shape()[3];
  DType d = promote_types(dtype(), weight.dtype());
  Tensor out;
  if (channels_inner) {
    // (N, OH, OW, G, Cg, R, S, 1) * (1, 1, 1, G, Cg, R, S, K/G), summed over Cg, R, S: the output
    // channels innermost (NHWC inside the kernel). Each input value then feeds a whole vector of
    // output channels, and each weight a tile of output pixels; so do the values of the gradient
    // kernels, whose axes follow this order. The result is viewed back as (N, K, OH, OW).
    Shape full{n, oh, ow, groups, cg, r, s, kg};
    Tensor xv = win.reshape({n, groups, cg, oh, ow, r, s}).permute({0, 3, 4, 1, 2, 5, 6}).reshape({n, oh, ow, groups, cg, r, s, 1}).expand(full);
    Tensor wt = weight.cast(d).reshape({groups, kg, cg, r, s}).permute({0, 2, 3, 4, 1}).contiguous();  // (G, Cg, R, S, K/G)
    Tensor wv = wt.reshape({1, 1, 1, groups, cg, r, s, kg}).expand(full);
    out = (xv.cast(d) * wv).sum({4, 5, 6}).reshape({n, oh, ow, k}).permute({0, 3, 1, 2});
  } else {
    // Too few output channels per group to fill a vector (an RGB input's gradient, a last layer that
    // predicts 1-3 maps): (N, G, 1, OH, OW, Cg, R, S) * (1, G, K/G, 1, 1, Cg, R, S), the output pixels
    // innermost (NCHW inside the kernel), so the vector runs along a row of pixels, its stores are
    // contiguous and each weight is one broadcast. With the channels innermost the tile had 1-7
    // scattered lanes: a 3-channel input gradient ran at 2-5% of the FMA peak.
    Shape full{n, groups, kg, oh, ow, cg, r, s};
    Tensor xv = win.reshape({n, groups, cg, oh, ow, r, s}).permute({0, 1, 3, 4, 2, 5, 6}).reshape({n, groups, 1, oh, ow, cg, r, s}).expand(full);
    // A weight read through a view (the flipped, strided sub-kernel of an input gradient's phase) is
    // copied first: its index math (a division and a remainder per tap) would run in the inner loop.
    Tensor wc = weight.cast(d);
    if (!detail::realized_buffer(wc.uop())) wc = wc.contiguous();
    Tensor wv = wc.reshape({1, groups, kg, 1, 1, cg, r, s}).expand(full);
    out = (xv.cast(d) * wv).sum({5, 6, 7}).reshape({n, k, oh, ow});
  }
  if (grad_enabled() && is_float(d)) {
    // The input's gradient as a convolution (conv2d_input_grad); the weights' from out's own graph.
    std::weak_ptr<const UOp> node = out.uop(), w_node = weight.uop();
    Shape in_shape = shape(), w_shape = weight.shape();
    DType in_dtype = dtype();
    detail::set_custom_gradient(out, {*this, weight}, [=](const Tensor& g, const std::vector<bool>& wanted) {
      std::vector<std::optional<Tensor>> parts(2);
      UOpPtr w = w_node.lock(), o = node.lock();
      if (!w || !o) throw InternalError("conv2d's gradient outlived its graph");
      Tensor wt(w, w_shape);
      if (wanted[0]) parts[0] = conv2d_input_grad(g, wt.cast(g.dtype()), in_shape, stride, padding, dilation, groups).cast(in_dtype);
      if (wanted[1]) parts[1] = detail::plain_gradient(o, wt, g);
      return parts;
    });
  }
  if (bias) {
    if (bias->shape() != Shape{k}) throw Error(kiln::cat("conv2d: bias must have shape (", k, ",), got ", shape_str(bias->shape())));
    out = out + bias->reshape({1, k, 1, 1});
  }
  return out;
}

namespace {
// PyTorch's pooled size along one axis. With ceil_mode the last window may overhang the far edge, but
// must start inside the input or its near padding.
int64_t pooled_size(int64_t h, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode, const char* op) {
  if (k <= 0 || s <= 0 || d <= 0) throw Error(kiln::cat(op, ": kernel, stride and dilation must be positive, got ", k, ", ", s, ", ", d));
  if (p < 0 || 2 * p > d * (k - 1) + 1)
    throw Error(kiln::cat(op, ": padding ", p, " must be in 0..", (d * (k - 1) + 1) / 2, " (at most half the kernel's span ", d * (k - 1) + 1, ")"));
  int64_t room = h + 2 * p - (d * (k - 1) + 1);
  if (room < 0) throw Error(kiln::cat(op, ": a kernel spanning ", d * (k - 1) + 1, " does not fit in an axis of ", h, " with padding ", p));
  int64_t out = (ceil_mode ? (room + s - 1) / s : room / s) + 1;
  if (ceil_mode && (out - 1) * s >= h + p) --out;
  return out;
}

// The last two axes padded for pooling: `padding` before, and after enough for every window (the
// overhang of ceil_mode included), with `value`; also the output sizes.
struct Pooled {
  Pairs pad;
  std::array<int64_t, 2> out;
};
Pooled pool_padding(const Shape& shape, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                    std::array<int64_t, 2> dilation, bool ceil_mode, const char* op) {
  if (shape.size() < 2) throw Error(kiln::cat(op, ": needs (..., H, W), got ", shape_str(shape)));
  Pooled r{Pairs(shape.size(), {0, 0}), {}};
  for (size_t i = 0; i < 2; ++i) {
    int64_t h = shape[shape.size() - 2 + i];
    r.out[i] = pooled_size(h, kernel[i], stride[i], padding[i], dilation[i], ceil_mode, op);
    int64_t needed = (r.out[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1;
    r.pad[shape.size() - 2 + i] = {padding[i], std::max(padding[i], needed - h - padding[i])};
  }
  return r;
}
}  // namespace

Tensor Tensor::max_pool2d(std::array<int64_t, 2> kernel, std::optional<std::array<int64_t, 2>> stride, std::array<int64_t, 2> padding,
                          std::array<int64_t, 2> dilation, bool ceil_mode) const {
  std::array<int64_t, 2> st = stride.value_or(kernel);
  Pooled p = pool_padding(shape(), kernel, st, padding, dilation, ceil_mode, "max_pool2d");
  double lowest_value = is_float(dtype()) ? -std::numeric_limits<double>::infinity() : as_double(lowest(dtype()));
  return pad(p.pad, lowest_value).windows(kernel, st, dilation).max({-2, -1});
}

Tensor Tensor::avg_pool2d(std::array<int64_t, 2> kernel, std::optional<std::array<int64_t, 2>> stride, std::array<int64_t, 2> padding,
                          bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override) const {
  if (divisor_override == 0)
    throw Error("avg_pool2d: divisor_override is 0; pass a non-zero divisor, or std::nullopt to divide by each window's count");
  std::array<int64_t, 2> st = stride.value_or(kernel);
  Pooled p = pool_padding(shape(), kernel, st, padding, {1, 1}, ceil_mode, "avg_pool2d");
  Tensor sums = cast(to_floating(dtype())).pad(p.pad).windows(kernel, st, {1, 1}).sum({-2, -1});
  DType out_dtype = is_float(dtype()) ? dtype() : to_floating(dtype());
  if (divisor_override) return (sums / static_cast<double>(*divisor_override)).cast(out_dtype);
  // Each window's divisor, as PyTorch counts it: the input positions it covers, plus the padding ones
  // with count_include_pad; never ceil_mode's overhang. Counted by pooling a map of ones.
  int64_t h = shape()[shape().size() - 2], w = shape().back();
  Tensor map = Tensor::ones({h, w}, sums.dtype(), device());
  if (count_include_pad) map = map.pad({{padding[0], padding[0]}, {padding[1], padding[1]}}, 1.0);
  Pairs rest = {p.pad[p.pad.size() - 2], p.pad.back()};
  if (count_include_pad) rest = {{0, rest[0].second - padding[0]}, {0, rest[1].second - padding[1]}};
  Tensor count = map.pad(rest).windows(kernel, st, {1, 1}).sum({-2, -1});
  return (sums / count).cast(out_dtype);
}

namespace {
// A 1-D op as its 2-D form on a 1-high image: (N, C, L) or (C, L) in, the same rank out.
Tensor as_1d(const Tensor& x, const char* op, const std::function<Tensor(const Tensor&)>& f) {
  if (x.ndim() != 2 && x.ndim() != 3) throw Error(kiln::cat(op, ": input must be (N, C, L) or (C, L), got ", shape_str(x.shape())));
  Tensor batched = x.ndim() == 2 ? x.unsqueeze(0) : x;
  Tensor y = f(batched.unsqueeze(2)).squeeze(2);
  return x.ndim() == 2 ? y.squeeze(0) : y;
}

// Adaptive pooling of the last axis into `out` windows [floor(i n / out), ceil((i + 1) n / out)): a
// reshape when out divides n, else a masked (out x n) table, each output reducing the inputs its
// window covers.
Tensor adaptive_last_axis(const Tensor& x, int64_t out, bool max, const char* op) {
  int64_t n = x.shape().empty() ? 0 : x.shape().back();
  if (out <= 0 || n <= 0) throw Error(kiln::cat(op, ": output size ", out, " and input size ", n, " (of ", shape_str(x.shape()), ") must be positive"));
  Shape lead(x.shape().begin(), x.shape().end() - 1);
  if (n % out == 0) {
    Shape split = lead;
    split.push_back(out);
    split.push_back(n / out);
    Tensor windows = x.reshape(split);
    return max ? windows.max({-1}) : windows.mean({-1});
  }
  std::vector<uint8_t> covers(static_cast<size_t>(out * n), 0);
  std::vector<double> count(static_cast<size_t>(out), 0);
  for (int64_t i = 0; i < out; ++i)
    for (int64_t j = i * n / out; j < ((i + 1) * n + out - 1) / out; ++j) {
      covers[static_cast<size_t>(i * n + j)] = 1;
      count[static_cast<size_t>(i)] += 1;
    }
  Shape wide = lead;
  wide.push_back(out);
  wide.push_back(n);
  Tensor mask = Tensor::from_vector(covers, {out, n}, x.device()).cast(dtypes::bool_).expand(wide);
  Tensor terms = x.unsqueeze(-2).expand(wide);
  if (max) {
    double lowest_value = is_float(x.dtype()) ? -std::numeric_limits<double>::infinity() : as_double(lowest(x.dtype()));
    return mask.where(terms, terms.full_like(lowest_value)).max({-1});
  }
  Tensor sums = mask.where(terms, terms.zeros_like()).sum({-1});
  return sums / Tensor::from_vector(count, {out}, x.device()).cast(sums.dtype());
}

Tensor adaptive_2d(const Tensor& x, std::array<int64_t, 2> size, bool max, const char* op) {
  if (x.ndim() < 2) throw Error(kiln::cat(op, ": needs (..., H, W), got ", shape_str(x.shape())));
  int64_t h = x.shape()[x.shape().size() - 2], w = x.shape().back();
  if (size[0] > 0 && size[1] > 0 && h > 0 && w > 0 && h % size[0] == 0 && w % size[1] == 0) {  // plain pooling, one reduction
    Shape split(x.shape().begin(), x.shape().end() - 2);
    for (int64_t v : {size[0], h / size[0], size[1], w / size[1]}) split.push_back(v);
    Tensor windows = x.reshape(split);
    return max ? windows.max({-3, -1}) : windows.mean({-3, -1});
  }
  Tensor across = adaptive_last_axis(x, size[1], max, op);
  return adaptive_last_axis(across.transpose(-2, -1), size[0], max, op).transpose(-2, -1);
}
}  // namespace

Tensor Tensor::conv1d(const Tensor& weight, std::optional<Tensor> bias, int64_t stride, int64_t padding, int64_t dilation, int64_t groups) const {
  if (weight.ndim() != 3) throw Error(kiln::cat("conv1d: weight must be (K, C/groups, R), got ", shape_str(weight.shape())));
  return as_1d(*this, "conv1d", [&](const Tensor& x) {
    return x.conv2d(weight.unsqueeze(2), bias, {1, stride}, {0, padding}, {1, dilation}, groups);
  });
}

Tensor Tensor::max_pool1d(int64_t kernel, std::optional<int64_t> stride, int64_t padding, int64_t dilation, bool ceil_mode) const {
  return as_1d(*this, "max_pool1d", [&](const Tensor& x) {
    return x.max_pool2d({1, kernel}, std::array<int64_t, 2>{1, stride.value_or(kernel)}, {0, padding}, {1, dilation}, ceil_mode);
  });
}

Tensor Tensor::avg_pool1d(int64_t kernel, std::optional<int64_t> stride, int64_t padding, bool ceil_mode, bool count_include_pad) const {
  return as_1d(*this, "avg_pool1d", [&](const Tensor& x) {
    return x.avg_pool2d({1, kernel}, std::array<int64_t, 2>{1, stride.value_or(kernel)}, {0, padding}, ceil_mode, count_include_pad);
  });
}

Tensor Tensor::adaptive_avg_pool2d(std::array<int64_t, 2> output_size) const { return adaptive_2d(*this, output_size, false, "adaptive_avg_pool2d"); }
Tensor Tensor::adaptive_max_pool2d(std::array<int64_t, 2> output_size) const { return adaptive_2d(*this, output_size, true, "adaptive_max_pool2d"); }
Tensor Tensor::adaptive_avg_pool1d(int64_t output_size) const { return adaptive_last_axis(*this, output_size, false, "adaptive_avg_pool1d"); }
Tensor Tensor::adaptive_max_pool1d(int64_t output_size) const { return adaptive_last_axis(*this, output_size, true, "adaptive_max_pool1d"); }

Tensor Tensor::conv_transpose2d(const Tensor& weight, std::optional<Tensor> bias, std::array<int64_t, 2> stride,
                                std::array<int64_t, 2> padding, std::array<int64_t, 2> output_padding, int64_t groups,
                                std::array<int64_t, 2> dilation) const {
  if (ndim() != 4 || weight.ndim() != 4)
    throw Error(kiln::cat("conv_transpose2d: input must be (N, C, H, W) and weight (C, K/groups, R, S), got ", shape_str(shape()), " and ",
                          shape_str(weight.shape())));
  int64_t n = shape()[0], c = shape()[1], kg = weight.shape()[1];
  if (groups <= 0 || weight.shape()[0] != c || c % groups != 0)
    throw Error(kiln::cat("conv_transpose2d: ", c, " input channels with groups=", groups, " need weight (", c, ", K/groups, R, S), got ",
                          shape_str(weight.shape())));
  Shape out{n, kg * groups, 0, 0};
  for (int i = 0; i < 2; ++i) {
    if (stride[i] <= 0 || dilation[i] <= 0 || padding[i] < 0)
      throw Error(kiln::cat("conv_transpose2d: stride and dilation must be positive and padding >= 0, got ", stride[i], ", ", dilation[i], ", ",
                            padding[i]));
    if (output_padding[i] < 0 || output_padding[i] >= std::max(stride[i], dilation[i]))
      throw Error(kiln::cat("conv_transpose2d: output_padding ", output_padding[i], " must be smaller than stride or dilation (",
                            std::max(stride[i], dilation[i]), ")"));
    out[2 + i] = (shape()[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (weight.shape()[2 + i] - 1) + output_padding[i] + 1;
    if (out[2 + i] <= 0) throw Error(kiln::cat("conv_transpose2d: the output would have size ", out[2 + i], " on spatial axis ", i));
  }
  // The transposed convolution is conv2d's input gradient, the weight read as conv2d's (K=C, C/groups, R, S).
  DType d = promote_types(dtype(), weight.dtype());
  Tensor y = conv2d_input_grad(cast(d), weight.cast(d), out, stride, padding, dilation, groups);
  if (bias) {
    if (bias->shape() != Shape{out[1]}) throw Error(kiln::cat("conv_transpose2d: bias must have shape (", out[1], ",), got ", shape_str(bias->shape())));
    y = y + bias->reshape({1, out[1], 1, 1});
  }
  return y;
}

}  // namespace kiln
