#include "frontend/nn.h"

#include "frontend/detail.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace kiln::nn {

namespace {

void check_groups(const char* op, int64_t in, int64_t out, int64_t groups) {
  if (groups <= 0 || in % groups != 0 || out % groups != 0)
    throw Error(kiln::cat(op, ": in_channels ", in, " and out_channels ", out, " must both be divisible by groups ", groups));
}

void check_rank(const Tensor& x, int64_t rank, const char* op, const char* layout) {
  if (x.ndim() != rank)
    throw Error(kiln::cat(op, ": expected a ", rank, "-D input ", layout, ", got shape ", shape_str(x.shape())));
}


// t summed down to `shape`, which t broadcasts from (leading axes dropped, size-1 axes kept).
Tensor sum_to(const Tensor& t, const Shape& shape) {
  size_t lead = t.shape().size() - shape.size();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < t.shape().size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && t.shape()[i] != 1)) axes.push_back(static_cast<int64_t>(i));
  return axes.empty() ? t : t.sum(axes, true).reshape(shape);
}

// y = (x - mean) * rsqrt(var + eps) * w + b, mean and the biased variance taken over `axes`; w and b
// (optional) already broadcast against x. Its gradient is set in closed form, as PyTorch's native norms
// compute it: with xhat the normalized x, rstd = rsqrt(var + eps), g = dy * w and means over `axes`,
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),   dw = sum(dy * xhat),   db = sum(dy)
// (dw and db summed over the axes w and b broadcast along). Differentiated op by op, the two-pass
// statistics gave the backward six reductions over the whole input, each a kernel (batch norm's 8 per
// layer were 16% of a ResNet step); this has two, and when w is constant along `axes` (batch norm)
// mean(g) and mean(g * xhat) are db and dw scaled, so dw and db cost none of their own.
//
// With `across` (synchronized batch norm: it sums a tensor over every process), the statistics are the
// whole batch's across processes: the sums over `axes` and the count are summed across, and so are
// sum(g) and sum(g * xhat) in dx, whose means divide by the count across; dw and db stay this process's
// sums, as data parallel training averages them with every other gradient.
struct Normalized {
  Tensor y, mean, var;
  double count;  // the values each statistic is taken over (across processes when synchronized)
};
using SumAcross = std::function<Tensor(const Tensor&)>;
Normalized normalize(const Tensor& x, const std::vector<int64_t>& axes, double eps, const std::optional<Tensor>& w,
                     const std::optional<Tensor>& b, const SumAcross& across = {}) {
  int64_t n = 1;
  for (int64_t a : axes) n *= x.shape()[static_cast<size_t>(a)];
  double count = static_cast<double>(n);
  Tensor mean, centered, var;
  if (across) {  // two passes over the batch of every process; the collectives' results carry no graph
    count = static_cast<double>(across(Tensor::full({}, count, dtypes::int64)).item<int64_t>());
    mean = across(x.sum(axes, true)) / count, centered = x - mean;
    var = across((centered * centered).sum(axes, true)) / count;
  } else {
    mean = x.mean(axes, true), centered = x - mean;
    var = (centered * centered).mean(axes, true);
  }
  Tensor rstd = (var + eps).rsqrt(), xhat = centered * rstd;
  Tensor y = w ? xhat * *w : xhat;
  if (b) y = y + *b;
  if (!grad_enabled() || !is_float(x.dtype())) return {y, mean, var, count};

  // w's broadcast axes are exactly `axes`: its gradient's reduction is the one dx needs.
  auto broadcast_along_axes = [&](const Tensor& p) {
    if (p.ndim() != x.ndim()) return false;
    for (size_t i = 0; i < x.shape().size(); ++i) {
      bool along = std::find(axes.begin(), axes.end(), static_cast<int64_t>(i)) != axes.end();
      if (p.shape()[i] != (along ? 1 : x.shape()[i])) return false;
    }
    return true;
  };
  bool shared = (!w || broadcast_along_axes(*w)) && (!b || broadcast_along_axes(*b));
  std::vector<Tensor> inputs{x};
  if (w) inputs.push_back(*w);
  if (b) inputs.push_back(*b);
  std::weak_ptr<const UOp> xhat_node = xhat.uop(), rstd_node = rstd.uop();
  std::optional<std::weak_ptr<const UOp>> w_node;
  if (w) w_node = w->uop();
  Shape xs = x.shape(), rs = rstd.shape(), ws = w ? w->shape() : Shape{}, bs = b ? b->shape() : Shape{};
  bool has_w = w.has_value(), has_b = b.has_value();
  detail::set_custom_gradient(y, inputs, [=](const Tensor& dy, const std::vector<bool>& wanted) {
    UOpPtr xhat_u = xhat_node.lock(), rstd_u = rstd_node.lock(), w_u = w_node ? w_node->lock() : nullptr;
    if (!xhat_u || !rstd_u || (has_w && !w_u)) throw InternalError("a normalization's custom gradient outlived its graph");
    Tensor xh(xhat_u, xs), rs_t(rstd_u, rs);
    std::vector<std::optional<Tensor>> out(wanted.size());
    size_t wi = 1, bi = has_w ? 2 : 1;
    if (shared) {
      Tensor s1 = dy.sum(axes, true), s2 = (dy * xh).sum(axes, true);
      if (wanted[0]) {
        Tensor scale = has_w ? Tensor(w_u, ws) * rs_t : rs_t;
        Tensor t1 = s1, t2 = s2;
        if (across) {  // one collective for both sums
          Tensor both = across(Tensor::cat({s1, s2}));
          int64_t k = s1.shape()[0];
          t1 = both.slice(0, 0, k), t2 = both.slice(0, k, 2 * k);
        }
        out[0] = scale * (dy - (t1 + xh * t2) * (1.0 / count));
      }
      if (has_w && wanted[wi]) out[wi] = s2.reshape(ws);
      if (has_b && wanted[bi]) out[bi] = s1.reshape(bs);
      return out;
    }
    if (across) throw InternalError("normalize: statistics summed across processes need w and b broadcast along the axes (batch norm)");
    if (wanted[0]) {
      Tensor g = has_w ? dy * Tensor(w_u, ws) : dy;
      out[0] = rs_t * (g - g.mean(axes, true) - xh * (g * xh).mean(axes, true));
    }
    if (has_w && wanted[wi]) out[wi] = sum_to(dy * xh, ws);
    if (has_b && wanted[bi]) out[bi] = sum_to(dy, bs);
    return out;
  });
  return {y, mean, var, count};
}

}  // namespace

