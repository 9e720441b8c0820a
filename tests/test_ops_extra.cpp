// The ops added for PyTorch users (division with rounding, shifts by tensors, indexing, sorting,
// einsum, cumulative ops, pooling options, conv_transpose2d, unfold, interpolate), on small inputs
// with values worked out by hand from PyTorch's documented semantics. [ops]: the conformance suite
// runs these on every device; tests/torch/test_ops_extra.cpp and test_resample.cpp hold them to
// libtorch on random inputs.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "frontend/nn.h"
#include "frontend/tensor.h"
#include "helpers.h"

using namespace kiln;

namespace {

template <typename T>
Tensor vec(std::vector<T> v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return Tensor::from_vector<T>(v, shape);
}

template <typename T>
void check_values(Tensor got, const std::vector<T>& want) {
  std::vector<T> g = got.to_vector<T>();
  INFO("got " << Catch::Detail::stringify(g) << ", want " << Catch::Detail::stringify(want));
  REQUIRE(g.size() == want.size());
  for (size_t i = 0; i < g.size(); ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(want[i])) {
        CHECK(std::isnan(g[i]));
      } else {
        CHECK(g[i] == Approx(want[i]).epsilon(1e-6).margin(1e-6));
      }
    } else {
      CHECK(g[i] == want[i]);
    }
  }
}

}  // namespace

TEST_CASE("div rounding modes, floor_divide, remainder and fmod follow PyTorch's signs", "[ops]") {
  Tensor a = vec<int32_t>({7, -7, 7, -7, 0}), b = vec<int32_t>({2, 2, -2, -2, 3});
  check_values<int32_t>(a.div(b, "trunc"), {3, -3, -3, 3, 0});
  check_values<int32_t>(a.div(b, "floor"), {3, -4, -4, 3, 0});
  check_values<int32_t>(a.floor_divide(b), {3, -4, -4, 3, 0});
  check_values<int32_t>(a.remainder(b), {1, 1, -1, -1, 0});
  check_values<int32_t>(a.fmod(b), {1, -1, 1, -1, 0});
  Tensor x = vec<float>({5.5f, -5.5f, 5.5f, -5.5f, 1.0f, 3.0f, -3.0f, 1.0f}), y = vec<float>({2, 2, -2, -2, 0.1f, INFINITY, INFINITY, 0});
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  check_values<float>(x.div(y, "trunc"), {2, -2, -2, 2, 10, 0, -0.0f, inf});
  check_values<float>(x.div(y, "floor"), {2, -3, -3, 2, 9, 0, -1, inf});  // 1 // 0.1 is 9 (0.1 is a bit above 1/10)
  check_values<float>(x.remainder(y), {1.5f, 0.5f, -0.5f, -1.5f, 0.099999987f, 3, inf, nan});
  check_values<float>(x.fmod(y), {1.5f, -1.5f, 1.5f, -1.5f, 0.099999987f, 3, -3, nan});
  CHECK_THROWS_AS(a.div(vec<int32_t>({1, 0, 1, 1, 1}), "floor"), Error);
  // Read through a pad (cat pads each piece), the divisor is 0 outside its piece, and the kernel still
  // computes the division there: it must not trap (SIGFPE).
  Tensor joined = Tensor::cat({a.remainder(b), a.div(b, "floor"), a.fmod(b)});
  check_values<int32_t>(joined, {1, 1, -1, -1, 0, 3, -4, -4, 3, 0, 1, -1, 1, -1, 0});
  CHECK_THROWS_AS(a.div(b, "nearest"), Error);
  check_values<float>(vec<float>({1, 2}).add(vec<float>({3, 4}), -2), {-5, -6});
}

TEST_CASE("shifts by a tensor of amounts, out of range amounts included", "[ops]") {
  Tensor x = vec<int32_t>({1, -8, 3, -1, 5}), n = vec<int32_t>({4, 1, 31, 40, -1});
  check_values<int32_t>(x.shl(n), {16, -16, INT32_MIN, 0, 0});
  check_values<int32_t>(x.shr(n), {0, -4, 0, -1, 0});
  check_values<uint8_t>(vec<uint8_t>({255, 16}).shr(vec<uint8_t>({4, 9})), {15, 0});
}

