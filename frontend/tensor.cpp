#include "frontend/tensor.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <iostream>
#include <mutex>
#include <numbers>
#include <unordered_map>
#include <unordered_set>

#include "frontend/detail.h"
#include "frontend/realize.h"
#include "uop/config.h"
#include "uop/alu.h"
#include "uop/spin_lock.h"

namespace kiln {

template <> DType dtype_of<float>() { return dtypes::float32; }
template <> DType dtype_of<double>() { return dtypes::float64; }
template <> DType dtype_of<int8_t>() { return dtypes::int8; }
template <> DType dtype_of<int16_t>() { return dtypes::int16; }
template <> DType dtype_of<int32_t>() { return dtypes::int32; }
template <> DType dtype_of<int64_t>() { return dtypes::int64; }
template <> DType dtype_of<uint8_t>() { return dtypes::uint8; }
template <> DType dtype_of<uint16_t>() { return dtypes::uint16; }
template <> DType dtype_of<uint32_t>() { return dtypes::uint32; }
template <> DType dtype_of<uint64_t>() { return dtypes::uint64; }
template <> DType dtype_of<bool>() { return dtypes::bool_; }

namespace detail {

UOpPtr movement(Op op, const UOpPtr& x, Arg arg) { return UOp::make(op, x->dtype, sources(x), std::move(arg)); }

int64_t normalize_axis(int64_t axis, int64_t ndim, const char* op) {
  int64_t n = std::max<int64_t>(ndim, 1);
  if (axis < -n || axis >= n)
    throw Error(kiln::cat(op, ": axis ", axis, " is out of range for a tensor with ", ndim, " dimensions (use -", n, "..", n - 1, ")"));
  return axis < 0 ? axis + n : axis;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw Error(kiln::cat(op, ": shapes ", shape_str(a), " and ", shape_str(b), " cannot broadcast (axis ", i, " is ", da,
                      " vs ", db, "); sizes must match or be 1"));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace detail

using detail::broadcast_shapes;
using detail::movement;
using detail::normalize_axis;

Tensor::Tensor(UOpPtr uop, Shape shape) : state_(std::make_shared<State>()) {
  state_->uop = detail::no_grad_wrap(std::move(uop));
  state_->shape = std::move(shape);
}

Tensor::Tensor(UOpPtr uop, Shape shape, UOpPtr device) : Tensor(std::move(uop), std::move(shape)) {
  state_->device = std::move(device);
}

Tensor::Tensor() : Tensor(zeros({})) {}

const Shape& Tensor::shape() const { return state_->shape; }
DType Tensor::dtype() const { return state_->uop->dtype; }
const UOpPtr& Tensor::uop() const { return state_->uop; }
const UOpPtr& Tensor::device_uop() const {
  if (!state_->device) state_->device = device_of(uop());  // a tensor made by Tensor(uop, shape)
  return state_->device;
}
std::string Tensor::device() const { return device_uop()->arg_as<std::string>(); }

// --- creation --------------------------------------------------------------------------------

Tensor Tensor::from_raw(const void* data, DType dtype, Shape shape, const std::string& device) {
  for (int64_t d : shape)
    if (d < 0) throw Error(kiln::cat("Tensor: negative dimension in shape ", shape_str(shape)));
  int64_t n = kiln::numel(shape);
  UOpPtr dev = device_node(device);
  UOpPtr buffer = new_buffer(dev, std::max<int64_t>(n, 1), dtype);
  DeviceBuffer& storage = storage_of(buffer);
  if (n > 0) {  // an empty tensor has no bytes to copy (and data may be null)
    storage.ensure_allocated();
    storage.device->copy_in(storage.raw, data, static_cast<size_t>(n) * dtype.itemsize());
    if (Recorder* r = current_recorder()) r->upload(storage_ptr(buffer), data, static_cast<size_t>(n) * dtype.itemsize());
  }
  return Tensor(movement(Op::RESHAPE, buffer, shape), shape, std::move(dev));
}

Tensor Tensor::full(Shape shape, double value, DType dtype, const std::string& device) {
  for (int64_t d : shape)
    if (d < 0) throw Error(kiln::cat("Tensor::full: negative dimension in shape ", shape_str(shape)));
  return constant(value, dtype, shape, device_node(device));
}

namespace {
// Constants made lately on this thread: expressions repeat their scalars (x * 1.5 in a loop, the zero
// of every relu), and finding one here is cheaper than interning its three nodes again. Weak, so the
// cache never keeps a graph alive.
struct RecentConstant {
  ConstValue value;
  DType dtype;
  Shape shape;
  const UOp* device = nullptr;  // compared only while `node`, which holds it alive, is
  bool grad = false;             // grad_enabled() when made: under no_grad the nodes are wrapped
  std::weak_ptr<const UOp> node;
};
constexpr size_t kRecentConstants = 8;
thread_local std::array<RecentConstant, kRecentConstants> t_recent_constants;
thread_local size_t t_next_recent_constant = 0;
}  // namespace

Tensor Tensor::constant(ConstValue v, DType dtype, const Shape& shape, UOpPtr device) {
  UOpPtr u = constant_uop(v, dtype, shape, device);
  return Tensor(std::move(u), shape, std::move(device));
}

UOpPtr Tensor::constant_uop(ConstValue v, DType dtype, const Shape& shape, const UOpPtr& device) {
  v = cast_const(v, dtype);
  bool grad = grad_enabled();
  for (const RecentConstant& r : t_recent_constants) {
    // The value first: the entries mostly differ there, and share the shape.
    if (!const_equal(r.value, v) || r.dtype != dtype || r.device != device.get() || r.grad != grad || r.shape != shape) continue;
    if (UOpPtr u = r.node.lock()) return u;
  }
  // The nodes (and DETACH wrappers under no_grad) that Tensor(CONST).reshape(ones).expand(shape) makes.
  UOpPtr u = UOp::make(Op::CONST, dtype, detail::sources(device), v);
  if (!shape.empty()) u = detail::no_grad_wrap(movement(Op::RESHAPE, u, Shape(shape.size(), 1)));
  if (std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d != 1; }))
    u = detail::no_grad_wrap(movement(Op::EXPAND, u, shape));
  t_recent_constants[t_next_recent_constant++ % kRecentConstants] = {v, dtype, shape, device.get(), grad, u};
  return u;
}

Tensor Tensor::zeros(Shape shape, DType dtype, const std::string& device) { return full(std::move(shape), 0.0, dtype, device); }
Tensor Tensor::ones(Shape shape, DType dtype, const std::string& device) { return full(std::move(shape), 1.0, dtype, device); }

Tensor Tensor::arange(int64_t end, DType dtype, const std::string& device) {
  if (end < 0) throw Error(kiln::cat("Tensor::arange: end ", end, " is negative"));
  UOpPtr dev = device_node(device);
  return Tensor(UOp::make(Op::IOTA, dtype, {dev}, end), {end}, dev);
}

// --- elementwise -----------------------------------------------------------------------------

DType Tensor::scalar_dtype(double s) const {
  // PyTorch's rule for a Python scalar: it keeps the tensor's dtype within its category. A C++ double
  // that is integral and fits the tensor's integer type acts like a Python int (so a bool tensor goes
  // to int64); anything else (a fraction, inf, NaN) acts like a Python float.
  // An integral value outside the tensor's range is an error, as in current PyTorch ("value cannot be
  // converted without overflow"): PyTorch 1.x wrapped it silently, an older kiln made the result float.
  DType d = dtype();
  if (!is_float(d)) {
    bool integral = std::isfinite(s) && std::floor(s) == s;
    if (!integral) d = dtypes::default_float;
    else if (is_bool(d)) d = dtypes::int64;
    else if (s < as_double(lowest(d)) || s >= std::ldexp(1.0, static_cast<int>(d.itemsize()) * 8 - (is_unsigned(d) ? 0 : 1)))
      throw Error(kiln::cat("scalar ", s, " does not fit the tensor's dtype ", d.name(), " (", as_double(lowest(d)), " to ",
                            as_double(highest(d)), "); cast the tensor to a wider type first"));
  }
  return d;
}

Tensor Tensor::scalar_like(double s) const { return constant(s, scalar_dtype(s), shape(), device_uop()); }

// float16 and bfloat16 are storage types: arithmetic runs in float32 and each op's result is rounded
// back, which is what PyTorch computes for them on the CPU.
using detail::compute_dtype;
using detail::is_narrow_float;

namespace {
int category(DType d) { return is_bool(d) ? 0 : is_float(d) ? 2 : 1; }

// An operand of an elementwise op: cast to the result dtype d, computed in c, broadcast to `out`.
// Most operands already are, and skipping the intermediate tensors matters when graphs are rebuilt often.
UOpPtr operand(const Tensor& t, DType d, DType c, const Shape& out) {
  if (t.dtype() == d && d == c && t.shape() == out) return t.uop();
  return t.cast(d).cast(c).expand(out).uop();
}
}  // namespace

// torch.result_type of two tensors: a 0-d tensor beside a dimensioned one decides the dtype only when
// it is of a higher category (bool < integer < floating): int32 tensor + int64 0-d is int32.
DType detail::result_type(const Tensor& a, const Tensor& b) {
  if ((a.ndim() == 0) == (b.ndim() == 0)) return promote_types(a.dtype(), b.dtype());
  const Tensor& dim = a.ndim() == 0 ? b : a;
  const Tensor& zero = a.ndim() == 0 ? a : b;
  return category(zero.dtype()) > category(dim.dtype()) ? promote_types(dim.dtype(), zero.dtype()) : dim.dtype();
}

Tensor::Operands Tensor::operands(const Tensor& other, Op op, const char* name) const {
  if (device_uop() != other.device_uop())
    throw Error(kiln::cat(name, ": operands are on different devices (", device(), " and ", other.device(), "); move one with to()"));
  Shape out = shape() == other.shape() ? shape() : broadcast_shapes(shape(), other.shape(), name);
  DType d = detail::result_type(*this, other);
  if (op == Op::FDIV) d = to_floating(d);  // (integer pow never gets here: tensor_math.cpp)
  DType c = compute_dtype(d);
  UOpPtr a = operand(*this, d, c, out), b = operand(other, d, c, out);
  return {std::move(a), std::move(b), std::move(out), d, c};
}

Tensor Tensor::binary(Op op, const Tensor& other, const char* name) const {
  Operands p = operands(other, op, name);
  if (is_comparison(op)) return derived(UOp::make(op, dtypes::bool_, detail::sources(std::move(p.a), std::move(p.b))), std::move(p.shape));
  Tensor result = derived(UOp::make(op, p.compute, detail::sources(std::move(p.a), std::move(p.b))), std::move(p.shape));
  if (p.compute != p.result) return result.cast(p.result);
  return result;
}

Tensor Tensor::unary(Op op) const {
  DType c = compute_dtype(dtype());
  if (c == dtype()) return derived(UOp::make(op, c, detail::sources(uop())), shape());
  return derived(UOp::make(op, c, {cast(c).uop()}), shape()).cast(dtype());
}

Tensor Tensor::operator+(const Tensor& o) const { return binary(Op::ADD, o, "add"); }
Tensor Tensor::operator-(const Tensor& o) const { return binary(Op::SUB, o, "sub"); }
Tensor Tensor::operator*(const Tensor& o) const { return binary(Op::MUL, o, "mul"); }
Tensor Tensor::operator/(const Tensor& o) const { return binary(Op::FDIV, o, "div"); }
Tensor Tensor::operator-() const { return unary(Op::NEG); }
Tensor Tensor::scalar_binary(Op op, double s, const char* name) const {
  DType d = scalar_dtype(s);
  // Same dtype and shape, computed in it: operands() would pass both nodes through unchanged.
  if (d != dtype() || compute_dtype(d) != d) return binary(op, constant(s, d, shape(), device_uop()), name);
  return derived(UOp::make(op, d, detail::sources(uop(), constant_uop(s, d, shape(), device_uop()))), shape());
}

Tensor Tensor::operator+(double s) const { return scalar_binary(Op::ADD, s, "add"); }
Tensor Tensor::operator-(double s) const { return scalar_binary(Op::SUB, s, "sub"); }
Tensor Tensor::operator*(double s) const { return scalar_binary(Op::MUL, s, "mul"); }
// True division computes in floats, so an integer tensor's scalar divisor need not fit its dtype.
Tensor Tensor::operator/(double s) const { return is_float(dtype()) ? scalar_binary(Op::FDIV, s, "div") : cast(to_floating(dtype())) / s; }
Tensor operator+(double s, const Tensor& t) { return t + s; }
Tensor operator*(double s, const Tensor& t) { return t * s; }
Tensor operator-(double s, const Tensor& t) { return t.scalar_like(s) - t; }
Tensor operator/(double s, const Tensor& t) { return is_float(t.dtype()) ? t.scalar_like(s) / t : s / t.cast(to_floating(t.dtype())); }
Tensor Tensor::maximum(const Tensor& o) const { return binary(Op::MAX, o, "maximum"); }
Tensor Tensor::minimum(const Tensor& o) const { return binary(Op::MIN, o, "minimum"); }
Tensor Tensor::lt(const Tensor& o) const { return binary(Op::CMPLT, o, "lt"); }
Tensor Tensor::eq(const Tensor& o) const { return binary(Op::CMPEQ, o, "eq"); }
Tensor Tensor::ne(const Tensor& o) const { return binary(Op::CMPNE, o, "ne"); }

Tensor Tensor::where(const Tensor& a, const Tensor& b) const {
  if (device_uop() != a.device_uop() || device_uop() != b.device_uop())
    throw Error(kiln::cat("where: operands are on different devices (", device(), ", ", a.device(), ", ", b.device(), "); move them with to()"));
  Shape out = shape() == a.shape() && shape() == b.shape() ? shape()
              : broadcast_shapes(broadcast_shapes(shape(), a.shape(), "where"), b.shape(), "where");
  DType d = detail::result_type(a, b);
  UOpPtr cond = operand(*this, dtypes::bool_, dtypes::bool_, out);
  return derived(UOp::make(Op::WHERE, d, detail::sources(std::move(cond), operand(a, d, d, out), operand(b, d, d, out))), out);
}

Tensor Tensor::cast(DType d) const {
  if (d == dtype()) return *this;
  return derived(UOp::make(Op::CAST, d, detail::sources(uop())), shape());
}

Tensor Tensor::exp2() const { return cast(to_floating(dtype())).unary(Op::EXP2); }
Tensor Tensor::log2() const { return cast(to_floating(dtype())).unary(Op::LOG2); }
Tensor Tensor::sqrt() const { return cast(to_floating(dtype())).unary(Op::SQRT); }
Tensor Tensor::reciprocal() const { return cast(to_floating(dtype())).unary(Op::RECIP); }
Tensor Tensor::sin() const { return cast(to_floating(dtype())).unary(Op::SIN); }
Tensor Tensor::in_float(const std::function<Tensor(const Tensor&)>& f) const {
  if (!is_narrow_float(dtype())) return f(*this);
  return f(cast(compute_dtype(dtype()))).cast(dtype());
}

Tensor Tensor::exp() const { return in_float([](const Tensor& x) { return (x * (1.0 / std::numbers::ln2)).exp2(); }); }
Tensor Tensor::log() const { return in_float([](const Tensor& x) { return x.log2() * std::numbers::ln2; }); }
// where(x <= 0, 0, x) rather than max(x, 0): NaN passes through, and the gradient at 0 is 0, as in PyTorch.
Tensor Tensor::relu() const {
  if (compute_dtype(dtype()) != dtype()) {
    Tensor zero = constant(0.0, dtype(), shape(), device_uop());
    return le(zero).where(zero, *this);
  }
  // The nodes of le(zero).where(zero, x) (see Tensor::le), without the two tensors between them.
  UOpPtr zero = constant_uop(0.0, dtype(), shape(), device_uop());
  UOpPtr lt = detail::no_grad_wrap(UOp::make(Op::CMPLT, dtypes::bool_, detail::sources(uop(), zero)));
  UOpPtr eq = detail::no_grad_wrap(UOp::make(Op::CMPEQ, dtypes::bool_, detail::sources(uop(), zero)));
  UOpPtr le = UOp::make(Op::OR, dtypes::bool_, detail::sources(std::move(lt), std::move(eq)));
  return derived(UOp::make(Op::WHERE, dtype(), detail::sources(std::move(le), std::move(zero), uop())), shape());
}
// From e = exp(-|x|) <= 1, never exp(-x): for x < -88 (float32) that overflows, and though 1 / (1 + inf) is
// the right 0, its gradient through exp is 0 * inf = NaN.
Tensor Tensor::sigmoid() const {
  return in_float([](const Tensor& x) {
    // -|x| by selection, not abs(): abs's gradient at 0 is 0, and sigmoid's is 1/4 there.
    Tensor negative = x.lt(x.zeros_like());
    Tensor e = negative.where(x, -x).exp(), p = (e + 1.0).reciprocal();
    Tensor out = negative.where(e * p, p);
    detail::set_elementwise_gradient(out, x, [](const Tensor&, const Tensor& s) { return s * (-s + 1.0); });
    return out;
  });
}

// --- reductions --------------------------------------------------------------------------------

std::vector<int64_t> Tensor::normalize_axes(std::vector<int64_t> axes, const char* name) const {
  if (ndim() == 0) {  // a scalar accepts axis 0 or -1, as in PyTorch, and has nothing to reduce
    for (int64_t a : axes) normalize_axis(a, 0, name);
    return {};
  }
  if (axes.empty())
    for (int64_t i = 0; i < ndim(); ++i) axes.push_back(i);
  for (int64_t& a : axes) a = normalize_axis(a, ndim(), name);
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

Tensor Tensor::reduce(Op op, std::vector<int64_t> axes, bool keepdim, const char* name) const {
  axes = normalize_axes(std::move(axes), name);
  Shape kept = shape(), dropped;
  for (int64_t a : axes) kept[static_cast<size_t>(a)] = 1;
  for (size_t i = 0; i < shape().size(); ++i)
    if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(i)) == axes.end()) dropped.push_back(shape()[i]);
  Tensor x = *this;
  // PyTorch sums and multiplies bool and integer tensors in int64.
  if ((op == Op::ADD || op == Op::MUL) && !is_float(dtype())) x = cast(dtypes::int64);
  if (is_narrow_float(dtype())) return cast(compute_dtype(dtype())).reduce(op, axes, keepdim, name).cast(dtype());
  int64_t reduced = 1;
  for (int64_t a : axes) reduced *= shape()[static_cast<size_t>(a)];
  if (reduced == 0 && numel() == 0 && op != Op::ADD && op != Op::MUL)
    throw Error(kiln::cat(name, ": cannot reduce an empty tensor of shape ", shape_str(shape()), " (no identity for ", name, ")"));
  Tensor out = kiln::numel(kept) == 1 && numel() >= kSplitReduceAbove
                   ? x.split_reduce(op).reshape(kept)
                   : derived(UOp::make(Op::REDUCE_AXIS, x.dtype(), {x.uop()}, ReduceArg{op, axes}), kept);
  return keepdim ? out : out.reshape(dropped);
}

