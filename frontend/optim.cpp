#include "frontend/optim.h"

#include "frontend/detail.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace kiln::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr, const std::string& what)
    : lr(lr), params_(std::move(params)), state_(params_.size()) {
  if (!(lr >= 0)) throw Error(kiln::cat(what, ": learning rate must be >= 0, got ", lr));
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_[i].requires_grad() || !params_[i].is_leaf())
      throw Error(kiln::cat(what, ": parameter ", i, " ", shape_str(params_[i].shape()), " is not a leaf with requires_grad_()"));
}

Tensor Optimizer::with_l2(const Tensor& grad, const Tensor& p, double weight_decay) {
  return weight_decay != 0 ? grad + p * weight_decay : grad;
}

Tensor Optimizer::scalar(const Tensor& hyper, int64_t i, const Tensor& like) {
  return hyper.shrink({{i, i + 1}}).reshape(Shape(like.shape().size(), 1)).expand(like.shape()).cast(like.dtype());
}

void Optimizer::step(std::vector<Tensor> also_realize) {
  // Host work of the step, so that a captured step (frontend/jit.h) counts and computes it on each replay.
  detail::host_work([this] { ++steps_; });
  int64_t n_hyper = static_cast<int64_t>(hyper_values().size());
  auto fill_hyper = [this](void* dst) {
    std::vector<double> h = hyper_values();
    std::copy(h.begin(), h.end(), static_cast<float*>(dst));
  };
  std::vector<Tensor> outputs;
  std::map<std::string, Tensor> per_device;  // the hyperparameter buffer, once per device
  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      std::optional<Tensor> g = params_[i].grad();
      if (!g) continue;
      std::string dev = params_[i].device();
      auto it = per_device.find(dev);
      if (it == per_device.end()) it = per_device.emplace(dev, detail::host_tensor({n_hyper}, dtypes::float32, dev, fill_hyper)).first;
      Tensor updated = update(i, params_[i].detach(), g->detach(), it->second);
      params_[i].assign(updated);
      outputs.push_back(params_[i]);
      for (auto& [name, t] : state_[i]) outputs.push_back(t);
    }
  }
  for (Tensor& t : also_realize) outputs.push_back(t);
  realize_all(outputs);
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.set_grad(std::nullopt);
}

std::map<std::string, Tensor> Optimizer::state_dict() const {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < state_.size(); ++i)
    for (auto& [name, t] : state_[i]) out.emplace(kiln::cat(name, ".", i), t);
  return out;
}

size_t Optimizer::state_bytes() const {
  size_t bytes = 0;
  for (const auto& per_param : state_)
    for (const auto& [name, t] : per_param) bytes += static_cast<size_t>(t.numel()) * t.dtype().itemsize();
  return bytes;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& state, int64_t steps) {
  std::vector<std::map<std::string, Tensor>> loaded(params_.size());
  for (auto& [key, t] : state) {
    size_t dot = key.rfind('.');
    size_t i = dot == std::string::npos ? params_.size() : static_cast<size_t>(std::strtoull(key.c_str() + dot + 1, nullptr, 10));
    if (i >= params_.size() || t.shape() != params_[i].shape())
      throw Error(kiln::cat("optimizer load_state_dict: entry \"", key, "\" ", shape_str(t.shape()), " does not fit any of the ",
                            params_.size(), " parameters"));
    loaded[i].emplace(key.substr(0, dot), t.to(params_[i].device()).contiguous());
  }
  std::vector<Tensor> all;
  for (auto& m : loaded)
    for (auto& [name, t] : m) all.push_back(t);
  realize_all(all);
  state_ = std::move(loaded);
  steps_ = steps;
}

SGD::SGD(std::vector<Tensor> params, double lr, double momentum, double dampening, double weight_decay, bool nesterov)
    : Optimizer(std::move(params), lr, "SGD"), momentum(momentum), dampening(dampening), weight_decay(weight_decay), nesterov(nesterov) {
  if (nesterov && (momentum <= 0 || dampening != 0)) throw Error("SGD: nesterov needs momentum > 0 and dampening 0");
}

