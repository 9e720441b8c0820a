// kiln::ref: a naive n-dimensional array library that computes every tensor op of issue 3 with plain
// loops over elements, written independently of kiln's compiler path. Tests compare what kiln's
// generated kernels produce against it, so it aims to be obviously right, not fast.
//
//   using namespace kiln::ref;
//   Array a = array({3, 1}, {1, 2, 3});
//   Array b = arange(4, dtypes::float32);            // shape [4]
//   Array c = softmax(add(a, b), -1);                 // [3, 4]: PyTorch broadcasting, then softmax
//   std::string why;
//   CHECK(allclose(got, c, 1e-5, 1e-6, &why));        // `why` names the first bad index
//
// Semantics, once for all ops:
//  - An Array holds every value as a double; its dtype is a tag. Every op computes in double and
//    rounds each result to its output dtype with round_to, so float32 results are float32 values
//    and integer results wrap at their width. Integers are exact only well inside 2^53.
//  - Output dtypes follow PyTorch for tensor operands: binary arithmetic uses promote_types; true
//    division and transcendental functions use to_floating; comparisons and logical ops give bool;
//    sum/prod/cumsum of bool or integers give int64; argmax/argmin give int64.
//  - Broadcasting is PyTorch's: shapes align at the right and a size-1 dimension stretches.
//  - Axes may be negative (counted from the end). An empty axis list in a reduction means every axis.
//  - A user mistake (shapes that do not broadcast, a bad reshape or axis, integer division by zero)
//    throws std::invalid_argument naming the op and the shapes; Array::at throws std::out_of_range.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "uop/dtype.h"

