// Autograd: every differentiable op against central finite differences in float64, plus the
// PyTorch semantics of backward() (accumulation, leaves, no_grad, detach, second order) and errors.
// Runs on the default device; CTest runs it again on REF ("conformance on REF").
#include <cmath>
#include <functional>
#include <numbers>
#include <random>

#include "frontend/nn.h"
#include "frontend/tensor.h"
#include "helpers.h"

using namespace kiln;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Values whose magnitude is in [lo, hi] with a random sign (or positive only): keeps inputs away from
// the kinks (0 for abs/relu) and the poles of the op under test.
std::vector<double> values(std::mt19937& rng, int64_t n, double lo, double hi, bool positive) {
  std::uniform_real_distribution<double> mag(lo, hi);
  std::bernoulli_distribution neg(0.5);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = (positive || !neg(rng) ? 1.0 : -1.0) * mag(rng);
  return v;
}

struct Input {
  Shape shape;
  double lo = 0.2, hi = 2.0;
  bool positive = false;
};

// loss = sum(f(x...) * w) with fixed random weights w, so every output element matters differently.
// The analytic gradient (gradients()) must match central differences: with h = 1e-6 in float64 the
// truncation error is ~h^2 |f'''| and the rounding error ~1e-16/h, both far below the 1e-6 tolerance.
void check_grad(const std::string& name, const Fn& f, const std::vector<Input>& inputs, uint32_t seed = 1) {
  INFO("op: " << name);
  std::mt19937 rng(seed);
  std::vector<std::vector<double>> data;
  for (const Input& in : inputs) data.push_back(values(rng, numel(in.shape), in.lo, in.hi, in.positive));
  auto make = [&](const std::vector<std::vector<double>>& d) {
    std::vector<Tensor> xs;
    for (size_t i = 0; i < inputs.size(); ++i) xs.push_back(Tensor::from_vector<double>(d[i], inputs[i].shape));
    return xs;
  };
  std::vector<Tensor> xs = make(data);
  Tensor out = f(xs);
  std::vector<double> w = values(rng, out.numel(), 0.5, 1.5, false);
  Tensor weights = Tensor::from_vector<double>(w, out.shape());
  auto loss_of = [&](const std::vector<Tensor>& x) { return (f(x) * weights).sum(); };
  std::vector<Tensor> analytic = gradients(loss_of(xs), xs);
  const double h = 1e-6;
  for (size_t k = 0; k < inputs.size(); ++k) {
    std::vector<double> got = analytic[k].to_vector<double>();
    REQUIRE(got.size() == data[k].size());
    for (size_t i = 0; i < data[k].size(); ++i) {
      auto shifted = [&](double by) {
        auto d = data;
        d[k][i] += by;
        return loss_of(make(d)).item<double>();
      };
      double numeric = (shifted(h) - shifted(-h)) / (2 * h);
      INFO("input " << k << " element " << i << " value " << data[k][i]);
      CHECK(got[i] == Approx(numeric).margin(1e-6).epsilon(1e-6));
    }
  }
}

Tensor nc(const Tensor& t) { return t.transpose(0, 1); }  // a non-contiguous view of a 2-D input

}  // namespace

TEST_CASE("autograd: unary ops match finite differences", "[autograd]") {
  Input v{{2, 3}}, pos{{2, 3}, 0.3, 2.0, true}, small{{2, 3}, 0.1, 1.2};
  check_grad("neg", [](auto& x) { return -x[0]; }, {v});
  check_grad("abs", [](auto& x) { return x[0].abs(); }, {v});
  check_grad("exp", [](auto& x) { return x[0].exp(); }, {v});
  check_grad("exp2", [](auto& x) { return x[0].exp2(); }, {v});
  check_grad("log", [](auto& x) { return x[0].log(); }, {pos});
  check_grad("log2", [](auto& x) { return x[0].log2(); }, {pos});
  check_grad("sqrt", [](auto& x) { return x[0].sqrt(); }, {pos});
  check_grad("rsqrt", [](auto& x) { return x[0].rsqrt(); }, {pos});
  check_grad("reciprocal", [](auto& x) { return x[0].reciprocal(); }, {v});
  check_grad("sin", [](auto& x) { return x[0].sin(); }, {v});
  check_grad("cos", [](auto& x) { return x[0].cos(); }, {v});
  check_grad("tan", [](auto& x) { return x[0].tan(); }, {small});
  check_grad("tanh", [](auto& x) { return x[0].tanh(); }, {v});
  check_grad("tanh near 0", [](auto& x) { return x[0].tanh(); }, {Input{{5}, 0.001, 0.015}});
  check_grad("sigmoid", [](auto& x) { return x[0].sigmoid(); }, {v});
  check_grad("relu", [](auto& x) { return x[0].relu(); }, {v});
  check_grad("leaky_relu", [](auto& x) { return x[0].leaky_relu(0.1); }, {v});
  check_grad("gelu", [](auto& x) { return x[0].gelu(); }, {v});
  check_grad("silu", [](auto& x) { return x[0].silu(); }, {v});
  check_grad("softplus", [](auto& x) { return x[0].softplus(); }, {v});
  check_grad("erf", [](auto& x) { return x[0].erf(); }, {v});
  check_grad("pow scalar", [](auto& x) { return x[0].pow(3.0); }, {v});
  check_grad("pow 2", [](auto& x) { return x[0].pow(2.0); }, {v});
  check_grad("pow fractional", [](auto& x) { return x[0].pow(1.7); }, {pos});
  check_grad("clamp", [](auto& x) { return x[0].clamp(-1.1, 1.3); }, {Input{{2, 3}, 0.2, 1.0}});
  check_grad("sign", [](auto& x) { return x[0].sign() * x[0]; }, {v});
  // floor/ceil/round/trunc are flat almost everywhere: 0, away from integers (inputs are not integers).
  check_grad("floor", [](auto& x) { return x[0].floor() + x[0]; }, {v});
  check_grad("ceil", [](auto& x) { return x[0].ceil() * 2.0 + x[0]; }, {v});
  check_grad("round", [](auto& x) { return x[0].round() + x[0]; }, {Input{{2, 3}, 0.6, 1.4}});
  check_grad("trunc", [](auto& x) { return x[0].trunc() + x[0]; }, {v});
  check_grad("cast float32 and back", [](auto& x) { return x[0].cast(dtypes::float64) * 3.0; }, {v});
}

