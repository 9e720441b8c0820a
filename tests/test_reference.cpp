// Specification of the naive reference evaluator (tests/reference/): every expected value here is
// worked out by hand or from a closed form, never by running the reference itself.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>

#include "reference/reference.h"

using namespace kiln;
using namespace kiln::ref;
namespace dt = kiln::dtypes;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// got equals want (shape and, within tolerance, values) and has want's dtype; prints both on failure.
void check(const Array& got, const Array& want, double rtol = 1e-12, double atol = 1e-12) {
  std::string why;
  bool close = allclose(got, want, rtol, atol, &why);
  INFO("got      " << to_string(got) << "\nexpected " << to_string(want) << "\n" << why);
  CHECK(close);
  CHECK(got.dtype == want.dtype);
}

// Runs fn, which must throw std::invalid_argument; returns its message.
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  FAIL("expected std::invalid_argument, nothing was thrown");
  return "";
}

Array f32(Shape shape, std::vector<double> v) { return array(std::move(shape), std::move(v), dt::float32); }
Array i64(Shape shape, std::vector<double> v) { return array(std::move(shape), std::move(v), dt::int64); }
Array i32(Shape shape, std::vector<double> v) { return array(std::move(shape), std::move(v), dt::int32); }
Array booleans(Shape shape, std::vector<double> v) { return array(std::move(shape), std::move(v), dt::bool_); }

}  // namespace

// ---- the Array and round_to -----------------------------------------------------------------------

TEST_CASE("round_to rounds floats to the dtype's nearest value", "[reference]") {
  CHECK(round_to(dt::float32, 0.1) == static_cast<double>(0.1f));
  CHECK(round_to(dt::float64, 0.1) == 0.1);
  CHECK(round_to(dt::float16, 1.0 / 3) == 0.333251953125);  // 1365 * 2^-12, the nearest float16
  CHECK(round_to(dt::bfloat16, 1.0 / 3) == 0.333984375);    // 171 * 2^-9
  CHECK(round_to(dt::float16, 65520.0) == kInf);            // half an ulp past float16's max
  CHECK(std::isnan(round_to(dt::float16, kNaN)));
}

TEST_CASE("round_to rounds a double to float16 once, not through float", "[reference]") {
  // 1 + 2^-11 is halfway between float16 neighbours 1 and 1 + 2^-10; a tiny bit more must round up,
  // although rounding to float first would make it an exact tie and round to even (1.0).
  CHECK(round_to(dt::float16, 1 + std::ldexp(1, -11) + std::ldexp(1, -40)) == 1 + std::ldexp(1, -10));
  CHECK(round_to(dt::float16, 1 + std::ldexp(1, -11)) == 1.0);  // the exact tie goes to even
  CHECK(round_to(dt::float16, 1 + 3 * std::ldexp(1, -11)) == 1 + std::ldexp(1, -9));
  CHECK(round_to(dt::bfloat16, 1 + std::ldexp(1, -8) + std::ldexp(1, -40)) == 1 + std::ldexp(1, -7));
}

TEST_CASE("round_to truncates toward zero and wraps integers at their width", "[reference]") {
  CHECK(round_to(dt::int8, 200) == -56);
  CHECK(round_to(dt::int8, -129) == 127);
  CHECK(round_to(dt::uint8, -1) == 255);
  CHECK(round_to(dt::uint8, 256) == 0);
  CHECK(round_to(dt::int32, 2147483648.0) == -2147483648.0);
  CHECK(round_to(dt::int32, -2.7) == -2);
  CHECK(round_to(dt::int64, 2.7) == 2);
  CHECK(round_to(dt::int16, kNaN) == 0);
  CHECK(round_to(dt::int16, kInf) == 32767);
  CHECK(round_to(dt::bool_, 0.5) == 1);
  CHECK(round_to(dt::bool_, kNaN) == 1);
  CHECK(round_to(dt::bool_, -0.0) == 0);
}

TEST_CASE("array rounds its values and at() reads them with bounds checks", "[reference]") {
  Array a = array({2, 3}, {0, 1, 2, 3, 4, 300}, dt::uint8);
  CHECK(a.numel() == 6);
  CHECK(a.at({1, 2}) == 44);
  CHECK(a.at({1, 0}) == 3);
  CHECK_THROWS_AS(a.at({2, 0}), std::out_of_range);
  CHECK_THROWS_AS(a.at({0}), std::out_of_range);
  CHECK(scalar(2.5).at({}) == 2.5);
  CHECK(scalar(2.5).rank() == 0);
  check(full({2}, 7, dt::int8), array({2}, {7, 7}, dt::int8));
  check(arange(4, dt::int32), i32({4}, {0, 1, 2, 3}));
  check(cast(f32({3}, {-1.5, 2.5, 300}), dt::int8), array({3}, {-1, 2, 44}, dt::int8));
  error_of([] { array({2, 2}, {1, 2, 3}); });
}

