// Tensor: more creation ops, random numbers, and elementwise math built from the IR's primitives
// (exp2, log2, sin, sqrt, recip, trunc and the arithmetic ops): every function here is a
// decomposition, so devices only ever see primitives.
#include <cstring>
#include <atomic>
#include <cmath>
#include <numbers>

#include "frontend/detail.h"
#include "frontend/realize.h"

namespace kiln {

using detail::broadcast_shapes;

// --- creation ------------------------------------------------------------------------------------

Tensor Tensor::arange(double start, double stop, double step, DType dtype, const std::string& device) {
  if (step == 0) throw Error("Tensor::arange: step must not be 0");
  int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((stop - start) / step)));
  return (arange(n, dtypes::float64, device) * step + start).cast(dtype);
}

Tensor Tensor::linspace(double start, double stop, int64_t steps, DType dtype, const std::string& device) {
  if (steps < 0) throw Error(kiln::cat("Tensor::linspace: steps ", steps, " is negative"));
  if (steps == 1) return full({1}, start, dtype, device);
  double delta = (stop - start) / static_cast<double>(std::max<int64_t>(steps - 1, 1));
  return (arange(steps, dtypes::float64, device) * delta + start).cast(dtype);
}

Tensor Tensor::eye(int64_t n, DType dtype, const std::string& device) {
  if (n < 0) throw Error(kiln::cat("Tensor::eye: n ", n, " is negative"));
  Tensor i = arange(n, dtypes::int32, device);
  return i.reshape({n, 1}).eq(i.reshape({1, n})).cast(dtype);
}

Tensor Tensor::zeros_like() const { return zeros(shape(), dtype(), device()); }
Tensor Tensor::ones_like() const { return ones(shape(), dtype(), device()); }
Tensor Tensor::full_like(double value) const { return full(shape(), value, dtype(), device()); }

// --- random numbers ----------------------------------------------------------------------------
//
// Counter-based: element i of the k-th random tensor is hash(counter + i, seed), where counter advances by
// the tensor's size each call. The hash is integer arithmetic on uint32 (two rounds of a xor-shift-multiply
// mixer), so every device produces the same bits.

namespace {
std::atomic<uint64_t> g_seed{0x2545f4914f6cdd1dull}, g_counter{0};

Tensor mix32(Tensor x) {
  auto c = [&](uint32_t v) { return Tensor::full(x.shape(), static_cast<double>(v), dtypes::uint32, x.device()); };
  x = x.bitwise_xor(x.shr(16)) * c(0x7feb352du);
  x = x.bitwise_xor(x.shr(15)) * c(0x846ca68bu);
  return x.bitwise_xor(x.shr(16));
}

Tensor random_bits(const Shape& shape, const std::string& device) {
  int64_t n = numel(shape);
  // The counter and seed enter as a tiny buffer, not as constants, so every call (a dropout mask each
  // training step) runs the same compiled kernel; a captured step draws new numbers on each replay.
  Tensor words = detail::host_tensor({4}, dtypes::uint32, device, [n](void* dst) {
    uint64_t start = g_counter.fetch_add(static_cast<uint64_t>(n)), seed = g_seed.load();
    uint32_t w[4] = {static_cast<uint32_t>(start), static_cast<uint32_t>(start >> 32), static_cast<uint32_t>(seed),
                     static_cast<uint32_t>(seed >> 32)};
    std::memcpy(dst, w, sizeof w);
  });
  auto word = [&](int64_t i) { return words.shrink({{i, i + 1}}).expand({n}); };
  Tensor counter = Tensor::arange(n, dtypes::uint32, device) + word(0);
  Tensor h = mix32(counter.bitwise_xor(word(2)) + word(1));
  return mix32(h.bitwise_xor(word(3))).reshape(shape);
}
}  // namespace

std::array<uint64_t, 2> Tensor::rng_state() { return {g_seed.load(), g_counter.load()}; }
void Tensor::set_rng_state(std::array<uint64_t, 2> state) {
  g_seed = state[0];
  g_counter = state[1];
}

void Tensor::manual_seed(uint64_t seed) {
  g_seed = seed;
  g_counter = 0;
}

