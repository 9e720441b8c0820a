// kiln against libtorch: creation, elementwise math, comparisons, logical and bitwise ops, shifts,
// casts and type promotion.
#include "oracle.h"

// libtorch's errors carry a C++ backtrace in what(); the message alone says what went wrong.
CATCH_TRANSLATE_EXCEPTION(const c10::Error& e) { return e.what_without_backtrace(); }

namespace kiln::oracle {
namespace {

using Ts = std::vector<at::ScalarType>;

Ts join(Ts a, const Ts& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// --- creation --------------------------------------------------------------------------------------

TEST_CASE("torch: zeros, ones and full match for every dtype and shape", "[torch][creation]") {
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {2, 3}, {1, 4, 1}};
  Batch batch;
  for (at::ScalarType dt : all_dtypes()) {
    auto opts = at::TensorOptions().dtype(dt);
    // A fill value that means something in each type: a fraction truncates toward zero for integers
    // (torch.full casts the same way), 200 needs uint8's range, bool takes any non-zero as true.
    double v = dt == at::kBool ? 1.0 : dt == at::kByte ? 200.0 : at::isFloatingType(dt) ? -2.75 : -7.5;
    for (const auto& s : shapes) {
      std::string what = cat(name(dt), " shape ", shape_text(s));
      batch.check("zeros " + what, Tensor::zeros(s, kiln_dtype(dt)), at::zeros(s, opts));
      batch.check("ones " + what, Tensor::ones(s, kiln_dtype(dt)), at::ones(s, opts));
      batch.check("full " + what, Tensor::full(s, v, kiln_dtype(dt)), at::full(s, v, opts));
    }
  }
  batch.run();
  // One of them realized on its own, stored in its own dtype.
  CHECK(mismatch(Tensor::full({2, 3}, -7.5, dtypes::int8), at::full({2, 3}, -7.5, at::kChar)) == "");
}

TEST_CASE("torch: full with NaN and infinity", "[torch][creation]") {
  // float16 overflow (full(1e5)) is left out: torch.full refuses a value that overflows the dtype.
  Batch batch;
  for (at::ScalarType dt : float_dtypes)
    for (double v : std::vector<double>{NAN, INFINITY, -INFINITY, -0.0})
      batch.check(cat(name(dt), " value ", v), Tensor::full({3}, v, kiln_dtype(dt)), at::full({3}, v, at::TensorOptions().dtype(dt)));
  batch.run();
}

TEST_CASE("torch: zeros_like, ones_like and full_like keep shape and dtype", "[torch][creation]") {
  Source src(11);
  Batch batch;
  for (at::ScalarType dt : {at::kFloat, at::kInt, at::kBool, at::kHalf}) {
    Input x = src.input({2, 3}, dt, Layout::Permuted);
    batch.check(cat("zeros_like ", name(dt)), x.k.zeros_like(), at::zeros_like(x.ref));
    batch.check(cat("ones_like ", name(dt)), x.k.ones_like(), at::ones_like(x.ref));
    batch.check(cat("full_like ", name(dt)), x.k.full_like(1.0), at::full_like(x.ref, 1.0));
  }
  batch.run();
}

TEST_CASE("torch: arange", "[torch][creation]") {
  for (at::ScalarType dt : {at::kInt, at::kLong, at::kFloat, at::kDouble, at::kChar, at::kHalf})
    for (int64_t end : {0, 1, 10}) {
      INFO(name(dt) << " end " << end);
      CHECK(mismatch(Tensor::arange(end, kiln_dtype(dt)), at::arange(end, at::TensorOptions().dtype(dt))) == "");
    }
  struct Range {
    double start, stop, step;
  };
  // torch computes start + i*step in double (its CPU accumulate type for float) and rounds once, as
  // kiln does: the values match exactly.
  for (Range r : {Range{0.5, 5.0, 0.7}, Range{10, -3, -2.5}, Range{-3, 7, 2}, Range{0, 1, 0.1}, Range{5, 5, 1}, Range{1, 2, 3}})
    for (at::ScalarType dt : {at::kFloat, at::kDouble, at::kInt, at::kLong}) {
      if (!at::isFloatingType(dt) && (r.step != std::floor(r.step) || r.start != std::floor(r.start))) continue;
      INFO(name(dt) << " arange(" << r.start << ", " << r.stop << ", " << r.step << ")");
      CHECK(mismatch(Tensor::arange(r.start, r.stop, r.step, kiln_dtype(dt)), at::arange(r.start, r.stop, r.step, at::TensorOptions().dtype(dt))) ==
            "");
    }
}

TEST_CASE("torch: linspace", "[torch][creation]") {
  struct Space {
    double start, stop;
    int64_t steps;
  };
  for (Space s : {Space{0, 1, 5}, Space{-3.5, 10, 7}, Space{2, -2, 9}, Space{1, 1, 4}, Space{3, 8, 1}, Space{0, 1, 0}, Space{-1e3, 1e3, 33}})
    for (at::ScalarType dt : {at::kFloat, at::kDouble, at::kHalf}) {
      INFO(name(dt) << " linspace(" << s.start << ", " << s.stop << ", " << s.steps << ")");
      // torch computes start + i*step from the start for the first half and end - (steps-1-i)*step from
      // the end for the second, in the output type; kiln computes start + i*step in float64 and
      // rounds once. Both are within two roundings of the exact value, each of at most half an ulp of
      // max(|start|, |stop|).
      double scale = std::max(std::abs(s.start), std::abs(s.stop));
      Tol tol = ulps(dt, 2);
      tol.atol = (is_narrow(dt) ? eps(dt) : 2 * eps(dt)) * scale;
      CHECK(mismatch(Tensor::linspace(s.start, s.stop, s.steps, kiln_dtype(dt)),
                     at::linspace(s.start, s.stop, s.steps, at::TensorOptions().dtype(dt)), tol) == "");
    }
  // Integer output: both compute in floating point and truncate; these grids fall on exact values or
  // well inside an integer, so truncation agrees.
  for (at::ScalarType dt : {at::kInt, at::kLong}) {
    INFO(name(dt));
    CHECK(mismatch(Tensor::linspace(0, 10, 4, kiln_dtype(dt)), at::linspace(0, 10, 4, at::TensorOptions().dtype(dt))) == "");
    CHECK(mismatch(Tensor::linspace(-6, 6, 5, kiln_dtype(dt)), at::linspace(-6, 6, 5, at::TensorOptions().dtype(dt))) == "");
  }
}

TEST_CASE("torch: eye", "[torch][creation]") {
  for (at::ScalarType dt : {at::kFloat, at::kLong, at::kBool, at::kBFloat16})
    for (int64_t n : {0, 1, 4}) {
      INFO(name(dt) << " n " << n);
      // libtorch 1.13 has no bfloat16 eye on the CPU: its float eye, converted (0 and 1 are exact).
      at::Tensor expected = dt == at::kBFloat16 ? at::eye(n).to(dt) : at::eye(n, at::TensorOptions().dtype(dt));
      CHECK(mismatch(Tensor::eye(n, kiln_dtype(dt)), expected) == "");
    }
}

// --- unary elementwise -----------------------------------------------------------------------------

const Ts kInts = {at::kByte, at::kChar, at::kShort, at::kInt, at::kLong};
const Ts kSignedInts = {at::kChar, at::kShort, at::kInt, at::kLong};

// Extra tolerance per element, from the input x (float64) and torch's result e (float64), for ops whose
// error grows with the input; `e_c` is the eps of the compute type.
using Bound = std::function<at::Tensor(const at::Tensor& x, const at::Tensor& e, double e_c)>;

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> k;
  std::function<at::Tensor(const at::Tensor&)> t;
  double ulps;  // relative and absolute tolerance in units of the compute type's rounding (see ulps())
  Ts dtypes;
  Values values = Values::Normal;
  Bound bound = nullptr;
};

// exp(x) is computed as exp2(x * log2(e)): the product's rounding, eps * |x * log2(e)|, becomes a
// relative error of eps * |x| in the result (that is what float32 exp2-based exp gives, about |x| ulps).
at::Tensor exp_bound(const at::Tensor& x, const at::Tensor& e, double e_c) { return e.abs() * x.abs() * e_c; }
// sigmoid and silu: 1 / (1 + exp(-x)) inherit exp's relative error, scaled by at most 1.
at::Tensor sigmoid_bound(const at::Tensor& x, const at::Tensor& e, double e_c) { return e.abs() * (x.abs() + 4) * e_c; }

const std::vector<UnaryCase>& unary_cases() {
  const Ts F = float_dtypes;
  static const std::vector<UnaryCase> cases = {
      // Exact ops: sign and magnitude manipulation, rounding to integers, selection.
      {"neg", [](const Tensor& x) { return -x; }, [](const at::Tensor& x) { return at::neg(x); }, 0, join(F, kInts)},
      {"abs", [](const Tensor& x) { return x.abs(); }, [](const at::Tensor& x) { return at::abs(x); }, 0, join(F, kInts)},
      // sign(NaN) is 0 on both sides (Normal values include NaN).
      {"sign", [](const Tensor& x) { return x.sign(); }, [](const at::Tensor& x) { return at::sign(x); }, 0, join(join(F, kInts), {at::kBool})},
      {"relu", [](const Tensor& x) { return x.relu(); }, [](const at::Tensor& x) { return at::relu(x); }, 0, join(F, kInts)},
      {"floor", [](const Tensor& x) { return x.floor(); }, [](const at::Tensor& x) { return at::floor(x); }, 0, join(F, {at::kInt, at::kByte})},
      {"ceil", [](const Tensor& x) { return x.ceil(); }, [](const at::Tensor& x) { return at::ceil(x); }, 0, join(F, {at::kInt, at::kByte})},
      {"round", [](const Tensor& x) { return x.round(); }, [](const at::Tensor& x) { return at::round(x); }, 0, join(F, {at::kLong})},
      {"trunc", [](const Tensor& x) { return x.trunc(); }, [](const at::Tensor& x) { return at::trunc(x); }, 0, join(F, {at::kChar})},
      {"clamp", [](const Tensor& x) { return x.clamp(-1.5, 2.25); }, [](const at::Tensor& x) { return at::clamp(x, -1.5, 2.25); }, 0, F},
      {"clamp int", [](const Tensor& x) { return x.clamp(-3, 50); }, [](const at::Tensor& x) { return at::clamp(x, int64_t{-3}, int64_t{50}); }, 0,
       kSignedInts},
      {"logical_not", [](const Tensor& x) { return x.logical_not(); }, [](const at::Tensor& x) { return at::logical_not(x); }, 0, all_dtypes()},
      {"bitwise_not", [](const Tensor& x) { return x.bitwise_not(); }, [](const at::Tensor& x) { return at::bitwise_not(x); }, 0,
       join(kInts, {at::kBool}), Values::Full},
      // One product by a constant, rounded once on both sides.
      {"leaky_relu", [](const Tensor& x) { return x.leaky_relu(0.1); }, [](const at::Tensor& x) { return at::leaky_relu(x, 0.1); }, 1, F},
      // sqrt and 1/x are correctly rounded on both sides; rsqrt is two roundings in kiln (1/sqrt(x)).
      {"sqrt", [](const Tensor& x) { return x.sqrt(); }, [](const at::Tensor& x) { return at::sqrt(x); }, 1, join(F, {at::kInt, at::kBool})},
      {"reciprocal", [](const Tensor& x) { return x.reciprocal(); }, [](const at::Tensor& x) { return at::reciprocal(x); }, 1, join(F, {at::kInt})},
      {"rsqrt", [](const Tensor& x) { return x.rsqrt(); }, [](const at::Tensor& x) { return at::rsqrt(x); }, 3, F},
      // libm/SLEEF transcendentals are within ~1 ulp each; kiln's decompositions add a rounding or two
      // (log = log2(x) * ln2): 4 ulps covers both sides.
      {"exp2", [](const Tensor& x) { return x.exp2(); }, [](const at::Tensor& x) { return at::exp2(x); }, 4, join(F, {at::kInt})},
      {"log2", [](const Tensor& x) { return x.log2(); }, [](const at::Tensor& x) { return at::log2(x); }, 4, F},
      {"log", [](const Tensor& x) { return x.log(); }, [](const at::Tensor& x) { return at::log(x); }, 4, join(F, {at::kInt, at::kByte})},
      {"sin", [](const Tensor& x) { return x.sin(); }, [](const at::Tensor& x) { return at::sin(x); }, 4, join(F, {at::kInt})},
      {"exp", [](const Tensor& x) { return x.exp(); }, [](const at::Tensor& x) { return at::exp(x); }, 4, join(F, {at::kInt, at::kByte, at::kBool}),
       Values::Normal, exp_bound},
      // cos = sin 2x / (2 sin x), tan = 2 sin^2 x / sin 2x: three or four roundings on sin's.
      {"cos", [](const Tensor& x) { return x.cos(); }, [](const at::Tensor& x) { return at::cos(x); }, 4, join(F, {at::kInt})},
      {"tan", [](const Tensor& x) { return x.tan(); }, [](const at::Tensor& x) { return at::tan(x); }, 5, F},
      {"sigmoid", [](const Tensor& x) { return x.sigmoid(); }, [](const at::Tensor& x) { return at::sigmoid(x); }, 8, join(F, {at::kInt}),
       Values::Normal, sigmoid_bound},
      {"silu", [](const Tensor& x) { return x.silu(); }, [](const at::Tensor& x) { return at::silu(x); }, 8, F, Values::Normal, sigmoid_bound},
      // tanh = (1 - e) / (1 + e) with e = exp(-2|x|): for |x| >= 0.02 (below, a series) the subtraction
      // turns one ulp of e into up to 1/(2|x|) = 25 ulps of the result.
      {"tanh", [](const Tensor& x) { return x.tanh(); }, [](const at::Tensor& x) { return at::tanh(x); }, 32, join(F, {at::kInt})},
      // softplus = log(1 + exp(b*x)) / b: exp's error (b*|x| ulps, relative) shrinks through the log;
      // torch uses log1p, kiln log(1 + e), which loses e below eps: absolute, at most eps (reported as a
      // precision issue: kiln's softplus(-20) is 0, torch's 2.06e-9).
      {"softplus", [](const Tensor& x) { return x.softplus(); }, [](const at::Tensor& x) { return at::softplus(x, 1, 20); }, 4, F, Values::Normal,
       [](const at::Tensor& x, const at::Tensor&, double e_c) { return (x.abs() + 4) * e_c; }},
      {"softplus(2, 5)", [](const Tensor& x) { return x.softplus(2.0, 5.0); }, [](const at::Tensor& x) { return at::softplus(x, 2, 5); }, 4, F,
       Values::Normal, [](const at::Tensor& x, const at::Tensor&, double e_c) { return (x.abs() * 2 + 4) * e_c / 2; }},
      // Selections and one or two roundings, in the same order as torch's (hardswish: x * (h / 6) there,
      // (x * h) / 6 here: two roundings apart at most).
      {"hardtanh", [](const Tensor& x) { return x.hardtanh(-1.5, 2.25); }, [](const at::Tensor& x) { return at::hardtanh(x, -1.5, 2.25); }, 0, F},
      {"relu6", [](const Tensor& x) { return x.relu6(); }, [](const at::Tensor& x) { return at::relu6(x); }, 0, F},
      {"hardsigmoid", [](const Tensor& x) { return x.hardsigmoid(); }, [](const at::Tensor& x) { return at::hardsigmoid(x); }, 2, F},
      {"hardswish", [](const Tensor& x) { return x.hardswish(); }, [](const at::Tensor& x) { return at::hardswish(x); }, 2, F},
      // elu = alpha (e^x - 1) below 0: exp's error (|x| ulps of e^x, so at most 0.37 eps absolute) and
      // the expm1 quotient's few roundings, against torch's expm1.
      {"elu", [](const Tensor& x) { return x.elu(); }, [](const at::Tensor& x) { return at::elu(x); }, 8, F, Values::Normal, sigmoid_bound},
      {"elu(0.5)", [](const Tensor& x) { return x.elu(0.5); }, [](const at::Tensor& x) { return at::elu(x, 0.5); }, 8, F, Values::Normal,
       sigmoid_bound},
      {"selu", [](const Tensor& x) { return x.selu(); }, [](const at::Tensor& x) { return at::selu(x); }, 8, F, Values::Normal, sigmoid_bound},
      // mish = x tanh(softplus(x)): softplus's error (above) scaled by tanh's slope, then tanh's 32 units.
      {"mish", [](const Tensor& x) { return x.mish(); }, [](const at::Tensor& x) { return at::mish(x); }, 32, F, Values::Normal,
       [](const at::Tensor& x, const at::Tensor&, double e_c) { return x.abs() * (x.abs() + 4) * e_c; }},
  };
  return cases;
}

TEST_CASE("torch: unary elementwise ops", "[torch][elementwise]") {
  Source src(21);
  Batch batch;
  size_t i = 0;
  for (const UnaryCase& c : unary_cases())
    for (at::ScalarType dt : c.dtypes) {
      Layout layout = layout_at(i++);
      Input x = src.input({4, 13}, dt, layout, c.values);
      at::Tensor expected = torch_narrow([&](const std::vector<at::Tensor>& in) { return c.t(in[0]); }, {x.ref});
      double e_c = compute_eps(expected.scalar_type());
      std::optional<at::Tensor> bound;
      if (c.bound) bound = c.bound(x.ref.to(at::kDouble), expected.to(at::kDouble), e_c);
      batch.check(cat(c.name, " ", name(dt), " ", name(layout)), c.k(x.k), expected, ulps(expected.scalar_type(), c.ulps), bound);
    }
  batch.run();
}

TEST_CASE("torch: sin, cos and tan over the whole float32 and float64 range, relative to the result", "[torch][elementwise]") {
  // Every binade from subnormal to the largest, a few mantissas each, both signs, the floats next to
  // odd multiples of pi/2, and the specials. cos(12345) was 0.111916587 (true 0.111435786) and
  // tan(1.5707964f) inf (true -22877332).
  for (at::ScalarType dt : {at::kFloat, at::kDouble}) {
    int emin = dt == at::kFloat ? -149 : -1074, emax = dt == at::kFloat ? 127 : 1023;
    std::vector<double> v = {12345.0, 1.5707964, -1.5707964, 0.0, -0.0, INFINITY, -INFINITY, NAN};
    for (int e = emin; e <= emax; e += (e < -30 ? 13 : 1))
      for (double m : {1.0, 1.2345678, 1.7071067, 1.9999})
        for (double sign : {1.0, -1.0}) v.push_back(sign * std::ldexp(m, e));
    for (int k = 1; k < 20000000; k = k * 3 + 1) v.push_back((k + 0.5) * M_PI);
    at::Tensor x = at::tensor(v, at::TensorOptions().dtype(at::kDouble)).to(dt);
    at::Tensor big = x.abs() >= std::ldexp(1.0, emax);  // where 2x overflows: absolute accuracy (see tensor_math.cpp)
    Tensor k = to_kiln(x);
    for (int f = 0; f < 3; ++f) {
      Tensor got = f == 0 ? k.sin() : f == 1 ? k.cos() : k.tan();
      // The float64 oracle's result, rounded once: within 0.5 ulp; kiln adds its roundings.
      at::Tensor want = dt == at::kFloat ? (f == 0 ? at::sin(x.to(at::kDouble)) : f == 1 ? at::cos(x.to(at::kDouble)) : at::tan(x.to(at::kDouble))).to(dt)
                                         : (f == 0 ? at::sin(x) : f == 1 ? at::cos(x) : at::tan(x));
      // libtorch's float64 tan loses subnormal arguments (tan(4.9e-324) gives 0); tan x is x there.
      if (f == 2 && dt == at::kDouble) want = at::where(x.abs() < 1e-300, x, want);
      INFO((f == 0 ? "sin " : f == 1 ? "cos " : "tan ") << name(dt));
      Tol rel{4 * eps(dt), 0};
      // |x| >= 2^emax: cos = 1 - 2 sin^2(x/2) is a few eps absolute; tan = sin / that, relative error
      // eps / |cos x| = eps sqrt(1 + tan^2), so a few eps (1 + tan^2) absolute.
      at::Tensor w = want.to(at::kDouble).nan_to_num(0, 0, 0);
      at::Tensor slack = big.to(at::kDouble) * 4 * eps(dt) * (f == 2 ? w * w + 1 : at::ones_like(w));
      CHECK(mismatch(got, want, rel, f == 0 ? std::nullopt : std::optional<at::Tensor>(slack)) == "");
    }
  }
}

TEST_CASE("torch: erf and gelu", "[torch][elementwise]") {
  Source src(22);
  Batch batch;
  size_t i = 0;
  for (at::ScalarType dt : float_dtypes) {
    Layout layout = layout_at(i++);
    Input x = src.input({4, 13}, dt, layout);
    // kiln's erf: for |x| < 0.5 its Maclaurin series (12 terms, truncation below 1e-16 relative), above
    // that 1 - erfc with a Chebyshev fit for erfc (relative error < 1.2e-7 in erfc, so < 1.2e-7 in erf,
    // whose magnitude there is at least 0.52). torch's erf is within 1 ulp.
    // erf in float32 (and float16/bfloat16, rounded once from float32 on both sides): 16 float32 ulps,
    // relative only: the series keeps the relative accuracy near 0 (erf(0) = 0 exactly, no atol).
    Tol erf_tol = ulps(dt, 16);
    erf_tol.atol = 0;
    std::optional<at::Tensor> erf_bound, gelu_bound;
    // gelu = x/2 * (1 + erf(x/sqrt 2)), the same formula on both sides: for negative x, 1 + erf cancels,
    // so an ulp of erf (~1) becomes an absolute error of |x|/2 ulps in a tiny result. 16 float32 ulps,
    // relative and absolute, cover that for the |x| < ~10 drawn here.
    Tol gelu_tol = ulps(dt, 16);
    if (dt == at::kDouble) {
      // float64: 8 float64 ulps where the series applies; where the float32-accurate fit applies
      // (|x| >= 0.5 for erf, |x| >= 0.5 sqrt 2 for gelu), on top: the fit's 1.2e-7 (about one float32
      // eps) with a margin of 4, relative to erf, and |x|/2 times that absolute for gelu.
      const double e32 = eps(at::kFloat);
      at::Tensor ax = x.ref.abs();
      erf_tol = ulps(at::kDouble, 8);
      gelu_tol = ulps(at::kDouble, 8);
      erf_bound = at::where(ax.ge(0.5), at::erf(x.ref).abs() * (4 * e32), at::zeros_like(ax));
      gelu_bound = at::where(ax.ge(0.5 * std::sqrt(2.0)), ax * (2 * e32) + at::gelu(x.ref).abs() * (4 * e32), at::zeros_like(ax));
    }
    auto torch_erf = [](const std::vector<at::Tensor>& in) { return at::erf(in[0]); };
    auto torch_gelu = [](const std::vector<at::Tensor>& in) { return at::gelu(in[0]); };
    batch.check(cat("erf ", name(dt), " ", name(layout)), x.k.erf(), torch_narrow(torch_erf, {x.ref}), erf_tol, erf_bound);
    batch.check(cat("gelu ", name(dt), " ", name(layout)), x.k.gelu(), torch_narrow(torch_gelu, {x.ref}), gelu_tol, gelu_bound);
  }
  batch.run();
}

TEST_CASE("torch: shifts", "[torch][elementwise]") {
  Source src(23);
  Batch batch;
  size_t i = 0;
  for (at::ScalarType dt : kInts) {
    int64_t width = static_cast<int64_t>(c10::elementSize(dt)) * 8;
    for (int64_t bits : {int64_t{1}, width - 1}) {
      Layout layout = layout_at(i++);
      // The whole range: shifting left drops high bits (libtorch shifts the unsigned representation),
      // shifting a negative value right fills with the sign.
      Input x = src.input({3, 11}, dt, layout, Values::Full);
      std::string what = cat(name(dt), " by ", bits, " ", name(layout));
      batch.check("shl " + what, x.k.shl(bits), at::bitwise_left_shift(x.ref, bits));
      batch.check("shr " + what, x.k.shr(bits), at::bitwise_right_shift(x.ref, bits));
    }
  }
  batch.run();
}

TEST_CASE("torch: elementwise ops on 0-d, size-0 and size-1 shapes", "[torch][elementwise]") {
  Source src(24);
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {1}, {0, 3}, {1, 1, 1}, {3, 0, 2}};
  for (const auto& s : shapes)
    for (Layout layout : {Layout::Contiguous, Layout::Permuted, Layout::Strided, Layout::Flipped}) {
      Input x = src.input(s, at::kFloat, layout);
      INFO("shape " << shape_text(s) << " " << name(layout));
      // Each realized on its own: its own kernel with these loop bounds. sqrt(x*x): two correct roundings.
      CHECK(mismatch((x.k * x.k).sqrt(), at::sqrt(x.ref * x.ref), ulps(at::kFloat, 2)) == "");
    }
}

