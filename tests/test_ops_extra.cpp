// The ops added for PyTorch users (division with rounding, shifts by tensors, indexing, sorting,
// einsum, cumulative ops, pooling options, conv_transpose2d, unfold, interpolate), on small inputs
// with values worked out by hand from PyTorch's documented semantics. [ops]: the conformance suite
// runs these on every device; tests/torch/test_ops_extra.cpp holds them to libtorch on random inputs.
#include <cmath>
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

