// ShardedTensor: what each device computes for an op, and the placement of the result (frontend/shard.h).
#include "frontend/shard.h"

#include <algorithm>
#include <set>

#include "devices/device.h"
#include "frontend/detail.h"

namespace kiln {

using detail::normalize_axis;

const char* partial_op_name(PartialOp op) {
  switch (op) {
    case PartialOp::Sum: return "sum";
    case PartialOp::Max: return "max";
    case PartialOp::Min: return "min";
  }
  return "?";
}

std::string Placement::str() const {
  switch (kind) {
    case Kind::Split: return cat("Split(", axis, ")");
    case Kind::Broadcast: return "Broadcast";
    case Kind::Partial: return cat("Partial(", partial_op_name(op), ")");
  }
  return "?";
}

std::vector<int64_t> split_sizes(int64_t n, int64_t parts) {
  std::vector<int64_t> sizes(static_cast<size_t>(parts), n / parts);
  for (int64_t i = 0; i < n % parts; ++i) ++sizes[static_cast<size_t>(i)];
  return sizes;
}

namespace {

size_t at(int64_t i) { return static_cast<size_t>(i); }

std::string list_str(const std::vector<std::string>& names) {
  std::string out = "[";
  for (const std::string& n : names) out += cat(out.size() > 1 ? ", " : "", n);
  return out + "]";
}

// The devices for `op`, canonical ("CPU:0" is "CPU"), at least one, none twice.
std::vector<std::string> checked_devices(const std::vector<std::string>& devices, const char* op) {
  if (devices.empty()) throw Error(cat(op, ": no devices given; list at least one, e.g. {\"CPU:0\", \"CPU:1\"}"));
  std::vector<std::string> names;
  for (const std::string& d : devices) {
    std::string name = canonical_device_name(d);
    if (std::find(names.begin(), names.end(), name) != names.end())
      throw Error(cat(op, ": device ", name, " is listed twice in ", list_str(devices), " (CPU and CPU:0 are one device); list each once, "
                      "and name further instances with an index (CPU:1)"));
    names.push_back(name);
  }
  return names;
}

// The placement for a tensor of `shape` over `n` devices, its axis made non-negative; a Split must give
// every device at least one element.
Placement checked_placement(Placement p, const Shape& shape, size_t n, const char* op) {
  if (!p.is_split()) return p;
  if (shape.empty()) throw Error(cat(op, ": a 0-d tensor cannot be Split; use Placement::broadcast()"));
  p.axis = normalize_axis(p.axis, static_cast<int64_t>(shape.size()), op);
  if (shape[at(p.axis)] < static_cast<int64_t>(n))
    throw Error(cat(op, ": axis ", p.axis, " of shape ", shape_str(shape), " has ", shape[at(p.axis)], " elements, fewer than the ", n,
                    " devices; every device needs at least one: split another axis, use fewer devices, or Placement::broadcast()"));
  return p;
}

Tensor slice_axis(const Tensor& t, int64_t axis, int64_t begin, int64_t end) {
  Pairs bounds;
  for (int64_t i = 0; i < t.ndim(); ++i) bounds.push_back(i == axis ? std::pair{begin, end} : std::pair{int64_t{0}, t.shape()[at(i)]});
  return t.shrink(bounds);
}

Tensor fold(PartialOp op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case PartialOp::Sum: return a + b;
    case PartialOp::Max: return a.maximum(b);
    case PartialOp::Min: return a.minimum(b);
  }
  return a;
}

// The [begin, end) of each device's piece of a Split tensor along its axis.
std::vector<std::pair<int64_t, int64_t>> pieces(const ShardedTensor& x) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t begin = 0;
  for (const Tensor& l : x.locals()) {
    int64_t size = l.shape()[at(x.placement().axis)];
    out.push_back({begin, begin + size});
    begin += size;
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> even_pieces(int64_t n, size_t parts) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t begin = 0;
  for (int64_t size : split_sizes(n, static_cast<int64_t>(parts))) {
    out.push_back({begin, begin + size});
    begin += size;
  }
  return out;
}

// From the whole value on each device to `target` (a checked placement): Split slices locally,
// Partial(sum) keeps the first device's and zeros the others, Partial(max/min) keeps every copy.
ShardedTensor place(const std::vector<Tensor>& whole, Placement target) {
  std::vector<Tensor> locals;
  switch (target.kind) {
    case Placement::Kind::Split: {
      auto ranges = even_pieces(whole[0].shape()[at(target.axis)], whole.size());
      for (size_t i = 0; i < whole.size(); ++i) locals.push_back(slice_axis(whole[i], target.axis, ranges[i].first, ranges[i].second));
      break;
    }
    case Placement::Kind::Broadcast: locals = whole; break;
    case Placement::Kind::Partial:
      for (size_t i = 0; i < whole.size(); ++i)
        locals.push_back(i == 0 || target.op != PartialOp::Sum ? whole[i] : Tensor::zeros(whole[i].shape(), whole[i].dtype(), whole[i].device()));
      break;
  }
  return ShardedTensor(locals, target);
}

ShardedTensor each(const ShardedTensor& x, const std::function<Tensor(const Tensor&)>& f, Placement result) {
  std::vector<Tensor> locals;
  for (const Tensor& l : x.locals()) locals.push_back(f(l));
  return ShardedTensor(locals, result);
}

void check_same_devices(const ShardedTensor& a, const ShardedTensor& b, const char* op) {
  if (a.devices() != b.devices())
    throw Error(cat(op, ": operands are placed on different devices (", a.str(), " and ", b.str(),
                    "); place both on one device list: x.to(device).shard(devices, placement)"));
}

// What a Partial(sum) operand of a binary op allows: sums of partials add (+, -), and a partial times
// (or over) a whole value is a partial of the product.
enum class Linearity { Add, Mul, Div, None };

ShardedTensor binary(const ShardedTensor& a, const ShardedTensor& b, const char* op, const char* symbol, Linearity kind,
                     const std::function<Tensor(const Tensor&, const Tensor&)>& f) {
  check_same_devices(a, b, op);
  Shape out = detail::broadcast_shapes(a.shape(), b.shape(), op);
  const Placement &pa = a.placement(), &pb = b.placement();
  auto apply = [&](const std::vector<Tensor>& xs, const std::vector<Tensor>& ys, Placement result) {
    std::vector<Tensor> locals;
    for (size_t i = 0; i < xs.size(); ++i) locals.push_back(f(xs[i], ys[i]));
    return ShardedTensor(locals, result);
  };
  if (pa.is_partial() || pb.is_partial()) {
    Placement sum = Placement::partial(PartialOp::Sum);
    bool keeps = (kind == Linearity::Add && pa == sum && pb == sum) ||
                 (kind == Linearity::Mul && ((pa == sum && pb.is_broadcast()) || (pa.is_broadcast() && pb == sum))) ||
                 (kind == Linearity::Div && pa == sum && pb.is_broadcast());
    if (!keeps)
      throw Error(cat(op, ": ", a.str(), " ", symbol, " ", b.str(), " needs the whole values: only Partial(sum) +- Partial(sum), "
                      "Partial(sum) * Broadcast and Partial(sum) / Broadcast stay partial; call allreduce() on the Partial operand first"));
    return apply(a.locals(), b.locals(), sum);
  }
  // Split and Broadcast: the split axis of the result, in the broadcast shape's numbering.
  std::optional<int64_t> axis;
  for (const ShardedTensor* x : {&a, &b}) {
    if (!x->placement().is_split()) continue;
    int64_t mine = x->placement().axis, theirs = mine + static_cast<int64_t>(out.size()) - x->ndim();
    if (x->shape()[at(mine)] != out[at(theirs)])
      throw Error(cat(op, ": ", x->str(), " would broadcast along its split axis to ", shape_str(out),
                      "; split another axis, or redistribute(Placement::broadcast()) first"));
    if (axis && *axis != theirs)
      throw Error(cat(op, ": ", a.str(), " ", symbol, " ", b.str(), ": the operands are split along different axes of the result; "
                      "redistribute one to the other's placement (b.redistribute(a.placement()))"));
    axis = theirs;
  }
  if (!axis) return apply(a.locals(), b.locals(), Placement::broadcast());
  if (pa.is_split() && pb.is_split() && pieces(a) != pieces(b)) {
    throw Error(cat(op, ": ", a.str(), " and ", b.str(), " are split into different pieces; redistribute both to ",
                    Placement::split(*axis).str(), " (tensor_split pieces)"));
  }
  auto ranges = pieces(pa.is_split() ? a : b);
  // The Broadcast operand, cut to each device's piece (unless it broadcasts along that axis).
  auto cut = [&](const ShardedTensor& x) {
    if (x.placement().is_split()) return x.locals();
    int64_t mine = *axis - (static_cast<int64_t>(out.size()) - x.ndim());
    if (mine < 0 || x.shape()[at(mine)] == 1) return x.locals();
    std::vector<Tensor> cuts;
    for (size_t i = 0; i < ranges.size(); ++i) cuts.push_back(slice_axis(x.locals()[i], mine, ranges[i].first, ranges[i].second));
    return cuts;
  };
  return apply(cut(a), cut(b), Placement::split(*axis));
}

// An op with a scalar: `partial` is the placement a Partial operand's result has, or nullopt when the
// op needs the whole value.
ShardedTensor with_scalar(const ShardedTensor& x, const char* op, std::optional<Placement> partial, const std::function<Tensor(const Tensor&)>& f) {
  if (x.placement().is_partial() && !partial)
    throw Error(cat(op, ": ", x.str(), " needs the whole value (the scalar would apply once per device); call allreduce() first"));
  return each(x, f, x.placement().is_partial() ? *partial : x.placement());
}

// The placement of -x for x Partial(op): -(a + b) = -a + -b, -max(a, b) = min(-a, -b).
Placement mirrored(PartialOp op) {
  switch (op) {
    case PartialOp::Sum: return Placement::partial(PartialOp::Sum);
    case PartialOp::Max: return Placement::partial(PartialOp::Min);
    case PartialOp::Min: return Placement::partial(PartialOp::Max);
  }
  return Placement::partial(op);
}

// Reductions: `op` is what the reduction does (mean: Sum, divided by the global count).
ShardedTensor reduce(const ShardedTensor& x, std::vector<int64_t> axes, bool keepdim, PartialOp op, bool mean, const char* name) {
  if (axes.empty())
    for (int64_t i = 0; i < x.ndim(); ++i) axes.push_back(i);
  for (int64_t& a : axes) a = normalize_axis(a, x.ndim(), name);
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  auto local = [&](const Tensor& t) {
    if (mean) return t.mean(axes, keepdim);
    switch (op) {
      case PartialOp::Sum: return t.sum(axes, keepdim);
      case PartialOp::Max: return t.max(axes, keepdim);
      case PartialOp::Min: return t.min(axes, keepdim);
    }
    return t;
  };
  const Placement& p = x.placement();
  switch (p.kind) {
    case Placement::Kind::Broadcast: return each(x, local, p);
    case Placement::Kind::Partial:
      if (p.op != op)
        throw Error(cat(name, ": ", x.str(), ": a ", name, " of ", p.str(), " values needs the whole value; call allreduce() first"));
      return each(x, local, p);
    case Placement::Kind::Split: break;
  }
  if (std::find(axes.begin(), axes.end(), p.axis) == axes.end()) {
    int64_t before = std::count_if(axes.begin(), axes.end(), [&](int64_t a) { return a < p.axis; });
    return each(x, local, Placement::split(keepdim ? p.axis : p.axis - before));
  }
  if (!mean) return each(x, local, Placement::partial(op));
  // Each device's mean, weighted by its share of the elements: the weighted means add to the mean.
  double total = static_cast<double>(x.shape()[at(p.axis)]);
  return each(x, [&](const Tensor& t) { return local(t) * (static_cast<double>(t.shape()[at(p.axis)]) / total); }, Placement::partial());
}

}  // namespace

