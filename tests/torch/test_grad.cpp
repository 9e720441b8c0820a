// kiln's gradients against libtorch's autograd: for each differentiable op f and random inputs x, the
// gradient of loss = sum(f(x) * w), with a random w of f's output shape, with respect to every
// floating-point input, in float32 and float64.
//
// Inputs are drawn away from kinks and ties (abs and relu at 0, equal maxima), where the gradient is a
// convention rather than a derivative; the conventions are checked on their own at the end.
//
// Tolerances are normwise: an error of n units of rounding (eps of the dtype) relative to each value,
// or to the largest |gradient| of that input, whichever is larger. Each gradient value is a short
// chain of roundings (elementwise ops: n = 8) or a sum of K terms of the size of the largest gradient
// (reductions, matmul, conv: any summation order is within K eps of the exact sum, Higham 4.2; n =
// K + 8), stated per case. Measured on these inputs, every case is within 4 units (most within 1).
#include <torch/csrc/autograd/autograd.h>  // torch::autograd::grad; far lighter than <torch/torch.h>

#include "frontend/nn.h"
#include "oracle.h"

CATCH_TRANSLATE_EXCEPTION(const c10::Error& e) { return e.what_without_backtrace(); }

namespace kiln::oracle {
namespace {

using KFn = std::function<Tensor(const std::vector<Tensor>&)>;
using TFn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;
const std::vector<at::ScalarType> kGradDtypes = {at::kFloat, at::kDouble};

// n units of rounding of `unit` (eps), relative to each value and to the largest |expected|.
Tol normwise(const at::Tensor& expected, double n, at::ScalarType unit) {
  double e = n * eps(unit);
  double scale = expected.numel() ? expected.abs().max().item<double>() : 0.0;
  return {e, e * scale};
}

// Queues in `batch` the gradients of sum(k(xs) * w) for every input, checked against libtorch's
// gradients of sum(t(xs) * w). `xs` are the input values (one dtype); constant operands (indices,
// conditions, targets) are captured by k and t. `unit` is the dtype whose eps the tolerance counts in
// (the inputs' own unless a kiln function is known to be accurate only to float32).
void check_grad(Batch& batch, Source& src, const std::string& what, const std::vector<at::Tensor>& xs, const KFn& k, const TFn& t,
                double n, std::optional<at::ScalarType> unit = std::nullopt) {
  std::vector<at::Tensor> leaves;
  for (const at::Tensor& x : xs) leaves.push_back(x.detach().clone().requires_grad_(true));
  at::Tensor out = t(leaves);
  at::Tensor w = src.values(out.sizes().vec(), out.scalar_type(), Values::Finite);
  std::vector<at::Tensor> expected = torch::autograd::grad({(out * w).sum()}, leaves);

  std::vector<Tensor> kleaves;
  for (const at::Tensor& x : xs) kleaves.push_back(to_kiln(x).requires_grad_());
  std::vector<Tensor> actual = gradients((k(kleaves) * to_kiln(w)).sum(), kleaves);
  for (size_t i = 0; i < xs.size(); ++i) {
    at::ScalarType dt = xs[i].scalar_type();
    batch.check(cat(what, " ", name(dt), ": d/d input ", i), actual[i], expected[i], normwise(expected[i], n, unit.value_or(dt)));
  }
}

// --- elementwise -----------------------------------------------------------------------------------

enum class Domain { Any, Positive, NonZero, Narrow };  // NonZero: |x| >= 0.1; Narrow: (-1.2, 1.2)

at::Tensor draw(Source& src, std::vector<int64_t> shape, at::ScalarType dt, Domain d) {
  switch (d) {
    case Domain::Any:
      return src.values(shape, dt, Values::Finite);
    case Domain::Positive:
      return src.values(shape, dt, Values::Positive);
    case Domain::NonZero: {
      at::Tensor x = src.values(shape, dt, Values::Finite);
      return x + 0.1 * x.sign();
    }
    case Domain::Narrow:
      return src.values(shape, dt, Values::Finite).tanh() * 1.2;
  }
  return {};
}

struct Unary {
  const char* name;
  Domain domain;
  std::function<Tensor(const Tensor&)> k;
  std::function<at::Tensor(const at::Tensor&)> t;
  bool float32_fit = false;  // kiln computes it with a float32-accurate fit, in float64 too
};

TEST_CASE("torch grad: unary math", "[torch][grad]") {
  const std::vector<Unary> ops = {
      {"exp", Domain::Any, [](const Tensor& x) { return x.exp(); }, [](const at::Tensor& x) { return x.exp(); }},
      {"log", Domain::Positive, [](const Tensor& x) { return x.log(); }, [](const at::Tensor& x) { return x.log(); }},
      {"sqrt", Domain::Positive, [](const Tensor& x) { return x.sqrt(); }, [](const at::Tensor& x) { return x.sqrt(); }},
      {"rsqrt", Domain::Positive, [](const Tensor& x) { return x.rsqrt(); }, [](const at::Tensor& x) { return x.rsqrt(); }},
      {"reciprocal", Domain::NonZero, [](const Tensor& x) { return x.reciprocal(); }, [](const at::Tensor& x) { return x.reciprocal(); }},
      {"sin", Domain::Any, [](const Tensor& x) { return x.sin(); }, [](const at::Tensor& x) { return x.sin(); }},
      {"cos", Domain::Any, [](const Tensor& x) { return x.cos(); }, [](const at::Tensor& x) { return x.cos(); }},
      {"tan", Domain::Narrow, [](const Tensor& x) { return x.tan(); }, [](const at::Tensor& x) { return x.tan(); }},
      {"tanh", Domain::Any, [](const Tensor& x) { return x.tanh(); }, [](const at::Tensor& x) { return x.tanh(); }},
      {"sigmoid", Domain::Any, [](const Tensor& x) { return x.sigmoid(); }, [](const at::Tensor& x) { return x.sigmoid(); }},
      {"relu", Domain::Any, [](const Tensor& x) { return x.relu(); }, [](const at::Tensor& x) { return x.relu(); }},
      {"leaky_relu(0.1)", Domain::Any, [](const Tensor& x) { return x.leaky_relu(0.1); }, [](const at::Tensor& x) { return at::leaky_relu(x, 0.1); }},
      {"gelu", Domain::Any, [](const Tensor& x) { return x.gelu(); }, [](const at::Tensor& x) { return at::gelu(x); }, true},
      {"silu", Domain::Any, [](const Tensor& x) { return x.silu(); }, [](const at::Tensor& x) { return at::silu(x); }},
      {"softplus", Domain::Any, [](const Tensor& x) { return x.softplus(); }, [](const at::Tensor& x) { return at::softplus(x, 1, 20); }},
      // beta 2, threshold 5: values above 2.5 take the linear branch.
      {"softplus(2, 5)", Domain::Any, [](const Tensor& x) { return x.softplus(2, 5); }, [](const at::Tensor& x) { return at::softplus(x, 2, 5); }},
      {"erf", Domain::Any, [](const Tensor& x) { return x.erf(); }, [](const at::Tensor& x) { return x.erf(); }, true},
      {"elu", Domain::Any, [](const Tensor& x) { return x.elu(); }, [](const at::Tensor& x) { return at::elu(x); }},
      {"elu(0.5)", Domain::Any, [](const Tensor& x) { return x.elu(0.5); }, [](const at::Tensor& x) { return at::elu(x, 0.5); }},
      {"selu", Domain::Any, [](const Tensor& x) { return x.selu(); }, [](const at::Tensor& x) { return at::selu(x); }},
      {"hardtanh", Domain::Any, [](const Tensor& x) { return x.hardtanh(-0.5, 0.75); }, [](const at::Tensor& x) { return at::hardtanh(x, -0.5, 0.75); }},
      {"relu6", Domain::Any, [](const Tensor& x) { return (x * 4.0).relu6(); }, [](const at::Tensor& x) { return at::relu6(x * 4.0); }},
      // torch 1.13 scales hardsigmoid's gradient by 1.0f / 6.0f, a float32 constant, in float64 too.
      {"hardsigmoid", Domain::Any, [](const Tensor& x) { return (x * 4.0).hardsigmoid(); }, [](const at::Tensor& x) { return at::hardsigmoid(x * 4.0); },
       true},
      {"hardswish", Domain::Any, [](const Tensor& x) { return (x * 4.0).hardswish(); }, [](const at::Tensor& x) { return at::hardswish(x * 4.0); }},
      {"mish", Domain::Any, [](const Tensor& x) { return x.mish(); }, [](const at::Tensor& x) { return at::mish(x); }},
      {"abs", Domain::Any, [](const Tensor& x) { return x.abs(); }, [](const at::Tensor& x) { return x.abs(); }},
      {"pow(x, 2)", Domain::Any, [](const Tensor& x) { return x.pow(2.0); }, [](const at::Tensor& x) { return x.pow(2.0); }},
      {"pow(x, 3)", Domain::Any, [](const Tensor& x) { return x.pow(3.0); }, [](const at::Tensor& x) { return x.pow(3.0); }},
      {"pow(x, 2.5)", Domain::Positive, [](const Tensor& x) { return x.pow(2.5); }, [](const at::Tensor& x) { return x.pow(2.5); }},
      {"pow(x, -1.5)", Domain::Positive, [](const Tensor& x) { return x.pow(-1.5); }, [](const at::Tensor& x) { return x.pow(-1.5); }},
  };
  Source src(101);
  Batch batch;
  for (at::ScalarType dt : kGradDtypes)
    for (const Unary& op : ops) {
      // A value and its derivative are each within a few ulps in both libraries (libm or SLEEF on
      // torch's side, kiln's composites: sigmoid = 1/(1+e^-x), tan = sin/cos, ...), and w times it
      // rounds once more: 8 units (measured: at most 3.8, float32 tan). Where a derivative is a
      // difference (1 - tanh^2 for large |x|), the normwise part covers the cancellation.
      // erf and gelu: kiln's erf is a Chebyshev fit with relative error < 1.2e-7 (see test_math.cpp; in
      // float64 too, a kiln bug reported there); its derivative is the fit's derivative, whose error
      // can exceed the fit's: measured within 3.6 float32 units, allowed 16.
      double n = op.float32_fit ? 16 : 8;
      std::optional<at::ScalarType> unit;
      if (op.float32_fit) unit = at::kFloat;
      check_grad(batch, src, op.name, {draw(src, {4, 6}, dt, op.domain)}, [&](const std::vector<Tensor>& x) { return op.k(x[0]); },
                 [&](const std::vector<at::Tensor>& x) { return op.t(x[0]); }, n, unit);
    }
  batch.run();
}

TEST_CASE("torch grad: binary ops with broadcasting", "[torch][grad]") {
  Source src(102);
  Batch batch;
  // (3, 1, 5) against (4, 5): both broadcast, so each gradient is also a sum over the broadcast axis
  // (3 or 4 terms): 8 units (measured: at most 0.5).
  const std::vector<int64_t> sa = {3, 1, 5}, sb = {4, 5};
  for (at::ScalarType dt : kGradDtypes) {
    at::Tensor a = draw(src, sa, dt, Domain::Any), b = draw(src, sb, dt, Domain::Any);
    at::Tensor pos = draw(src, sa, dt, Domain::Positive), nonzero = draw(src, sb, dt, Domain::NonZero);
    auto both = [&](const char* what, std::vector<at::Tensor> in, KFn k, TFn t) { check_grad(batch, src, what, in, k, t, 8); };
    both("add", {a, b}, [](auto& x) { return x[0] + x[1]; }, [](auto& x) { return x[0] + x[1]; });
    both("sub", {a, b}, [](auto& x) { return x[0] - x[1]; }, [](auto& x) { return x[0] - x[1]; });
    both("mul", {a, b}, [](auto& x) { return x[0] * x[1]; }, [](auto& x) { return x[0] * x[1]; });
    both("div", {a, nonzero}, [](auto& x) { return x[0] / x[1]; }, [](auto& x) { return x[0] / x[1]; });
    // A positive base; exponents halved so that pos^b stays moderate.
    both("pow", {pos, b * 0.5}, [](auto& x) { return x[0].pow(x[1]); }, [](auto& x) { return x[0].pow(x[1]); });
    // Continuous N(0, 4) draws: no two equal, so no ties (checked separately).
    both("maximum", {a, b}, [](auto& x) { return x[0].maximum(x[1]); }, [](auto& x) { return at::maximum(x[0], x[1]); });
    both("minimum", {a, b}, [](auto& x) { return x[0].minimum(x[1]); }, [](auto& x) { return at::minimum(x[0], x[1]); });
    // The condition broadcasts too: (4, 1) against (3, 1, 5) and (4, 5).
    at::Tensor cond = src.values({4, 1}, at::kBool);
    Tensor kcond = to_kiln(cond);
    both("where", {a, b}, [&](auto& x) { return kcond.where(x[0], x[1]); }, [&](auto& x) { return at::where(cond, x[0], x[1]); });
  }
  batch.run();
}

// --- reductions ------------------------------------------------------------------------------------

struct Axes {
  std::vector<int64_t> axes;  // {} = every axis
  bool keepdim;
};

// The axes as torch wants them: explicit and non-negative.
std::vector<int64_t> dims_of(const std::vector<int64_t>& axes, int64_t ndim) {
  std::vector<int64_t> dims;
  if (axes.empty())
    for (int64_t i = 0; i < ndim; ++i) dims.push_back(i);
  for (int64_t a : axes) dims.push_back(a < 0 ? a + ndim : a);
  return dims;
}

TEST_CASE("torch grad: reductions over axes, with keepdim", "[torch][grad]") {
  const std::vector<int64_t> shape = {3, 4, 5};
  // Every axis, one (kept, so the gradient broadcasts back over a size-1 axis), and two apart given
  // as a negative and a positive axis: three patterns, each kernel's worth compiled once per dtype.
  const std::vector<Axes> all_axes = {{{}, false}, {{1}, true}, {{0, -1}, false}};
  Source src(103);
  Batch batch;
  for (at::ScalarType dt : kGradDtypes)
    for (const Axes& ax : all_axes) {
      std::vector<int64_t> dims = dims_of(ax.axes, 3);
      int64_t count = 1;
      for (int64_t d : dims) count *= shape[static_cast<size_t>(d)];
      // Each gradient goes through the forward reduction (K = count terms) and, for var, std and
      // logsumexp, a second one: K + 8 units (measured: at most 0.9).
      double n = static_cast<double>(count) + 8;
      std::string what = cat(" axes ", shape_text(ax.axes), ax.keepdim ? " keepdim" : "");
      at::Tensor x = draw(src, shape, dt, Domain::Any);
      bool keep = ax.keepdim;
      auto axes = ax.axes;
      check_grad(batch, src, "sum" + what, {x}, [&](auto& v) { return v[0].sum(axes, keep); }, [&](auto& v) { return v[0].sum(dims, keep); }, n);
      check_grad(batch, src, "mean" + what, {x}, [&](auto& v) { return v[0].mean(axes, keep); }, [&](auto& v) { return v[0].mean(dims, keep); }, n);
      // No zeros among the inputs: the gradient is prod / x (torch's formula too), the product of
      // up to 60 values of N(0, 4), far from float32's range.
      check_grad(batch, src, "prod" + what, {x}, [&](auto& v) { return v[0].prod(axes, keep); },
                 [&](auto& v) {  // torch 1.13's prod takes one dim: reduce the axes one at a time, last first
                   at::Tensor r = v[0];
                   if (dims.size() == 3 && !keep) return r.prod();
                   for (auto it = dims.rbegin(); it != dims.rend(); ++it) r = r.prod(*it, keep);
                   return r;
                 },
                 n);
      // Continuous draws: one maximum per reduced group, so the whole gradient goes to it.
      check_grad(batch, src, "max" + what, {x}, [&](auto& v) { return v[0].max(axes, keep); }, [&](auto& v) { return at::amax(v[0], dims, keep); }, n);
      check_grad(batch, src, "min" + what, {x}, [&](auto& v) { return v[0].min(axes, keep); }, [&](auto& v) { return at::amin(v[0], dims, keep); }, n);
      for (double correction : {1.0, 0.0}) {
        std::string c = cat(" correction ", correction);
        check_grad(batch, src, "var" + what + c, {x}, [&](auto& v) { return v[0].var(axes, keep, correction); },
                   [&](auto& v) { return at::var(v[0], at::OptionalIntArrayRef(dims), c10::optional<int64_t>(static_cast<int64_t>(correction)), keep); }, n);
        check_grad(batch, src, "std" + what + c, {x}, [&](auto& v) { return v[0].std(axes, keep, correction); },
                   [&](auto& v) { return at::std(v[0], at::OptionalIntArrayRef(dims), c10::optional<int64_t>(static_cast<int64_t>(correction)), keep); }, n);
      }
      check_grad(batch, src, "logsumexp" + what, {x}, [&](auto& v) { return v[0].logsumexp(axes, keep); },
                 [&](auto& v) { return at::logsumexp(v[0], dims, keep); }, n);
    }
  // One axis at a time: softmax, log_softmax, cumsum (K = the axis's length <= 5: K + 8 = 13, rounded
  // up to 16; measured: at most 1.4).
  for (at::ScalarType dt : kGradDtypes)
    for (int64_t axis : {0, 1, -1}) {
      at::Tensor x = draw(src, shape, dt, Domain::Any);
      std::string what = cat(" axis ", axis);
      check_grad(batch, src, "softmax" + what, {x}, [&](auto& v) { return v[0].softmax(axis); }, [&](auto& v) { return v[0].softmax(axis); }, 16);
      check_grad(batch, src, "log_softmax" + what, {x}, [&](auto& v) { return v[0].log_softmax(axis); },
                 [&](auto& v) { return v[0].log_softmax(axis); }, 16);
      check_grad(batch, src, "cumsum" + what, {x}, [&](auto& v) { return v[0].cumsum(axis); }, [&](auto& v) { return v[0].cumsum(axis); }, 16);
    }
  batch.run();
}

// --- movement --------------------------------------------------------------------------------------

TEST_CASE("torch grad: movement, slicing, cat, stack, split, gather, repeat", "[torch][grad]") {
  Source src(104);
  Batch batch;
  for (at::ScalarType dt : kGradDtypes) {
    // Movement gradients move w back (exact) or add up copies of it (expand, repeat, gather with a
    // repeated index: a few terms): 4 units (measured: at most 0.7).
    auto one = [&](const char* what, at::Tensor x, KFn k, TFn t) { check_grad(batch, src, what, {x}, k, t, 4); };
    at::Tensor x = draw(src, {2, 3, 4}, dt, Domain::Any), y = draw(src, {2, 3, 4}, dt, Domain::Any);
    one("reshape", x, [](auto& v) { return v[0].reshape({4, 6}); }, [](auto& v) { return v[0].reshape({4, 6}); });
    one("permute", x, [](auto& v) { return v[0].permute({2, 0, 1}); }, [](auto& v) { return v[0].permute({2, 0, 1}); });
    one("expand", draw(src, {2, 1, 4}, dt, Domain::Any), [](auto& v) { return v[0].expand({3, 2, 5, 4}); },
        [](auto& v) { return v[0].expand({3, 2, 5, 4}); });
    one("pad", x, [](auto& v) { return v[0].pad({{1, 0}, {0, 2}, {1, 1}}, 0.5); },
        [](auto& v) { return at::constant_pad_nd(v[0], {1, 1, 0, 2, 1, 0}, 0.5); });
    one("shrink", x, [](auto& v) { return v[0].shrink({{0, 1}, {1, 3}, {1, 4}}); },
        [](auto& v) { return v[0].slice(0, 0, 1).slice(1, 1, 3).slice(2, 1, 4); });
    one("flip", x, [](auto& v) { return v[0].flip({0, 2}); }, [](auto& v) { return v[0].flip({0, 2}); });
    one("slice step 2", x, [](auto& v) { return v[0].slice(2, 1, std::nullopt, 2); }, [](auto& v) { return v[0].slice(2, 1, INT64_MAX, 2); });
    one("slice negative start", x, [](auto& v) { return v[0].slice(1, -2, std::nullopt); }, [](auto& v) { return v[0].slice(1, -2, INT64_MAX); });
    one("split", x,
        [](auto& v) {
          std::vector<Tensor> p = v[0].split({1, 2}, 1);
          return Tensor::cat({p[1], p[0] * 3.0}, 1);
        },
        [](auto& v) {
          std::vector<at::Tensor> p = v[0].split_with_sizes({1, 2}, 1);
          return at::cat({p[1], p[0] * 3.0}, 1);
        });
    one("repeat", x, [](auto& v) { return v[0].repeat({2, 1, 3}); }, [](auto& v) { return v[0].repeat({2, 1, 3}); });
    one("repeat with a new axis", x, [](auto& v) { return v[0].repeat({2, 1, 1, 2}); }, [](auto& v) { return v[0].repeat({2, 1, 1, 2}); });
    // An index of (2, 5, 4) into 3 positions: some positions taken several times, some never.
    at::Tensor index = at::randint(0, 3, {2, 5, 4}, src.gen(), at::TensorOptions().dtype(at::kLong));
    Tensor kindex = to_kiln(index);
    one("gather", x, [&](auto& v) { return v[0].gather(1, kindex); }, [&](auto& v) { return v[0].gather(1, index); });
    auto two = [&](const char* what, KFn k, TFn t) { check_grad(batch, src, what, {x, y}, k, t, 4); };
    two("cat axis 1", [](auto& v) { return Tensor::cat({v[0], v[1], v[0]}, 1); }, [](auto& v) { return at::cat({v[0], v[1], v[0]}, 1); });
    two("stack axis 2", [](auto& v) { return Tensor::stack({v[0], v[1]}, 2); }, [](auto& v) { return at::stack({v[0], v[1]}, 2); });
  }
  batch.run();
}

// --- matmul, conv, pooling -------------------------------------------------------------------------

TEST_CASE("torch grad: matmul, batched and broadcast", "[torch][grad]") {
  struct Mm {
    std::vector<int64_t> a, b;
  };
  // Every gradient value sums over the other operand's free axis and any broadcast batch axes: at most
  // 2 * 5 * 6 = 60 terms here (the (3, 4) @ (2, 1, 4, 5) case): K + 8 = 68 units (measured: at most 1.3).
  const std::vector<Mm> cases = {{{3, 4}, {4, 5}}, {{4}, {4, 5}}, {{3, 4}, {4}}, {{2, 1, 3, 4}, {5, 4, 2}}, {{3, 4}, {2, 1, 4, 5}}, {{7}, {7}}};
  Source src(105);
  Batch batch;
  for (at::ScalarType dt : kGradDtypes)
    for (const Mm& c : cases)
      check_grad(batch, src, cat("matmul ", shape_text(c.a), " @ ", shape_text(c.b)), {draw(src, c.a, dt, Domain::Any), draw(src, c.b, dt, Domain::Any)},
                 [](auto& v) { return v[0].matmul(v[1]); }, [](auto& v) { return at::matmul(v[0], v[1]); }, 68);
  batch.run();
}

TEST_CASE("torch grad: conv2d with stride, padding, dilation, groups and bias", "[torch][grad]") {
  struct Conv {
    std::vector<int64_t> x, w;
    std::array<int64_t, 2> stride, padding, dilation;
    int64_t groups;
    bool bias;
  };
  const std::vector<Conv> cases = {
      {{2, 3, 6, 6}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1, false},
      {{2, 4, 7, 7}, {6, 2, 3, 3}, {2, 1}, {1, 2}, {1, 2}, 2, true},
      {{1, 2, 5, 6}, {2, 1, 2, 3}, {1, 2}, {1, 0}, {2, 1}, 2, true},
      // Strided and undilated: the input gradient goes phase by phase, here with groups and a
      // different stride per axis (some phases of the 1-tap axis get no tap).
      {{2, 4, 9, 8}, {6, 2, 3, 1}, {2, 3}, {1, 0}, {1, 1}, 2, true},
  };
  Source src(106);
  Batch batch;
  for (at::ScalarType dt : kGradDtypes)
    for (const Conv& c : cases) {
      std::vector<at::Tensor> in = {draw(src, c.x, dt, Domain::Any), draw(src, c.w, dt, Domain::Any)};
      if (c.bias) in.push_back(draw(src, {c.w[0]}, dt, Domain::Any));
      // The weight's and bias's gradients sum over N * OH * OW positions (at most 2 * 6 * 7 = 84
      // here), the input's over (C / groups) * KH * KW taps of the output channels: K + 8 = 92 units
      // (measured: at most 0.8).
      std::string what = cat("conv2d x ", shape_text(c.x), " w ", shape_text(c.w), " stride ", shape_text(c.stride), " padding ", shape_text(c.padding),
                             " dilation ", shape_text(c.dilation), " groups ", c.groups, c.bias ? " bias" : "");
      check_grad(batch, src, what, in,
                 [&](auto& v) { return v[0].conv2d(v[1], c.bias ? std::optional<Tensor>(v[2]) : std::nullopt, c.stride, c.padding, c.dilation, c.groups); },
                 [&](auto& v) { return at::conv2d(v[0], v[1], c.bias ? v[2] : at::Tensor(), c.stride, c.padding, c.dilation, c.groups); }, 92);
    }
  batch.run();
}

TEST_CASE("torch grad: max_pool2d and avg_pool2d", "[torch][grad]") {
  struct Pool {
    std::array<int64_t, 2> kernel, stride, padding;
  };
  // Overlapping windows (stride < kernel) add up gradients at shared inputs: at most 4 windows of 9
  // here, then avg_pool's division: 8 units (measured: at most 0.7). Continuous draws: one maximum
  // per window.
  const std::vector<Pool> cases = {{{2, 2}, {2, 2}, {0, 0}}, {{3, 3}, {2, 2}, {1, 1}}, {{2, 3}, {1, 2}, {1, 1}}};
  Source src(107);
  Batch batch;
  for (at::ScalarType dt : kGradDtypes)
    for (const Pool& p : cases) {
      std::string what = cat(" kernel ", shape_text(p.kernel), " stride ", shape_text(p.stride), " padding ", shape_text(p.padding));
      at::Tensor x = draw(src, {2, 3, 7, 7}, dt, Domain::Any);
      check_grad(batch, src, "max_pool2d" + what, {x}, [&](auto& v) { return v[0].max_pool2d(p.kernel, p.stride, p.padding); },
                 [&](auto& v) { return at::max_pool2d(v[0], p.kernel, p.stride, p.padding); }, 8);
      // count_include_pad, torch's default and kiln's only mode.
      check_grad(batch, src, "avg_pool2d" + what, {x}, [&](auto& v) { return v[0].avg_pool2d(p.kernel, p.stride, p.padding); },
                 [&](auto& v) { return at::avg_pool2d(v[0], p.kernel, p.stride, p.padding); }, 8);
    }
  batch.run();
}

// --- normalization layers ----------------------------------------------------------------------

TEST_CASE("torch grad: BatchNorm2d (training), LayerNorm and GroupNorm, with and without affine parameters", "[torch][grad]") {
  // kiln gives these layers a closed-form gradient (nn.cpp's normalize); here against libtorch's native
  // ones, for the input, weight and bias. Each value sums over the normalized group (at most 2 * 5 * 6 =
  // 60 terms, batch norm) twice, then scales: 2K + 8 = 128 units.
  Source src(109);
  Batch batch;
  for (at::ScalarType dt : kGradDtypes)
    for (bool affine : {true, false}) {
      std::string a = affine ? " affine" : "";
      auto params = [&](std::vector<at::Tensor> in, int64_t c) {
        if (affine) in.push_back(draw(src, {c}, dt, Domain::Any)), in.push_back(draw(src, {c}, dt, Domain::Any));
        return in;
      };
      at::Tensor x = draw(src, {2, 3, 5, 6}, dt, Domain::Any);
      check_grad(batch, src, "BatchNorm2d" + a, params({x}, 3),
                 [&](auto& v) {
                   nn::BatchNorm2d bn(3, 1e-5, 0.1, affine);
                   if (affine) bn.weight = v[1], bn.bias = v[2];
                   bn.running_mean = Tensor::zeros({3}, v[0].dtype()), bn.running_var = Tensor::ones({3}, v[0].dtype());  // as module.double()
                   return bn(v[0]);
                 },
                 [&](auto& v) {
                   at::Tensor rm = at::zeros({3}, v[0].options()), rv = at::ones({3}, v[0].options());
                   return at::batch_norm(v[0], affine ? v[1] : at::Tensor(), affine ? v[2] : at::Tensor(), rm, rv, true, 0.1, 1e-5, false);
                 },
                 128);
      // BatchNorm1d on (N, C) and (N, C, L): the same layer over fewer axes.
      for (Shape shape : {Shape{8, 3}, Shape{4, 3, 5}}) {
        at::Tensor x1 = draw(src, shape, dt, Domain::Any);
        check_grad(batch, src, "BatchNorm1d " + shape_str(shape) + a, params({x1}, 3),
                   [&](auto& v) {
                     nn::BatchNorm1d bn(3, 1e-5, 0.1, affine);
                     if (affine) bn.weight = v[1], bn.bias = v[2];
                     bn.running_mean = Tensor::zeros({3}, v[0].dtype()), bn.running_var = Tensor::ones({3}, v[0].dtype());
                     return bn(v[0]);
                   },
                   [&](auto& v) {
                     at::Tensor rm = at::zeros({3}, v[0].options()), rv = at::ones({3}, v[0].options());
                     return at::batch_norm(v[0], affine ? v[1] : at::Tensor(), affine ? v[2] : at::Tensor(), rm, rv, true, 0.1, 1e-5, false);
                   },
                   128);
      }
      at::Tensor seq = draw(src, {2, 4, 6}, dt, Domain::Any);
      check_grad(batch, src, "LayerNorm" + a, params({seq}, 6),
                 [&](auto& v) {
                   nn::LayerNorm ln({6}, 1e-5, affine);
                   if (affine) ln.weight = v[1], ln.bias = v[2];
                   return ln(v[0]);
                 },
                 [&](auto& v) { return at::layer_norm(v[0], {6}, affine ? v[1] : at::Tensor(), affine ? v[2] : at::Tensor(), 1e-5); }, 128);
      at::Tensor img = draw(src, {2, 4, 3, 3}, dt, Domain::Any);
      check_grad(batch, src, "GroupNorm" + a, params({img}, 4),
                 [&](auto& v) {
                   nn::GroupNorm gn(2, 4, 1e-5, affine);
                   if (affine) gn.weight = v[1], gn.bias = v[2];
                   return gn(v[0]);
                 },
                 [&](auto& v) { return at::group_norm(v[0], 2, affine ? v[1] : at::Tensor(), affine ? v[2] : at::Tensor(), 1e-5); }, 128);
    }
  batch.run();
}

// --- losses ----------------------------------------------------------------------------------------

TEST_CASE("torch grad: losses", "[torch][grad]") {
  Source src(108);
  Batch batch;
  // The gradients are (softmax - target) / N and the like: a softmax over C = 5 classes, then a
  // normalization by the count: C + 8 = 13 units, rounded up to 16 (measured: at most 1.4).
  const int64_t N = 6, C = 5;
  // Targets with two ignored rows (label 2 as ignore_index, and torch's default -100).
  at::Tensor target = at::tensor(std::vector<int64_t>{0, 2, 4, 1, 2, 3});
  at::Tensor target_ignored = at::tensor(std::vector<int64_t>{0, -100, 4, 1, -100, 3});
  Tensor ktarget = to_kiln(target), ktarget_ignored = to_kiln(target_ignored);
  using nn::Reduction;
  auto at_reduction = [](Reduction r) { return r == Reduction::Mean ? at::Reduction::Mean : r == Reduction::Sum ? at::Reduction::Sum : at::Reduction::None; };
  for (at::ScalarType dt : kGradDtypes) {
    at::Tensor logits = draw(src, {N, C}, dt, Domain::Any);
    // Sum is Mean without its division by the count: Mean and None cover both code paths.
    for (Reduction r : {Reduction::Mean, Reduction::None}) {
      int64_t ar = at_reduction(r);
      std::string red = r == Reduction::Mean ? " mean" : r == Reduction::Sum ? " sum" : " none";
      for (double smoothing : {0.0, 0.1}) {
        std::string what = cat(" label_smoothing ", smoothing, red);
        check_grad(batch, src, "cross_entropy" + what, {logits}, [&](auto& v) { return nn::cross_entropy(v[0], ktarget, smoothing, -100, r); },
                   [&](auto& v) { return at::cross_entropy_loss(v[0], target, {}, ar, -100, smoothing); }, 16);
        check_grad(batch, src, "cross_entropy ignore_index -100" + what, {logits},
                   [&](auto& v) { return nn::cross_entropy(v[0], ktarget_ignored, smoothing, -100, r); },
                   [&](auto& v) { return at::cross_entropy_loss(v[0], target_ignored, {}, ar, -100, smoothing); }, 16);
        check_grad(batch, src, "cross_entropy ignore_index 2" + what, {logits}, [&](auto& v) { return nn::cross_entropy(v[0], ktarget, smoothing, 2, r); },
                   [&](auto& v) { return at::cross_entropy_loss(v[0], target, {}, ar, 2, smoothing); }, 16);
      }
      // nll_loss takes any (N, C) input, log-probabilities or not: its gradient is -w / count at the targets.
      check_grad(batch, src, "nll_loss" + red, {logits}, [&](auto& v) { return nn::nll_loss(v[0], ktarget, -100, r); },
                 [&](auto& v) { return at::nll_loss(v[0], target, {}, ar, -100); }, 16);
      check_grad(batch, src, "nll_loss ignore_index -100" + red, {logits}, [&](auto& v) { return nn::nll_loss(v[0], ktarget_ignored, -100, r); },
                 [&](auto& v) { return at::nll_loss(v[0], target_ignored, {}, ar, -100); }, 16);
      at::Tensor a = draw(src, {3, 4}, dt, Domain::Any), b = draw(src, {3, 4}, dt, Domain::Any);
      check_grad(batch, src, "mse_loss" + red, {a, b}, [&](auto& v) { return nn::mse_loss(v[0], v[1], r); },
                 [&](auto& v) { return at::mse_loss(v[0], v[1], ar); }, 16);
      // No a == b in continuous draws: l1's gradient is sign(a - b) / count, away from its kink.
      check_grad(batch, src, "l1_loss" + red, {a, b}, [&](auto& v) { return nn::l1_loss(v[0], v[1], r); },
                 [&](auto& v) { return at::l1_loss(v[0], v[1], ar); }, 16);
      // Targets in [0, 1]: probabilities; both gradients (torch 1.13 differentiates the target too).
      at::Tensor probs = at::rand({3, 4}, src.gen(), at::TensorOptions().dtype(dt));
      at::Tensor p = at::rand({3, 4}, src.gen(), at::TensorOptions().dtype(dt)) * 0.9 + 0.05;
      Tensor kprobs = to_kiln(probs);  // a constant target: torch 1.13 does not differentiate BCE's target
      check_grad(batch, src, "binary_cross_entropy" + red, {p}, [&](auto& v) { return nn::binary_cross_entropy(v[0], kprobs, r); },
                 [&](auto& v) { return at::binary_cross_entropy(v[0], probs, {}, ar); }, 16);
      // Differences on both sides of beta and delta (a - b spans about -3..3).
      for (double beta : {1.0, 0.5, 0.0})
        check_grad(batch, src, cat("smooth_l1_loss beta ", beta, red), {a, b}, [&](auto& v) { return nn::smooth_l1_loss(v[0], v[1], r, beta); },
                   [&](auto& v) { return at::smooth_l1_loss(v[0], v[1], ar, beta); }, 16);
      for (double delta : {1.0, 0.7})
        check_grad(batch, src, cat("huber_loss delta ", delta, red), {a, b}, [&](auto& v) { return nn::huber_loss(v[0], v[1], r, delta); },
                   [&](auto& v) { return at::huber_loss(v[0], v[1], ar, delta); }, 16);
      check_grad(batch, src, "binary_cross_entropy_with_logits" + red, {a, probs},
                 [&](auto& v) { return nn::binary_cross_entropy_with_logits(v[0], v[1], r); },
                 [&](auto& v) { return at::binary_cross_entropy_with_logits(v[0], v[1], {}, {}, ar); }, 16);
    }
  }
  batch.run();
}

// kl_div (every reduction, batchmean included, both target forms), the distances of metric learning
// and InstanceNorm / PReLU, values and gradients (both inputs where torch differentiates both).
TEST_CASE("torch grad: kl_div, cosine_similarity, normalize, pairwise and triplet distances, InstanceNorm, PReLU", "[torch][grad]") {
  Source src(113);
  Batch batch;
  using nn::Reduction;
  for (at::ScalarType dt : kGradDtypes) {
    auto both = [&](const std::string& what, const std::vector<at::Tensor>& xs, const KFn& k, const TFn& t, double n) {
      std::vector<Tensor> kx;
      for (const at::Tensor& x : xs) kx.push_back(to_kiln(x));
      at::Tensor want = t(xs);
      batch.check(cat(what, " ", name(dt), " (values)"), k(kx), want, normwise(want, n, dt));
      check_grad(batch, src, what, xs, k, t, n);
    };
    at::Tensor logp = at::log_softmax(draw(src, {4, 5}, dt, Domain::Any), 1), q = at::softmax(draw(src, {4, 5}, dt, Domain::Any), 1);
    at::Tensor q0 = q.clone();
    q0.index_put_({0, 0}, 0.0);  // a zero target term adds 0 (0 log 0)
    for (auto [r, ar, label] : {std::tuple{Reduction::Mean, at::Reduction::Mean, "mean"}, std::tuple{Reduction::Sum, at::Reduction::Sum, "sum"},
                                std::tuple{Reduction::None, at::Reduction::None, "none"}}) {
      both(cat("kl_div ", label), {logp, q}, [&](auto& v) { return nn::kl_div(v[0], v[1], r); }, [&](auto& v) { return at::kl_div(v[0], v[1], ar); }, 16);
      both(cat("kl_div log_target ", label), {logp, q.log()}, [&](auto& v) { return nn::kl_div(v[0], v[1], r, true); },
           [&](auto& v) { return at::kl_div(v[0], v[1], ar, true); }, 16);
    }
    at::Tensor kq0 = q0;
    both("kl_div batchmean, a zero target", {logp}, [&](auto& v) { return nn::kl_div(v[0], to_kiln(kq0), Reduction::BatchMean); },
         [&](auto& v) { return at::kl_div(v[0], kq0, at::Reduction::Sum) / 4; }, 16);

    at::Tensor a = draw(src, {3, 6}, dt, Domain::Any), b = draw(src, {3, 6}, dt, Domain::Any), c = draw(src, {3, 6}, dt, Domain::Any);
    at::Tensor row = draw(src, {1, 6}, dt, Domain::Any), cube = draw(src, {2, 3, 4}, dt, Domain::Any), cube2 = draw(src, {2, 3, 4}, dt, Domain::Any);
    both("cosine_similarity", {a, b}, [](auto& v) { return nn::cosine_similarity(v[0], v[1]); },
         [](auto& v) { return at::cosine_similarity(v[0], v[1], 1, 1e-8); }, 32);
    both("cosine_similarity broadcast", {a, row}, [](auto& v) { return nn::cosine_similarity(v[0], v[1], -1); },
         [](auto& v) { return at::cosine_similarity(v[0], v[1], -1, 1e-8); }, 32);
    both("cosine_similarity dim 0 of 3-D", {cube, cube2}, [](auto& v) { return nn::cosine_similarity(v[0], v[1], 0); },
         [](auto& v) { return at::cosine_similarity(v[0], v[1], 0, 1e-8); }, 32);
    // A zero row (a padding embedding): the eps clamp, and finite gradients (0 through the clamp).
    at::Tensor zero_row = a.clone();
    zero_row.select(0, 1).zero_();
    both("cosine_similarity, a zero row", {zero_row, b}, [](auto& v) { return nn::cosine_similarity(v[0], v[1]); },
         [](auto& v) { return at::cosine_similarity(v[0], v[1], 1, 1e-8); }, 32);
    for (double p : {2.0, 1.0, 3.0})
      both(cat("normalize p ", p, ", a zero row"), {zero_row}, [&](auto& v) { return nn::normalize(v[0], p, 1); },
           [&](auto& v) { return at::div(v[0], at::linalg_vector_norm(v[0], p, {1}, true).clamp_min(1e-12).expand_as(v[0])); }, 32);
    for (double p : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
      both(cat("normalize p ", p), {cube}, [&](auto& v) { return nn::normalize(v[0], p, 1); },
           [&](auto& v) { return at::div(v[0], at::linalg_vector_norm(v[0], p, {1}, true).clamp_min(1e-12).expand_as(v[0])); }, 32);
      both(cat("pairwise_distance p ", p), {a, b}, [&](auto& v) { return nn::pairwise_distance(v[0], v[1], p); },
           [&](auto& v) { return at::pairwise_distance(v[0], v[1], p, 1e-6, false); }, 32);
    }
    both("pairwise_distance keepdim, broadcast", {a, row}, [](auto& v) { return nn::pairwise_distance(v[0], v[1], 2.0, 1e-6, true); },
         [](auto& v) { return at::pairwise_distance(v[0], v[1], 2.0, 1e-6, true); }, 32);
    for (bool swap : {false, true})
      both(cat("triplet_margin_loss swap ", swap), {a, b, c}, [&](auto& v) { return nn::triplet_margin_loss(v[0], v[1], v[2], 2.0, 2.0, 1e-6, swap); },
           [&](auto& v) { return at::triplet_margin_loss(v[0], v[1], v[2], 2.0, 2.0, 1e-6, swap, at::Reduction::Mean); }, 32);

    at::Tensor img = draw(src, {2, 3, 4, 5}, dt, Domain::Any), seq = draw(src, {2, 3, 7}, dt, Domain::Any);
    at::Tensor w = draw(src, {3}, dt, Domain::Any), bias = draw(src, {3}, dt, Domain::Any);
    both("InstanceNorm2d affine", {img, w, bias},
         [](auto& v) {
           nn::InstanceNorm2d in(3, 1e-5, 0.1, true);
           in.weight = v[1], in.bias = v[2];
           return in(v[0]);
         },
         [](auto& v) { return at::instance_norm(v[0], v[1], v[2], {}, {}, true, 0.1, 1e-5, false); }, 128);
    both("InstanceNorm1d", {seq}, [](auto& v) { return nn::InstanceNorm1d(3)(v[0]); },
         [](auto& v) { return at::instance_norm(v[0], {}, {}, {}, {}, true, 0.1, 1e-5, false); }, 128);
    both("InstanceNorm2d unbatched", {img.select(0, 1)}, [](auto& v) { return nn::InstanceNorm2d(3)(v[0]); },
         [](auto& v) { return at::instance_norm(v[0].unsqueeze(0), {}, {}, {}, {}, true, 0.1, 1e-5, false).squeeze(0); }, 128);
    at::Tensor one = draw(src, {1}, dt, Domain::Any);
    both("PReLU per channel", {img, w}, [](auto& v) {
           nn::PReLU pr(3);
           pr.weight = v[1];
           return pr(v[0]);
         },
         [](auto& v) { return at::prelu(v[0], v[1]); }, 4);
    both("PReLU one weight", {seq, one}, [](auto& v) {
           nn::PReLU pr;
           pr.weight = v[1];
           return pr(v[0]);
         },
         [](auto& v) { return at::prelu(v[0], v[1]); }, 4);
  }
  batch.run();
  Tensor x = Tensor::ones({2, 3});
  CHECK_THROWS_WITH(nn::kl_div(x, Tensor::ones({3, 2})), Catch::Contains("kl_div: input (log-probabilities) and target must have one shape"));
  CHECK_THROWS_WITH(nn::mse_loss(x, x, nn::Reduction::BatchMean), Catch::Contains("mse_loss: Reduction::BatchMean") && Catch::Contains("only kl_div takes it"));
  CHECK_THROWS_WITH(nn::normalize(x, 0.0), Catch::Contains("normalize: p must be positive"));
  CHECK_THROWS_WITH(nn::cosine_similarity(x, Tensor::ones({4})), Catch::Contains("cosine_similarity"));
  CHECK_THROWS_WITH(nn::InstanceNorm2d(3, 1e-5, 0.1, false, true), Catch::Contains("track_running_stats is not implemented"));
  CHECK_THROWS_WITH(nn::InstanceNorm2d(3)(Tensor::ones({2, 4, 5, 5})), Catch::Contains("InstanceNorm2d: input (2, 4, 5, 5) must be (N, 3, H, W)"));
  CHECK_THROWS_WITH(nn::PReLU(3)(Tensor::ones({2, 4})), Catch::Contains("PReLU: 3 parameters (one per channel) need an input (N, 3, ...)"));
}

TEST_CASE("torch grad: conv1d, 1-D pooling and adaptive pooling, values and gradients", "[torch][grad]") {
  // Values within the normwise tolerance of a sum of K terms (n = K + 8, as the conv2d case); the
  // adaptive windows that do not divide evenly (5 -> 3, 7 -> 4) overlap, as PyTorch's do.
  Source src(112);
  Batch batch;
  for (at::ScalarType dt : kGradDtypes) {
    at::Tensor x = draw(src, {2, 4, 11}, dt, Domain::Any), w = draw(src, {6, 2, 3}, dt, Domain::Any), b = draw(src, {6}, dt, Domain::Any);
    auto conv1d = [&](const auto& v) { return v[0].conv1d(v[1], v[2], 2, 1, 2, 2); };
    auto at_conv1d = [&](const auto& v) { return at::conv1d(v[0], v[1], v[2], 2, 1, 2, 2); };
    std::vector<at::Tensor> in{x, w, b};
    batch.check(cat("conv1d ", name(dt)), conv1d(std::vector<Tensor>{to_kiln(x), to_kiln(w), to_kiln(b)}), at_conv1d(in),
                normwise(at_conv1d(in), 14, dt));
    check_grad(batch, src, "conv1d stride 2 padding 1 dilation 2 groups 2", in, conv1d, at_conv1d, 14);
    at::Tensor unbatched = draw(src, {4, 9}, dt, Domain::Any), w1 = draw(src, {3, 4, 2}, dt, Domain::Any);
    check_grad(batch, src, "conv1d unbatched", {unbatched, w1}, [&](auto& v) { return v[0].conv1d(v[1]); },
               [&](auto& v) { return at::conv1d(v[0], v[1]); }, 16);
    using KOp = std::function<Tensor(const Tensor&)>;
    using TOp = std::function<at::Tensor(const at::Tensor&)>;
    at::Tensor img = draw(src, {2, 3, 5, 7}, dt, Domain::Any), even = draw(src, {2, 3, 4, 6}, dt, Domain::Any);
    std::vector<std::tuple<std::string, at::Tensor, KOp, TOp>> pools = {
        {"max_pool1d", x, [](const Tensor& t) { return t.max_pool1d(3, 2, 1); }, [](const at::Tensor& t) { return at::max_pool1d(t, 3, 2, 1); }},
        {"avg_pool1d", x, [](const Tensor& t) { return t.avg_pool1d(3, 2, 1, true, false); },
         [](const at::Tensor& t) { return at::avg_pool1d(t, 3, 2, 1, true, false); }},
        {"adaptive_avg_pool1d 11 -> 4", x, [](const Tensor& t) { return t.adaptive_avg_pool1d(4); },
         [](const at::Tensor& t) { return at::adaptive_avg_pool1d(t, 4); }},
        {"adaptive_max_pool1d 11 -> 4", x, [](const Tensor& t) { return t.adaptive_max_pool1d(4); },
         [](const at::Tensor& t) { return std::get<0>(at::adaptive_max_pool1d(t, 4)); }},
        {"adaptive_avg_pool2d 5x7 -> 3x4", img, [](const Tensor& t) { return t.adaptive_avg_pool2d({3, 4}); },
         [](const at::Tensor& t) { return at::adaptive_avg_pool2d(t, {3, 4}); }},
        {"adaptive_max_pool2d 5x7 -> 3x4", img, [](const Tensor& t) { return t.adaptive_max_pool2d({3, 4}); },
         [](const at::Tensor& t) { return std::get<0>(at::adaptive_max_pool2d(t, {3, 4})); }},
        {"adaptive_avg_pool2d 4x6 -> 2x3", even, [](const Tensor& t) { return t.adaptive_avg_pool2d({2, 3}); },
         [](const at::Tensor& t) { return at::adaptive_avg_pool2d(t, {2, 3}); }},
        {"adaptive_max_pool2d 4x6 -> 2x3", even, [](const Tensor& t) { return t.adaptive_max_pool2d({2, 3}); },
         [](const at::Tensor& t) { return std::get<0>(at::adaptive_max_pool2d(t, {2, 3})); }},
        {"adaptive_avg_pool2d 5x7 -> 1x1", img, [](const Tensor& t) { return t.adaptive_avg_pool2d({1, 1}); },
         [](const at::Tensor& t) { return at::adaptive_avg_pool2d(t, {1, 1}); }},
    };
    for (const auto& [what, input, k, t] : pools) {
      batch.check(cat(what, " ", name(dt)), k(to_kiln(input)), t(input), normwise(t(input), 16, dt));
      check_grad(batch, src, what, {input}, [&](auto& v) { return k(v[0]); }, [&](auto& v) { return t(v[0]); }, 16);
    }
  }
  batch.run();
}

TEST_CASE("torch: TransformerEncoderLayer equals PyTorch's fused encoder layer, post-norm and pre-norm, relu and gelu", "[torch][nn]") {
  // The reference is libtorch's own inference kernel for nn.TransformerEncoderLayer
  // (at::_transformer_encoder_layer_fwd, batch first), fed kiln's parameters by their PyTorch names.
  // Tolerance: sums of up to 32 terms through two LayerNorms and a softmax, 64 float32 units.
  Source src(113);
  Batch batch;
  const int64_t N = 2, L = 5, E = 16, H = 4, F = 32;
  for (bool norm_first : {false, true})
    for (std::string act : {"relu", "gelu"}) {
      Tensor::manual_seed(7);
      nn::TransformerEncoderLayer layer(E, H, F, 0.1, act, 1e-5, /*batch_first=*/true, norm_first);
      layer.eval();  // dropout off, as the fused kernel
      std::map<std::string, Tensor> state;
      std::map<std::string, at::Tensor> p;
      for (const auto& [key, value] : layer.state_dict()) {
        p[key] = src.values(sizes_of(value.shape()), at::kFloat, Values::Finite) * 0.3;
        state[key] = to_kiln(p[key]);
      }
      layer.load_state_dict(state);
      at::Tensor x = src.values({N, L, E}, at::kFloat, Values::Finite);
      at::Tensor expected = at::_transformer_encoder_layer_fwd(
          x, E, H, p["self_attn.in_proj_weight"], p["self_attn.in_proj_bias"], p["self_attn.out_proj.weight"], p["self_attn.out_proj.bias"],
          act == "gelu", norm_first, 1e-5, p["norm1.weight"], p["norm1.bias"], p["norm2.weight"], p["norm2.bias"], p["linear1.weight"],
          p["linear1.bias"], p["linear2.weight"], p["linear2.bias"]);
      batch.check(cat("TransformerEncoderLayer norm_first ", norm_first, " ", act), layer.forward(to_kiln(x)), expected,
                  normwise(expected, 64, at::kFloat));
    }
  batch.run();
}

TEST_CASE("torch: RNN, LSTM and GRU equal at::rnn_tanh, at::rnn_relu, at::lstm and at::gru, values and gradients", "[torch][nn]") {
  // Every input and parameter's gradient, through two stacked bidirectional layers of 4 steps, one
  // batch-first layer without biases, and an unbatched sequence (torch's functions take it as N = 1).
  // Tolerance: each step sums up to 8 + 5 products and the recurrence chains 4 of them: 64 units.
  Source src(131);
  Batch batch;
  struct Config {
    int64_t layers;
    bool bidirectional, batch_first, biases, unbatched;
  };
  const int64_t L = 4, N = 3, I = 5, H = 8;
  for (nn::RNNMode mode : {nn::RNNMode::RNN_TANH, nn::RNNMode::RNN_RELU, nn::RNNMode::LSTM, nn::RNNMode::GRU})
    for (Config c : {Config{2, true, false, true, false}, Config{1, false, true, false, false}, Config{1, false, false, true, true}})
      for (at::ScalarType dt : kGradDtypes) {
        const bool lstm = mode == nn::RNNMode::LSTM;
        const int64_t G = lstm ? 4 : mode == nn::RNNMode::GRU ? 3 : 1, dirs = c.bidirectional ? 2 : 1, n = c.unbatched ? 1 : N;
        std::vector<at::Tensor> in;  // x, h0, (c0), then the parameters in at::lstm's order
        in.push_back(src.values(c.batch_first ? std::vector<int64_t>{n, L, I} : std::vector<int64_t>{L, n, I}, dt, Values::Finite));
        in.push_back(src.values({c.layers * dirs, n, H}, dt, Values::Finite) * 0.5);
        if (lstm) in.push_back(src.values({c.layers * dirs, n, H}, dt, Values::Finite) * 0.5);
        const size_t first_param = in.size();
        for (int64_t layer = 0; layer < c.layers; ++layer)
          for (int64_t d = 0; d < dirs; ++d) {
            int64_t inputs = layer == 0 ? I : H * dirs;
            in.push_back(src.values({G * H, inputs}, dt, Values::Finite) * 0.4);
            in.push_back(src.values({G * H, H}, dt, Values::Finite) * 0.4);
            if (c.biases) {
              in.push_back(src.values({G * H}, dt, Values::Finite) * 0.2);
              in.push_back(src.values({G * H}, dt, Values::Finite) * 0.2);
            }
          }
        auto k = [&](const std::vector<Tensor>& v) {
          std::vector<Tensor> params(v.begin() + static_cast<std::ptrdiff_t>(first_param), v.end());
          Tensor x = c.unbatched ? v[0].squeeze(1) : v[0], h0 = c.unbatched ? v[1].squeeze(1) : v[1];
          std::optional<Tensor> c0;
          if (lstm) c0 = c.unbatched ? v[2].squeeze(1) : v[2];
          nn::RNNResult r = nn::rnn(mode, x, h0, c0, params, c.biases, c.layers, 0.0, false, c.bidirectional, c.batch_first);
          std::vector<Tensor> parts = {r.output.flatten(), r.h_n.flatten()};
          if (r.c_n) parts.push_back(r.c_n->flatten());
          return Tensor::cat(parts, 0);
        };
        auto t = [&](const std::vector<at::Tensor>& v) {
          std::vector<at::Tensor> params(v.begin() + static_cast<std::ptrdiff_t>(first_param), v.end());
          if (lstm) {
            auto [out, h_n, c_n] = at::lstm(v[0], {v[1], v[2]}, params, c.biases, c.layers, 0.0, false, c.bidirectional, c.batch_first);
            return at::cat({out.flatten(), h_n.flatten(), c_n.flatten()});
          }
          std::tuple<at::Tensor, at::Tensor> r =
              mode == nn::RNNMode::GRU        ? at::gru(v[0], v[1], params, c.biases, c.layers, 0.0, false, c.bidirectional, c.batch_first)
              : mode == nn::RNNMode::RNN_TANH ? at::rnn_tanh(v[0], v[1], params, c.biases, c.layers, 0.0, false, c.bidirectional, c.batch_first)
                                              : at::rnn_relu(v[0], v[1], params, c.biases, c.layers, 0.0, false, c.bidirectional, c.batch_first);
          return at::cat({std::get<0>(r).flatten(), std::get<1>(r).flatten()});
        };
        std::string what = cat(lstm ? "lstm" : mode == nn::RNNMode::GRU ? "gru" : mode == nn::RNNMode::RNN_TANH ? "rnn_tanh" : "rnn_relu",
                               " layers ", c.layers, c.bidirectional ? " bidirectional" : "", c.batch_first ? " batch_first" : "",
                               c.biases ? "" : " no biases", c.unbatched ? " unbatched" : "");
        batch.check(cat(what, " ", name(dt)), k([&] {
                      std::vector<Tensor> kin;
                      for (const at::Tensor& a : in) kin.push_back(to_kiln(a));
                      return kin;
                    }()),
                    t(in), normwise(t(in), 64, dt));
        check_grad(batch, src, what, in, k, t, 64);
      }
  // The cells, as modules fed the same parameters: at::lstm_cell, at::gru_cell, at::rnn_tanh_cell.
  for (nn::RNNMode mode : {nn::RNNMode::RNN_TANH, nn::RNNMode::LSTM, nn::RNNMode::GRU}) {
    std::shared_ptr<nn::RNNCellBase> cell;
    if (mode == nn::RNNMode::LSTM) cell = std::make_shared<nn::LSTMCell>(I, H);
    else if (mode == nn::RNNMode::GRU) cell = std::make_shared<nn::GRUCell>(I, H);
    else cell = std::make_shared<nn::RNNCell>(I, H);
    std::map<std::string, Tensor> state;
    std::map<std::string, at::Tensor> p;
    for (const auto& [key, value] : cell->state_dict()) {
      p[key] = src.values(sizes_of(value.shape()), at::kFloat, Values::Finite) * 0.4;
      state[key] = to_kiln(p[key]);
    }
    cell->load_state_dict(state);
    at::Tensor x = src.values({N, I}, at::kFloat, Values::Finite), h = src.values({N, H}, at::kFloat, Values::Finite);
    at::Tensor c = src.values({N, H}, at::kFloat, Values::Finite);
    auto [kh, kc] = cell->step(to_kiln(x), to_kiln(h), mode == nn::RNNMode::LSTM ? std::optional<Tensor>(to_kiln(c)) : std::nullopt);
    at::Tensor want = mode == nn::RNNMode::LSTM ? std::get<0>(at::lstm_cell(x, {h, c}, p["weight_ih"], p["weight_hh"], p["bias_ih"], p["bias_hh"]))
                      : mode == nn::RNNMode::GRU ? at::gru_cell(x, h, p["weight_ih"], p["weight_hh"], p["bias_ih"], p["bias_hh"])
                                             : at::rnn_tanh_cell(x, h, p["weight_ih"], p["weight_hh"], p["bias_ih"], p["bias_hh"]);
    batch.check(cat("cell ", static_cast<int>(mode), " h'"), kh, want, normwise(want, 32, at::kFloat));
    if (mode == nn::RNNMode::LSTM) {
      at::Tensor want_c = std::get<1>(at::lstm_cell(x, {h, c}, p["weight_ih"], p["weight_hh"], p["bias_ih"], p["bias_hh"]));
      batch.check("LSTMCell c'", *kc, want_c, normwise(want_c, 32, at::kFloat));
    }
  }
  batch.run();
}

// --- ties and kinks: the conventions -------------------------------------------------------------

TEST_CASE("torch grad: ties in max/min reductions are split evenly, as torch.amax and torch 1.13's max()", "[torch][grad]") {
  // Rows with a tie of two, a tie of three, and none.
  const std::vector<double> values = {1, 3, 3, 0, 2, 2, 2, -1, 5, 4, -2, 1};
  Batch batch;
  Source src(109);
  for (at::ScalarType dt : kGradDtypes) {
    at::Tensor x = at::tensor(values, at::TensorOptions().dtype(dt)).reshape({3, 4});
    check_grad(batch, src, "max axis 1 (amax)", {x}, [](auto& v) { return v[0].max({1}); }, [](auto& v) { return at::amax(v[0], {1}); }, 4);
    check_grad(batch, src, "min axis 1 (amin)", {-x}, [](auto& v) { return v[0].min({1}); }, [](auto& v) { return at::amin(v[0], {1}); }, 4);
    // The full max: torch 1.13's max() (no dim) splits evenly too (evenly_distribute_backward).
    at::Tensor all_max = at::full({2, 3}, 7.0, at::TensorOptions().dtype(dt));
    all_max[0][0] = 1.0;
    check_grad(batch, src, "max() with five ties", {all_max}, [](auto& v) { return v[0].max(); }, [](auto& v) { return v[0].max(); }, 4);
    // maximum/minimum of two equal values: half the gradient to each (torch 1.13 too).
    at::Tensor a = at::tensor(std::vector<double>{1, 2, -3, 4}, at::TensorOptions().dtype(dt));
    at::Tensor b = at::tensor(std::vector<double>{1, 0, -3, 5}, at::TensorOptions().dtype(dt));
    check_grad(batch, src, "maximum with ties", {a, b}, [](auto& v) { return v[0].maximum(v[1]); }, [](auto& v) { return at::maximum(v[0], v[1]); }, 4);
    check_grad(batch, src, "minimum with ties", {a, b}, [](auto& v) { return v[0].minimum(v[1]); }, [](auto& v) { return at::minimum(v[0], v[1]); }, 4);
  }
  // max_pool2d differs: kiln's is a max reduction over each window, so it splits the gradient between
  // tied elements of a window, while torch 1.13's gives it to the one element its indices name (the
  // first in the window). On windows that are all ties, kiln's gradient is therefore avg_pool2d's.
  for (at::ScalarType dt : kGradDtypes) {
    at::Tensor flat = at::full({1, 2, 4, 4}, 1.5, at::TensorOptions().dtype(dt));
    check_grad(batch, src, "max_pool2d, all tied", {flat}, [](auto& v) { return v[0].max_pool2d({2, 2}); },
               [](auto& v) { return at::avg_pool2d(v[0], {2, 2}); }, 4);
  }
  batch.run();
  at::Tensor flat = at::full({1, 1, 2, 2}, 1.5).requires_grad_(true);
  at::Tensor pooled = torch::autograd::grad({at::max_pool2d(flat, {2, 2}).sum()}, {flat})[0];
  CHECK(pooled.eq(1.0).sum().item<int64_t>() == 1);
  // Where kiln has no counterpart: torch's max(dim), which returns indices, sends the whole gradient to
  // the one index it returns, not split (value_selecting_reduction_backward). kiln's max(axes) is amax.
  at::Tensor x = at::tensor(std::vector<double>{1, 3, 3, 0}).requires_grad_(true);
  at::Tensor g = torch::autograd::grad({std::get<0>(x.max(0))}, {x})[0];
  CHECK(g.sum().item<double>() == 1.0);
  CHECK(g.eq(1.0).sum().item<int64_t>() == 1);
}

TEST_CASE("torch grad: abs, relu and leaky_relu at 0", "[torch][grad]") {
  // abs'(0) = sign(0) = 0 and relu'(0) = 0 in both; leaky_relu'(0) = slope (torch's x > 0 ? 1 : slope).
  Batch batch;
  Source src(110);
  for (at::ScalarType dt : kGradDtypes) {
    at::Tensor x = at::tensor(std::vector<double>{0.0, -0.0, 1.5, -2.0}, at::TensorOptions().dtype(dt));
    check_grad(batch, src, "abs at 0", {x}, [](auto& v) { return v[0].abs(); }, [](auto& v) { return v[0].abs(); }, 0);
    check_grad(batch, src, "relu at 0", {x}, [](auto& v) { return v[0].relu(); }, [](auto& v) { return v[0].relu(); }, 0);
    check_grad(batch, src, "leaky_relu at 0", {x}, [](auto& v) { return v[0].leaky_relu(0.2); }, [](auto& v) { return at::leaky_relu(v[0], 0.2); }, 1);
  }
  batch.run();
}

}  // namespace
}  // namespace kiln::oracle