Tensor SGD::update(size_t i, const Tensor& p, const Tensor& grad, const Tensor& hyper) {
  Tensor g = with_l2(grad, p, weight_decay);
  if (momentum != 0) {
    auto it = state_[i].find("momentum_buffer");
    Tensor buf = it == state_[i].end() ? g : it->second * momentum + g * (1 - dampening);  // the first step takes g as is
    if (it == state_[i].end()) state_[i].emplace("momentum_buffer", buf);
    else it->second.assign(buf);  // in place: the step allocates nothing
    g = nesterov ? g + buf * momentum : buf;
  }
  return p - g * scalar(hyper, 0, p);
}

// Adam's, Adamax's, NAdam's and RAdam's check of their betas.
static void check_betas(const std::string& what, double beta1, double beta2) {
  if (!(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1))
    throw Error(kiln::cat(what, ": betas must be in [0, 1), got ", beta1, ", ", beta2));
}

// The check of a coefficient that must not be negative (eps, weight_decay, ...).
static void check_nonnegative(const std::string& what, const char* name, double value) {
  if (!(value >= 0)) throw Error(kiln::cat(what, ": ", name, " must be >= 0, got ", value));
}

// Adam's running moments, shared by its variants: exp_avg and exp_avg_sq (zero before the first step)
// advanced by the gradient g and written back in place; returns their new values.
static std::pair<Tensor, Tensor> advance_moments(std::map<std::string, Tensor>& s, const Tensor& p, const Tensor& g, double beta1,
                                                 double beta2) {
  if (!s.count("exp_avg")) {
    s["exp_avg"] = p.zeros_like();
    s["exp_avg_sq"] = p.zeros_like();
  }
  Tensor m = s["exp_avg"] * beta1 + g * (1 - beta1);
  Tensor v = s["exp_avg_sq"] * beta2 + g * g * (1 - beta2);
  s["exp_avg"].assign(m);  // in place: the step allocates nothing
  s["exp_avg_sq"].assign(v);
  return {m, v};
}

Adam::Adam(std::vector<Tensor> params, double lr, double beta1, double beta2, double eps, double weight_decay, bool decoupled, bool amsgrad)
    : Optimizer(std::move(params), lr, decoupled ? "AdamW" : "Adam"), beta1(beta1), beta2(beta2), eps(eps), weight_decay(weight_decay),
      decoupled(decoupled), amsgrad(amsgrad) {
  check_betas(decoupled ? "AdamW" : "Adam", beta1, beta2);
}

std::vector<double> Adam::hyper_values() const {
  // steps_ was already advanced for the step being taken.
  double t = static_cast<double>(steps_);
  return {lr, 1 - std::pow(beta1, t), std::sqrt(1 - std::pow(beta2, t)), 1 - lr * weight_decay};
}

Tensor Adam::update(size_t i, const Tensor& p, const Tensor& grad, const Tensor& hyper) {
  Tensor g = with_l2(grad, p, decoupled ? 0 : weight_decay);
  auto& s = state_[i];
  auto [m, v] = advance_moments(s, p, g, beta1, beta2);
  if (amsgrad) {
    if (!s.count("max_exp_avg_sq")) s["max_exp_avg_sq"] = p.zeros_like();
    v = s["max_exp_avg_sq"].maximum(v);
    s["max_exp_avg_sq"].assign(v);
  }
  // PyTorch's arrangement: p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps).
  Tensor lr_t = scalar(hyper, 0, p), bc1 = scalar(hyper, 1, p), bc2_sqrt = scalar(hyper, 2, p);
  Tensor base = decoupled && weight_decay != 0 ? p * scalar(hyper, 3, p) : p;
  return base - lr_t / bc1 * m / (v.sqrt() / bc2_sqrt + eps);
}

RMSprop::RMSprop(std::vector<Tensor> params, double lr, double alpha, double eps, double weight_decay, double momentum, bool centered)
    : Optimizer(std::move(params), lr, "RMSprop"), alpha(alpha), eps(eps), weight_decay(weight_decay), momentum(momentum), centered(centered) {
  if (!(alpha >= 0 && alpha <= 1)) throw Error(kiln::cat("RMSprop: alpha must be in [0, 1], got ", alpha));
  check_nonnegative("RMSprop", "eps", eps);
  check_nonnegative("RMSprop", "momentum", momentum);
  check_nonnegative("RMSprop", "weight_decay", weight_decay);
}