// ---- elementwise --------------------------------------------------------------------------------

TEST_CASE("binary ops broadcast (3,1) with (1,4) to (3,4)", "[reference]") {
  Array col = f32({3, 1}, {0, 10, 20}), row = f32({1, 4}, {1, 2, 3, 4});
  check(add(col, row), f32({3, 4}, {1, 2, 3, 4, 11, 12, 13, 14, 21, 22, 23, 24}));
  check(sub(row, col), f32({3, 4}, {1, 2, 3, 4, -9, -8, -7, -6, -19, -18, -17, -16}));
  check(mul(f32({2, 1, 3}, {1, 2, 3, 4, 5, 6}), f32({2, 1}, {1, -1})),
        f32({2, 2, 3}, {1, 2, 3, -1, -2, -3, 4, 5, 6, -4, -5, -6}));
  check(add(scalar(1), f32({2}, {1, 2})), f32({2}, {2, 3}));
  check(add(f32({0, 3}, {}), f32({1, 3}, {1, 2, 3})), f32({0, 3}, {}));
  CHECK(broadcast_shapes({5, 1, 3}, {4, 1}) == Shape{5, 4, 3});
}

TEST_CASE("shapes that do not broadcast throw, naming the op and both shapes", "[reference]") {
  std::string why = error_of([] { add(f32({3, 2}, {1, 2, 3, 4, 5, 6}), f32({3}, {1, 2, 3})); });
  CHECK_THAT(why, Catch::Contains("add") && Catch::Contains("[3, 2]") && Catch::Contains("[3]"));
  error_of([] { where(booleans({2}, {1, 0}), f32({3}, {1, 2, 3}), scalar(0)); });
}

TEST_CASE("arithmetic promotes dtypes like torch and wraps integers", "[reference]") {
  check(add(array({2}, {100, -100}, dt::int8), array({2}, {100, -100}, dt::int8)), array({2}, {-56, 56}, dt::int8));
  check(mul(array({1}, {16}, dt::int8), array({1}, {16}, dt::int8)), array({1}, {0}, dt::int8));
  check(neg(array({1}, {-128}, dt::int8)), array({1}, {-128}, dt::int8));
  check(add(array({1}, {200}, dt::uint8), array({1}, {-1}, dt::int8)), array({1}, {199}, dt::int16));
  check(add(i32({1}, {1}), f32({1}, {0.5})), f32({1}, {1.5}));
  check(div(i32({2}, {7, 1}), i32({2}, {2, 0})), f32({2}, {3.5, kInf}));
  check(pow(i32({3}, {2, 3, 0}), i32({3}, {10, 3, 0})), i32({3}, {1024, 27, 1}));
  check(pow(f32({2}, {4, 2}), f32({2}, {0.5, -1})), f32({2}, {2, 0.5}));
  error_of([] { pow(i32({1}, {2}), i32({1}, {-1})); });
  // float32 results are float32 values: 0.1 + 0.2 rounds once, to the float nearest 0.3.
  check(add(f32({1}, {0.1}), f32({1}, {0.2})), f32({1}, {static_cast<double>(0.1f) + static_cast<double>(0.2f)}));
}

TEST_CASE("round is half to even, floor, ceil and trunc as in C", "[reference]") {
  Array x = f32({8}, {0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, -2.6});
  check(round(x), f32({8}, {0, 2, 2, -0.0, -2, -2, 2, -3}));
  check(floor(x), f32({8}, {0, 1, 2, -1, -2, -3, 2, -3}));
  check(ceil(x), f32({8}, {1, 2, 3, -0.0, -1, -2, 3, -2}));
  check(trunc(x), f32({8}, {0, 1, 2, -0.0, -1, -2, 2, -2}));
  check(round(i32({2}, {3, -4})), i32({2}, {3, -4}));
}

TEST_CASE("floor_divide and remainder follow Python, trunc_divide and fmod follow C", "[reference]") {
  Array a = i32({4}, {-7, 7, -7, 7}), b = i32({4}, {2, 2, -2, -2});
  check(floor_divide(a, b), i32({4}, {-4, 3, 3, -4}));
  check(remainder(a, b), i32({4}, {1, 1, -1, -1}));
  check(trunc_divide(a, b), i32({4}, {-3, 3, 3, -3}));
  check(fmod(a, b), i32({4}, {-1, 1, -1, 1}));
  Array x = f32({2}, {-7.5, 7.5}), y = f32({2}, {2, -2});
  check(floor_divide(x, y), f32({2}, {-4, -4}));
  check(remainder(x, y), f32({2}, {0.5, -0.5}));
  check(trunc_divide(x, y), f32({2}, {-3, -3}));
  check(fmod(x, y), f32({2}, {-1.5, 1.5}));
  CHECK_THAT(error_of([] { floor_divide(i32({1}, {1}), i32({1}, {0})); }), Catch::Contains("division by zero"));
  error_of([] { fmod(i32({1}, {1}), i32({1}, {0})); });
}