// --- the tensor and its communication ---------------------------------------------------------

ShardedTensor::ShardedTensor(std::vector<Tensor> locals, Placement placement) : locals_(std::move(locals)), placement_(placement) {
  if (locals_.empty()) throw Error("ShardedTensor: no local tensors; give one per device (at least one)");
  checked_devices(devices(), "ShardedTensor");
  const Tensor& first = locals_.front();
  shape_ = first.shape();
  if (placement_.is_split()) {
    if (first.ndim() == 0) throw Error("ShardedTensor: a 0-d tensor cannot be Split; use Placement::broadcast()");
    placement_.axis = normalize_axis(placement_.axis, first.ndim(), "ShardedTensor");
    shape_[at(placement_.axis)] = 0;
  }
  for (const Tensor& l : locals_) {
    Shape outside = l.shape();
    if (placement_.is_split() && l.ndim() == first.ndim()) {
      if (l.shape()[at(placement_.axis)] < 1)
        throw Error(cat("ShardedTensor: the local on ", l.device(), " has shape ", shape_str(l.shape()), ": every piece of ", placement_.str(),
                        " needs at least one element"));
      shape_[at(placement_.axis)] += l.shape()[at(placement_.axis)];
      outside[at(placement_.axis)] = first.shape()[at(placement_.axis)];
    }
    if (outside != first.shape() || l.dtype() != first.dtype())
      throw Error(cat("ShardedTensor: locals of ", shape_str(first.shape()), " ", first.dtype().name(), " and ", shape_str(l.shape()), " ",
                      l.dtype().name(), " do not make one ", placement_.str(), " tensor; ",
                      placement_.is_split() ? "pieces differ only along the split axis" : "every local has the whole shape", ", in one dtype"));
  }
}

