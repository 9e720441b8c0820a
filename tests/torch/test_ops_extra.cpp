// kiln against libtorch for the ops added after the first oracle suites: division with rounding,
// shifts by tensors, indexing (index_select, scatter, masked_fill, one_hot, triu/tril), sorting,
// einsum, pooling options, conv_transpose2d, cumulative ops and loss options (windows and resampling:
// test_resample.cpp).
// Forward values and the gradients of sum(f(x) * w) for a random w, in float32 and float64.
#include "check_op.h"
#include "frontend/nn.h"

CATCH_TRANSLATE_EXCEPTION(const c10::Error& e) { return e.what_without_backtrace(); }

namespace kiln::oracle {
namespace {

// --- division ----------------------------------------------------------------------------------

TEST_CASE("torch: div with rounding_mode, floor_divide, remainder and fmod on integers", "[torch][division]") {
  Batch batch;
  Source src(301);
  for (at::ScalarType dt : {at::kChar, at::kShort, at::kInt, at::kLong, at::kByte}) {
    at::Tensor a = src.values({5, 6}, dt, Values::Full);
    at::Tensor b = src.values({6}, dt);
    // No division by zero (an error, below), nor by -1: libtorch's INT_MIN / -1 traps (kiln's wraps, below).
    b = at::where(b.eq(0).logical_or(b.eq(-1)), at::full_like(b, 3), b);
    Tensor ka = to_kiln(a), kb = to_kiln(b);
    std::string d = name(dt);
    batch.check("div trunc " + d, ka.div(kb, "trunc"), at::div(a, b, "trunc"));
    batch.check("div floor " + d, ka.div(kb, "floor"), at::div(a, b, "floor"));
    batch.check("floor_divide " + d, ka.floor_divide(kb), at::floor_divide(a, b));
    batch.check("remainder " + d, ka.remainder(kb), at::remainder(a, b));
    batch.check("fmod " + d, ka.fmod(kb), at::fmod(a, b));
  }
  // Every sign combination, exact multiples included.
  at::Tensor a = from({7, -7, 7, -7, 6, -6, 0, 1, -1, 5, -5}, at::kInt), b = from({2, 2, -2, -2, -3, 3, -5, -7, 7, -1, -1}, at::kInt);
  for (const char* mode : {"trunc", "floor"}) batch.check(cat("div ", mode, " signs"), to_kiln(a).div(to_kiln(b), mode), at::div(a, b, mode));
  batch.check("remainder signs", to_kiln(a).remainder(to_kiln(b)), at::remainder(a, b));
  batch.check("fmod signs", to_kiln(a).fmod(to_kiln(b)), at::fmod(a, b));
  // Mixed dtypes promote like torch.
  batch.check("int8 by int64", to_kiln(a.to(at::kChar)).floor_divide(to_kiln(b.to(at::kLong))), at::floor_divide(a.to(at::kChar), b.to(at::kLong)));
  batch.check("int by float", to_kiln(a).remainder(to_kiln(b.to(at::kFloat))), at::remainder(a, b.to(at::kFloat)));
  batch.run();
  // INT_MIN / -1 wraps (it traps in C): what torch's int64 arithmetic gives too.
  std::vector<int32_t> got = Tensor::from_vector<int32_t>({INT32_MIN}, {1}).div(Tensor::from_vector<int32_t>({-1}, {1}), "trunc").to_vector<int32_t>();
  CHECK(got[0] == INT32_MIN);
}

TEST_CASE("torch: div with rounding_mode, floor_divide, remainder and fmod on floats, specials included", "[torch][division]") {
  Source src(302);
  Batch batch;
  for (at::ScalarType dt : {at::kFloat, at::kDouble, at::kHalf}) {
    at::Tensor a = src.values({4, 7}, dt), b = src.values({7}, dt, Values::NoNaN);
    at::Tensor sa = from({5.5, -5.5, 5.5, -5.5, 1, 0.0, -0.0, 3, -3, INFINITY, 1, 4, -4, 0.3, 1e-3, 7.5, NAN, 1}, dt);
    at::Tensor sb = from({2, 2, -2, -2, 0.1, 3, 3, INFINITY, INFINITY, 2, 0, -2, 2, 0.1, -1e-4, 2.5, 1, -0.0}, dt);
    for (auto [x, y, what] : {std::tuple{a, b, "random"}, std::tuple{sa, sb, "specials"}}) {
      std::string d = cat(name(dt), " ", what);
      Tensor kx = to_kiln(x), ky = to_kiln(y);
      batch.check("div trunc " + d, kx.div(ky, "trunc"), at::div(x, y, "trunc"));
      batch.check("div floor " + d, kx.div(ky, "floor"), at::div(x, y, "floor"));
      batch.check("floor_divide " + d, kx.floor_divide(ky), at::floor_divide(x, y));
      batch.check("remainder " + d, kx.remainder(ky), at::remainder(x, y));
      batch.check("fmod " + d, kx.fmod(ky), at::fmod(x, y));
    }
  }
  batch.run();
  // The sign of a zero result, which value checks do not see.
  std::vector<float> zeros = Tensor::from_vector<float>({-4, 4, -0.5f}, {3}).fmod(Tensor::from_vector<float>({2, -2, 1}, {3})).to_vector<float>();
  CHECK(std::signbit(zeros[0]));
  CHECK(!std::signbit(zeros[1]));
  std::vector<float> q = Tensor::from_vector<float>({-0.5f, 0.5f}, {2}).div(Tensor::from_vector<float>({3, 3}, {2}), "floor").to_vector<float>();
  CHECK(q[0] == -1.0f);
  std::vector<float> z = Tensor::from_vector<float>({0.5f, -0.0f}, {2}).div(Tensor::from_vector<float>({-3, 3}, {2}), "trunc").to_vector<float>();
  CHECK(std::signbit(z[0]));
  CHECK(std::signbit(z[1]));
}

TEST_CASE("torch grad: remainder, fmod and the rounded divisions", "[torch][division][grad]") {
  Source src(303);
  Batch batch;
  for (at::ScalarType dt : kFloats) {
    at::Tensor a = src.values({3, 5}, dt, Values::Finite), b = src.values({5}, dt, Values::Finite) + 0.5;
    check_op(batch, src, cat("remainder ", name(dt)), {a, b}, [](auto& x) { return x[0].remainder(x[1]); },
             [](auto& x) { return at::remainder(x[0], x[1]); }, 4);
    check_op(batch, src, cat("fmod ", name(dt)), {a, b}, [](auto& x) { return x[0].fmod(x[1]); }, [](auto& x) { return at::fmod(x[0], x[1]); }, 4);
    check_op(batch, src, cat("div floor ", name(dt)), {a, b}, [](auto& x) { return x[0].div(x[1], "floor"); },
             [](auto& x) { return at::div(x[0], x[1], "floor"); }, 0);
    check_op(batch, src, cat("add alpha ", name(dt)), {a, b}, [](auto& x) { return x[0].add(x[1], -2.5); },
             [](auto& x) { return at::add(x[0], x[1], -2.5); }, 1);
  }
  batch.run();
}

TEST_CASE("torch: add with alpha, and the errors of the division ops", "[torch][division]") {
  Batch batch;
  at::Tensor a = from({1, -2, 3}, at::kInt), b = from({4, 5, -6}, at::kInt);
  batch.check("add int alpha 3", to_kiln(a).add(to_kiln(b), 3), at::add(a, b, 3));
  batch.check("add float alpha", to_kiln(a.to(at::kFloat)).add(to_kiln(b), 0.5), at::add(a.to(at::kFloat), b, 0.5));
  batch.run();
  Tensor ka = to_kiln(a), zero = to_kiln(from({1, 0, 2}, at::kInt));
  CHECK_THROWS_WITH(ka.div(zero, "trunc"), Catch::Contains("division by zero") && Catch::Contains("1 of the 3"));
  CHECK_THROWS_WITH(ka.remainder(zero), Catch::Contains("remainder") && Catch::Contains("division by zero"));
  CHECK_THROWS_WITH(ka.fmod(zero), Catch::Contains("fmod"));
  CHECK_THROWS_WITH(ka.div(ka, "round"), Catch::Contains("rounding_mode \"round\"") && Catch::Contains("\"trunc\""));
  CHECK_THROWS_WITH(ka.add(ka, 0.5), Catch::Contains("alpha 0.5 is not an integer"));
}

TEST_CASE("torch: shifts by a tensor of amounts", "[torch][elementwise]") {
  Source src(304);
  Batch batch;
  for (at::ScalarType dt : {at::kChar, at::kShort, at::kInt, at::kLong, at::kByte}) {
    int64_t width = static_cast<int64_t>(c10::elementSize(dt)) * 8;
    at::Tensor x = src.values({3, 8}, dt, Values::Full);
    at::Tensor n = at::randint(0, width, {8}, src.gen(), at::TensorOptions().dtype(at::kLong)).to(dt);
    batch.check(cat("shl ", name(dt)), to_kiln(x).shl(to_kiln(n)), at::bitwise_left_shift(x, n));
    batch.check(cat("shr ", name(dt)), to_kiln(x).shr(to_kiln(n)), at::bitwise_right_shift(x, n));
  }
  batch.run();
  // Out of range amounts shift everything out.
  Tensor x = Tensor::from_vector<int32_t>({5, -5, 5, -5}, {4}), n = Tensor::from_vector<int32_t>({32, 40, -1, 33}, {4});
  CHECK(x.shl(n).to_vector<int32_t>() == std::vector<int32_t>{0, 0, 0, 0});
  CHECK(x.shr(n).to_vector<int32_t>() == std::vector<int32_t>{0, -1, 0, -1});
  CHECK_THROWS_WITH(Tensor::from_vector<float>({1}, {1}).shl(n), Catch::Contains("shl: needs integer tensors"));
}

// --- activations -----------------------------------------------------------------------------------

TEST_CASE("torch: gelu with approximate tanh", "[torch][elementwise]") {
  Source src(305);
  Batch batch;
  for (at::ScalarType dt : kFloats) {
    at::Tensor x = at::cat({src.values({20}, dt, Values::Finite), from({0, -0.0, 30, -30, 1e6, -1e6}, dt)});
    check_op(batch, src, cat("gelu tanh ", name(dt)), {x}, [](auto& v) { return v[0].gelu("tanh"); },
             [](auto& v) { return at::gelu(v[0], "tanh"); }, 32);
  }
  batch.run();
  CHECK_THROWS_WITH(Tensor::ones({2}).gelu("fast"), Catch::Contains("gelu: approximate \"fast\""));
}

// --- indexing --------------------------------------------------------------------------------------

TEST_CASE("torch: index_select, scatter, scatter_add and masked_fill, with gradients", "[torch][indexing]") {
  Source src(306);
  Batch batch;
  for (at::ScalarType dt : kFloats) {
    at::Tensor x = src.values({4, 5}, dt, Values::Finite);
    at::Tensor idx = from({3, 0, 3, 1}, at::kLong);
    for (int64_t axis : {0, 1, -1})
      check_op(batch, src, cat("index_select axis ", axis, " ", name(dt)), {x}, [&](auto& v) { return v[0].index_select(axis, to_kiln(idx)); },
               [&](auto& v) { return at::index_select(v[0], axis, idx); }, 0);
    // scatter: unique positions along axis 0 per column; index smaller than src and self.
    at::Tensor s = src.values({3, 5}, dt, Values::Finite);
    at::Tensor sidx = from({0, 1, 3, 2, 0, 3, 2, 0, 1, 3, 1, 3, 2, 0, 2}, at::kLong, {3, 5}).slice(1, 0, 4);
    // libtorch 1.13's scatter gradient fails for a src larger than index: values only there, gradients
    // with a src of index's shape.
    batch.check(cat("scatter ", name(dt)), to_kiln(x).scatter(0, to_kiln(sidx), to_kiln(s)), at::scatter(x, 0, sidx, s));
    at::Tensor s4 = s.slice(1, 0, 4).contiguous();
    check_op(batch, src, cat("scatter ", name(dt)), {x, s4}, [&](auto& v) { return v[0].scatter(0, to_kiln(sidx), v[1]); },
             [&](auto& v) { return at::scatter(v[0], 0, sidx, v[1]); }, 0);
    at::Tensor dup = from({1, 1, 0, 3, 3, 3}, at::kLong, {2, 3});
    at::Tensor s23 = s.slice(0, 0, 2).slice(1, 0, 3).contiguous();
    batch.check(cat("scatter_add larger src ", name(dt)), to_kiln(x).scatter_add(1, to_kiln(dup), to_kiln(s)), at::scatter_add(x, 1, dup, s), ulps(dt, 4));
    check_op(batch, src, cat("scatter_add duplicates axis 1 ", name(dt)), {x, s23}, [&](auto& v) { return v[0].scatter_add(1, to_kiln(dup), v[1]); },
             [&](auto& v) { return at::scatter_add(v[0], 1, dup, v[1]); }, 4);
    at::Tensor mask = src.values({5}, at::kBool);
    check_op(batch, src, cat("masked_fill ", name(dt)), {x}, [&](auto& v) { return v[0].masked_fill(to_kiln(mask), -1.5); },
             [&](auto& v) { return at::masked_fill(v[0], mask, -1.5); }, 0);
  }
  at::Tensor ints = src.values({3, 4}, at::kInt);
  batch.check("index_select int", to_kiln(ints).index_select(1, to_kiln(from({2, 2}, at::kInt))), at::index_select(ints, 1, from({2, 2}, at::kLong)));
  batch.check("index_select empty", to_kiln(ints).index_select(0, to_kiln(from({}, at::kLong))), at::index_select(ints, 0, from({}, at::kLong)));
  batch.check("masked_fill inf", to_kiln(ints.to(at::kFloat)).masked_fill(to_kiln(ints.gt(0)), INFINITY),
              at::masked_fill(ints.to(at::kFloat), ints.gt(0), INFINITY));
  batch.run();
  Tensor k = to_kiln(ints);
  CHECK_THROWS_WITH(k.index_select(1, to_kiln(from({4}, at::kLong))), Catch::Contains("index 4 is out of range for axis 1 of size 4"));
  CHECK_THROWS_WITH(k.index_select(0, to_kiln(from({-1}, at::kLong))), Catch::Contains("index -1 is out of range"));
  CHECK_THROWS_WITH(k.scatter(0, to_kiln(from({0, 0}, at::kLong, {2, 1})), k), Catch::Contains("scatter_add, or unique indices"));
  CHECK_THROWS_WITH(k.masked_fill(to_kiln(ints), 1.0), Catch::Contains("mask must be bool"));
  CHECK_THROWS_WITH(k.masked_fill(to_kiln(from({1, 0, 1}, at::kBool)), 1.0), Catch::Contains("broadcast"));
}

TEST_CASE("torch: one_hot, triu and tril", "[torch][indexing]") {
  Source src(307);
  Batch batch;
  at::Tensor c = from({2, 0, 4, 1, 2, 2}, at::kLong, {2, 3});
  batch.check("one_hot inferred", to_kiln(c).one_hot(), at::one_hot(c));
  batch.check("one_hot 7", to_kiln(c.to(at::kInt)).one_hot(7), at::one_hot(c, 7));
  batch.check("one_hot empty", to_kiln(from({}, at::kLong)).one_hot(3), at::one_hot(from({}, at::kLong), 3));
  for (at::ScalarType dt : kFloats) {
    at::Tensor x = src.values({2, 4, 5}, dt, Values::Finite);
    for (int64_t d : {0, 1, -2, 7}) {
      check_op(batch, src, cat("triu ", d, " ", name(dt)), {x}, [&](auto& v) { return v[0].triu(d); }, [&](auto& v) { return at::triu(v[0], d); }, 0);
      check_op(batch, src, cat("tril ", d, " ", name(dt)), {x}, [&](auto& v) { return v[0].tril(d); }, [&](auto& v) { return at::tril(v[0], d); }, 0);
    }
  }
  at::Tensor i = src.values({3, 3}, at::kInt);
  batch.check("triu int", to_kiln(i).triu(), at::triu(i));
  batch.run();
  CHECK_THROWS_WITH(to_kiln(c).one_hot(3), Catch::Contains("class 4 is outside 0..2"));
  CHECK_THROWS_WITH(Tensor::ones({3}).triu(), Catch::Contains("triu: needs at least 2 dimensions"));
}

TEST_CASE("torch: sort, argsort and topk, ties, NaN, inf and -0.0 included", "[torch][sort]") {
  Source src(308);
  Batch batch;
  for (at::ScalarType dt : {at::kFloat, at::kDouble, at::kHalf}) {
    at::Tensor x = src.values({3, 9}, dt);  // NaN, +-inf, -0.0, 0.0 and ties (.5) mixed in
    at::Tensor ties = from({1, 3, 1, 2, 3, 1, -0.0, 0.0, -0.0}, dt, {1, 9});
    for (const at::Tensor& v : {x, ties})
      for (bool desc : {false, true})
        for (int64_t axis : {-1, 0}) {
          std::string what = cat(name(dt), desc ? " descending" : "", " axis ", axis, v.size(0) == 1 ? " ties" : "");
          auto [values, indices] = at::sort(v, /*stable=*/true, axis, desc);
          auto [kv, ki] = to_kiln(v).sort(axis, desc);
          batch.check("sort values " + what, kv, values);
          batch.check("sort indices " + what, ki, indices);
          batch.check("argsort " + what, to_kiln(v).argsort(axis, desc), indices);
        }
  }
  at::Tensor ints = src.values({4, 6}, at::kInt);
  auto [iv, ii] = at::sort(ints, true, 1, false);
  batch.check("sort int values", to_kiln(ints).sort(1).first, iv);
  batch.check("sort int indices", to_kiln(ints).sort(1).second, ii);
  // topk: torch does not promise an order between ties, so the values are checked, and the indices
  // by what they pick.
  at::Tensor f = src.values({3, 8}, at::kFloat, Values::Finite);
  for (bool largest : {true, false})
    for (int64_t k : {0, 1, 3, 8}) {
      auto [tv, ti] = at::topk(f, k, 1, largest, true);
      auto [kv, ki] = to_kiln(f).topk(k, 1, largest);
      batch.check(cat("topk ", k, largest ? " largest" : " smallest"), kv, tv);
      batch.check(cat("topk picks ", k), to_kiln(f).gather(1, ki), tv);
    }
  batch.run();
  // Gradients: a permutation (sort) and a selection (topk).
  for (at::ScalarType dt : kFloats) {
    at::Tensor x = src.values({3, 7}, dt, Values::Finite);
    check_op(batch, src, cat("sort grad ", name(dt)), {x}, [](auto& v) { return v[0].sort(1, true).first; },
             [](auto& v) { return std::get<0>(at::sort(v[0], true, 1, true)); }, 0);
    check_op(batch, src, cat("topk grad ", name(dt)), {x}, [](auto& v) { return v[0].topk(3, 0).first; },
             [](auto& v) { return std::get<0>(at::topk(v[0], 3, 0)); }, 0);
  }
  batch.run();
  std::vector<float> signs = Tensor::from_vector<float>({0.0f, -0.0f, -1.0f}, {3}).sort().first.to_vector<float>();
  CHECK((signs[0] == -1.0f && !std::signbit(signs[1]) && std::signbit(signs[2])));  // stable: 0.0 before -0.0
  CHECK_THROWS_WITH(Tensor::ones({2, 5}).topk(6), Catch::Contains("topk: k 6 is outside 0..5"));
}

// Values with many ties (multiples of 0.5 in a narrow range) and the specials at fixed places.
at::Tensor tied_values(Source& src, std::vector<int64_t> shape, at::ScalarType dt) {
  at::Tensor x = (src.values(shape, at::kDouble, Values::Finite) * 2).round() / 2;
  at::Tensor flat = x.view({-1});
  const double specials[] = {NAN, INFINITY, -INFINITY, -0.0, 0.0, NAN, -INFINITY, -0.0};
  for (int64_t i = 0; i < 8; ++i) flat[(i * 977 + 13) % flat.numel()] = specials[i];
  return x.to(dt);
}

TEST_CASE("torch: sort, argsort and topk on axes longer than kCountSortLength (the bitonic network)", "[torch][sort]") {
  Source src(316);
  Batch batch;
  // 5000: a network over 8192 with 3192 padding elements; on axis 0 through a transpose.
  for (at::ScalarType dt : {at::kFloat, at::kHalf}) {
    at::Tensor x = tied_values(src, {2, 5000}, dt);
    for (bool desc : {false, true}) {
      auto [values, indices] = at::sort(x, /*stable=*/true, 1, desc);
      auto [kv, ki] = to_kiln(x).sort(1, desc);
      batch.check(cat("long sort values ", name(dt), desc ? " descending" : ""), kv, values);
      batch.check(cat("long sort indices ", name(dt), desc ? " descending" : ""), ki, indices);
    }
  }
  at::Tensor t = tied_values(src, {4500, 2}, at::kDouble);
  batch.check("long argsort axis 0", to_kiln(t).argsort(0, true), std::get<1>(at::sort(t, true, 0, true)));
  at::Tensor f = src.values({3, 5000}, at::kFloat, Values::Finite);
  for (bool largest : {true, false}) {
    auto [tv, ti] = at::topk(f, 7, 1, largest, true);
    auto [kv, ki] = to_kiln(f).topk(7, 1, largest);
    batch.check(cat("long topk ", largest ? "largest" : "smallest"), kv, tv);
    batch.check(cat("long topk picks ", largest ? "largest" : "smallest"), to_kiln(f).gather(1, ki), tv);
  }
  // 70000: a network over 131072 (153 stages).
  at::Tensor big = src.values({1, 70000}, at::kInt);  // +-100: every value about 350 times
  auto [bv, bi] = at::sort(big, true, 1, false);
  auto [kbv, kbi] = to_kiln(big).sort(1);
  batch.check("sort 70000 int values", kbv, bv);
  batch.check("sort 70000 int indices", kbi, bi);
  at::Tensor bf = tied_values(src, {70000}, at::kFloat);
  batch.check("argsort 70000 float descending", to_kiln(bf).argsort(0, true), std::get<1>(at::sort(bf, true, 0, true)));
  batch.run();
  // The values move bit for bit: -0.0 keeps its sign, ties in input order (0.0 before -0.0 here).
  std::vector<float> zeros(5000, 1.0f);
  zeros[10] = 0.0f;
  zeros[20] = -0.0f;
  std::vector<float> sorted = Tensor::from_vector<float>(zeros, {5000}).sort().first.to_vector<float>();
  CHECK((!std::signbit(sorted[0]) && std::signbit(sorted[1]) && sorted[2] == 1.0f));
  // Gradients: a permutation, carried back through the network.
  at::Tensor g = src.values({2, 4500}, at::kDouble, Values::Finite);
  check_op(batch, src, "long sort grad", {g}, [](auto& v) { return v[0].sort(1, true).first; },
           [](auto& v) { return std::get<0>(at::sort(v[0], true, 1, true)); }, 0);
  check_op(batch, src, "long topk grad", {g}, [](auto& v) { return v[0].topk(5, 1, false).first; },
           [](auto& v) { return std::get<0>(at::topk(v[0], 5, 1, false)); }, 0);
  batch.run();
}

TEST_CASE("torch: einsum over two operands", "[torch][einsum]") {
  Source src(309);
  Batch batch;
  for (at::ScalarType dt : kFloats) {
    at::Tensor a = src.values({2, 3, 4}, dt, Values::Finite), b = src.values({2, 4, 5}, dt, Values::Finite);
    at::Tensor m = src.values({3, 4}, dt, Values::Finite), v = src.values({4}, dt, Values::Finite), one = src.values({1, 4}, dt, Values::Finite);
    struct Case {
      const char* eq;
      at::Tensor x, y;
    };
    for (const Case& c : {Case{"bij,bjk->bik", a, b}, Case{"bij,bjk", a, b}, Case{"ij,j->i", m, v}, Case{"ij,ij->", m, m},
                          Case{"i,j->ij", v, v}, Case{"ij, kj -> ik", m, m}, Case{"ij,ij->ji", m, one}, Case{"bij,jk->bki", a, m.t()}})
      check_op(batch, src, cat("einsum ", c.eq, " ", name(dt)), {c.x, c.y}, [&](auto& t) { return einsum(c.eq, t[0], t[1]); },
               [&](auto& t) { return at::einsum(c.eq, {t[0], t[1]}); }, 16);
  }
  at::Tensor i = src.values({2, 3}, at::kInt);
  batch.check("einsum int", einsum("ij,kj->ik", to_kiln(i), to_kiln(i)), at::einsum("ij,kj->ik", {i, i}));
  batch.run();
  Tensor m = Tensor::ones({3, 4});
  CHECK_THROWS_WITH(einsum("ij,jk->ik", m, m), Catch::Contains("'j' has sizes 4 and 3"));
  CHECK_THROWS_WITH(einsum("ii,jk->ik", m, m), Catch::Contains("appears twice"));
  CHECK_THROWS_WITH(einsum("...j,jk", m, m), Catch::Contains("no \"...\""));
  CHECK_THROWS_WITH(einsum("ij->ij", m, m), Catch::Contains("two operands"));
  CHECK_THROWS_WITH(einsum("ijk,jk", m, m), Catch::Contains("names 3 axes"));
}

// --- cumulative ------------------------------------------------------------------------------------

TEST_CASE("torch: cumprod and logcumsumexp, with gradients", "[torch][reduce]") {
  Source src(310);
  Batch batch;
  for (at::ScalarType dt : kFloats) {
    at::Tensor x = src.values({3, 6}, dt, Values::Finite);
    at::Tensor zeros = from({1.5, 0, 2, -1, 0, 3}, dt, {1, 6});  // one zero and two zeros in a prefix
    for (int64_t axis : {1, 0}) {
      check_op(batch, src, cat("cumprod ", axis, " ", name(dt)), {x}, [&](auto& v) { return v[0].cumprod(axis); },
               [&](auto& v) { return at::cumprod(v[0], axis); }, 16);
      check_op(batch, src, cat("logcumsumexp ", axis, " ", name(dt)), {x}, [&](auto& v) { return v[0].logcumsumexp(axis); },
               [&](auto& v) { return at::logcumsumexp(v[0], axis); }, 16);
    }
    check_op(batch, src, cat("cumprod zeros ", name(dt)), {zeros}, [&](auto& v) { return v[0].cumprod(1); },
             [&](auto& v) { return at::cumprod(v[0], 1); }, 8);
    at::Tensor inf = from({-INFINITY, -INFINITY, 0, INFINITY, 1}, dt);
    batch.check(cat("logcumsumexp infinities ", name(dt)), to_kiln(inf).logcumsumexp(0), at::logcumsumexp(inf, 0), ulps(dt, 4));
  }
  at::Tensor i = src.values({2, 5}, at::kInt);
  batch.check("cumprod int", to_kiln(i).cumprod(1), at::cumprod(i, 1));
  batch.run();
}

TEST_CASE("torch: logsumexp over an empty axis is -inf, with an empty gradient", "[torch][reduce]") {
  Source src(315);
  Batch batch;
  for (at::ScalarType dt : kFloats) {
    at::Tensor x = src.values({2, 0, 3}, dt);
    for (bool keep : {false, true}) {
      for (std::vector<int64_t> axes : {std::vector<int64_t>{1}, {0, 1}, {1, 2}, {-2}, {}})
        check_op(batch, src, cat("logsumexp empty axes ", axes.size(), keep ? " keepdim " : " ", name(dt)), {x},
                 [&](auto& v) { return v[0].logsumexp(axes, keep); },
                 [&](auto& v) { return axes.empty() ? at::logsumexp(v[0], {0, 1, 2}, keep) : at::logsumexp(v[0], axes, keep); }, 0);
      // A non-empty axis of an empty tensor: nothing to reduce per output, an empty result.
      check_op(batch, src, cat("logsumexp of an empty tensor over axis 2", keep ? " keepdim " : " ", name(dt)), {x},
               [&](auto& v) { return v[0].logsumexp({2}, keep); }, [&](auto& v) { return at::logsumexp(v[0], {2}, keep); }, 0);
    }
  }
  at::Tensor ints = src.values({3, 0}, at::kInt);
  batch.check("logsumexp empty int", to_kiln(ints).logsumexp({1}), at::logsumexp(ints, {1}));
  batch.run();
  // backward() through it, as PyTorch allows: the gradient is x's shape, empty.
  Tensor x = Tensor::zeros({2, 0});
  x.requires_grad_();
  x.logsumexp({1}).exp().sum().backward();
  REQUIRE(x.grad());
  CHECK(x.grad()->shape() == Shape{2, 0});
  CHECK_THROWS_WITH(x.logsumexp({2}), Catch::Contains("logsumexp"));
}

// --- pooling, convolution, resampling ---------------------------------------------------------------

TEST_CASE("torch: max_pool2d with dilation and ceil_mode, avg_pool2d with ceil_mode and count_include_pad", "[torch][nn]") {
  Source src(311);
  Batch batch;
  using A = std::array<int64_t, 2>;
  for (at::ScalarType dt : kFloats) {
    at::Tensor x = src.values({2, 2, 7, 8}, dt, Values::Finite);
    struct Pool {
      A k, s, p, d;
      bool ceil;
    };
    for (const Pool& c : {Pool{{3, 3}, {2, 2}, {1, 1}, {2, 2}, false}, Pool{{2, 3}, {2, 2}, {1, 0}, {1, 2}, true}, Pool{{3, 2}, {3, 3}, {0, 1}, {1, 1}, true},
                          Pool{{2, 2}, {1, 2}, {0, 0}, {3, 1}, false}}) {
      std::string what = cat("k ", c.k[0], "x", c.k[1], " s ", c.s[0], " p ", c.p[0], ",", c.p[1], " d ", c.d[0], ",", c.d[1], c.ceil ? " ceil " : " ", name(dt));
      check_op(batch, src, "max_pool2d " + what, {x}, [&](auto& v) { return v[0].max_pool2d(c.k, c.s, c.p, c.d, c.ceil); },
               [&](auto& v) { return at::max_pool2d(v[0], {c.k[0], c.k[1]}, {c.s[0], c.s[1]}, {c.p[0], c.p[1]}, {c.d[0], c.d[1]}, c.ceil); }, 0);
      for (bool include : {true, false})
        check_op(batch, src, cat("avg_pool2d ", what, include ? " include pad" : " exclude pad"), {x},
                 [&](auto& v) { return v[0].avg_pool2d(c.k, c.s, c.p, c.ceil, include); },
                 [&](auto& v) { return at::avg_pool2d(v[0], {c.k[0], c.k[1]}, {c.s[0], c.s[1]}, {c.p[0], c.p[1]}, c.ceil, include); }, 8);
    }
  }
  batch.run();
  CHECK_THROWS_WITH(Tensor::ones({1, 1, 4, 4}).max_pool2d({2, 2}, std::nullopt, {2, 2}), Catch::Contains("padding 2 must be in 0..1"));
}

TEST_CASE("torch: conv_transpose2d with stride, padding, output_padding, groups and dilation", "[torch][nn]") {
  Source src(312);
  Batch batch;
  using A = std::array<int64_t, 2>;
  for (at::ScalarType dt : kFloats) {
    struct Conv {
      int64_t c, k, groups;
      A s, p, op, d;
    };
    for (const Conv& c : {Conv{3, 2, 1, {1, 1}, {0, 0}, {0, 0}, {1, 1}}, Conv{2, 4, 2, {2, 3}, {1, 0}, {1, 2}, {1, 1}},
                          Conv{4, 2, 2, {2, 1}, {0, 1}, {0, 0}, {2, 2}}}) {
      at::Tensor x = src.values({2, c.c, 4, 5}, dt, Values::Finite), w = src.values({c.c, c.k / c.groups, 3, 2}, dt, Values::Finite);
      at::Tensor b = src.values({c.k}, dt, Values::Finite);
      check_op(batch, src, cat("conv_transpose2d c ", c.c, " k ", c.k, " groups ", c.groups, " stride ", c.s[0], ",", c.s[1], " ", name(dt)), {x, w, b},
               [&](auto& v) { return v[0].conv_transpose2d(v[1], v[2], c.s, c.p, c.op, c.groups, c.d); },
               [&](auto& v) { return at::conv_transpose2d(v[0], v[1], v[2], {c.s[0], c.s[1]}, {c.p[0], c.p[1]}, {c.op[0], c.op[1]}, c.groups, {c.d[0], c.d[1]}); },
               24);
    }
  }
  batch.run();
  CHECK_THROWS_WITH(Tensor::ones({1, 2, 3, 3}).conv_transpose2d(Tensor::ones({2, 1, 2, 2}), std::nullopt, {1, 1}, {0, 0}, {1, 0}),
                    Catch::Contains("output_padding 1 must be smaller than stride or dilation"));
}

TEST_CASE("torch: pad with negative amounts crops", "[torch][movement]") {
  Source src(314);
  Batch batch;
  for (at::ScalarType dt : kFloats) {
    at::Tensor x = src.values({3, 6}, dt, Values::Finite);
    check_op(batch, src, cat("pad crop ", name(dt)), {x}, [](auto& v) { return v[0].pad({{-1, 2}, {2, -3}}, 1.5); },
             [](auto& v) { return at::constant_pad_nd(v[0], {2, -3, -1, 2}, 1.5); }, 0);
    check_op(batch, src, cat("pad crop to empty ", name(dt)), {x}, [](auto& v) { return v[0].pad({{-3, 0}, {0, 0}}); },
             [](auto& v) { return at::constant_pad_nd(v[0], {0, 0, -3, 0}); }, 0);
  }
  batch.run();
  CHECK_THROWS_WITH(Tensor::ones({3}).pad({{-2, -2}}), Catch::Contains("crops more than the axis holds"));
}

// --- losses and layers -----------------------------------------------------------------------------

at::Reduction::Reduction at_reduction(nn::Reduction r) {
  return r == nn::Reduction::Mean ? at::Reduction::Mean : r == nn::Reduction::Sum ? at::Reduction::Sum : at::Reduction::None;
}
const std::vector<nn::Reduction> kReductions = {nn::Reduction::Mean, nn::Reduction::Sum, nn::Reduction::None};

TEST_CASE("torch: cross_entropy and nll_loss with class weights, probability targets and spatial inputs", "[torch][nn][loss]") {
  Source src(315);
  Batch batch;
  for (at::ScalarType dt : kFloats) {
    at::Tensor logits = src.values({5, 4}, dt, Values::Finite), spatial = src.values({2, 4, 3, 2}, dt, Values::Finite);
    at::Tensor weight = src.values({4}, dt, Values::Positive);
    at::Tensor target = from({3, 0, 2, 2, 1}, at::kLong), ignored = from({3, -100, 2, 1, -100}, at::kLong);
    at::Tensor starget = from({0, 3, 1, 1, 2, 0, 3, 3, -100, 2, 1, 0}, at::kLong, {2, 3, 2});
    at::Tensor probs = at::softmax(src.values({5, 4}, dt, Values::Finite), 1), sprobs = at::softmax(src.values({2, 4, 3, 2}, dt, Values::Finite), 1);
    for (nn::Reduction r : kReductions)
      for (double smoothing : {0.0, 0.2}) {
        std::string what = cat(" reduction ", static_cast<int>(r), " smoothing ", smoothing, " ", name(dt));
        auto ce = [&](const std::string& name_, const at::Tensor& x, const at::Tensor& t, bool weighted) {
          std::optional<Tensor> kw;
          if (weighted) kw = to_kiln(weight);
          check_op(batch, src, name_ + what, {x}, [&](auto& v) { return nn::cross_entropy(v[0], to_kiln(t), smoothing, -100, r, kw); },
                   [&](auto& v) { return at::cross_entropy_loss(v[0], t, weighted ? weight : at::Tensor(), at_reduction(r), -100, smoothing); }, 16);
        };
        ce("cross_entropy weighted", logits, target, true);
        ce("cross_entropy weighted ignored", logits, ignored, true);
        ce("cross_entropy ignored", logits, ignored, false);
        ce("cross_entropy spatial", spatial, starget, false);
        ce("cross_entropy spatial weighted", spatial, starget, true);
        ce("cross_entropy probabilities", logits, probs, false);
        ce("cross_entropy probabilities weighted", logits, probs, true);
        ce("cross_entropy spatial probabilities", spatial, sprobs, true);
      }
    for (nn::Reduction r : kReductions) {
      check_op(batch, src, cat("nll_loss weighted ", static_cast<int>(r), " ", name(dt)), {logits},
               [&](auto& v) { return nn::nll_loss(v[0], to_kiln(ignored), -100, r, to_kiln(weight)); },
               [&](auto& v) { return at::nll_loss_nd(v[0], ignored, weight, at_reduction(r), -100); }, 16);
      check_op(batch, src, cat("nll_loss spatial weighted ", static_cast<int>(r), " ", name(dt)), {spatial},
               [&](auto& v) { return nn::nll_loss(v[0], to_kiln(starget), -100, r, to_kiln(weight)); },
               [&](auto& v) { return at::nll_loss_nd(v[0], starget, weight, at_reduction(r), -100); }, 16);
    }
  }
  batch.run();
  Tensor l = Tensor::ones({3, 4});
  CHECK_THROWS_WITH(nn::cross_entropy(l, Tensor::zeros({3}, dtypes::int64), 0, -100, nn::Reduction::Mean, Tensor::ones({3})),
                    Catch::Contains("weight must be a float tensor of shape (4,)"));
  CHECK_THROWS_WITH(nn::cross_entropy(l, Tensor::zeros({3, 3})), Catch::Contains("probability targets (float) must have the logits' shape"));
  CHECK_THROWS_WITH(nn::nll_loss(Tensor::ones({2, 4, 3}), Tensor::zeros({2, 2}, dtypes::int64)), Catch::Contains("targets (N) or (N, d1, ...)"));
  CHECK_THROWS_WITH(nn::nll_loss(Tensor::ones({2, 4, 3}), Tensor::full({2, 3}, 4, dtypes::int64)), Catch::Contains("target 4 is out of range"));
}

TEST_CASE("torch: binary_cross_entropy_with_logits with weight and pos_weight", "[torch][nn][loss]") {
  Source src(316);
  Batch batch;
  for (at::ScalarType dt : kFloats) {
    at::Tensor x = at::cat({src.values({4, 3}, dt, Values::Finite), from({100, -100, 1e4}, dt, {1, 3})});
    at::Tensor y = at::rand({5, 3}, src.gen(), at::TensorOptions().dtype(dt));
    at::Tensor w = src.values({5, 1}, dt, Values::Positive), pw = src.values({3}, dt, Values::Positive);
    for (nn::Reduction r : kReductions) {
      std::string what = cat(" reduction ", static_cast<int>(r), " ", name(dt));
      // torch differentiates only with respect to the logits.
      check_op(batch, src, "bce weight pos_weight" + what, {x},
               [&](auto& v) { return nn::binary_cross_entropy_with_logits(v[0], to_kiln(y), r, to_kiln(w), to_kiln(pw)); },
               [&](auto& v) { return at::binary_cross_entropy_with_logits(v[0], y, w, pw, at_reduction(r)); }, 16);
      check_op(batch, src, "bce pos_weight" + what, {x}, [&](auto& v) { return nn::binary_cross_entropy_with_logits(v[0], to_kiln(y), r, std::nullopt, to_kiln(pw)); },
               [&](auto& v) { return at::binary_cross_entropy_with_logits(v[0], y, {}, pw, at_reduction(r)); }, 16);
    }
  }
  batch.run();
  Tensor l = Tensor::ones({2, 3});
  CHECK_THROWS_WITH(nn::binary_cross_entropy_with_logits(l, l, nn::Reduction::Mean, std::nullopt, Tensor::ones({2})),
                    Catch::Contains("pos_weight (2,) must have one value per class (3,)"));
  CHECK_THROWS_WITH(nn::binary_cross_entropy_with_logits(l, l, nn::Reduction::Mean, Tensor::ones({4, 2, 3})), Catch::Contains("must broadcast"));
}

TEST_CASE("torch: Embedding with padding_idx gives that row no gradient", "[torch][nn]") {
  for (int64_t pad : {2, -1}) {
    nn::Embedding emb(5, 3, pad);
    int64_t row = pad < 0 ? pad + 5 : pad;
    at::Tensor weight = to_aten(emb.weight);
    CHECK(weight[row].abs().sum().item<double>() == 0.0);  // starts at zero
    at::Tensor idx = from({double(row), 0, double(row), 3, 1, 4}, at::kLong, {2, 3});
    at::Tensor w = weight.detach().clone().requires_grad_(true);
    at::Tensor out = at::embedding(w, idx, row);
    at::Tensor g = at::linspace(-1, 2, out.numel(), at::TensorOptions().dtype(at::kFloat)).reshape(out.sizes());
    at::Tensor expected = torch::autograd::grad({(out * g).sum()}, {w})[0];
    Tensor kout = emb.forward(to_kiln(idx));
    (kout * to_kiln(g)).sum().backward();
    CHECK(mismatch(kout, out.detach()) == "");
    CHECK(mismatch(*emb.weight.grad(), expected, ulps(at::kFloat, 4)) == "");
  }
  CHECK_THROWS_WITH(nn::Embedding(5, 3, 5), Catch::Contains("padding_idx 5 is out of range for 5 embeddings"));
}

TEST_CASE("torch: scaled_dot_product_attention with a scale", "[torch][nn]") {
  // libtorch 1.13 has no scaled_dot_product_attention: its definition, softmax(q k^T scale) v.
  Source src(317);
  Batch batch;
  for (at::ScalarType dt : kFloats) {
    at::Tensor q = src.values({2, 3, 4}, dt, Values::Finite), k = src.values({2, 5, 4}, dt, Values::Finite), v = src.values({2, 5, 3}, dt, Values::Finite);
    check_op(batch, src, cat("sdpa scale 0.3 ", name(dt)), {q, k, v},
             [](auto& t) { return nn::scaled_dot_product_attention(t[0], t[1], t[2], std::nullopt, false, 0.3); },
             [](auto& t) { return at::matmul(at::softmax(at::matmul(t[0], t[1].transpose(-2, -1)) * 0.3, -1), t[2]); }, 16);
  }
  batch.run();
}

}  // namespace
}  // namespace kiln::oracle
