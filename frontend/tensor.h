// kiln::Tensor: a lazy, PyTorch-like tensor. Operations build a graph; realize() runs it.
//
//   Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
//   Tensor b = (a * 2 + 1).relu().sum({1});           // nothing has run yet
//   std::vector<float> out = b.to_vector<float>();      // schedule, compile (cached), launch, copy out
//
// Broadcasting and type promotion follow PyTorch. A Tensor is a handle: copies share one state, so
// realizing one realizes the others. Errors name the operation, the shapes or dtypes, and the fix.
#pragma once
#include <cstdint>
#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_set>
#include <string>
#include <utility>
#include <vector>

#include "schedule/schedule.h"
#include "schedule/shape.h"
#include "uop/uop.h"

namespace kiln {

struct DeviceBuffer;  // frontend/realize.h
class ShardedTensor;  // frontend/shard.h
struct Placement;

class Tensor {
 public:
  // --- creation ------------------------------------------------------------------------------
  template <typename T>
  static Tensor from_vector(const std::vector<T>& data, Shape shape, const std::string& device = "");
  static Tensor from_raw(const void* data, DType dtype, Shape shape, const std::string& device = "");
  static Tensor full(Shape shape, double value, DType dtype = dtypes::float32, const std::string& device = "");
  static Tensor zeros(Shape shape, DType dtype = dtypes::float32, const std::string& device = "");
  static Tensor ones(Shape shape, DType dtype = dtypes::float32, const std::string& device = "");
  static Tensor arange(int64_t end, DType dtype = dtypes::int32, const std::string& device = "");
  static Tensor arange(double start, double stop, double step = 1.0, DType dtype = dtypes::float32, const std::string& device = "");
  static Tensor linspace(double start, double stop, int64_t steps, DType dtype = dtypes::float32, const std::string& device = "");
  static Tensor eye(int64_t n, DType dtype = dtypes::float32, const std::string& device = "");
  Tensor zeros_like() const;
  Tensor ones_like() const;
  Tensor full_like(double value) const;
  // Random numbers from a counter-based generator: the same seed gives the same numbers on every device.
  static void manual_seed(uint64_t seed);
  static std::array<uint64_t, 2> rng_state();          // {seed, counter}: for checkpoints
  static void set_rng_state(std::array<uint64_t, 2> state);
  static Tensor rand(Shape shape, DType dtype = dtypes::float32, const std::string& device = "");    // U[0, 1)
  static Tensor randn(Shape shape, DType dtype = dtypes::float32, const std::string& device = "");   // N(0, 1)
  static Tensor randint(int64_t low, int64_t high, Shape shape, DType dtype = dtypes::int32, const std::string& device = "");

  // --- properties ----------------------------------------------------------------------------
  const Shape& shape() const;
  DType dtype() const;
  std::string device() const;
  int64_t ndim() const { return static_cast<int64_t>(shape().size()); }
  int64_t numel() const { return kiln::numel(shape()); }
  const UOpPtr& uop() const;

