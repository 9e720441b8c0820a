// Optimizers, gradient clipping and learning-rate schedules, each against a plain host computation of
// PyTorch's documented formulas (written out here, independent of kiln's graph code).
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <memory>

#include "frontend/nn.h"
#include "frontend/optim.h"
#include "frontend/realize.h"
#include "helpers.h"

using namespace kiln;
using kiln::test::check_close, kiln::test::randoms;

namespace {
// Minimizes sum((p - c)^2 * k) with an optimizer for a few steps; returns p after each step.
template <typename MakeOpt>
std::vector<std::vector<float>> run_steps(MakeOpt make, int steps) {
  Tensor p = Tensor::from_vector<float>({1.0f, -2.0f, 0.5f}, {3}).requires_grad_();
  Tensor c = Tensor::from_vector<float>({0.3f, 0.1f, -0.4f}, {3}), k = Tensor::from_vector<float>({1, 2, 3}, {3});
  auto opt = make(std::vector<Tensor>{p});
  std::vector<std::vector<float>> out;
  for (int s = 0; s < steps; ++s) {
    ((p - c) * (p - c) * k).sum().backward();
    opt->step();
    opt->zero_grad();
    out.push_back(p.to_vector<float>());
  }
  return out;
}

// The same updates on the host, in double, from the formulas of the PyTorch documentation.
std::vector<std::vector<double>> host_steps(const std::string& kind, int steps, double lr, double momentum, double wd, bool nesterov) {
  std::vector<double> p = {1.0, -2.0, 0.5}, c = {0.3, 0.1, -0.4}, k = {1, 2, 3}, buf(3), m(3), v(3);
  std::vector<std::vector<double>> out;
  for (int t = 1; t <= steps; ++t) {
    for (int i = 0; i < 3; ++i) {
      double g = 2 * (p[i] - c[i]) * k[i];
      if (kind == "sgd") {
        g += wd * p[i];
        if (momentum != 0) {
          buf[i] = t == 1 ? g : momentum * buf[i] + g;
          g = nesterov ? g + momentum * buf[i] : buf[i];
        }
        p[i] -= lr * g;
      } else {
        bool decoupled = kind == "adamw";
        if (!decoupled) g += wd * p[i];
        else p[i] *= 1 - lr * wd;
        m[i] = 0.9 * m[i] + 0.1 * g;
        v[i] = 0.999 * v[i] + 0.001 * g * g;
        double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.999, t));
        p[i] -= lr * mh / (std::sqrt(vh) + 1e-8);
      }
    }
    out.push_back(p);
  }
  return out;
}

// Each step's values within tol of the reference's (absolute or relative).
void compare(const std::vector<std::vector<float>>& got, const std::vector<std::vector<double>>& want, double tol = 2e-5) {
  REQUIRE(got.size() == want.size());
  for (size_t s = 0; s < want.size(); ++s) {
    INFO("step " << s + 1);
    check_close(got[s], want[s], tol);
  }
}
}  // namespace

TEST_CASE("optim: SGD, Adam and AdamW follow PyTorch's update rules", "[nn][optim]") {
  compare(run_steps([](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(p, 0.05); }, 4), host_steps("sgd", 4, 0.05, 0, 0, false));
  compare(run_steps([](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(p, 0.05, 0.9, 0, 0.01); }, 4),
          host_steps("sgd", 4, 0.05, 0.9, 0.01, false));
  compare(run_steps([](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(p, 0.05, 0.9, 0, 0, true); }, 4),
          host_steps("sgd", 4, 0.05, 0.9, 0, true));
  compare(run_steps([](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(p, 0.1, 0.9, 0.999, 1e-8, 0.01); }, 5),
          host_steps("adam", 5, 0.1, 0, 0.01, false));
  compare(run_steps([](std::vector<Tensor> p) { return std::make_unique<optim::AdamW>(p, 0.1, 0.9, 0.999, 1e-8, 0.1); }, 5),
          host_steps("adamw", 5, 0.1, 0, 0.1, false));
}