Tensor Tensor::rand(Shape shape, DType dtype, const std::string& device) {
  if (!is_float(dtype)) throw Error(kiln::cat("Tensor::rand: dtype ", dtype.name(), " is not a float type; use randint for integers"));
  // The top k bits as k-bit fixed point in [0, 1), with k the type's precision (24 for float32, 11
  // for float16, 8 for bfloat16), so the value is exact in the type and never rounds up to 1.
  int k = dtype.scalar == ScalarType::Float16 ? 11 : dtype.scalar == ScalarType::BFloat16 ? 8 : 24;
  Tensor bits = random_bits(shape, device).shr(32 - k).cast(dtypes::float32);
  return (bits * std::ldexp(1.0, -k)).cast(dtype);
}

Tensor Tensor::randn(Shape shape, DType dtype, const std::string& device) {
  // Box-Muller on two independent uniforms; 1-u is in (0, 1], so the log is finite.
  Tensor u1 = rand(shape, dtypes::float32, device), u2 = rand(shape, dtypes::float32, device);
  Tensor r = ((-u1 + 1.0).log() * -2.0).sqrt();
  return (r * (u2 * (2.0 * std::numbers::pi)).cos()).cast(dtype);
}

Tensor Tensor::randint(int64_t low, int64_t high, Shape shape, DType dtype, const std::string& device) {
  if (high <= low) throw Error(kiln::cat("Tensor::randint: empty range [", low, ", ", high, ")"));
  if (!is_int(dtype)) throw Error(kiln::cat("Tensor::randint: dtype ", dtype.name(), " is not an integer type"));
  Tensor u = rand(shape, dtypes::float64, device);
  return ((u * static_cast<double>(high - low)).floor() + static_cast<double>(low)).cast(dtype);
}

// --- elementwise ---------------------------------------------------------------------------------

Tensor Tensor::bitcast(DType d) const {
  if (d.itemsize() != dtype().itemsize())
    throw Error(kiln::cat("bitcast: ", dtype().name(), " (", dtype().itemsize(), " bytes) and ", d.name(), " (", d.itemsize(),
                    " bytes) differ in size; bitcast needs equal sizes"));
  if (d == dtype()) return *this;
  return derived(UOp::make(Op::BITCAST, d, {uop()}), shape());
}

namespace {
// Integer powers stay integers, as in PyTorch, computed exactly (wrapping like repeated multiplication)
// by squaring over the exponent's bits. A negative exponent gives 1 for base 1, +-1 for base -1, and 0
// otherwise: the integer part of base^e, which is what torch computes for an exponent tensor.
Tensor integer_pow(const Tensor& base, const Tensor& exponent, DType d) {
  Shape out = detail::broadcast_shapes(base.shape(), exponent.shape(), "pow");
  Tensor b = base.cast(d).expand(out), e = exponent.cast(d).expand(out);
  Tensor zero = Tensor::zeros(out, d, b.device()), one = Tensor::ones(out, d, b.device());
  Tensor negative = is_unsigned(d) || is_bool(d) ? Tensor::zeros(out, dtypes::bool_, b.device()) : e.lt(zero);
  Tensor k = negative.where(zero, e), result = one, square = b;
  int bits = is_bool(d) ? 1 : static_cast<int>(d.itemsize()) * 8;
  for (int i = 0; i < bits; ++i) {
    Tensor bit = (i == 0 ? k : k.shr(i)).bitwise_and(one).ne(zero);
    result = bit.where(result * square, result);
    if (i + 1 < bits) square = square * square;
  }
  if (is_unsigned(d) || is_bool(d)) return result;
  Tensor minus_one = Tensor::full(out, -1.0, d, b.device());
  Tensor odd = e.bitwise_and(one).ne(zero);
  Tensor small = b.eq(one).where(one, b.eq(minus_one).where(odd.where(minus_one, one), zero));
  return negative.where(small, result);
}
}  // namespace

Tensor Tensor::pow(const Tensor& e) const {
  if (device() != e.device())
    throw Error(kiln::cat("pow: operands are on different devices (", device(), " and ", e.device(), "); move one with to()"));
  DType d = detail::result_type(*this, e);
  if (!is_float(d)) return integer_pow(*this, e, d);
  return binary(Op::POW, e, "pow");
}