TEST_CASE("maximum, minimum and clamp propagate NaN", "[reference]") {
  Array a = f32({3}, {1, kNaN, 5}), b = f32({3}, {kNaN, 2, 3});
  check(maximum(a, b), f32({3}, {kNaN, kNaN, 5}));
  check(minimum(a, b), f32({3}, {kNaN, kNaN, 3}));
  check(clamp(f32({4}, {-5, 0.5, 9, kNaN}), 0, 1), f32({4}, {0, 0.5, 1, kNaN}));
  check(clamp(f32({2}, {-5, 9}), std::nullopt, 1), f32({2}, {-5, 1}));
  check(clamp(f32({1}, {0}), 3, 1), f32({1}, {1}));  // lo > hi: hi wins, as torch
  check(relu(f32({3}, {-1, 2, kNaN})), f32({3}, {0, 2, kNaN}));
}

TEST_CASE("unary math functions at points with known values", "[reference]") {
  using std::numbers::e;
  check(exp(f32({2}, {0, 1})), f32({2}, {1, e}));
  check(log(f32({3}, {1, 0, -1})), f32({3}, {0, -kInf, kNaN}));
  check(exp2(f32({2}, {3, -1})), f32({2}, {8, 0.5}));
  check(log2(f32({2}, {8, 0.5})), f32({2}, {3, -1}));
  check(sqrt(f32({2}, {9, -1})), f32({2}, {3, kNaN}));
  check(rsqrt(f32({2}, {4, 0})), f32({2}, {0.5, kInf}));
  check(reciprocal(i32({2}, {4, 0})), f32({2}, {0.25, kInf}));
  check(sin(f32({1}, {std::numbers::pi / 2})), f32({1}, {1}));
  check(cos(f32({1}, {0})), f32({1}, {1}));
  check(tan(f32({1}, {std::numbers::pi / 4})), f32({1}, {1}), 1e-6);
  check(tanh(f32({3}, {0, kInf, -kInf})), f32({3}, {0, 1, -1}));
  check(erf(f32({3}, {0, kInf, -kInf})), f32({3}, {0, 1, -1}));
  check(neg(f32({1}, {2})), f32({1}, {-2}));
  check(abs(i32({2}, {-3, 3})), i32({2}, {3, 3}));
  check(sign(f32({4}, {-2, 0, 3, kNaN})), f32({4}, {-1, 0, 1, 0}));  // torch.sign(nan) is 0
  check(exp(i32({1}, {0})), f32({1}, {1}));                           // ints compute in float32
}

TEST_CASE("activations at points with known values", "[reference]") {
  const double phi1 = 0.5 * (1 + std::erf(1 / std::numbers::sqrt2));  // standard normal CDF at 1
  check(sigmoid(f32({3}, {0, kInf, -kInf})), f32({3}, {0.5, 1, 0}));
  check(silu(f32({2}, {0, 1})), f32({2}, {0, 1 / (1 + std::exp(-1.0))}));
  check(gelu(f32({3}, {0, 1, -1})), f32({3}, {0, phi1, -(1 - phi1)}));
  check(gelu_tanh(f32({2}, {0, 1})), f32({2}, {0, 0.5 * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * 1.044715))}));
  check(gelu_tanh(f32({1}, {1})), f32({1}, {phi1}), 1e-3);  // the tanh form approximates the erf form
  check(leaky_relu(f32({2}, {-2, 3}), 0.1), f32({2}, {-0.2, 3}));
  check(leaky_relu(f32({1}, {-100})), f32({1}, {-1}));  // default slope 0.01
  check(softplus(f32({3}, {0, 30, -30})), f32({3}, {std::log(2.0), 30, std::log1p(std::exp(-30.0))}));
  check(softplus(f32({1}, {15}), 2, 20), f32({1}, {15}));  // beta * x = 30 > threshold
}

TEST_CASE("comparisons and logical ops give bool, NaN compares unequal", "[reference]") {
  Array a = f32({3}, {1, 2, kNaN}), b = f32({3}, {2, 2, kNaN});
  check(eq(a, b), booleans({3}, {0, 1, 0}));
  check(ne(a, b), booleans({3}, {1, 0, 1}));
  check(lt(a, b), booleans({3}, {1, 0, 0}));
  check(le(a, b), booleans({3}, {1, 1, 0}));
  check(gt(a, b), booleans({3}, {0, 0, 0}));
  check(ge(a, b), booleans({3}, {0, 1, 0}));
  check(logical_and(f32({3}, {0, 2, kNaN}), f32({3}, {1, 1, 1})), booleans({3}, {0, 1, 1}));
  check(logical_or(f32({2}, {0, 0}), i32({2}, {0, 5})), booleans({2}, {0, 1}));
  check(logical_not(i32({2}, {0, 5})), booleans({2}, {1, 0}));
  check(where(booleans({3}, {1, 0, 1}), i32({3}, {1, 2, 3}), f32({1}, {-1})), f32({3}, {1, -1, 3}));
  check(where(booleans({2, 1}, {1, 0}), i32({2}, {1, 2}), i32({1}, {9}), dt::int8),
        array({2, 2}, {1, 2, 9, 9}, dt::int8));
}

