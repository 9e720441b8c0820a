// kiln against libtorch: reductions (with several axes, keepdim and negative axes), softmax and its
// relatives, cumsum, argmax/argmin, movement ops and slicing, matmul, conv2d and pooling.
#include <algorithm>

#include "oracle.h"

namespace kiln::oracle {
namespace {

using Ts = std::vector<at::ScalarType>;


// --- reductions ------------------------------------------------------------------------------------

struct Axes {
  std::vector<int64_t> axes;  // {} = every axis
  bool keepdim;
};
const std::vector<Axes> kAxes = {{{}, false}, {{0}, true}, {{-1}, false}, {{0, 2}, false}, {{1, -1}, true}, {{}, true}, {{-3, -2, -1}, false}};

std::string axes_text(const Axes& a) {
  std::ostringstream o;
  o << "axes " << shape_text(a.axes) << (a.keepdim ? " keepdim" : "");
  return o.str();
}

// The axes as torch wants them: explicit, each once, non-negative.
std::vector<int64_t> torch_dims(const std::vector<int64_t>& axes, int64_t ndim) {
  std::vector<int64_t> dims;
  if (axes.empty())
    for (int64_t i = 0; i < ndim; ++i) dims.push_back(i);
  for (int64_t a : axes) dims.push_back(a < 0 ? a + ndim : a);
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return dims;
}

// Applies a one-axis torch reduction (prod, any, all take a single dim in libtorch 1.13) over several
// axes, last axis first so the remaining indices stay valid.
at::Tensor each_axis(at::Tensor x, std::vector<int64_t> dims, bool keepdim, const std::function<at::Tensor(const at::Tensor&, int64_t, bool)>& f) {
  if (x.dim() == 0) return f(x, 0, keepdim);
  std::sort(dims.rbegin(), dims.rend());
  for (int64_t d : dims) x = f(x, d, keepdim);
  return x;
}

// How many elements each output of a reduction over `dims` combines.
int64_t reduced_count(const at::Tensor& x, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.size(d);
  return n;
}

// Any order of summing n terms is within n * eps * sum(|x|) of the exact sum (Higham, Accuracy and
// Stability, 4.2), whatever order kiln and libtorch (pairwise) use.
at::Tensor sum_bound(const at::Tensor& x, const std::vector<int64_t>& dims, bool keepdim, double e_c) {
  at::Tensor ax = x.to(at::kDouble).abs();
  return at::sum(ax, dims, keepdim) * (static_cast<double>(reduced_count(x, dims)) * e_c);
}


// Every axes configuration for the main dtype, and a rotating pair of them for each other dtype: each
// reduction compiles its own kernel (~0.3 s), so the full product would cost minutes.
std::vector<std::pair<Axes, at::ScalarType>> axes_and_dtypes(at::ScalarType main, const Ts& others) {
  std::vector<std::pair<Axes, at::ScalarType>> out;
  for (const Axes& a : kAxes) out.push_back({a, main});
  size_t i = 0;
  for (at::ScalarType dt : others)
    for (int k = 0; k < 2; ++k) out.push_back({kAxes[(3 * i++ + 1) % kAxes.size()], dt});
  return out;
}

TEST_CASE("torch: sum, mean, max, min over axes", "[torch][reduce]") {
  Source src(51);
  size_t i = 0;
  for (const auto& [ax, dt] : axes_and_dtypes(at::kFloat, {at::kDouble, at::kHalf, at::kBFloat16, at::kInt, at::kChar, at::kByte, at::kBool})) {
    Layout layout = layout_at(i++);
    Input x = src.input({3, 4, 5}, dt, layout, Values::Normal);  // NaN and infinities included
    std::vector<int64_t> dims = torch_dims(ax.axes, 3);
    INFO(name(dt) << " " << axes_text(ax) << " " << name(layout));
    at::Tensor s = torch_narrow([&](const std::vector<at::Tensor>& in) { return at::sum(in[0], dims, ax.keepdim); }, {x.ref});
    // float16/bfloat16: kiln sums in float32 and rounds once, but libtorch 1.13 accumulates a strided
    // float16 sum in float16 (measured: 53 of 120 (3,4,5)->(4) sums off the correctly rounded value, up
    // to 1.6%, where kiln was off in none), so Higham's bound uses the narrow type's eps.
    double e_c = compute_eps(s.scalar_type()) + (is_narrow(dt) ? eps(dt) : 0.0);
    CHECK(mismatch(x.k.sum(ax.axes, ax.keepdim), s, ulps(s.scalar_type(), 0), sum_bound(x.ref, dims, ax.keepdim, e_c)) == "");
    CHECK(mismatch(x.k.max(ax.axes, ax.keepdim), at::amax(x.ref, dims, ax.keepdim)) == "");
    CHECK(mismatch(x.k.min(ax.axes, ax.keepdim), at::amin(x.ref, dims, ax.keepdim)) == "");
    if (at::isFloatingType(dt)) {  // torch.mean refuses integer inputs
      at::Tensor m = torch_narrow([&](const std::vector<at::Tensor>& in) { return at::mean(in[0], dims, ax.keepdim); }, {x.ref});
      at::Tensor bound = sum_bound(x.ref, dims, ax.keepdim, e_c) / static_cast<double>(reduced_count(x.ref, dims)) + m.to(at::kDouble).abs() * e_c;
      CHECK(mismatch(x.k.mean(ax.axes, ax.keepdim), m, ulps(dt, 0), bound) == "");
    }
  }
}

TEST_CASE("torch: prod over axes", "[torch][reduce]") {
  Source src(52);
  size_t i = 0;
  for (const auto& [ax, dt] : axes_and_dtypes(at::kFloat, {at::kDouble, at::kHalf, at::kInt, at::kChar, at::kBool})) {
    Layout layout = layout_at(i++);
    // Integers in -3..3 so that a product of 60 stays inside int64 (overflow is undefined in libtorch).
    Input x = src.input({3, 4, 5}, dt, layout, Values::Finite);
    if (!at::isFloatingType(dt) && dt != at::kBool) {
      at::Tensor v = at::randint(-3, 4, {3, 4, 5}, src.gen(), at::TensorOptions().dtype(dt));
      x = {v, to_kiln(v)};
    }
    std::vector<int64_t> dims = torch_dims(ax.axes, 3);
    INFO(name(dt) << " " << axes_text(ax) << " " << name(layout));
    at::Tensor p = torch_narrow(
        [&](const std::vector<at::Tensor>& in) {
          return each_axis(in[0], dims, ax.keepdim, [](const at::Tensor& t, int64_t d, bool k) { return at::prod(t, d, k); });
        },
        {x.ref});
    // Each product rounds once: n factors are within (n-1) * eps relative of the exact product.
    Tol tol = ulps(p.scalar_type(), static_cast<double>(reduced_count(x.ref, dims)));
    CHECK(mismatch(x.k.prod(ax.axes, ax.keepdim), p, tol) == "");
  }
}

TEST_CASE("torch: any and all over axes", "[torch][reduce]") {
  Source src(53);
  size_t i = 0;
  // torch.any/all of a uint8 tensor return uint8 (0 or 1), of every other dtype bool.
  for (const auto& [ax, dt] : axes_and_dtypes(at::kBool, {at::kFloat, at::kInt, at::kByte})) {
    Layout layout = layout_at(i++);
    // Mostly-true inputs, so that all() is not always false: bool from 3 of 4 draws, numbers with zeros.
    at::Tensor v = at::randint(0, 4, {3, 4, 5}, src.gen(), at::TensorOptions().dtype(at::kLong));
    v = dt == at::kBool ? v.ne(0) : (v - 1).clamp_min(0).to(dt);
    if (dt == at::kFloat) v.view({-1})[7] = NAN;  // NaN counts as true
    Input x{v, to_kiln(v)};
    if (layout == Layout::Flipped) x = {v.flip({0, 2}), x.k.flip({0, 2})};
    std::vector<int64_t> dims = torch_dims(ax.axes, 3);
    INFO(name(dt) << " " << axes_text(ax) << " " << (layout == Layout::Flipped ? "flipped" : "contiguous"));
    auto any = [](const at::Tensor& t, int64_t d, bool k) { return at::any(t, d, k); };
    auto all = [](const at::Tensor& t, int64_t d, bool k) { return at::all(t, d, k); };
    CHECK(mismatch(x.k.any(ax.axes, ax.keepdim), each_axis(x.ref, dims, ax.keepdim, any)) == "");
    CHECK(mismatch(x.k.all(ax.axes, ax.keepdim), each_axis(x.ref, dims, ax.keepdim, all)) == "");
  }
}

TEST_CASE("torch: var and std with correction", "[torch][reduce]") {
  Source src(54);
  size_t i = 0;
  for (const auto& [ax, dt] : axes_and_dtypes(at::kFloat, {at::kDouble, at::kHalf, at::kBFloat16})) {
    int64_t correction = static_cast<int64_t>(i % 3);
    Layout layout = layout_at(i++);
    Input x = src.input({3, 4, 5}, dt, layout, Values::Finite);
    std::vector<int64_t> dims = torch_dims(ax.axes, 3);
    INFO(name(dt) << " " << axes_text(ax) << " correction " << correction << " " << name(layout));
    auto var = [&](const std::vector<at::Tensor>& in) { return at::var(in[0], dims, c10::optional<int64_t>(correction), ax.keepdim); };
    auto std_ = [&](const std::vector<at::Tensor>& in) { return at::std(in[0], dims, c10::optional<int64_t>(correction), ax.keepdim); };
    // kiln: two passes (mean, then squared deviations); torch: Welford. Both are within a few n*eps
    // of the exact variance relative to it for data like this (condition number ~1).
    double n = static_cast<double>(reduced_count(x.ref, dims));
    Tol tol = ulps(dt, 4 * (n + 4));
    CHECK(mismatch(x.k.var(ax.axes, ax.keepdim, static_cast<double>(correction)), torch_narrow(var, {x.ref}), tol) == "");
    CHECK(mismatch(x.k.std(ax.axes, ax.keepdim, static_cast<double>(correction)), torch_narrow(std_, {x.ref}), tol) == "");
  }
}

TEST_CASE("torch: var with correction at or above the count", "[torch][reduce]") {
  // n - correction = 0: 0/0 = NaN for a constant slice, x/0 = inf otherwise. Corrections above n
  // divide by max(0, n - correction) on both sides: the same inf/NaN.
  Source src(55);
  Input x = src.input({2, 3}, at::kFloat, Layout::Permuted, Values::Finite);
  at::Tensor c = at::ones({2, 3});
  // The finite results (std over 3 with correction 2) round differently in two passes and in Welford,
  // as in the test above; inf and NaN must match exactly.
  Tol tol = ulps(at::kFloat, 4 * (3 + 4));
  for (int64_t correction : {2, 3, 7}) {
    INFO("correction " << correction);
    CHECK(mismatch(x.k.var({0}, false, static_cast<double>(correction)), at::var(x.ref, {0}, c10::optional<int64_t>(correction), false), tol) == "");
    CHECK(mismatch(to_kiln(c).var({0}, false, static_cast<double>(correction)), at::var(c, {0}, c10::optional<int64_t>(correction), false), tol) == "");
    CHECK(mismatch(x.k.std({1}, true, static_cast<double>(correction)), at::std(x.ref, {1}, c10::optional<int64_t>(correction), true), tol) == "");
  }
}

TEST_CASE("torch: reductions over size-0 and size-1 axes", "[torch][reduce]") {
  Source src(56);
  Input x = src.input({0, 3}, at::kFloat), y = src.input({2, 1, 3}, at::kFloat, Layout::Permuted);
  CHECK(mismatch(x.k.sum({0}), at::sum(x.ref, {0})) == "");
  CHECK(mismatch(x.k.sum(), at::sum(x.ref)) == "");
  CHECK(mismatch(x.k.prod({0}), at::prod(x.ref, 0)) == "");
  CHECK(mismatch(x.k.mean({0}), at::mean(x.ref, {0})) == "");  // NaN: 0/0
  CHECK(mismatch(x.k.max({1}), at::amax(x.ref, {1})) == "");   // nothing to reduce per output, shape (0,)
  CHECK(mismatch(x.k.any({0}), at::any(x.ref, 0)) == "");
  CHECK(mismatch(x.k.all({0}), at::all(x.ref, 0)) == "");
  CHECK(mismatch(y.k.sum({1}), at::sum(y.ref, {1})) == "");
  CHECK(mismatch(y.k.max({1}, true), at::amax(y.ref, {1}, true)) == "");
  Input s = src.input({}, at::kFloat);
  CHECK(mismatch(s.k.sum(), at::sum(s.ref)) == "");
  CHECK(mismatch(s.k.sum({0}), at::sum(s.ref, {0})) == "");
}

TEST_CASE("torch: argmax and argmin", "[torch][reduce]") {
  Source src(57);
  size_t i = 0;
  for (at::ScalarType dt : {at::kFloat, at::kInt, at::kDouble, at::kChar})
    for (std::optional<int64_t> axis : {std::optional<int64_t>{}, std::optional<int64_t>{0}, std::optional<int64_t>{-1}, std::optional<int64_t>{1}})
      for (bool keepdim : {false, true}) {
        // Every axis on float32 and int32, two of the rest on the others (each is two kernels).
        if (dt != at::kFloat && dt != at::kInt && (i++ % 3) != 0) continue;
        Layout layout = layout_at(i++);
        Input x = src.input({3, 4, 5}, dt, layout, Values::Normal);
        if (!at::isFloatingType(dt)) {  // few distinct values: ties, which both report by first index
          at::Tensor v = at::randint(0, 4, {3, 4, 5}, src.gen(), at::TensorOptions().dtype(dt));
          x = {v, to_kiln(v)};
        }
        c10::optional<int64_t> dim = axis ? c10::optional<int64_t>(*axis) : c10::nullopt;
        // With no axis, torch (1.13) ignores keepdim and returns a 0-d index; kiln keeps the dimensions.
        if (!axis && keepdim) continue;
        INFO(name(dt) << " axis " << (axis ? std::to_string(*axis) : "none") << (keepdim ? " keepdim" : "") << " " << name(layout));
        CHECK(mismatch(x.k.argmax(axis, keepdim), at::argmax(x.ref, dim, keepdim)) == "");
        CHECK(mismatch(x.k.argmin(axis, keepdim), at::argmin(x.ref, dim, keepdim)) == "");
      }
}

TEST_CASE("torch: softmax, log_softmax and logsumexp", "[torch][reduce]") {
  Source src(58);
  size_t i = 0;
  for (at::ScalarType dt : float_dtypes)
    for (int64_t axis : {0, -1, 1}) {
      if (dt != at::kFloat && axis != (i % 3 == 0 ? 0 : -1)) continue;  // every axis on float32, one on the others
      Layout layout = layout_at(i++);
      Input x = src.input({3, 4, 5}, dt, layout, Values::Finite);
      double e_c = compute_eps(dt), n = static_cast<double>(x.ref.size(axis));
      double mx = x.ref.abs().max().item<double>();
      INFO(name(dt) << " axis " << axis << " " << name(layout));
      // exp(x - max) has relative error ~ eps * |x - max| <= 2 max|x| eps (as exp above), and the
      // normalizing sum adds n eps: relative to each probability.
      at::Tensor sm = torch_narrow([&](const std::vector<at::Tensor>& in) { return at::softmax(in[0], axis); }, {x.ref});
      CHECK(mismatch(x.k.softmax(axis), sm, ulps(dt, 8), sm.to(at::kDouble).abs() * ((2 * mx + n + 8) * e_c)) == "");
      // x - logsumexp(x): the same errors, absolute.
      Tol ltol = ulps(dt, 8);
      ltol.atol += (2 * mx + n + 8) * e_c;
      at::Tensor lsm = torch_narrow([&](const std::vector<at::Tensor>& in) { return at::log_softmax(in[0], axis); }, {x.ref});
      CHECK(mismatch(x.k.log_softmax(axis), lsm, ltol) == "");
      for (const Axes& ax : {Axes{{axis}, false}, Axes{{0, -1}, true}, Axes{{}, false}}) {
        if (dt != at::kFloat && ax.axes.size() != 1) continue;
        std::vector<int64_t> dims = torch_dims(ax.axes, 3);
        INFO(axes_text(ax));
        at::Tensor lse = torch_narrow([&](const std::vector<at::Tensor>& in) { return at::logsumexp(in[0], dims, ax.keepdim); }, {x.ref});
        Tol t = ulps(dt, 8);
        t.atol += (mx + static_cast<double>(reduced_count(x.ref, dims)) + 8) * e_c;
        CHECK(mismatch(x.k.logsumexp(ax.axes, ax.keepdim), lse, t) == "");
      }
    }
}

TEST_CASE("torch: softmax and logsumexp with infinities and NaN", "[torch][reduce]") {
  // Rows: masked (-inf entries), all -inf, one +inf, one NaN, ordinary.
  const double inf = INFINITY;
  std::vector<double> rows = {1, -inf, 2, -inf, -inf, -inf, -inf, -inf, 0.5, inf, 1, 2, NAN, 1, 2, 3, -1, 0, 1, 2};
  at::Tensor x = at::tensor(rows, at::kDouble).to(at::kFloat).reshape({5, 4});
  Tensor k = to_kiln(x);
  Tol tol = ulps(at::kFloat, 16);
  CHECK(mismatch(k.softmax(-1), at::softmax(x, -1), tol) == "");
  // log_softmax of the row with +inf is left out: kiln gives -inf for its finite entries (the limit),
  // libtorch NaN (inf - inf inside); see the report.
  at::Tensor keep = at::tensor(std::vector<int64_t>{0, 1, 3, 4});
  CHECK(mismatch(k.log_softmax(-1).gather(0, to_kiln(keep.reshape({4, 1}).expand({4, 4}).contiguous())), at::log_softmax(x, -1).index_select(0, keep),
                 tol) == "");
  CHECK(mismatch(k.logsumexp({-1}), at::logsumexp(x, {-1}), tol) == "");
  CHECK(mismatch(k.logsumexp({0}, true), at::logsumexp(x, {0}, true), tol) == "");
}

TEST_CASE("torch: cumsum", "[torch][reduce]") {
  Source src(59);
  size_t i = 0;
  for (at::ScalarType dt : {at::kFloat, at::kDouble, at::kHalf, at::kInt, at::kChar, at::kBool})
    for (int64_t axis : {0, -1, 1}) {
      if (dt != at::kFloat && axis != (i % 2 ? 1 : -1)) continue;  // every axis on float32, one on the others
      Layout layout = layout_at(i++);
      Input x = src.input({3, 4, 5}, dt, layout, Values::Finite);
      INFO(name(dt) << " axis " << axis << " " << name(layout));
      at::Tensor c = torch_narrow([&](const std::vector<at::Tensor>& in) { return at::cumsum(in[0], axis); }, {x.ref});
      // Each prefix is a sum of at most n terms: Higham's bound with the prefix sums of |x|.
      double n = static_cast<double>(x.ref.size(axis));
      at::Tensor bound = at::cumsum(x.ref.to(at::kDouble).abs(), axis) * (n * compute_eps(c.scalar_type()));
      CHECK(mismatch(x.k.cumsum(axis), c, ulps(c.scalar_type(), 1), bound) == "");
    }
  Input s = src.input({}, at::kFloat);
  CHECK(mismatch(s.k.cumsum(0), at::cumsum(s.ref, 0)) == "");
  Input e = src.input({0, 3}, at::kFloat);
  CHECK(mismatch(e.k.cumsum(0), at::cumsum(e.ref, 0)) == "");
}

// --- movement --------------------------------------------------------------------------------------

TEST_CASE("torch: reshape, permute, transpose and expand", "[torch][movement]") {
  Source src(61);
  Batch batch;
  std::string ctx;
  size_t i = 0;
  for (Layout layout : all_layouts) {
    Input x = src.input({2, 3, 4}, i++ % 2 ? at::kFloat : at::kLong, layout);
    ctx = cat(name(layout));
    for (std::vector<int64_t> s : {std::vector<int64_t>{4, 6}, {-1, 2}, {24}, {2, 1, 12}, {3, 8}, {4, -1, 3}})
      KILN_BATCH_CHECK(batch, cat(ctx, " to ", shape_text(s)), x.k.reshape(s), x.ref.reshape(s));
    for (std::vector<int64_t> p : {std::vector<int64_t>{2, 0, 1}, {1, 0, 2}, {-1, -3, -2}})
      KILN_BATCH_CHECK(batch, cat(ctx, " order ", shape_text(p)), x.k.permute(p), x.ref.permute(p));
    KILN_BATCH_CHECK(batch, ctx, x.k.transpose(0, 2), x.ref.transpose(0, 2));
    KILN_BATCH_CHECK(batch, ctx, x.k.transpose(-1, -2), x.ref.transpose(-1, -2));
    // A movement of a movement: reshape of a transpose of kiln's view.
    KILN_BATCH_CHECK(batch, ctx, x.k.transpose(0, 1).reshape({6, 4}), x.ref.transpose(0, 1).reshape({6, 4}));
  }
  Input a = src.input({3, 1}, at::kFloat, Layout::Flipped);
  ctx = "expand";
  KILN_BATCH_CHECK(batch, ctx, a.k.expand({2, 3, 4}), a.ref.expand({2, 3, 4}));
  KILN_BATCH_CHECK(batch, ctx, a.k.expand({-1, 5}), a.ref.expand({-1, 5}));
  Input b = src.input({1}, at::kInt);
  KILN_BATCH_CHECK(batch, ctx, b.k.expand({5}), b.ref.expand({5}));
  Input c = src.input({0, 1}, at::kFloat);
  KILN_BATCH_CHECK(batch, ctx, c.k.expand({0, 4}), c.ref.expand({0, 4}));
  KILN_BATCH_CHECK(batch, ctx, c.k.reshape({1, 0, 7}), c.ref.reshape({1, 0, 7}));
  batch.run();
}

TEST_CASE("torch: pad", "[torch][movement]") {
  Source src(62);
  Batch batch;
  std::string ctx;
  // torch's pad list runs from the last axis: (last_before, last_after, previous_before, ...).
  auto torch_pad = [](const Pairs& p) {
    std::vector<int64_t> out;
    for (size_t i = p.size(); i-- > 0;) out.insert(out.end(), {p[i].first, p[i].second});
    return out;
  };
  struct PadCase {
    std::vector<int64_t> shape;
    Pairs pad;
    double value;
    at::ScalarType dtype;
  };
  size_t i = 0;
  for (const PadCase& c : {PadCase{{3, 4}, {{1, 2}, {0, 3}}, 0.0, at::kFloat}, PadCase{{3, 4}, {{1, 2}, {0, 3}}, -1.5, at::kFloat},
                           PadCase{{2, 3, 2}, {{0, 0}, {2, 1}, {1, 1}}, 7, at::kInt}, PadCase{{0, 3}, {{1, 1}, {2, 0}}, 2.5, at::kDouble},
                           PadCase{{4}, {{3, 0}}, NAN, at::kFloat}, PadCase{{2, 2}, {{1, 0}, {0, 1}}, -INFINITY, at::kHalf},
                           PadCase{{2, 3}, {{1, 1}, {1, 1}}, 1, at::kBool}}) {
    Layout layout = layout_at(i++);
    Input x = src.input(c.shape, c.dtype, layout);
    ctx = cat(name(c.dtype), " ", shape_text(c.shape), " value ", c.value, " ", name(layout));
    KILN_BATCH_CHECK(batch, ctx, x.k.pad(c.pad, c.value), at::constant_pad_nd(x.ref, torch_pad(c.pad), c.value));
  }
  batch.run();
}

TEST_CASE("torch: shrink, flip, squeeze, unsqueeze and flatten", "[torch][movement]") {
  Source src(63);
  Batch batch;
  std::string ctx;
  size_t i = 0;
  for (Layout layout : all_layouts) {
    Input x = src.input({5, 6, 3}, layout_at(i++) == Layout::Flipped ? at::kHalf : at::kFloat, layout);
    ctx = cat(name(layout));
    KILN_BATCH_CHECK(batch, ctx, x.k.shrink({{1, 4}, {0, 6}, {2, 3}}), x.ref.narrow(0, 1, 3).narrow(2, 2, 1));
    KILN_BATCH_CHECK(batch, ctx, x.k.shrink({{0, 0}, {2, 5}, {0, 3}}), x.ref.narrow(0, 0, 0).narrow(1, 2, 3));
    for (std::vector<int64_t> axes : {std::vector<int64_t>{0}, {-1}, {0, 2}, {}, {0, 1, 2}})
      KILN_BATCH_CHECK(batch, cat(ctx, " axes ", shape_text(axes)), x.k.flip(axes), x.ref.flip(axes));
    KILN_BATCH_CHECK(batch, ctx, x.k.unsqueeze(0), x.ref.unsqueeze(0));
    KILN_BATCH_CHECK(batch, ctx, x.k.unsqueeze(-1), x.ref.unsqueeze(-1));
    KILN_BATCH_CHECK(batch, ctx, x.k.unsqueeze(2), x.ref.unsqueeze(2));
    KILN_BATCH_CHECK(batch, ctx, x.k.flatten(), x.ref.flatten());
    KILN_BATCH_CHECK(batch, ctx, x.k.flatten(1), x.ref.flatten(1));
    KILN_BATCH_CHECK(batch, ctx, x.k.flatten(0, 1), x.ref.flatten(0, 1));
    KILN_BATCH_CHECK(batch, ctx, x.k.flatten(-2, -1), x.ref.flatten(-2, -1));
  }
  Input y = src.input({1, 3, 1, 2}, at::kInt, Layout::Permuted);
  ctx = "squeeze";
  KILN_BATCH_CHECK(batch, ctx, y.k.squeeze(), y.ref.squeeze());
  KILN_BATCH_CHECK(batch, ctx, y.k.squeeze(0), y.ref.squeeze(0));
  KILN_BATCH_CHECK(batch, ctx, y.k.squeeze(-2), y.ref.squeeze(-2));
  KILN_BATCH_CHECK(batch, ctx, y.k.squeeze(1), y.ref.squeeze(1));  // size 3: unchanged
  Input s = src.input({}, at::kFloat);
  ctx = "0-d";
  KILN_BATCH_CHECK(batch, ctx, s.k.squeeze(), s.ref.squeeze());
  KILN_BATCH_CHECK(batch, ctx, s.k.unsqueeze(0), s.ref.unsqueeze(0));
  KILN_BATCH_CHECK(batch, ctx, s.k.flatten(), s.ref.flatten());
  batch.run();
}

// Python's slice.indices(n) for x[start:stop:step]: the first index taken and how many, written out
// from the language reference (negative values count from the end, then clamp).
std::pair<int64_t, int64_t> python_slice(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) {
  auto clamp = [&](int64_t v, int64_t lo, int64_t hi) {
    if (v < 0) v += n;
    return std::clamp(v, lo, hi);
  };
  if (step > 0) {
    int64_t b = start ? clamp(*start, 0, n) : 0, e = stop ? clamp(*stop, 0, n) : n;
    return {b, e > b ? (e - b - 1) / step + 1 : 0};
  }
  int64_t b = start ? clamp(*start, -1, n - 1) : n - 1, e = stop ? clamp(*stop, -1, n - 1) : -1;
  return {b, b > e ? (b - e - 1) / -step + 1 : 0};
}

// x[start:stop:step] along `dim` with torch's slice, which has no negative steps: those read the
// flipped tensor, where index i sits at n - 1 - i.
at::Tensor torch_slice(const at::Tensor& x, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) {
  int64_t n = x.size(dim);
  auto [first, count] = python_slice(n, start, stop, step);
  if (count == 0) return x.slice(dim, 0, 0);
  if (step > 0) return x.slice(dim, first, first + (count - 1) * step + 1, step);
  int64_t f = n - 1 - first;
  return x.flip({dim}).slice(dim, f, f + (count - 1) * -step + 1, -step);
}

TEST_CASE("torch: slicing with steps, negative steps and out-of-range bounds", "[torch][movement]") {
  Source src(64);
  Batch batch;
  std::string ctx;
  struct S {
    std::optional<int64_t> start, stop;
    int64_t step;
  };
  const std::optional<int64_t> none;
  const std::vector<S> slices = {{none, none, 1},  {1, 5, 1},     {1, none, 2},  {-5, -1, 2},     {none, none, -1}, {5, 1, -2},
                                 {none, none, -3}, {-1, -8, -2},  {10, -10, -3}, {2, 2, 1},       {3, 1, 1},        {1, 3, -1},
                                 {-100, 100, 4},   {6, none, -7}, {none, 3, -2}, {none, -100, 5}, {0, 7, 10}};
  size_t i = 0;
  for (const S& s : slices)
    for (int64_t dim : {1, -1}) {
      Layout layout = layout_at(i++);
      Input x = src.input({3, 7, 4}, i % 3 ? at::kFloat : at::kChar, layout);
      auto text = [](std::optional<int64_t> v) { return v ? std::to_string(*v) : std::string(); };
      ctx = cat("axis ", dim, " [", text(s.start), ":", text(s.stop), ":", s.step, "] ", name(layout));
      KILN_BATCH_CHECK(batch, ctx, x.k.slice(dim, s.start, s.stop, s.step), torch_slice(x.ref, dim, s.start, s.stop, s.step));
    }
  // A slice of a slice, on two axes, with opposite directions.
  Input x = src.input({9, 8}, at::kFloat, Layout::Permuted);
  KILN_BATCH_CHECK(batch, ctx, x.k.slice(0, 1, none, 2).slice(1, none, none, -3).slice(0, none, none, -1),
                   torch_slice(torch_slice(torch_slice(x.ref, 0, 1, none, 2), 1, none, none, -3), 0, none, none, -1));
  batch.run();
}

TEST_CASE("torch: cat and stack", "[torch][movement]") {
  Source src(65);
  Batch batch;
  std::string ctx;
  Input a = src.input({2, 3}, at::kFloat, Layout::Permuted), b = src.input({4, 3}, at::kFloat, Layout::Flipped);
  Input c = src.input({2, 1}, at::kFloat), d = src.input({2, 0}, at::kFloat), e = src.input({2, 5}, at::kFloat, Layout::Strided);
  KILN_BATCH_CHECK(batch, ctx, Tensor::cat({a.k, b.k}, 0), at::cat({a.ref, b.ref}, 0));
  KILN_BATCH_CHECK(batch, ctx, Tensor::cat({a.k, c.k, d.k, e.k}, -1), at::cat({a.ref, c.ref, d.ref, e.ref}, -1));
  KILN_BATCH_CHECK(batch, ctx, Tensor::cat({e.k}, 1), at::cat({e.ref}, 1));
  // Mixed dtypes promote as in binary ops.
  Input f = src.input({2, 3}, at::kInt, Layout::Permuted), g = src.input({1, 3}, at::kHalf), h = src.input({3, 3}, at::kBool);
  KILN_BATCH_CHECK(batch, ctx, Tensor::cat({f.k, a.k}, 0), at::cat({f.ref, a.ref}, 0));
  KILN_BATCH_CHECK(batch, ctx, Tensor::cat({f.k, g.k, h.k}, 0), at::cat({f.ref, g.ref, h.ref}, 0));
  Input p = src.input({2, 3, 4}, at::kLong, Layout::Permuted), q = src.input({2, 3, 4}, at::kLong, Layout::Strided);
  for (int64_t axis : {0, 1, 3, -1, -2}) {
    ctx = cat("stack axis ", axis);
    KILN_BATCH_CHECK(batch, ctx, Tensor::stack({p.k, q.k, p.k}, axis), at::stack({p.ref, q.ref, p.ref}, axis));
  }
  KILN_BATCH_CHECK(batch, ctx, Tensor::cat({p.k, q.k}, 1), at::cat({p.ref, q.ref}, 1));
  batch.run();
}

TEST_CASE("torch: split and chunk", "[torch][movement]") {
  Source src(66);
  Batch batch;
  std::string ctx;
  Input x = src.input({7, 4}, at::kFloat, Layout::Permuted);
  auto same = [&](const std::vector<Tensor>& k, const std::vector<at::Tensor>& t) {
    REQUIRE(k.size() == t.size());
    for (size_t i = 0; i < k.size(); ++i) {
      ctx = cat("piece ", i);
      KILN_BATCH_CHECK(batch, ctx, k[i], t[i]);
    }
  };
  same(x.k.split({2, 0, 5}, 0), at::split_with_sizes(x.ref, {2, 0, 5}, 0));
  same(x.k.split({1, 3}, 1), at::split_with_sizes(x.ref, {1, 3}, 1));
  same(x.k.split({4}, -1), at::split_with_sizes(x.ref, {4}, -1));
  // chunk: pieces of ceil(n / chunks), the last smaller, and fewer pieces when they run out (5 of 3).
  for (auto [chunks, axis] : {std::pair<int64_t, int64_t>{3, 0}, {4, 1}, {7, 0}, {2, -1}, {1, 0}}) {
    ctx = cat("chunk ", chunks, " axis ", axis);
    same(x.k.chunk(chunks, axis), at::chunk(x.ref, chunks, axis));
  }
  Input y = src.input({3, 2}, at::kInt);
  same(y.k.chunk(5, 0), at::chunk(y.ref, 5, 0));
  batch.run();
}

TEST_CASE("torch: repeat", "[torch][movement]") {
  Source src(67);
  Batch batch;
  std::string ctx;
  Input x = src.input({2, 3}, at::kFloat, Layout::Flipped), v = src.input({3}, at::kByte, Layout::Strided);
  for (std::vector<int64_t> r : {std::vector<int64_t>{2, 1}, {1, 3}, {2, 2, 2}, {0, 2}, {1, 1}}) {
    ctx = cat("repeat ", shape_text(r));
    KILN_BATCH_CHECK(batch, ctx, x.k.repeat(r), x.ref.repeat(r));
  }
  KILN_BATCH_CHECK(batch, ctx, v.k.repeat({4}), v.ref.repeat({4}));
  KILN_BATCH_CHECK(batch, ctx, v.k.repeat({2, 3}), v.ref.repeat({2, 3}));
  batch.run();
}

TEST_CASE("torch: gather", "[torch][movement]") {
  Source src(68);
  Batch batch;
  std::string ctx;
  Input x = src.input({4, 5, 6}, at::kFloat, Layout::Permuted);
  struct G {
    int64_t axis;
    std::vector<int64_t> index_shape;
    at::ScalarType index_dtype;
  };
  for (const G& g :
       {G{0, {3, 5, 2}, at::kLong}, G{-1, {4, 2, 7}, at::kLong}, G{1, {2, 8, 6}, at::kInt}, G{2, {1, 1, 1}, at::kInt}, G{0, {0, 5, 6}, at::kLong}}) {
    int64_t n = x.ref.size(g.axis);
    at::Tensor index = at::randint(0, n, g.index_shape, src.gen(), at::TensorOptions().dtype(at::kLong));
    ctx = cat("axis ", g.axis, " index ", shape_text(g.index_shape), " ", name(g.index_dtype));
    // torch.gather takes int64 indices only; kiln's int32 index holds the same values.
    KILN_BATCH_CHECK(batch, ctx, x.k.gather(g.axis, to_kiln(index.to(g.index_dtype))), at::gather(x.ref, g.axis, index));
  }
  Input y = src.input({3, 4}, at::kInt, Layout::Strided);
  at::Tensor index = at::randint(0, 4, {3, 6}, src.gen(), at::TensorOptions().dtype(at::kLong));
  KILN_BATCH_CHECK(batch, ctx, y.k.gather(1, to_kiln(index).flip({0})), at::gather(y.ref, 1, index.flip({0})));
  batch.run();
}

// --- matmul, convolution, pooling ------------------------------------------------------------------

// The worst-case error of a dot product of length k in any order: k * eps * sum |a_i b_i| (Higham 3.1),
// per output element, given |a| @ |b| computed in float64.
at::Tensor dot_bound(const at::Tensor& abs_products, int64_t k, double e) { return abs_products * (static_cast<double>(k + 1) * e); }

TEST_CASE("torch: matmul", "[torch][matmul]") {
  Source src(71);
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{5}, {5}},          {{5}, {5, 3}},       {{4, 5}, {5}},    {{4, 5}, {5, 3}}, {{2, 4, 5}, {5, 3}}, {{2, 1, 4, 5}, {3, 5, 2}},
      {{4, 5}, {2, 5, 3}}, {{3, 4, 0}, {0, 2}}, {{0, 3}, {3, 2}}, {{1, 1}, {1, 1}}, {{7}, {2, 7, 3}},    {{2, 3, 16}, {16}}};
  size_t i = 0;
  for (at::ScalarType dt : {at::kFloat, at::kDouble, at::kLong, at::kInt, at::kHalf, at::kBFloat16})
    for (const auto& [sa, sb] : shapes) {
      if (i++ % 4 != 0 && dt != at::kFloat) continue;  // every shape in float32, a rotating quarter in the others
      Layout la = layout_at(i), lb = layout_at(i / 4 + 2);
      Input a = src.input(sa, dt, la, Values::Finite), b = src.input(sb, dt, lb, Values::Finite);
      INFO(name(dt) << " " << shape_text(sa) << " " << name(la) << " @ " << shape_text(sb) << " " << name(lb));
      at::Tensor expected = torch_narrow([&](const std::vector<at::Tensor>& in) { return at::matmul(in[0], in[1]); }, {a.ref, b.ref});
      if (!at::isFloatingType(dt)) {  // small integers: exact
        CHECK(mismatch(a.k.matmul(b.k), expected) == "");
        continue;
      }
      int64_t k = sa.back();
      at::Tensor abs_products = at::matmul(a.ref.to(at::kDouble).abs(), b.ref.to(at::kDouble).abs());
      // float16/bfloat16: kiln rounds each product to the narrow type before its float32 sum, so each
      // term carries one narrow rounding too: eps(narrow) * sum |a_i b_i| on top.
      double e = compute_eps(dt) + (is_narrow(dt) ? eps(dt) : 0.0);
      CHECK(mismatch(a.k.matmul(b.k), expected, ulps(dt, 0), dot_bound(abs_products, k, e)) == "");
    }
}

