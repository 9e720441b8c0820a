// Every tensor op against the naive reference evaluator (tests/reference), on random inputs with a fixed
// seed: broadcasting, negative axes, non-contiguous inputs, size-0 and size-1 axes, integer and float
// dtypes, NaN and inf.
#include <bit>
#include <cmath>
#include <limits>
#include <functional>
#include <numbers>
#include <random>

#include "frontend/tensor.h"
#include "helpers.h"
#include "reference/reference.h"

using namespace kiln;
namespace R = kiln::ref;

namespace {

template <typename T>
std::vector<T> values_as(const R::Array& a) {
  std::vector<T> out;
  for (double v : a.data) out.push_back(static_cast<T>(v));
  return out;
}

Tensor to_tensor(const R::Array& a) {
  switch (a.dtype.scalar) {
    case ScalarType::Float32: return Tensor::from_vector(values_as<float>(a), a.shape);
    case ScalarType::Float64: return Tensor::from_vector(values_as<double>(a), a.shape);
    case ScalarType::Int32: return Tensor::from_vector(values_as<int32_t>(a), a.shape);
    case ScalarType::Int64: return Tensor::from_vector(values_as<int64_t>(a), a.shape);
    case ScalarType::Int8: return Tensor::from_vector(values_as<int8_t>(a), a.shape);
    case ScalarType::Int16: return Tensor::from_vector(values_as<int16_t>(a), a.shape);
    case ScalarType::UInt8: return Tensor::from_vector(values_as<uint8_t>(a), a.shape);
    case ScalarType::Bool: return Tensor::from_vector(values_as<uint8_t>(a), a.shape).cast(dtypes::bool_);
    case ScalarType::Float16:
    case ScalarType::BFloat16:  // stored narrow: a realized buffer of the narrow type
      return Tensor::from_vector(values_as<float>(a), a.shape).cast(a.dtype).contiguous().realize();
    default: FAIL("to_tensor: no test conversion for " << a.dtype.name());
  }
  return Tensor::zeros({});
}

R::Array to_ref(Tensor t) {
  R::Array out;
  out.shape = t.shape();
  out.dtype = t.dtype();
  auto take = [&](auto vec) { out.data.assign(vec.begin(), vec.end()); };
  switch (t.dtype().scalar) {
    case ScalarType::Float32: take(t.to_vector<float>()); break;
    case ScalarType::Float64: take(t.to_vector<double>()); break;
    case ScalarType::Int32: take(t.to_vector<int32_t>()); break;
    case ScalarType::Int64: take(t.to_vector<int64_t>()); break;
    case ScalarType::Int8: take(t.to_vector<int8_t>()); break;
    case ScalarType::Int16: take(t.to_vector<int16_t>()); break;
    case ScalarType::UInt8: take(t.to_vector<uint8_t>()); break;
    case ScalarType::UInt32: take(t.to_vector<uint32_t>()); break;
    case ScalarType::Bool: take(t.cast(dtypes::uint8).to_vector<uint8_t>()); break;
    case ScalarType::Float16:
    case ScalarType::BFloat16: take(t.cast(dtypes::float32).to_vector<float>()); break;  // exact
    default: FAIL("to_ref: no test conversion for " << t.dtype().name());
  }
  return out;
}

std::mt19937_64 rng(20261130);

R::Array random(Shape shape, DType dtype, double lo = -3, double hi = 3, bool specials = false) {
  std::vector<double> v(static_cast<size_t>(numel(shape)));
  std::uniform_real_distribution<double> u(lo, hi);
  for (double& x : v) x = is_float(dtype) ? u(rng) : std::floor(u(rng));
  if (specials && v.size() >= 4) {
    v[1] = std::nan("");
    v[2] = INFINITY;
    v[3] = -INFINITY;
  }
  return R::array(shape, v, dtype);
}

void expect_close(Tensor got, const R::Array& want, double rtol = 2e-6, double atol = 1e-6) {
  R::Array g = to_ref(got);
  INFO("got:  " << R::to_string(g));
  INFO("want: " << R::to_string(want));
  CHECK(g.dtype == want.dtype);
  std::string why;
  bool ok = R::allclose(g, want, rtol, atol, &why);
  INFO(why);
  CHECK(ok);
}

// The same input as a contiguous tensor and through views that make it non-contiguous.
struct Variant {
  const char* name;
  std::function<Tensor(Tensor)> t;
  std::function<R::Array(R::Array)> r;
};
std::vector<Variant> variants() {
  return {
      {"contiguous", [](Tensor x) { return x; }, [](R::Array x) { return x; }},
      {"permuted", [](Tensor x) { return x.permute({1, 0}); }, [](R::Array x) { return R::permute(x, {1, 0}); }},
      {"flipped", [](Tensor x) { return x.flip({0}); }, [](R::Array x) { return R::flip(x, {0}); }},
      {"sliced", [](Tensor x) { return x.slice(1, 1, std::nullopt, 2); }, [](R::Array x) { return R::slice(x, {{}, {1, std::nullopt, 2}}); }},
      {"padded", [](Tensor x) { return x.pad({{1, 0}, {0, 2}}); }, [](R::Array x) { return R::pad(x, {{1, 0}, {0, 2}}); }},
  };
}

}  // namespace

TEST_CASE("unary float ops match the reference, on every layout", "[ops]") {
  struct Case {
    const char* name;
    std::function<Tensor(Tensor)> t;
    std::function<R::Array(R::Array)> r;
    double lo, hi, rtol;
  };
  std::vector<Case> cases = {
      {"neg", [](Tensor x) { return -x; }, R::neg, -3, 3, 0},
      {"abs", [](Tensor x) { return x.abs(); }, R::abs, -3, 3, 0},
      {"sign", [](Tensor x) { return x.sign(); }, R::sign, -3, 3, 0},
      {"exp", [](Tensor x) { return x.exp(); }, R::exp, -10, 10, 4e-6},
      {"log", [](Tensor x) { return x.log(); }, R::log, 0.01, 100, 4e-6},
      {"exp2", [](Tensor x) { return x.exp2(); }, R::exp2, -10, 10, 2e-6},
      {"log2", [](Tensor x) { return x.log2(); }, R::log2, 0.01, 100, 2e-6},
      {"sqrt", [](Tensor x) { return x.sqrt(); }, R::sqrt, 0, 100, 2e-6},
      {"rsqrt", [](Tensor x) { return x.rsqrt(); }, R::rsqrt, 0.01, 100, 4e-6},
      {"reciprocal", [](Tensor x) { return x.reciprocal(); }, R::reciprocal, 0.1, 10, 2e-6},
      {"sin", [](Tensor x) { return x.sin(); }, R::sin, -6, 6, 2e-6},
      {"cos", [](Tensor x) { return x.cos(); }, R::cos, -6, 6, 2e-6},
      {"tan", [](Tensor x) { return x.tan(); }, R::tan, -1.4, 1.4, 1e-5},
      {"tanh", [](Tensor x) { return x.tanh(); }, R::tanh, -5, 5, 1e-5},
      {"sigmoid", [](Tensor x) { return x.sigmoid(); }, R::sigmoid, -10, 10, 4e-6},
      {"relu", [](Tensor x) { return x.relu(); }, R::relu, -3, 3, 0},
      {"leaky_relu", [](Tensor x) { return x.leaky_relu(0.1); }, [](R::Array a) { return R::leaky_relu(a, 0.1); }, -3, 3, 2e-6},
      {"gelu", [](Tensor x) { return x.gelu(); }, R::gelu, -4, 4, 1e-5},
      {"silu", [](Tensor x) { return x.silu(); }, R::silu, -6, 6, 1e-5},
      {"softplus", [](Tensor x) { return x.softplus(); }, [](R::Array a) { return R::softplus(a); }, -30, 30, 1e-5},
      {"erf", [](Tensor x) { return x.erf(); }, R::erf, -3, 3, 1e-5},
      {"floor", [](Tensor x) { return x.floor(); }, R::floor, -5, 5, 0},
      {"ceil", [](Tensor x) { return x.ceil(); }, R::ceil, -5, 5, 0},
      {"round", [](Tensor x) { return (x * 2.0).round(); }, [](R::Array a) { return R::round(R::mul(a, R::scalar(2))); }, -5, 5, 0},
      {"trunc", [](Tensor x) { return x.trunc(); }, R::trunc, -5, 5, 0},
      {"clamp", [](Tensor x) { return x.clamp(-1, 2); }, [](R::Array a) { return R::clamp(a, -1.0, 2.0); }, -3, 3, 0},
  };
  for (const Case& c : cases) {
    for (const Variant& v : variants()) {
      SECTION(std::string(c.name) + " " + v.name) {
        R::Array a = random({4, 6}, dtypes::float32, c.lo, c.hi);
        expect_close(c.t(v.t(to_tensor(a))), c.r(v.r(a)), c.rtol + 1e-7, c.rtol == 0 ? 0 : 1e-6);
      }
    }
  }
}