TEST_CASE("bitwise ops and shifts work on two's complement integers", "[reference]") {
  Array a = array({3}, {12, -1, 5}, dt::int8), b = array({3}, {10, 7, -8}, dt::int8);
  check(bitwise_and(a, b), array({3}, {8, 7, 0}, dt::int8));
  check(bitwise_or(a, b), array({3}, {14, -1, -3}, dt::int8));
  check(bitwise_xor(a, b), array({3}, {6, -8, -3}, dt::int8));
  check(bitwise_not(array({2}, {5, 0}, dt::uint8)), array({2}, {250, 255}, dt::uint8));
  check(bitwise_not(array({2}, {5, -1}, dt::int32)), i32({2}, {-6, 0}));
  check(bitwise_not(booleans({2}, {1, 0})), booleans({2}, {0, 1}));
  check(shl(array({3}, {1, 3, -1}, dt::int8), array({3}, {7, 2, 3}, dt::int8)), array({3}, {-128, 12, -8}, dt::int8));
  check(shl(array({1}, {1}, dt::int8), array({1}, {8}, dt::int8)), array({1}, {0}, dt::int8));
  check(shr(array({3}, {-8, 8, -1}, dt::int8), array({3}, {1, 2, 100}, dt::int8)), array({3}, {-4, 2, -1}, dt::int8));
  check(shr(array({1}, {200}, dt::uint8), array({1}, {3}, dt::uint8)), array({1}, {25}, dt::uint8));
  error_of([] { bitwise_and(f32({1}, {1}), f32({1}, {1})); });
  error_of([] { shl(booleans({1}, {1}), booleans({1}, {1})); });
}

TEST_CASE("generic unary and binary apply any function and round to the given dtype", "[reference]") {
  check(unary(f32({2}, {1, 2}), [](double x) { return x * 100; }, dt::int8), array({2}, {100, -56}, dt::int8));
  check(binary(f32({2}, {1, 2}), f32({1}, {3}), [](double x, double y) { return x * 10 + y; }, dt::float64),
        array({2}, {13, 23}, dt::float64));
}

// ---- reductions ---------------------------------------------------------------------------------

TEST_CASE("sum and prod over axes, negative axes and keepdim", "[reference]") {
  Array a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  check(sum(a), f32({}, {21}));
  check(sum(a, {0}), f32({3}, {5, 7, 9}));
  check(sum(a, {-1}), f32({2}, {6, 15}));
  check(sum(a, {1}, true), f32({2, 1}, {6, 15}));
  check(sum(a, {0, 1}, true), f32({1, 1}, {21}));
  check(prod(a, {1}), f32({2}, {6, 120}));
  check(sum(f32({0, 2}, {}), {0}), f32({2}, {0, 0}));  // the empty sum is 0
  check(prod(f32({0}, {})), f32({}, {1}));
  check(sum(array({3}, {100, 100, 100}, dt::int8)), i64({}, {300}));  // ints sum in int64
  check(sum(booleans({3}, {1, 1, 0})), i64({}, {2}));
  check(sum(f32({3}, {1, kNaN, 2})), f32({}, {kNaN}));
  error_of([&] { sum(a, {2}); });
  error_of([&] { sum(a, {0, -2}); });  // the same axis twice
}

TEST_CASE("max and min propagate NaN and reject empty axes", "[reference]") {
  Array a = f32({2, 3}, {3, 1, 2, 4, kNaN, 0});
  check(max(a, {1}), f32({2}, {3, kNaN}));
  check(min(a, {1}), f32({2}, {1, kNaN}));
  check(max(a, {0}), f32({3}, {4, kNaN, 2}));
  check(min(i32({3}, {5, -2, 7})), i32({}, {-2}));
  error_of([] { max(f32({0}, {})); });
}