TEST_CASE("gelu with the tanh approximation, and its gradient at large inputs", "[ops]") {
  Tensor x = vec<double>({-1, 0, 0.5, 100, -100});
  auto want = [](double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); };
  check_values<double>(x.gelu("tanh"), {want(-1), 0, want(0.5), 100, -0.0});
  Tensor big = vec<float>({1e20f, -1e20f});
  check_values<float>(gradients(big.gelu("tanh").sum(), {big})[0], {1, 0});
}

TEST_CASE("index_select, scatter, scatter_add, masked_fill, one_hot, triu and tril", "[ops]") {
  Tensor x = vec<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  check_values<float>(x.index_select(1, vec<int64_t>({2, 0, 2})), {3, 1, 3, 6, 4, 6});
  check_values<float>(x.index_select(0, vec<int32_t>({1})), {4, 5, 6});
  Tensor src = vec<float>({10, 20, 30, 40}, {2, 2});
  check_values<float>(x.scatter(1, vec<int64_t>({2, 0, 1, 2}, {2, 2}), src), {20, 2, 10, 4, 30, 40});
  check_values<float>(x.scatter_add(1, vec<int64_t>({2, 2, 0, 0}, {2, 2}), src), {1, 2, 33, 74, 5, 6});
  check_values<float>(x.masked_fill(vec<uint8_t>({1, 0, 1}).cast(dtypes::bool_), -1), {-1, 2, -1, -1, 5, -1});
  check_values<int64_t>(vec<int32_t>({2, 0}).one_hot(3), {0, 0, 1, 1, 0, 0});
  Tensor m = Tensor::ones({3, 3});
  check_values<float>(m.triu(1), {0, 1, 1, 0, 0, 1, 0, 0, 0});
  check_values<float>(m.tril(-1), {0, 0, 0, 1, 0, 0, 1, 1, 0});
  CHECK_THROWS_AS(x.index_select(1, vec<int64_t>({3})), Error);
  CHECK_THROWS_AS(x.scatter(1, vec<int64_t>({0, 0}, {1, 2}), src), Error);
  // Gradients: index_select adds up repeated picks; scatter's src gets the gradient of where it landed.
  Tensor g = gradients((x.index_select(1, vec<int64_t>({2, 2, 0})) * vec<float>({1, 2, 3, 4, 5, 6}, {2, 3})).sum(), {x})[0];
  check_values<float>(g, {3, 0, 3, 6, 0, 9});
  Tensor s = vec<float>({10, 20}, {1, 2});
  check_values<float>(gradients((x.scatter(1, vec<int64_t>({2, 0}, {1, 2}), s) * x).sum(), {s})[0], {3, 1});
}

TEST_CASE("sort, argsort and topk: stable ties, NaN last, values moved bit for bit", "[ops]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  Tensor x = vec<float>({3, nan, -inf, 1, 3, -0.0f, 0.0f, 1});
  auto [v, i] = x.sort();
  check_values<float>(v, {-inf, -0.0f, 0.0f, 1, 1, 3, 3, nan});
  check_values<int64_t>(i, {2, 5, 6, 3, 7, 0, 4, 1});
  CHECK(std::signbit(v.to_vector<float>()[1]));
  check_values<int64_t>(x.argsort(0, true), {1, 0, 4, 3, 7, 5, 6, 2});
  auto [tv, ti] = vec<int32_t>({4, 9, 1, 9, 7}).topk(3);
  check_values<int32_t>(tv, {9, 9, 7});
  check_values<int64_t>(ti, {1, 3, 4});
  Tensor y = vec<double>({2, 5, 1, 4, 3, 6}, {2, 3});
  check_values<double>(y.sort(0, true).first, {4, 5, 6, 2, 3, 1});
  check_values<double>(gradients((y.topk(2, 1).first * vec<double>({1, 2, 3, 4}, {2, 2})).sum(), {y})[0], {2, 1, 0, 4, 0, 3});
}