// --- binary elementwise ----------------------------------------------------------------------------

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> k;
  std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> t;
  double ulps;
  Ts dtypes;
  Values values = Values::Normal;
};

const std::vector<BinaryCase>& binary_cases() {
  const Ts F = float_dtypes, I = {at::kByte, at::kChar, at::kInt, at::kLong};
  static const std::vector<BinaryCase> cases = {
      // IEEE +, -, *, / and max/min are correctly rounded (float16/bfloat16: computed in float32 and
      // rounded once, on both sides), so they match exactly. Small integers (+-100) keep int32/int64
      // clear of overflow, which is undefined in libtorch's C++; int8/uint8 wrap on both sides.
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }, [](const at::Tensor& a, const at::Tensor& b) { return a + b; }, 0,
       join(join(F, I), {at::kBool})},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, [](const at::Tensor& a, const at::Tensor& b) { return a - b; }, 0, join(F, I)},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, [](const at::Tensor& a, const at::Tensor& b) { return a * b; }, 0,
       join(join(F, I), {at::kBool})},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }, [](const at::Tensor& a, const at::Tensor& b) { return a / b; }, 0,
       join(F, {at::kInt, at::kByte, at::kBool})},
      {"maximum", [](const Tensor& a, const Tensor& b) { return a.maximum(b); },
       [](const at::Tensor& a, const at::Tensor& b) { return at::maximum(a, b); }, 0, join(join(F, I), {at::kBool})},
      {"minimum", [](const Tensor& a, const Tensor& b) { return a.minimum(b); },
       [](const at::Tensor& a, const at::Tensor& b) { return at::minimum(a, b); }, 0, join(join(F, I), {at::kBool})},
      // pow: libm pow and SLEEF's are within 1 ulp; float16/bfloat16 round a float32 result once.
      // Integer pow stays integer and exact on both sides; negative exponents give 1 / +-1 / 0. int8 and
      // uint8 wrap (libtorch's products are computed in int and truncated: defined); wider integers are
      // in "integer pow of two integer tensors", with values that do not overflow.
      {"pow", [](const Tensor& a, const Tensor& b) { return a.pow(b); }, [](const at::Tensor& a, const at::Tensor& b) { return at::pow(a, b); }, 4,
       join(F, {at::kByte, at::kChar})},
      {"lt", [](const Tensor& a, const Tensor& b) { return a.lt(b); }, [](const at::Tensor& a, const at::Tensor& b) { return at::lt(a, b); }, 0,
       all_dtypes()},
      {"le", [](const Tensor& a, const Tensor& b) { return a.le(b); }, [](const at::Tensor& a, const at::Tensor& b) { return at::le(a, b); }, 0,
       all_dtypes()},
      {"gt", [](const Tensor& a, const Tensor& b) { return a.gt(b); }, [](const at::Tensor& a, const at::Tensor& b) { return at::gt(a, b); }, 0,
       all_dtypes()},
      {"ge", [](const Tensor& a, const Tensor& b) { return a.ge(b); }, [](const at::Tensor& a, const at::Tensor& b) { return at::ge(a, b); }, 0,
       all_dtypes()},
      {"eq", [](const Tensor& a, const Tensor& b) { return a.eq(b); }, [](const at::Tensor& a, const at::Tensor& b) { return at::eq(a, b); }, 0,
       all_dtypes()},
      {"ne", [](const Tensor& a, const Tensor& b) { return a.ne(b); }, [](const at::Tensor& a, const at::Tensor& b) { return at::ne(a, b); }, 0,
       all_dtypes()},
      {"logical_and", [](const Tensor& a, const Tensor& b) { return a.logical_and(b); },
       [](const at::Tensor& a, const at::Tensor& b) { return at::logical_and(a, b); }, 0, all_dtypes()},
      {"logical_or", [](const Tensor& a, const Tensor& b) { return a.logical_or(b); },
       [](const at::Tensor& a, const at::Tensor& b) { return at::logical_or(a, b); }, 0, all_dtypes()},
      {"bitwise_and", [](const Tensor& a, const Tensor& b) { return a.bitwise_and(b); },
       [](const at::Tensor& a, const at::Tensor& b) { return at::bitwise_and(a, b); }, 0, join(kInts, {at::kBool}), Values::Full},
      {"bitwise_or", [](const Tensor& a, const Tensor& b) { return a.bitwise_or(b); },
       [](const at::Tensor& a, const at::Tensor& b) { return at::bitwise_or(a, b); }, 0, join(kInts, {at::kBool}), Values::Full},
      {"bitwise_xor", [](const Tensor& a, const Tensor& b) { return a.bitwise_xor(b); },
       [](const at::Tensor& a, const at::Tensor& b) { return at::bitwise_xor(a, b); }, 0, join(kInts, {at::kBool}), Values::Full},
  };
  return cases;
}