// A reduction of everything to one value has no output loop to spread over the cores, so a big one
// is done in two steps: kSplitReduceParts partial results in parallel, then a small reduce of those.
// The input is padded to a multiple with the op's identity.
Tensor Tensor::split_reduce(Op op) const {
  int64_t n = numel(), parts = kSplitReduceParts, per = (n + parts - 1) / parts;
  double identity = as_double(reduce_identity(op, dtype()));
  Tensor flat = reshape({n}).pad({{0, parts * per - n}}, identity).reshape({parts, per});
  Tensor partial = derived(UOp::make(Op::REDUCE_AXIS, dtype(), {flat.uop()}, ReduceArg{op, {1}}), {parts, 1});
  return derived(UOp::make(Op::REDUCE_AXIS, dtype(), {partial.uop()}, ReduceArg{op, {0}}), {1, 1});
}

Tensor Tensor::sum(std::vector<int64_t> axes, bool keepdim) const { return reduce(Op::ADD, std::move(axes), keepdim, "sum"); }
Tensor Tensor::max(std::vector<int64_t> axes, bool keepdim) const { return reduce(Op::MAX, std::move(axes), keepdim, "max"); }
Tensor Tensor::min(std::vector<int64_t> axes, bool keepdim) const { return reduce(Op::MIN, std::move(axes), keepdim, "min"); }