TEST_CASE("sort on an axis longer than kCountSortLength: the bitonic network, stable, NaN last", "[ops]") {
  const int64_t n = Tensor::kCountSortLength + 5;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>((i * 7919) % 13) - 6.0f;  // each value ~315 times
  v[7] = std::numeric_limits<float>::quiet_NaN();
  v[9] = -0.0f;
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  auto key = [&](int64_t i) { return std::isnan(v[static_cast<size_t>(i)]) ? INFINITY : v[static_cast<size_t>(i)]; };
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return key(a) < key(b) || (key(a) == key(b) && std::isnan(v[static_cast<size_t>(b)]) && !std::isnan(v[static_cast<size_t>(a)])); });
  Tensor x = vec<float>(v);
  x.requires_grad_();  // realized below before the gradient is taken: autograd keeps the graph of a leaf's uses
  auto [values, indices] = x.sort();
  check_values<int64_t>(indices, order);
  std::vector<float> got = values.to_vector<float>();
  CHECK(std::isnan(got.back()));
  // The gradient of a permutation: element i gets the weight of the position it went to.
  Tensor w = Tensor::arange(0, static_cast<double>(n), 1, dtypes::float32);
  std::vector<float> grad = gradients((values * w).sum(), {x})[0].to_vector<float>();
  std::vector<float> want(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) want[static_cast<size_t>(order[static_cast<size_t>(k)])] = static_cast<float>(k);
  CHECK(grad == want);
}

TEST_CASE("einsum over two operands", "[ops]") {
  Tensor a = vec<float>({1, 2, 3, 4, 5, 6}, {2, 3}), b = vec<float>({1, 0, -1, 2, 1, 1}, {3, 2});
  check_values<float>(einsum("ij,jk->ik", a, b), {2, 7, 5, 16});
  check_values<float>(einsum("ij,jk", a, b), {2, 7, 5, 16});
  check_values<float>(einsum("ij,ij->i", a, a), {14, 77});
  check_values<float>(einsum("ij,kj->ki", a, a).reshape({4}), {14, 32, 32, 77});
  CHECK_THROWS_AS(einsum("ij,jk->ik", a, a), Error);
}

TEST_CASE("cumprod and logcumsumexp", "[ops]") {
  Tensor x = vec<double>({2, 0, 3, -1});
  check_values<double>(x.cumprod(0), {2, 0, 0, 0});
  // d/dx_j sum_i cumprod_i: the products of the others in every prefix that holds x_j, zeros included.
  check_values<double>(gradients(x.cumprod(0).sum(), {x})[0], {1, 2, 0, 0});
  Tensor y = vec<double>({0, std::log(3.0), -INFINITY});
  check_values<double>(y.logcumsumexp(0), {0, std::log(4.0), std::log(4.0)});
}

TEST_CASE("pooling with dilation, ceil_mode and count_include_pad", "[ops]") {
  Tensor x = Tensor::arange(0, 16, 1, dtypes::float32).reshape({1, 1, 4, 4});
  // Dilation 2: each 2x2 window takes every other row and column.
  check_values<float>(x.max_pool2d({2, 2}, std::array<int64_t, 2>{1, 1}, {0, 0}, {2, 2}), {10, 11, 14, 15});
  // ceil_mode: a 3rd, overhanging window per axis (rows 4..5 do not exist).
  check_values<float>(x.max_pool2d({2, 2}, std::array<int64_t, 2>{3, 3}, {0, 0}, {1, 1}, true), {5, 7, 13, 15});
  // Padding 1, kernel 2, stride 2: corner windows hold one input value; excluding the padding it is the mean.
  check_values<float>(x.avg_pool2d({2, 2}, std::nullopt, {1, 1}, false, false), {0, 1.5f, 3, 6, 7.5f, 9, 12, 13.5f, 15});
  check_values<float>(x.avg_pool2d({2, 2}, std::nullopt, {1, 1}, false, true), {0, 0.75f, 0.75f, 3, 7.5f, 4.5f, 3, 6.75f, 3.75f});
  check_values<float>(x.avg_pool2d({3, 3}, std::array<int64_t, 2>{2, 2}, {0, 0}, true, true), {5, 6.5f, 11, 12.5f});
}