TEST_CASE("autograd: binary ops with broadcasting and views", "[autograd]") {
  Input a{{2, 3}}, b{{2, 3}}, row{{3}}, col{{2, 1}}, pos{{2, 3}, 0.5, 2.0, true};
  check_grad("add", [](auto& x) { return x[0] + x[1]; }, {a, b});
  check_grad("sub broadcast", [](auto& x) { return x[0] - x[1]; }, {a, row});
  check_grad("mul broadcast both", [](auto& x) { return x[0] * x[1]; }, {col, row});
  check_grad("div", [](auto& x) { return x[0] / x[1]; }, {a, b});
  check_grad("div broadcast", [](auto& x) { return x[1] / x[0]; }, {col, a});
  check_grad("pow tensor", [](auto& x) { return x[0].pow(x[1]); }, {pos, b});
  check_grad("maximum", [](auto& x) { return x[0].maximum(x[1]); }, {a, b}, 3);
  check_grad("minimum broadcast", [](auto& x) { return x[0].minimum(x[1]); }, {a, row}, 4);
  check_grad("where", [](auto& x) { return x[0].gt(x[1]).where(x[0] * 2.0, x[1].exp()); }, {a, b});
  check_grad("scalar ops", [](auto& x) { return (x[0] + 1.5) * 2.0 - 0.5 / (x[0] * x[0] + 1.0); }, {a});
  check_grad("non-contiguous", [](auto& x) { return nc(x[0]) * x[1]; }, {Input{{3, 2}}, b});
  check_grad("same input twice", [](auto& x) { return x[0] * x[0].sin() + x[0]; }, {a});
}

TEST_CASE("autograd: a large gather's gradient is a scatter-add, and differentiates again as a gather", "[autograd]") {
  // 256 x 16 indices into 4096 rows: 2^24 one-hot pairs, so GATHER's gradient is a SCATTER_ADD (summed
  // on the host). dL/dx[v] = sum of w over the positions whose index is v; the gradient of
  // sum(dL/dx * u) with respect to w is u read at the indices (SCATTER_ADD's adjoint). Both against
  // loops in double.
  const int64_t V = 4096, T = 256, D = 16;
  std::vector<int64_t> idx(static_cast<size_t>(T * D));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d) idx[static_cast<size_t>(t * D + d)] = (t * 37 + d * 5) % 64 + (t % 2) * 4000;
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> dist(-1, 1);
  auto draw = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& e : v) e = dist(rng);
    return v;
  };
  std::vector<float> xv = draw(V * D), wv = draw(T * D), uv = draw(V * D);
  Tensor x = Tensor::from_vector(xv, {V, D}).requires_grad_(), w = Tensor::from_vector(wv, {T, D}).requires_grad_();
  Tensor index = Tensor::from_vector(idx, {T, D});
  Tensor dx = gradients((x.gather(0, index) * w).sum(), {x})[0];
  Schedule plan = Tensor::schedule({dx});
  CHECK(std::count_if(plan.items.begin(), plan.items.end(), [](const ScheduleItem& i) { return i.kind == ScheduleItem::Kind::ScatterAdd; }) == 1);
  std::vector<double> want(static_cast<size_t>(V * D), 0.0);
  for (int64_t p = 0; p < T * D; ++p) want[static_cast<size_t>(idx[static_cast<size_t>(p)] * D + p % D)] += wv[static_cast<size_t>(p)];
  std::vector<float> got = dx.to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(want[i]).margin(1e-5));
  Tensor dw = gradients((dx * Tensor::from_vector(uv, {V, D})).sum(), {w})[0];
  std::vector<float> got_w = dw.to_vector<float>();
  for (int64_t p = 0; p < T * D; ++p)
    REQUIRE(got_w[static_cast<size_t>(p)] == uv[static_cast<size_t>(idx[static_cast<size_t>(p)] * D + p % D)]);
}