Tensor Tensor::mean(std::vector<int64_t> axes, bool keepdim) const {
  if (is_narrow_float(dtype())) return in_float([&](const Tensor& x) { return x.mean(axes, keepdim); });
  Tensor s = cast(to_floating(dtype())).sum(axes, keepdim);
  return s * (static_cast<double>(s.numel()) / static_cast<double>(numel()));  // an empty mean is NaN, as in PyTorch
}

// --- movement --------------------------------------------------------------------------------

Tensor Tensor::reshape(Shape new_shape) const {
  if (new_shape == shape()) return *this;  // the common case, before any checking
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < new_shape.size(); ++i) {
    if (new_shape[i] == -1) {
      if (infer >= 0) throw Error(kiln::cat("reshape: only one -1 allowed in ", shape_str(new_shape)));
      infer = static_cast<int64_t>(i);
    } else if (new_shape[i] < 0) {
      throw Error(kiln::cat("reshape: negative size in ", shape_str(new_shape)));
    } else {
      known *= new_shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0)
      throw Error(kiln::cat("reshape: the sizes beside -1 in ", shape_str(new_shape), " multiply to 0, so -1 could be any size (as in PyTorch); give that size explicitly"));
    if (numel() % known != 0)
      throw Error(kiln::cat("reshape: cannot infer -1 in ", shape_str(new_shape), " for ", numel(), " elements of shape ", shape_str(shape())));
    new_shape[static_cast<size_t>(infer)] = numel() / known;
  }
  if (kiln::numel(new_shape) != numel())
    throw Error(kiln::cat("reshape: shape ", shape_str(shape()), " (", numel(), " elements) cannot become ", shape_str(new_shape), " (",
                    kiln::numel(new_shape), " elements)"));
  if (new_shape == shape()) return *this;
  return derived(movement(Op::RESHAPE, uop(), new_shape), new_shape);
}