Tensor RMSprop::update(size_t i, const Tensor& p, const Tensor& grad, const Tensor& hyper) {
  Tensor g = with_l2(grad, p, weight_decay);
  auto& s = state_[i];
  if (!s.count("square_avg")) {
    s["square_avg"] = p.zeros_like();
    if (centered) s["grad_avg"] = p.zeros_like();
    if (momentum > 0) s["momentum_buffer"] = p.zeros_like();
  }
  Tensor v = s["square_avg"] * alpha + g * g * (1 - alpha);
  s["square_avg"].assign(v);  // in place: the step allocates nothing
  Tensor denom = v;
  if (centered) {
    Tensor m = s["grad_avg"] * alpha + g * (1 - alpha);
    s["grad_avg"].assign(m);
    denom = v - m * m;
  }
  Tensor step = g / (denom.sqrt() + eps);
  if (momentum > 0) {
    Tensor b = s["momentum_buffer"] * momentum + step;
    s["momentum_buffer"].assign(b);
    step = b;
  }
  return p - step * scalar(hyper, 0, p);
}

Adagrad::Adagrad(std::vector<Tensor> params, double lr, double lr_decay, double weight_decay, double initial_accumulator_value, double eps)
    : Optimizer(std::move(params), lr, "Adagrad"), lr_decay(lr_decay), weight_decay(weight_decay),
      initial_accumulator_value(initial_accumulator_value), eps(eps) {
  check_nonnegative("Adagrad", "lr_decay", lr_decay);
  check_nonnegative("Adagrad", "weight_decay", weight_decay);
  check_nonnegative("Adagrad", "initial_accumulator_value", initial_accumulator_value);
  check_nonnegative("Adagrad", "eps", eps);
}

std::vector<double> Adagrad::hyper_values() const {
  // steps_ was already advanced for the step being taken.
  return {lr / (1 + static_cast<double>(steps_ - 1) * lr_decay)};
}

Tensor Adagrad::update(size_t i, const Tensor& p, const Tensor& grad, const Tensor& hyper) {
  Tensor g = with_l2(grad, p, weight_decay);
  auto& s = state_[i];
  if (!s.count("sum")) s["sum"] = p.full_like(initial_accumulator_value);
  Tensor sum = s["sum"] + g * g;
  s["sum"].assign(sum);
  return p - g / (sum.sqrt() + eps) * scalar(hyper, 0, p);
}

Adadelta::Adadelta(std::vector<Tensor> params, double lr, double rho, double eps, double weight_decay)
    : Optimizer(std::move(params), lr, "Adadelta"), rho(rho), eps(eps), weight_decay(weight_decay) {
  if (!(rho >= 0 && rho <= 1)) throw Error(kiln::cat("Adadelta: rho must be in [0, 1], got ", rho));
  check_nonnegative("Adadelta", "eps", eps);
  check_nonnegative("Adadelta", "weight_decay", weight_decay);
}

Tensor Adadelta::update(size_t i, const Tensor& p, const Tensor& grad, const Tensor& hyper) {
  Tensor g = with_l2(grad, p, weight_decay);
  auto& s = state_[i];
  if (!s.count("square_avg")) {
    s["square_avg"] = p.zeros_like();
    s["acc_delta"] = p.zeros_like();
  }
  Tensor v = s["square_avg"] * rho + g * g * (1 - rho);
  Tensor delta = (s["acc_delta"] + eps).sqrt() / (v + eps).sqrt() * g;  // with the previous steps' RMS
  Tensor u = s["acc_delta"] * rho + delta * delta * (1 - rho);
  s["square_avg"].assign(v);  // in place: the step allocates nothing
  s["acc_delta"].assign(u);
  return p - delta * scalar(hyper, 0, p);
}

Adamax::Adamax(std::vector<Tensor> params, double lr, double beta1, double beta2, double eps, double weight_decay)
    : Optimizer(std::move(params), lr, "Adamax"), beta1(beta1), beta2(beta2), eps(eps), weight_decay(weight_decay) {
  check_betas("Adamax", beta1, beta2);
  check_nonnegative("Adamax", "eps", eps);
  check_nonnegative("Adamax", "weight_decay", weight_decay);
}

std::vector<double> Adamax::hyper_values() const {
  // steps_ was already advanced for the step being taken; PyTorch divides lr by the correction on the host too.
  return {lr / (1 - std::pow(beta1, static_cast<double>(steps_)))};
}