TEST_CASE("torch: conv2d", "[torch][conv]") {
  Source src(72);
  struct Conv {
    std::vector<int64_t> input, weight;
    bool bias;
    std::array<int64_t, 2> stride, padding, dilation;
    int64_t groups;
  };
  const std::vector<Conv> convs = {
      {{2, 3, 7, 7}, {4, 3, 3, 3}, true, {1, 1}, {0, 0}, {1, 1}, 1},   // plain, with bias
      {{2, 3, 7, 7}, {4, 3, 3, 3}, false, {2, 2}, {1, 1}, {1, 1}, 1},  // stride and padding
      {{1, 2, 9, 8}, {3, 2, 3, 3}, true, {1, 1}, {2, 2}, {2, 2}, 1},   // dilation
      {{2, 4, 6, 7}, {6, 2, 3, 3}, true, {1, 2}, {1, 0}, {1, 1}, 2},   // groups, uneven stride/padding
      {{1, 3, 5, 5}, {3, 1, 3, 3}, false, {1, 1}, {1, 1}, {1, 1}, 3},  // depthwise
      {{2, 3, 5, 8}, {2, 3, 2, 3}, true, {2, 1}, {0, 1}, {1, 2}, 1},   // rectangular kernel and input
      {{1, 4, 4, 4}, {5, 4, 1, 1}, true, {1, 1}, {0, 0}, {1, 1}, 1},   // 1x1
  };
  size_t i = 0;
  for (const Conv& c : convs)
    for (at::ScalarType dt : {at::kFloat, at::kDouble}) {
      if (dt == at::kDouble && i % 3 != 0) {
        ++i;
        continue;
      }
      Layout layout = layout_at(i++);
      Input x = src.input(c.input, dt, layout, Values::Finite), w = src.input(c.weight, dt, Layout::Flipped, Values::Finite);
      Input b = src.input({c.weight[0]}, dt, Layout::Contiguous, Values::Finite);
      std::optional<Tensor> kb;
      c10::optional<at::Tensor> tb;
      if (c.bias) {
        kb = b.k;
        tb = b.ref;
      }
      INFO(name(dt) << " input " << shape_text(c.input) << " weight " << shape_text(c.weight) << " stride " << shape_text(c.stride) << " padding "
                    << shape_text(c.padding) << " dilation " << shape_text(c.dilation) << " groups " << c.groups << " " << name(layout));
      at::Tensor expected = at::conv2d(x.ref, w.ref, tb, c.stride, c.padding, c.dilation, c.groups);
      // Each output is a dot product of length Cg*R*S (+ the bias): Higham's bound with |x| (*) |w|.
      c10::optional<at::Tensor> abs_bias = c.bias ? c10::optional<at::Tensor>(b.ref.to(at::kDouble).abs()) : c10::nullopt;
      at::Tensor abs_products =
          at::conv2d(x.ref.to(at::kDouble).abs(), w.ref.to(at::kDouble).abs(), abs_bias, c.stride, c.padding, c.dilation, c.groups);
      int64_t k = c.weight[1] * c.weight[2] * c.weight[3] + 1;
      CHECK(mismatch(x.k.conv2d(w.k, kb, c.stride, c.padding, c.dilation, c.groups), expected, {}, dot_bound(abs_products, k, compute_eps(dt))) ==
            "");
    }
}