Tensor Tensor::permute(std::vector<int64_t> order) const {
  if (static_cast<int64_t>(order.size()) != ndim())
    throw Error(kiln::cat("permute: order has ", order.size(), " axes but the tensor has ", ndim(), " (shape ", shape_str(shape()), ")"));
  std::vector<bool> seen(order.size(), false);
  Shape out;
  for (int64_t& a : order) {
    a = normalize_axis(a, ndim(), "permute");
    if (seen[static_cast<size_t>(a)]) throw Error(kiln::cat("permute: axis ", a, " appears twice in the order"));
    seen[static_cast<size_t>(a)] = true;
    out.push_back(shape()[static_cast<size_t>(a)]);
  }
  bool identity = true;
  for (size_t i = 0; i < order.size(); ++i) identity &= order[i] == static_cast<int64_t>(i);
  if (identity) return *this;
  return derived(movement(Op::PERMUTE, uop(), order), std::move(out));
}

Tensor Tensor::transpose(int64_t a, int64_t b) const {
  if (ndim() == 0) {
    normalize_axis(a, 0, "transpose");
    normalize_axis(b, 0, "transpose");
    return *this;
  }
  std::vector<int64_t> order;
  for (int64_t i = 0; i < ndim(); ++i) order.push_back(i);
  std::swap(order[static_cast<size_t>(normalize_axis(a, ndim(), "transpose"))], order[static_cast<size_t>(normalize_axis(b, ndim(), "transpose"))]);
  return permute(order);
}