Tensor init_uniform(const Shape& shape, double bound) { return Tensor::rand(shape) * (2 * bound) - bound; }

// --- Module ----------------------------------------------------------------------------------

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  value.realize();  // initial values are computed once, not at every forward
  value.requires_grad_();
  params_.emplace_back(name, value);
  return value;
}

Tensor Module::register_buffer(const std::string& name, Tensor value) {
  value.realize();
  buffers_.emplace_back(name, value);
  return value;
}

void Module::collect(const std::string& prefix, bool params, NamedTensors& out) const {
  for (const auto& [name, t] : params ? params_ : buffers_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", params, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", true, out);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers()) out.push_back(t);
  return out;
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : named_parameters()) out.emplace(name, t);
  for (auto& [name, t] : named_buffers()) out.emplace(name, t);
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  std::map<std::string, Tensor> own = state_dict();
  std::vector<std::string> problems;
  for (auto& [name, t] : own) {
    auto it = state.find(name);
    if (it == state.end()) {
      if (strict) problems.push_back(kiln::cat("missing \"", name, "\" ", shape_str(t.shape()), " ", t.dtype().name()));
      continue;
    }
    if (it->second.shape() != t.shape() || it->second.dtype() != t.dtype())
      problems.push_back(kiln::cat("\"", name, "\" is ", shape_str(it->second.shape()), " ", it->second.dtype().name(), " in the file but ",
                                   shape_str(t.shape()), " ", t.dtype().name(), " in the model"));
  }
  if (strict)
    for (auto& [name, t] : state)
      if (!own.count(name)) problems.push_back(kiln::cat("unexpected \"", name, "\" ", shape_str(t.shape())));
  if (!problems.empty()) {
    std::string msg = "load_state_dict: the state does not fit the model:";
    for (const std::string& p : problems) msg += "\n  " + p;
    throw Error(msg + (strict ? "\n(strict=false skips missing and unexpected entries, not mismatched ones)" : ""));
  }
  NoGradGuard no_grad;
  std::vector<Tensor> loaded;
  for (auto& [name, t] : own) {
    auto it = state.find(name);
    if (it == state.end()) continue;
    Tensor value = it->second.device() == t.device() ? it->second : it->second.to(t.device());
    Tensor target = t;
    target.assign(value.contiguous());
    loaded.push_back(target);
  }
  realize_all(loaded);
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

Sequential& Sequential::add(const std::string& name, std::shared_ptr<Module> m) {
  layers_.push_back(register_module(name, std::move(m)));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& layer : layers_) y = layer->forward(y);
  return y;
}

// --- layers ----------------------------------------------------------------------------------

Unflatten::Unflatten(int64_t dim, std::vector<int64_t> sizes) : dim(dim), unflattened_size(std::move(sizes)) {
  if (unflattened_size.empty()) throw Error("Unflatten: unflattened_size is empty; give the sizes the axis splits into, e.g. {C, H, W}");
  if (std::count(unflattened_size.begin(), unflattened_size.end(), -1) > 1 ||
      std::any_of(unflattened_size.begin(), unflattened_size.end(), [](int64_t n) { return n < -1; }))
    throw Error(kiln::cat("Unflatten: unflattened_size ", shape_str(unflattened_size), " must hold sizes >= 0 and at most one -1 (inferred)"));
}