TEST_CASE("autograd: reductions", "[autograd]") {
  Input x{{2, 3, 4}};
  check_grad("sum all", [](auto& t) { return t[0].sum(); }, {x});
  check_grad("sum axes keepdim", [](auto& t) { return t[0].sum({0, -1}, true) * 2.0; }, {x});
  check_grad("mean", [](auto& t) { return t[0].mean({1}); }, {x});
  check_grad("prod", [](auto& t) { return t[0].prod({2}); }, {x});
  check_grad("max", [](auto& t) { return t[0].max({1}); }, {x});
  check_grad("min all", [](auto& t) { return t[0].min(); }, {x});
  check_grad("var", [](auto& t) { return t[0].var({2}); }, {x});
  check_grad("std keepdim", [](auto& t) { return t[0].std({0, 2}, true); }, {x});
  check_grad("softmax", [](auto& t) { return t[0].softmax(-1); }, {x});
  check_grad("log_softmax", [](auto& t) { return t[0].log_softmax(1); }, {x});
  check_grad("logsumexp", [](auto& t) { return t[0].logsumexp({2}); }, {x});
  check_grad("cumsum", [](auto& t) { return t[0].cumsum(1); }, {x});
}

TEST_CASE("autograd: a big full reduction (reduced in two steps) has the exact gradient", "[autograd]") {
  // Too many elements for finite differences; d/dx sum(x^2) = 2x and d/dx max(x) = one-hot are exact.
  std::vector<float> v(1 << 17);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7919) % 1000) * 0.01f - 5.0f;
  v[4242] = 100.0f;
  Tensor x = Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())});
  auto g = gradients((x * x).sum() + x.max(), {x})[0].to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) REQUIRE(g[i] == 2 * v[i] + (i == 4242 ? 1.0f : 0.0f));
}

TEST_CASE("autograd: prod with zeros is exact", "[autograd]") {
  // d prod / d x_i is the product of the others: with one zero only the zero's entry is non-zero.
  for (auto [values, expected] : std::vector<std::pair<std::vector<double>, std::vector<double>>>{
           {{2, 3, 4}, {12, 8, 6}}, {{2, 0, 4}, {0, 8, 0}}, {{0, 3, 0}, {0, 0, 0}}}) {
    Tensor x = Tensor::from_vector<double>(values, {3});
    CHECK(gradients(x.prod(), {x})[0].to_vector<double>() == expected);
  }
}

TEST_CASE("autograd: max splits the gradient between ties, as PyTorch", "[autograd]") {
  Tensor x = Tensor::from_vector<double>({1, 5, 5, 2}, {4});
  CHECK(gradients(x.max(), {x})[0].to_vector<double>() == std::vector<double>{0, 0.5, 0.5, 0});
  Tensor a = Tensor::from_vector<double>({1, 3, -2}, {3}), b = Tensor::from_vector<double>({1, 2, 0}, {3});
  auto g = gradients(a.maximum(b).sum(), {a, b});
  CHECK(g[0].to_vector<double>() == std::vector<double>{0.5, 1, 0});
  CHECK(g[1].to_vector<double>() == std::vector<double>{0.5, 0, 1});
  // relu and abs: gradient 0 at exactly 0, as PyTorch.
  Tensor z = Tensor::from_vector<double>({-1, 0, 2}, {3});
  CHECK(gradients(z.relu().sum(), {z})[0].to_vector<double>() == std::vector<double>{0, 0, 1});
  CHECK(gradients(z.abs().sum(), {z})[0].to_vector<double>() == std::vector<double>{-1, 0, 1});
}

TEST_CASE("autograd: movement ops", "[autograd]") {
  Input x{{2, 3, 4}};
  check_grad("reshape", [](auto& t) { return t[0].reshape({4, -1}); }, {x});
  check_grad("permute", [](auto& t) { return t[0].permute({2, 0, 1}); }, {x});
  check_grad("transpose", [](auto& t) { return t[0].transpose(0, 2); }, {x});
  check_grad("expand", [](auto& t) { return t[0].reshape({2, 1, 3, 4}).expand({2, 5, 3, 4}); }, {x});
  check_grad("pad", [](auto& t) { return t[0].pad({{1, 0}, {0, 2}, {1, 1}}); }, {x});
  check_grad("pad value", [](auto& t) { return t[0].pad({{0, 0}, {1, 1}, {0, 0}}, 3.0); }, {x});
  check_grad("shrink", [](auto& t) { return t[0].shrink({{0, 1}, {1, 3}, {1, 4}}); }, {x});
  check_grad("flip", [](auto& t) { return t[0].flip({0, 2}); }, {x});
  check_grad("squeeze/unsqueeze", [](auto& t) { return t[0].unsqueeze(1).squeeze(1).unsqueeze(-1); }, {x});
  check_grad("flatten", [](auto& t) { return t[0].flatten(1); }, {x});
  check_grad("slice negative step", [](auto& t) { return t[0].slice(2, -1, 0, -2); }, {x});
  check_grad("slice step", [](auto& t) { return t[0].slice(1, 0, std::nullopt, 2); }, {x});
  check_grad("cat", [](auto& t) { return Tensor::cat({t[0], t[1] * 2.0}, 1); }, {x, Input{{2, 2, 4}}});
  check_grad("stack", [](auto& t) { return Tensor::stack({t[0], t[1]}, -1); }, {x, x});
  check_grad("split", [](auto& t) { auto p = t[0].split({1, 2}, 1); return p[0] * 2.0 + p[1].sum({1}, true); }, {x});
  check_grad("chunk", [](auto& t) { auto p = t[0].chunk(2, 2); return p[0] * p[1]; }, {x});
  check_grad("repeat", [](auto& t) { return t[0].repeat({2, 1, 3}); }, {x});
  Tensor index = Tensor::from_vector<int64_t>({0, 2, 2, 1, 0, 0, 2, 1}, {2, 1, 4});
  check_grad("gather (repeated indices accumulate)", [&](auto& t) { return t[0].gather(1, index); }, {x});
}