Tensor Adamax::update(size_t i, const Tensor& p, const Tensor& grad, const Tensor& hyper) {
  Tensor g = with_l2(grad, p, weight_decay);
  auto& s = state_[i];
  if (!s.count("exp_avg")) {
    s["exp_avg"] = p.zeros_like();
    s["exp_inf"] = p.zeros_like();
  }
  Tensor m = s["exp_avg"] * beta1 + g * (1 - beta1);
  Tensor u = (s["exp_inf"] * beta2).maximum(g.abs() + eps);
  s["exp_avg"].assign(m);
  s["exp_inf"].assign(u);
  return p - m / u * scalar(hyper, 0, p);
}

NAdam::NAdam(std::vector<Tensor> params, double lr, double beta1, double beta2, double eps, double weight_decay, double momentum_decay)
    : Optimizer(std::move(params), lr, "NAdam"), beta1(beta1), beta2(beta2), eps(eps), weight_decay(weight_decay), momentum_decay(momentum_decay) {
  check_betas("NAdam", beta1, beta2);
  check_nonnegative("NAdam", "eps", eps);
  check_nonnegative("NAdam", "weight_decay", weight_decay);
  check_nonnegative("NAdam", "momentum_decay", momentum_decay);
}

double NAdam::mu(int64_t t) const { return beta1 * (1 - 0.5 * std::pow(0.96, static_cast<double>(t) * momentum_decay)); }

double NAdam::mu_product(int64_t t) const {
  // From the product of an earlier step (one multiplication per step); from 1 again after a jump back,
  // such as a loaded checkpoint.
  if (product_step_ > t) {
    product_step_ = 0;
    product_ = 1;
  }
  for (; product_step_ < t; ++product_step_) product_ *= mu(product_step_ + 1);
  return product_;
}

std::vector<double> NAdam::hyper_values() const {
  // steps_ was already advanced for the step being taken.
  int64_t t = steps_;
  double mu_t = mu(t), mu_next = mu(t + 1), product = mu_product(t);
  // 1.13's mu_product_next = mu_product * mu * mu_next, mu_product already including mu (see the header).
  return {lr * (1 - mu_t) / (1 - product), lr * mu_next / (1 - product * mu_t * mu_next), 1 - std::pow(beta2, static_cast<double>(t))};
}

Tensor NAdam::update(size_t i, const Tensor& p, const Tensor& grad, const Tensor& hyper) {
  Tensor g = with_l2(grad, p, weight_decay);
  auto [m, v] = advance_moments(state_[i], p, g, beta1, beta2);
  Tensor denom = (v / scalar(hyper, 2, p)).sqrt() + eps;
  // PyTorch's two steps: first the gradient's part, then the mean gradient's.
  return p - g / denom * scalar(hyper, 0, p) - m / denom * scalar(hyper, 1, p);
}

RAdam::RAdam(std::vector<Tensor> params, double lr, double beta1, double beta2, double eps, double weight_decay)
    : Optimizer(std::move(params), lr, "RAdam"), beta1(beta1), beta2(beta2), eps(eps), weight_decay(weight_decay) {
  check_betas("RAdam", beta1, beta2);
  check_nonnegative("RAdam", "eps", eps);
  check_nonnegative("RAdam", "weight_decay", weight_decay);
}

std::vector<double> RAdam::hyper_values() const {
  // steps_ was already advanced for the step being taken.
  double t = static_cast<double>(steps_), bc1 = 1 - std::pow(beta1, t), bc2 = 1 - std::pow(beta2, t);
  double rho_inf = 2 / (1 - beta2) - 1, rho_t = rho_inf - 2 * t * std::pow(beta2, t) / bc2;
  if (!(rho_t > 5)) return {lr, bc1, 0, 0};  // the unrectified branch: r_t may not even be real here
  double rect = std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t));
  return {lr, bc1, 1, rect * std::sqrt(bc2)};
}

Tensor RAdam::update(size_t i, const Tensor& p, const Tensor& grad, const Tensor& hyper) {
  Tensor g = with_l2(grad, p, weight_decay);
  auto [m, v] = advance_moments(state_[i], p, g, beta1, beta2);
  Tensor step = m / scalar(hyper, 1, p) * scalar(hyper, 0, p);  // lr times the bias-corrected mean gradient
  // Rectified: times r_t sqrt(bc2) / (sqrt(v) + eps). A select rather than a product with 0, so that the
  // unused branch's 0 / 0 (eps 0, a zero gradient) cannot turn the step into NaN.
  Tensor adaptive = scalar(hyper, 3, p) / (v.sqrt() + eps);
  return p - scalar(hyper, 2, p).ne(0.0).where(step * adaptive, step);
}

Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  std::optional<Tensor> total;
  for (const Tensor& p : params)
    if (auto g = p.grad()) {
      Tensor sq = (g->cast(dtypes::float32) * g->cast(dtypes::float32)).sum();
      total = total ? *total + sq : sq;
    }
  if (!total) return Tensor::zeros({});
  Tensor norm = total->sqrt();
  Tensor coef = (norm + 1e-6).reciprocal() * max_norm;
  coef = coef.minimum(coef.ones_like());
  for (const Tensor& p : params)
    if (auto g = p.grad()) {
      Tensor q = p;
      q.set_grad((*g * coef.cast(g->dtype())).detach());
    }
  return norm;
}