Tensor Tensor::pow(double e) const {
  if (e == 2.0) return *this * *this;
  if (!is_float(dtype()) && std::isfinite(e) && std::floor(e) == e) {
    // An integral exponent keeps an integer tensor integer (a Python int in PyTorch).
    if (e < 0) throw Error(kiln::cat("pow: integer tensor (", dtype().name(), ") to the negative power ", e,
                                     " is not an integer; cast the tensor to a float type first"));
    if (e > 64) return integer_pow(*this, full(shape(), e, dtypes::int64, device()), is_bool(dtype()) ? dtypes::int64 : dtype());
    DType d = is_bool(dtype()) ? dtypes::int64 : dtype();
    Tensor result = ones(shape(), d, device()), square = cast(d);
    for (auto k = static_cast<int64_t>(e); k > 0; k >>= 1) {
      if (k & 1) result = result * square;
      if (k > 1) square = square * square;
    }
    return result;
  }
  return pow(full(shape(), e, is_float(dtype()) ? dtype() : dtypes::default_float, device()));
}

Tensor Tensor::abs() const {
  if (is_float(dtype())) {
    // Selects rather than clearing the sign bit, so it is differentiable (the gradient is sign(x), 0 at
    // 0, as in PyTorch). Zeros of either sign give +0; NaN stays NaN.
    Tensor zero = zeros_like();
    return eq(zero).where(zero, lt(zero).where(-*this, *this));
  }
  if (is_unsigned(dtype()) || is_bool(dtype())) return *this;
  return lt(zeros_like()).where(-*this, *this);
}

Tensor Tensor::sign() const {
  if (is_bool(dtype())) return *this;
  Tensor zero = zeros_like(), one = ones_like();
  return zero.lt(*this).where(one, lt(zero).where(-one, zero));  // NaN gives 0, as torch.sign
}

Tensor Tensor::rsqrt() const { return in_float([](const Tensor& x) { return x.sqrt().reciprocal(); }); }

namespace {
// cos and tan from sin at x and 2x: doubling is exact and sin reduces its own argument, so they keep
// sin's accuracy (plus a division and a rounding or two) over the whole range, next to the zeros of
// cos included. (sin(pi/2 - x) rounds pi/2 - x first: cos(12345) was off in the third digit, and
// tan(1.5707964f) was inf.) Where 2x would overflow (|x| >= 2^emax: 1.7e38 in float32), the
// double-angle form 1 - 2 sin^2(x/2) is used: absolute error a few eps, not relative.
struct Sines {
  Tensor s, s2, zero, huge;  // sin x, sin 2x (sin(x/2) for huge x), x == 0, |x| >= 2^emax
};
Sines sines(const Tensor& x) {
  double huge_from = x.dtype().scalar == ScalarType::Float64 ? std::ldexp(1.0, 1023) : std::ldexp(1.0, 127);
  Tensor huge = x.abs().ge(x.full_like(huge_from));
  Tensor s = x.sin();
  // One more sine: of 2x, or of x/2 where 2x would overflow.
  Tensor s2 = (x * huge.where(x.full_like(0.5), x.full_like(2.0))).sin();
  return {s, s2, s.eq(x.zeros_like()), huge};
}
}  // namespace

// cos and tan have closed forms better conditioned than the quotient rule through sines(); erf, tanh,
// sigmoid and gelu are fits and selections whose derivative op by op costs several times the forward
// (both branches of each selection, and the fit's polynomial, differentiated).
void detail::set_elementwise_gradient(const Tensor& out, const Tensor& x, std::function<Tensor(const Tensor&, const Tensor&)> local) {
  if (!grad_enabled() || !is_float(x.dtype())) return;  // gradients() may ask for any tensor, leaf or not
  std::weak_ptr<const UOp> x_node = x.uop(), out_node = out.uop();
  Shape shape = x.shape();
  detail::set_custom_gradient(out, {x}, [=](const Tensor& g, const std::vector<bool>&) {
    UOpPtr xu = x_node.lock(), ou = out_node.lock();
    if (!xu || !ou) throw InternalError("an elementwise custom gradient outlived its graph");
    Tensor xt(xu, shape), ot(ou, shape);
    return std::vector<std::optional<Tensor>>{g * local(xt, ot).cast(g.dtype())};
  });
}