TEST_CASE("NaN and inf propagate through elementwise math and reductions", "[ops]") {
  R::Array a = random({2, 4}, dtypes::float32, -3, 3, true);
  Tensor t = to_tensor(a);
  expect_close(t.relu(), R::relu(a));
  expect_close(t.abs(), R::abs(a));
  expect_close(t.exp(), R::exp(a), 4e-6);
  expect_close(t.maximum(t.zeros_like()), R::maximum(a, R::full({2, 4}, 0)));
  expect_close(t.sum({1}), R::sum(a, {1}));
  expect_close(t.max({1}), R::max(a, {1}));
  expect_close(t.min({1}), R::min(a, {1}));
  expect_close(t.argmax(1), R::argmax(a, 1));
}

// Distance in representable floats (ulps) between two finite floats of the same sign, or 0 when
// both are the same NaN-or-inf-or-zero.
int64_t ulps_apart(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  if (a == b) return 0;
  if (std::isinf(a) || std::isinf(b) || std::signbit(a) != std::signbit(b)) return INT64_MAX;
  return std::abs(int64_t(std::bit_cast<uint32_t>(a)) - int64_t(std::bit_cast<uint32_t>(b)));
}

TEST_CASE("exp2 in float32 is within 3 ulps over its whole range, subnormal results and specials included", "[ops]") {
  // A sweep from below the smallest subnormal result to past overflow, plus the edges and specials.
  std::vector<float> x;
  for (float v = -155.0f; v <= 130.0f; v += 0.0137f) x.push_back(v);
  for (float v : {0.0f, -0.0f, 0.5f, -0.5f, 1.5f, 127.0f, 127.99f, 128.0f, -126.0f, -149.0f, -149.5f, -150.0f, -150.5f,
                  1e-8f, -1e-8f, 1e30f, -1e30f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    x.push_back(v);
  std::vector<float> got = Tensor::from_vector(x, {int64_t(x.size())}).exp2().to_vector<float>();
  REQUIRE(got.size() == x.size());
  int64_t worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    float want = static_cast<float>(std::exp2(double(x[i])));
    INFO("exp2(" << x[i] << ") = " << got[i] << ", want " << want);
    int64_t d = ulps_apart(got[i], want);
    CHECK(d <= 3);
    worst = std::max(worst, d);
  }
  CHECK(worst <= 3);
}

// ulps of each f(x) from the float64 result of `want`, rounded once to float32; returns the worst.
int64_t worst_ulps(const std::vector<float>& x, const std::vector<float>& got, double (*want)(double), const char* name, int64_t limit) {
  REQUIRE(got.size() == x.size());
  int64_t worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    float w = static_cast<float>(want(double(x[i])));
    INFO(name << "(" << x[i] << ") = " << got[i] << ", want " << w);
    int64_t d = ulps_apart(got[i], w);
    CHECK(d <= limit);
    worst = std::max(worst, d);
  }
  return worst;
}

// The float32 closest to a multiple of pi/2 in each binade from 2^12 (where SPIR-V's sin leaves
// Cody-Waite for Payne-Hanek, lower/renderers/spirv_math.h) to 2^127, found by an exhaustive search:
// there x 2/pi is within 2^-19 .. 2^-30 of an integer, so an argument reduction needs that many bits
// of 2/pi beyond the usual to keep sin's relative accuracy.
std::vector<float> floats_next_to_multiples_of_half_pi() {
  return {
      0x1.17cc5p+12f, 0x1.17cc5p+13f, 0x1.17cc5p+14f, 0x1.9a48dep+15f, 0x1.9a48dep+16f, 0x1.9a48dep+17f, 0x1.04ccbcp+18f,
      0x1.04ccbcp+19f, 0x1.04ccbcp+20f, 0x1.4ac55cp+21f, 0x1.4ac55cp+22f, 0x1.4ac55cp+23f, 0x1.e768f6p+24f, 0x1.4665d2p+25f,
      0x1.4665d2p+26f, 0x1.4665d2p+27f, 0x1.08ecc2p+28f, 0x1.27a94ap+29f, 0x1.27a94ap+30f, 0x1.1ffa28p+31f, 0x1.1ffa28p+32f,
      0x1.ffa4e8p+33f, 0x1.47d0fep+34f, 0x1.47d0fep+35f, 0x1.47d0fep+36f, 0x1.47d0fep+37f, 0x1.47d0fep+38f, 0x1.47d0fep+39f,
      0x1.628d4cp+40f, 0x1.628d4cp+41f, 0x1.628d4cp+42f, 0x1.628d4cp+43f, 0x1.1cbb44p+44f, 0x1.f0eaeep+45f, 0x1.f0eaeep+46f,
      0x1.f0eaeep+47f, 0x1.206ap+48f, 0x1.206ap+49f, 0x1.b86d92p+50f, 0x1.dc7ad2p+51f, 0x1.dc7ad2p+52f, 0x1.d37782p+53f,
      0x1.fc066ap+54f, 0x1.f9c596p+55f, 0x1.f9c596p+56f, 0x1.0f79ap+57f, 0x1.0f79ap+58f, 0x1.0f79ap+59f, 0x1.0f79ap+60f,
      0x1.0f79ap+61f, 0x1.0f79ap+62f, 0x1.0f79ap+63f, 0x1.c82258p+64f, 0x1.c82258p+65f, 0x1.5619c2p+66f, 0x1.5619c2p+67f,
      0x1.a7624cp+68f, 0x1.a7624cp+69f, 0x1.d83694p+70f, 0x1.d83694p+71f, 0x1.cc0182p+72f, 0x1.5c0e66p+73f, 0x1.5c0e66p+74f,
      0x1.5c0e66p+75f, 0x1.13093p+76f, 0x1.13093p+77f, 0x1.13093p+78f, 0x1.13093p+79f, 0x1.13093p+80f, 0x1.13093p+81f,
      0x1.13093p+82f, 0x1.8dc776p+83f, 0x1.8dc776p+84f, 0x1.32ede2p+85f, 0x1.32ede2p+86f, 0x1.32ede2p+87f, 0x1.32ede2p+88f,
      0x1.abb4bp+89f, 0x1.abb4bp+90f, 0x1.40c784p+91f, 0x1.0b50eep+92f, 0x1.0b50eep+93f, 0x1.0b50eep+94f, 0x1.f37c8ap+95f,
      0x1.f37c8ap+96f, 0x1.f37c8ap+97f, 0x1.f37c8ap+98f, 0x1.f37c8ap+99f, 0x1.0b05dep+100f, 0x1.7f4134p+101f, 0x1.7f4134p+102f,
      0x1.7f4134p+103f, 0x1.cc383p+104f, 0x1.a5bcb2p+105f, 0x1.a5bcb2p+106f, 0x1.df43b8p+107f, 0x1.2928e2p+108f, 0x1.a0f9dp+109f,
      0x1.484dd6p+110f, 0x1.b08c4ap+111f, 0x1.b08c4ap+112f, 0x1.b08c4ap+113f, 0x1.517106p+114f, 0x1.80fea8p+115f, 0x1.80fea8p+116f,
      0x1.20befep+117f, 0x1.f99756p+118f, 0x1.2ceb8p+119f, 0x1.2ceb8p+120f, 0x1.2ceb8p+121f, 0x1.074e1p+122f, 0x1.074e1p+123f,
      0x1.074e1p+124f, 0x1.029a62p+125f, 0x1.7b9b4p+126f, 0x1.7b9b4p+127f,
  };
}