// RMSprop and Adagrad against the formulas of PyTorch's documentation, on the host in double.
TEST_CASE("optim: RMSprop and Adagrad follow PyTorch's update rules", "[nn][optim]") {
  auto host = [](const std::string& kind, int steps, double lr, double a, double eps, double wd, double momentum, bool centered) {
    std::vector<double> p = {1.0, -2.0, 0.5}, c = {0.3, 0.1, -0.4}, k = {1, 2, 3}, v(3), m(3), b(3);
    if (kind == "adagrad") std::fill(v.begin(), v.end(), momentum);  // momentum: the initial accumulator here
    std::vector<std::vector<double>> out;
    for (int t = 1; t <= steps; ++t) {
      for (int i = 0; i < 3; ++i) {
        double g = 2 * (p[i] - c[i]) * k[i] + wd * p[i];
        if (kind == "rmsprop") {
          v[i] = a * v[i] + (1 - a) * g * g;
          double denom = v[i];
          if (centered) {
            m[i] = a * m[i] + (1 - a) * g;
            denom -= m[i] * m[i];
          }
          double step = g / (std::sqrt(denom) + eps);
          if (momentum > 0) step = b[i] = momentum * b[i] + step;
          p[i] -= lr * step;
        } else {
          double clr = lr / (1 + (t - 1) * a);  // a: lr_decay here
          v[i] += g * g;
          p[i] -= clr * g / (std::sqrt(v[i]) + eps);
        }
      }
      out.push_back(p);
    }
    return out;
  };
  compare(run_steps([](std::vector<Tensor> p) { return std::make_unique<optim::RMSprop>(p, 0.01); }, 5), host("rmsprop", 5, 0.01, 0.99, 1e-8, 0, 0, false));
  compare(run_steps([](std::vector<Tensor> p) { return std::make_unique<optim::RMSprop>(p, 0.01, 0.9, 1e-6, 0.1, 0.8, true); }, 5),
          host("rmsprop", 5, 0.01, 0.9, 1e-6, 0.1, 0.8, true));
  compare(run_steps([](std::vector<Tensor> p) { return std::make_unique<optim::Adagrad>(p, 0.1); }, 5), host("adagrad", 5, 0.1, 0, 1e-10, 0, 0, false));
  compare(run_steps([](std::vector<Tensor> p) { return std::make_unique<optim::Adagrad>(p, 0.1, 0.2, 0.05, 0.3); }, 5),
          host("adagrad", 5, 0.1, 0.2, 1e-10, 0.05, 0.3, false));
  Tensor q = Tensor::ones({2}).requires_grad_();
  CHECK_THROWS_WITH(optim::RMSprop({q}, 0.01, 1.5), Catch::Contains("RMSprop: alpha must be in [0, 1], got 1.5"));
  CHECK_THROWS_WITH(optim::Adagrad({q}, 0.01, -1), Catch::Contains("Adagrad: lr_decay must be >= 0"));
}

TEST_CASE("optim: an Adam step over many parameters takes few kernels, compiled once", "[nn][optim]") {
  std::vector<Tensor> params;
  for (int i = 0; i < 8; ++i) params.push_back(Tensor::rand({16, 4 + i}).realize().requires_grad_());
  optim::AdamW opt(params, 1e-2);
  auto step = [&] {
    Tensor loss = Tensor::zeros({});
    for (Tensor& p : params) loss = loss + (p * p).sum();
    loss.backward();
    {
      NoGradGuard no_grad;
      for (Tensor& p : params) {
        Tensor g = *p.grad();
        g.realize();  // so the step below counts only the update kernels
      }
      loss.realize();  // (a lazy loss that reads the parameters would be computed before their update)
    }
    RealizeStats before = realize_stats();
    opt.step();
    opt.zero_grad();
    RealizeStats after = realize_stats();
    return std::pair{after.kernels_launched - before.kernels_launched, after.kernels_lowered - before.kernels_lowered};
  };
  step();
  step();
  auto [launched, lowered] = step();
  // m, v and p of each parameter: at most 3 stores per parameter, never one kernel per op.
  CHECK(launched <= 3 * params.size());
  CHECK(lowered == 0);  // the learning rate and bias corrections are inputs, not constants
}