TEST_CASE("mean, var with a correction, and stddev", "[reference]") {
  Array a = f32({4}, {1, 2, 3, 4});  // mean 2.5, squared deviations sum to 5
  check(mean(a), f32({}, {2.5}));
  check(var(a), f32({}, {5.0 / 3}));
  check(var(a, {}, 0), f32({}, {1.25}));
  check(stddev(a), f32({}, {std::sqrt(5.0 / 3)}));
  check(var(f32({2, 2}, {1, 3, 2, 2}), {1}, 1, true), f32({2, 1}, {2, 0}));
  check(var(f32({1}, {7})), f32({}, {kNaN}));  // N - correction = 0
  check(mean(i32({2}, {1, 2})), f32({}, {1.5}));
}

TEST_CASE("argmax and argmin give the first extreme, NaN counts as the extreme", "[reference]") {
  check(argmax(f32({5}, {1, 3, 3, 0, 3})), i64({}, {1}));
  check(argmin(f32({4}, {2, 0, 5, 0})), i64({}, {1}));
  check(argmax(f32({2, 3}, {1, 9, 9, 7, 2, 7}), 1), i64({2}, {1, 0}));
  check(argmax(f32({2, 3}, {1, 9, 9, 7, 2, 7}), -2, true), i64({1, 3}, {1, 0, 0}));
  check(argmax(f32({2, 2}, {1, 2, 5, 0})), i64({}, {2}));  // flattened
  check(argmax(f32({3}, {1, kNaN, 5})), i64({}, {1}));
  check(argmin(f32({3}, {1, kNaN, -5})), i64({}, {1}));
}

TEST_CASE("any and all", "[reference]") {
  Array a = f32({2, 2}, {0, 0, 0, kNaN});
  check(any(a, {1}), booleans({2}, {0, 1}));
  check(all(a), booleans({}, {0}));
  check(all(f32({2}, {1, -1})), booleans({}, {1}));
  check(any(f32({0}, {})), booleans({}, {0}));
  check(all(f32({0}, {})), booleans({}, {1}));
}

TEST_CASE("softmax sums to 1 and matches its closed form", "[reference]") {
  Array a = f32({2, 3}, {1, 2, 3, 1000, 1000, 1000});
  Array s = softmax(a, -1);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  check(s, f32({2, 3}, {std::exp(1.0) / z, std::exp(2.0) / z, std::exp(3.0) / z, 1.0 / 3, 1.0 / 3, 1.0 / 3}));
  check(sum(s, {1}), f32({2}, {1, 1}), 1e-6);
  check(log_softmax(a, 1), f32({2, 3}, {1 - std::log(z), 2 - std::log(z), 3 - std::log(z), -std::log(3.0),
                                        -std::log(3.0), -std::log(3.0)}));
  check(softmax(f32({2}, {-kInf, -kInf}), 0), f32({2}, {kNaN, kNaN}));  // as torch
}

TEST_CASE("logsumexp is stable for large values and exact for infinities", "[reference]") {
  check(logsumexp(f32({2, 2}, {1000, 1000, 0, 0}), {1}), f32({2}, {1000 + std::log(2.0), std::log(2.0)}));
  check(logsumexp(f32({2, 2}, {1000, 1000, 0, 0}), {1}, true), f32({2, 1}, {1000 + std::log(2.0), std::log(2.0)}));
  check(logsumexp(f32({2}, {-kInf, -kInf})), f32({}, {-kInf}));
  check(logsumexp(f32({2}, {kInf, 1})), f32({}, {kInf}));
}

TEST_CASE("cumsum runs along one axis", "[reference]") {
  Array a = i32({2, 3}, {1, 2, 3, 4, 5, 6});
  check(cumsum(a, 1), i64({2, 3}, {1, 3, 6, 4, 9, 15}));
  check(cumsum(a, -2), i64({2, 3}, {1, 2, 3, 5, 7, 9}));
  check(cumsum(f32({3}, {1, kNaN, 1}), 0), f32({3}, {1, kNaN, kNaN}));
}

// ---- movement -----------------------------------------------------------------------------------

TEST_CASE("reshape infers one -1 and rejects sizes that differ", "[reference]") {
  Array a = arange(6);
  check(reshape(a, {-1, 2}), f32({3, 2}, {0, 1, 2, 3, 4, 5}));
  check(reshape(a, {2, 3}), f32({2, 3}, {0, 1, 2, 3, 4, 5}));
  CHECK_THAT(error_of([&] { reshape(a, {4, 2}); }), Catch::Contains("reshape") && Catch::Contains("[4, 2]"));
  error_of([&] { reshape(a, {-1, -1}); });
  error_of([&] { reshape(a, {-1, 4}); });
}

TEST_CASE("permute, transpose and expand", "[reference]") {
  Array a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  check(permute(a, {1, 0}), f32({3, 2}, {1, 4, 2, 5, 3, 6}));
  check(transpose(a, 0, -1), f32({3, 2}, {1, 4, 2, 5, 3, 6}));
  Array b = reshape(arange(6), {1, 2, 3});
  check(permute(b, {2, 0, 1}), f32({3, 1, 2}, {0, 3, 1, 4, 2, 5}));
  error_of([&] { permute(a, {0, 0}); });
  check(expand(f32({2, 1}, {1, 2}), {2, 2, 3}), f32({2, 2, 3}, {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2}));
  check(expand(f32({2, 1}, {1, 2}), {-1, 2}), f32({2, 2}, {1, 1, 2, 2}));
  error_of([] { expand(f32({2}, {1, 2}), {3}); });
}