// Operand shapes that broadcast: equal, trailing, both-sided, 0-d, size-0 and size-1.
const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> kBroadcastPairs = {
    {{4, 5}, {4, 5}}, {{2, 3, 4}, {4}}, {{3, 1}, {1, 4}}, {{2, 1, 4}, {3, 1}}, {{}, {3, 2}}, {{0, 3}, {1, 3}}, {{1}, {5}}, {{3, 4}, {}},
};

TEST_CASE("torch: binary elementwise ops", "[torch][elementwise]") {
  Source src(31);
  Batch batch;
  size_t i = 0;
  for (const BinaryCase& c : binary_cases())
    for (at::ScalarType dt : c.dtypes) {
      const auto& [sa, sb] = kBroadcastPairs[i % kBroadcastPairs.size()];
      Layout la = layout_at(i), lb = layout_at(i / 4 + 1);
      ++i;
      Input a = src.input(sa, dt, la, c.values), b = src.input(sb, dt, lb, c.values);
      at::Tensor expected = torch_narrow([&](const std::vector<at::Tensor>& in) { return c.t(in[0], in[1]); }, {a.ref, b.ref});
      batch.check(cat(c.name, " ", name(dt), " ", shape_text(sa), " ", name(la), " with ", shape_text(sb), " ", name(lb)), c.k(a.k, b.k), expected,
                  ulps(expected.scalar_type(), c.ulps));
    }
  batch.run();
}