Tensor Tensor::cos() const {
  Tensor out = in_float([](const Tensor& t) {
    Tensor x = t.cast(to_floating(t.dtype()));
    Sines v = sines(x);
    Tensor one = x.ones_like();
    // At x = +-0 sin x is 0 and cos is 1; elsewhere sin x != 0 in floating point.
    Tensor ratio = v.s2 / (v.zero.where(one, v.s) * 2.0);
    Tensor doubled = one - v.s2 * v.s2 * 2.0;
    return v.zero.where(one, v.huge.where(doubled, ratio));
  });
  detail::set_elementwise_gradient(out, *this, [](const Tensor& x, const Tensor&) { return -x.cast(to_floating(x.dtype())).sin(); });
  return out;
}

Tensor Tensor::tan() const {
  Tensor out = in_float([](const Tensor& t) {
    Tensor x = t.cast(to_floating(t.dtype()));
    Sines v = sines(x);
    // tan x = 2 sin^2 x / sin 2x, as 2 sin x (sin x / sin 2x) so that sin^2 cannot underflow for tiny
    // x; +-0 stays +-0 (sin 2x is 0 only there).
    Tensor ratio = v.s * 2.0 * (v.s / v.zero.where(x.ones_like(), v.s2));
    Tensor huge = v.s / (x.ones_like() - v.s2 * v.s2 * 2.0);
    return v.zero.where(x, v.huge.where(huge, ratio));
  });
  // d tan = 1 + tan^2, as torch computes it from the result.
  detail::set_elementwise_gradient(out, *this, [](const Tensor&, const Tensor& t) { return t * t + 1.0; });
  return out;
}
Tensor Tensor::tanh() const {
  return in_float([](const Tensor& t) {
    // (1 - e^-2|x|) / (1 + e^-2|x|) with the sign of x; below |x| = 0.02 that cancels, so use the
    // series x - x^3/3 + 2x^5/15 - 17x^7/315 + 62x^9/2835 there (the next term, 1382x^11/155925, is
    // below 1e-17 relative: float64 precision).
    Tensor x = t.cast(to_floating(t.dtype()));
    Tensor ax = x.abs(), e = (ax * -2.0).exp();
    Tensor big = (-e + 1.0) / (e + 1.0);
    big = x.lt(x.zeros_like()).where(-big, big);
    // The series sees 0 where it is not taken: at |x| > 1e4 its x^9 overflows, and the zero gradient
    // where passes to the branch it does not take would meet that inf (0 * inf is NaN).
    Tensor use_series = ax.lt(x.full_like(0.02));
    Tensor xs = use_series.where(x, x.zeros_like()), x2 = xs * xs;
    Tensor small = xs * (x2 * (x2 * (x2 * (x2 * (62.0 / 2835.0) - 17.0 / 315.0) + 2.0 / 15.0) - 1.0 / 3.0) + 1.0);
    Tensor out = use_series.where(small, big);
    detail::set_elementwise_gradient(out, x, [](const Tensor&, const Tensor& y) { return -(y * y) + 1.0; });  // 1 - tanh^2
    return out;
  });
}
Tensor Tensor::leaky_relu(double slope) const { return zeros_like().lt(*this).where(*this, *this * slope); }
Tensor Tensor::silu() const { return in_float([](const Tensor& x) { return x * x.sigmoid(); }); }
Tensor Tensor::gelu() const {
  return in_float([](const Tensor& x) {
    auto cdf = [](const Tensor& v) { return ((v * (1.0 / std::numbers::sqrt2)).erf() + 1.0) * 0.5; };  // Phi(v)
    Tensor out = x * cdf(x);
    // Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi); Phi's graph is the forward's own node.
    detail::set_elementwise_gradient(out, x, [cdf](const Tensor& v, const Tensor&) {
      return cdf(v) + v * (v * v * -0.5).exp() * (1.0 / std::sqrt(2.0 * std::numbers::pi));
    });
    return out;
  });
}