std::vector<std::string> ShardedTensor::devices() const {
  std::vector<std::string> out;
  for (const Tensor& l : locals_) out.push_back(l.device());
  return out;
}

std::string ShardedTensor::str() const { return cat(placement_.str(), " of ", shape_str(shape_), " over ", list_str(devices())); }

ShardedTensor Tensor::shard(const std::vector<std::string>& devices, int64_t axis) const { return shard(devices, Placement::split(axis)); }

ShardedTensor Tensor::shard(const std::vector<std::string>& devices, const Placement& placement) const {
  std::vector<std::string> names = checked_devices(devices, "shard");
  Placement p = checked_placement(placement, shape(), names.size(), "shard");
  std::vector<Tensor> locals;
  if (p.is_split()) {  // each device receives its piece only
    auto ranges = even_pieces(shape()[at(p.axis)], names.size());
    for (size_t i = 0; i < names.size(); ++i) locals.push_back(slice_axis(*this, p.axis, ranges[i].first, ranges[i].second).to(names[i]));
    return ShardedTensor(locals, p);
  }
  for (const std::string& name : names) locals.push_back(to(name));
  return place(locals, p);
}

Tensor ShardedTensor::to(const std::string& device) const {
  std::string dst = canonical_device_name(device);
  if (placement_.is_broadcast()) {  // the copy already there, else the first device's
    for (const Tensor& l : locals_)
      if (l.device() == dst) return l;
    return locals_.front().to(dst);
  }
  std::vector<Tensor> moved;
  for (const Tensor& l : locals_) moved.push_back(l.to(dst));
  if (placement_.is_split()) return Tensor::cat(moved, placement_.axis);
  Tensor acc = moved.front();  // Partial: folded in device order
  for (size_t i = 1; i < moved.size(); ++i) acc = fold(placement_.op, acc, moved[i]);
  return acc;
}