TEST_CASE("torch: add broadcasts over every shape pair and layout", "[torch][elementwise]") {
  Source src(32);
  Batch batch;
  for (const auto& [sa, sb] : kBroadcastPairs)
    for (Layout la : all_layouts) {
      Layout lb = all_layouts[(static_cast<size_t>(la) + 2) % all_layouts.size()];
      Input a = src.input(sa, at::kFloat, la), b = src.input(sb, at::kFloat, lb);
      std::string what = cat(shape_text(sa), " ", name(la), " + ", shape_text(sb), " ", name(lb));
      batch.check(what, a.k + b.k, a.ref + b.ref);
      batch.check(what + " (swapped)", b.k + a.k, b.ref + a.ref);
    }
  batch.run();
}

TEST_CASE("torch: where", "[torch][elementwise]") {
  Source src(33);
  Batch batch;
  size_t i = 0;
  for (at::ScalarType dt : all_dtypes()) {
    const auto& [sa, sb] = kBroadcastPairs[i % kBroadcastPairs.size()];
    Layout layout = layout_at(i++);
    Input cond = src.input(sa, at::kBool, layout), a = src.input(sb, dt, Layout::Flipped), b = src.input(sa, dt, Layout::Contiguous);
    batch.check(cat(name(dt), " cond ", shape_text(sa), " ", name(layout), ", a ", shape_text(sb)), cond.k.where(a.k, b.k),
                at::where(cond.ref, a.ref, b.ref));
  }
  batch.run();
  // A non-bool condition means "non-zero" on both sides (NaN is non-zero).
  Input cond = src.input({4, 5}, at::kFloat, Layout::Strided), a = src.input({4, 5}, at::kInt), b = src.input({5}, at::kInt);
  CHECK(mismatch(cond.k.where(a.k, b.k), at::where(cond.ref.ne(0), a.ref, b.ref)) == "");
}