TEST_CASE("autograd: matmul, conv2d, pooling", "[autograd]") {
  check_grad("matmul 2-D", [](auto& t) { return t[0].matmul(t[1]); }, {Input{{3, 4}}, Input{{4, 2}}});
  check_grad("matmul batched broadcast", [](auto& t) { return t[0].matmul(t[1]); }, {Input{{2, 3, 4}}, Input{{4, 5}}});
  check_grad("matmul vector", [](auto& t) { return t[0].matmul(t[1]); }, {Input{{4}}, Input{{4, 3}}});
  check_grad("conv2d", [](auto& t) { return t[0].conv2d(t[1], t[2], {1, 1}, {1, 1}); },
             {Input{{2, 2, 5, 5}}, Input{{3, 2, 3, 3}}, Input{{3}}});
  check_grad("conv2d stride dilation groups", [](auto& t) { return t[0].conv2d(t[1], std::nullopt, {2, 1}, {1, 0}, {1, 2}, 2); },
             {Input{{1, 4, 6, 6}}, Input{{2, 2, 2, 2}}});
  check_grad("max_pool2d", [](auto& t) { return t[0].max_pool2d({2, 2}); }, {Input{{1, 2, 4, 4}}}, 7);
  check_grad("max_pool2d padded", [](auto& t) { return t[0].max_pool2d({3, 3}, std::array<int64_t, 2>{2, 2}, {1, 1}); },
             {Input{{1, 1, 5, 5}}}, 8);
  check_grad("avg_pool2d", [](auto& t) { return t[0].avg_pool2d({2, 2}, std::array<int64_t, 2>{1, 1}); }, {Input{{1, 2, 4, 4}}});
}

TEST_CASE("autograd: float32 and float16 gradients match float64", "[autograd]") {
  std::vector<double> v = {0.5, -1.25, 2.0, 0.75, -0.3, 1.1};
  Tensor x64 = Tensor::from_vector<double>(v, {2, 3});
  auto f = [](const Tensor& x) { return (x.exp() * x.sin() + x.tanh()).sum(); };
  std::vector<double> want = gradients(f(x64), {x64})[0].to_vector<double>();
  for (auto [dtype, tol] : {std::pair{dtypes::float32, 1e-5}, std::pair{dtypes::float16, 2e-2}, std::pair{dtypes::bfloat16, 6e-2}}) {
    Tensor x = x64.cast(dtype).realize();
    Tensor g = gradients(f(x), {x})[0];
    REQUIRE(g.dtype() == dtype);
    std::vector<double> got = g.cast(dtypes::float64).to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(tol).margin(tol));
  }
}

TEST_CASE("autograd: backward accumulates into leaves like PyTorch", "[autograd]") {
  Tensor w = Tensor::from_vector<float>({1, 2, 3}, {3}).requires_grad_();
  Tensor b = Tensor::from_vector<float>({0.5f}, {1}).requires_grad_();
  Tensor x = Tensor::from_vector<float>({2, -1, 4}, {3});
  CHECK(w.requires_grad());
  CHECK(w.is_leaf());
  CHECK_FALSE(x.requires_grad());
  CHECK_FALSE(w.grad().has_value());
  Tensor y = (w * x + b).sum();
  CHECK(y.requires_grad());
  CHECK_FALSE(y.is_leaf());
  y.backward();
  CHECK(w.grad()->to_vector<float>() == std::vector<float>{2, -1, 4});
  CHECK(b.grad()->to_vector<float>() == std::vector<float>{3});
  // A second backward adds to .grad until it is cleared.
  (w * w).sum().backward();
  CHECK(w.grad()->to_vector<float>() == std::vector<float>{4, 3, 10});
  CHECK(b.grad()->to_vector<float>() == std::vector<float>{3});  // b was not used: unchanged
  w.set_grad(std::nullopt);
  (w * 3.0f).sum().backward();
  CHECK(w.grad()->to_vector<float>() == std::vector<float>{3, 3, 3});
}

TEST_CASE("autograd: backward after the output was realized", "[autograd]") {
  Tensor w = Tensor::from_vector<float>({1, 2}, {2}).requires_grad_();
  Tensor loss = (w * w * w).sum();
  CHECK(loss.item<float>() == 9.0f);  // realized: the tensor now reads a buffer
  loss.backward();
  CHECK(w.grad()->to_vector<float>() == std::vector<float>{3, 12});
  // A leaf created lazily and realized between forward and backward still gets its gradient.
  Tensor v = (Tensor::ones({2}) * 2.0).requires_grad_();
  Tensor out = (v * v).sum();
  v.realize();
  out.backward();
  CHECK(v.grad()->to_vector<float>() == std::vector<float>{4, 4});
}