ShardedTensor ShardedTensor::allreduce() const {
  if (placement_.is_broadcast()) return *this;
  if (placement_.is_split())
    throw Error(cat("allreduce: ", str(), " is not Partial, so there is nothing to reduce; to give every device the whole tensor, "
                    "call redistribute(Placement::broadcast())"));
  // On the first device, then back to the others: the partials meet where the sum is computed.
  Tensor total = to(locals_.front().device());
  std::vector<Tensor> locals;
  for (const Tensor& l : locals_) locals.push_back(total.to(l.device()));
  return ShardedTensor(locals, Placement::broadcast());
}

ShardedTensor ShardedTensor::redistribute(Placement target) const {
  target = checked_placement(target, shape_, locals_.size(), "redistribute");
  if (target == placement_) return *this;
  if (placement_ == Placement::partial(PartialOp::Sum) && target.is_split()) {
    // Reduce-scatter: each device sums everyone's slice of its piece, and nothing more moves.
    auto ranges = even_pieces(shape_[at(target.axis)], locals_.size());
    std::vector<Tensor> locals;
    for (size_t j = 0; j < locals_.size(); ++j) {
      std::optional<Tensor> acc;
      for (const Tensor& l : locals_) {
        Tensor part = slice_axis(l, target.axis, ranges[j].first, ranges[j].second).to(locals_[j].device());
        acc = acc ? *acc + part : part;
      }
      locals.push_back(*acc);
    }
    return ShardedTensor(locals, target);
  }
  if (placement_.is_split() && target == Placement::partial(PartialOp::Sum)) {
    // Each piece padded with zeros to the whole shape: the pieces add up to the tensor, with no copy.
    auto ranges = pieces(*this);
    std::vector<Tensor> locals;
    for (size_t i = 0; i < locals_.size(); ++i) {
      Pairs pad(shape_.size(), {0, 0});
      pad[at(placement_.axis)] = {ranges[i].first, shape_[at(placement_.axis)] - ranges[i].second};
      locals.push_back(locals_[i].pad(pad));
    }
    return ShardedTensor(locals, target);
  }
  // Otherwise through the whole value on every device: an allreduce or an allgather.
  std::vector<Tensor> whole;
  if (placement_.is_partial()) whole = allreduce().locals_;
  if (placement_.is_broadcast()) whole = locals_;
  if (placement_.is_split())
    for (const Tensor& l : locals_) whole.push_back(to(l.device()));
  return place(whole, target);
}