// A Python scalar: kiln's C++ double that is integral and fits the tensor's integer type acts like a
// Python int, anything else like a Python float (tensor.cpp, scalar_like). The torch side gets the
// same kind of at::Scalar.
at::Scalar python_scalar(double s) {
  if (std::floor(s) == s) return at::Scalar(static_cast<int64_t>(s));
  return at::Scalar(s);
}

TEST_CASE("torch: tensor-scalar arithmetic", "[torch][elementwise]") {
  Source src(34);
  Batch batch;
  size_t i = 0;
  for (at::ScalarType dt : {at::kFloat, at::kHalf, at::kInt, at::kByte, at::kBool})
    for (double s : {3.0, -2.5}) {
      Layout layout = layout_at(i++);
      Input x = src.input({3, 7}, dt, layout, Values::Finite);
      at::Scalar ts = python_scalar(s);
      std::string what = cat(name(dt), " scalar ", s, " ", name(layout));
      auto narrow = [&](auto f) { return torch_narrow([&](const std::vector<at::Tensor>& in) { return f(in[0]); }, {x.ref}); };
      batch.check("t + s " + what, x.k + s, narrow([&](const at::Tensor& t) { return at::add(t, ts); }));
      batch.check("s + t " + what, s + x.k, narrow([&](const at::Tensor& t) { return at::add(t, ts); }));
      batch.check("t * s " + what, x.k * s, narrow([&](const at::Tensor& t) { return at::mul(t, ts); }));
      batch.check("t / s " + what, x.k / s, narrow([&](const at::Tensor& t) { return at::div(t, ts); }));
      if (dt != at::kBool)  // torch refuses to subtract from a bool tensor
        batch.check("t - s " + what, x.k - s, narrow([&](const at::Tensor& t) { return at::sub(t, ts); }));
    }
  // Integral scalars at the ends of an integer tensor's range keep its dtype. Values 1..100: int8 and
  // uint8 wrap on both sides (defined: computed in int, truncated); the wider types' sums stay in range.
  for (auto [dt, s] : {std::pair{at::kByte, 255.0}, {at::kChar, -128.0}, {at::kChar, 127.0}, {at::kShort, -32768.0}, {at::kInt, -2147483648.0},
                       {at::kLong, -9223372036854775808.0}}) {
    Input x = src.input({5}, dt, Layout::Flipped, Values::Positive);
    at::Scalar ts = python_scalar(s);
    std::string what = cat(name(dt), " scalar ", s);
    batch.check("t + s " + what, x.k + s, at::add(x.ref, ts));
    if (dt == at::kByte || dt == at::kChar) batch.check("t * s " + what, x.k * s, at::mul(x.ref, ts));
  }
  batch.run();
  // An integral scalar outside an integer tensor's range is a kiln::Error, as in current PyTorch ("value
  // cannot be converted to type int8_t without overflow"); libtorch 1.13 wrapped it silently, so there
  // is no torch value to compare with.
  for (auto [dt, s] : {std::pair{at::kByte, 256.0}, {at::kByte, -1.0}, {at::kChar, 1000.0}, {at::kChar, -129.0}, {at::kShort, 40000.0},
                       {at::kInt, 3e9}, {at::kInt, -2147483649.0}, {at::kLong, 1e19}, {at::kLong, -1e19}}) {
    Tensor x = Tensor::ones({3}, kiln_dtype(dt));
    INFO(name(dt) << " scalar " << s);
    CHECK_THROWS_AS(x + s, Error);
    CHECK_THROWS_AS(s + x, Error);
    CHECK_THROWS_AS(x - s, Error);
    CHECK_THROWS_AS(s - x, Error);
    CHECK_THROWS_AS(x * s, Error);
  }
}