TEST_CASE("optim: gradient clipping, accumulation and LR schedules", "[nn][optim]") {
  Tensor a = Tensor::from_vector<float>({3, 0}, {2}).requires_grad_(), b = Tensor::from_vector<float>({0, 4}, {2}).requires_grad_();
  (a * a * 0.5f + b * b * 0.5f).sum().backward();  // grads (3, 0) and (0, 4): global norm 5
  Tensor norm = optim::clip_grad_norm({a, b}, 1.0);
  CHECK(norm.item<float>() == Approx(5.0f));
  check_close(a.grad()->to_vector<float>(), {0.6, 0}, 1e-5);
  check_close(b.grad()->to_vector<float>(), {0, 0.8}, 1e-5);

  // 4 micro-batches of 2, each loss scaled by 1/4, equal one batch of 8.
  std::vector<float> xs = randoms(8 * 3, 31), ys = randoms(8, 32);
  Tensor::manual_seed(5);
  nn::Linear one(3, 1), acc(3, 1);
  acc.load_state_dict(one.state_dict());
  Tensor X = Tensor::from_vector(xs, {8, 3}), Y = Tensor::from_vector(ys, {8, 1});
  nn::mse_loss(one(X), Y).backward();
  for (int i = 0; i < 4; ++i) (nn::mse_loss(acc(X.shrink({{2 * i, 2 * i + 2}, {0, 3}})), Y.shrink({{2 * i, 2 * i + 2}, {0, 1}})) * 0.25f).backward();
  std::vector<float> g1 = one.weight.grad()->to_vector<float>(), g4 = acc.weight.grad()->to_vector<float>();
  for (size_t i = 0; i < 3; ++i) CHECK(g4[i] == Approx(g1[i]).epsilon(1e-5));

  Tensor p = Tensor::ones({1}).requires_grad_();
  optim::SGD sgd({p}, 1.0);
  optim::StepLR step_lr(sgd, 2, 0.5);
  std::vector<double> lrs;
  for (int i = 0; i < 5; ++i) lrs.push_back((step_lr.step(), sgd.lr));
  CHECK(lrs == std::vector<double>{1.0, 0.5, 0.5, 0.25, 0.25});
  optim::SGD sgd2({p}, 2.0);
  optim::CosineAnnealingLR cos(sgd2, 4);
  cos.step();
  CHECK(sgd2.lr == Approx(1 + std::cos(M_PI / 4)));
  optim::SGD sgd3({p}, 1.0);
  optim::WarmupCosineLR warm(sgd3, 4, 12);
  CHECK(sgd3.lr == Approx(0.25));
  for (int i = 0; i < 3; ++i) warm.step();
  CHECK(sgd3.lr == Approx(1.0));
  for (int i = 0; i < 9; ++i) warm.step();
  CHECK(sgd3.lr == Approx(0.0).margin(1e-12));

  auto lrs_of = [](optim::LRScheduler& sched, optim::Optimizer& opt, int n) {
    std::vector<double> out;
    for (int i = 0; i < n; ++i) out.push_back((sched.step(), opt.lr));
    return out;
  };
  optim::SGD e({p}, 2.0);
  optim::ExponentialLR expo(e, 0.5);
  CHECK(lrs_of(expo, e, 3) == std::vector<double>{1.0, 0.5, 0.25});
  optim::SGD ms({p}, 1.0);
  optim::MultiStepLR multi(ms, {4, 2}, 0.1);  // any order, as PyTorch's
  std::vector<double> got = lrs_of(multi, ms, 5), want = {1.0, 0.1, 0.1, 0.01, 0.01};
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]));
  optim::SGD ms2({p}, 1.0);
  optim::MultiStepLR twice(ms2, {0, 3, 3}, 0.5);  // a milestone at 0 applies at once; a repeated one twice
  CHECK(ms2.lr == 0.5);
  got = lrs_of(twice, ms2, 3), want = {0.5, 0.5, 0.125};
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]));
  optim::SGD la({p}, 0.5);
  optim::LambdaLR lambda(la, [](int64_t s) { return 1.0 / double(s + 2); });
  CHECK(la.lr == 0.25);  // factor(0) applies at once, as in PyTorch
  CHECK(lrs_of(lambda, la, 3) == std::vector<double>{0.5 / 3, 0.125, 0.1});

  // ReduceLROnPlateau (mode min, patience 2, factor 0.5, cooldown 1): torch's sequence of learning
  // rates for these losses, worked by hand from its rules.
  optim::SGD pl({p}, 1.0);
  optim::ReduceLROnPlateau plateau(pl, "min", 0.5, 2, 1e-4, "rel", 1, 0.2);
  std::vector<double> losses = {1.0, 0.9, 0.95, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.5, 0.6, 0.7, 0.8, 0.9}, lr_after;
  for (double l : losses) lr_after.push_back((plateau.step(l), pl.lr));
  // 0.9 is best; 3 bad (0.95, 0.91, 0.92) -> 0.5 at the 5th; the cooldown eats 0.93; 0.94, 0.95, 0.96
  // -> 0.25 at the 9th; 0.5 is best (and ends the cooldown); 0.6, 0.7, 0.8 -> 0.2 (min_lr, not 0.125).
  CHECK(lr_after == std::vector<double>{1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.2, 0.2});
  CHECK(plateau.best() == 0.5);
  optim::SGD mx({p}, 1.0);
  optim::ReduceLROnPlateau up(mx, "max", 0.1, 0, 0.5, "abs");
  up.step(1.0);
  up.step(1.4);  // not better than 1.0 + 0.5: patience 0 cuts at once
  CHECK(mx.lr == Approx(0.1));
  CHECK_THROWS_WITH(optim::ReduceLROnPlateau(mx, "lowest"), Catch::Contains("ReduceLROnPlateau: mode \"lowest\" is not \"min\" or \"max\""));
}