// PyTorch differentiates through intermediates that were computed (printed, copied out) before later
// ops used them: the realized value is a buffer, and autograd keeps the graph behind it.
TEST_CASE("autograd: backward through intermediates realized before later ops used them", "[autograd]") {
  Tensor x = Tensor::from_vector<float>({1, 2, 3}, {3}).requires_grad_();
  Tensor y = x * x;
  CHECK(y.to_vector<float>() == std::vector<float>{1, 4, 9});
  CHECK((y * 2).requires_grad());
  (y * 2).sum().backward();  // d/dx 2x^2 = 4x
  CHECK(x.grad()->to_vector<float>() == std::vector<float>{4, 8, 12});
  // A chain of realized values, a view of one, and one realized value used twice.
  x.set_grad(std::nullopt);
  Tensor a = (x + 1).realize();              // x + 1
  Tensor b = (a * a).realize();              // (x + 1)^2
  Tensor c = b.reshape({3, 1}).expand({3, 2}).sum({1}) + a;  // 2 (x + 1)^2 + (x + 1)
  c.sum().backward();                        // 4 (x + 1) + 1
  CHECK(x.grad()->to_vector<float>() == std::vector<float>{9, 13, 17});
  // gradients() with respect to a realized intermediate stops there: d(3b)/db = 3.
  std::vector<Tensor> g = gradients((b * 3).sum(), {b});
  CHECK(g[0].to_vector<float>() == std::vector<float>{3, 3, 3});
  // Second order through a realized value: d/dx of d/dx x^3 = 6x.
  Tensor cube = (x * x).realize() * x;
  Tensor first = gradients(cube.sum(), {x})[0];
  CHECK(gradients(first.sum(), {x})[0].to_vector<float>() == std::vector<float>{6, 12, 18});
  // A realized value computed under no_grad or from detach() carries no gradient.
  Tensor d = x.detach() * 2;
  d.realize();
  CHECK_FALSE((d * 2).requires_grad());
  CHECK_THROWS_WITH((d * 2).sum().backward(), Catch::Contains("does not depend"));
}

// gradients() takes any input, differentiating the lazy graph. A value realized while nothing it read
// required grad keeps no graph: differentiating past it with respect to an input that requires no grad
// gave zeros (d/dx of (x * x), realized, then summed). It is an error naming the input, as PyTorch's
// torch.autograd.grad refuses such inputs; inputs that require grad, and lazy graphs, work as before.
TEST_CASE("autograd: gradients() past a value realized without a graph is an error, not zeros", "[autograd]") {
  Tensor x = Tensor::from_vector<float>({1, 2, 3}, {3});
  Tensor lazy = (x * x).sum();
  CHECK(gradients(lazy, {x})[0].to_vector<float>() == std::vector<float>{2, 4, 6});  // nothing realized: fine
  Tensor y = (x * x).realize();
  CHECK_THROWS_WITH(gradients(y.sum(), {x}), Catch::Contains("gradients: input 0 (shape (3,)) does not require grad") &&
                                                 Catch::Contains("requires_grad_()"));
  CHECK_THROWS_AS(gradients((y * x).sum(), {x}), Error);  // a direct path too: the partial gradient would be wrong
  // With respect to the realized value itself, it is a leaf: d(3y)/dy = 3.
  CHECK(gradients((y * 3).sum(), {y})[0].to_vector<float>() == std::vector<float>{3, 3, 3});
  // An input that requires grad: the realized value is a constant, as in PyTorch (it was computed before).
  Tensor w = Tensor::from_vector<float>({1, 1, 1}, {3}).requires_grad_();
  CHECK(gradients((y * w).sum(), {w})[0].to_vector<float>() == std::vector<float>{1, 4, 9});
  // The gradient stops at a target and at detach(), so the realized value behind them does not matter.
  Tensor h = y * 2;
  CHECK(gradients((h * h).sum(), {h})[0].to_vector<float>() == std::vector<float>{4, 16, 36});
  CHECK(gradients((y.detach() * x).sum(), {x})[0].to_vector<float>() == std::vector<float>{1, 4, 9});
  // A realized integer (an op's indices, checked on the host) carries no gradient: no error.
  Tensor picks = (Tensor::from_vector<int64_t>({2, 0}, {2}) + 0).realize();
  CHECK(gradients(x.index_select(0, picks).sum(), {x})[0].to_vector<float>() == std::vector<float>{1, 0, 1});
  // Computed from w, the realized value keeps its graph: d/dw sum(w^2 * w) = 3 w^2.
  Tensor z = (w * w).realize();
  CHECK(gradients((z * w).sum(), {w})[0].to_vector<float>() == std::vector<float>{3, 3, 3});
}

TEST_CASE("autograd: detach, no_grad and assign stop gradients", "[autograd]") {
  Tensor w = Tensor::from_vector<float>({1, 2}, {2}).requires_grad_();
  Tensor y = (w * w.detach()).sum();  // d/dw = w (the detached factor is a constant)
  y.backward();
  CHECK(w.grad()->to_vector<float>() == std::vector<float>{1, 2});
  {
    NoGradGuard guard;
    CHECK_FALSE(grad_enabled());
    Tensor z = (w * 2.0f).sum();
    CHECK_FALSE(z.requires_grad());
    CHECK_THROWS_AS(z.backward(), Error);
    w.assign(w - *w.grad() * 0.5f);  // an optimizer step
  }
  CHECK(grad_enabled());
  CHECK(w.to_vector<float>() == std::vector<float>{0.5, 1});
  CHECK(w.is_leaf());
  w.set_grad(std::nullopt);
  (w * 4.0f).sum().backward();
  CHECK(w.grad()->to_vector<float>() == std::vector<float>{4, 4});
}