ShardedTensor& ShardedTensor::realize() {
  realize_all(locals_);
  return *this;
}

// --- elementwise --------------------------------------------------------------------------------

ShardedTensor ShardedTensor::operator+(const ShardedTensor& o) const {
  return binary(*this, o, "add", "+", Linearity::Add, [](const Tensor& a, const Tensor& b) { return a + b; });
}
ShardedTensor ShardedTensor::operator-(const ShardedTensor& o) const {
  return binary(*this, o, "sub", "-", Linearity::Add, [](const Tensor& a, const Tensor& b) { return a - b; });
}
ShardedTensor ShardedTensor::operator*(const ShardedTensor& o) const {
  return binary(*this, o, "mul", "*", Linearity::Mul, [](const Tensor& a, const Tensor& b) { return a * b; });
}
ShardedTensor ShardedTensor::operator/(const ShardedTensor& o) const {
  return binary(*this, o, "div", "/", Linearity::Div, [](const Tensor& a, const Tensor& b) { return a / b; });
}
ShardedTensor ShardedTensor::maximum(const ShardedTensor& o) const {
  return binary(*this, o, "maximum", "max", Linearity::None, [](const Tensor& a, const Tensor& b) { return a.maximum(b); });
}
ShardedTensor ShardedTensor::minimum(const ShardedTensor& o) const {
  return binary(*this, o, "minimum", "min", Linearity::None, [](const Tensor& a, const Tensor& b) { return a.minimum(b); });
}

// max(a_i) + s = max(a_i + s), but sum(a_i) + s is not sum(a_i + s); scaling by a negative swaps max and min.
ShardedTensor ShardedTensor::operator+(double s) const {
  std::optional<Placement> p;
  if (placement_.op != PartialOp::Sum) p = placement_;
  return with_scalar(*this, "add", p, [s](const Tensor& t) { return t + s; });
}
ShardedTensor ShardedTensor::operator-(double s) const {
  std::optional<Placement> p;
  if (placement_.op != PartialOp::Sum) p = placement_;
  return with_scalar(*this, "sub", p, [s](const Tensor& t) { return t - s; });
}
ShardedTensor ShardedTensor::operator*(double s) const {
  return with_scalar(*this, "mul", s < 0 ? mirrored(placement_.op) : placement_, [s](const Tensor& t) { return t * s; });
}
ShardedTensor ShardedTensor::operator/(double s) const {
  return with_scalar(*this, "div", s < 0 ? mirrored(placement_.op) : placement_, [s](const Tensor& t) { return t / s; });
}
ShardedTensor ShardedTensor::operator-() const {
  return with_scalar(*this, "neg", mirrored(placement_.op), [](const Tensor& t) { return -t; });
}