TEST_CASE("conv_transpose2d is the adjoint of conv2d", "[ops]") {
  // <conv2d(x, w), y> = <x, conv_transpose2d(y, w)> for every x, y: the defining property.
  Tensor::manual_seed(5);
  Tensor x = Tensor::randn({1, 2, 5, 4}, dtypes::float64), w = Tensor::randn({3, 2, 3, 2}, dtypes::float64);
  Tensor y = Tensor::randn({1, 3, 2, 3}, dtypes::float64);
  double lhs = (x.conv2d(w, std::nullopt, {2, 1}, {0, 0}) * y).sum().item<double>();
  double rhs = (x * y.conv_transpose2d(w, std::nullopt, {2, 1}, {0, 0}, {0, 0})).sum().item<double>();
  CHECK(lhs == Approx(rhs).epsilon(1e-12));
  CHECK(y.conv_transpose2d(w, std::nullopt, {2, 1}).shape() == Shape{1, 2, 5, 4});
}

TEST_CASE("unfold, interpolate and pad with negative amounts", "[ops]") {
  Tensor x = Tensor::arange(0, 6, 1, dtypes::float32).reshape({1, 1, 2, 3});
  check_values<float>(nn::unfold(x, {2, 2}), {0, 1, 1, 2, 3, 4, 4, 5});
  check_values<float>(nn::interpolate(x, {2, 6}, "nearest").reshape({12}), {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5});
  check_values<float>(nn::interpolate(x, {3, 3}, "bilinear", true).reshape({9}), {0, 1, 2, 1.5f, 2.5f, 3.5f, 3, 4, 5});
  check_values<float>(nn::interpolate(x, {1, 3}, "bilinear").reshape({3}), {1.5f, 2.5f, 3.5f});
  check_values<float>(x.reshape({2, 3}).pad({{0, 0}, {-1, 1}}, 9), {1, 2, 9, 4, 5, 9});
}

TEST_CASE("interpolate: nearest-exact, scale factors, linear, bicubic and area", "[ops]") {
  using O = nn::InterpolateOptions;
  Tensor l = Tensor::arange(0, 4, 1, dtypes::float32).reshape({1, 1, 4});
  check_values<float>(nn::interpolate(l, O().size({2})), {0, 2});                            // floor(i * 2)
  check_values<float>(nn::interpolate(l, O().size({2}).mode("nearest-exact")), {1, 3});      // floor((i + 0.5) * 2)
  // scale 2.1 on 5: 10 outputs read at floor(i / 2.1); recompute_scale_factor reads at floor(i / 2).
  Tensor five = Tensor::arange(0, 5, 1, dtypes::float32).reshape({1, 1, 5});
  check_values<float>(nn::interpolate(five, O().scale_factor({2.1})), {0, 0, 0, 1, 1, 2, 2, 3, 3, 4});
  check_values<float>(nn::interpolate(five, O().scale_factor({2.1}).recompute_scale_factor(true)), {0, 0, 1, 1, 2, 2, 3, 3, 4, 4});
  check_values<float>(nn::interpolate(five, O().size({3}).mode("area")), {0.5f, 2, 3.5f});  // windows [0,2), [1,4), [3,5)
  Tensor v = Tensor::from_vector<float>({0, 1, 4}, {1, 1, 3});
  check_values<float>(nn::interpolate(v, O().size({5}).mode("linear").align_corners(true)), {0, 0.5f, 1, 2.5f, 4});
  // bicubic with a = -0.75 at positions 0, 0.5, ..., 3 of (0, 1, 0, 0): weights 0.59375 (|d| = 0.5) and
  // -0.09375 (|d| = 1.5); the border taps clamp.
  Tensor bump = Tensor::from_vector<float>({0, 1, 0, 0}, {1, 1, 1, 4});
  check_values<float>(nn::interpolate(bump, O().size({1, 7}).mode("bicubic").align_corners(true)), {0, 0.59375f, 1, 0.59375f, 0, -0.09375f, 0});
  // Gradients: area spreads each output's gradient evenly over its window.
  Tensor g = Tensor::ones({1, 1, 5});
  check_values<float>(gradients((nn::interpolate(g, O().size({3}).mode("area")) * vec<float>({2, 3, 6}, {1, 1, 3})).sum(), {g})[0], {1, 2, 1, 4, 3});
  CHECK_THROWS_AS(nn::interpolate(l, O().size({3}).mode("bicubic")), Error);
}