// Arguments for sin, cos and tan over the whole float32 range: a fine sweep of small ones, a sweep
// in even steps of log|x| to the largest float, the floats next to odd multiples of pi/2 (zeros of cos,
// poles of tan) and the closest to multiples of pi/2 at every magnitude (the hard cases of the
// argument reduction), and the specials.
std::vector<float> trig_arguments() {
  std::vector<float> x;
  for (float v = -3000.0f; v <= 3000.0f; v += 1.37f) x.push_back(v);
  for (float v = -7.0f; v <= 7.0f; v += 0.0071f) x.push_back(v);
  for (double v = 3000.0; v <= std::numeric_limits<float>::max(); v *= 1.0137) {
    x.push_back(static_cast<float>(v));
    x.push_back(-static_cast<float>(v));
  }
  for (int k = -950; k <= 950; k += 19) {
    float near = static_cast<float>((k + 0.5) * std::numbers::pi);
    x.push_back(near);
    x.push_back(std::nextafter(near, 0.0f));
    x.push_back(std::nextafter(near, 1e9f));
  }
  for (float v : floats_next_to_multiples_of_half_pi())
    for (float near : {v, std::nextafter(v, 0.0f), std::nextafter(v, INFINITY)}) {
      x.push_back(near);
      x.push_back(-near);
    }
  for (float v : {1e7f, -1e7f, 12345.0f, 16777216.0f, 1e30f, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()})
    x.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-40f, 1.5707964f, -1.5707964f, 1.5707963f, 3.1415927f, 4.712389f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()})
    x.push_back(v);
  return x;
}

// sin is the device's (correctly rounded or within an ulp or two: OpenCL allows 4); cos and tan add the
// roundings of a second sine, a product and a division (measured worst: sin 1, cos 3, tan 4 on Vulkan;
// cos 2, tan 4 on PoCL). Where 2x overflows (|x| >= 2^127) cos and tan come from sin(x/2) with an
// absolute error of a few eps (frontend/tensor_math.cpp): cos within 4 eps, tan within 4 eps (1 + tan^2).
TEST_CASE("sin, cos and tan in float32 are within 3, 4 and 5 ulps over the whole range, next to multiples of pi/2 and specials included", "[ops]") {
  // cos(x) was sin(pi/2 - x) with the subtraction rounded: ~|x| eps absolute, so cos(2999.9) lost four
  // digits and tan(1.5707964f) was inf (true -22877332). On Vulkan, sin reduced x by Cody-Waite alone,
  // exact only below |x| ~ 6e3: cos(1e7) was -3.52.
  std::vector<float> x = trig_arguments();
  Tensor t = Tensor::from_vector(x, {int64_t(x.size())});
  std::vector<Tensor> outs = {t.sin(), t.cos(), t.tan()};
  realize_all(outs);
  std::vector<float> s = outs[0].to_vector<float>(), c = outs[1].to_vector<float>(), tn = outs[2].to_vector<float>();
  int64_t worst_sin = worst_ulps(x, s, [](double v) { return std::sin(v); }, "sin", 3);
  std::vector<float> ordinary, c_ordinary, tn_ordinary;  // |x| < 2^127, and the specials
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(std::fabs(x[i]) >= 0x1p127f) || std::isinf(x[i])) {
      ordinary.push_back(x[i]);
      c_ordinary.push_back(c[i]);
      tn_ordinary.push_back(tn[i]);
      continue;
    }
    double want_c = std::cos(double(x[i])), want_t = std::tan(double(x[i])), eps = std::numeric_limits<float>::epsilon();
    INFO("x = " << x[i] << ": cos " << c[i] << " want " << want_c << ", tan " << tn[i] << " want " << want_t);
    CHECK(std::fabs(c[i] - want_c) <= 4 * eps);
    CHECK(std::fabs(tn[i] - want_t) <= 4 * eps * (1 + want_t * want_t));
  }
  int64_t worst_cos = worst_ulps(ordinary, c_ordinary, [](double v) { return std::cos(v); }, "cos", 4);
  int64_t worst_tan = worst_ulps(ordinary, tn_ordinary, [](double v) { return std::tan(v); }, "tan", 5);
  INFO("worst ulps: sin " << worst_sin << ", cos " << worst_cos << ", tan " << worst_tan);
  CHECK(worst_sin <= 3);
  CHECK(worst_cos <= 4);
  CHECK(worst_tan <= 5);
  CHECK(std::signbit(tn[x.size() - 12]));  // tan(-0) is -0
}

// Every float32 binade from the smallest subnormal to the largest value, a few mantissas each, both
// signs, and the specials.
std::vector<float> all_binades() {
  std::vector<float> x = {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min()};
  for (int e = -149; e <= 127; ++e)
    for (double m : {1.0, 1.2345678, 1.5, 1.7071067, 1.9999999})
      for (float sign : {1.0f, -1.0f}) x.push_back(sign * static_cast<float>(std::ldexp(m, e)));
  return x;
}
std::vector<float> sweep(float lo, float hi, float step) {
  std::vector<float> x;
  for (float v = lo; v <= hi; v += step) x.push_back(v);
  return x;
}