TEST_CASE("autograd: only the requested leaves get gradients", "[autograd]") {
  Tensor a = Tensor::from_vector<float>({1, 2}, {2}).requires_grad_();
  Tensor b = Tensor::from_vector<float>({3, 4}, {2}).requires_grad_();
  Tensor c = Tensor::from_vector<float>({5, 6}, {2}).requires_grad_(false);
  (a * c).sum().backward();
  CHECK(a.grad().has_value());
  CHECK_FALSE(b.grad().has_value());
  CHECK_FALSE(c.grad().has_value());
  // gradients() of one input of two builds nothing for the other: its result is just zeros.
  auto g = gradients((a * c).sum(), {a, b});
  CHECK(g[1].to_vector<float>() == std::vector<float>{0, 0});
}

TEST_CASE("autograd: second-order gradients", "[autograd]") {
  // f = sum(x^3 + sin(x) * y): df/dx = 3x^2 + cos(x) y, d2f/dx2 = 6x - sin(x) y, d2f/dxdy = cos(x).
  std::vector<double> xv = {0.5, -1.0, 2.0}, yv = {1.5, 0.25, -2.0};
  Tensor x = Tensor::from_vector<double>(xv, {3}), y = Tensor::from_vector<double>(yv, {3});
  Tensor f = (x * x * x + x.sin() * y).sum();
  Tensor dx = gradients(f, {x})[0];
  auto second = gradients(dx.sum(), {x, y});
  std::vector<double> dxx = second[0].to_vector<double>(), dxy = second[1].to_vector<double>();
  for (size_t i = 0; i < 3; ++i) {
    CHECK(dxx[i] == Approx(6 * xv[i] - std::sin(xv[i]) * yv[i]).epsilon(1e-12));
    CHECK(dxy[i] == Approx(std::cos(xv[i])).epsilon(1e-12));
  }
  // Third order of exp: every derivative is exp.
  Tensor e = x.exp().sum();
  Tensor d1 = gradients(e, {x})[0], d2 = gradients(d1.sum(), {x})[0], d3 = gradients(d2.sum(), {x})[0];
  for (size_t i = 0; i < 3; ++i) CHECK(d3.to_vector<double>()[i] == Approx(std::exp(xv[i])).epsilon(1e-12));
  // Through backward(): the gradient of a gradient norm (a gradient penalty), against finite differences.
  Tensor w = Tensor::from_vector<double>({0.3, -0.7}, {2}).requires_grad_();
  auto penalty = [](const Tensor& w) {
    Tensor g = gradients((w.sin() * w).sum(), {w})[0];
    return (g * g).sum();
  };
  penalty(w).backward();
  std::vector<double> got = w.grad()->to_vector<double>();
  for (size_t i = 0; i < 2; ++i) {
    auto at = [&](double by) {
      std::vector<double> v = {0.3, -0.7};
      v[i] += by;
      return penalty(Tensor::from_vector<double>(v, {2})).item<double>();
    };
    CHECK(got[i] == Approx((at(1e-6) - at(-1e-6)) / 2e-6).epsilon(1e-6));
  }
}

// d/dx sum(f(x)) at each x in float32, against closed forms.
void check_float32_grad(const char* name, const std::function<Tensor(const Tensor&)>& f, const std::vector<float>& x,
                        const std::function<double(double)>& want) {
  Tensor t = Tensor::from_vector(x, {int64_t(x.size())});
  std::vector<float> got = gradients(f(t).sum(), {t})[0].to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    INFO(name << "'(" << x[i] << ") = " << got[i] << ", want " << want(x[i]));
    CHECK(std::isfinite(got[i]));
    CHECK(got[i] == Approx(want(x[i])).epsilon(1e-5).margin(1e-30));
  }
}

TEST_CASE("autograd: no NaN from the branch where does not take, where that branch overflows", "[autograd]") {
  // where passes a zero gradient to the branch it does not take; a branch that overflows there (exp of
  // a large argument, a series' high power) turned that 0 into 0 * inf = NaN.
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  check_float32_grad("softplus", [](const Tensor& x) { return x.softplus(); }, {100, 1000, 3e38f, 19, -100, 0},
                     [&](double v) { return v > 20 ? 1.0 : sig(v); });
  check_float32_grad("softplus(2, 5)", [](const Tensor& x) { return x.softplus(2.0, 5.0); }, {50, 2000, 2, -60},
                     [&](double v) { return 2 * v > 5 ? 1.0 : sig(2 * v); });
  check_float32_grad("sigmoid", [](const Tensor& x) { return x.sigmoid(); }, {-100, -1000, 100, 0, -3},
                     [&](double v) { return sig(v) * (1 - sig(v)); });
  check_float32_grad("silu", [](const Tensor& x) { return x.silu(); }, {-200, -1000, 100, 0},
                     [&](double v) { return sig(v) * (1 + v * (1 - sig(v))); });
  check_float32_grad("tanh", [](const Tensor& x) { return x.tanh(); }, {1e5f, -1e5f, 3e38f, 0.01f, 0},
                     [](double v) { return 1 - std::tanh(v) * std::tanh(v); });
  check_float32_grad("erf", [](const Tensor& x) { return x.erf(); }, {60, -60, 1e20f, 0.3f, 0},
                     [](double v) { return 2 / std::sqrt(std::numbers::pi) * std::exp(-v * v); });
  check_float32_grad("gelu", [](const Tensor& x) { return x.gelu(); }, {100, -100, 1e6f},
                     [](double v) { return 0.5 * (1 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-v * v / 2) / std::sqrt(2 * std::numbers::pi); });
}