Tensor Unflatten::forward(const Tensor& x) {
  if (dim < -x.ndim() || dim >= x.ndim())
    throw Error(kiln::cat("Unflatten: dim ", dim, " is out of range for input ", shape_str(x.shape()), " (", x.ndim(), " axes)"));
  auto axis = static_cast<size_t>(dim < 0 ? dim + x.ndim() : dim);
  int64_t size = x.shape()[axis], known = 1;
  for (int64_t n : unflattened_size) known *= n == -1 ? 1 : n;
  bool infer = std::count(unflattened_size.begin(), unflattened_size.end(), -1) == 1;
  if (infer ? (known == 0 || size % known != 0) : known != size)
    throw Error(kiln::cat("Unflatten: unflattened_size ", shape_str(unflattened_size), " does not multiply to the size ", size, " of axis ", axis,
                          " of input ", shape_str(x.shape())));
  Shape out(x.shape().begin(), x.shape().begin() + static_cast<std::ptrdiff_t>(axis));
  for (int64_t n : unflattened_size) out.push_back(n == -1 ? size / known : n);
  out.insert(out.end(), x.shape().begin() + static_cast<std::ptrdiff_t>(axis) + 1, x.shape().end());
  return x.reshape(out);
}

// PyTorch's default for Linear and Conv2d: kaiming_uniform(a = sqrt(5)) for the weight, which is
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias.
Linear::Linear(int64_t in, int64_t out, bool has_bias) {
  if (in <= 0 || out <= 0) throw Error(kiln::cat("Linear: sizes must be positive, got in=", in, " out=", out));
  double bound = 1.0 / std::sqrt(static_cast<double>(in));
  weight = register_parameter("weight", init_uniform({out, in}, bound));
  if (has_bias) bias = register_parameter("bias", init_uniform({out}, bound));
}

Tensor Linear::forward(const Tensor& x) {
  if (x.ndim() == 0 || x.shape().back() != weight.shape()[1])
    throw Error(kiln::cat("Linear: input ", shape_str(x.shape()), " must end in in_features = ", weight.shape()[1]));
  Tensor y = x.matmul(weight.transpose(0, 1));
  return bias ? y + *bias : y;
}

Conv2d::Conv2d(int64_t in, int64_t out, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
               std::array<int64_t, 2> dilation, int64_t groups, bool has_bias)
    : stride(stride), padding(padding), dilation(dilation), groups(groups) {
  check_groups("Conv2d", in, out, groups);
  double fan_in = static_cast<double>(in / groups * kernel[0] * kernel[1]);
  double bound = 1.0 / std::sqrt(fan_in);
  weight = register_parameter("weight", init_uniform({out, in / groups, kernel[0], kernel[1]}, bound));
  if (has_bias) bias = register_parameter("bias", init_uniform({out}, bound));
}

Tensor Conv2d::forward(const Tensor& x) { return x.conv2d(weight, bias, stride, padding, dilation, groups); }

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                                 std::array<int64_t, 2> padding, std::array<int64_t, 2> output_padding, int64_t groups, bool has_bias,
                                 std::array<int64_t, 2> dilation)
    : stride(stride), padding(padding), output_padding(output_padding), dilation(dilation), groups(groups) {
  check_groups("ConvTranspose2d", in, out, groups);
  // PyTorch's fan-in of a transposed conv's weight (in, out/groups, kh, kw) is its dimension 1 times the kernel.
  double bound = 1.0 / std::sqrt(static_cast<double>(out / groups * kernel[0] * kernel[1]));
  weight = register_parameter("weight", init_uniform({in, out / groups, kernel[0], kernel[1]}, bound));
  if (has_bias) bias = register_parameter("bias", init_uniform({out}, bound));
}

Tensor ConvTranspose2d::forward(const Tensor& x) { return x.conv_transpose2d(weight, bias, stride, padding, output_padding, groups, dilation); }

Conv1d::Conv1d(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation, int64_t groups, bool has_bias)
    : stride(stride), padding(padding), dilation(dilation), groups(groups) {
  check_groups("Conv1d", in, out, groups);
  double bound = 1.0 / std::sqrt(static_cast<double>(in / groups * kernel));
  weight = register_parameter("weight", init_uniform({out, in / groups, kernel}, bound));
  if (has_bias) bias = register_parameter("bias", init_uniform({out}, bound));
}

Tensor Conv1d::forward(const Tensor& x) { return x.conv1d(weight, bias, stride, padding, dilation, groups); }

BatchNorm::BatchNorm(const char* name, std::vector<int64_t> ranks, const char* layouts, int64_t channels, double eps, double momentum,
                     bool affine)
    : eps(eps), momentum(momentum), name_(name), ranks_(std::move(ranks)), layouts_(layouts) {
  if (affine) {
    weight = register_parameter("weight", Tensor::ones({channels}));
    bias = register_parameter("bias", Tensor::zeros({channels}));
  }
  running_mean = register_buffer("running_mean", Tensor::zeros({channels}));
  running_var = register_buffer("running_var", Tensor::ones({channels}));
  num_batches_tracked = register_buffer("num_batches_tracked", Tensor::zeros({}, dtypes::int64));
}

