// matmul, conv2d and pooling: the textbook loop nests, summing in double and rounding once.
#include <algorithm>
#include <cmath>

#include "reference/detail.h"

namespace kiln::ref {

using namespace detail;

namespace {

// Pooling and conv2d also take one unbatched image [C, H, W]: run it as a batch of one.
Array with_batch(const char* op, const Array& input, const std::function<Array(const Array&)>& fn) {
  if (input.rank() == 4) return fn(input);
  if (input.rank() != 3)
    fail(message(op, ": input shape ", shape_str(input.shape), " is not [N, C, H, W] or [C, H, W]"));
  Array out = fn(unsqueeze(input, 0));
  return reshape(out, Shape(out.shape.begin() + 1, out.shape.end()));
}

// Output size of a sliding window along one axis (ceil_mode=false); throws when nothing fits.
int64_t windows(const char* op, int64_t size, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  if (kernel <= 0 || stride <= 0 || padding < 0 || dilation <= 0)
    fail(message(op, ": kernel ", kernel, ", stride ", stride, " and dilation ", dilation,
                 " must be positive, padding ", padding, " non-negative"));
  int64_t span = dilation * (kernel - 1) + 1, out = (size + 2 * padding - span) / stride + 1;
  if (size + 2 * padding < span || out <= 0)
    fail(message(op, ": window of ", span, " does not fit in size ", size, " with padding ", padding));
  return out;
}

// Calls visit(value) for each element of the kernel window at (oh, ow) of one [H, W] plane that lies
// inside the plane; `offset` is where the plane starts in data.
void for_window(const Array& x, int64_t offset, int64_t oh, int64_t ow, Pair kernel, Pair stride, Pair padding,
                const std::function<void(double)>& visit) {
  int64_t height = x.shape[2], width = x.shape[3];
  for (int64_t r = 0; r < kernel[0]; ++r) {
    for (int64_t s = 0; s < kernel[1]; ++s) {
      int64_t ih = oh * stride[0] - padding[0] + r, iw = ow * stride[1] - padding[1] + s;
      if (ih >= 0 && ih < height && iw >= 0 && iw < width) visit(x.data[offset + ih * width + iw]);
    }
  }
}

// Shared by both pools: out[n][c][oh][ow] = reduce(the window's in-bounds values).
Array pool(const char* op, const Array& input, Pair kernel, std::optional<Pair> stride_or_kernel, Pair padding,
           const std::function<double(const std::vector<double>&)>& reduce) {
  Pair stride = stride_or_kernel.value_or(kernel);
  for (int i = 0; i < 2; ++i)
    if (padding[i] > kernel[i] / 2)
      fail(message(op, ": padding ", padding[i], " must be at most half the kernel size ", kernel[i]));
  return with_batch(op, input, [&](const Array& x) {
    int64_t batch = x.shape[0], channels = x.shape[1];
    int64_t out_h = windows(op, x.shape[2], kernel[0], stride[0], padding[0], 1);
    int64_t out_w = windows(op, x.shape[3], kernel[1], stride[1], padding[1], 1);
    Array out = zeros({batch, channels, out_h, out_w}, x.dtype);
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t oh = 0; oh < out_h; ++oh)
          for (int64_t ow = 0; ow < out_w; ++ow) {
            std::vector<double> window;
            int64_t plane = (n * channels + c) * x.shape[2] * x.shape[3];
            for_window(x, plane, oh, ow, kernel, stride, padding, [&](double v) { window.push_back(v); });
            out.data[flat_of({n, c, oh, ow}, out.shape)] = round_to(x.dtype, reduce(window));
          }
    return out;
  });
}

}  // namespace

