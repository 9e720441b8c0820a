// kiln::optim: SGD, Adam, AdamW, gradient clipping and learning-rate schedules, as torch.optim.
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
  Optimizer(std::vector<Tensor> params, double lr);
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
  // Bytes of this process's state tensors (Adam: two per parameter element; none before the first step).
  virtual size_t state_bytes() const;

 protected:
  // The new value of parameter i given its gradient; may create or update state tensors.
  // `hyper` holds this step's scalars (see hyper_values) as a float32 vector on the device.
  virtual Tensor update(size_t i, const Tensor& p, const Tensor& g, const Tensor& hyper) = 0;
  virtual std::vector<double> hyper_values() const { return {lr}; }
  static Tensor scalar(const Tensor& hyper, int64_t i, const Tensor& like);  // hyper[i], broadcast to like
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

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
       double weight_decay = 0, bool decoupled = false);
  double beta1, beta2, eps, weight_decay;
  bool decoupled;  // AdamW: decay the weights directly instead of adding to the gradient

 protected:
  Tensor update(size_t i, const Tensor& p, const Tensor& g, const Tensor& hyper) override;
  std::vector<double> hyper_values() const override;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
        double weight_decay = 1e-2)
      : Adam(std::move(params), lr, beta1, beta2, eps, weight_decay, true) {}
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

// Scales the gradients so their global L2 norm is at most max_norm (torch.nn.utils.clip_grad_norm_);
// returns the norm before clipping (lazy: it fuses into the step).
Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

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
