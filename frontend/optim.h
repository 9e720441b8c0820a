// kiln::optim: torch.optim's optimizers (SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, Adamax, NAdam,
// RAdam), gradient clipping and learning-rate schedules, with PyTorch 1.13's update rules.
//
//   optim::AdamW opt(model->parameters(), 1e-3);
//   loss.backward();
//   opt.step();          // updates every parameter with a gradient; one schedule for all of them
//   opt.zero_grad();
//
// Hyperparameters that change between steps (the learning rate, Adam's bias corrections) enter the
// kernels as a small buffer, not as constants, so every step runs the same compiled kernels.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "frontend/tensor.h"

namespace kiln::optim {

class Optimizer {
 public:
  // `what` names the optimizer in error messages.
  Optimizer(std::vector<Tensor> params, double lr, const std::string& what = "optimizer");
  virtual ~Optimizer() = default;
  // Updates the parameters (and extra tensors to realize in the same schedule, such as a model's
  // running statistics or the loss) and realizes them all at once.
  virtual void step(std::vector<Tensor> also_realize = {});
  void zero_grad();  // sets every gradient to none, like PyTorch's default
  double lr;
  int64_t steps() const { return steps_; }
  const std::vector<Tensor>& params() const { return params_; }
  // For checkpoints: the per-parameter state tensors by name ("exp_avg.3") and the step count.
  virtual std::map<std::string, Tensor> state_dict() const;
  virtual void load_state_dict(const std::map<std::string, Tensor>& state, int64_t steps);
  // Bytes of this process's state tensors (Adam: two per parameter element, three with amsgrad; none
  // before the first step).
  virtual size_t state_bytes() const;

 protected:
  // The new value of parameter i given its gradient; may create or update state tensors.
  // `hyper` holds this step's scalars (see hyper_values) as a float32 vector on the device.
  virtual Tensor update(size_t i, const Tensor& p, const Tensor& g, const Tensor& hyper) = 0;
  virtual std::vector<double> hyper_values() const { return {lr}; }
  static Tensor scalar(const Tensor& hyper, int64_t i, const Tensor& like);  // hyper[i], broadcast to like
  static Tensor with_l2(const Tensor& grad, const Tensor& p, double weight_decay);  // grad + p * weight_decay (L2)
  std::vector<Tensor> params_;
  std::vector<std::map<std::string, Tensor>> state_;  // per parameter
  int64_t steps_ = 0;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, double momentum = 0, double dampening = 0, double weight_decay = 0, bool nesterov = false);
  double momentum, dampening, weight_decay;
  bool nesterov;

 protected:
  Tensor update(size_t i, const Tensor& p, const Tensor& g, const Tensor& hyper) override;
};

// torch.optim.Adam; amsgrad divides by the largest second moment so far (the running maximum of the
// raw exp_avg_sq, bias-corrected with this step's correction, as PyTorch 1.13's code and libtorch do; the
// docs' algorithm box takes the maximum of the bias-corrected values instead).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
       double weight_decay = 0, bool decoupled = false, bool amsgrad = false);
  double beta1, beta2, eps, weight_decay;
  bool decoupled;  // AdamW: decay the weights directly instead of adding to the gradient
  bool amsgrad;

 protected:
  Tensor update(size_t i, const Tensor& p, const Tensor& g, const Tensor& hyper) override;
  std::vector<double> hyper_values() const override;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
        double weight_decay = 1e-2, bool amsgrad = false)
      : Adam(std::move(params), lr, beta1, beta2, eps, weight_decay, true, amsgrad) {}
};

// torch.optim.RMSprop: a running mean of squared gradients (centered: minus the squared mean gradient)
// divides each step; with momentum, the divided gradients are accumulated.
class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<Tensor> params, double lr = 1e-2, double alpha = 0.99, double eps = 1e-8, double weight_decay = 0,
          double momentum = 0, bool centered = false);
  double alpha, eps, weight_decay, momentum;
  bool centered;

 protected:
  Tensor update(size_t i, const Tensor& p, const Tensor& g, const Tensor& hyper) override;
};

// torch.optim.Adagrad: the sum of all squared gradients divides each step; the learning rate decays as
// lr / (1 + (t - 1) lr_decay).
class Adagrad : public Optimizer {
 public:
  Adagrad(std::vector<Tensor> params, double lr = 1e-2, double lr_decay = 0, double weight_decay = 0,
          double initial_accumulator_value = 0, double eps = 1e-10);
  double lr_decay, weight_decay, initial_accumulator_value, eps;