TEST_CASE("torch: max_pool2d and avg_pool2d", "[torch][pool]") {
  Source src(73);
  struct Pool {
    std::array<int64_t, 2> kernel;
    std::optional<std::array<int64_t, 2>> stride;
    std::array<int64_t, 2> padding;
  };
  const std::vector<Pool> pools = {{{2, 2}, std::nullopt, {0, 0}},
                                   {{3, 3}, std::array<int64_t, 2>{2, 2}, {1, 1}},
                                   {{2, 3}, std::array<int64_t, 2>{1, 2}, {1, 1}},
                                   {{1, 1}, std::nullopt, {0, 0}},
                                   {{3, 2}, std::array<int64_t, 2>{3, 1}, {0, 1}}};
  size_t i = 0;
  for (const Pool& p : pools)
    for (at::ScalarType dt : {at::kFloat, at::kDouble}) {
      Layout layout = layout_at(i++);
      // (N, C, H, W) and (C, H, W); NaN and infinities included (max pooling propagates NaN in both).
      std::vector<int64_t> shape = i % 2 ? std::vector<int64_t>{2, 3, 7, 8} : std::vector<int64_t>{3, 6, 5};
      Input x = src.input(shape, dt, layout, Values::Normal);
      std::vector<int64_t> stride = p.stride ? std::vector<int64_t>{(*p.stride)[0], (*p.stride)[1]} : std::vector<int64_t>{};
      INFO(name(dt) << " " << shape_text(shape) << " kernel " << shape_text(p.kernel) << " stride " << (p.stride ? shape_text(*p.stride) : "default")
                    << " padding " << shape_text(p.padding) << " " << name(layout));
      CHECK(mismatch(x.k.max_pool2d(p.kernel, p.stride, p.padding), at::max_pool2d(x.ref, p.kernel, stride, p.padding)) == "");
      // avg_pool2d (count_include_pad, torch's default): a sum of R*S terms, then a division.
      Input y = src.input(shape, dt, layout, Values::Finite);
      at::Tensor avg = at::avg_pool2d(y.ref, p.kernel, stride, p.padding);
      int64_t k = p.kernel[0] * p.kernel[1];
      at::Tensor bound = at::avg_pool2d(y.ref.to(at::kDouble).abs(), p.kernel, stride, p.padding) * (static_cast<double>(k + 1) * compute_eps(dt));
      CHECK(mismatch(y.k.avg_pool2d(p.kernel, p.stride, p.padding), avg, {}, bound) == "");
    }
}

}  // namespace
}  // namespace kiln::oracle