TEST_CASE("pad adds values before and after, negative pads crop", "[reference]") {
  check(pad(f32({4}, {1, 2, 3, 4}), {{-1, 2}}), f32({5}, {2, 3, 4, 0, 0}));
  check(pad(f32({2, 2}, {1, 2, 3, 4}), {{1, 0}, {0, -1}}, 9), f32({3, 1}, {9, 1, 3}));
  check(pad(i32({1}, {5}), {{1, 1}}, -1), i32({3}, {-1, 5, -1}));
  error_of([] { pad(f32({2}, {1, 2}), {{-2, -1}}); });
}

TEST_CASE("shrink and flip", "[reference]") {
  Array a = reshape(arange(6), {2, 3});
  check(shrink(a, {{1, 2}, {0, 2}}), f32({1, 2}, {3, 4}));
  check(shrink(a, {{0, 0}, {0, 3}}), f32({0, 3}, {}));
  error_of([&] { shrink(a, {{0, 3}, {0, 3}}); });
  check(flip(a, {1}), f32({2, 3}, {2, 1, 0, 5, 4, 3}));
  check(flip(a, {0, -1}), f32({2, 3}, {5, 4, 3, 2, 1, 0}));
}

TEST_CASE("squeeze, unsqueeze and flatten change only the shape", "[reference]") {
  Array a = reshape(arange(6), {1, 2, 1, 3});
  CHECK(squeeze(a).shape == Shape{2, 3});
  CHECK(squeeze(a, {-2}).shape == Shape{1, 2, 3});
  CHECK(squeeze(a, {1}).shape == Shape{1, 2, 1, 3});  // size 2: kept, as torch
  CHECK(unsqueeze(a, -1).shape == Shape{1, 2, 1, 3, 1});
  CHECK(unsqueeze(a, 0).shape == Shape{1, 1, 2, 1, 3});
  CHECK(flatten(a).shape == Shape{6});
  CHECK(flatten(a, 1, 2).shape == Shape{1, 2, 3});
  CHECK(flatten(scalar(1)).shape == Shape{1});
  CHECK(flatten(a).data == arange(6).data);
  error_of([&] { unsqueeze(a, 5); });
}

TEST_CASE("slice follows Python, negative steps and clamping included", "[reference]") {
  Array a = arange(10, dt::int32);
  check(slice(a, {{8, 2, -2}}), i32({3}, {8, 6, 4}));
  check(slice(a, {{std::nullopt, std::nullopt, -3}}), i32({4}, {9, 6, 3, 0}));
  check(slice(a, {{-3, std::nullopt}}), i32({3}, {7, 8, 9}));
  check(slice(a, {{5, 100}}), i32({5}, {5, 6, 7, 8, 9}));
  check(slice(a, {{-100, 2}}), i32({2}, {0, 1}));
  check(slice(a, {{100, -100, -4}}), i32({3}, {9, 5, 1}));
  check(slice(a, {{2, -100, -1}}), i32({3}, {2, 1, 0}));  // a stop before the start reaches index 0
  check(slice(a, {{3, 3}}), i32({0}, {}));
  check(slice(a, {{2, 5, -1}}), i32({0}, {}));
  Array b = reshape(arange(6, dt::int32), {2, 3});
  check(slice(b, {{}, {std::nullopt, std::nullopt, 2}}), i32({2, 2}, {0, 2, 3, 5}));
  check(slice(b, {{std::nullopt, std::nullopt, -1}}), i32({2, 3}, {3, 4, 5, 0, 1, 2}));
  error_of([&] { slice(a, {{0, 5, 0}}); });
}

TEST_CASE("cat and stack", "[reference]") {
  Array a = f32({1, 2}, {1, 2}), b = i32({2, 2}, {3, 4, 5, 6});
  check(cat({a, b}, 0), f32({3, 2}, {1, 2, 3, 4, 5, 6}));
  check(cat({f32({2, 1}, {1, 2}), f32({2, 2}, {3, 4, 5, 6})}, -1), f32({2, 3}, {1, 3, 4, 2, 5, 6}));
  check(cat({i32({0}, {}), i32({2}, {7, 8})}), i32({2}, {7, 8}));
  error_of([&] { cat({a, b}, 1); });
  check(stack({f32({2}, {1, 2}), f32({2}, {3, 4})}, 0), f32({2, 2}, {1, 2, 3, 4}));
  check(stack({f32({2}, {1, 2}), f32({2}, {3, 4})}, -1), f32({2, 2}, {1, 3, 2, 4}));
  error_of([] { stack({f32({2}, {1, 2}), f32({1}, {3})}); });
}