Tensor BatchNorm::forward(const Tensor& x) {
  if (std::find(ranks_.begin(), ranks_.end(), x.ndim()) == ranks_.end())
    throw Error(kiln::cat(name_, ": expects ", layouts_, ", got shape ", shape_str(x.shape())));
  int64_t c = running_mean.shape()[0];
  if (x.shape()[1] != c) throw Error(kiln::cat(name_, ": input ", shape_str(x.shape()), " has ", x.shape()[1], " channels, the layer ", c));
  Shape cs = detail::channel_shape(c, x.ndim());
  std::optional<Tensor> w, b;
  if (weight) w = weight->reshape(cs), b = bias->reshape(cs);
  if (!training()) {
    Tensor y = (x - running_mean.reshape(cs)) * (running_var.reshape(cs) + eps).rsqrt();
    return w ? y * *w + *b : y;
  }
  std::vector<int64_t> axes{0};
  for (int64_t i = 2; i < x.ndim(); ++i) axes.push_back(i);
  Normalized norm = normalize(x, axes, eps, w, b, sum_across_processes);  // the biased variance, for normalizing (as PyTorch)
  if (norm.count <= 1)
    throw Error(kiln::cat(name_, ": training needs more than one value per channel, input ", shape_str(x.shape()),
                          sum_across_processes ? kiln::cat(" (", norm.count, " across processes)") : ""));
  NoGradGuard no_grad;  // running statistics are data, updated with the unbiased variance
  double unbias = norm.count / (norm.count - 1);
  running_mean.assign(running_mean * (1 - momentum) + norm.mean.reshape({c}) * momentum);
  running_var.assign(running_var * (1 - momentum) + norm.var.reshape({c}) * (momentum * unbias));
  num_batches_tracked.assign(num_batches_tracked + 1.0);
  return norm.y;
}

LayerNorm::LayerNorm(Shape shape, double eps, bool affine) : normalized_shape(shape), eps(eps) {
  if (affine) {
    weight = register_parameter("weight", Tensor::ones(shape));
    bias = register_parameter("bias", Tensor::zeros(shape));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  int64_t k = static_cast<int64_t>(normalized_shape.size());
  if (x.ndim() < k || !std::equal(normalized_shape.begin(), normalized_shape.end(), x.shape().end() - k))
    throw Error(kiln::cat("LayerNorm: input ", shape_str(x.shape()), " must end in the normalized shape ", shape_str(normalized_shape)));
  std::vector<int64_t> axes;
  for (int64_t i = x.ndim() - k; i < x.ndim(); ++i) axes.push_back(i);
  return normalize(x, axes, eps, weight, bias).y;
}

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double eps, bool affine) : num_groups(groups), num_channels(channels), eps(eps) {
  if (groups <= 0 || channels % groups != 0)
    throw Error(kiln::cat("GroupNorm: num_channels ", channels, " must be divisible by num_groups ", groups));
  if (affine) {
    weight = register_parameter("weight", Tensor::ones({channels}));
    bias = register_parameter("bias", Tensor::zeros({channels}));
  }
}

Tensor GroupNorm::forward(const Tensor& x) {
  if (x.ndim() < 2 || x.shape()[1] != num_channels)
    throw Error(kiln::cat("GroupNorm: input ", shape_str(x.shape()), " must be (N, ", num_channels, ", ...)"));
  Tensor g = x.reshape({x.shape()[0], num_groups, -1});
  Tensor y = normalize(g, {2}, eps, std::nullopt, std::nullopt).y.reshape(x.shape());
  if (weight) {
    Shape cs = detail::channel_shape(num_channels, x.ndim());
    y = y * weight->reshape(cs) + bias->reshape(cs);
  }
  return y;
}

InstanceNorm::InstanceNorm(const char* name, int64_t spatial, int64_t features, double eps, double momentum, bool affine, bool track)
    : num_features(features), eps(eps), name_(name), spatial_(spatial) {
  if (features <= 0) throw Error(kiln::cat(name, ": num_features must be positive, got ", features));
  if (!(momentum >= 0 && momentum <= 1)) throw Error(kiln::cat(name, ": momentum must be in [0, 1], got ", momentum));
  if (track)
    throw Error(kiln::cat(name, ": track_running_stats is not implemented; each sample is normalized with its own statistics ",
                          "(track_running_stats=false, PyTorch's default)"));
  if (affine) {
    weight = register_parameter("weight", Tensor::ones({features}));
    bias = register_parameter("bias", Tensor::zeros({features}));
  }
}