Tensor Tensor::gelu(const std::string& approximate) const {
  if (approximate == "none") return gelu();
  if (approximate != "tanh") throw Error(kiln::cat("gelu: approximate \"", approximate, "\" is not \"none\" or \"tanh\""));
  return in_float([](const Tensor& x) {
    // x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Past |x| = 10 the tanh is +-1 in float64 already;
    // it sees +-10 there, so that x^3 cannot overflow (its gradient would be 0 * inf = NaN).
    Tensor ten = x.full_like(10.0);
    Tensor xc = x.abs().lt(ten).where(x, x.lt(x.zeros_like()).where(-ten, ten));
    Tensor inner = (xc + xc * xc * xc * 0.044715) * std::sqrt(2.0 / std::numbers::pi);
    return x * 0.5 * (inner.tanh() + 1.0);
  });
}

Tensor Tensor::softplus(double beta, double threshold) const {
  return in_float([&](const Tensor& x) {
    Tensor bx = x * beta;
    // Past the threshold softplus is x. The log branch sees the threshold there rather than bx: the
    // zero gradient where gives the branch it does not take would otherwise meet exp's overflow
    // (0 * inf is NaN from b*x ~ 89 on in float32: BCE-with-logits' gradient at large logits).
    Tensor linear = x.full_like(threshold).lt(bx);
    Tensor e = linear.where(x.full_like(threshold), bx).exp();
    return linear.where(x, (e + 1.0).log() * (1.0 / beta));
  });
}

namespace {
// e^x - 1 for x <= 0 without the cancellation of exp(x) - 1 near 0 (relative error ~eps/|x| there):
// Kahan's (u - 1) x / log(u), u = e^x, exact where u rounds to 1 (then x is the answer); below -1 the
// plain difference is accurate. No gradient of its own: its callers set theirs.
Tensor expm1_nonpositive(const Tensor& x) {
  Tensor u = x.exp(), one = x.ones_like();
  Tensor near = x.full_like(-1.0).lt(x).logical_and(u.ne(one));
  Tensor safe_u = near.where(u, x.full_like(0.5));  // the branch not taken sees a harmless value
  Tensor kahan = (safe_u - 1.0) * near.where(x, x.full_like(std::log(0.5))) / safe_u.log();
  return near.where(kahan, u.eq(one).where(x, u - 1.0));
}
}  // namespace

Tensor Tensor::elu(double alpha) const {
  return in_float([alpha](const Tensor& x) {
    Tensor positive = x.zeros_like().lt(x);
    Tensor out = positive.where(x, expm1_nonpositive(positive.where(x.zeros_like(), x)) * alpha);
    // 1 above 0, alpha e^x = out + alpha at or below it (PyTorch's rule at 0, too).
    detail::set_elementwise_gradient(out, x, [alpha](const Tensor& v, const Tensor& y) {
      return v.zeros_like().lt(v).where(v.ones_like(), y + alpha);
    });
    return out;
  });
}
Tensor Tensor::selu() const {
  constexpr double kAlpha = 1.6732632423543772848170429916717, kScale = 1.0507009873554804934193349852946;
  return elu(kAlpha) * kScale;
}
Tensor Tensor::hardtanh(double min_val, double max_val) const {
  if (min_val > max_val) throw Error(kiln::cat("hardtanh: min_val ", min_val, " is above max_val ", max_val));
  Tensor lo = full_like(min_val), hi = full_like(max_val);
  Tensor out = lt(lo).where(lo, hi.lt(*this).where(hi, *this));
  // 1 strictly between the bounds, 0 at and beyond them, as PyTorch's hardtanh_backward.
  detail::set_elementwise_gradient(out, *this, [min_val, max_val](const Tensor& v, const Tensor&) {
    return v.full_like(min_val).lt(v).logical_and(v.lt(v.full_like(max_val))).where(v.ones_like(), v.zeros_like());
  });
  return out;
}
Tensor Tensor::relu6() const { return hardtanh(0.0, 6.0); }
Tensor Tensor::hardsigmoid() const {
  Tensor out = (*this + 3.0).clamp(0.0, 6.0) / 6.0;
  // 1/6 strictly inside (-3, 3), 0 elsewhere (PyTorch's hardsigmoid_backward).
  detail::set_elementwise_gradient(out, *this, [](const Tensor& v, const Tensor&) {
    return v.full_like(-3.0).lt(v).logical_and(v.lt(v.full_like(3.0))).where(v.full_like(1.0 / 6.0), v.zeros_like());
  });
  return out;
}
Tensor Tensor::hardswish() const {
  Tensor out = *this * ((*this + 3.0).clamp(0.0, 6.0) / 6.0);
  // PyTorch's hardswish_backward: 0 below -3, (2x + 3) / 6 on [-3, 3], 1 above 3.
  detail::set_elementwise_gradient(out, *this, [](const Tensor& v, const Tensor&) {
    return v.lt(v.full_like(-3.0)).where(v.zeros_like(), v.full_like(3.0).lt(v).where(v.ones_like(), (v * 2.0 + 3.0) / 6.0));
  });
  return out;
}
Tensor Tensor::mish() const { return in_float([](const Tensor& x) { return x * x.softplus().tanh(); }); }