TEST_CASE("autograd: binary_cross_entropy_with_logits has a finite gradient at large logits", "[autograd][nn]") {
  // Its gradient is (sigmoid(x) - y) / n; it was NaN for |x| >= ~94 in float32 (through softplus).
  std::vector<float> x = {100, -100, 1e4f, -1e4f, 95, -95}, y = {0, 1, 1, 0, 1, 1};
  Tensor logits = Tensor::from_vector(x, {6}), target = Tensor::from_vector(y, {6});
  std::vector<float> got = gradients(nn::binary_cross_entropy_with_logits(logits, target), {logits})[0].to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    double want = (1.0 / (1.0 + std::exp(-double(x[i]))) - y[i]) / 6.0;
    INFO("logit " << x[i] << ", target " << y[i] << ": " << got[i] << ", want " << want);
    CHECK(got[i] == Approx(want).margin(1e-7));
  }
}

TEST_CASE("autograd: cos and tan have their closed-form gradients, next to pi/2 and in second order", "[autograd]") {
  check_float32_grad("cos", [](const Tensor& x) { return x.cos(); }, {0, -0.0f, 1.5707964f, 3.1415927f, 2999.5f, -12345},
                     [](double v) { return -std::sin(v); });
  check_float32_grad("tan", [](const Tensor& x) { return x.tan(); }, {0, 1.5707964f, -1.5707963f, 0.7f, 1000},
                     [](double v) { return 1 + std::tan(v) * std::tan(v); });
  // d2/dx2 cos = -cos, d2/dx2 tan = 2 tan (1 + tan^2).
  std::vector<double> xv = {0.3, -1.2, 2.0};
  Tensor x = Tensor::from_vector<double>(xv, {3});
  Tensor dc = gradients(x.cos().sum(), {x})[0], dt = gradients(x.tan().sum(), {x})[0];
  std::vector<double> dcc = gradients(dc.sum(), {x})[0].to_vector<double>(), dtt = gradients(dt.sum(), {x})[0].to_vector<double>();
  for (size_t i = 0; i < 3; ++i) {
    double t = std::tan(xv[i]);
    CHECK(dcc[i] == Approx(-std::cos(xv[i])).epsilon(1e-12));
    CHECK(dtt[i] == Approx(2 * t * (1 + t * t)).epsilon(1e-12));
  }
}

TEST_CASE("autograd: round, floor, ceil and trunc have zero gradient everywhere, as in PyTorch", "[autograd]") {
  for (auto f : {+[](const Tensor& x) { return x.round(); }, +[](const Tensor& x) { return x.floor(); },
                 +[](const Tensor& x) { return x.ceil(); }, +[](const Tensor& x) { return x.trunc(); }}) {
    check_float32_grad("rounding", f, {0.3f, -2.5f, 1e9f, -1e9f, 0}, [](double) { return 0.0; });
  }
}

TEST_CASE("autograd: bad use is an error that says what to do", "[autograd]") {
  Tensor w = Tensor::from_vector<float>({1, 2}, {2}).requires_grad_();
  Tensor v = w * 2.0f;
  CHECK_THROWS_WITH(v.backward(), Catch::Contains("backward") && Catch::Contains("(2,)") && Catch::Contains("gradient"));
  CHECK_THROWS_WITH(v.backward(Tensor::ones({3})), Catch::Contains("shape (3,)"));
  CHECK_THROWS_WITH(Tensor::from_vector<int32_t>({1}, {1}).requires_grad_(), Catch::Contains("floating-point"));
  CHECK_THROWS_WITH(Tensor::ones({2}).sum().backward(), Catch::Contains("does not depend"));
  CHECK_THROWS_WITH(w.set_grad(Tensor::ones({3})), Catch::Contains("set_grad"));
  CHECK_THROWS_WITH(w.assign(Tensor::ones({2}, dtypes::float64)), Catch::Contains("assign") && Catch::Contains("float64"));
  v.backward(Tensor::ones({2}));  // with an explicit gradient it works
  CHECK(w.grad()->to_vector<float>() == std::vector<float>{2, 2});
}