// Adadelta, Adamax, NAdam, RAdam and amsgrad: two parameters, a {3} and b {2, 2}, given gradients fixed in
// advance, against a host reference in double written from the algorithm boxes of PyTorch's documentation
// (where PyTorch 1.13's code computes otherwise, the reference follows the code and says so).
namespace {
const std::vector<double> start_values = {0.5, -1.2, 2.0, 1.0, -0.3, 0.7, -2.5};  // a, then b row-major

// The gradients change sign and size from step to step; every third step's are 20 times smaller, so
// running averages and maxima fall as well as rise (amsgrad's maximum and Adamax's exp_inf then bind).
double grad_at(int step, size_t element) {
  double scale = step % 3 == 2 ? 0.05 : 1 + 0.1 * step;
  return std::sin(0.9 * static_cast<double>(element) + 1.7 * step + 0.3) * scale;
}

std::vector<Tensor> fresh_params() {
  std::vector<float> v(start_values.begin(), start_values.end());
  return {Tensor::from_vector<float>({v[0], v[1], v[2]}, {3}).requires_grad_(),
          Tensor::from_vector<float>({v[3], v[4], v[5], v[6]}, {2, 2}).requires_grad_()};
}

void set_grads(std::vector<Tensor>& params, int step) {
  size_t element = 0;
  for (Tensor& p : params) {
    std::vector<float> g;
    for (int64_t j = 0; j < p.numel(); ++j) g.push_back(static_cast<float>(grad_at(step, element++)));
    p.set_grad(Tensor::from_vector(g, p.shape()));
  }
}

std::vector<float> values_of(std::vector<Tensor>& params) {
  std::vector<float> out;
  for (Tensor& p : params)
    for (float x : p.to_vector<float>()) out.push_back(x);
  return out;
}

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

// kiln's values after each step; `after_step` runs after each optimizer step (a schedule's step).
std::vector<std::vector<float>> kiln_on_fixed_grads(const MakeOptimizer& make, int steps, const std::function<void()>& after_step = {}) {
  std::vector<Tensor> params = fresh_params();
  std::unique_ptr<optim::Optimizer> opt = make(params);
  std::vector<std::vector<float>> out;
  for (int s = 0; s < steps; ++s) {
    set_grads(params, s);
    opt->step();
    if (after_step) after_step();
    out.push_back(values_of(params));
  }
  return out;
}

// One element's update: p, its gradient, its state (zero before the first step) and the step t from 1.
using HostRule = std::function<void(double& p, double g, std::array<double, 3>& state, int t)>;

std::vector<std::vector<double>> host_on_fixed_grads(const HostRule& rule, int steps) {
  std::vector<double> p = start_values;
  std::vector<std::array<double, 3>> state(p.size(), std::array<double, 3>{0, 0, 0});
  std::vector<std::vector<double>> out;
  for (int t = 1; t <= steps; ++t) {
    for (size_t j = 0; j < p.size(); ++j) rule(p[j], grad_at(t - 1, j), state[j], t);
    out.push_back(p);
  }
  return out;
}

// v_t = rho v + (1 - rho) g^2; dx = sqrt(u + eps) / sqrt(v_t + eps) g; u_t = rho u + (1 - rho) dx^2; p -= lr dx.
HostRule host_adadelta(std::function<double(int t)> lr, double rho, double eps, double wd) {
  return [=](double& p, double g, std::array<double, 3>& s, int t) {
    g += wd * p;
    auto& [v, u, unused] = s;
    v = rho * v + (1 - rho) * g * g;
    double dx = std::sqrt(u + eps) / std::sqrt(v + eps) * g;
    u = rho * u + (1 - rho) * dx * dx;
    p -= lr(t) * dx;
  };
}

// m_t = b1 m + (1 - b1) g; u_t = max(b2 u, |g| + eps); p -= lr m_t / ((1 - b1^t) u_t).
HostRule host_adamax(double lr, double b1, double b2, double eps, double wd) {
  return [=](double& p, double g, std::array<double, 3>& s, int t) {
    g += wd * p;
    auto& [m, u, unused] = s;
    m = b1 * m + (1 - b1) * g;
    u = std::max(b2 * u, std::abs(g) + eps);
    p -= lr * m / ((1 - std::pow(b1, t)) * u);
  };
}

// mu_t = b1 (1 - 0.96^(t psi) / 2); m, v as Adam's; m^ = mu_{t+1} m_t / (1 - P') + (1 - mu_t) g / (1 - P_t)
// with P_t = prod mu_1..t; v^ = v_t / (1 - b2^t); p -= lr m^ / (sqrt(v^) + eps). The box has P' = P_{t+1};
// PyTorch 1.13's default (single-tensor) code has P' = P_t mu_t mu_{t+1}: `documented` picks the box.
HostRule host_nadam(double lr, double b1, double b2, double eps, double wd, double psi, bool documented = false) {
  return [=](double& p, double g, std::array<double, 3>& s, int t) {
    g += wd * p;
    auto& [m, v, product] = s;
    double mu = b1 * (1 - 0.5 * std::pow(0.96, t * psi)), mu_next = b1 * (1 - 0.5 * std::pow(0.96, (t + 1) * psi));
    product = (t == 1 ? 1 : product) * mu;
    double product_next = documented ? product * mu_next : product * mu * mu_next;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    double m_hat = mu_next * m / (1 - product_next) + (1 - mu) * g / (1 - product);
    p -= lr * m_hat / (std::sqrt(v / (1 - std::pow(b2, t))) + eps);
  };
}

// m, v as Adam's; m^ = m_t / (1 - b1^t); rho_inf = 2 / (1 - b2) - 1, rho_t = rho_inf - 2 t b2^t / (1 - b2^t);
// if rho_t > 5: p -= lr m^ r_t l_t with r_t the rectification and l_t = sqrt(1 - b2^t) / (sqrt(v_t) + eps)
// (the box has sqrt((1 - b2^t) / (v_t + eps)); 1.13's code adds eps after the root), else p -= lr m^.
HostRule host_radam(double lr, double b1, double b2, double eps, double wd) {
  return [=](double& p, double g, std::array<double, 3>& s, int t) {
    g += wd * p;
    auto& [m, v, unused] = s;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    double m_hat = m / (1 - std::pow(b1, t)), rho_inf = 2 / (1 - b2) - 1, rho_t = rho_inf - 2 * t * std::pow(b2, t) / (1 - std::pow(b2, t));
    if (rho_t > 5) {
      double r = std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t));
      p -= lr * m_hat * r * std::sqrt(1 - std::pow(b2, t)) / (std::sqrt(v) + eps);
    } else {
      p -= lr * m_hat;
    }
  };
}