Tensor Tensor::expand(Shape new_shape) const {
  if (new_shape == shape()) return *this;  // the common case, before any checking
  if (new_shape.size() < shape().size())
    throw Error(kiln::cat("expand: cannot expand shape ", shape_str(shape()), " to fewer dimensions ", shape_str(new_shape)));
  Shape padded(new_shape.size() - shape().size(), 1);
  padded.insert(padded.end(), shape().begin(), shape().end());
  for (size_t i = 0; i < new_shape.size(); ++i) {
    if (new_shape[i] == -1) new_shape[i] = padded[i];
    if (new_shape[i] < 0) throw Error(kiln::cat("expand: negative size ", new_shape[i], " in ", shape_str(new_shape)));
    if (padded[i] != new_shape[i] && padded[i] != 1)
      throw Error(kiln::cat("expand: axis ", i, " of shape ", shape_str(shape()), " has size ", padded[i], " and cannot become ", new_shape[i],
                      "; only size-1 axes expand"));
  }
  Tensor x = reshape(padded);
  if (new_shape == padded) return x;
  return derived(movement(Op::EXPAND, x.uop(), new_shape), new_shape);
}

Tensor Tensor::pad(Pairs padding, double value) const {
  if (padding.size() != shape().size())
    throw Error(kiln::cat("pad: ", padding.size(), " (before, after) pairs for a tensor of shape ", shape_str(shape()), "; give one per axis"));
  Shape out = shape();
  bool any = false, crop = false;
  for (const auto& [before, after] : padding) crop |= before < 0 || after < 0;
  if (crop) {
    // Negative amounts crop, as torch.nn.functional.pad does: pad the positive ones, then shrink.
    Pairs grow, bounds;
    for (size_t i = 0; i < out.size(); ++i) {
      auto [before, after] = padding[i];
      grow.push_back({std::max<int64_t>(before, 0), std::max<int64_t>(after, 0)});
      int64_t size = out[i] + grow.back().first + grow.back().second;
      int64_t begin = std::max<int64_t>(-before, 0), end = size - std::max<int64_t>(-after, 0);
      if (end < begin)
        throw Error(kiln::cat("pad: padding (", before, ", ", after, ") on axis ", i, " of size ", out[i], " crops more than the axis holds"));
      bounds.push_back({begin, end});
    }
    return pad(grow, value).shrink(bounds);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] += padding[i].first + padding[i].second;
    any |= padding[i].first != 0 || padding[i].second != 0;
  }
  if (!any) return *this;
  Tensor padded = derived(movement(Op::PAD, uop(), padding), out);
  if (value == 0.0) return padded;
  // Non-zero padding: pad a mask of ones the same way and fill where it is 0.
  Tensor mask = derived(movement(Op::PAD, constant(true, dtypes::bool_, shape(), device_uop()).uop(), padding), out);
  return mask.where(padded, constant(value, dtype(), out, device_uop()));
}