namespace kiln::ref {

using Shape = std::vector<int64_t>;
using Axes = std::vector<int64_t>;

struct Array {
  Shape shape;               // row-major and contiguous; rank 0 is a scalar
  std::vector<double> data;  // numel() values, each already a value of `dtype`
  DType dtype = dtypes::float32;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const;
  double at(std::vector<int64_t> index) const;  // bounds-checked, one index per axis
};

// The nearest value of `t`: float32 by (float); float16 and bfloat16 to nearest even with kiln's
// half.h; integers truncate toward zero, then wrap two's complement at their width (NaN gives 0,
// +-inf the type's limit); bool is v != 0 (NaN is true).
double round_to(DType t, double v);

// ---- creation ------------------------------------------------------------------------------------
Array array(Shape shape, std::vector<double> values, DType dtype = dtypes::float32);  // rounds values
Array scalar(double v, DType dtype = dtypes::float32);                                // rank 0
Array full(Shape shape, double v, DType dtype = dtypes::float32);
Array arange(int64_t n, DType dtype = dtypes::float32);  // 0, 1, ..., n-1
Array cast(const Array& a, DType dtype);                 // every value through round_to(dtype)

// ---- elementwise ---------------------------------------------------------------------------------
using UnaryFn = std::function<double(double)>;
using BinaryFn = std::function<double(double, double)>;

Shape broadcast_shapes(const Shape& a, const Shape& b);  // throws if they do not broadcast
Array unary(const Array& a, const UnaryFn& fn, DType out);
Array binary(const Array& a, const Array& b, const BinaryFn& fn, DType out);
Array where(const Array& cond, const Array& a, const Array& b, DType out);
Array where(const Array& cond, const Array& a, const Array& b);  // out = promote_types(a, b)

// Arithmetic, in promote_types(a, b); div (true division) and pow of floats as torch.
Array add(const Array& a, const Array& b);
Array sub(const Array& a, const Array& b);
Array mul(const Array& a, const Array& b);
Array div(const Array& a, const Array& b);  // in to_floating(promote_types(a, b))
Array pow(const Array& a, const Array& b);  // integer base with a negative integer exponent throws
Array maximum(const Array& a, const Array& b);  // NaN if either is NaN
Array minimum(const Array& a, const Array& b);
// Integer-style division, both conventions (floats too):
Array floor_divide(const Array& a, const Array& b);  // floor(a / b): Python, torch.floor_divide
Array remainder(const Array& a, const Array& b);     // a - floor(a / b) * b: sign of the divisor
Array trunc_divide(const Array& a, const Array& b);  // trunc(a / b): C, kiln's IDIV
Array fmod(const Array& a, const Array& b);          // sign of the dividend: C, kiln's MOD

// Unary ops that keep the dtype.
Array neg(const Array& a);
Array abs(const Array& a);
Array sign(const Array& a);  // -1, 0 or 1; NaN gives 0, as torch.sign does
Array floor(const Array& a);
Array ceil(const Array& a);
Array round(const Array& a);  // half to even, as torch.round
Array trunc(const Array& a);
Array relu(const Array& a);   // NaN stays NaN
Array clamp(const Array& a, std::optional<double> lo, std::optional<double> hi);  // NaN stays NaN

// Unary ops in to_floating(a.dtype).
Array exp(const Array& a);
Array log(const Array& a);
Array exp2(const Array& a);
Array log2(const Array& a);
Array sqrt(const Array& a);
Array rsqrt(const Array& a);
Array reciprocal(const Array& a);
Array sin(const Array& a);
Array cos(const Array& a);
Array tan(const Array& a);
Array tanh(const Array& a);
Array erf(const Array& a);
Array sigmoid(const Array& a);
Array leaky_relu(const Array& a, double slope = 0.01);
Array gelu(const Array& a);       // x/2 * (1 + erf(x/sqrt(2)))
Array gelu_tanh(const Array& a);  // x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
Array silu(const Array& a);
Array softplus(const Array& a, double beta = 1, double threshold = 20);  // x where beta*x > threshold

// Comparisons and logic: bool out. NaN compares unequal to everything; a NaN is true.
Array eq(const Array& a, const Array& b);
Array ne(const Array& a, const Array& b);
Array lt(const Array& a, const Array& b);
Array le(const Array& a, const Array& b);
Array gt(const Array& a, const Array& b);
Array ge(const Array& a, const Array& b);
Array logical_and(const Array& a, const Array& b);
Array logical_or(const Array& a, const Array& b);
Array logical_not(const Array& a);

// Bitwise ops on integers and bool (two's complement), in promote_types(a, b). Shifts take integers
// only; a shift by the width or more gives 0 (shl, shr of non-negatives) or -1 (shr of negatives).
Array bitwise_and(const Array& a, const Array& b);
Array bitwise_or(const Array& a, const Array& b);
Array bitwise_xor(const Array& a, const Array& b);
Array bitwise_not(const Array& a);  // logical not for bool, as torch
Array shl(const Array& a, const Array& b);
Array shr(const Array& a, const Array& b);  // arithmetic for signed, logical for unsigned

// ---- reductions ----------------------------------------------------------------------------------
Array sum(const Array& a, Axes axes = {}, bool keepdim = false);   // empty sum is 0
Array prod(const Array& a, Axes axes = {}, bool keepdim = false);  // empty product is 1
Array max(const Array& a, Axes axes = {}, bool keepdim = false);   // NaN wins; empty throws
Array min(const Array& a, Axes axes = {}, bool keepdim = false);
Array mean(const Array& a, Axes axes = {}, bool keepdim = false);  // in to_floating(a.dtype)
// Divides the squared deviations by max(0, N - correction), as torch (so N <= correction gives
// inf or NaN). `stddev` is torch.std, renamed so it does not read as the namespace std.
Array var(const Array& a, Axes axes = {}, int64_t correction = 1, bool keepdim = false);
Array stddev(const Array& a, Axes axes = {}, int64_t correction = 1, bool keepdim = false);
// Index of the first extreme along `axis`, or in the flattened array (rank-0 result, keepdim
// ignored, as torch) without one. A NaN counts as the extreme for both, as torch.
Array argmax(const Array& a, std::optional<int64_t> axis = std::nullopt, bool keepdim = false);
Array argmin(const Array& a, std::optional<int64_t> axis = std::nullopt, bool keepdim = false);
Array any(const Array& a, Axes axes = {}, bool keepdim = false);
Array all(const Array& a, Axes axes = {}, bool keepdim = false);

// Computed in float64 after subtracting the maximum, then rounded to to_floating(a.dtype).
Array softmax(const Array& a, int64_t axis);
Array log_softmax(const Array& a, int64_t axis);
Array logsumexp(const Array& a, Axes axes = {}, bool keepdim = false);  // an infinite max shifts by 0
Array cumsum(const Array& a, int64_t axis);  // running sum in double, each output rounded once

// ---- movement ------------------------------------------------------------------------------------
Array reshape(const Array& a, Shape shape);  // at most one -1
Array permute(const Array& a, Axes order);
Array transpose(const Array& a, int64_t axis0, int64_t axis1);
Array expand(const Array& a, Shape shape);  // broadcast to `shape`; -1 keeps a dimension
// (before, after) per axis, in axis order (not F.pad's last-axis-first order); negative crops.
Array pad(const Array& a, std::vector<std::pair<int64_t, int64_t>> pads, double value = 0);
Array shrink(const Array& a, std::vector<std::pair<int64_t, int64_t>> bounds);  // [begin, end) per axis
Array flip(const Array& a, Axes axes);
Array squeeze(const Array& a, Axes axes = {});  // listed (or, empty list: all) axes of size 1
Array unsqueeze(const Array& a, int64_t axis);  // axis in [-rank-1, rank]
Array flatten(const Array& a, int64_t start = 0, int64_t end = -1);

// One axis of a Python slice a[start:stop:step]; missing bounds and clamping as Python's.
struct Slice {
  std::optional<int64_t> start, stop;
  int64_t step = 1;
};
Array slice(const Array& a, std::vector<Slice> slices);  // axes past slices.size() are kept whole

Array cat(const std::vector<Array>& arrays, int64_t axis = 0);    // in promote_types of all
Array stack(const std::vector<Array>& arrays, int64_t axis = 0);  // equal shapes, new axis
std::vector<Array> split(const Array& a, int64_t size, int64_t axis = 0);  // last piece may be short
std::vector<Array> split_sizes(const Array& a, std::vector<int64_t> sizes, int64_t axis = 0);
std::vector<Array> chunk(const Array& a, int64_t chunks, int64_t axis = 0);  // as torch.chunk
Array repeat(const Array& a, Shape times);  // torch.Tensor.repeat: tiles, may add leading axes
// torch.gather: out[i][j] = a[index[i][j]][j] for axis 0; index has a's rank and integer dtype.
Array gather(const Array& a, int64_t axis, const Array& index);

// ---- linear algebra and neural-network ops -------------------------------------------------------
// torch.matmul: 1-D x 1-D is a dot product; a 1-D operand gets a 1 prepended (left) or appended
// (right) that is removed again; batch dimensions broadcast. Accumulates in double.
Array matmul(const Array& a, const Array& b);

using Pair = std::array<int64_t, 2>;  // (height, width)

// torch.nn.functional.conv2d: input [N, C, H, W] (or [C, H, W]), weight [K, C/groups, R, S],
// bias [K]; zero padding. In promote_types of the operands.
Array conv2d(const Array& input, const Array& weight, const std::optional<Array>& bias = std::nullopt,
             Pair stride = {1, 1}, Pair padding = {0, 0}, Pair dilation = {1, 1}, int64_t groups = 1);
// Pooling over [N, C, H, W] (or [C, H, W]), ceil_mode=false; stride defaults to the kernel and
// padding may be at most half the kernel, as torch. max_pool2d pads with -inf and propagates NaN;
// avg_pool2d counts padding in the divisor (count_include_pad=true) and keeps the input dtype.
Array max_pool2d(const Array& input, Pair kernel, std::optional<Pair> stride = std::nullopt,
                 Pair padding = {0, 0});
Array avg_pool2d(const Array& input, Pair kernel, std::optional<Pair> stride = std::nullopt,
                 Pair padding = {0, 0});

// ---- checking ------------------------------------------------------------------------------------
// Shapes equal and, elementwise, |got - want| <= atol + rtol * |want|; NaN matches NaN and an
// infinity matches the same infinity. Dtypes are not compared. On a mismatch `why` (if given) gets
// the first bad index, both values and how many elements differ.
bool allclose(const Array& got, const Array& want, double rtol = 1e-5, double atol = 1e-8,
              std::string* why = nullptr);
std::string to_string(const Array& a);  // "float32[2, 3] {1, 2, 3, 4, 5, 6}", at most 20 values

}  // namespace kiln::ref