Tensor InstanceNorm::forward(const Tensor& x) {
  bool batched = x.ndim() == spatial_ + 2;
  if ((!batched && x.ndim() != spatial_ + 1) || x.shape()[batched ? 1 : 0] != num_features)
    throw Error(kiln::cat(name_, ": input ", shape_str(x.shape()), " must be (N, ", num_features, spatial_ == 1 ? ", L)" : ", H, W)", " or (",
                          num_features, spatial_ == 1 ? ", L)" : ", H, W)"));
  Tensor b = batched ? x : x.unsqueeze(0);
  std::vector<int64_t> axes;
  for (int64_t i = 2; i < b.ndim(); ++i) axes.push_back(i);
  std::optional<Tensor> w, sh;
  if (weight) {
    Shape cs = detail::channel_shape(num_features, b.ndim());
    w = weight->reshape(cs), sh = bias->reshape(cs);
  }
  Tensor y = normalize(b, axes, eps, w, sh).y;
  return batched ? y : y.squeeze(0);
}

PReLU::PReLU(int64_t n, double init) {
  if (n <= 0) throw Error(kiln::cat("PReLU: num_parameters must be positive, got ", n));
  weight = register_parameter("weight", Tensor::full({n}, init));
}

Tensor PReLU::forward(const Tensor& x) {
  int64_t n = weight.shape()[0];
  Tensor w = weight.cast(x.dtype());
  if (n != 1) {
    if (x.ndim() < 2 || x.shape()[1] != n)
      throw Error(kiln::cat("PReLU: ", n, " parameters (one per channel) need an input (N, ", n, ", ...), got ", shape_str(x.shape())));
    w = w.reshape(detail::channel_shape(n, x.ndim()));
  } else {
    w = w.reshape(Shape(static_cast<size_t>(x.ndim()), 1));
  }
  return x.gt(x.zeros_like()).where(x, x * w.expand(x.shape()));
}

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> pad) {
  Tensor init = Tensor::randn({num, dim});
  if (pad) {
    if (*pad < -num || *pad >= num)
      throw Error(kiln::cat("Embedding: padding_idx ", *pad, " is out of range for ", num, " embeddings (use ", -num, "..", num - 1, ")"));
    padding_idx = *pad < 0 ? *pad + num : *pad;
    // The padding row starts at zero, as in PyTorch.
    Tensor row = Tensor::arange(num, dtypes::int64).eq(Tensor::full({}, static_cast<double>(*padding_idx), dtypes::int64)).reshape({num, 1});
    init = row.where(init.zeros_like(), init);
  }
  weight = register_parameter("weight", init);
}

Tensor Embedding::forward(const Tensor& indices) {
  if (!is_int(indices.dtype())) throw Error(kiln::cat("Embedding: indices must be integers, got ", indices.dtype().name()));
  int64_t n = indices.numel(), dim = weight.shape()[1];
  Tensor flat = indices.reshape({n, 1});
  Tensor rows = weight.gather(0, flat.expand({n, dim}));  // gather checks the range
  if (padding_idx) {
    // The padding row's lookups carry its value but pass no gradient back to it.
    Tensor is_pad = flat.cast(dtypes::int64).eq(Tensor::full({}, static_cast<double>(*padding_idx), dtypes::int64, indices.device()));
    rows = is_pad.where(rows.detach(), rows);
  }
  Shape out = indices.shape();
  out.push_back(dim);
  return rows.reshape(out);
}

Dropout::Dropout(double p) : p(p) {
  if (p < 0 || p > 1) throw Error(kiln::cat("Dropout: p must be in [0, 1], got ", p));
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, training()); }

namespace {

// x with each group of elements zeroed with probability p, the rest scaled by 1 / (1 - p), when
// training: one draw per element of `draws`, a shape x broadcasts from.
Tensor dropped(const Tensor& x, double p, bool training, const Shape& draws) {
  if (!training || p == 0) return x;
  if (p == 1) return x.zeros_like();
  Tensor keep = Tensor::rand(draws, x.dtype(), x.device()).ge(Tensor::full(draws, p, x.dtype(), x.device())).expand(x.shape());
  return keep.where(x * (1.0 / (1.0 - p)), x.zeros_like());
}

}  // namespace

Dropout2d::Dropout2d(double p) : p(p) {
  if (p < 0 || p > 1) throw Error(kiln::cat("Dropout2d: p must be in [0, 1], got ", p));
}

Tensor Dropout2d::forward(const Tensor& x) {
  if (x.ndim() != 3 && x.ndim() != 4) throw Error(kiln::cat("Dropout2d: expected (N, C, H, W) (or (N, C, L), as PyTorch 1.13 reads a 3-D input), got ", shape_str(x.shape())));
  // 4-D: one draw per (N, C) plane. 3-D: PyTorch 1.13 reads it as (N, C, L) (with a warning that
  // Dropout1d is meant), one draw per (N, C) row.
  Shape planes = x.shape();
  planes[planes.size() - 1] = 1;
  if (x.ndim() == 4) planes[2] = 1;
  return dropped(x, p, training(), planes);
}