Tensor Tensor::shrink(Pairs bounds) const {
  if (bounds.size() != shape().size())
    throw Error(kiln::cat("shrink: ", bounds.size(), " (begin, end) pairs for a tensor of shape ", shape_str(shape()), "; give one per axis"));
  Shape out;
  bool identity = true;
  for (size_t i = 0; i < bounds.size(); ++i) {
    auto [b, e] = bounds[i];
    if (b < 0 || e > shape()[i] || b > e)
      throw Error(kiln::cat("shrink: bounds (", b, ", ", e, ") are outside axis ", i, " of size ", shape()[i], " (shape ", shape_str(shape()), ")"));
    out.push_back(e - b);
    identity &= b == 0 && e == shape()[i];
  }
  if (identity) return *this;
  return derived(movement(Op::SHRINK, uop(), bounds), std::move(out));
}

Tensor Tensor::flip(std::vector<int64_t> axes) const {
  if (ndim() == 0) {
    for (int64_t a : axes) normalize_axis(a, 0, "flip");
    return *this;
  }
  std::vector<int64_t> flags(shape().size(), 0);
  for (int64_t a : axes) flags[static_cast<size_t>(normalize_axis(a, ndim(), "flip"))] ^= 1;
  if (std::all_of(flags.begin(), flags.end(), [](int64_t f) { return f == 0; })) return *this;
  return derived(movement(Op::FLIP, uop(), flags), shape());
}