ShardedTensor ShardedTensor::map(const std::function<Tensor(const Tensor&)>& f, const std::string& name) const {
  if (placement_.is_partial())
    throw Error(cat(name, ": ", str(), " needs the whole value (", name, " of a sum is not the sum of ", name, "s); call allreduce() first"));
  return each(*this, [&](const Tensor& t) {
    Tensor out = f(t);
    if (out.shape() != t.shape())
      throw Error(cat(name, ": the function turned a local of ", shape_str(t.shape()), " into ", shape_str(out.shape()),
                      "; map takes elementwise functions only (use the ShardedTensor's own reductions and movement)"));
    return out;
  }, placement_);
}

ShardedTensor ShardedTensor::relu() const { return map([](const Tensor& t) { return t.relu(); }, "relu"); }
ShardedTensor ShardedTensor::gelu() const { return map([](const Tensor& t) { return t.gelu(); }, "gelu"); }
ShardedTensor ShardedTensor::exp() const { return map([](const Tensor& t) { return t.exp(); }, "exp"); }
ShardedTensor ShardedTensor::tanh() const { return map([](const Tensor& t) { return t.tanh(); }, "tanh"); }
ShardedTensor ShardedTensor::sigmoid() const { return map([](const Tensor& t) { return t.sigmoid(); }, "sigmoid"); }
ShardedTensor ShardedTensor::cast(DType dtype) const { return map([dtype](const Tensor& t) { return t.cast(dtype); }, "cast"); }

// --- reductions and matmul ----------------------------------------------------------------------

ShardedTensor ShardedTensor::sum(std::vector<int64_t> axes, bool keepdim) const { return reduce(*this, axes, keepdim, PartialOp::Sum, false, "sum"); }
ShardedTensor ShardedTensor::mean(std::vector<int64_t> axes, bool keepdim) const { return reduce(*this, axes, keepdim, PartialOp::Sum, true, "mean"); }
ShardedTensor ShardedTensor::max(std::vector<int64_t> axes, bool keepdim) const { return reduce(*this, axes, keepdim, PartialOp::Max, false, "max"); }
ShardedTensor ShardedTensor::min(std::vector<int64_t> axes, bool keepdim) const { return reduce(*this, axes, keepdim, PartialOp::Min, false, "min"); }

namespace {

ShardedTensor along(const ShardedTensor& x, int64_t axis, const char* name, Tensor (Tensor::*f)(int64_t) const) {
  int64_t a = normalize_axis(axis, x.ndim(), name);
  if (x.placement().is_partial() || (x.placement().is_split() && x.placement().axis == a))
    throw Error(cat(name, ": along axis ", a, " of ", x.str(), " needs every value of that axis on one device; call ",
                    x.placement().is_partial() ? "allreduce()" : "redistribute() to another axis or Placement::broadcast()", " first"));
  return each(x, [&](const Tensor& t) { return (t.*f)(a); }, x.placement());
}

}  // namespace

ShardedTensor ShardedTensor::softmax(int64_t axis) const { return along(*this, axis, "softmax", &Tensor::softmax); }
ShardedTensor ShardedTensor::log_softmax(int64_t axis) const { return along(*this, axis, "log_softmax", &Tensor::log_softmax); }