TEST_CASE("Tensor::unfold, avg_pool2d's divisor_override and logsumexp over an empty axis", "[ops]") {
  Tensor x = Tensor::arange(0, 7, 1, dtypes::float32);
  check_values<float>(x.unfold(0, 3, 2), {0, 1, 2, 2, 3, 4, 4, 5, 6});
  CHECK(x.unfold(0, 3, 2).shape() == Shape{3, 3});
  check_values<float>(x.reshape({1, 7}).unfold(1, 2, 3), {0, 1, 3, 4});
  check_values<float>(gradients(x.unfold(0, 3, 2).sum(), {x})[0], {1, 1, 2, 1, 2, 1, 1});
  CHECK(x.unfold(0, 0, 2).shape() == Shape{4, 0});
  CHECK(Tensor::full({}, 3.0).unfold(0, 1, 1).shape() == Shape{1});
  CHECK_THROWS_AS(x.unfold(0, 8, 1), Error);
  Tensor p = Tensor::arange(0, 16, 1, dtypes::float32).reshape({1, 1, 4, 4});
  check_values<float>(p.avg_pool2d({2, 2}, std::nullopt, {0, 0}, false, true, 3), {10.0f / 3, 6, 14, 50.0f / 3});
  CHECK_THROWS_AS(p.avg_pool2d({2, 2}, std::nullopt, {0, 0}, false, true, 0), Error);
  const float inf = std::numeric_limits<float>::infinity();
  Tensor empty = Tensor::zeros({2, 0});
  check_values<float>(empty.logsumexp({1}), {-inf, -inf});
  CHECK(empty.logsumexp({1}, true).shape() == Shape{2, 1});
  CHECK(empty.logsumexp({0}).shape() == Shape{0});
  CHECK(gradients(empty.logsumexp({1}).sum(), {empty})[0].shape() == Shape{2, 0});
}

TEST_CASE("the new ops on size-0 axes", "[ops]") {
  Tensor empty = Tensor::zeros({2, 0});
  auto [v, i] = empty.sort(1);
  CHECK(v.shape() == Shape{2, 0});
  CHECK(i.shape() == Shape{2, 0});
  CHECK(empty.topk(0, 1).first.shape() == Shape{2, 0});
  CHECK(empty.cumprod(1).shape() == Shape{2, 0});
  CHECK(empty.logcumsumexp(1).shape() == Shape{2, 0});
  check_values<float>(einsum("ij,jk->ik", empty, Tensor::zeros({0, 3})), {0, 0, 0, 0, 0, 0});
  CHECK(empty.triu().shape() == Shape{2, 0});
  check_values<float>(Tensor::ones({2, 2}).scatter_add(1, Tensor::zeros({2, 0}, dtypes::int64), empty), {1, 1, 1, 1});
  CHECK(empty.remainder(Tensor::ones({2, 0})).shape() == Shape{2, 0});
  CHECK(Tensor::zeros({2, 0}, dtypes::int32).div(Tensor::zeros({2, 0}, dtypes::int32), "floor").shape() == Shape{2, 0});
}