TEST_CASE("the other float32 transcendentals stay within their ulps over the whole range, specials included", "[ops]") {
  // The bound of each composite: log = log2(x) ln2 and rsqrt = 1/sqrt(x) add a rounding to a correctly
  // rounded primitive or two; tanh = (1 - e) / (1 + e) turns e's ulp into up to 1/(2|x|) ulps for
  // 0.02 <= |x| (25 at worst); sigmoid = 1/(1 + e^-|x|) and exp = exp2(x log2 e) carry the product's
  // rounding, eps |x log2 e| / 2, into the result: up to 15 ulps at |x| = 20 (exp is checked on
  // |x| <= 20 here, the rest of its range by the exp2 test and libtorch's); erf is a fit with relative
  // error below 1.2e-7 (a few ulps). Measured on CPU, REF, OpenCL and Vulkan: sqrt 0, rsqrt 1, log2 1,
  // log 1, exp 15, tanh 5, sigmoid 15, erf 2.
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
    double (*want)(double);
    std::vector<float> x;
    int64_t ulps;
  };
  std::vector<float> wide = all_binades();
  std::vector<float> moderate = sweep(-20.0f, 20.0f, 0.0173f);
  moderate.insert(moderate.end(), wide.begin(), wide.begin() + 7);
  for (float v : wide) if (std::fabs(v) < 1e-3f) moderate.push_back(v);
  const std::vector<Case> cases = {
      {"sqrt", [](const Tensor& t) { return t.sqrt(); }, [](double v) { return std::sqrt(v); }, wide, 1},
      {"rsqrt", [](const Tensor& t) { return t.rsqrt(); }, [](double v) { return 1 / std::sqrt(v); }, wide, 2},
      {"log2", [](const Tensor& t) { return t.log2(); }, [](double v) { return std::log2(v); }, wide, 2},
      {"log", [](const Tensor& t) { return t.log(); }, [](double v) { return std::log(v); }, wide, 2},
      {"exp", [](const Tensor& t) { return t.exp(); }, [](double v) { return std::exp(v); }, moderate, 20},
      {"tanh", [](const Tensor& t) { return t.tanh(); }, [](double v) { return std::tanh(v); }, wide, 25},
      {"sigmoid", [](const Tensor& t) { return t.sigmoid(); }, [](double v) { return 1 / (1 + std::exp(-v)); }, moderate, 20},
      {"erf", [](const Tensor& t) { return t.erf(); }, [](double v) { return std::erf(v); }, wide, 4},
  };
  std::vector<Tensor> outs;
  for (const Case& c : cases) outs.push_back(c.f(Tensor::from_vector(c.x, {int64_t(c.x.size())})));
  realize_all(outs);
  for (size_t i = 0; i < cases.size(); ++i) {
    int64_t worst = worst_ulps(cases[i].x, outs[i].to_vector<float>(), cases[i].want, cases[i].name, cases[i].ulps);
    INFO(cases[i].name << ": worst " << worst << " ulps");
    CHECK(worst <= cases[i].ulps);
  }
}

int64_t ulps_apart(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  if (a == b) return 0;
  if (std::isinf(a) || std::isinf(b) || std::signbit(a) != std::signbit(b)) return INT64_MAX;
  return static_cast<int64_t>(std::max(std::bit_cast<uint64_t>(a), std::bit_cast<uint64_t>(b)) -
                              std::min(std::bit_cast<uint64_t>(a), std::bit_cast<uint64_t>(b)));
}

// The float64 sines as the float32 ones, with |x| swept to the largest double.
TEST_CASE("sin, cos and tan in float64 are within 3, 4 and 5 ulps over the whole range, specials included", "[ops]") {
  std::vector<double> x = {0.0, -0.0, 1e-310, 1.5707963267948966, 1e7, 1e22, std::numeric_limits<double>::max(),
                           -std::numeric_limits<double>::max(), std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()};
  for (double v = 1e-3; v <= std::numeric_limits<double>::max(); v *= 1.0731) {
    x.push_back(v);
    x.push_back(-v);
  }
  Tensor t = Tensor::from_vector(x, {int64_t(x.size())});
  std::vector<Tensor> outs = {t.sin(), t.cos(), t.tan()};
  realize_all(outs);
  std::vector<double> s = outs[0].to_vector<double>(), c = outs[1].to_vector<double>(), tn = outs[2].to_vector<double>();
  int64_t worst[3] = {0, 0, 0};
  for (size_t i = 0; i < x.size(); ++i) {
    double want[3] = {std::sin(x[i]), std::cos(x[i]), std::tan(x[i])}, got[3] = {s[i], c[i], tn[i]};
    INFO("x = " << x[i] << ": sin " << s[i] << " want " << want[0] << ", cos " << c[i] << " want " << want[1] << ", tan " << tn[i]
                << " want " << want[2]);
    for (int f = 0; f < 3; ++f) {
      if (f > 0 && std::fabs(x[i]) >= 0x1p1023 && !std::isinf(x[i])) {  // absolute accuracy where 2x overflows (see the float32 case)
        double eps = std::numeric_limits<double>::epsilon();
        CHECK(std::fabs(got[f] - want[f]) <= 4 * eps * (f == 2 ? 1 + want[f] * want[f] : 1));
        continue;
      }
      int64_t d = ulps_apart(got[f], want[f]);
      CHECK(d <= 3 + f);
      worst[f] = std::max(worst[f], d);
    }
  }
  INFO("worst ulps: sin " << worst[0] << ", cos " << worst[1] << ", tan " << worst[2]);
  CHECK(worst[0] <= 3);
  CHECK(worst[1] <= 4);
  CHECK(worst[2] <= 5);
}

TEST_CASE("sin, cos and tan in float64 reduce the double closest to a multiple of pi/2 accurately", "[ops]") {
  // h = 6381956970095103 2^797: h 2/pi is within 2^-61 of an odd integer, so cos h and sin 2h are
  // ~1e-18 and keep their relative accuracy only with ~120 bits of 2/pi past h's. The values are
  // exact ones rounded once (mpmath, 3000 bits); glibc's cos h is 8 ulps off, its tan h 14.
  double h = std::ldexp(6381956970095103.0, 797);
  struct Case {
    double x, sin, cos, tan;
  };
  const std::vector<Case> cases = {{h, 1.0, -0x1.14ae72e6ba22fp-61, -0x1.d9ba9a7975636p+60},
                                   {-h, -1.0, -0x1.14ae72e6ba22fp-61, 0x1.d9ba9a7975636p+60},
                                   {2 * h, -0x1.14ae72e6ba22fp-60, -1.0, 0x1.14ae72e6ba22fp-60}};
  std::vector<double> x;
  for (const Case& c : cases) x.push_back(c.x);
  Tensor t = Tensor::from_vector(x, {int64_t(x.size())});
  std::vector<Tensor> outs = {t.sin(), t.cos(), t.tan()};
  realize_all(outs);
  std::vector<double> s = outs[0].to_vector<double>(), c = outs[1].to_vector<double>(), tn = outs[2].to_vector<double>();
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("x = " << cases[i].x << ": sin " << s[i] << " want " << cases[i].sin << ", cos " << c[i] << " want " << cases[i].cos << ", tan "
                << tn[i] << " want " << cases[i].tan);
    INFO("ulps: " << ulps_apart(s[i], cases[i].sin) << " " << ulps_apart(c[i], cases[i].cos) << " " << ulps_apart(tn[i], cases[i].tan));
    CHECK(ulps_apart(s[i], cases[i].sin) <= 3);
    CHECK(ulps_apart(c[i], cases[i].cos) <= 4);
    CHECK(ulps_apart(tn[i], cases[i].tan) <= 5);
  }
}