void clip_grad_value(const std::vector<Tensor>& params, double clip_value) {
  if (!(clip_value >= 0))
    throw Error(kiln::cat("clip_grad_value: clip_value must be >= 0 (gradients are clamped to [-clip_value, clip_value]), got ", clip_value));
  for (const Tensor& p : params)
    if (auto g = p.grad()) {
      Tensor q = p;
      q.set_grad(g->clamp(-clip_value, clip_value).detach());
    }
}

void LRScheduler::step() {
  ++count_;
  opt_.lr = lr_at(count_);
}

void LRScheduler::set_count(int64_t count) {
  if (count < 0) throw Error(kiln::cat("LRScheduler::set_count: ", count, " steps; a resumed schedule has taken 0 or more"));
  count_ = count;
  opt_.lr = lr_at(count_);
}

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma) : LRScheduler(opt), step_size(step_size), gamma(gamma) {
  if (step_size <= 0) throw Error(kiln::cat("StepLR: step_size must be positive, got ", step_size));
}
double StepLR::lr_at(int64_t step) const { return base_lr_ * std::pow(gamma, static_cast<double>(step / step_size)); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min) : LRScheduler(opt), t_max(t_max), eta_min(eta_min) {
  if (t_max <= 0) throw Error(kiln::cat("CosineAnnealingLR: t_max must be positive, got ", t_max));
}
double CosineAnnealingLR::lr_at(int64_t step) const {
  double t = static_cast<double>(std::min(step, t_max)) / static_cast<double>(t_max);
  return eta_min + (base_lr_ - eta_min) * (1 + std::cos(std::numbers::pi * t)) / 2;
}

WarmupCosineLR::WarmupCosineLR(Optimizer& opt, int64_t warmup, int64_t total, double eta_min)
    : LRScheduler(opt), warmup(warmup), total(total), eta_min(eta_min) {
  if (warmup < 0 || total <= warmup) throw Error(kiln::cat("WarmupCosineLR: need 0 <= warmup < total, got ", warmup, " and ", total));
  opt_.lr = lr_at(0);
}
double WarmupCosineLR::lr_at(int64_t step) const {
  if (step < warmup) return base_lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup);
  double t = static_cast<double>(std::min(step, total) - warmup) / static_cast<double>(total - warmup);
  return eta_min + (base_lr_ - eta_min) * (1 + std::cos(std::numbers::pi * t)) / 2;
}

}  // namespace kiln::optim

