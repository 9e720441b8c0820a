// nn::pad (torch.nn.functional.pad) and the padding modules of frontend/nn.h. The constant mode is
// Tensor::pad; the others copy slices of the input (flipped for reflect, a broadcast edge for
// replicate) and concatenate them, so autograd differentiates them as it does any view and cat.
#include <algorithm>

#include "frontend/nn.h"

namespace kiln::nn {

namespace {

enum class PadMode { Constant, Reflect, Replicate, Circular };

PadMode pad_mode(const char* op, const std::string& mode) {
  if (mode == "constant") return PadMode::Constant;
  if (mode == "reflect") return PadMode::Reflect;
  if (mode == "replicate") return PadMode::Replicate;
  if (mode == "circular") return PadMode::Circular;
  throw Error(kiln::cat(op, ": padding mode \"", mode, "\" is not \"constant\", \"reflect\", \"replicate\" or \"circular\""));
}

// `count` copies of the slice at `index` along `axis`: replicate's edge.
Tensor edge(const Tensor& x, int64_t axis, int64_t index, int64_t count) {
  Shape s = x.shape();
  s[static_cast<size_t>(axis)] = count;
  return x.slice(axis, index, index + 1).expand(s);
}

// One axis padded by `before` and `after` (negative: cropped) in a mode other than constant. Reflect
// and replicate read the whole axis and crop afterwards, circular crops first and wraps what is left:
// each as PyTorch's kernels index (reflect's mirror of a cropped side reaches into the cropped part).
// `input`: the shape the caller was given, for errors.
Tensor pad_axis(const char* op, const Tensor& x, int64_t axis, int64_t before, int64_t after, PadMode mode, const Shape& input) {
  int64_t n = x.shape()[static_cast<size_t>(axis)], out = n + before + after;
  auto which = [&] { return kiln::cat("padding (", before, ", ", after, ") of axis ", axis, " (size ", n, ") of input ", shape_str(input)); };
  if (out < (mode == PadMode::Circular ? 0 : 1))
    throw Error(kiln::cat(op, ": ", which(), " leaves ", out, " elements; ", mode == PadMode::Circular ? "crop" : "the output needs at least 1, crop",
                          " less"));
  int64_t crop_before = std::max<int64_t>(-before, 0), crop_after = std::max<int64_t>(-after, 0);
  std::vector<Tensor> parts;
  switch (mode) {
    case PadMode::Reflect:
      if (before >= n || after >= n)
        throw Error(kiln::cat(op, ": reflect ", which(), ": each amount must be less than the size, as the mirror image excludes the edge; "
                                  "pad less, or use replicate or constant padding"));
      if (before > 0) parts.push_back(x.slice(axis, 1, before + 1).flip({axis}));
      parts.push_back(x);
      if (after > 0) parts.push_back(x.slice(axis, n - 1 - after, n - 1).flip({axis}));
      break;
    case PadMode::Replicate:
      if (before > 0) parts.push_back(edge(x, axis, 0, before));
      parts.push_back(x);
      if (after > 0) parts.push_back(edge(x, axis, n - 1, after));
      break;
    case PadMode::Circular: {
      Tensor kept = x.slice(axis, crop_before, n - crop_after);
      int64_t m = n - crop_before - crop_after;
      if (before > m || after > m)
        throw Error(kiln::cat(op, ": circular ", which(), " wraps around more than once: each amount must be at most the size ", m,
                              crop_before + crop_after ? " left after the crop" : "", "; pad less"));
      if (before > 0) parts.push_back(kept.slice(axis, m - before, m));
      parts.push_back(kept);
      if (after > 0) parts.push_back(kept.slice(axis, 0, after));
      return parts.size() == 1 ? kept : Tensor::cat(parts, axis);
    }
    case PadMode::Constant:
      throw InternalError("pad_axis: the constant mode is Tensor::pad's");
  }
  Tensor y = parts.size() == 1 ? x : Tensor::cat(parts, axis);
  return crop_before + crop_after ? y.slice(axis, crop_before, y.shape()[static_cast<size_t>(axis)] - crop_after) : y;
}

Tensor pad_as(const char* op, const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode_name, double value) {
  PadMode mode = pad_mode(op, mode_name);
  if (pads.size() % 2 != 0)
    throw Error(kiln::cat(op, ": ", pads.size(), " padding amounts; give them in (before, after) pairs, the last axis first"));
  auto axes = static_cast<int64_t>(pads.size() / 2);
  if (axes > x.ndim())
    throw Error(kiln::cat(op, ": ", axes, " pairs of padding amounts for input ", shape_str(x.shape()), " of ", x.ndim(), " axes; at most one pair per axis"));
  // Pair i pads axis ndim - 1 - i.
  auto axis_of = [&](int64_t i) { return x.ndim() - 1 - i; };
  if (mode == PadMode::Constant) {
    Pairs padding(static_cast<size_t>(x.ndim()), {0, 0});
    for (int64_t i = 0; i < axes; ++i) {
      int64_t before = pads[static_cast<size_t>(2 * i)], after = pads[static_cast<size_t>(2 * i + 1)];
      int64_t n = x.shape()[static_cast<size_t>(axis_of(i))];
      if (n + before + after < 0)
        throw Error(kiln::cat(op, ": padding (", before, ", ", after, ") of axis ", axis_of(i), " (size ", n, ") of input ", shape_str(x.shape()),
                              " crops more than the axis holds; crop less"));
      padding[static_cast<size_t>(axis_of(i))] = {before, after};
    }
    return x.pad(padding, value);
  }
  if (value != 0.0)
    throw Error(kiln::cat(op, ": mode \"", mode_name, "\" takes no value (got ", value, "); a fill value is for mode \"constant\""));
  if (axes < 1 || axes > 3 || (x.ndim() != axes + 1 && x.ndim() != axes + 2)) {
    const char* layouts[] = {"(C, W) or (N, C, W)", "(C, H, W) or (N, C, H, W)", "(C, D, H, W) or (N, C, D, H, W)"};
    throw Error(kiln::cat(op, ": mode \"", mode_name, "\" pads the last 1, 2 or 3 axes of an unbatched or batched input; ", pads.size(),
                          " padding amounts",
                          axes >= 1 && axes <= 3 ? kiln::cat(" need a ", axes + 1, "-D or ", axes + 2, "-D input ", layouts[axes - 1]) : "",
                          ", got shape ", shape_str(x.shape())));
  }
  Tensor y = x;
  for (int64_t i = 0; i < axes; ++i) y = pad_axis(op, y, axis_of(i), pads[static_cast<size_t>(2 * i)], pads[static_cast<size_t>(2 * i + 1)], mode, x.shape());
  return y;
}

}  // namespace

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode, double value) {
  return pad_as("pad", x, pads, mode, value);
}

Tensor Pad::forward(const Tensor& x) { return pad_as(name_, x, padding, mode_, value); }

}  // namespace kiln::nn