TEST_CASE("cos and tan in float64 keep their accuracy next to pi/2", "[ops]") {
  std::vector<double> x = {1.5707963267948966, 1.5707963267948968, -1.5707963267948966, 2000.0, -2999.5, 4.71238898038469, 0.0};
  Tensor t = Tensor::from_vector(x, {int64_t(x.size())});
  std::vector<double> c = t.cos().to_vector<double>(), tn = t.tan().to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    INFO("x = " << x[i] << ": cos " << c[i] << " want " << std::cos(x[i]) << ", tan " << tn[i] << " want " << std::tan(x[i]));
    CHECK(c[i] == Approx(std::cos(x[i])).epsilon(1e-14).margin(0));
    CHECK(tn[i] == Approx(std::tan(x[i])).epsilon(1e-14).margin(0));
  }
}

TEST_CASE("round keeps the sign of a zero result, as torch.round does", "[ops]") {
  std::vector<float> x = {-0.0f, -0.4f, -0.5f, -0.49999997f, 0.0f, 0.4f, 0.5f, -1.5f, -2.5f, 2.5f, -1e-30f, -8388609.0f};
  std::vector<float> got = Tensor::from_vector(x, {int64_t(x.size())}).round().to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    float want = std::nearbyint(x[i]);  // round to nearest even, sign kept
    INFO("round(" << x[i] << ") = " << got[i] << ", want " << want);
    CHECK(got[i] == want);
    CHECK(std::signbit(got[i]) == std::signbit(want));
  }
}

TEST_CASE("binary ops broadcast and promote like PyTorch", "[ops]") {
  struct Case {
    const char* name;
    std::function<Tensor(Tensor, Tensor)> t;
    std::function<R::Array(R::Array, R::Array)> r;
  };
  std::vector<Case> cases = {
      {"add", [](Tensor a, Tensor b) { return a + b; }, R::add},
      {"sub", [](Tensor a, Tensor b) { return a - b; }, R::sub},
      {"mul", [](Tensor a, Tensor b) { return a * b; }, R::mul},
      {"div", [](Tensor a, Tensor b) { return a / b; }, R::div},
      {"maximum", [](Tensor a, Tensor b) { return a.maximum(b); }, R::maximum},
      {"minimum", [](Tensor a, Tensor b) { return a.minimum(b); }, R::minimum},
      {"eq", [](Tensor a, Tensor b) { return a.eq(b); }, R::eq},
      {"ne", [](Tensor a, Tensor b) { return a.ne(b); }, R::ne},
      {"lt", [](Tensor a, Tensor b) { return a.lt(b); }, R::lt},
      {"le", [](Tensor a, Tensor b) { return a.le(b); }, R::le},
      {"gt", [](Tensor a, Tensor b) { return a.gt(b); }, R::gt},
      {"ge", [](Tensor a, Tensor b) { return a.ge(b); }, R::ge},
      {"logical_and", [](Tensor a, Tensor b) { return a.logical_and(b); }, R::logical_and},
      {"logical_or", [](Tensor a, Tensor b) { return a.logical_or(b); }, R::logical_or},
  };
  std::vector<std::pair<DType, DType>> dtype_pairs = {
      {dtypes::float32, dtypes::float32}, {dtypes::int32, dtypes::float32}, {dtypes::int32, dtypes::int64},
      {dtypes::int8, dtypes::uint8},      {dtypes::float64, dtypes::float32}, {dtypes::bool_, dtypes::int32}};
  for (const Case& c : cases)
    for (auto [da, db] : dtype_pairs) {
      SECTION(std::string(c.name) + " " + da.name() + " " + db.name()) {
        R::Array a = random({3, 1}, da, -4, 4), b = random({1, 4}, db, -4, 4);
        if (std::string(c.name) == "div") b = R::add(R::abs(b), R::scalar(1, db));  // no division by zero
        expect_close(c.t(to_tensor(a), to_tensor(b)), c.r(a, b), 2e-7, 0);
      }
    }
}

TEST_CASE("integer bitwise ops and shifts", "[ops]") {
  R::Array a = random({3, 4}, dtypes::int32, -100, 100), b = random({3, 4}, dtypes::int32, -100, 100);
  Tensor ta = to_tensor(a), tb = to_tensor(b);
  expect_close(ta.bitwise_and(tb), R::bitwise_and(a, b));
  expect_close(ta.bitwise_or(tb), R::bitwise_or(a, b));
  expect_close(ta.bitwise_xor(tb), R::bitwise_xor(a, b));
  expect_close(ta.bitwise_not(), R::bitwise_not(a));
  expect_close(ta.shl(3), R::shl(a, R::full({3, 4}, 3, dtypes::int32)));
  expect_close(ta.shr(2), R::shr(a, R::full({3, 4}, 2, dtypes::int32)));
  CHECK_THROWS_AS(to_tensor(random({2}, dtypes::float32)).bitwise_and(to_tensor(random({2}, dtypes::float32))), Error);
}

TEST_CASE("reductions over axes, negative axes and keepdim", "[ops]") {
  R::Array f = random({3, 4, 5}, dtypes::float32);
  R::Array i = random({3, 4, 5}, dtypes::int32, -10, 10);
  Tensor tf = to_tensor(f), ti = to_tensor(i);
  for (std::vector<int64_t> axes : std::vector<std::vector<int64_t>>{{0}, {-1}, {0, 2}, {}}) {
    for (bool keep : {false, true}) {
      SECTION(cat("axes ", axes.size(), axes.empty() ? 99 : axes[0], " keepdim ", keep)) {
        expect_close(tf.sum(axes, keep), R::sum(f, axes, keep), 1e-5, 1e-5);
        expect_close(ti.sum(axes, keep), R::sum(i, axes, keep));
        expect_close(tf.max(axes, keep), R::max(f, axes, keep));
        expect_close(ti.min(axes, keep), R::min(i, axes, keep));
        expect_close(tf.mean(axes, keep), R::mean(f, axes, keep), 1e-5, 1e-6);
        expect_close(tf.var(axes, keep), R::var(f, axes, 1, keep), 1e-5, 1e-6);
        expect_close(tf.std(axes, keep), R::stddev(f, axes, 1, keep), 1e-5, 1e-6);
        expect_close((tf * 0.5).prod(axes, keep), R::prod(R::mul(f, R::scalar(0.5)), axes, keep), 1e-5, 1e-7);
        expect_close(tf.lt(tf.zeros_like()).any(axes, keep), R::any(R::lt(f, R::scalar(0)), axes, keep));
        expect_close(tf.lt(tf.zeros_like()).all(axes, keep), R::all(R::lt(f, R::scalar(0)), axes, keep));
        expect_close(tf.logsumexp(axes.empty() ? std::vector<int64_t>{0, 1, 2} : axes, keep), R::logsumexp(f, axes, keep), 1e-5, 1e-5);
      }
    }
  }
  expect_close(tf.argmax(1), R::argmax(f, 1));
  expect_close(ti.argmin(-1, true), R::argmin(i, -1, true));
  expect_close(tf.argmax(), R::argmax(f));
  expect_close(tf.softmax(-1), R::softmax(f, -1), 1e-5, 1e-7);
  expect_close(tf.log_softmax(1), R::log_softmax(f, 1), 1e-5, 1e-6);
  expect_close(tf.cumsum(1), R::cumsum(f, 1), 1e-5, 1e-5);
}