 protected:
  Tensor update(size_t i, const Tensor& p, const Tensor& g, const Tensor& hyper) override;
  std::vector<double> hyper_values() const override;
};

// torch.optim.Adadelta: each step is the gradient scaled by the ratio of two running RMS values, that of
// the past steps (acc_delta) over that of the gradients (square_avg), so lr = 1 is the usual choice.
class Adadelta : public Optimizer {
 public:
  Adadelta(std::vector<Tensor> params, double lr = 1.0, double rho = 0.9, double eps = 1e-6, double weight_decay = 0);
  double rho, eps, weight_decay;

 protected:
  Tensor update(size_t i, const Tensor& p, const Tensor& g, const Tensor& hyper) override;
};

// torch.optim.Adamax: Adam with the infinity norm: the step divides the bias-corrected mean gradient by
// exp_inf = max(beta2 * exp_inf, |g| + eps), which needs no bias correction.
class Adamax : public Optimizer {
 public:
  Adamax(std::vector<Tensor> params, double lr = 2e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
         double weight_decay = 0);
  double beta1, beta2, eps, weight_decay;

 protected:
  Tensor update(size_t i, const Tensor& p, const Tensor& g, const Tensor& hyper) override;
  std::vector<double> hyper_values() const override;
};

// torch.optim.NAdam: Adam with Nesterov momentum whose coefficient mu_t = beta1 (1 - 0.96^(t
// momentum_decay) / 2) warms up over the steps; the step mixes the gradient, weighted (1 - mu_t) / (1 -
// prod mu_1..t), and the mean gradient, weighted mu_{t+1} / (1 - prod mu_1..t * mu_t * mu_{t+1}): PyTorch
// 1.13's default (single-tensor) code has that extra mu_t, where the docs' algorithm box (and PyTorch 2)
// have prod mu_1..t+1; kiln computes what a 1.13 script gets. The products are host scalars of the step.
class NAdam : public Optimizer {
 public:
  NAdam(std::vector<Tensor> params, double lr = 2e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
        double weight_decay = 0, double momentum_decay = 4e-3);
  double beta1, beta2, eps, weight_decay, momentum_decay;

 protected:
  Tensor update(size_t i, const Tensor& p, const Tensor& g, const Tensor& hyper) override;
  std::vector<double> hyper_values() const override;

 private:
  double mu(int64_t t) const;
  double mu_product(int64_t t) const;  // prod mu_1..t, memoized: one multiplication per step
  mutable int64_t product_step_ = 0;
  mutable double product_ = 1;
};

// torch.optim.RAdam: Adam whose adaptive step is scaled by the variance rectification r_t while the
// approximated SMA length rho_t exceeds 5, and plain momentum SGD (lr times the bias-corrected mean
// gradient) before. Which branch applies changes with the step, so it is a 0/1 input that selects
// between both, computed in the same kernels every step.
class RAdam : public Optimizer {
 public:
  RAdam(std::vector<Tensor> params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
        double weight_decay = 0);
  double beta1, beta2, eps, weight_decay;

 protected:
  Tensor update(size_t i, const Tensor& p, const Tensor& g, const Tensor& hyper) override;
  std::vector<double> hyper_values() const override;
};

// Scales the gradients so their global L2 norm is at most max_norm (torch.nn.utils.clip_grad_norm_);
// returns the norm before clipping (lazy: it fuses into the step).
Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
// Clamps each gradient to [-clip_value, clip_value] (torch.nn.utils.clip_grad_value_); parameters
// without a gradient are skipped, NaN stays NaN. Lazy, as clip_grad_norm. A negative or NaN clip_value
// is an error (PyTorch would set every gradient to -|clip_value|).
void clip_grad_value(const std::vector<Tensor>& params, double clip_value);

// Learning-rate schedules: step() once per optimizer step sets opt.lr for the next one.
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& opt) : opt_(opt), base_lr_(opt.lr) {}
  virtual ~LRScheduler() = default;
  void step();
  int64_t count() const { return count_; }
  void set_count(int64_t count);  // for resuming
  virtual double lr_at(int64_t step) const = 0;

 protected:
  Optimizer& opt_;
  double base_lr_;
  int64_t count_ = 0;
};

class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t step) const override;
  int64_t step_size;
  double gamma;
};

class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min = 0);
  double lr_at(int64_t step) const override;
  int64_t t_max;
  double eta_min;
};

