// Optimizers, gradient clipping and learning-rate schedules, each against a plain host computation of
// PyTorch's documented formulas (written out here, independent of kiln's graph code).
#include <cmath>

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
}  // namespace

TEST_CASE("optim: SGD, Adam and AdamW follow PyTorch's update rules", "[nn]") {
  auto compare = [](const std::vector<std::vector<float>>& got, const std::vector<std::vector<double>>& want) {
    for (size_t s = 0; s < want.size(); ++s) {
      INFO("step " << s + 1);
      check_close(got[s], want[s], 2e-5);
    }
  };
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
TEST_CASE("optim: RMSprop and Adagrad follow PyTorch's update rules", "[nn]") {
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
  auto compare = [](const std::vector<std::vector<float>>& got, const std::vector<std::vector<double>>& want) {
    for (size_t s = 0; s < want.size(); ++s) {
      INFO("step " << s + 1);
      check_close(got[s], want[s], 2e-5);
    }
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

TEST_CASE("optim: an Adam step over many parameters takes few kernels, compiled once", "[nn]") {
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

TEST_CASE("optim: gradient clipping, accumulation and LR schedules", "[nn]") {
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