// Adam (AdamW: decoupled) with amsgrad: v_max = max(v_max, v_t); p -= lr m^ / (sqrt(v_max / (1 - b2^t)) + eps).
// The box takes the maximum of the bias-corrected v^_t; PyTorch 1.13's code and libtorch take that of the
// raw v_t and correct it with this step's 1 - b2^t, as here (tests/torch/test_train.cpp checks libtorch).
HostRule host_amsgrad(double lr, double b1, double b2, double eps, double wd, bool decoupled) {
  return [=](double& p, double g, std::array<double, 3>& s, int t) {
    if (decoupled) p *= 1 - lr * wd;
    else g += wd * p;
    auto& [m, v, v_max] = s;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    v_max = std::max(v_max, v);
    p -= lr / (1 - std::pow(b1, t)) * m / (std::sqrt(v_max / (1 - std::pow(b2, t))) + eps);
  };
}

// float32 against double over a few steps: measured within 4e-7 on the CPU device (PyTorch's own float32
// runs of these cases are within 3e-7 of its float64 ones); 1e-5 leaves room for devices with a less exact
// sqrt or division. The parameters move by 1e-2 to 1; NAdam's two variants differ by 3e-4 and more.
constexpr double step_tol = 1e-5;
}  // namespace

TEST_CASE("optim: Adadelta follows PyTorch's update rule, also under pytorch/examples' MNIST StepLR", "[nn][optim]") {
  auto constant = [](double lr) { return [lr](int) { return lr; }; };
  compare(kiln_on_fixed_grads([](std::vector<Tensor> p) { return std::make_unique<optim::Adadelta>(p); }, 6),
          host_on_fixed_grads(host_adadelta(constant(1.0), 0.9, 1e-6, 0), 6), step_tol);
  compare(kiln_on_fixed_grads([](std::vector<Tensor> p) { return std::make_unique<optim::Adadelta>(p, 0.5, 0.6, 1e-3, 0.1); }, 6),
          host_on_fixed_grads(host_adadelta(constant(0.5), 0.6, 1e-3, 0.1), 6), step_tol);
  // The MNIST example: Adadelta(lr=1.0) with StepLR(step_size=1, gamma=0.7): step t runs at 0.7^(t-1).
  std::unique_ptr<optim::StepLR> schedule;
  auto make = [&](std::vector<Tensor> p) {
    auto opt = std::make_unique<optim::Adadelta>(p, 1.0);
    schedule = std::make_unique<optim::StepLR>(*opt, 1, 0.7);
    return opt;
  };
  auto decayed = [](int t) { return std::pow(0.7, t - 1); };
  compare(kiln_on_fixed_grads(make, 6, [&] { schedule->step(); }), host_on_fixed_grads(host_adadelta(decayed, 0.9, 1e-6, 0), 6), step_tol);
}