Tensor dropout(const Tensor& x, double p, bool training) {
  if (p < 0 || p > 1) throw Error(kiln::cat("dropout: p must be in [0, 1], got ", p));
  return dropped(x, p, training, x.shape());
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, std::optional<Tensor> mask, bool causal,
                                    std::optional<double> scale_override, double dropout_p) {
  if (q.ndim() < 2 || k.ndim() < 2 || v.ndim() < 2 || q.shape().back() != k.shape().back() ||
      k.shape()[static_cast<size_t>(k.ndim() - 2)] != v.shape()[static_cast<size_t>(v.ndim() - 2)])
    throw Error(kiln::cat("scaled_dot_product_attention: q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()),
                          " must be (..., L, E), (..., S, E), (..., S, Ev)"));
  double scale = scale_override.value_or(1.0 / std::sqrt(static_cast<double>(q.shape().back())));
  Tensor scores = q.matmul(k.transpose(-2, -1)) * scale;
  int64_t L = scores.shape()[static_cast<size_t>(scores.ndim() - 2)], S = scores.shape().back();
  Tensor neg_inf = scores.full_like(-std::numeric_limits<double>::infinity());
  if (causal) {
    Tensor i = Tensor::arange(L, dtypes::int32, q.device()).reshape({L, 1}), j = Tensor::arange(S, dtypes::int32, q.device()).reshape({1, S});
    scores = j.gt(i).where(neg_inf, scores);
  }
  if (mask) scores = is_bool(mask->dtype()) ? mask->where(scores, neg_inf) : scores + *mask;
  return dropout(scores.softmax(-1), dropout_p).matmul(v);
}

MultiheadAttention::MultiheadAttention(int64_t e, int64_t heads, bool has_bias, bool batch_first)
    : embed_dim(e), num_heads(heads), batch_first(batch_first) {
  if (heads <= 0 || e % heads != 0) throw Error(kiln::cat("MultiheadAttention: embed_dim ", e, " must be divisible by num_heads ", heads));
  // PyTorch: xavier_uniform for the packed projection, zero biases.
  in_proj_weight = register_parameter("in_proj_weight", init_uniform({3 * e, e}, std::sqrt(6.0 / static_cast<double>(4 * e))));
  if (has_bias) in_proj_bias = register_parameter("in_proj_bias", Tensor::zeros({3 * e}));
  out_proj = register_module("out_proj", std::make_shared<Linear>(e, e, has_bias));
  if (has_bias) {
    NoGradGuard no_grad;
    out_proj->bias->assign(Tensor::zeros({e}));
    out_proj->bias->realize();
  }
}

namespace {

// `mask` with the key padding mask (N, S) merged in, as one mask that adds to the scores (N, H, L, S):
// a bool padding mask blocks where true (torch.nn's convention for it), a bool `mask` keeps where true
// (attend turned torch.nn's into that), float ones add.
Tensor with_key_padding(const std::optional<Tensor>& mask, const Tensor& key_padding, int64_t n, int64_t s, const Tensor& like) {
  if (key_padding.shape() != Shape{n, s})
    throw Error(kiln::cat("MultiheadAttention: key_padding_mask ", shape_str(key_padding.shape()), " must be (N, S) = (", n, ", ", s,
                          "): one entry per batch element and key"));
  if (!is_bool(key_padding.dtype()) && !is_float(key_padding.dtype()))
    throw Error(kiln::cat("MultiheadAttention: key_padding_mask is ", key_padding.dtype().name(),
                          "; give a bool mask (true marks padding) or a float one (added to the scores)"));
  Tensor zero = Tensor::zeros({}, like.dtype(), like.device()), blocked = zero.full_like(-std::numeric_limits<double>::infinity());
  Tensor padding = is_bool(key_padding.dtype()) ? key_padding.where(blocked, zero) : key_padding;
  padding = padding.reshape({n, 1, 1, s});
  if (!mask) return padding;
  return (is_bool(mask->dtype()) ? mask->where(zero, blocked) : *mask) + padding;
}

}  // namespace

Tensor MultiheadAttention::attend(const Tensor& query, const Tensor& key, const Tensor& value, std::optional<Tensor> mask, bool causal,
                                  std::optional<Tensor> key_padding_mask) {
  for (const Tensor* t : {&query, &key, &value}) {
    check_rank(*t, 3, "MultiheadAttention", batch_first ? "(N, L, E)" : "(L, N, E)");
    if (t->shape()[2] != embed_dim) throw Error(kiln::cat("MultiheadAttention: input ", shape_str(t->shape()), " must have E = ", embed_dim));
  }
  auto batch_major = [&](const Tensor& t) { return batch_first ? t : t.transpose(0, 1); };
  int64_t e = embed_dim, h = num_heads, d = e / h;
  if (mask && mask->ndim() == 3) {  // torch's per-head form (N * H, L, S)
    int64_t n = query.shape()[batch_first ? 0 : 1], l = query.shape()[batch_first ? 1 : 0], s = key.shape()[batch_first ? 1 : 0];
    if (mask->shape() != Shape{n * h, l, s})
      throw Error(kiln::cat("MultiheadAttention: a 3-D mask ", shape_str(mask->shape()), " must be (N * num_heads, L, S) = (", n * h, ", ", l,
                            ", ", s, "); or give (L, S)"));
    mask = mask->reshape({n, h, l, s});
  }
  // torch.nn's bool attn_mask blocks where true; scaled_dot_product_attention's (and with_key_padding's) keeps.
  if (mask && is_bool(mask->dtype())) mask = mask->logical_not();
  if (key_padding_mask)
    mask = with_key_padding(mask, *key_padding_mask, key.shape()[batch_first ? 0 : 1], key.shape()[batch_first ? 1 : 0], query);
  auto project = [&](const Tensor& x, int64_t part) {
    Tensor w = in_proj_weight.shrink({{part * e, (part + 1) * e}, {0, e}});
    Tensor y = batch_major(x).matmul(w.transpose(0, 1));
    if (in_proj_bias) y = y + in_proj_bias->shrink({{part * e, (part + 1) * e}});
    return y.reshape({y.shape()[0], y.shape()[1], h, d}).permute({0, 2, 1, 3});  // (N, H, L, D)
  };
  Tensor attn = scaled_dot_product_attention(project(query, 0), project(key, 1), project(value, 2), mask, causal, std::nullopt,
                                             training() ? dropout : 0.0);
  Tensor merged = attn.permute({0, 2, 1, 3});
  merged = merged.reshape({merged.shape()[0], merged.shape()[1], e});
  Tensor out = out_proj->forward(merged);
  return batch_first ? out : out.transpose(0, 1);
}