Tensor Tensor::erf() const {
  if (detail::is_narrow_float(dtype()))
    return in_float([](const Tensor& x) { return x.erf(); });
  // Abramowitz & Stegun 7.1.26 is too coarse for float32 (1.5e-7 absolute is fine, but relative error near
  // 0 matters for gelu), so: erf(x) = sign(x) * (1 - t*exp(-x^2 + P(t))) with Numerical Recipes' erfc
  // Chebyshev fit, |relative error| < 1.2e-7.
  Tensor x = cast(to_floating(dtype()));
  Tensor z = x.abs();
  Tensor t = (z * 0.5 + 1.0).reciprocal();
  const double c[] = {-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
                      0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277};
  Tensor poly = t * c[9];
  for (int i = 8; i >= 1; --i) poly = (poly + c[i]) * t;
  poly = poly + c[0];
  Tensor erfc = t * (-(z * z) + poly).exp();
  Tensor r = -erfc + 1.0;
  Tensor fit = x.lt(x.zeros_like()).where(-r, r);
  // Near 0, 1 - erfc loses the relative accuracy (erf(1e-4) would be off in the 4th digit): there the
  // Maclaurin series 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)), 12 terms (below 1e-16 for |x| < 0.5).
  // The series sees 0 where it is not taken: its x^23 overflows from |x| ~ 50 on, and the gradient where
  // passes to the branch it does not take (0) would meet that inf (0 * inf is NaN).
  Tensor use_series = z.lt(z.full_like(0.5));
  Tensor xs = use_series.where(x, x.zeros_like());
  // In Horner's form: the terms one by one (x^23 / 11!) were subnormal for |x| below ~0.02, and
  // subnormal arithmetic costs ~100 cycles on x86 (a GELU of small activations ran 20x slower).
  double factorial = 1;
  std::vector<double> coefficients;  // (-1)^n / (n! (2n+1))
  for (int n = 0; n < 12; ++n) {
    if (n > 0) factorial *= n;
    coefficients.push_back((n % 2 ? -1.0 : 1.0) / (factorial * (2 * n + 1)));
  }
  Tensor x2 = xs * xs, sum = x2.full_like(coefficients.back());
  for (int n = 10; n >= 0; --n) sum = sum * x2 + coefficients[n];
  Tensor series = xs * sum * (2.0 / std::sqrt(std::numbers::pi));
  Tensor out = use_series.where(series, fit);
  detail::set_elementwise_gradient(out, x, [](const Tensor& v, const Tensor&) {
    return (-(v * v)).exp() * (2.0 / std::sqrt(std::numbers::pi));
  });
  return out;
}

Tensor detail::signed_zero(const Tensor& x) {
  DType bits = x.dtype().itemsize() == 2 ? dtypes::int16 : x.dtype().itemsize() == 4 ? dtypes::int32 : dtypes::int64;
  Tensor negative = x.bitcast(bits).lt(Tensor::zeros({}, bits, x.device()));
  return negative.where(x.full_like(-0.0), x.zeros_like());
}

Tensor Tensor::trunc() const { return is_float(dtype()) ? unary(Op::TRUNC) : *this; }

Tensor Tensor::floor() const {
  if (!is_float(dtype())) return *this;
  Tensor t = trunc();
  return lt(t).where(t - 1.0, t);
}

Tensor Tensor::ceil() const {
  if (!is_float(dtype())) return *this;
  Tensor t = trunc();
  return t.lt(*this).where(t + 1.0, t);
}