TEST_CASE("split, split_sizes and chunk", "[reference]") {
  Array a = arange(5);
  std::vector<Array> pieces = split(a, 2);
  REQUIRE(pieces.size() == 3);
  check(pieces[0], f32({2}, {0, 1}));
  check(pieces[2], f32({1}, {4}));
  std::vector<Array> sized = split_sizes(reshape(arange(6), {2, 3}), {1, 2}, 1);
  REQUIRE(sized.size() == 2);
  check(sized[0], f32({2, 1}, {0, 3}));
  check(sized[1], f32({2, 2}, {1, 2, 4, 5}));
  error_of([&] { split_sizes(a, {2, 2}); });
  std::vector<Array> chunks = chunk(arange(6), 4);  // torch: chunks of ceil(6/4) = 2, so only 3
  REQUIRE(chunks.size() == 3);
  check(chunks[2], f32({2}, {4, 5}));
}

TEST_CASE("repeat tiles like torch.Tensor.repeat", "[reference]") {
  Array a = f32({2}, {1, 2});
  check(repeat(a, {3}), f32({6}, {1, 2, 1, 2, 1, 2}));
  check(repeat(a, {2, 2}), f32({2, 4}, {1, 2, 1, 2, 1, 2, 1, 2}));
  check(repeat(f32({2, 1}, {1, 2}), {1, 3}), f32({2, 3}, {1, 1, 1, 2, 2, 2}));
  error_of([&] { repeat(f32({1, 1}, {1}), {2}); });
}

TEST_CASE("gather picks along one axis like torch.gather", "[reference]") {
  Array t = f32({2, 2}, {1, 2, 3, 4});
  check(gather(t, 1, i64({2, 2}, {0, 0, 1, 0})), f32({2, 2}, {1, 1, 4, 3}));
  check(gather(t, 0, i64({1, 2}, {1, 0})), f32({1, 2}, {3, 2}));
  error_of([&] { gather(t, 1, i64({2, 1}, {2, 0})); });  // index out of range
  error_of([&] { gather(t, 1, f32({2, 1}, {0, 0})); });  // not an integer index
}

// ---- matmul, conv2d, pooling --------------------------------------------------------------------

TEST_CASE("matmul of a 2x3 and a 3x2 matrix", "[reference]") {
  Array a = f32({2, 3}, {1, 2, 3, 4, 5, 6}), b = f32({3, 2}, {7, 8, 9, 10, 11, 12});
  check(matmul(a, b), f32({2, 2}, {58, 64, 139, 154}));
  error_of([&] { matmul(a, a); });
}

TEST_CASE("matmul promotes and removes 1-D operands and broadcasts batches", "[reference]") {
  Array v = f32({3}, {1, 2, 3});
  check(matmul(v, v), f32({}, {14}));
  check(matmul(v, f32({3, 2}, {7, 8, 9, 10, 11, 12})), f32({2}, {58, 64}));
  check(matmul(f32({2, 3}, {1, 2, 3, 4, 5, 6}), v), f32({2}, {14, 32}));
  // [2, 1, 1, 2] x [3, 2, 1]: batches [2, 1] and [3] broadcast to [2, 3], so the result pairs every
  // left row with every right column.
  Array left = f32({2, 1, 1, 2}, {1, 2, 3, 4}), right = f32({3, 2, 1}, {1, 0, 0, 1, 1, 1});
  check(matmul(left, right), f32({2, 3, 1, 1}, {1, 2, 3, 3, 4, 7}));
  check(matmul(i32({1, 2}, {2, 3}), i32({2, 1}, {4, 5})), i32({1, 1}, {23}));
}

TEST_CASE("conv2d with stride 2, padding 1 and two groups, by hand", "[reference]") {
  // Two 3x3 channels; each output channel sees only its own input channel (groups = 2).
  Array x = f32({1, 2, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18});
  Array w = f32({2, 1, 2, 2}, {1, 2, 3, 4, 1, 0, 0, -1});
  // Output 2x2: window (oh, ow) covers input rows 2*oh-1 .. 2*oh and the same columns.
  check(conv2d(x, w, std::nullopt, {2, 2}, {1, 1}, {1, 1}, 2),
        f32({1, 2, 2, 2}, {4, 18, 36, 77, -10, -12, -16, -4}));
  check(conv2d(x, w, f32({2}, {1, -1}), {2, 2}, {1, 1}, {1, 1}, 2),
        f32({1, 2, 2, 2}, {5, 19, 37, 78, -11, -13, -17, -5}));
}