namespace {

void check_activation(const char* op, const std::string& activation) {
  if (activation != "relu" && activation != "gelu")
    throw Error(kiln::cat(op, ": activation \"", activation, "\" is not \"relu\" or \"gelu\""));
}

// A Transformer layer's feed-forward block: outer(linear2(inner(activation(linear1(x))))).
Tensor feed_forward(Linear& linear1, Linear& linear2, Dropout& inner, Dropout& outer, const std::string& activation, const Tensor& x) {
  Tensor h = linear1.forward(x);
  h = activation == "gelu" ? h.gelu() : h.relu();
  return outer.forward(linear2.forward(inner.forward(h)));
}

}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward, double p, std::string act,
                                                 double layer_norm_eps, bool batch_first, bool norm_first)
    : activation(std::move(act)), norm_first(norm_first) {
  check_activation("TransformerEncoderLayer", activation);
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(d_model, nhead, true, batch_first));
  self_attn->dropout = p;
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, dim_feedforward));
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
  linear2 = register_module("linear2", std::make_shared<Linear>(dim_feedforward, d_model));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(Shape{d_model}, layer_norm_eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(Shape{d_model}, layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(p));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(p));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, std::optional<Tensor> mask, std::optional<Tensor> src_key_padding_mask, bool causal) {
  auto attention = [&](const Tensor& x) { return dropout1->forward(self_attn->attend(x, x, x, mask, causal, src_key_padding_mask)); };
  auto ff = [&](const Tensor& x) { return feed_forward(*linear1, *linear2, *dropout, *dropout2, activation, x); };
  if (norm_first) {
    Tensor x = src + attention(norm1->forward(src));
    return x + ff(norm2->forward(x));
  }
  Tensor x = norm1->forward(src + attention(src));
  return norm2->forward(x + ff(x));
}

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward, double p, std::string act,
                                                 double layer_norm_eps, bool batch_first, bool norm_first)
    : activation(std::move(act)), norm_first(norm_first) {
  check_activation("TransformerDecoderLayer", activation);
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(d_model, nhead, true, batch_first));
  multihead_attn = register_module("multihead_attn", std::make_shared<MultiheadAttention>(d_model, nhead, true, batch_first));
  self_attn->dropout = multihead_attn->dropout = p;
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, dim_feedforward));
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
  linear2 = register_module("linear2", std::make_shared<Linear>(dim_feedforward, d_model));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(Shape{d_model}, layer_norm_eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(Shape{d_model}, layer_norm_eps));
  norm3 = register_module("norm3", std::make_shared<LayerNorm>(Shape{d_model}, layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(p));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(p));
  dropout3 = register_module("dropout3", std::make_shared<Dropout>(p));
}

Tensor TransformerDecoderLayer::forward(const Tensor&) {
  throw Error("TransformerDecoderLayer: forward needs the target and the encoder's memory: call forward(tgt, memory[, tgt_mask, memory_mask])");
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, std::optional<Tensor> tgt_mask,
                                        std::optional<Tensor> memory_mask, std::optional<Tensor> tgt_key_padding_mask,
                                        std::optional<Tensor> memory_key_padding_mask, bool tgt_is_causal) {
  auto self_block = [&](const Tensor& x) {
    return dropout1->forward(self_attn->attend(x, x, x, tgt_mask, tgt_is_causal, tgt_key_padding_mask));
  };
  auto cross_block = [&](const Tensor& x) {
    return dropout2->forward(multihead_attn->attend(x, memory, memory, memory_mask, false, memory_key_padding_mask));
  };
  auto ff = [&](const Tensor& x) { return feed_forward(*linear1, *linear2, *dropout, *dropout3, activation, x); };
  if (norm_first) {
    Tensor x = tgt + self_block(norm1->forward(tgt));
    x = x + cross_block(norm2->forward(x));
    return x + ff(norm3->forward(x));
  }
  Tensor x = norm1->forward(tgt + self_block(tgt));
  x = norm2->forward(x + cross_block(x));
  return norm3->forward(x + ff(x));
}