Tensor Tensor::round() const {
  if (!is_float(dtype())) return *this;
  // Half to even: take floor(x + 0.5), and step back one on exact ties that landed on an odd number.
  Tensor f = (*this + 0.5).floor();
  Tensor tie = (f - *this).eq(full_like(0.5));
  Tensor odd = (f * 0.5).floor().ne(f * 0.5);
  Tensor r = tie.logical_and(odd).where(f - 1.0, f);
  // A zero result keeps x's sign, as torch.round does (-0.5, -0.4 and -0.0 round to -0).
  r = r.eq(zeros_like()).where(detail::signed_zero(*this), r);
  // From 2^(mantissa bits) on every value is an integer, and x + 0.5 would round: keep x (as trunc(x),
  // which is x there, so that the gradient is 0 everywhere, as in torch).
  double integral_from = dtype().scalar == ScalarType::Float64 ? 4503599627370496.0 : 8388608.0;
  return abs().lt(full_like(integral_from)).where(r, trunc());
}

Tensor Tensor::clamp(double lo, double hi) const {
  if (lo > hi) throw Error(kiln::cat("clamp: lower bound ", lo, " is above upper bound ", hi));
  return maximum(full_like(lo)).minimum(full_like(hi));
}

// (a < b) | (a == b), exact for NaN. relu runs this in every layer, so the three nodes are made from one
// broadcast and promotion, without the intermediate tensors of lt(o).logical_or(eq(o)) (whose graph,
// DETACH wrappers under no_grad included, this is).
Tensor Tensor::le(const Tensor& o) const {
  Operands p = operands(o, Op::CMPLT, "le");
  UOpPtr lt = detail::no_grad_wrap(UOp::make(Op::CMPLT, dtypes::bool_, detail::sources(p.a, p.b)));
  UOpPtr eq = detail::no_grad_wrap(UOp::make(Op::CMPEQ, dtypes::bool_, detail::sources(std::move(p.a), std::move(p.b))));
  return derived(UOp::make(Op::OR, dtypes::bool_, detail::sources(std::move(lt), std::move(eq))), std::move(p.shape));
}
Tensor Tensor::gt(const Tensor& o) const { return o.lt(*this); }
Tensor Tensor::ge(const Tensor& o) const { return o.le(*this); }

namespace {
enum class Cmp { LT, LE, GT, GE, EQ, NE };

// A float tensor compares with the scalar rounded to its dtype, as torch's does. An integer (or bool)
// tensor compares exactly: against a fraction, x < 2.5 is x < 3 and x == 2.5 is false; against a value
// outside the dtype's range (or NaN) every element has the same answer. So no integer is ever rounded
// through a float, and scalar_like never meets a value it cannot hold.
Tensor compare_scalar(const Tensor& t, Cmp cmp, double s) {
  auto apply = [cmp](const Tensor& a, const Tensor& b) {
    switch (cmp) {
      case Cmp::LT: return a.lt(b);
      case Cmp::LE: return a.le(b);
      case Cmp::GT: return a.gt(b);
      case Cmp::GE: return a.ge(b);
      case Cmp::EQ: return a.eq(b);
      case Cmp::NE: return a.ne(b);
    }
    throw Error("compare: unknown comparison");
  };
  if (is_float(t.dtype())) return apply(t, t.full_like(s));
  Tensor x = is_bool(t.dtype()) ? t.cast(dtypes::int32) : t;  // False/True compare as 0/1
  auto all = [&](bool v) { return Tensor::full(t.shape(), v ? 1 : 0, dtypes::bool_, t.device()); };
  if (std::isnan(s)) return all(cmp == Cmp::NE);
  double bound = s;  // an integer with the same answer for every integer element
  if (std::floor(s) != s) {
    if (cmp == Cmp::EQ || cmp == Cmp::NE) return all(cmp == Cmp::NE);
    bound = cmp == Cmp::LT || cmp == Cmp::GE ? std::ceil(s) : std::floor(s);
  }
  DType d = x.dtype();
  double above = std::ldexp(1.0, static_cast<int>(d.itemsize()) * 8 - (is_unsigned(d) ? 0 : 1));  // first value past the range
  if (bound >= above) return all(cmp == Cmp::LT || cmp == Cmp::LE || cmp == Cmp::NE);
  if (bound < as_double(lowest(d))) return all(cmp == Cmp::GT || cmp == Cmp::GE || cmp == Cmp::NE);
  return apply(x, x.full_like(bound));
}
}  // namespace