TEST_CASE("movement ops", "[ops]") {
  R::Array a = random({2, 3, 4}, dtypes::float32);
  Tensor t = to_tensor(a);
  expect_close(t.reshape({4, -1}), R::reshape(a, {4, -1}));
  expect_close(t.permute({2, 0, 1}), R::permute(a, {2, 0, 1}));
  expect_close(t.transpose(0, -1), R::transpose(a, 0, -1));
  expect_close(t.slice(0, 0, 1).expand({3, 3, 4}), R::expand(R::slice(a, {{0, 1, 1}}), {3, 3, 4}));
  expect_close(t.pad({{1, 1}, {0, 0}, {2, 0}}, 7.5), R::pad(a, {{1, 1}, {0, 0}, {2, 0}}, 7.5));
  expect_close(t.shrink({{1, 2}, {0, 2}, {1, 4}}), R::shrink(a, {{1, 2}, {0, 2}, {1, 4}}));
  expect_close(t.flip({0, 2}), R::flip(a, {0, 2}));
  expect_close(t.unsqueeze(1).squeeze(1), a);
  expect_close(t.flatten(1), R::flatten(a, 1));
  expect_close(t.slice(2, -1, std::nullopt, -2), R::slice(a, {{}, {}, {-1, std::nullopt, -2}}));
  expect_close(t.slice(1, -5, 10), R::slice(a, {{}, {-5, 10, 1}}));
  expect_close(Tensor::cat({t, t * 2.0}, 1), R::cat({a, R::mul(a, R::scalar(2))}, 1));
  expect_close(Tensor::stack({t, t}, -1), R::stack({a, a}, -1));
  auto parts = t.split({1, 3}, 2);
  auto rparts = R::split_sizes(a, {1, 3}, 2);
  expect_close(parts[1], rparts[1]);
  auto chunks = t.chunk(2, 1);
  auto rchunks = R::chunk(a, 2, 1);
  REQUIRE(chunks.size() == rchunks.size());
  expect_close(chunks.back(), rchunks.back());
  expect_close(t.repeat({2, 1, 1, 2}), R::repeat(a, {2, 1, 1, 2}));
  R::Array idx = R::array({2, 3, 2}, {0, 3, 1, 1, 2, 0, 3, 3, 0, 0, 1, 2}, dtypes::int64);
  expect_close(t.gather(2, to_tensor(idx)), R::gather(a, 2, idx));
}

TEST_CASE("float16 and bfloat16 are stored narrow and computed in float32", "[ops]") {
  for (DType d : {dtypes::float16, dtypes::bfloat16}) {
    SECTION(d.name()) {
      R::Array a = random({4, 5}, d, -3, 3, true), b = random({1, 5}, d, -3, 3);
      Tensor ta = to_tensor(a), tb = to_tensor(b);
      expect_close(ta + tb, R::add(a, b), 0, 0);
      expect_close(ta * tb, R::mul(a, b), 0, 0);
      expect_close(ta.exp(), R::exp(a), 1e-3, 1e-3);  // float32 exp, rounded once to the narrow type
      expect_close(ta.relu(), R::relu(a), 0, 0);
      expect_close(ta.sum({1}), R::sum(a, {1}), 1e-2, 1e-2);
      expect_close(ta.max({0}), R::max(a, {0}), 0, 0);
      expect_close(ta.permute({1, 0}).flip({0}), R::flip(R::permute(a, {1, 0}), {0}), 0, 0);
      expect_close(ta.cast(dtypes::float32), R::cast(a, dtypes::float32), 0, 0);
      R::Array wide = random({3, 3}, dtypes::float32, -70000, 70000);  // rounding, and overflow to inf in float16
      expect_close(to_tensor(wide).cast(d), R::cast(wide, d), 0, 0);
    }
  }
}

TEST_CASE("size-0 and size-1 axes", "[ops]") {
  R::Array empty = random({0, 3}, dtypes::float32), one = random({1, 3}, dtypes::float32);
  expect_close(to_tensor(empty).sum({0}), R::sum(empty, {0}));
  expect_close((to_tensor(empty) * 2.0).reshape({3, 0}), R::reshape(R::mul(empty, R::scalar(2)), {3, 0}));
  expect_close(to_tensor(one).sum({0}), R::sum(one, {0}));
  expect_close(to_tensor(one).expand({4, 3}) + 1.0, R::add(R::expand(one, {4, 3}), R::scalar(1)));
}

TEST_CASE("matmul in every layout, batched and broadcast", "[ops]") {
  // Sizes where the scheduler repacks a transposed operand (schedule/repack.h) and where it does not.
  for (auto [m, k, n] : {std::array<int64_t, 3>{24, 40, 32}, std::array<int64_t, 3>{5, 7, 3}, std::array<int64_t, 3>{64, 48, 16}}) {
    INFO("m k n = " << m << " " << k << " " << n);
    R::Array a = random({m, k}, dtypes::float32), at = random({k, m}, dtypes::float32);
    R::Array b = random({k, n}, dtypes::float32), bt = random({n, k}, dtypes::float32);
    R::Array a_t = R::permute(at, {1, 0}), b_t = R::permute(bt, {1, 0});
    expect_close(to_tensor(a).matmul(to_tensor(b)), R::matmul(a, b), 1e-5, 1e-5);
    expect_close(to_tensor(a).matmul(to_tensor(bt).transpose(0, 1)), R::matmul(a, b_t), 1e-5, 1e-5);
    expect_close(to_tensor(at).transpose(0, 1).matmul(to_tensor(b)), R::matmul(a_t, b), 1e-5, 1e-5);
    expect_close(to_tensor(at).transpose(0, 1).matmul(to_tensor(bt).transpose(0, 1)), R::matmul(a_t, b_t), 1e-5, 1e-5);
    R::Array batch = random({3, m, k}, dtypes::float32), bbt = random({3, n, k}, dtypes::float32);
    expect_close(to_tensor(batch).matmul(to_tensor(bbt).transpose(1, 2)), R::matmul(batch, R::permute(bbt, {0, 2, 1})), 1e-5, 1e-5);
    expect_close(to_tensor(batch).matmul(to_tensor(bt).transpose(0, 1)), R::matmul(batch, b_t), 1e-5, 1e-5);
    // An operand computed in the kernel (elementwise work fused into it) is copied with that work done.
    R::Array fused = R::add(R::mul(bt, R::scalar(2)), R::scalar(1));
    expect_close(to_tensor(a).matmul((to_tensor(bt) * 2.0 + 1.0).transpose(0, 1)), R::matmul(a, R::permute(fused, {1, 0})), 1e-5, 1e-5);
  }
}