Array matmul(const Array& a, const Array& b) {
  if (a.rank() == 0 || b.rank() == 0)
    fail(message("matmul: operands need at least one axis, got shapes ", shape_str(a.shape), " and ",
                 shape_str(b.shape)));
  Array left = a.rank() == 1 ? unsqueeze(a, 0) : a;    // [K] -> [1, K]
  Array right = b.rank() == 1 ? unsqueeze(b, 1) : b;  // [K] -> [K, 1]
  int64_t m = left.shape[left.rank() - 2], k = left.shape[left.rank() - 1];
  int64_t k2 = right.shape[right.rank() - 2], n = right.shape[right.rank() - 1];
  if (k != k2)
    fail(message("matmul: shapes ", shape_str(a.shape), " and ", shape_str(b.shape), " do not match (", k, " vs ", k2,
                 ")"));
  Shape left_batch(left.shape.begin(), left.shape.end() - 2), right_batch(right.shape.begin(), right.shape.end() - 2);
  Shape batch = broadcast_shapes(left_batch, right_batch);
  Shape out_shape = batch;
  out_shape.insert(out_shape.end(), {m, n});
  Array out = zeros(out_shape, promote_types(a.dtype, b.dtype));
  for (int64_t i = 0; i < out.numel(); ++i) {
    Shape index = index_of(i, out_shape);  // batch..., row, column
    Shape left_index = index, right_index = index;
    double acc = 0;
    for (int64_t kk = 0; kk < k; ++kk) {
      left_index.back() = kk;
      right_index[right_index.size() - 2] = kk;
      acc += left.data[broadcast_flat(left.shape, left_index)] * right.data[broadcast_flat(right.shape, right_index)];
    }
    out.data[i] = round_to(out.dtype, acc);
  }
  if (a.rank() == 1) out_shape.erase(out_shape.end() - 2);  // remove the 1s that were added
  if (b.rank() == 1) out_shape.erase(out_shape.end() - 1);
  return reshape(out, out_shape);
}

Array conv2d(const Array& input, const Array& weight, const std::optional<Array>& bias, Pair stride, Pair padding,
             Pair dilation, int64_t groups) {
  DType dtype = promote_types(input.dtype, weight.dtype);
  if (bias) dtype = promote_types(dtype, bias->dtype);
  return with_batch("conv2d", input, [&](const Array& x) {
    int64_t batch = x.shape[0], channels = x.shape[1], height = x.shape[2], width = x.shape[3];
    if (weight.rank() != 4)
      fail(message("conv2d: weight shape ", shape_str(weight.shape), " is not [K, C/groups, R, S]"));
    int64_t out_channels = weight.shape[0], group_channels = weight.shape[1];
    if (groups <= 0 || channels % groups != 0 || out_channels % groups != 0 || group_channels * groups != channels)
      fail(message("conv2d: input shape ", shape_str(x.shape), ", weight shape ", shape_str(weight.shape),
                   " and groups ", groups,
                   " do not fit: need C % groups == 0, K % groups == 0 and weight.shape[1] == C / groups"));
    if (bias && bias->shape != Shape{out_channels})
      fail(message("conv2d: bias shape ", shape_str(bias->shape), " should be [", out_channels, "]"));
    int64_t kh = weight.shape[2], kw = weight.shape[3];
    int64_t out_h = windows("conv2d", height, kh, stride[0], padding[0], dilation[0]);
    int64_t out_w = windows("conv2d", width, kw, stride[1], padding[1], dilation[1]);
    int64_t out_per_group = out_channels / groups;
    Array out = zeros({batch, out_channels, out_h, out_w}, dtype);
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t k = 0; k < out_channels; ++k)
        for (int64_t oh = 0; oh < out_h; ++oh)
          for (int64_t ow = 0; ow < out_w; ++ow) {
            int64_t group = k / out_per_group;
            double acc = bias ? bias->data[k] : 0.0;
            for (int64_t c = 0; c < group_channels; ++c)
              for (int64_t r = 0; r < kh; ++r)
                for (int64_t s = 0; s < kw; ++s) {
                  int64_t ih = oh * stride[0] - padding[0] + r * dilation[0];
                  int64_t iw = ow * stride[1] - padding[1] + s * dilation[1];
                  if (ih < 0 || ih >= height || iw < 0 || iw >= width) continue;  // zero padding
                  acc += x.data[flat_of({n, group * group_channels + c, ih, iw}, x.shape)] *
                         weight.data[flat_of({k, c, r, s}, weight.shape)];
                }
            out.data[flat_of({n, k, oh, ow}, out.shape)] = round_to(dtype, acc);
          }
    return out;
  });
}

Array max_pool2d(const Array& input, Pair kernel, std::optional<Pair> stride, Pair padding) {
  return pool("max_pool2d", input, kernel, stride, padding, [](const std::vector<double>& window) {
    double best = -INFINITY;  // what the padding holds
    for (double v : window) {
      if (std::isnan(v)) return v;
      best = std::max(best, v);
    }
    return best;
  });
}

Array avg_pool2d(const Array& input, Pair kernel, std::optional<Pair> stride, Pair padding) {
  return pool("avg_pool2d", input, kernel, stride, padding, [&](const std::vector<double>& window) {
    double sum = 0;
    for (double v : window) sum += v;
    return sum / static_cast<double>(kernel[0] * kernel[1]);  // padding counts (count_include_pad)
  });
}

}  // namespace kiln::ref
