// The losses of torch.nn.functional (nn.h): class targets, probabilities, regression, distances.
#include "frontend/nn.h"

#include "frontend/detail.h"

#include <cmath>
#include <optional>

namespace kiln::nn {

// --- losses ----------------------------------------------------------------------------------

namespace {

[[noreturn]] void batchmean_elsewhere(const char* op) {
  throw Error(kiln::cat(op, ": Reduction::BatchMean (PyTorch's \"batchmean\") divides a sum by the batch size and only kl_div ",
                        "takes it; use Mean, Sum or None"));
}

Tensor reduce(const Tensor& per_item, Reduction r, const char* op) {
  switch (r) {
    case Reduction::Mean: return per_item.mean();
    case Reduction::Sum: return per_item.sum();
    case Reduction::None: return per_item;
    case Reduction::BatchMean: batchmean_elsewhere(op);
  }
  return per_item;
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* op, const char* names) {
  if (a.shape() != b.shape())
    throw Error(kiln::cat(op, ": ", names, " must have one shape, got ", shape_str(a.shape()), " and ", shape_str(b.shape())));
}

// The p-norm along `dim` (p > 0; inf: the largest magnitude). With a floor, max(norm, floor), clamped
// before the root: max(sum |x|^p, floor^p)^(1/p), whose gradient at a zero vector is 0 (the root's own
// is infinite there, and 0 times it NaN).
Tensor p_norm(const Tensor& x, double p, int64_t dim, bool keepdim, std::optional<double> floor = std::nullopt) {
  if (std::isinf(p)) {
    Tensor m = x.abs().max({dim}, keepdim);
    return floor ? m.maximum(m.full_like(*floor)) : m;
  }
  Tensor sum = p == 2 ? (x * x).sum({dim}, keepdim) : p == 1 ? x.abs().sum({dim}, keepdim) : x.abs().pow(p).sum({dim}, keepdim);
  if (floor) sum = sum.maximum(sum.full_like(std::pow(*floor, p)));
  return p == 2 ? sum.sqrt() : p == 1 ? sum : sum.pow(1.0 / p);
}

void check_p(double p, const char* op) {
  if (!(p > 0)) throw Error(kiln::cat(op, ": p must be positive (or infinity), got ", p));
}

// A per-element loss times an optional weight that broadcasts to it (the binary cross entropies').
Tensor weighted(const Tensor& loss, const std::optional<Tensor>& weight, const char* op) {
  if (!weight) return loss;
  if (detail::broadcast_shapes(weight->shape(), loss.shape(), op) != loss.shape())
    throw Error(kiln::cat(op, ": weight ", shape_str(weight->shape()), " must broadcast to the input's shape ", shape_str(loss.shape())));
  return loss * *weight;
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  if (a.shape() != b.shape())
    throw Error(kiln::cat(op, ": input ", shape_str(a.shape()), " and target ", shape_str(b.shape()), " must have the same shape"));
}

// Class scores (N, C, d1, ...) with targets (N, d1, ...) as (N*d1*..., C) and (N*d1*...): every
// position is a sample. Also the shape of a per-sample result (reduction None).
struct ClassProblem {
  Tensor scores, target;
  Shape per_sample;
};
ClassProblem flatten_classes(const Tensor& scores, const Tensor& target, const char* op) {
  Shape want = scores.ndim() >= 2 ? Shape{scores.shape()[0]} : Shape{};
  for (int64_t i = 2; i < scores.ndim(); ++i) want.push_back(scores.shape()[static_cast<size_t>(i)]);
  if (scores.ndim() < 2 || target.shape() != want)
    throw Error(kiln::cat(op, ": expected scores (N, C) or (N, C, d1, ...) and targets (N) or (N, d1, ...), got ", shape_str(scores.shape()),
                          " and ", shape_str(target.shape())));
  int64_t c = scores.shape()[1];
  if (scores.ndim() == 2) return {scores, target, want};
  std::vector<int64_t> order = {0};
  for (int64_t i = 2; i < scores.ndim(); ++i) order.push_back(i);
  order.push_back(1);
  return {scores.permute(order).reshape({-1, c}), target.reshape({-1}), want};
}

// Class targets: integers in [0, C) or equal to ignore_index, since a wrong label would otherwise
// silently count for nothing. The device counts the bad targets and finds the smallest; the host reads
// those two numbers, as host work: a captured step (frontend/jit.h) checks every replay's targets too.
void check_targets(const Tensor& target, int64_t c, int64_t ignore_index, const char* op) {
  if (!is_int(target.dtype())) throw Error(kiln::cat(op, ": targets must be class indices (integers), got ", target.dtype().name()));
  if (target.numel() == 0) return;
  // Compared in int32 or int64 as given (narrow and unsigned types widen first, so that C and -100 are
  // exact). int32 targets stay int32: lavapipe (Mesa 22.3) miscompiles an int32 -> int64 conversion
  // that feeds a comparison (2 >= 4 came out true), so widening every target broke this check there.
  DType dt = target.dtype() == dtypes::int64 || target.dtype() == dtypes::uint32 || target.dtype() == dtypes::uint64 ? dtypes::int64 : dtypes::int32;
  Tensor t = target.cast(dt).reshape({-1});
  auto full = [&](double v) { return t.full_like(v); };
  Tensor bad = (t.lt(full(0)).logical_or(t.ge(full(static_cast<double>(c))))).logical_and(t.ne(full(static_cast<double>(ignore_index))));
  double largest = dt == dtypes::int64 ? static_cast<double>(INT64_MAX) : static_cast<double>(INT32_MAX);
  // Any bad target, and the smallest: one pair of numbers read back.
  Tensor found = Tensor::stack({bad.cast(dtypes::float32).sum().cast(dtypes::int64), bad.where(t, full(largest)).min().cast(dtypes::int64)});
  std::string name = op;
  detail::check_on_host(found, [c, ignore_index, name](const std::vector<int64_t>& v) {
    if (v[0] > 0) throw Error(kiln::cat(name, ": target ", v[1], " is out of range for ", c, " classes (ignore_index is ", ignore_index, ")"));
  });
}

void check_class_weight(const std::optional<Tensor>& weight, int64_t c, const char* op) {
  if (weight && (weight->shape() != Shape{c} || !is_float(weight->dtype())))
    throw Error(kiln::cat(op, ": weight must be a float tensor of shape (", c, ",) (one per class), got ", weight->dtype().name(), " ",
                          shape_str(weight->shape())));
}

// PyTorch's class-target loss from log-probabilities (N, C): (1 - s) nll + s/C smooth, where nll is
// -w[t] logp[t] and smooth is -sum_c w[c] logp[c], both 0 for ignored samples. A mean divides both
// sums by the targets' total weight (the number of samples that count, without weights).
Tensor class_loss(const Tensor& logp, const ClassProblem& p, double smoothing, int64_t ignore_index, Reduction r,
                  const std::optional<Tensor>& weight) {
  int64_t n = logp.shape()[0], c = logp.shape()[1];
  Tensor t = p.target.cast(dtypes::int64);
  Tensor valid = t.ne(Tensor::full({n}, static_cast<double>(ignore_index), dtypes::int64, t.device()));
  Tensor onehot = t.reshape({n, 1}).eq(Tensor::arange(c, dtypes::int64, t.device()).reshape({1, c}));
  Tensor zero = logp.zeros_like();
  Tensor w = weight ? weight->cast(logp.dtype()).reshape({1, c}).expand({n, c}) : logp.ones_like();
  Tensor w_target = valid.where(onehot.where(w, zero).sum({1}), Tensor::zeros({n}, logp.dtype(), logp.device()));
  Tensor nll = valid.where(-(onehot.where(logp * w, zero)).sum({1}), w_target.zeros_like());
  auto reduced = [&](const Tensor& per_sample) {
    switch (r) {
      case Reduction::Mean: return per_sample.sum() / w_target.sum();  // all ignored: 0/0 = NaN, as in PyTorch
      case Reduction::Sum: return per_sample.sum();
      case Reduction::None: return per_sample.reshape(p.per_sample);
      case Reduction::BatchMean: batchmean_elsewhere("cross_entropy / nll_loss");
    }
    return per_sample;
  };
  Tensor out = reduced(nll);
  if (smoothing == 0) return out;
  Tensor smooth = valid.where(-(logp * w).sum({1}), w_target.zeros_like());
  return out * (1 - smoothing) + reduced(smooth) * (smoothing / static_cast<double>(c));
}

// Class probabilities as targets: -sum_c w[c] y[c] logp[c] per sample (y smoothed toward 1/C); a mean
// is over the samples.
Tensor probability_loss(const Tensor& logits, const Tensor& target, double smoothing, Reduction r, const std::optional<Tensor>& weight) {
  int64_t c = logits.shape()[1];
  Tensor logp = logits.log_softmax(1);
  Tensor y = smoothing > 0 ? target * (1 - smoothing) + smoothing / static_cast<double>(c) : target;
  Tensor terms = logp * y.cast(logp.dtype());
  if (weight) terms = terms * weight->cast(logp.dtype()).reshape(detail::channel_shape(c, logits.ndim()));
  Tensor per_sample = -terms.sum({1});
  return reduce(per_sample, r, "cross_entropy");
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing, int64_t ignore_index, Reduction r,
                     std::optional<Tensor> weight) {
  if (label_smoothing < 0 || label_smoothing > 1) throw Error(kiln::cat("cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing));
  if (logits.ndim() >= 2) check_class_weight(weight, logits.shape()[1], "cross_entropy");
  if (is_float(target.dtype())) {
    if (target.shape() != logits.shape())
      throw Error(kiln::cat("cross_entropy: probability targets (float) must have the logits' shape ", shape_str(logits.shape()), ", got ",
                            shape_str(target.shape()), "; class indices must be integers"));
    return probability_loss(logits, target, label_smoothing, r, weight);
  }
  ClassProblem p = flatten_classes(logits, target, "cross_entropy");
  check_targets(p.target, p.scores.shape()[1], ignore_index, "cross_entropy");
  return class_loss(p.scores.log_softmax(1), p, label_smoothing, ignore_index, r, weight);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index, Reduction r, std::optional<Tensor> weight) {
  ClassProblem p = flatten_classes(log_probs, target, "nll_loss");
  check_class_weight(weight, p.scores.shape()[1], "nll_loss");
  check_targets(p.target, p.scores.shape()[1], ignore_index, "nll_loss");
  return class_loss(p.scores, p, 0.0, ignore_index, r, weight);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction r) {
  check_same_shape(input, target, "mse_loss");
  Tensor d = input - target;
  return reduce(d * d, r, "mse_loss");
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction r) {
  check_same_shape(input, target, "l1_loss");
  return reduce((input - target).abs(), r, "l1_loss");
}

Tensor binary_cross_entropy_with_logits(const Tensor& x, const Tensor& y, Reduction r, std::optional<Tensor> weight,
                                        std::optional<Tensor> pos_weight) {
  check_same_shape(x, y, "binary_cross_entropy_with_logits");
  // w (p y softplus(-x) + (1 - y) softplus(x)): stable for large |x| (softplus is linear past its
  // threshold), and its gradient is w ((p y + 1 - y) sigmoid(x) - p y) everywhere, 0 included.
  Tensor positive = y * (-x).softplus();
  if (pos_weight) {
    if (pos_weight->ndim() > 1 || (x.ndim() > 0 && pos_weight->numel() != 1 && pos_weight->numel() != x.shape().back()))
      throw Error(kiln::cat("binary_cross_entropy_with_logits: pos_weight ", shape_str(pos_weight->shape()), " must have one value per class (",
                            x.ndim() > 0 ? x.shape().back() : 1, ",), the logits' last axis (logits ", shape_str(x.shape()), ")"));
    positive = positive * *pos_weight;
  }
  Tensor loss = positive + (1.0 - y) * x.softplus();
  return reduce(weighted(loss, weight, "binary_cross_entropy_with_logits"), r, "binary_cross_entropy_with_logits");
}

Tensor binary_cross_entropy(const Tensor& x, const Tensor& y, Reduction r, std::optional<Tensor> weight) {
  check_same_shape(x, y, "binary_cross_entropy");
  // log(p) clamped at -100; p <= 0 takes -100 without evaluating log(0), so its gradient is 0, not NaN.
  auto clamped_log = [](const Tensor& p) {
    Tensor positive = p.zeros_like().lt(p);
    Tensor l = positive.where(p, p.ones_like()).log();
    Tensor floor = l.full_like(-100.0);
    return positive.where(l.maximum(floor), floor);
  };
  Tensor loss = -(y * clamped_log(x) + (1.0 - y) * clamped_log(1.0 - x));
  return reduce(weighted(loss, weight, "binary_cross_entropy"), r, "binary_cross_entropy");
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction r, double beta) {
  check_same_shape(input, target, "smooth_l1_loss");
  if (beta < 0) throw Error(kiln::cat("smooth_l1_loss: beta must be >= 0, got ", beta));
  Tensor d = input - target, ad = d.abs();
  if (beta == 0) return reduce(ad, r, "smooth_l1_loss");
  return reduce(ad.lt(ad.full_like(beta)).where(d * d * (0.5 / beta), ad - 0.5 * beta), r, "smooth_l1_loss");
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction r, double delta) {
  check_same_shape(input, target, "huber_loss");
  if (delta <= 0) throw Error(kiln::cat("huber_loss: delta must be > 0, got ", delta));
  Tensor d = input - target, ad = d.abs();
  return reduce(ad.lt(ad.full_like(delta)).where(d * d * 0.5, (ad - 0.5 * delta) * delta), r, "huber_loss");
}

Tensor kl_div(const Tensor& input, const Tensor& target, Reduction r, bool log_target) {
  check_same_shape(input, target, "kl_div", "input (log-probabilities) and target");
  if (!is_float(input.dtype()) || !is_float(target.dtype()))
    throw Error(kiln::cat("kl_div: input and target must be float tensors, got ", input.dtype().name(), " and ", target.dtype().name()));
  Tensor t = target.cast(input.dtype());
  // target (log target - input); a target of 0 adds 0 (0 log 0 = 0), as torch's xlogy.
  Tensor pointwise = log_target ? t.exp() * (t - input) : t.eq(t.zeros_like()).where(t.zeros_like(), t * (t.log() - input));
  if (r == Reduction::BatchMean) return pointwise.sum() / static_cast<double>(input.ndim() ? input.shape()[0] : 1);
  return reduce(pointwise, r, "kl_div");
}

Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim, double eps) {
  Shape shape = detail::broadcast_shapes(x1.shape(), x2.shape(), "cosine_similarity");
  Tensor a = x1.expand(shape), b = x2.expand(shape);
  int64_t d = detail::normalize_axis(dim, static_cast<int64_t>(shape.size()), "cosine_similarity");
  // Each norm clamped at eps on its own, as PyTorch 1.13 computes it (its doc's max(|x1| |x2|, eps)
  // differs only near zero, and there its gradients are PyTorch's).
  return (a * b).sum({d}) / (p_norm(a, 2, d, false, eps) * p_norm(b, 2, d, false, eps));
}

Tensor normalize(const Tensor& x, double p, int64_t dim, double eps) {
  check_p(p, "normalize");
  int64_t d = detail::normalize_axis(dim, x.ndim(), "normalize");
  return x / p_norm(x, p, d, true, eps).expand(x.shape());
}

Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p, double eps, bool keepdim) {
  check_p(p, "pairwise_distance");
  Shape shape = detail::broadcast_shapes(x1.shape(), x2.shape(), "pairwise_distance");
  if (shape.empty()) throw Error("pairwise_distance: the inputs are 0-d; it measures along their last axis");
  return p_norm(x1.expand(shape) - x2.expand(shape) + eps, p, static_cast<int64_t>(shape.size()) - 1, keepdim);
}

Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative, double margin, double p, double eps,
                           bool swap, Reduction r) {
  if (anchor.ndim() != positive.ndim() || anchor.ndim() != negative.ndim())
    throw Error(kiln::cat("triplet_margin_loss: anchor ", shape_str(anchor.shape()), ", positive ", shape_str(positive.shape()), " and negative ",
                          shape_str(negative.shape()), " must have one number of dimensions"));
  Tensor d_pos = pairwise_distance(anchor, positive, p, eps), d_neg = pairwise_distance(anchor, negative, p, eps);
  if (swap) d_neg = d_neg.minimum(pairwise_distance(positive, negative, p, eps));
  Tensor loss = d_pos - d_neg + margin;
  return reduce(loss.maximum(loss.zeros_like()), r, "triplet_margin_loss");
}

}  // namespace kiln::nn