TEST_CASE("torch: integer pow of two integer tensors", "[torch][elementwise]") {
  // Bases -4..4 and exponents -3..15: 4^15 = 2^30 fits int32 (overflow of int32/int64 is undefined in
  // libtorch's C++); int16 wraps, which is defined (computed in int, truncated). Negative exponents give
  // 1 for base 1, +-1 for base -1 by the exponent's parity, 0 otherwise (0 ** -n too), on both sides.
  Source src(36);
  Batch batch;
  auto draw = [&](int64_t lo, int64_t hi, std::vector<int64_t> shape, at::ScalarType dt) {
    return at::randint(lo, hi + 1, shape, src.gen(), at::TensorOptions().dtype(at::kLong)).to(dt);
  };
  struct P {
    at::ScalarType a, b;
    std::vector<int64_t> sa, sb;
  };
  for (const P& p : {P{at::kShort, at::kShort, {5, 8}, {5, 8}}, P{at::kInt, at::kInt, {5, 8}, {5, 8}}, P{at::kLong, at::kLong, {5, 8}, {8}},
                     P{at::kInt, at::kLong, {5, 8}, {5, 8}}, P{at::kLong, at::kInt, {5, 8}, {}}, P{at::kChar, at::kByte, {5, 8}, {5, 8}},
                     P{at::kInt, at::kBool, {5, 8}, {5, 8}}}) {
    at::Tensor a = draw(-4, 4, p.sa, p.a), b = p.b == at::kBool ? draw(0, 1, p.sb, p.b) : draw(p.b == at::kByte ? 0 : -3, 15, p.sb, p.b);
    // The base read through a flipped view.
    Tensor ka = to_kiln(a.flip({0})).flip({0});
    batch.check(cat(name(p.a), " ", shape_text(p.sa), " ** ", name(p.b), " ", shape_text(p.sb)), ka.pow(to_kiln(b)), at::pow(a, b));
  }
  batch.run();
}

