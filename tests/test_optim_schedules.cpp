// The learning-rate schedules LinearLR, ConstantLR, PolynomialLR, CosineAnnealingWarmRestarts and
// OneCycleLR. kiln computes each step's rate in closed form (lr_at); PyTorch 1.13 mostly updates the
// previous rate step by step (its get_lr), so the references here are those chained updates, written out
// on the host, plus a few values worked by hand.
#include <cmath>
#include <functional>
#include <numbers>
#include <string>
#include <vector>

#include "frontend/optim.h"
#include "helpers.h"

using namespace kiln;

namespace {
constexpr double pi = std::numbers::pi;

// The rates of steps 0..n: the one the schedule sets on construction, then one per step().
std::vector<double> kiln_lrs(optim::LRScheduler& schedule, optim::Optimizer& opt, int n) {
  std::vector<double> out = {opt.lr};
  for (int i = 0; i < n; ++i) {
    schedule.step();
    out.push_back(opt.lr);
  }
  return out;
}

// PyTorch's way: lr_0 = first, then lr_t = next(lr_{t-1}, t).
std::vector<double> chained_lrs(double first, const std::function<double(double lr, int t)>& next, int n) {
  std::vector<double> out = {first};
  for (int t = 1; t <= n; ++t) out.push_back(next(out.back(), t));
  return out;
}

void compare_lrs(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t t = 0; t < want.size(); ++t) {
    INFO("step " << t << ": kiln " << got[t] << ", reference " << want[t]);
    CHECK(got[t] == Approx(want[t]).epsilon(1e-12).margin(1e-15));
  }
}

Tensor param() { return Tensor::ones({1}).requires_grad_(); }
}  // namespace

TEST_CASE("optim: LinearLR follows PyTorch's chained update", "[nn][optim]") {
  auto chained = [](double base, double start, double end, int total) {
    // lr_0 = base start; for 1 <= t <= total: lr_t = lr_{t-1} (1 + (end - start) / (total start + (t - 1) (end - start))).
    return chained_lrs(base * start, [=](double lr, int t) {
      if (t > total) return lr;
      return lr * (1 + (end - start) / (total * start + (t - 1) * (end - start)));
    }, 30);
  };
  optim::SGD opt({param()}, 0.1);
  optim::LinearLR warmup(opt, 1.0 / 3, 1.0, 5);
  std::vector<double> got = kiln_lrs(warmup, opt, 30);
  compare_lrs(got, chained(0.1, 1.0 / 3, 1.0, 5));
  // By hand: 0.1 / 3 at once, 0.1 (1/3 + 2/3 * 1/5) = 0.04667 after one step, 0.1 from step 5 on.
  CHECK(got[0] == Approx(0.1 / 3));
  CHECK(got[1] == Approx(0.046666666666667));
  CHECK(got[5] == Approx(0.1));
  CHECK(got[30] == Approx(0.1));
  optim::SGD down({param()}, 2.0);
  optim::LinearLR decay(down, 0.5, 0.1, 12);
  compare_lrs(kiln_lrs(decay, down, 30), chained(2.0, 0.5, 0.1, 12));
  CHECK(down.lr == Approx(0.2));
}

TEST_CASE("optim: ConstantLR follows PyTorch's chained update", "[nn][optim]") {
  // lr_0 = base factor; lr_t = lr_{t-1} / factor at t = total, else lr_{t-1}.
  auto chained = [](double base, double factor, int total) {
    return chained_lrs(base * factor, [=](double lr, int t) { return t == total ? lr / factor : lr; }, 30);
  };
  optim::SGD opt({param()}, 0.9);
  optim::ConstantLR constant(opt, 1.0 / 3, 5);
  std::vector<double> got = kiln_lrs(constant, opt, 30);
  compare_lrs(got, chained(0.9, 1.0 / 3, 5));
  CHECK(got[4] == Approx(0.3));  // by hand: 0.9 / 3 for steps 0..4, 0.9 from 5
  CHECK(got[5] == Approx(0.9));
  optim::SGD other({param()}, 1.0);
  optim::ConstantLR longer(other, 0.25, 17);
  compare_lrs(kiln_lrs(longer, other, 30), chained(1.0, 0.25, 17));
}