namespace kiln::optim {

ExponentialLR::ExponentialLR(Optimizer& opt, double gamma) : LRScheduler(opt), gamma(gamma) {
  if (!(gamma > 0)) throw Error(kiln::cat("ExponentialLR: gamma must be positive, got ", gamma));
}
double ExponentialLR::lr_at(int64_t step) const { return base_lr_ * std::pow(gamma, static_cast<double>(step)); }

MultiStepLR::MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(opt), milestones(std::move(milestones)), gamma(gamma) {
  std::sort(this->milestones.begin(), this->milestones.end());
  opt_.lr = lr_at(0);  // a milestone at 0 applies at once, as in PyTorch
}
double MultiStepLR::lr_at(int64_t step) const {
  auto passed = std::upper_bound(milestones.begin(), milestones.end(), step) - milestones.begin();
  return base_lr_ * std::pow(gamma, static_cast<double>(passed));
}

LinearLR::LinearLR(Optimizer& opt, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(opt), start_factor(start_factor), end_factor(end_factor), total_iters(total_iters) {
  // start_factor 0 is refused as PyTorch 2 does: PyTorch 1.13's chained update divides by it.
  if (!(start_factor > 0 && start_factor <= 1)) throw Error(kiln::cat("LinearLR: start_factor must be in (0, 1], got ", start_factor));
  if (!(end_factor >= 0 && end_factor <= 1)) throw Error(kiln::cat("LinearLR: end_factor must be in [0, 1], got ", end_factor));
  if (total_iters <= 0) throw Error(kiln::cat("LinearLR: total_iters must be positive, got ", total_iters));
  opt_.lr = lr_at(0);
}
double LinearLR::lr_at(int64_t step) const {
  double done = static_cast<double>(std::min(step, total_iters)) / static_cast<double>(total_iters);
  return base_lr_ * (start_factor + (end_factor - start_factor) * done);
}

ConstantLR::ConstantLR(Optimizer& opt, double factor, int64_t total_iters) : LRScheduler(opt), factor(factor), total_iters(total_iters) {
  if (!(factor >= 0 && factor <= 1)) throw Error(kiln::cat("ConstantLR: factor must be in [0, 1], got ", factor));
  if (total_iters <= 0) throw Error(kiln::cat("ConstantLR: total_iters must be positive, got ", total_iters));
  opt_.lr = lr_at(0);
}
double ConstantLR::lr_at(int64_t step) const { return step < total_iters ? base_lr_ * factor : base_lr_; }

PolynomialLR::PolynomialLR(Optimizer& opt, int64_t total_iters, double power) : LRScheduler(opt), total_iters(total_iters), power(power) {
  if (total_iters <= 0) throw Error(kiln::cat("PolynomialLR: total_iters must be positive, got ", total_iters));
  if (!(power >= 0 && std::isfinite(power)))
    throw Error(kiln::cat("PolynomialLR: power must be a finite number >= 0, got ", power, " (a negative one gives an infinite rate at the end)"));
}
double PolynomialLR::lr_at(int64_t step) const {
  double done = static_cast<double>(std::min(step, total_iters)) / static_cast<double>(total_iters);
  return base_lr_ * std::pow(1 - done, power);
}

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer& opt, int64_t t_0, int64_t t_mult, double eta_min)
    : LRScheduler(opt), t_0(t_0), t_mult(t_mult), eta_min(eta_min) {
  if (t_0 <= 0) throw Error(kiln::cat("CosineAnnealingWarmRestarts: T_0 must be a positive integer, got ", t_0));
  if (t_mult < 1) throw Error(kiln::cat("CosineAnnealingWarmRestarts: T_mult must be an integer >= 1, got ", t_mult));
}
double CosineAnnealingWarmRestarts::lr_at(int64_t step) const {
  // The step's place in its cycle, in integers as PyTorch's step-by-step count (its log-based closed form
  // for an explicit epoch can round differently).
  int64_t t_cur = step, t_i = t_0;
  if (t_mult == 1) t_cur %= t_0;
  for (; t_cur >= t_i; t_i = t_i > INT64_MAX / t_mult ? INT64_MAX : t_i * t_mult) t_cur -= t_i;  // a few iterations: cycles grow geometrically
  return eta_min + (base_lr_ - eta_min) * (1 + std::cos(std::numbers::pi * static_cast<double>(t_cur) / static_cast<double>(t_i))) / 2;
}

OneCycleLR::OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, double pct_start, const std::string& anneal_strategy,
                       double div_factor, double final_div_factor, bool three_phase)
    : LRScheduler(opt), max_lr(max_lr), total_steps(total_steps), pct_start(pct_start), cosine(anneal_strategy == "cos"),
      div_factor(div_factor), final_div_factor(final_div_factor), three_phase(three_phase) {
  if (!(max_lr >= 0)) throw Error(kiln::cat("OneCycleLR: max_lr must be >= 0, got ", max_lr));
  if (total_steps <= 0) throw Error(kiln::cat("OneCycleLR: total_steps must be positive, got ", total_steps));
  if (!(pct_start >= 0 && pct_start <= 1)) throw Error(kiln::cat("OneCycleLR: pct_start must be in [0, 1], got ", pct_start));
  if (anneal_strategy != "cos" && anneal_strategy != "linear")
    throw Error(kiln::cat("OneCycleLR: anneal_strategy \"", anneal_strategy, "\" is not \"cos\" or \"linear\""));
  if (!(div_factor > 0) || !(final_div_factor > 0))
    throw Error(kiln::cat("OneCycleLR: div_factor ", div_factor, " and final_div_factor ", final_div_factor, " must be > 0"));
  double start = 0;
  for (const Phase& phase : phases()) {
    if (phase.end_step == start)  // PyTorch divides by zero in this phase
      throw Error(kiln::cat("OneCycleLR: pct_start ", pct_start, " of total_steps ", total_steps,
                            " leaves a phase of no steps; pick a pct_start that puts each phase's end on a different step"));
    start = phase.end_step;
  }
  opt_.lr = lr_at(0);
}