// Gradients across devices: the gradient of each part lives on that part's device (autograd finds a
// node's device from its first source, memoized; a COPY's is its destination), checked against the
// closed form and against device_of's search on every node of the gradient graph.
TEST_CASE("autograd: gradients through to() stay on each part's device", "[autograd]") {
  Tensor w = Tensor::from_vector<float>({1, 2, 3}, {3}, "CPU").requires_grad_();
  Tensor v = Tensor::from_vector<float>({4, 5, 6}, {3}, "CPU:1").requires_grad_();
  Tensor moved = (w * w).to("CPU:1");                  // w^2 on CPU:1
  Tensor loss = ((moved * v).sum() + (v * 2).sum()).to("CPU");
  std::vector<Tensor> g = gradients(loss, {w, v});
  CHECK(g[0].device() == "CPU");
  CHECK(g[1].device() == "CPU:1");
  CHECK(g[0].to_vector<float>() == std::vector<float>{8, 20, 36});  // 2 w v
  CHECK(g[1].to_vector<float>() == std::vector<float>{3, 6, 11});   // w^2 + 2
  Tensor g2 = gradients((moved * v).sum(), {w})[0];
  DeviceCache devices;
  for (const UOpPtr& u : toposort(g2.uop()))
    if (u->op != Op::DEVICE && u->op != Op::DEFINE_VAR && u->op != Op::SINK) {
      INFO(str(u));
      CHECK(devices(u) == device_of(u));
    }
}

// An optimizer's step realizes many values at once; which of them keep a graph for backward() is
// decided in one walk over all of them: those computed from a leaf, not those computed from detached
// values, whichever order they come in and however much graph they share.
TEST_CASE("autograd: realizing several values at once keeps the graph of each one computed from a leaf", "[autograd]") {
  Tensor w = Tensor::from_vector<float>({1, 2, 3}, {3}).requires_grad_();
  Tensor shared = w * 3;
  Tensor plain = shared.detach() + 1, from_w = shared + 1, again = from_w * 2, constant = w.detach() * w.detach();
  std::vector<Tensor> all{plain, from_w, constant, again};
  realize_all(all);
  CHECK_FALSE(plain.requires_grad());
  CHECK_FALSE(constant.requires_grad());
  CHECK(from_w.requires_grad());
  CHECK(again.requires_grad());
  CHECK(gradients((again * plain).sum(), {w})[0].to_vector<float>() == std::vector<float>{24, 42, 60});  // 6 (3w + 1)
  CHECK(gradients(from_w.sum(), {w})[0].to_vector<float>() == std::vector<float>{3, 3, 3});
  // A leaf realized in the same batch as a value computed from it (a pending in-place update, as an
  // optimizer's step realizes with the loss): the value still reaches the leaf.
  Tensor v = Tensor::from_vector<float>({1, 2}, {2}).requires_grad_();
  {
    NoGradGuard no_grad;
    v.assign(v.detach() * 2);
  }
  Tensor y = v * 3;
  std::vector<Tensor> both{v, y};
  realize_all(both);
  CHECK(y.requires_grad());
  CHECK(v.to_vector<float>() == std::vector<float>{2, 4});
  CHECK(gradients(y.sum(), {v})[0].to_vector<float>() == std::vector<float>{3, 3});
  // The leaf realized alone before gradients() is asked: the value's graph reads the leaf's node from
  // before, which gradients() counts as the leaf (as backward() does).
  Tensor u = Tensor::from_vector<float>({1, 2}, {2}).requires_grad_();
  {
    NoGradGuard no_grad;
    u.assign(u.detach() * 2);
  }
  Tensor z = u * u;
  u.realize();
  CHECK(gradients(z.sum(), {u})[0].to_vector<float>() == std::vector<float>{4, 8});  // 2u, u = (2, 4)
}

TEST_CASE("autograd: equal leaves are separate leaves, each with its own gradient", "[autograd]") {
  // Equal graphs are one node (interned) and were realized into one buffer, and autograd knows a leaf by
  // its node: two zeros({3}).requires_grad_() alive at once each got the sum of both gradients.
  auto check = [](Tensor x, Tensor y) {
    Tensor loss = (x * 2.0f).sum() + (y * 3.0f).sum();
    std::vector<Tensor> g = gradients(loss, {x, y});
    CHECK(g[0].to_vector<float>() == std::vector<float>{2, 2, 2});
    CHECK(g[1].to_vector<float>() == std::vector<float>{3, 3, 3});
    loss.backward();
    CHECK(x.grad()->to_vector<float>() == std::vector<float>{2, 2, 2});
    CHECK(y.grad()->to_vector<float>() == std::vector<float>{3, 3, 3});
  };
  SECTION("lazy") { check(Tensor::zeros({3}).requires_grad_(), Tensor::zeros({3}).requires_grad_()); }
  SECTION("realized together, then leaves") {
    Tensor x = Tensor::ones({3}), y = Tensor::ones({3});
    x.realize();
    y.realize();
    check(x.requires_grad_(), y.requires_grad_());
  }
  SECTION("one made a leaf, then the other realized") {
    // The first leaf's realized graph no longer answers for the second: it computes its own value.
    Tensor x = Tensor::ones({3}), y = Tensor::ones({3}), z = Tensor::zeros({3});
    x.realize();
    x.requires_grad_();
    Tensor w = Tensor::zeros({3}).requires_grad_();
    y.realize();
    z.realize();
    check(x, y.requires_grad_());
    check(w, z.requires_grad_());
  }
  SECTION("one tensor's value, copied by value into another") {
    Tensor x = Tensor::full({3}, 0.5f);
    x.realize();
    Tensor y = x.detach();
    check(x.requires_grad_(), y.requires_grad_());
  }
}