TEST_CASE("conv2d gradients of the input and the weights against direct loops", "[ops]") {
  // loss = sum(conv2d(x, w) * g), so dL/dx and dL/dw are the adjoint sums, written out as loops here.
  // Sizes where the weight gradient repacks the output gradient (schedule/repack.h) and where not.
  struct Case {
    int64_t n, c, h, o, k, stride, pad, dilation;
  };
  // Strided ones take the input gradient phase by phase: 1x1 and 2x2 kernels under stride 2 and 3 leave
  // phases no tap reaches, and some sizes leave input rows no window covers.
  for (Case t : {Case{2, 16, 10, 32, 3, 1, 1, 1}, Case{2, 8, 9, 16, 3, 2, 1, 1}, Case{1, 8, 11, 16, 3, 1, 2, 2}, Case{2, 3, 7, 5, 2, 1, 0, 1},
                 Case{2, 4, 8, 6, 1, 2, 0, 1}, Case{1, 3, 9, 4, 2, 3, 0, 1}, Case{2, 5, 12, 7, 5, 2, 2, 1}, Case{1, 4, 10, 4, 3, 2, 0, 1},
                 Case{1, 2, 3, 3, 3, 2, 1, 1}, Case{1, 3, 11, 2, 3, 3, 1, 1}, Case{1, 2, 6, 3, 3, 2, 1, 2},
                 // 1x1 strided kernels read a stored subsample of the (padded) input
                 Case{2, 8, 9, 16, 1, 2, 1, 1}, Case{1, 5, 10, 12, 1, 3, 0, 1}}) {
    INFO("n c h o k stride pad dilation = " << t.n << " " << t.c << " " << t.h << " " << t.o << " " << t.k << " " << t.stride << " "
                                           << t.pad << " " << t.dilation);
    int64_t oh = (t.h + 2 * t.pad - t.dilation * (t.k - 1) - 1) / t.stride + 1;
    R::Array x = random({t.n, t.c, t.h, t.h}, dtypes::float32), w = random({t.o, t.c, t.k, t.k}, dtypes::float32);
    R::Array g = random({t.n, t.o, oh, oh}, dtypes::float32);
    std::vector<double> dx(x.data.size()), dw(w.data.size());
    for (int64_t b = 0; b < t.n; ++b)
      for (int64_t o = 0; o < t.o; ++o)
        for (int64_t y = 0; y < oh; ++y)
          for (int64_t xo = 0; xo < oh; ++xo)
            for (int64_t c = 0; c < t.c; ++c)
              for (int64_t i = 0; i < t.k; ++i)
                for (int64_t j = 0; j < t.k; ++j) {
                  int64_t iy = y * t.stride - t.pad + i * t.dilation, ix = xo * t.stride - t.pad + j * t.dilation;
                  if (iy < 0 || iy >= t.h || ix < 0 || ix >= t.h) continue;
                  size_t xi = static_cast<size_t>(((b * t.c + c) * t.h + iy) * t.h + ix), wi = static_cast<size_t>(((o * t.c + c) * t.k + i) * t.k + j);
                  double gv = g.data[static_cast<size_t>(((b * t.o + o) * oh + y) * oh + xo)];
                  dx[xi] += gv * w.data[wi];
                  dw[wi] += gv * x.data[xi];
                }
    Tensor tx = to_tensor(x).requires_grad_(), tw = to_tensor(w).requires_grad_();
    (tx.conv2d(tw, std::nullopt, {t.stride, t.stride}, {t.pad, t.pad}, {t.dilation, t.dilation}) * to_tensor(g)).sum().backward();
    R::Array want_dx = x, want_dw = w;
    want_dx.data = dx;
    want_dw.data = dw;
    expect_close(*tx.grad(), want_dx, 1e-4, 1e-4);
    expect_close(*tw.grad(), want_dw, 1e-4, 1e-4);
  }
}

TEST_CASE("matmul, conv2d and pooling", "[ops]") {
  R::Array a = random({2, 3, 5}, dtypes::float32), b = random({5, 4}, dtypes::float32), v = random({5}, dtypes::float32);
  expect_close(to_tensor(a).matmul(to_tensor(b)), R::matmul(a, b), 1e-5, 1e-5);
  expect_close(to_tensor(v).matmul(to_tensor(b)), R::matmul(v, b), 1e-5, 1e-5);
  expect_close(to_tensor(a).matmul(to_tensor(v)), R::matmul(a, v), 1e-5, 1e-5);
  R::Array x = random({2, 4, 7, 6}, dtypes::float32), w = random({6, 2, 3, 2}, dtypes::float32), bias = random({6}, dtypes::float32);
  expect_close(to_tensor(x).conv2d(to_tensor(w), to_tensor(bias), {2, 1}, {1, 1}, {1, 2}, 2),
               R::conv2d(x, w, bias, {2, 1}, {1, 1}, {1, 2}, 2), 1e-5, 1e-5);
  R::Array w1 = random({3, 4, 3, 3}, dtypes::float32);
  expect_close(to_tensor(x).conv2d(to_tensor(w1), std::nullopt, {1, 1}, {1, 1}), R::conv2d(x, w1, std::nullopt, {1, 1}, {1, 1}), 1e-5, 1e-5);
  expect_close(to_tensor(x).max_pool2d({2, 2}), R::max_pool2d(x, {2, 2}));
  expect_close(to_tensor(x).max_pool2d({3, 3}, std::array<int64_t, 2>{2, 2}, {1, 1}), R::max_pool2d(x, {3, 3}, R::Pair{2, 2}, {1, 1}));
  expect_close(to_tensor(x).avg_pool2d({2, 3}, std::array<int64_t, 2>{1, 2}, {1, 1}), R::avg_pool2d(x, {2, 3}, R::Pair{1, 2}, {1, 1}), 1e-6, 1e-6);
}

TEST_CASE("creation ops", "[ops]") {
  expect_close(Tensor::arange(6), R::arange(6, dtypes::int32));
  expect_close(Tensor::eye(3), R::array({3, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1}));
  expect_close(Tensor::linspace(0, 1, 5), R::array({5}, {0, 0.25, 0.5, 0.75, 1}));
  expect_close(Tensor::arange(1.0, 2.0, 0.25), R::array({4}, {1, 1.25, 1.5, 1.75}));
  expect_close(Tensor::full({2, 2}, 3, dtypes::int8), R::full({2, 2}, 3, dtypes::int8));
}

TEST_CASE("random numbers: deterministic per seed, uniform and normal moments", "[ops]") {
  Tensor::manual_seed(42);
  std::vector<float> first = Tensor::rand({10000}).to_vector<float>();
  Tensor::manual_seed(42);
  std::vector<float> again = Tensor::rand({10000}).to_vector<float>();
  CHECK(first == again);
  double mean = 0, sq = 0;
  for (float x : first) {
    REQUIRE(x >= 0.0f);
    REQUIRE(x < 1.0f);
    mean += x;
    sq += x * x;
  }
  mean /= 10000;
  CHECK(std::abs(mean - 0.5) < 0.01);                  // 5 sigma is ~0.014
  CHECK(std::abs(sq / 10000 - mean * mean - 1.0 / 12) < 0.005);
  std::vector<float> n = Tensor::randn({20000}).to_vector<float>();
  double m = 0, s = 0;
  for (float x : n) m += x;
  m /= 20000;
  for (float x : n) s += (x - m) * (x - m);
  CHECK(std::abs(m) < 0.04);
  CHECK(std::abs(s / 20000 - 1.0) < 0.05);
  std::vector<int32_t> r = Tensor::randint(-3, 4, {5000}).to_vector<int32_t>();
  for (int32_t x : r) REQUIRE((x >= -3 && x < 4));
}