// Linear warmup from base/warmup to base over `warmup` steps, then cosine decay to eta_min at `total`.
class WarmupCosineLR : public LRScheduler {
 public:
  WarmupCosineLR(Optimizer& opt, int64_t warmup, int64_t total, double eta_min = 0);
  double lr_at(int64_t step) const override;
  int64_t warmup, total;
  double eta_min;
};

// lr = base * gamma^step.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& opt, double gamma);
  double lr_at(int64_t step) const override;
  double gamma;
};

// lr = base * gamma^(how many milestones are <= step); milestones in any order, a repeated one counting
// twice, as PyTorch's.
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(int64_t step) const override;
  std::vector<int64_t> milestones;  // sorted
  double gamma;
};

// torch.optim.lr_scheduler.LinearLR: lr = base * (start + (end - start) * min(step, total_iters) /
// total_iters), the start factor applying at once.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& opt, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);
  double lr_at(int64_t step) const override;
  double start_factor, end_factor;
  int64_t total_iters;
};

// torch.optim.lr_scheduler.ConstantLR: lr = base * factor before step total_iters (at once), base from it on.
class ConstantLR : public LRScheduler {
 public:
  ConstantLR(Optimizer& opt, double factor = 1.0 / 3, int64_t total_iters = 5);
  double lr_at(int64_t step) const override;
  double factor;
  int64_t total_iters;
};

// torch.optim.lr_scheduler.PolynomialLR: lr = base * (1 - min(step, total_iters) / total_iters)^power.
class PolynomialLR : public LRScheduler {
 public:
  PolynomialLR(Optimizer& opt, int64_t total_iters = 5, double power = 1.0);
  double lr_at(int64_t step) const override;
  int64_t total_iters;
  double power;
};

// torch.optim.lr_scheduler.CosineAnnealingWarmRestarts (SGDR): cosine annealing from base to eta_min
// over a cycle of t_i steps, then a restart at base with t_i *= t_mult; the first cycle is t_0 steps.
class CosineAnnealingWarmRestarts : public LRScheduler {
 public:
  CosineAnnealingWarmRestarts(Optimizer& opt, int64_t t_0, int64_t t_mult = 1, double eta_min = 0);
  double lr_at(int64_t step) const override;
  int64_t t_0, t_mult;
  double eta_min;
};

// torch.optim.lr_scheduler.OneCycleLR: from max_lr / div_factor (set at once, replacing opt.lr) up to
// max_lr over pct_start of total_steps, then down to max_lr / div_factor / final_div_factor at the last
// step, annealing by "cos" or "linear"; three_phase goes back down to the initial lr first, as PyTorch's.
// Only the learning rate: PyTorch's cycle_momentum (on by default) also cycles SGD's momentum or Adam's
// beta1, which kiln does not, as with cycle_momentum=False. step() past total_steps is an error.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, double pct_start = 0.3, const std::string& anneal_strategy = "cos",
             double div_factor = 25, double final_div_factor = 1e4, bool three_phase = false);
  double lr_at(int64_t step) const override;
  double max_lr;
  int64_t total_steps;
  double pct_start;
  bool cosine;  // anneal_strategy "cos"; "linear" otherwise
  double div_factor, final_div_factor;
  bool three_phase;

 private:
  struct Phase {
    double end_step, start_lr, end_lr;
  };
  std::vector<Phase> phases() const;
};

// lr = base * factor(step), for any schedule written as a function.
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& opt, std::function<double(int64_t step)> factor);
  double lr_at(int64_t step) const override;
  std::function<double(int64_t)> factor;
};

// torch.optim.lr_scheduler.ReduceLROnPlateau: step(metric) once per evaluation; after more than
// `patience` evaluations without improving on the best by `threshold` (relative: best * (1 - threshold)
// in mode "min", best * (1 + threshold) in "max"; absolute: best -/+ threshold), lr *= factor, not
// below min_lr, then `cooldown` evaluations pass before counting again.
class ReduceLROnPlateau {
 public:
  ReduceLROnPlateau(Optimizer& opt, const std::string& mode = "min", double factor = 0.1, int64_t patience = 10,
                    double threshold = 1e-4, const std::string& threshold_mode = "rel", int64_t cooldown = 0, double min_lr = 0,
                    double eps = 1e-8);
  void step(double metric);
  double best() const { return best_; }
  int64_t bad_epochs() const { return bad_; }

 private:
  bool better(double metric) const;
  Optimizer& opt_;
  bool max_mode_, relative_;
  double factor_, threshold_, min_lr_, eps_;
  int64_t patience_, cooldown_, cooldown_left_ = 0, bad_ = 0;
  double best_;
};

}  // namespace kiln::optim