// The reference: the same comparison of the element and the scalar as real numbers (long double holds
// every int64 and every double exactly), NaN unordered.
TEST_CASE("comparison operators against scalars are exact for integer tensors, fractions and out-of-range values included", "[ops]") {
  using R = long double;
  const std::vector<std::pair<const char*, std::function<bool(R, R)>>> reference = {
      {"<", [](R a, R b) { return a < b; }},   {"<=", [](R a, R b) { return a <= b; }}, {">", [](R a, R b) { return a > b; }},
      {">=", [](R a, R b) { return a >= b; }}, {"==", [](R a, R b) { return a == b; }}, {"!=", [](R a, R b) { return a != b; }}};
  auto kiln_op = [](const std::string& name, const Tensor& t, double s) {
    if (name == "<") return t < s;
    if (name == "<=") return t <= s;
    if (name == ">") return t > s;
    if (name == ">=") return t >= s;
    if (name == "==") return t == s;
    return t != s;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> scalars = {2.5, -0.5, 2, 0, 1, 1e10, -1e10, nan, inf, -inf, 2147483647.5, -2147483648.5, 255.5, 4611686018427387904.0};
  auto check_all = [&](const Tensor& t, const std::vector<R>& values) {
    for (double s : scalars)
      for (auto& [name, ref] : reference) {
        INFO(t.dtype().name() << " " << name << " " << s);
        Tensor got = kiln_op(name, t, s);
        REQUIRE(got.dtype() == dtypes::bool_);
        std::vector<int32_t> want;
        for (R v : values) want.push_back(ref(v, static_cast<R>(s)) ? 1 : 0);
        check_values<int32_t>(got.cast(dtypes::int32), want);
      }
  };
  std::vector<int32_t> i32 = {-5, -1, 0, 1, 2, 3, 255, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
  check_all(vec<int32_t>(i32), std::vector<R>(i32.begin(), i32.end()));
  std::vector<int64_t> i64 = {-3, 2, 4611686018427387904LL, 4611686018427387905LL, std::numeric_limits<int64_t>::max()};
  check_all(vec<int64_t>(i64), std::vector<R>(i64.begin(), i64.end()));
  std::vector<uint8_t> u8 = {0, 1, 2, 254, 255};
  check_all(vec<uint8_t>(u8), std::vector<R>(u8.begin(), u8.end()));
  check_all(vec<uint8_t>({0, 1, 1}).cast(dtypes::bool_), {0, 1, 1});
  std::vector<float> f32 = {-1.5f, 0.0f, 2.5f, 3.0f, static_cast<float>(nan), static_cast<float>(inf)};
  check_all(vec<float>(f32), std::vector<R>(f32.begin(), f32.end()));
}

TEST_CASE("comparison and bitwise operators between tensors broadcast and follow torch's results", "[ops]") {
  Tensor a = vec<float>({1, 2, 3, 4, 5, 6}, {2, 3}), b = vec<float>({2, 2, 7}, {3});
  check_values<int32_t>((a < b).cast(dtypes::int32), {1, 0, 1, 0, 0, 1});
  check_values<int32_t>((a <= b).cast(dtypes::int32), {1, 1, 1, 0, 0, 1});
  check_values<int32_t>((a > b).cast(dtypes::int32), {0, 0, 0, 1, 1, 0});
  check_values<int32_t>((a >= b).cast(dtypes::int32), {0, 1, 0, 1, 1, 0});
  check_values<int32_t>((a == b).cast(dtypes::int32), {0, 1, 0, 0, 0, 0});
  check_values<int32_t>((a != b).cast(dtypes::int32), {1, 0, 1, 1, 1, 1});
  check_values<int32_t>((3.0 < a).cast(dtypes::int32), {0, 0, 0, 1, 1, 1});
  check_values<int32_t>((3.0 >= a).cast(dtypes::int32), {1, 1, 1, 0, 0, 0});
  // A mask built the way attention code builds it: keep where the lower triangle is nonzero.
  Tensor mask = Tensor::ones({3, 3}).tril();
  check_values<float>(Tensor::zeros({3, 3}).masked_fill(mask == 0, -1), {0, -1, -1, 0, 0, -1, 0, 0, 0});
  Tensor p = (a > 2.0), q = (a < 5.0);
  check_values<int32_t>((p & q).cast(dtypes::int32), {0, 0, 1, 1, 0, 0});
  check_values<int32_t>((p | q).cast(dtypes::int32), {1, 1, 1, 1, 1, 1});
  check_values<int32_t>((p ^ q).cast(dtypes::int32), {1, 1, 0, 0, 1, 1});
  check_values<int32_t>((~p).cast(dtypes::int32), {1, 1, 0, 0, 0, 0});
  check_values<int32_t>(vec<int32_t>({12, -1}) & vec<int32_t>({10, 7}), {8, 7});
  CHECK_THROWS_AS(a & b, Error);  // bitwise needs integer or bool tensors, as torch's
}