ShardedTensor ShardedTensor::matmul(const ShardedTensor& other) const {
  check_same_devices(*this, other, "matmul");
  const Placement &pa = placement_, &pb = other.placement_;
  std::optional<Placement> result;
  if (pa.is_broadcast() && pb.is_broadcast()) result = pa;  // any shapes: each device computes the whole product
  if (!result && (ndim() < 2 || other.ndim() != 2))
    throw Error(cat("matmul: ", str(), " @ ", other.str(), ": sharded operands need a left operand of at least 2 dimensions and a 2-D "
                    "right one (Broadcast @ Broadcast takes any); reshape them first"));
  if (!result && shape_.back() != other.shape_[0])
    throw Error(cat("matmul: inner sizes differ: ", shape_str(shape_), " @ ", shape_str(other.shape_), " (", shape_.back(), " vs ",
                    other.shape_[0], ")"));
  int64_t last = ndim() - 1;
  Placement sum = Placement::partial(PartialOp::Sum);
  if (!result && ((pa == sum && pb.is_broadcast()) || (pa.is_broadcast() && pb == sum))) result = sum;
  if (!result && pa == Placement::split(last) && pb == Placement::split(0)) {
    std::vector<int64_t> ka, kb;
    for (size_t i = 0; i < locals_.size(); ++i) {
      ka.push_back(locals_[i].shape().back());
      kb.push_back(other.locals_[i].shape()[0]);
    }
    if (ka != kb)
      throw Error(cat("matmul: ", str(), " @ ", other.str(), ": the contraction axis is split into different pieces; "
                      "redistribute both to tensor_split pieces (redistribute(Placement::split(...)))"));
    result = sum;  // each device's k-slice of the product
  }
  if (!result && pa.is_split() && pa.axis < last && pb.is_broadcast()) result = pa;     // rows (or batches)
  if (!result && pa.is_broadcast() && pb == Placement::split(1)) result = Placement::split(last);  // columns
  if (!result)
    throw Error(cat("matmul: ", str(), " @ ", other.str(), " is not a sharded product kiln computes without moving data; it takes "
                    "Split(last) @ Split(0), Split(other axis) @ Broadcast, Broadcast @ Split(1), Partial(sum) with Broadcast, "
                    "Broadcast @ Broadcast: redistribute() an operand to one of those"));
  std::vector<Tensor> locals;
  for (size_t i = 0; i < locals_.size(); ++i) locals.push_back(locals_[i].matmul(other.locals_[i]));
  return ShardedTensor(locals, *result);
}

// --- movement -----------------------------------------------------------------------------------

ShardedTensor ShardedTensor::reshape(Shape shape) const {
  auto unknown = std::find(shape.begin(), shape.end(), -1);
  if (unknown != shape.end()) {
    int64_t known = 1;
    for (int64_t d : shape) known *= d == -1 ? 1 : d;
    if (known > 0 && kiln::numel(shape_) % known == 0) *unknown = kiln::numel(shape_) / known;
  }
  if (std::count(shape.begin(), shape.end(), -1) > 0 || kiln::numel(shape) != kiln::numel(shape_))
    throw Error(cat("reshape: ", str(), " cannot be reshaped to ", shape_str(shape), " (", kiln::numel(shape_), " elements; at most one -1)"));
  if (!placement_.is_split()) return each(*this, [&](const Tensor& t) { return t.reshape(shape); }, placement_);
  // The split axis survives when some axis j of the new shape has its size and the same product before it.
  int64_t a = placement_.axis, before = 1;
  for (int64_t i = 0; i < a; ++i) before *= shape_[at(i)];
  int64_t product = 1;
  for (size_t j = 0; j < shape.size(); product *= shape[j], ++j) {
    if (product != before || shape[j] != shape_[at(a)]) continue;
    return each(*this, [&](const Tensor& t) {
      Shape local = shape;
      local[j] = t.shape()[at(a)];
      return t.reshape(local);
    }, Placement::split(static_cast<int64_t>(j)));
  }
  throw Error(cat("reshape: ", str(), " to ", shape_str(shape), " would merge or split the split axis ", a,
                  "; keep that axis whole in the new shape, or redistribute(Placement::broadcast()) first"));
}

ShardedTensor ShardedTensor::permute(std::vector<int64_t> order) const {
  std::vector<int64_t> sorted;
  for (int64_t& o : order) sorted.push_back(o = normalize_axis(o, ndim(), "permute"));
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < static_cast<int64_t>(sorted.size()); ++i)
    if (sorted.size() != shape_.size() || sorted[at(i)] != i)
      throw Error(cat("permute: the order must list each of the ", ndim(), " axes of ", str(), " once"));
  Placement p = placement_;
  if (p.is_split()) p.axis = std::find(order.begin(), order.end(), p.axis) - order.begin();
  return each(*this, [&](const Tensor& t) { return t.permute(order); }, p);
}