std::vector<OneCycleLR::Phase> OneCycleLR::phases() const {
  double initial = max_lr / div_factor, min_lr = initial / final_div_factor, steps = static_cast<double>(total_steps);
  if (three_phase) return {{pct_start * steps - 1, initial, max_lr}, {2 * pct_start * steps - 2, max_lr, initial}, {steps - 1, initial, min_lr}};
  return {{pct_start * steps - 1, initial, max_lr}, {steps - 1, max_lr, min_lr}};
}

double OneCycleLR::lr_at(int64_t step) const {
  // PyTorch allows total_steps + 1 values (the one set on construction, then one per step() call up to
  // total_steps) and counts the construction as a step in its message.
  if (step > total_steps)
    throw Error(kiln::cat("OneCycleLR: tried to step ", step + 1, " times (the construction and ", step, " step() calls); total_steps is ",
                          total_steps, ", so make it cover every step"));
  // The first phase that has not ended by this step, or the last one; each starts where the one before ends.
  std::vector<Phase> all = phases();
  double start = 0, at = static_cast<double>(step);
  size_t i = 0;
  for (; i + 1 < all.size() && at > all[i].end_step; ++i) start = all[i].end_step;
  const Phase& phase = all[i];
  double pct = (at - start) / (phase.end_step - start);
  if (cosine) return phase.end_lr + (phase.start_lr - phase.end_lr) / 2 * (std::cos(std::numbers::pi * pct) + 1);
  return phase.start_lr + (phase.end_lr - phase.start_lr) * pct;
}

LambdaLR::LambdaLR(Optimizer& opt, std::function<double(int64_t)> factor) : LRScheduler(opt), factor(std::move(factor)) {
  if (!this->factor) throw Error("LambdaLR: the factor function is empty");
  opt_.lr = lr_at(0);
}
double LambdaLR::lr_at(int64_t step) const { return base_lr_ * factor(step); }

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& opt, const std::string& mode, double factor, int64_t patience, double threshold,
                                     const std::string& threshold_mode, int64_t cooldown, double min_lr, double eps)
    : opt_(opt), max_mode_(mode == "max"), relative_(threshold_mode == "rel"), factor_(factor), threshold_(threshold), min_lr_(min_lr),
      eps_(eps), patience_(patience), cooldown_(cooldown) {
  if (mode != "min" && mode != "max") throw Error(kiln::cat("ReduceLROnPlateau: mode \"", mode, "\" is not \"min\" or \"max\""));
  if (threshold_mode != "rel" && threshold_mode != "abs")
    throw Error(kiln::cat("ReduceLROnPlateau: threshold_mode \"", threshold_mode, "\" is not \"rel\" or \"abs\""));
  if (!(factor >= 0 && factor < 1)) throw Error(kiln::cat("ReduceLROnPlateau: factor must be in [0, 1), got ", factor));
  if (patience < 0 || cooldown < 0) throw Error(kiln::cat("ReduceLROnPlateau: patience ", patience, " and cooldown ", cooldown, " must be >= 0"));
  best_ = max_mode_ ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
}

bool ReduceLROnPlateau::better(double metric) const {
  if (max_mode_) return metric > (relative_ ? best_ * (1 + threshold_) : best_ + threshold_);
  return metric < (relative_ ? best_ * (1 - threshold_) : best_ - threshold_);
}

void ReduceLROnPlateau::step(double metric) {
  if (better(metric)) {
    best_ = metric;
    bad_ = 0;
  } else {
    ++bad_;
  }
  if (cooldown_left_ > 0) {
    --cooldown_left_;
    bad_ = 0;  // evaluations in cooldown do not count
  }
  if (bad_ > patience_) {
    double lr = std::max(opt_.lr * factor_, min_lr_);
    if (opt_.lr - lr > eps_) opt_.lr = lr;
    cooldown_left_ = cooldown_;
    bad_ = 0;
  }
}

}  // namespace kiln::optim