Tensor Tensor::contiguous() const { return derived(UOp::make(Op::CONTIGUOUS, dtype(), {uop()}), shape()); }

// --- running -----------------------------------------------------------------------------------

UOpPtr detail::realized_buffer(const UOpPtr& u) {
  if (u->op == Op::BUFFER) return u;
  if (u->op == Op::RESHAPE && u->src[0]->op == Op::BUFFER) return u->src[0];
  return nullptr;
}

// --- live tensors (Tensor::State's list) ----------------------------------------------------------

namespace {
// Taken twice per tensor made (constructed, destroyed): a spin lock, as the interning table's.
SpinLock g_live_mu;

}  // namespace

Tensor::State* Tensor::State::live_head = nullptr;

Tensor::State::State() {
  std::lock_guard<SpinLock> lock(g_live_mu);
  next_live = live_head;
  if (live_head) live_head->prev_live = this;
  live_head = this;
}

Tensor::State::~State() {
  std::lock_guard<SpinLock> lock(g_live_mu);
  if (prev_live) prev_live->next_live = next_live;
  else live_head = next_live;
  if (next_live) next_live->prev_live = prev_live;
}

// How live tensors other than `skip` use the values in `buffers` (what in-place writes would overwrite):
// the unrealized ones whose graphs read one of them (realized with the write, so they get the old
// value), the memory that a realized tensor holds too (then not written in place: it keeps its value),
// and every pending assign (in readers).
Tensor::LiveUses Tensor::live_uses(const std::unordered_set<const UOp*>& buffers, const std::unordered_set<const State*>& skip) {
  std::unordered_set<const DeviceBuffer*> memories;
  for (const UOp* b : buffers) memories.insert(&static_cast<DeviceBuffer*>(b->arg_as<BufferArg>().storage.get())->memory());
  LiveUses uses;
  std::vector<std::shared_ptr<State>> live;
  {
    std::lock_guard<SpinLock> lock(g_live_mu);
    for (State* s = State::live_head; s; s = s->next_live) {
      if (skip.count(s)) continue;
      if (UOpPtr b = detail::realized_buffer(s->uop)) {
        if (const DeviceBuffer* m = &storage_of(b).memory(); memories.count(m)) uses.held.insert(m);
      } else if (std::shared_ptr<State> p = s->weak_from_this().lock()) {
        if (p->target) uses.readers.push_back(std::move(p));  // a pending assign: state, realized with the others
        else live.push_back(std::move(p));
      }
    }
  }
  // Whether each node reads one of the buffers, over the union of the graphs (each node walked once).
  std::unordered_map<const UOp*, bool> reads;
  std::vector<std::pair<const UOp*, size_t>> stack;
  auto walk = [&](const UOp* root) {
    if (reads.count(root)) return reads[root];
    stack.push_back({root, 0});
    reads[root] = false;
    while (!stack.empty()) {
      auto& [u, next] = stack.back();
      if (next < u->src.size()) {
        const UOp* s = u->src[next++].get();
        if (auto [it, fresh] = reads.try_emplace(s, buffers.count(s) > 0); fresh && !it->second) stack.push_back({s, 0});
        continue;
      }
      bool r = false;
      for (const UOpPtr& s : u->src) r = r || reads[s.get()];
      reads[u] = r;
      stack.pop_back();
    }
    return reads[root];
  };
  for (std::shared_ptr<State>& s : live)
    if (walk(s->uop.get())) uses.readers.push_back(std::move(s));
  return uses;
}