ShardedTensor ShardedTensor::transpose(int64_t a, int64_t b) const {
  std::vector<int64_t> order;
  for (int64_t i = 0; i < ndim(); ++i) order.push_back(i);
  std::swap(order[at(normalize_axis(a, ndim(), "transpose"))], order[at(normalize_axis(b, ndim(), "transpose"))]);
  return permute(order);
}

// --- the tensor-parallel Linear pair ------------------------------------------------------------

namespace nn {

namespace {

// Each device's piece of `full` (detached) made a parameter named `name`_shard<i> by `add`.
ShardedTensor parameter_shards(const std::function<Tensor(const std::string&, Tensor)>& add, const std::string& name, const Tensor& full,
                               const std::vector<std::string>& devices, Placement placement) {
  std::vector<Tensor> locals;
  std::vector<Tensor> pieces = full.detach().shard(devices, placement).locals();
  for (size_t i = 0; i < pieces.size(); ++i) locals.push_back(add(cat(name, "_shard", i), pieces[i].contiguous()));
  return ShardedTensor(locals, placement);
}

void check_features(const char* layer, const ShardedTensor& x, const ShardedTensor& weight) {
  if (x.ndim() < 2 || x.shape().back() != weight.shape()[1])
    throw Error(cat(layer, ": input ", x.str(), " must have at least 2 dimensions and end in in_features = ", weight.shape()[1]));
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(int64_t in, int64_t out, const std::vector<std::string>& devices, bool bias)
    : ColumnParallelLinear(Linear(in, out, bias), devices) {}

ColumnParallelLinear::ColumnParallelLinear(const Linear& full, const std::vector<std::string>& devices)
    : weight(parameter_shards([this](const std::string& n, Tensor v) { return register_parameter(n, v); }, "weight", full.weight, devices,
                              Placement::split(0))) {
  if (full.bias)
    bias = parameter_shards([this](const std::string& n, Tensor v) { return register_parameter(n, v); }, "bias", *full.bias, devices,
                            Placement::split(0));
}

ShardedTensor ColumnParallelLinear::forward(const ShardedTensor& x) const {
  check_features("ColumnParallelLinear", x, weight);
  if (!x.placement().is_broadcast())
    throw Error(cat("ColumnParallelLinear: input ", x.str(), " must be Broadcast (every device needs all input features): "
                    "x.redistribute(Placement::broadcast())"));
  ShardedTensor y = x.matmul(weight.transpose(0, 1));  // Split(last): each device its output features
  return bias ? y + *bias : y;
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  return forward(x.shard(weight.devices(), Placement::broadcast())).to(x.device());
}

RowParallelLinear::RowParallelLinear(int64_t in, int64_t out, const std::vector<std::string>& devices, bool bias)
    : RowParallelLinear(Linear(in, out, bias), devices) {}

RowParallelLinear::RowParallelLinear(const Linear& full, const std::vector<std::string>& devices)
    : weight(parameter_shards([this](const std::string& n, Tensor v) { return register_parameter(n, v); }, "weight", full.weight, devices,
                              Placement::split(1))) {
  if (full.bias)
    bias = register_parameter("bias", full.bias->detach().to(devices.front()).contiguous()).shard(devices, Placement::partial(PartialOp::Sum));
}

ShardedTensor RowParallelLinear::forward(const ShardedTensor& x) const {
  check_features("RowParallelLinear", x, weight);
  if (x.placement() != Placement::split(x.ndim() - 1))
    throw Error(cat("RowParallelLinear: input ", x.str(), " must be Split along its last axis (ColumnParallelLinear's output): "
                    "x.redistribute(Placement::split(-1))"));
  ShardedTensor y = x.matmul(weight.transpose(0, 1));  // Partial(sum): each device's input features' share
  if (bias) y = y + *bias;
  return y.allreduce();
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  return forward(x.shard(weight.devices(), Placement::split(-1))).to(x.device());
}

}  // namespace nn
}  // namespace kiln