TEST_CASE("torch: pow with a scalar exponent", "[torch][elementwise]") {
  Source src(35);
  Batch batch;
  size_t i = 0;
  for (at::ScalarType dt : float_dtypes)
    for (double e : {2.0, 0.5, -1.5, 3.0}) {
      Layout layout = layout_at(i++);
      Input x = src.input({3, 7}, dt, layout);
      if (e == 0.5) {
        // (-inf) ** 0.5 is left out: libtorch computes x ** 0.5 as sqrt(x), NaN there, where C's pow
        // (and kiln) give +inf as IEEE 754 specifies; an artefact of torch's implementation.
        at::Tensor v = at::where(x.ref.eq(-INFINITY), at::full_like(x.ref, -4), x.ref);
        x = {v, to_kiln(v)};
      }
      // x**2 is x*x in kiln (exact); other exponents are pow(), 1 ulp on each side.
      batch.check(cat(name(dt), " ** ", e, " ", name(layout)), x.k.pow(e),
                  torch_narrow([&](const std::vector<at::Tensor>& in) { return at::pow(in[0], e); }, {x.ref}), ulps(dt, 4));
    }
  // Integer tensors: an integral exponent (a Python int on the torch side) keeps the integer dtype (bool
  // goes to int64), exact. Values are +-100 (uint8 0..100): int16/int32/int64 get exponents that keep
  // them in range (100^3 = 1e6 wraps int16 only, computed in int and truncated: defined), int8/uint8 also
  // larger ones that wrap (70: above kiln's unrolled range). A fractional exponent gives float32.
  for (at::ScalarType dt : {at::kByte, at::kChar, at::kShort, at::kInt, at::kLong, at::kBool})
    for (double e : {0.0, 1.0, 3.0, 7.0, 70.0, 0.5}) {
      if (e >= 7 && dt != at::kByte && dt != at::kChar && dt != at::kBool) continue;
      Layout layout = layout_at(i++);
      Input x = src.input({3, 7}, dt, layout, e == 0.5 ? Values::Positive : Values::Normal);
      at::Tensor expected = at::pow(x.ref, python_scalar(e));
      batch.check(cat(name(dt), " ** ", e, " ", name(layout)), x.k.pow(e), expected, ulps(expected.scalar_type(), 4));
    }
  batch.run();
  // A negative integral exponent on an integer tensor is an error on both sides.
  for (at::ScalarType dt : {at::kByte, at::kInt, at::kLong}) {
    INFO(name(dt) << " ** -1");
    CHECK_THROWS_AS(Tensor::ones({2}, kiln_dtype(dt)).pow(-1.0), Error);
    CHECK_THROWS(at::pow(at::ones({2}, at::TensorOptions().dtype(dt)), at::Scalar(int64_t{-1})));
  }
}

// --- casts -----------------------------------------------------------------------------------------

// Values of `from` that cast to `to` with a result libtorch defines. float -> integer casts of NaN, of
// infinities and of values whose truncation is outside the target's range are left out: libtorch uses
// C++ static_cast, which is undefined behaviour there (x86 gives the "integer indefinite" value, other
// CPUs differ), while kiln saturates by design (uop/dtype.h).
at::Tensor cast_source(Source& src, at::ScalarType from, at::ScalarType to) {
  if (!at::isFloatingType(from)) return src.values({6, 8}, from, Values::Full);
  std::vector<double> v = {NAN,    INFINITY, -INFINITY, -0.0,     0.0,          0.1,           -0.5, 0.5,    0.99,    -0.99, 1.5,    -2.5,
                           2.5,    65504,    65520,     70000,    -1e5,         1e-8,          3e-5, 1e-40,  3.4e38,  1e39,  -1e300, 127.9,
                           -128.9, 255.9,    32767.5,   -32768.7, 2147483647.0, -2147483648.9, 4e9,  9.2e18, -9.2e18, 1e20};
  at::Tensor x = at::cat({at::tensor(v, at::kDouble), src.values({14}, at::kDouble, Values::Finite) * 30}).to(from);
  if (!at::isFloatingType(to) && to != at::kBool) {
    double lo = to == at::kByte ? 0 : to == at::kChar ? -128 : to == at::kShort ? -32768 : to == at::kInt ? -2147483648.0 : -9223372036854775808.0;
    double hi = to == at::kByte ? 255 : to == at::kChar ? 127 : to == at::kShort ? 32767 : to == at::kInt ? 2147483647.0 : 9223372036854775807.0;
    // The truncated value must be in range (hi for int64 is 2^63 as a double, itself out of range).
    at::Tensor t = x.to(at::kDouble).trunc();
    at::Tensor ok = t.isfinite() & t.ge(lo) & (to == at::kLong ? t.lt(hi) : t.le(hi));
    x = at::where(ok, x, at::zeros_like(x));
  }
  return x;
}