TEST_CASE("optim: PolynomialLR follows PyTorch's chained update", "[nn][optim]") {
  // lr_0 = base; for 1 <= t <= total: lr_t = lr_{t-1} ((1 - t / total) / (1 - (t - 1) / total))^power.
  auto chained = [](double base, int total, double power) {
    return chained_lrs(base, [=](double lr, int t) {
      if (t > total) return lr;
      return lr * std::pow((1 - double(t) / total) / (1 - double(t - 1) / total), power);
    }, 30);
  };
  optim::SGD opt({param()}, 1.0);
  optim::PolynomialLR square(opt, 4, 2.0);
  std::vector<double> got = kiln_lrs(square, opt, 30);
  compare_lrs(got, chained(1.0, 4, 2.0));
  // By hand: (1 - t/4)^2 = 1, 0.5625, 0.25, 0.0625, then 0 from step 4 on.
  CHECK(std::vector<double>(got.begin(), got.begin() + 6) == std::vector<double>{1, 0.5625, 0.25, 0.0625, 0, 0});
  optim::SGD other({param()}, 0.3);
  optim::PolynomialLR linear(other);  // PyTorch's defaults: 5 steps, power 1
  compare_lrs(kiln_lrs(linear, other, 30), chained(0.3, 5, 1.0));
  CHECK(other.lr == 0);
}

TEST_CASE("optim: CosineAnnealingWarmRestarts follows PyTorch's step-by-step cycle count", "[nn][optim]") {
  // PyTorch's step(): T_cur += 1; at T_cur >= T_i a restart: T_cur -= T_i, T_i *= T_mult. The rate is
  // eta_min + (base - eta_min) (1 + cos(pi T_cur / T_i)) / 2.
  auto stepwise = [](double base, int t_0, int t_mult, double eta_min) {
    std::vector<double> out;
    int t_cur = 0, t_i = t_0;
    for (int t = 0; t <= 30; ++t) {
      if (t > 0 && ++t_cur >= t_i) {
        t_cur -= t_i;
        t_i *= t_mult;
      }
      out.push_back(eta_min + (base - eta_min) * (1 + std::cos(pi * t_cur / t_i)) / 2);
    }
    return out;
  };
  optim::SGD opt({param()}, 1.0);
  optim::CosineAnnealingWarmRestarts sgdr(opt, 3, 2);
  std::vector<double> got = kiln_lrs(sgdr, opt, 30);
  compare_lrs(got, stepwise(1.0, 3, 2, 0));
  // By hand: cycles of 3, 6, 12 and 24 steps start at steps 0, 3, 9 and 21. Step 1: (1 + cos(pi/3)) / 2 =
  // 0.75; step 3 restarts at 1; step 4: (1 + cos(pi/6)) / 2 = 0.9330; step 6: (1 + cos(pi/2)) / 2 = 0.5.
  CHECK(got[1] == Approx(0.75));
  CHECK(got[3] == 1.0);
  CHECK(got[4] == Approx(0.9330127));
  CHECK(got[6] == Approx(0.5));
  CHECK(got[9] == 1.0);
  CHECK(got[21] == 1.0);
  optim::SGD other({param()}, 0.5);
  optim::CosineAnnealingWarmRestarts fixed(other, 7, 1, 0.01);
  compare_lrs(kiln_lrs(fixed, other, 30), stepwise(0.5, 7, 1, 0.01));
  // Resuming deep into training sets that step's rate: cycles of 1, 2, 4, ... steps start at 2^k - 1, so
  // step 2^20 - 1 restarts at the top and step 2^20 - 1 + 2^19 is half way down its cycle.
  optim::SGD resumed({param()}, 0.5);
  optim::CosineAnnealingWarmRestarts doubling(resumed, 1, 2);
  doubling.set_count((1 << 20) - 1);
  CHECK(resumed.lr == 0.5);
  doubling.set_count((1 << 20) - 1 + (1 << 19));
  CHECK(resumed.lr == Approx(0.25));
}