TEST_CASE("optim: Adamax follows PyTorch's update rule", "[nn][optim]") {
  compare(kiln_on_fixed_grads([](std::vector<Tensor> p) { return std::make_unique<optim::Adamax>(p, 0.05); }, 6),
          host_on_fixed_grads(host_adamax(0.05, 0.9, 0.999, 1e-8, 0), 6), step_tol);
  compare(kiln_on_fixed_grads([](std::vector<Tensor> p) { return std::make_unique<optim::Adamax>(p, 0.1, 0.8, 0.95, 1e-3, 0.2); }, 6),
          host_on_fixed_grads(host_adamax(0.1, 0.8, 0.95, 1e-3, 0.2), 6), step_tol);
}

TEST_CASE("optim: NAdam follows PyTorch 1.13's update rule", "[nn][optim]") {
  std::vector<std::vector<float>> got = kiln_on_fixed_grads([](std::vector<Tensor> p) { return std::make_unique<optim::NAdam>(p, 0.05); }, 6);
  compare(got, host_on_fixed_grads(host_nadam(0.05, 0.9, 0.999, 1e-8, 0, 4e-3), 6), step_tol);
  compare(kiln_on_fixed_grads([](std::vector<Tensor> p) { return std::make_unique<optim::NAdam>(p, 0.1, 0.8, 0.9, 1e-6, 0.1, 0.2); }, 6),
          host_on_fixed_grads(host_nadam(0.1, 0.8, 0.9, 1e-6, 0.1, 0.2), 6), step_tol);
  // torch.optim.NAdam(lr=0.05) of PyTorch 1.13.0 on these gradients, in float64: a[0] after steps 1 and
  // 6. Its foreach=True code, which has the box's product, gives 0.447177413 and 0.389884263.
  CHECK(got[0][0] == Approx(0.447523443).epsilon(1e-6));
  CHECK(got[5][0] == Approx(0.390571924).epsilon(1e-6));
  std::vector<std::vector<double>> box = host_on_fixed_grads(host_nadam(0.05, 0.9, 0.999, 1e-8, 0, 4e-3, true), 6);
  CHECK(std::abs(box[5][0] - 0.389884263) < 1e-8);
}