ModuleList::ModuleList(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

ModuleList& ModuleList::push_back(std::shared_ptr<Module> m) {
  if (!m) throw Error(kiln::cat("ModuleList::push_back: module ", modules_.size(), " is null"));
  modules_.push_back(register_module(std::to_string(modules_.size()), std::move(m)));
  return *this;
}

const std::shared_ptr<Module>& ModuleList::operator[](size_t i) const {
  if (i >= modules_.size()) throw Error(kiln::cat("ModuleList: index ", i, " is out of range for ", modules_.size(), " modules"));
  return modules_[i];
}

Tensor ModuleList::forward(const Tensor&) {
  throw Error("ModuleList has no forward of its own (as in PyTorch): call its modules from your module's forward, "
              "e.g. for (auto& m : *list) x = m->forward(x)");
}

// --- functional --------------------------------------------------------------------------------

Tensor unfold(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> dilation, std::array<int64_t, 2> padding,
              std::array<int64_t, 2> stride) {
  check_rank(x, 4, "unfold", "(N, C, H, W)");
  for (int i = 0; i < 2; ++i)
    if (padding[i] < 0) throw Error(kiln::cat("unfold: padding must be >= 0, got ", padding[i]));
  int64_t n = x.shape()[0], c = x.shape()[1];
  Tensor win = x.pad({{0, 0}, {0, 0}, {padding[0], padding[0]}, {padding[1], padding[1]}}).windows(kernel, stride, dilation);
  int64_t l = win.shape()[2] * win.shape()[3];
  // (N, C, OH, OW, KH, KW) -> (N, C, KH, KW, OH, OW): channel-major columns, windows in row order.
  return win.permute({0, 1, 4, 5, 2, 3}).reshape({n, c * kernel[0] * kernel[1], l});
}

namespace {

// (..., C, H, W) -> (lead dims, C, H, W) as sizes, checking the rank and the factor.
Shape pixel_dims(const Tensor& x, int64_t r, const char* op) {
  if (x.ndim() < 3) throw Error(kiln::cat(op, ": expected an input of 3 or more dimensions (..., C, H, W), got shape ", shape_str(x.shape())));
  if (r < 1) throw Error(kiln::cat(op, ": the factor must be >= 1, got ", r));
  return x.shape();
}

}  // namespace

Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  Shape s = pixel_dims(x, r, "pixel_shuffle");
  size_t n = s.size();
  int64_t c = s[n - 3], h = s[n - 2], w = s[n - 1];
  if (c % (r * r) != 0)
    throw Error(kiln::cat("pixel_shuffle: ", c, " channels of shape ", shape_str(s), " are not divisible by the factor squared (", r * r,
                          "); use a factor whose square divides the channels"));
  // (..., C, r, r, H, W) -> (..., C, H, r, W, r): out[c, h*r + i, w*r + j] = in[c*r*r + i*r + j, h, w].
  Shape split(s.begin(), s.end() - 3), merged(s.begin(), s.end() - 3);
  split.insert(split.end(), {c / (r * r), r, r, h, w});
  merged.insert(merged.end(), {c / (r * r), h * r, w * r});
  std::vector<int64_t> order;
  for (size_t i = 0; i + 3 < n; ++i) order.push_back(static_cast<int64_t>(i));
  auto b = static_cast<int64_t>(n - 3);
  order.insert(order.end(), {b, b + 3, b + 1, b + 4, b + 2});
  return x.reshape(split).permute(order).reshape(merged);
}

Tensor pixel_unshuffle(const Tensor& x, int64_t r) {
  Shape s = pixel_dims(x, r, "pixel_unshuffle");
  size_t n = s.size();
  int64_t c = s[n - 3], h = s[n - 2], w = s[n - 1];
  if (h % r != 0 || w % r != 0)
    throw Error(kiln::cat("pixel_unshuffle: height ", h, " and width ", w, " of shape ", shape_str(s), " must both be divisible by the factor ", r));
  // (..., C, H, r, W, r) -> (..., C, r, r, H, W): the inverse of pixel_shuffle.
  Shape split(s.begin(), s.end() - 3), merged(s.begin(), s.end() - 3);
  split.insert(split.end(), {c, h / r, r, w / r, r});
  merged.insert(merged.end(), {c * r * r, h / r, w / r});
  std::vector<int64_t> order;
  for (size_t i = 0; i + 3 < n; ++i) order.push_back(static_cast<int64_t>(i));
  auto b = static_cast<int64_t>(n - 3);
  order.insert(order.end(), {b, b + 2, b + 4, b + 1, b + 3});
  return x.reshape(split).permute(order).reshape(merged);
}

}  // namespace kiln::nn