void realize_all(std::vector<Tensor>& given, bool with_pending_assigns) {
  std::vector<Tensor> tensors;  // each unrealized one once
  std::unordered_set<const Tensor::State*> included;
  for (const Tensor& t : given)
    if (!detail::realized_buffer(t.uop()) && included.insert(t.state_.get()).second) tensors.push_back(t);
  if (tensors.empty()) return;
  // In-place writes (assign): the other unrealized tensors that read a value overwritten (a loss read
  // after the optimizer's step, a gradient) are computed first, as PyTorch would have computed them
  // already; repeated, since one of them may write in place too. A value another tensor still holds is
  // not overwritten: that assign writes new memory.
  // Every other pending assign is realized with them too (batch norm's running statistics when the
  // optimizer steps), and at the end of a captured step (frontend/jit.h). Not at every realize inside
  // a captured step: a check that reads a few values (cross_entropy's target range) then computed the
  // forward pass for the running statistics in a schedule of its own, and the step's schedule computed
  // it again (a ResNet step ran every forward conv twice).
  std::unordered_set<const UOp*> written;
  std::unordered_set<const DeviceBuffer*> held;
  bool assigning = with_pending_assigns ||
                   std::any_of(tensors.begin(), tensors.end(), [](const Tensor& t) { return t.state_->target != nullptr; });
  for (size_t done = 0; assigning;) {
    std::unordered_set<const UOp*> fresh;
    for (; done < tensors.size(); ++done)
      if (const UOpPtr& target = tensors[done].state_->target; target && written.insert(target.get()).second) fresh.insert(target.get());
    Tensor::LiveUses uses = Tensor::live_uses(fresh, included);
    held.insert(uses.held.begin(), uses.held.end());
    assigning = !uses.readers.empty();
    for (std::shared_ptr<Tensor::State>& s : uses.readers) {
      included.insert(s.get());
      tensors.push_back(Tensor(std::move(s)));
    }
  }
  std::vector<UOpPtr> outputs, targets;
  for (const Tensor& t : tensors) {
    outputs.push_back(t.uop());
    const UOpPtr& target = t.state_->target;
    bool keep = target && !held.count(&storage_of(target).memory());
    if (target && !keep && config().debug >= 2)
      std::cerr << "kiln: assign of a " << shape_str(t.shape()) << " tensor writes new memory: another tensor holds its old value\n";
    targets.push_back(keep ? target : nullptr);
  }
  std::vector<UOpPtr> buffers = realize_uops(outputs, targets);
  std::vector<UOpPtr> befores;
  for (size_t j = 0; j < tensors.size(); ++j) {
    Tensor& t = tensors[j];
    t.state_->target = nullptr;
    befores.push_back(std::exchange(t.state_->uop, movement(Op::RESHAPE, buffers[j], t.shape())));
  }
  detail::after_realize(tensors, befores);
}

Tensor& Tensor::realize() {
  std::vector<Tensor> one{*this};
  realize_all(one);
  return *this;
}

Schedule Tensor::schedule(const std::vector<Tensor>& tensors) {
  std::vector<UOpPtr> outputs;
  for (const Tensor& t : tensors) outputs.push_back(t.uop());
  return schedule_uops(outputs);
}

std::vector<uint8_t> Tensor::to_bytes() {
  std::vector<uint8_t> out(static_cast<size_t>(numel()) * dtype().itemsize());
  copy_out(out.data(), dtype());
  return out;
}

void Tensor::copy_out(void* dst, DType want) {
  if (want != dtype())
    throw Error(kiln::cat("to_vector: the tensor is ", dtype().name(), " but ", want.name(), " was asked for; cast() it first"));
  realize();
  if (numel() == 0) return;  // nothing to copy (dst may be null)
  const UOpPtr& buffer = uop()->src[0];
  DeviceBuffer& storage = storage_of(buffer);
  if (storage.stale())
    throw Error(kiln::cat("to_vector: this ", shape_str(shape()), " ", dtype().name(), " tensor's value was overwritten by an inplace "
                          "operation (Tensor::assign into the memory it shares); read it before the assign"));
  storage.ensure_allocated();
  storage.device->copy_out(dst, storage.raw, static_cast<size_t>(numel()) * dtype().itemsize());
}

}  // namespace kiln