Tensor Tensor::lt(double s) const { return compare_scalar(*this, Cmp::LT, s); }
Tensor Tensor::le(double s) const { return compare_scalar(*this, Cmp::LE, s); }
Tensor Tensor::gt(double s) const { return compare_scalar(*this, Cmp::GT, s); }
Tensor Tensor::ge(double s) const { return compare_scalar(*this, Cmp::GE, s); }
Tensor Tensor::eq(double s) const { return compare_scalar(*this, Cmp::EQ, s); }
Tensor Tensor::ne(double s) const { return compare_scalar(*this, Cmp::NE, s); }

Tensor operator==(const Tensor& a, const Tensor& b) { return a.eq(b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return a.ne(b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return a.lt(b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return a.le(b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return a.gt(b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return a.ge(b); }
Tensor operator==(const Tensor& t, double s) { return t.eq(s); }
Tensor operator!=(const Tensor& t, double s) { return t.ne(s); }
Tensor operator<(const Tensor& t, double s) { return t.lt(s); }
Tensor operator<=(const Tensor& t, double s) { return t.le(s); }
Tensor operator>(const Tensor& t, double s) { return t.gt(s); }
Tensor operator>=(const Tensor& t, double s) { return t.ge(s); }
Tensor operator==(double s, const Tensor& t) { return t.eq(s); }
Tensor operator!=(double s, const Tensor& t) { return t.ne(s); }
Tensor operator<(double s, const Tensor& t) { return t.gt(s); }
Tensor operator<=(double s, const Tensor& t) { return t.ge(s); }
Tensor operator>(double s, const Tensor& t) { return t.lt(s); }
Tensor operator>=(double s, const Tensor& t) { return t.le(s); }
Tensor operator&(const Tensor& a, const Tensor& b) { return a.bitwise_and(b); }
Tensor operator|(const Tensor& a, const Tensor& b) { return a.bitwise_or(b); }
Tensor operator^(const Tensor& a, const Tensor& b) { return a.bitwise_xor(b); }
Tensor operator~(const Tensor& t) { return t.bitwise_not(); }

Tensor Tensor::logical_and(const Tensor& o) const { return cast(dtypes::bool_).binary(Op::AND, o.cast(dtypes::bool_), "logical_and"); }
Tensor Tensor::logical_or(const Tensor& o) const { return cast(dtypes::bool_).binary(Op::OR, o.cast(dtypes::bool_), "logical_or"); }
Tensor Tensor::logical_not() const { return cast(dtypes::bool_).eq(zeros(shape(), dtypes::bool_, device())); }

namespace {
void require_integer(const Tensor& t, const char* op) {
  if (is_float(t.dtype())) throw Error(kiln::cat(op, ": needs integer or bool tensors, got ", t.dtype().name()));
}
}  // namespace

Tensor Tensor::bitwise(Op op, const Tensor& other, const char* name) const {
  require_integer(*this, name);
  require_integer(other, name);
  return binary(op, other, name);
}

Tensor Tensor::bitwise_and(const Tensor& o) const { return bitwise(Op::AND, o, "bitwise_and"); }
Tensor Tensor::bitwise_or(const Tensor& o) const { return bitwise(Op::OR, o, "bitwise_or"); }
Tensor Tensor::bitwise_xor(const Tensor& o) const { return bitwise(Op::XOR, o, "bitwise_xor"); }
Tensor Tensor::bitwise_not() const {
  require_integer(*this, "bitwise_not");
  if (is_bool(dtype())) return logical_not();
  return bitwise_xor(constant(int64_t{-1}, dtype(), shape(), device_uop()));
}

Tensor Tensor::shift(Op op, int64_t bits, const char* name) const {
  require_integer(*this, name);
  int64_t width = static_cast<int64_t>(dtype().itemsize() * 8);
  if (bits < 0 || bits >= width)
    throw Error(kiln::cat(name, ": shift ", bits, " is outside 0..", width - 1, " for ", dtype().name()));
  return binary(op, full(shape(), static_cast<double>(bits), dtype(), device()), name);
}

Tensor Tensor::shl(int64_t bits) const { return shift(Op::SHL, bits, "shl"); }
Tensor Tensor::shr(int64_t bits) const { return shift(Op::SHR, bits, "shr"); }

}  // namespace kiln