  // --- elementwise (broadcasting, PyTorch promotion) -----------------------------------------
  Tensor operator+(const Tensor& other) const;
  Tensor operator-(const Tensor& other) const;
  Tensor operator*(const Tensor& other) const;
  Tensor operator/(const Tensor& other) const;  // true division: integers divide as floats
  Tensor operator-() const;
  Tensor operator+(double s) const;
  Tensor operator-(double s) const;
  Tensor operator*(double s) const;
  Tensor operator/(double s) const;
  Tensor maximum(const Tensor& other) const;
  Tensor minimum(const Tensor& other) const;
  Tensor lt(const Tensor& other) const;
  Tensor eq(const Tensor& other) const;
  Tensor ne(const Tensor& other) const;
  Tensor where(const Tensor& a, const Tensor& b) const;  // this is the condition
  Tensor exp() const;
  Tensor log() const;
  Tensor exp2() const;
  Tensor log2() const;
  Tensor sqrt() const;
  Tensor reciprocal() const;
  Tensor sin() const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor cast(DType dtype) const;
  Tensor bitcast(DType dtype) const;  // same item size; reinterprets the bits
  Tensor pow(const Tensor& exponent) const;
  Tensor pow(double exponent) const;
  Tensor abs() const;
  Tensor sign() const;
  Tensor rsqrt() const;
  Tensor cos() const;
  Tensor tan() const;
  Tensor tanh() const;
  Tensor leaky_relu(double slope = 0.01) const;
  Tensor gelu() const;        // exact (erf) form
  Tensor gelu(const std::string& approximate) const;  // "none" (erf) or "tanh"
  Tensor silu() const;
  Tensor softplus(double beta = 1.0, double threshold = 20.0) const;
  // The activations of torch.nn.functional with PyTorch's defaults and gradients: elu is x for x > 0,
  // alpha (e^x - 1) otherwise (e^x - 1 computed without cancellation near 0); selu is scale * elu with
  // SELU's alpha; hardtanh clamps (gradient 1 strictly inside, 0 outside); relu6 is hardtanh(0, 6);
  // hardsigmoid relu6(x + 3) / 6; hardswish x * hardsigmoid(x); mish x * tanh(softplus(x)).
  Tensor elu(double alpha = 1.0) const;
  Tensor selu() const;
  Tensor hardtanh(double min_val = -1.0, double max_val = 1.0) const;
  Tensor relu6() const;
  Tensor hardsigmoid() const;
  Tensor hardswish() const;
  Tensor mish() const;
  Tensor erf() const;
  Tensor floor() const;
  Tensor ceil() const;
  Tensor round() const;       // half to even, like torch.round
  Tensor trunc() const;
  Tensor clamp(double lo, double hi) const;
  Tensor le(const Tensor& other) const;
  Tensor gt(const Tensor& other) const;
  Tensor ge(const Tensor& other) const;
  // Against a scalar, as torch's `t < 0.5`: exact for integer tensors with any double (a fraction or a
  // value beyond the dtype's range compares as in real numbers; NaN is unordered); float tensors
  // compare with the scalar in their own dtype.
  Tensor lt(double s) const;
  Tensor le(double s) const;
  Tensor gt(double s) const;
  Tensor ge(double s) const;
  Tensor eq(double s) const;
  Tensor ne(double s) const;
  Tensor logical_and(const Tensor& other) const;
  Tensor logical_or(const Tensor& other) const;
  Tensor logical_not() const;
  Tensor bitwise_and(const Tensor& other) const;
  Tensor bitwise_or(const Tensor& other) const;
  Tensor bitwise_xor(const Tensor& other) const;
  Tensor bitwise_not() const;
  Tensor shl(int64_t bits) const;
  Tensor shr(int64_t bits) const;
  // By a tensor of amounts (broadcast); amounts outside 0..width-1 give 0 (shr of a negative: -1).
  Tensor shl(const Tensor& bits) const;
  Tensor shr(const Tensor& bits) const;
  // Division with PyTorch's rounding (frontend/tensor_division.cpp). Integer division by zero is an
  // error (checked on the host: these wait for the divisor).
  Tensor add(const Tensor& other, double alpha = 1.0) const;              // this + alpha * other
  Tensor div(const Tensor& other, const std::string& rounding_mode) const;  // "trunc", "floor", or "" (true division)
  Tensor floor_divide(const Tensor& other) const;  // div(other, "floor")
  Tensor remainder(const Tensor& other) const;     // Python's %: the sign of other
  Tensor fmod(const Tensor& other) const;          // C's fmod: the sign of this