TEST_CASE("bad input throws kiln::Error naming the op and the shapes", "[ops][errors]") {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4});
  CHECK_THROWS_WITH(a + b, Catch::Contains("add") && Catch::Contains("(2, 3)") && Catch::Contains("(4,)"));
  CHECK_THROWS_WITH(a.sum({2}), Catch::Contains("sum") && Catch::Contains("axis 2"));
  CHECK_THROWS_WITH(a.reshape({4, 2}), Catch::Contains("reshape") && Catch::Contains("(2, 3)") && Catch::Contains("(4, 2)"));
  CHECK_THROWS_WITH(a.shrink({{0, 3}, {0, 3}}), Catch::Contains("shrink") && Catch::Contains("axis 0"));
  CHECK_THROWS_WITH(a.slice(0, 0, 1, 0), Catch::Contains("step"));
  CHECK_THROWS_WITH(a.bitcast(dtypes::int8), Catch::Contains("bitcast"));
  CHECK_THROWS_WITH(a.matmul(a), Catch::Contains("matmul") && Catch::Contains("(2, 3)"));
  CHECK_THROWS_WITH(Tensor::zeros({2}, dtypes::float32, "NOPE"), Catch::Contains("NOPE"));
  CHECK_THROWS_WITH(a.to_vector<int32_t>(), Catch::Contains("float32") && Catch::Contains("int32"));
}

TEST_CASE("edge cases PyTorch defines: scalars, empty reductions, saturating casts, big values", "[ops]") {
  // 0-dim tensors accept axis 0 / -1
  CHECK(Tensor::full({}, 2).sum({0}).item<float>() == 2.0f);
  CHECK(Tensor::full({}, 2).flip({0}).item<float>() == 2.0f);
  CHECK(Tensor::full({}, 2).softmax(0).item<float>() == 1.0f);
  CHECK_THROWS_AS(Tensor::cat({Tensor::full({}, 1), Tensor::full({}, 2)}), Error);
  // Python-scalar promotion: non-finite or fractional scalars make an int tensor float; an integral
  // scalar out of the tensor's range is an error (current PyTorch: "cannot be converted without overflow")
  Tensor i = Tensor::from_vector<int32_t>({1, 2}, {2});
  CHECK_THROWS_WITH(i + 1e10, Catch::Contains("does not fit") && Catch::Contains("int32"));
  CHECK((i + 0.5).dtype() == dtypes::float32);
  CHECK_THROWS_AS(Tensor::ones({1}, dtypes::int64) + 9223372036854775808.0, Error);  // 2^63: INT64_MAX rounds up to it
  CHECK((Tensor::ones({1}, dtypes::int64) + -9223372036854775808.0).item<int64_t>() == INT64_MIN + 1);
  CHECK((Tensor::ones({2}, dtypes::uint8) / -2.0).to_vector<float>() == std::vector<float>{-0.5f, -0.5f});  // true division is float
  CHECK((i * INFINITY).to_vector<float>() == std::vector<float>{INFINITY, INFINITY});
  CHECK((i + 3.0).dtype() == dtypes::int32);
  CHECK((Tensor::ones({2}, dtypes::bool_) + 1.0).dtype() == dtypes::int64);
  // float -> int casts saturate and NaN gives 0, in kernels as in constant folding
  std::vector<int32_t> sat = Tensor::from_vector<float>({3e9f, -3e9f, NAN, 2.7f, -2.7f}, {5}).cast(dtypes::int32).to_vector<int32_t>();
  CHECK(sat == std::vector<int32_t>{INT32_MAX, INT32_MIN, 0, 2, -2});
  // round() of values too large to have a fraction; tanh near 0 keeps its relative precision
  CHECK(Tensor::from_vector<float>({8388609.f, -8388611.f}, {2}).round().to_vector<float>() == std::vector<float>{8388609.f, -8388611.f});
  CHECK(Tensor::from_vector<float>({1e-8f}, {1}).tanh().item<float>() == Approx(1e-8f).epsilon(1e-6));
  // empty reductions
  CHECK(std::isnan(Tensor::zeros({0}).mean().item<float>()));
  CHECK(Tensor::zeros({0}).any().cast(dtypes::int32).item<int32_t>() == 0);
  CHECK(Tensor::zeros({0}).all().cast(dtypes::int32).item<int32_t>() == 1);
  CHECK(Tensor::zeros({0, 3}).max({1}).shape() == Shape{0});
  CHECK_THROWS_AS(Tensor::zeros({3, 0}).max({1}), Error);
  // gather keeps the dtype and refuses out-of-range indices
  Tensor src = Tensor::from_vector<int32_t>({10, 20, 30}, {3});
  CHECK(src.gather(0, Tensor::from_vector<int64_t>({2, 0}, {2})).to_vector<int32_t>() == std::vector<int32_t>{30, 10});
  CHECK_THROWS_WITH(src.gather(0, Tensor::from_vector<int64_t>({2, 5}, {2})), Catch::Contains("index 5"));
  // random narrow floats stay below 1
  CHECK(Tensor::rand({100000}, dtypes::bfloat16).max().cast(dtypes::float32).item<float>() < 1.0f);
  // too big for int32 index math: an error, never a wrong number
  CHECK_THROWS_WITH(Tensor::ones({(int64_t{1} << 31) + 1}, dtypes::int8).sum().item<int64_t>(), Catch::Contains("int32"));
  CHECK_THROWS_AS(Tensor::ones({1}).expand({-2}), Error);
}

TEST_CASE("tensors on different devices: an error, and to() moves them", "[ops]") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3}, {3}, "CPU"), b = Tensor::from_vector<float>({10, 20, 30}, {3}, "REF");
  CHECK_THROWS_WITH(a + b, Catch::Contains("CPU") && Catch::Contains("REF") && Catch::Contains("to()"));
  CHECK((a.to("REF") + b).to_vector<float>() == std::vector<float>{11, 22, 33});
  CHECK((a + b.to("CPU")).device() == "CPU");
  CHECK((a * 2.0).to("REF").to("CPU").to_vector<float>() == std::vector<float>{2, 4, 6});
}

TEST_CASE("to(): a view is copied as its values, not as its source's bytes", "[ops]") {
  // Inside a schedule an intermediate may be stored in the order its kernel reads best (a transpose in
  // its source's order); a device copy moves bytes, so what it copies is stored row-major.
  const std::vector<float> transposed = {0, 3, 1, 4, 2, 5};
  for (const char* device : {"CPU:1", "REF"}) {
    INFO("to " << device);
    Tensor t = Tensor::arange(0, 6, 1).reshape({2, 3}).realize();
    CHECK(t.transpose(0, 1).to(device).to_vector<float>() == transposed);
    CHECK((t + 0.0).transpose(0, 1).to(device).to_vector<float>() == transposed);
    CHECK(t.to(device).transpose(0, 1).to("CPU").to_vector<float>() == transposed);
    CHECK(t.reshape({1, 2, 3}).permute({2, 0, 1}).to(device).to_vector<float>() == transposed);
    CHECK(t.shrink({{0, 2}, {1, 3}}).to(device).to_vector<float>() == std::vector<float>{1, 2, 4, 5});
  }
}