TEST_CASE("conv2d sums over input channels, dilates, and takes an unbatched input", "[reference]") {
  Array x = f32({2, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  Array w = f32({1, 2, 2, 2}, {1, 0, 0, 1, 0, 0, 0, 1});  // diagonal of channel 0, one tap of channel 1
  check(conv2d(x, w), f32({1, 2, 2}, {1 + 5 + 1, 2 + 6 + 1, 4 + 8 + 1, 5 + 9 + 1}));
  // Dilation 2: the 2x2 kernel reads corners (0,0) and (2,2) of the 3x3 image.
  check(conv2d(x, w, std::nullopt, {1, 1}, {0, 0}, {2, 2}), f32({1, 1, 1}, {1 + 9 + 1}));
  error_of([&] { conv2d(x, w, std::nullopt, {1, 1}, {0, 0}, {1, 1}, 2); });  // 2 channels per group != 1
  error_of([&] { conv2d(x, f32({1, 2, 4, 4}, std::vector<double>(32, 1))); });  // kernel larger than input
}

TEST_CASE("max_pool2d and avg_pool2d, without and with padding", "[reference]") {
  Array x = reshape(arange(16), {1, 1, 4, 4});
  check(max_pool2d(x, {2, 2}), f32({1, 1, 2, 2}, {5, 7, 13, 15}));
  check(avg_pool2d(x, {2, 2}), f32({1, 1, 2, 2}, {2.5, 4.5, 10.5, 12.5}));
  check(max_pool2d(x, {3, 3}, Pair{1, 1}), f32({1, 1, 2, 2}, {10, 11, 14, 15}));
  // 3x3 image 1..9, kernel 2, stride 2, padding 1: windows hold {1}, {2,3}, {4,7}, {5,6,8,9}; the
  // average divides by 4 every time (count_include_pad).
  Array y = f32({1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  check(max_pool2d(y, {2, 2}, std::nullopt, {1, 1}), f32({1, 2, 2}, {1, 3, 7, 9}));
  check(avg_pool2d(y, {2, 2}, std::nullopt, {1, 1}), f32({1, 2, 2}, {0.25, 1.25, 2.75, 7}));
  check(max_pool2d(f32({1, 2, 2}, {1, kNaN, 3, 4}), {2, 2}), f32({1, 1, 1}, {kNaN}));
  check(max_pool2d(f32({1, 2, 2}, {-5, -6, -7, -8}), {2, 2}, std::nullopt, {1, 1}), f32({1, 2, 2}, {-5, -6, -7, -8}));
  error_of([&] { max_pool2d(y, {2, 2}, std::nullopt, {2, 2}); });  // padding over half the kernel
}

// ---- checking -----------------------------------------------------------------------------------

TEST_CASE("allclose matches NaN with NaN and an infinity with the same infinity", "[reference]") {
  Array a = f32({4}, {1, kNaN, kInf, -kInf});
  CHECK(allclose(a, a, 0, 0, nullptr));
  CHECK_FALSE(allclose(f32({1}, {kInf}), f32({1}, {-kInf})));
  CHECK_FALSE(allclose(f32({1}, {kNaN}), f32({1}, {1})));
  CHECK_FALSE(allclose(f32({1}, {1e30}), f32({1}, {kInf}), 1, 1));
  CHECK(allclose(f32({1}, {1.001}), f32({1}, {1}), 1e-2, 0));
  CHECK_FALSE(allclose(f32({1}, {1.001}), f32({1}, {1}), 1e-4, 0));
  CHECK(allclose(f32({1}, {0.001}), f32({1}, {0}), 0, 1e-2));
}

TEST_CASE("allclose explains the first mismatch and counts all of them", "[reference]") {
  std::string why;
  CHECK_FALSE(allclose(f32({2, 2}, {1, 2, 3, 4}), f32({2, 2}, {1, 2.5, 3, 5}), 1e-5, 1e-8, &why));
  CHECK_THAT(why, Catch::Contains("[0, 1]") && Catch::Contains("got 2") && Catch::Contains("expected 2.5") &&
                      Catch::Contains("2 of 4"));
  CHECK_FALSE(allclose(f32({2}, {1, 2}), f32({1, 2}, {1, 2}), 0, 0, &why));
  CHECK_THAT(why, Catch::Contains("[2]") && Catch::Contains("[1, 2]"));
}

TEST_CASE("to_string shows dtype, shape and the first 20 values", "[reference]") {
  CHECK(to_string(i32({2, 2}, {1, 2, 3, -4})) == "int32[2, 2] {1, 2, 3, -4}");
  CHECK(to_string(f32({2}, {0.5, kNaN})) == "float32[2] {0.5, nan}");
  std::string s = to_string(arange(25));
  CHECK_THAT(s, Catch::Contains("19, ... (25 values)"));
  CHECK_THAT(s, !Catch::Contains("20,"));
}