  // --- reductions ------------------------------------------------------------------------------
  Tensor sum(std::vector<int64_t> axes = {}, bool keepdim = false) const;   // {} = all axes
  Tensor max(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  Tensor min(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  Tensor mean(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  Tensor prod(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  Tensor var(std::vector<int64_t> axes = {}, bool keepdim = false, double correction = 1.0) const;
  Tensor std(std::vector<int64_t> axes = {}, bool keepdim = false, double correction = 1.0) const;
  Tensor any(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  Tensor all(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> axis = std::nullopt, bool keepdim = false) const;  // nullopt: flattened
  Tensor argmin(std::optional<int64_t> axis = std::nullopt, bool keepdim = false) const;
  Tensor softmax(int64_t axis) const;
  Tensor log_softmax(int64_t axis) const;
  Tensor logsumexp(std::vector<int64_t> axes, bool keepdim = false) const;
  Tensor cumsum(int64_t axis) const;
  Tensor cumprod(int64_t axis) const;
  Tensor logcumsumexp(int64_t axis) const;
  // Sorting (frontend/tensor_sort.cpp): axes of up to kCountSortLength elements by comparison counts
  // (O(n^2) work, one fused kernel), longer ones by a bitonic network (O(n log^2 n) work, in
  // log2(P) (log2(P) + 1) / 2 elementwise stages, P the next power of two). Ties keep their order
  // (stable); NaN sorts as the largest. Returns (values, int64 indices).
  std::pair<Tensor, Tensor> sort(int64_t axis = -1, bool descending = false) const;
  Tensor argsort(int64_t axis = -1, bool descending = false) const;
  std::pair<Tensor, Tensor> topk(int64_t k, int64_t axis = -1, bool largest = true) const;  // sorted
  static constexpr int64_t kCountSortLength = 4096;

  // --- movement (views: no data moves) -------------------------------------------------------
  Tensor reshape(Shape shape) const;  // one -1 allowed
  Tensor permute(std::vector<int64_t> order) const;
  Tensor transpose(int64_t a, int64_t b) const;
  Tensor expand(Shape shape) const;
  Tensor pad(Pairs padding, double value = 0.0) const;   // (before, after) per axis; negative crops
  Tensor shrink(Pairs bounds) const;                      // (begin, end) per axis
  Tensor flip(std::vector<int64_t> axes) const;
  Tensor contiguous() const;
  Tensor squeeze(std::optional<int64_t> axis = std::nullopt) const;
  Tensor unsqueeze(int64_t axis) const;
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;
  // Python slicing on one axis: t[start:stop:step], negative values and steps included.
  Tensor slice(int64_t axis, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step = 1) const;
  static Tensor cat(const std::vector<Tensor>& tensors, int64_t axis = 0);
  static Tensor stack(const std::vector<Tensor>& tensors, int64_t axis = 0);
  std::vector<Tensor> split(std::vector<int64_t> sizes, int64_t axis = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t axis = 0) const;
  Tensor repeat(std::vector<int64_t> times) const;
  Tensor gather(int64_t axis, const Tensor& index) const;
  Tensor index_select(int64_t axis, const Tensor& index) const;  // 1-D integer index
  // A copy of this with src's values written (scatter) or added (scatter_add) at index along axis:
  // out[..., index[i, j], ...] = src[i, j] (torch.Tensor.scatter / scatter_add). Duplicate indices
  // are an error for scatter (torch leaves the pick unspecified); scatter_add adds them all.
  Tensor scatter(int64_t axis, const Tensor& index, const Tensor& src) const;
  Tensor scatter_add(int64_t axis, const Tensor& index, const Tensor& src) const;
  Tensor masked_fill(const Tensor& mask, double value) const;  // mask broadcasts to this
  Tensor triu(int64_t diagonal = 0) const;  // the last two axes
  Tensor tril(int64_t diagonal = 0) const;
  // int64 indices -> (..., num_classes) int64; num_classes -1 means max + 1 (reads the indices).
  Tensor one_hot(int64_t num_classes = -1) const;

  Tensor matmul(const Tensor& other) const;  // torch.matmul: 1-D, 2-D and batched with broadcasting
  Tensor conv2d(const Tensor& weight, std::optional<Tensor> bias = std::nullopt, std::array<int64_t, 2> stride = {1, 1},
                std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1) const;
  Tensor max_pool2d(std::array<int64_t, 2> kernel, std::optional<std::array<int64_t, 2>> stride = std::nullopt,
                    std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> dilation = {1, 1}, bool ceil_mode = false) const;
  // divisor_override (non-zero) replaces every window's divisor, as in PyTorch.
  Tensor avg_pool2d(std::array<int64_t, 2> kernel, std::optional<std::array<int64_t, 2>> stride = std::nullopt,
                    std::array<int64_t, 2> padding = {0, 0}, bool ceil_mode = false, bool count_include_pad = true,
                    std::optional<int64_t> divisor_override = std::nullopt) const;
  // The 1-D forms, on (N, C, L) or an unbatched (C, L): conv1d's weight is (K, C/groups, R). Each is its
  // 2-D op on a 1-high image, so it runs the same kernels.
  Tensor conv1d(const Tensor& weight, std::optional<Tensor> bias = std::nullopt, int64_t stride = 1, int64_t padding = 0,
                int64_t dilation = 1, int64_t groups = 1) const;
  Tensor max_pool1d(int64_t kernel, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0, int64_t dilation = 1,
                    bool ceil_mode = false) const;
  Tensor avg_pool1d(int64_t kernel, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0, bool ceil_mode = false,
                    bool count_include_pad = true) const;
  // Adaptive pooling over the last two axes (the last one for 1-D), as torch's: output i of an axis of
  // size n pools the inputs [floor(i n / out), ceil((i + 1) n / out)). Sizes that divide evenly are
  // plain pooling with kernel = stride = n / out.
  Tensor adaptive_avg_pool2d(std::array<int64_t, 2> output_size) const;
  Tensor adaptive_max_pool2d(std::array<int64_t, 2> output_size) const;
  Tensor adaptive_avg_pool1d(int64_t output_size) const;
  Tensor adaptive_max_pool1d(int64_t output_size) const;
  // torch.nn.functional.conv_transpose2d: weight (C, K/groups, R, S); the gradient of conv2d.
  Tensor conv_transpose2d(const Tensor& weight, std::optional<Tensor> bias = std::nullopt, std::array<int64_t, 2> stride = {1, 1},
                          std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> output_padding = {0, 0}, int64_t groups = 1,
                          std::array<int64_t, 2> dilation = {1, 1}) const;
  // (..., H, W) -> (..., OH, OW, KH, KW): the sliding windows, as a view.
  Tensor windows(std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride, std::array<int64_t, 2> dilation) const;
  // torch.Tensor.unfold: the windows of `size` elements every `step` along `axis`, as a view: that axis
  // becomes the window count, (n - size) / step + 1, and a last axis of `size` is appended.
  Tensor unfold(int64_t axis, int64_t size, int64_t step) const;
  Tensor to(const std::string& device) const;
  // This tensor placed across devices of this process (frontend/shard.h: include it to use the result):
  // split along an axis, replicated (Placement::broadcast()) or as partial values (Placement::partial()).
  ShardedTensor shard(const std::vector<std::string>& devices, int64_t axis) const;  // Placement::split(axis)
  ShardedTensor shard(const std::vector<std::string>& devices, const Placement& placement) const;

  // --- autograd (frontend/autograd.cpp) --------------------------------------------------------
  // Gradients are a rewrite of the UOp graph (pm_gradient): backward() builds lazy gradient graphs,
  // which realize like any other tensor, and which can be differentiated again (second order).
  Tensor& requires_grad_(bool on = true);   // make this a leaf that collects gradients in grad()
  bool requires_grad() const;                // a leaf with requires_grad_, or computed from one (outside no_grad)
  bool is_leaf() const;
  // d(this)/d(leaf) for every leaf this depends on, added to the leaf's grad() (PyTorch accumulation).
  // `gradient` defaults to 1 for a one-element tensor.
  void backward(std::optional<Tensor> gradient = std::nullopt);
  std::optional<Tensor> grad() const;
  void set_grad(std::optional<Tensor> grad);  // set_grad(std::nullopt) is zero_grad
  Tensor detach() const;                      // same value, no gradient flows through
  // Replaces this tensor's value (every handle sees it), keeping its identity as a leaf: what
  // optimizers do. Shape, dtype and device must match. When this tensor is realized, the value is
  // written into its memory in place as it is realized (no new allocation), unless a kernel of that
  // realize reads the old value elsewhere afterwards; each such write makes the old value's readers
  // stale: realizing a graph built before the write, or backward() through one, is an error
  // ("modified by an inplace operation"), as in PyTorch.
  Tensor& assign(const Tensor& value);

  // --- running -------------------------------------------------------------------------------
  Tensor& realize();
  template <typename T>
  std::vector<T> to_vector();
  template <typename T>
  T item();
  std::vector<uint8_t> to_bytes();  // the raw bytes in dtype() layout, row-major (for files and tools)
  // The items realizing these tensors would run, without running them (for tests and tools).
  static Schedule schedule(const std::vector<Tensor>& tensors);

  explicit Tensor(UOpPtr uop, Shape shape);
  Tensor();  // a float32 scalar 0 on the default device, so a Tensor member can be assigned later

 private:
  // Every live State is on one list, so that an in-place write can find the unrealized tensors that
  // still read the value it overwrites (realize_all computes them first).
  struct State : std::enable_shared_from_this<State> {
    State();
    ~State();
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    State *prev_live = nullptr, *next_live = nullptr;
    static State* live_head;
    UOpPtr uop;
    Shape shape;
    UOpPtr device;  // the DEVICE node: given by the op that made the tensor, else found on first use
    // autograd: a leaf's flag and gradient, and its value before its last realize or assign (the graphs of
    // realized non-leaves are recorded by autograd, keyed by their nodes).
    bool requires_grad = false;
    std::shared_ptr<Tensor> grad;
    UOpPtr former;
    // assign: the BUFFER whose memory the pending value is written into when realized (in place).
    UOpPtr target;
  };
  friend struct Autograd;
  std::shared_ptr<State> state_;
  explicit Tensor(std::shared_ptr<State> state) : state_(std::move(state)) {}
  struct LiveUses {
    std::vector<std::shared_ptr<State>> readers;
    std::unordered_set<const DeviceBuffer*> held;
  };
  static LiveUses live_uses(const std::unordered_set<const UOp*>& buffers, const std::unordered_set<const State*>& skip);

  Tensor(UOpPtr uop, Shape shape, UOpPtr device);  // device: uop's DEVICE node, known (device_of walks the graph)
  void own_memory();  // requires_grad_: a new leaf's value in memory no other tensor shares
  // A tensor computed from this one (and operands on the same device): it lives on this device.
  Tensor derived(UOpPtr uop, Shape shape) const { return Tensor(std::move(uop), std::move(shape), device_uop()); }
  // gather's node (for `op`: gather, index_select), its index's rank, sizes and values already checked;
  // checks that the index is on this tensor's device.
  Tensor gather_in_range(int64_t axis, const Tensor& index, const char* op) const;
  const UOpPtr& device_uop() const;
  // A tensor of `shape` filled with v (exactly: no trip through double, unlike full). Every scalar
  // operand makes one, so it builds its nodes (CONST, RESHAPE, EXPAND) without intermediate tensors.
  static Tensor constant(ConstValue v, DType dtype, const Shape& shape, UOpPtr device);
  static UOpPtr constant_uop(ConstValue v, DType dtype, const Shape& shape, const UOpPtr& device);  // its node
  Tensor unary(Op op) const;
  // this (op) s for a C++ scalar, as binary(op, scalar_like(s)); when the scalar keeps this dtype (the
  // common case) it builds the one node without a tensor for the scalar: graphs rebuilt every call
  // (x * 1.5 in a loop) make one per op.
  Tensor scalar_binary(Op op, double s, const char* name) const;
  DType scalar_dtype(double s) const;  // scalar_like's dtype
  // The two sides of an elementwise op: broadcast to one shape, cast to the result dtype and then to
  // the dtype it is computed in (float32 for float16/bfloat16).
  struct Operands {
    UOpPtr a, b;
    Shape shape;
    DType result, compute;
  };
  Operands operands(const Tensor& other, Op op, const char* name) const;
  Tensor binary(Op op, const Tensor& other, const char* name) const;
  Tensor shift(Op op, int64_t bits, const char* name) const;
  Tensor shift_by(Op op, const Tensor& bits, const char* name) const;
  Tensor bitwise(Op op, const Tensor& other, const char* name) const;  // integer/bool operands only
  Tensor scalar_like(double s) const;
  Tensor reduce(Op op, std::vector<int64_t> axes, bool keepdim, const char* name) const;
  Tensor split_reduce(Op op) const;
  // Composite math on float16/bfloat16 runs entirely in float32 and rounds once at the end.
  Tensor in_float(const std::function<Tensor(const Tensor&)>& f) const;
  static constexpr int64_t kSplitReduceAbove = 1 << 16, kSplitReduceParts = 256;
  std::vector<int64_t> normalize_axes(std::vector<int64_t> axes, const char* name) const;
  void copy_out(void* dst, DType want);
  friend void realize_all(std::vector<Tensor>& tensors, bool with_pending_assigns);
  friend Tensor operator-(double s, const Tensor& t);
  friend Tensor operator/(double s, const Tensor& t);
};

// torch.einsum with two operands ("ij,jk->ik", "bij,bjk->bik", implicit output "ij,jk"); no "...".
Tensor einsum(const std::string& equation, const Tensor& a, const Tensor& b);

// torch.autograd.grad(create_graph=True): d(output)/d(input) for each input, as lazy tensors that can be
// differentiated again. An input that output does not depend on gets zeros.
std::vector<Tensor> gradients(const Tensor& output, const std::vector<Tensor>& inputs,
                              std::optional<Tensor> grad_output = std::nullopt);

// torch.no_grad(): while one exists on this thread, new tensors carry no gradient.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};
bool grad_enabled();

Tensor operator+(double s, const Tensor& t);
Tensor operator*(double s, const Tensor& t);
Tensor operator-(double s, const Tensor& t);
Tensor operator/(double s, const Tensor& t);

// Comparisons give bool tensors (torch's `a < b`, `mask == 0`); & | ^ ~ are bitwise on integer and bool
// tensors (logical on bool, as torch's).
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& t, double s);
Tensor operator!=(const Tensor& t, double s);
Tensor operator<(const Tensor& t, double s);
Tensor operator<=(const Tensor& t, double s);
Tensor operator>(const Tensor& t, double s);
Tensor operator>=(const Tensor& t, double s);
Tensor operator==(double s, const Tensor& t);
Tensor operator!=(double s, const Tensor& t);
Tensor operator<(double s, const Tensor& t);
Tensor operator<=(double s, const Tensor& t);
Tensor operator>(double s, const Tensor& t);
Tensor operator>=(double s, const Tensor& t);
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator^(const Tensor& a, const Tensor& b);
Tensor operator~(const Tensor& t);

// Realizes several tensors with one schedule (shared subgraphs computed once). Pending assigns (batch
// norm's running statistics) are realized with them when one of them writes in place (an optimizer's
// step), or when `with_pending_assigns` (the end of a captured step, frontend/jit.h).
void realize_all(std::vector<Tensor>& tensors, bool with_pending_assigns = false);

template <typename T>
DType dtype_of();

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& data, Shape shape, const std::string& device) {
  if (static_cast<int64_t>(data.size()) != kiln::numel(shape))
    throw Error(kiln::cat("Tensor::from_vector: ", data.size(), " values do not fill shape ", shape_str(shape),
                    " (", kiln::numel(shape), " elements)"));
  return from_raw(data.data(), dtype_of<T>(), std::move(shape), device);
}

template <typename T>
T Tensor::item() {
  if (numel() != 1) throw Error(kiln::cat("item: the tensor has ", numel(), " elements (shape ", shape_str(shape()), "); item() needs exactly one"));
  return to_vector<T>()[0];
}

template <typename T>
std::vector<T> Tensor::to_vector() {
  std::vector<T> out(static_cast<size_t>(numel()));
  copy_out(out.data(), dtype_of<T>());
  return out;
}

}  // namespace kiln