TEST_CASE("torch: casts between every pair of dtypes", "[torch][cast]") {
  Source src(41);
  Batch batch;
  size_t i = 0;
  for (at::ScalarType from : all_dtypes())
    for (at::ScalarType to : all_dtypes()) {
      Layout layout = layout_at(i++);
      at::Tensor x = cast_source(src, from, to);
      Tensor k = to_kiln(x);
      if (layout == Layout::Flipped) {
        x = x.flip({0});
        k = k.flip({0});
      }
      // Every conversion is exact or one correctly rounded step (round to nearest even) on both sides.
      batch.check(cat(name(from), " -> ", name(to), " ", layout == Layout::Flipped ? "flipped" : "contiguous"), k.cast(kiln_dtype(to)), x.to(to));
    }
  batch.run();
  // A few on their own, stored in the target dtype rather than passed on in a batch.
  for (auto [from, to] : {std::pair{at::kFloat, at::kChar}, {at::kDouble, at::kHalf}, {at::kLong, at::kBFloat16}, {at::kHalf, at::kBool}}) {
    at::Tensor x = cast_source(src, from, to);
    INFO(name(from) << " -> " << name(to));
    CHECK(mismatch(to_kiln(x).cast(kiln_dtype(to)), x.to(to)) == "");
  }
}

// --- type promotion --------------------------------------------------------------------------------

TEST_CASE("torch: promote_types matches torch.promote_types", "[torch][promotion]") {
  for (at::ScalarType a : all_dtypes())
    for (at::ScalarType b : all_dtypes()) {
      INFO(name(a) << " with " << name(b));
      CHECK(promote_types(kiln_dtype(a), kiln_dtype(b)).name() == kiln_dtype(c10::promoteTypes(a, b)).name());
    }
}

TEST_CASE("torch: mixed-dtype binary ops have torch's result dtype", "[torch][promotion]") {
  Source src(42);
  Batch batch;
  for (at::ScalarType a : all_dtypes())
    for (at::ScalarType b : all_dtypes()) {
      Input x = src.input({2, 3}, a, Layout::Contiguous, Values::Positive), y = src.input({3}, b, Layout::Contiguous, Values::Positive);
      Input c = src.input({2, 3}, at::kBool);
      INFO(name(a) << " with " << name(b));
      auto dtype_of = [](const Tensor& t) { return t.dtype().name(); };
      auto torch_dtype = [](const at::Tensor& t) { return kiln_dtype(t.scalar_type()).name(); };
      // Result dtypes only (no kernels): every op family's rule.
      CHECK(dtype_of(x.k * y.k) == torch_dtype(x.ref * y.ref));
      CHECK(dtype_of(x.k / y.k) == torch_dtype(x.ref / y.ref));
      CHECK(dtype_of(x.k.maximum(y.k)) == torch_dtype(at::maximum(x.ref, y.ref)));
      CHECK(dtype_of(x.k.lt(y.k)) == torch_dtype(at::lt(x.ref, y.ref)));
      CHECK(dtype_of(c.k.where(x.k, y.k)) == torch_dtype(at::where(c.ref, x.ref, y.ref)));
      if (a != at::kBool && b != at::kBool) CHECK(dtype_of(x.k - y.k) == torch_dtype(x.ref - y.ref));  // torch refuses bool
      // And the values of one of them: add of small positive values, exact in every type.
      batch.check(cat(name(a), " + ", name(b)), x.k + y.k, x.ref + y.ref);
    }
  batch.run();
}

TEST_CASE("torch: a 0-d operand promotes as in torch", "[torch][promotion]") {
  // libtorch lets a 0-d tensor decide the result dtype only when it is of a higher category (bool <
  // integer < float) than the other operand: int32 (3) + int64 () is int32, float16 (3) + float64 () is
  // float16 (the 0-d value cast to it first), int32 (3) + float64 () is float64. Values 1..100 (int8
  // sums and products wrap on both sides).
  Source src(43);
  Batch batch;
  for (at::ScalarType a : all_dtypes())
    for (at::ScalarType b : all_dtypes()) {
      Input x = src.input({3}, a, Layout::Contiguous, Values::Positive), y = src.input({}, b, Layout::Contiguous, Values::Positive);
      batch.check(cat(name(a), " (3) + ", name(b), " ()"), x.k + y.k, x.ref + y.ref);
      batch.check(cat(name(b), " () * ", name(a), " (3)"), y.k * x.k, y.ref * x.ref);
    }
  batch.run();
}

TEST_CASE("torch: tensor-scalar ops have torch's result dtype", "[torch][promotion]") {
  for (at::ScalarType dt : all_dtypes())
    for (double s : {3.0, 2.5, -2.0}) {
      Tensor x = Tensor::ones({2}, kiln_dtype(dt));
      at::Tensor t = at::ones({2}, at::TensorOptions().dtype(dt));
      INFO(name(dt) << " with scalar " << s);
      if (dt == at::kByte && s < 0) {
        // A negative integral scalar is out of uint8's range: a kiln::Error, as in current PyTorch
        // (libtorch 1.13 kept uint8 and wrapped). True division computes in float, so it is fine.
        CHECK_THROWS_AS(x + s, Error);
        CHECK_THROWS_AS(x * s, Error);
        CHECK((x / s).dtype().name() == kiln_dtype(at::div(t, python_scalar(s)).scalar_type()).name());
        CHECK((x / s).to_vector<float>() == std::vector<float>{-0.5f, -0.5f});
        continue;
      }
      CHECK((x + s).dtype().name() == kiln_dtype(at::add(t, python_scalar(s)).scalar_type()).name());
      CHECK((x * s).dtype().name() == kiln_dtype(at::mul(t, python_scalar(s)).scalar_type()).name());
      CHECK((x / s).dtype().name() == kiln_dtype(at::div(t, python_scalar(s)).scalar_type()).name());
    }
}

}  // namespace
}  // namespace kiln::oracle