TEST_CASE("optim: RAdam follows PyTorch's update rule on both sides of the rectification switch", "[nn][optim]") {
  // rho_t with betas (0.9, 0.999): 4.99 at step 5 and 5.99 at step 6, so 8 steps take both branches.
  auto rho = [](double b2, int t) { return 2 / (1 - b2) - 1 - 2 * t * std::pow(b2, t) / (1 - std::pow(b2, t)); };
  REQUIRE(rho(0.999, 5) <= 5);
  REQUIRE(rho(0.999, 6) > 5);
  REQUIRE(rho(0.99, 5) <= 5);
  REQUIRE(rho(0.99, 6) > 5);
  compare(kiln_on_fixed_grads([](std::vector<Tensor> p) { return std::make_unique<optim::RAdam>(p, 0.05); }, 8),
          host_on_fixed_grads(host_radam(0.05, 0.9, 0.999, 1e-8, 0), 8), step_tol);
  compare(kiln_on_fixed_grads([](std::vector<Tensor> p) { return std::make_unique<optim::RAdam>(p, 0.1, 0.8, 0.99, 1e-6, 0.1); }, 8),
          host_on_fixed_grads(host_radam(0.1, 0.8, 0.99, 1e-6, 0.1), 8), step_tol);
}

TEST_CASE("optim: Adam and AdamW with amsgrad follow PyTorch's update rule", "[nn][optim]") {
  std::vector<std::vector<float>> with = kiln_on_fixed_grads(
      [](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(p, 0.05, 0.9, 0.9, 1e-8, 0, false, true); }, 6);
  compare(with, host_on_fixed_grads(host_amsgrad(0.05, 0.9, 0.9, 1e-8, 0, false), 6), step_tol);
  compare(kiln_on_fixed_grads([](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(p, 0.05, 0.8, 0.9, 1e-8, 0.1, false, true); }, 6),
          host_on_fixed_grads(host_amsgrad(0.05, 0.8, 0.9, 1e-8, 0.1, false), 6), step_tol);
  compare(kiln_on_fixed_grads([](std::vector<Tensor> p) { return std::make_unique<optim::AdamW>(p, 0.05, 0.9, 0.9, 1e-8, 0.1, true); }, 6),
          host_on_fixed_grads(host_amsgrad(0.05, 0.9, 0.9, 1e-8, 0.1, true), 6), step_tol);
  // The maximum binds on these gradients: without amsgrad a[0] ends 2.5e-3 away.
  std::vector<std::vector<float>> without =
      kiln_on_fixed_grads([](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(p, 0.05, 0.9, 0.9); }, 6);
  CHECK(std::abs(with[5][0] - without[5][0]) > 1e-3);
}