TEST_CASE("optim: OneCycleLR follows PyTorch's phases", "[nn][optim]") {
  // max_lr 1, 30 steps, pct_start 0.3: the initial rate is 1/25 = 0.04 and the last 0.04/1e4 = 4e-6; the
  // first phase ends at step 0.3 * 30 - 1 = 8 (the peak), the second at 29.
  optim::SGD opt({param()}, 0.5);
  optim::OneCycleLR cycle(opt, 1.0, 30);
  CHECK(opt.lr == Approx(0.04));  // replaces the optimizer's 0.5 at once
  std::vector<double> got = kiln_lrs(cycle, opt, 30);
  // Cosine: step 2 is a quarter of the way up: 1 + (0.04 - 1) / 2 (cos(pi/4) + 1) = 0.180589; step 4
  // half way: 0.52. Step 30, allowed as in PyTorch, lies past the second phase's end at pct 22/21:
  // 4e-6 + (1 - 4e-6) / 2 (cos(22 pi/21) + 1) = 0.00558856.
  CHECK(got[0] == Approx(0.04));
  CHECK(got[2] == Approx(0.1805887450));
  CHECK(got[4] == Approx(0.52));
  CHECK(got[8] == 1.0);
  CHECK(got[29] == Approx(4e-6));
  CHECK(got[30] == Approx(0.00558856));
  for (size_t t = 1; t < got.size() - 1; ++t) {
    INFO("step " << t);
    CHECK((t <= 8 ? got[t] > got[t - 1] : got[t] < got[t - 1]));
  }
  // torch.optim.lr_scheduler.OneCycleLR of PyTorch 1.13.0 (cycle_momentum=False) at steps 13 and 20.
  CHECK(got[13] == Approx(0.8665264698).epsilon(1e-9));
  CHECK(got[20] == Approx(0.3887419781).epsilon(1e-9));

  // Linear, three phases (pct_start 0.25 of 40: up to step 9, down to the initial 0.2 at step 18, then to
  // 0.2 / 100 = 0.002 at 39), max_lr 2, div_factor 10, final_div_factor 100.
  optim::SGD three({param()}, 0.5);
  optim::OneCycleLR linear(three, 2.0, 40, 0.25, "linear", 10, 100, true);
  got = kiln_lrs(linear, three, 40);
  CHECK(got[0] == Approx(0.2));
  CHECK(got[3] == Approx(0.2 + 1.8 / 3));  // a third of the way up
  CHECK(got[9] == Approx(2.0));
  CHECK(got[12] == Approx(2.0 - 1.8 / 3));
  CHECK(got[18] == Approx(0.2));
  CHECK(got[39] == Approx(0.002));
  CHECK(got[40] == Approx(0.002 - 0.198 / 21));  // past the end the line goes on, below 0, as in PyTorch
}

TEST_CASE("optim: bad schedule arguments and stepping OneCycleLR past its end are errors that say so", "[nn][optim]") {
  optim::SGD opt({param()}, 1.0);
  CHECK_THROWS_WITH(optim::LinearLR(opt, 0.0), Catch::Contains("LinearLR: start_factor must be in (0, 1], got 0"));
  CHECK_THROWS_WITH(optim::LinearLR(opt, 0.5, 1.5), Catch::Contains("LinearLR: end_factor must be in [0, 1], got 1.5"));
  CHECK_THROWS_WITH(optim::ConstantLR(opt, 1.5), Catch::Contains("ConstantLR: factor must be in [0, 1], got 1.5"));
  CHECK_THROWS_WITH(optim::PolynomialLR(opt, 0), Catch::Contains("PolynomialLR: total_iters must be positive, got 0"));
  CHECK_THROWS_WITH(optim::PolynomialLR(opt, 5, std::nan("")), Catch::Contains("PolynomialLR: power must be a finite number >= 0, got nan"));
  CHECK_THROWS_WITH(optim::PolynomialLR(opt, 5, -1.0), Catch::Contains("PolynomialLR: power must be a finite number >= 0, got -1"));
  CHECK_THROWS_WITH(optim::StepLR(opt, 2).set_count(-5), Catch::Contains("set_count: -5 steps"));
  CHECK_THROWS_WITH(optim::CosineAnnealingWarmRestarts(opt, 0),
                    Catch::Contains("CosineAnnealingWarmRestarts: T_0 must be a positive integer, got 0"));
  CHECK_THROWS_WITH(optim::CosineAnnealingWarmRestarts(opt, 5, 0),
                    Catch::Contains("CosineAnnealingWarmRestarts: T_mult must be an integer >= 1, got 0"));
  CHECK_THROWS_WITH(optim::OneCycleLR(opt, 1.0, 0), Catch::Contains("OneCycleLR: total_steps must be positive, got 0"));
  CHECK_THROWS_WITH(optim::OneCycleLR(opt, -1.0, 10), Catch::Contains("OneCycleLR: max_lr must be >= 0, got -1"));
  CHECK_THROWS_WITH(optim::OneCycleLR(opt, 1.0, 10, 1.5), Catch::Contains("OneCycleLR: pct_start must be in [0, 1], got 1.5"));
  CHECK_THROWS_WITH(optim::OneCycleLR(opt, 1.0, 10, 0.3, "exp"), Catch::Contains("OneCycleLR: anneal_strategy \"exp\" is not \"cos\" or \"linear\""));
  // 0.1 of 10 steps ends the first phase at step 0, where it starts: PyTorch divides by zero there.
  CHECK_THROWS_WITH(optim::OneCycleLR(opt, 1.0, 10, 0.1), Catch::Contains("OneCycleLR: pct_start 0.1 of total_steps 10 leaves a phase of no steps"));
  CHECK(opt.lr == 1.0);  // no failed constructor changed it

  // PyTorch: "Tried to step 12 times. The specified number of total steps is 10" at the 11th step().
  optim::OneCycleLR cycle(opt, 1.0, 10);
  for (int i = 0; i < 10; ++i) cycle.step();
  CHECK_THROWS_WITH(cycle.step(), Catch::Contains("OneCycleLR: tried to step 12 times (the construction and 11 step() calls); total_steps is 10"));
}
