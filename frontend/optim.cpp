#include "frontend/optim.h"

#include "frontend/detail.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace kiln::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr) : lr(lr), params_(std::move(params)), state_(params_.size()) {
  if (!(lr >= 0)) throw Error(kiln::cat("optimizer: learning rate must be >= 0, got ", lr));
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_[i].requires_grad() || !params_[i].is_leaf())
      throw Error(kiln::cat("optimizer: parameter ", i, " ", shape_str(params_[i].shape()), " is not a leaf with requires_grad_()"));
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
    : Optimizer(std::move(params), lr), momentum(momentum), dampening(dampening), weight_decay(weight_decay), nesterov(nesterov) {
  if (nesterov && (momentum <= 0 || dampening != 0)) throw Error("SGD: nesterov needs momentum > 0 and dampening 0");
}

Tensor SGD::update(size_t i, const Tensor& p, const Tensor& grad, const Tensor& hyper) {
  Tensor g = weight_decay != 0 ? grad + p * weight_decay : grad;
  if (momentum != 0) {
    auto it = state_[i].find("momentum_buffer");
    Tensor buf = it == state_[i].end() ? g : it->second * momentum + g * (1 - dampening);  // the first step takes g as is
    if (it == state_[i].end()) state_[i].emplace("momentum_buffer", buf);
    else it->second.assign(buf);  // in place: the step allocates nothing
    g = nesterov ? g + buf * momentum : buf;
  }
  return p - g * scalar(hyper, 0, p);
}

Adam::Adam(std::vector<Tensor> params, double lr, double beta1, double beta2, double eps, double weight_decay, bool decoupled)
    : Optimizer(std::move(params), lr), beta1(beta1), beta2(beta2), eps(eps), weight_decay(weight_decay), decoupled(decoupled) {
  if (beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1) throw Error(kiln::cat("Adam: betas must be in [0, 1), got ", beta1, ", ", beta2));
}

std::vector<double> Adam::hyper_values() const {
  // steps_ was already advanced for the step being taken.
  double t = static_cast<double>(steps_);
  return {lr, 1 - std::pow(beta1, t), std::sqrt(1 - std::pow(beta2, t)), 1 - lr * weight_decay};
}

Tensor Adam::update(size_t i, const Tensor& p, const Tensor& grad, const Tensor& hyper) {
  Tensor g = !decoupled && weight_decay != 0 ? grad + p * weight_decay : grad;
  auto& s = state_[i];
  if (!s.count("exp_avg")) {
    s["exp_avg"] = p.zeros_like();
    s["exp_avg_sq"] = p.zeros_like();
  }
  Tensor m = s["exp_avg"] * beta1 + g * (1 - beta1);
  Tensor v = s["exp_avg_sq"] * beta2 + g * g * (1 - beta2);
  s["exp_avg"].assign(m);  // in place: the step allocates nothing
  s["exp_avg_sq"].assign(v);
  // PyTorch's arrangement: p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps).
  Tensor lr_t = scalar(hyper, 0, p), bc1 = scalar(hyper, 1, p), bc2_sqrt = scalar(hyper, 2, p);
  Tensor base = decoupled && weight_decay != 0 ? p * scalar(hyper, 3, p) : p;
  return base - lr_t / bc1 * m / (v.sqrt() / bc2_sqrt + eps);
}

RMSprop::RMSprop(std::vector<Tensor> params, double lr, double alpha, double eps, double weight_decay, double momentum, bool centered)
    : Optimizer(std::move(params), lr), alpha(alpha), eps(eps), weight_decay(weight_decay), momentum(momentum), centered(centered) {
  if (!(alpha >= 0 && alpha <= 1)) throw Error(kiln::cat("RMSprop: alpha must be in [0, 1], got ", alpha));
  if (!(eps >= 0)) throw Error(kiln::cat("RMSprop: eps must be >= 0, got ", eps));
  if (!(momentum >= 0)) throw Error(kiln::cat("RMSprop: momentum must be >= 0, got ", momentum));
  if (!(weight_decay >= 0)) throw Error(kiln::cat("RMSprop: weight_decay must be >= 0, got ", weight_decay));
}

Tensor RMSprop::update(size_t i, const Tensor& p, const Tensor& grad, const Tensor& hyper) {
  Tensor g = weight_decay != 0 ? grad + p * weight_decay : grad;
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
    : Optimizer(std::move(params), lr), lr_decay(lr_decay), weight_decay(weight_decay), initial_accumulator_value(initial_accumulator_value), eps(eps) {
  if (!(lr_decay >= 0)) throw Error(kiln::cat("Adagrad: lr_decay must be >= 0, got ", lr_decay));
  if (!(weight_decay >= 0)) throw Error(kiln::cat("Adagrad: weight_decay must be >= 0, got ", weight_decay));
  if (!(initial_accumulator_value >= 0)) throw Error(kiln::cat("Adagrad: initial_accumulator_value must be >= 0, got ", initial_accumulator_value));
  if (!(eps >= 0)) throw Error(kiln::cat("Adagrad: eps must be >= 0, got ", eps));
}

std::vector<double> Adagrad::hyper_values() const {
  // steps_ was already advanced for the step being taken.
  return {lr / (1 + static_cast<double>(steps_ - 1) * lr_decay)};
}

Tensor Adagrad::update(size_t i, const Tensor& p, const Tensor& grad, const Tensor& hyper) {
  Tensor g = weight_decay != 0 ? grad + p * weight_decay : grad;
  auto& s = state_[i];
  if (!s.count("sum")) s["sum"] = p.full_like(initial_accumulator_value);
  Tensor sum = s["sum"] + g * g;
  s["sum"].assign(sum);
  return p - g / (sum.sqrt() + eps) * scalar(hyper, 0, p);
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

void LRScheduler::step() {
  ++count_;
  opt_.lr = lr_at(count_);
}

void LRScheduler::set_count(int64_t count) {
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