TEST_CASE("optim: Adadelta, Adamax, NAdam, RAdam and amsgrad resume from a state_dict as if never stopped", "[nn][optim]") {
  struct Case {
    MakeOptimizer make;
    std::vector<std::string> state;  // per parameter
  };
  std::vector<Case> cases = {
      {[](std::vector<Tensor> p) { return std::make_unique<optim::Adadelta>(p, 0.5, 0.6, 1e-3, 0.1); }, {"acc_delta", "square_avg"}},
      {[](std::vector<Tensor> p) { return std::make_unique<optim::Adamax>(p, 0.1); }, {"exp_avg", "exp_inf"}},
      {[](std::vector<Tensor> p) { return std::make_unique<optim::NAdam>(p, 0.1, 0.8, 0.9, 1e-6, 0.1, 0.2); }, {"exp_avg", "exp_avg_sq"}},
      {[](std::vector<Tensor> p) { return std::make_unique<optim::RAdam>(p, 0.05); }, {"exp_avg", "exp_avg_sq"}},
      {[](std::vector<Tensor> p) { return std::make_unique<optim::AdamW>(p, 0.05, 0.9, 0.9, 1e-8, 0.1, true); },
       {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    INFO("case " << c);
    // 8 steps straight, against 4 steps, then a new optimizer that loads the first one's state.
    std::vector<std::vector<float>> straight = kiln_on_fixed_grads(cases[c].make, 8);
    std::vector<Tensor> params = fresh_params();
    std::unique_ptr<optim::Optimizer> first = cases[c].make(params);
    for (int s = 0; s < 4; ++s) {
      set_grads(params, s);
      first->step();
    }
    std::map<std::string, Tensor> state = first->state_dict();
    std::vector<std::string> names;
    for (const auto& [name, t] : state) names.push_back(name);
    std::vector<std::string> want;
    for (const std::string& name : cases[c].state) want.insert(want.end(), {name + ".0", name + ".1"});
    CHECK(names == want);
    CHECK(first->state_bytes() == cases[c].state.size() * 7 * sizeof(float));
    std::unique_ptr<optim::Optimizer> resumed = cases[c].make(params);
    resumed->load_state_dict(state, first->steps());
    for (int s = 4; s < 8; ++s) {
      set_grads(params, s);
      resumed->step();
      INFO("step " << s + 1);
      CHECK(values_of(params) == straight[s]);  // the same kernels on the same values: bit for bit
    }
  }
}

TEST_CASE("optim: the new optimizers compile their step once: RAdam's branch and NAdam's momentum are inputs", "[nn][optim]") {
  // Betas and eps that no other test uses (they are constants of the kernels), so that a kernel compiled
  // by another test cannot hide a recompile here.
  std::vector<MakeOptimizer> makes = {
      [](std::vector<Tensor> p) { return std::make_unique<optim::RAdam>(p, 0.05, 0.85, 0.997, 3e-8); },  // rectified from step 6
      [](std::vector<Tensor> p) { return std::make_unique<optim::NAdam>(p, 0.05, 0.85, 0.997, 3e-8); },
      [](std::vector<Tensor> p) { return std::make_unique<optim::Adamax>(p, 0.05, 0.85, 0.997, 3e-8); },
      [](std::vector<Tensor> p) { return std::make_unique<optim::Adadelta>(p, 1.0, 0.85, 3e-6); },
      [](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(p, 0.05, 0.85, 0.997, 3e-8, 0, false, true); },
  };
  for (size_t c = 0; c < makes.size(); ++c) {
    std::vector<Tensor> params = fresh_params();
    std::unique_ptr<optim::Optimizer> opt = makes[c](params);
    for (int s = 0; s < 8; ++s) {
      set_grads(params, s);
      RealizeStats before = realize_stats();
      opt->step();
      RealizeStats after = realize_stats();
      INFO("case " << c << ", step " << s + 1);
      if (s < 2) continue;  // the first step makes the state; from the third on, nothing is new
      CHECK(after.schedule_misses == before.schedule_misses);  // the same graph as the step before
      CHECK(after.kernels_lowered == before.kernels_lowered);
    }
  }
}

TEST_CASE("optim: bad hyperparameters of the new optimizers are errors naming the value and the range", "[nn][optim]") {
  Tensor q = Tensor::ones({2}).requires_grad_();
  CHECK_THROWS_WITH(optim::Adadelta({q}, -1.0), Catch::Contains("Adadelta: learning rate must be >= 0, got -1"));
  CHECK_THROWS_WITH(optim::Adadelta({q}, 1.0, 1.5), Catch::Contains("Adadelta: rho must be in [0, 1], got 1.5"));
  CHECK_THROWS_WITH(optim::Adadelta({q}, 1.0, 0.9, -1e-6), Catch::Contains("Adadelta: eps must be >= 0, got -1e-06"));
  CHECK_THROWS_WITH(optim::Adamax({q}, 2e-3, 0.9, 1.0), Catch::Contains("Adamax: betas must be in [0, 1), got 0.9, 1"));
  CHECK_THROWS_WITH(optim::Adamax({q}, 2e-3, 0.9, 0.999, 1e-8, -0.1), Catch::Contains("Adamax: weight_decay must be >= 0, got -0.1"));
  CHECK_THROWS_WITH(optim::NAdam({q}, 2e-3, 0.9, 0.999, 1e-8, 0, -4e-3), Catch::Contains("NAdam: momentum_decay must be >= 0, got -0.004"));
  CHECK_THROWS_WITH(optim::NAdam({q}, -2e-3), Catch::Contains("NAdam: learning rate must be >= 0, got -0.002"));
  CHECK_THROWS_WITH(optim::RAdam({q}, 1e-3, -0.1), Catch::Contains("RAdam: betas must be in [0, 1), got -0.1, 0.999"));
  CHECK_THROWS_WITH(optim::AdamW({q}, 1e-3, 0.9, 1.5, 1e-8, 0.01, true), Catch::Contains("AdamW: betas must be in [0, 1), got 0.9, 1.5"));
  CHECK_NOTHROW(optim::Adadelta({q}, 0.0, 1.0, 0.0));  // the ends of the ranges are valid
}
