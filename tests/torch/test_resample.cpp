// kiln against libtorch for sliding windows and resampling: Tensor::unfold (torch.Tensor.unfold),
// nn::unfold (im2col), avg_pool2d's divisor_override, nn::interpolate in every mode, by size and
// by scale factor, on 3-D and 4-D inputs, Upsample, and pixel_shuffle / pixel_unshuffle. Forward values
// and the gradients of sum(f(x) * w).
#include "check_op.h"
#include "frontend/nn.h"

namespace kiln::oracle {
namespace {

using A2 = std::array<int64_t, 2>;

TEST_CASE("torch: Tensor::unfold, the sliding-window view, with gradients", "[torch][movement]") {
  Source src(320);
  Batch batch;
  struct Case {
    int64_t axis, size, step;
  };
  for (at::ScalarType dt : kFloats) {
    at::Tensor x = src.values({5, 7}, dt), c = src.values({2, 3, 4}, dt);
    for (const Case& k : {Case{1, 3, 2}, Case{0, 2, 1}, Case{-1, 7, 1}, Case{1, 1, 3}, Case{0, 5, 10}, Case{1, 2, 2}, Case{1, 4, 3}, Case{-2, 0, 2},
                          Case{1, 0, 1}})
      check_op(batch, src, cat("unfold axis ", k.axis, " size ", k.size, " step ", k.step, " ", name(dt)), {x},
               [&](auto& v) { return v[0].unfold(k.axis, k.size, k.step); }, [&](auto& v) { return v[0].unfold(k.axis, k.size, k.step); }, 0);
    // Of a permuted view, twice (windows of windows), and of a 0-d tensor.
    check_op(batch, src, cat("unfold of a transpose ", name(dt)), {c}, [](auto& v) { return v[0].transpose(0, 2).unfold(1, 2, 1); },
             [](auto& v) { return v[0].transpose(0, 2).unfold(1, 2, 1); }, 0);
    check_op(batch, src, cat("unfold twice ", name(dt)), {x}, [](auto& v) { return v[0].unfold(1, 3, 1).unfold(0, 2, 2); },
             [](auto& v) { return v[0].unfold(1, 3, 1).unfold(0, 2, 2); }, 0);
    at::Tensor s = src.values({}, dt);
    for (int64_t size : {0, 1})
      check_op(batch, src, cat("unfold 0-d size ", size, " ", name(dt)), {s}, [&](auto& v) { return v[0].unfold(0, size, 1); },
               [&](auto& v) { return v[0].unfold(0, size, 1); }, 0);
  }
  at::Tensor i = src.values({4, 6}, at::kInt), e = src.values({0, 3}, at::kFloat);
  batch.check("unfold int", to_kiln(i).unfold(1, 4, 2), i.unfold(1, 4, 2));
  batch.check("unfold of an empty tensor", to_kiln(e).unfold(1, 2, 1), e.unfold(1, 2, 1));
  batch.check("unfold of an empty axis", to_kiln(e).unfold(0, 0, 3), e.unfold(0, 0, 3));
  batch.run();
  Tensor x = Tensor::ones({5, 7});
  CHECK_THROWS_WITH(x.unfold(1, 8, 1), Catch::Contains("unfold: a window of size 8 every 1 along axis 1 of (5, 7) needs 0 <= size <= 7"));
  CHECK_THROWS_WITH(x.unfold(0, 2, 0), Catch::Contains("and step > 0"));
  CHECK_THROWS_WITH(x.unfold(0, -1, 1), Catch::Contains("needs 0 <= size <= 5"));
  CHECK_THROWS_WITH(x.unfold(2, 1, 1), Catch::Contains("unfold"));
  CHECK_THROWS_WITH(Tensor::ones({}).unfold(0, 2, 1), Catch::Contains("unfold: a 0-d tensor takes a window of size 0 or 1"));
}

TEST_CASE("torch: nn::unfold (im2col) and avg_pool2d with divisor_override, with gradients", "[torch][nn]") {
  Source src(321);
  Batch batch;
  for (at::ScalarType dt : kFloats) {
    at::Tensor x = src.values({2, 3, 5, 6}, dt, Values::Finite);
    check_op(batch, src, cat("nn::unfold ", name(dt)), {x}, [](auto& v) { return nn::unfold(v[0], {2, 3}, {1, 2}, {1, 0}, {2, 1}); },
             [](auto& v) { return at::im2col(v[0], {2, 3}, {1, 2}, {1, 0}, {2, 1}); }, 0);
    struct Pool {
      A2 k, s, p;
      bool ceil, include;
      int64_t divisor;
    };
    for (const Pool& c : {Pool{{2, 2}, {2, 2}, {0, 0}, false, true, 3}, Pool{{3, 2}, {2, 1}, {1, 1}, true, false, -2}, Pool{{2, 3}, {1, 2}, {1, 0}, true, true, 1},
                          Pool{{3, 3}, {3, 3}, {1, 1}, false, false, 7}})
      check_op(batch, src, cat("avg_pool2d divisor ", c.divisor, " k ", c.k[0], "x", c.k[1], c.ceil ? " ceil" : "", c.include ? " include pad " : " ", name(dt)),
               {x}, [&](auto& v) { return v[0].avg_pool2d(c.k, c.s, c.p, c.ceil, c.include, c.divisor); },
               [&](auto& v) { return at::avg_pool2d(v[0], {c.k[0], c.k[1]}, {c.s[0], c.s[1]}, {c.p[0], c.p[1]}, c.ceil, c.include, c.divisor); }, 8);
  }
  batch.run();
  CHECK_THROWS_WITH(Tensor::ones({1, 1, 4, 4}).avg_pool2d({2, 2}, std::nullopt, {0, 0}, false, true, 0),
                    Catch::Contains("avg_pool2d: divisor_override is 0; pass a non-zero divisor"));
}

// --- interpolate ---------------------------------------------------------------------------------

// libtorch's op for a mode, by output size or by scale factors (then the output size is its own).
at::Tensor torch_interpolate(const at::Tensor& x, const std::string& mode, std::vector<int64_t> size, std::vector<double> scale, bool corners) {
  bool d1 = x.dim() == 3;
  // libtorch's ops take one value per spatial axis (torch.nn.functional repeats a single one).
  if (size.size() == 1 && !d1) size.push_back(size[0]);
  if (scale.size() == 1 && !d1) scale.push_back(scale[0]);
  at::OptionalIntArrayRef sz = size.empty() ? at::OptionalIntArrayRef{} : at::OptionalIntArrayRef(size);
  c10::optional<at::ArrayRef<double>> sc = scale.empty() ? c10::nullopt : c10::optional<at::ArrayRef<double>>(scale);
  if (mode == "nearest") return d1 ? at::upsample_nearest1d(x, sz, sc) : at::upsample_nearest2d(x, sz, sc);
  if (mode == "nearest-exact") return d1 ? at::_upsample_nearest_exact1d(x, sz, sc) : at::_upsample_nearest_exact2d(x, sz, sc);
  if (mode == "linear") return at::upsample_linear1d(x, sz, corners, sc);
  if (mode == "bilinear") return at::upsample_bilinear2d(x, sz, corners, sc);
  if (mode == "bicubic") return at::upsample_bicubic2d(x, sz, corners, sc);
  // "area": torch.nn.functional computes the output size floor(in * scale) and pools adaptively.
  if (size.empty())
    for (size_t i = 0; i < scale.size(); ++i) size.push_back(static_cast<int64_t>(std::floor(static_cast<double>(x.size(static_cast<int64_t>(i) + 2)) * scale[i])));
  return d1 ? at::adaptive_avg_pool1d(x, size) : at::adaptive_avg_pool2d(x, size);
}

// libtorch 1.13's backward of nearest assumes a scale of 1 (or 2) when the output size is the input's
// (or twice it), and its backward of bicubic copies an axis whose size is kept, while both forwards
// use the given scale: there libtorch's gradient is not its forward's (kiln's is).
bool torch_grad_disagrees(const std::string& mode, const at::Tensor& x, const std::vector<int64_t>& out, bool by_scale) {
  if ((mode != "nearest" && mode != "bicubic") || !by_scale) return false;
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t in = x.size(static_cast<int64_t>(i) + 2);
    if (out[i] == in || (mode == "nearest" && out[i] == 2 * in)) return true;
  }
  return false;
}

struct Resize {
  std::vector<int64_t> size;
  std::vector<double> scale;
};

void check_interpolate(Batch& batch, Source& src, const at::Tensor& x, const std::vector<std::string>& modes, const std::vector<Resize>& resizes) {
  at::ScalarType dt = x.scalar_type();
  for (const std::string& mode : modes)
    for (const Resize& r : resizes)
      for (bool corners : {false, true}) {
        bool interpolating = mode == "linear" || mode == "bilinear" || mode == "bicubic";
        if (corners && !interpolating) continue;
        auto opts = nn::InterpolateOptions().size(r.size).scale_factor(r.scale).mode(mode).align_corners(corners);
        at::Tensor expected = torch_interpolate(x, mode, r.size, r.scale, corners);
        std::vector<int64_t> out(expected.sizes().begin() + 2, expected.sizes().end());
        std::string what = cat("interpolate ", mode, corners ? " align_corners" : "", " to ", shape_text(expected.sizes()),
                               r.scale.empty() ? "" : cat(" by scale ", r.scale[0], r.scale.size() > 1 ? cat(",", r.scale[1]) : ""), " ", name(dt));
        // bicubic: 16 products summed; the others fewer. area: one division per window.
        check_op(batch, src, what, {x}, [&](auto& v) { return nn::interpolate(v[0], opts); },
                 [&](auto& v) { return torch_interpolate(v[0], mode, r.size, r.scale, corners); }, mode == "bicubic" ? 32 : 16,
                 !torch_grad_disagrees(mode, x, out, !r.scale.empty()));
        if (!r.scale.empty() && mode != "area") {  // recompute_scale_factor: the scale from the sizes
          at::Tensor by_size = torch_interpolate(x, mode, out, {}, corners);
          batch.check(what + " recompute_scale_factor", nn::interpolate(to_kiln(x), nn::InterpolateOptions(opts).recompute_scale_factor(true)),
                      by_size, normwise(by_size, 32, dt));
        }
      }
}

TEST_CASE("torch: interpolate on (N, C, H, W) by size, every mode, with gradients", "[torch][nn][interpolate]") {
  Source src(322);
  Batch batch;
  for (at::ScalarType dt : kFloats)
    check_interpolate(batch, src, src.values({2, 3, 5, 6}, dt, Values::Finite), {"nearest", "nearest-exact", "bilinear", "bicubic", "area"},
                      {{{7, 4}, {}}, {{10, 12}, {}}, {{2, 3}, {}}, {{1, 1}, {}}, {{5, 6}, {}}, {{3, 13}, {}}, {{11}, {}}});
  batch.run();
}

TEST_CASE("torch: interpolate on (N, C, H, W) by scale factor, every mode, with gradients", "[torch][nn][interpolate]") {
  Source src(323);
  Batch batch;
  // Scales that land on sizes 1/scale does not give exactly (2.1 on 5 makes 10, read with 1/2.1), the
  // copy of a kept size (1.1), and downscaling.
  for (at::ScalarType dt : kFloats)
    check_interpolate(batch, src, src.values({2, 3, 5, 6}, dt, Values::Finite), {"nearest", "nearest-exact", "bilinear", "bicubic", "area"},
                      {{{}, {1.7, 0.6}}, {{}, {2.5, 1.25}}, {{}, {0.45, 3.3}}, {{}, {2.1}}, {{}, {1.1}}, {{}, {0.5}}, {{}, {3.0, 2.0}}});
  batch.run();
}

TEST_CASE("torch: interpolate on (N, C, L): nearest, nearest-exact, linear and area, with gradients", "[torch][nn][interpolate]") {
  Source src(324);
  Batch batch;
  for (at::ScalarType dt : kFloats)
    check_interpolate(batch, src, src.values({2, 3, 7}, dt, Values::Finite), {"nearest", "nearest-exact", "linear", "area"},
                      {{{3}, {}}, {{7}, {}}, {{16}, {}}, {{1}, {}}, {{}, {2.3}}, {{}, {0.4}}, {{}, {1.05}}, {{}, {4.0}}});
  batch.run();
}

TEST_CASE("torch: interpolate keeps dtypes, infinities and NaN where libtorch does", "[torch][nn][interpolate]") {
  Source src(325);
  Batch batch;
  // The nearest modes copy values of any dtype; specials pass through the interpolating modes as in
  // libtorch (an infinity with weight 0 is NaN there too).
  at::Tensor i = src.values({1, 2, 4, 5}, at::kInt), u = src.values({2, 2, 6}, at::kByte);
  batch.check("nearest int", nn::interpolate(to_kiln(i), {7, 3}, "nearest"), at::upsample_nearest2d(i.to(at::kDouble), {7, 3}).to(at::kInt));
  batch.check("nearest-exact uint8", nn::interpolate(to_kiln(u), nn::InterpolateOptions().scale_factor({1.5}).mode("nearest-exact")),
              at::_upsample_nearest_exact1d(u.to(at::kDouble), c10::nullopt, std::vector<double>{1.5}).to(at::kByte));
  at::Tensor x = src.values({1, 2, 5, 6}, at::kFloat, Values::Normal);  // NaN, +-inf, -0.0 mixed in
  for (const char* mode : {"nearest", "nearest-exact", "bilinear", "bicubic", "area"}) {
    at::Tensor expected = torch_interpolate(x, mode, {8, 9}, {}, false);
    batch.check(cat("interpolate ", mode, " specials"), nn::interpolate(to_kiln(x), {8, 9}, mode), expected, normwise(expected.nan_to_num(0, 0, 0), 32, at::kFloat));
  }
  at::Tensor b = src.values({2, 3, 5, 6}, at::kBFloat16, Values::Finite);
  at::Tensor bilinear = torch_narrow([](const std::vector<at::Tensor>& v) { return at::upsample_bilinear2d(v[0], {7, 9}, false); }, {b});
  // libtorch rounds its bfloat16 weights and partial results to bfloat16; kiln computes in float32 and
  // rounds once: a few bfloat16 units of the largest value apart.
  batch.check("bilinear bfloat16", nn::interpolate(to_kiln(b), {7, 9}, "bilinear"), bilinear, normwise(bilinear.to(at::kFloat), 3, at::kBFloat16));
  batch.run();
}

TEST_CASE("interpolate: bad arguments name the op, the values and the fix", "[torch][nn][interpolate]") {
  Tensor x = Tensor::ones({1, 2, 4, 4}), l = Tensor::ones({1, 2, 4});
  using O = nn::InterpolateOptions;
  CHECK_THROWS_WITH(nn::interpolate(x, {3, 3}, "trilinear"), Catch::Contains("mode \"trilinear\" is not supported; use \"nearest\""));
  CHECK_THROWS_WITH(nn::interpolate(l, O().size({3}).mode("bilinear")), Catch::Contains("mode \"bilinear\" needs a 4-D input (N, C, H, W), got shape (1, 2, 4); use \"linear\""));
  CHECK_THROWS_WITH(nn::interpolate(x, O().size({3}).mode("linear")), Catch::Contains("mode \"linear\" needs a 3-D input (N, C, L)"));
  CHECK_THROWS_WITH(nn::interpolate(Tensor::ones({2, 4}), O().size({3})), Catch::Contains("expected a 3-D input (N, C, L) or a 4-D input (N, C, H, W), got shape (2, 4)"));
  CHECK_THROWS_WITH(nn::interpolate(x, O()), Catch::Contains("give either size or scale_factor (got neither)"));
  CHECK_THROWS_WITH(nn::interpolate(x, O().size({3}).scale_factor({2})), Catch::Contains("(got both)"));
  CHECK_THROWS_WITH(nn::interpolate(x, O().size({3, 3, 3})), Catch::Contains("size has 3 values for the 2 spatial axes of shape (1, 2, 4, 4); give one value, or one per axis"));
  CHECK_THROWS_WITH(nn::interpolate(x, O().scale_factor({0.1})), Catch::Contains("output sizes must be positive, got input 4 and output 0 on axis 3"));
  CHECK_THROWS_WITH(nn::interpolate(x, O().scale_factor({-2})), Catch::Contains("scale_factor must be positive and finite, got -2"));
  CHECK_THROWS_WITH(nn::interpolate(x, O().size({0, 2})), Catch::Contains("got input 4 and output 0 on axis 2"));
  CHECK_THROWS_WITH(nn::interpolate(x, {3, 3}, "nearest", true), Catch::Contains("align_corners applies to \"linear\", \"bilinear\" and \"bicubic\" only, not \"nearest\""));
  CHECK_THROWS_WITH(nn::interpolate(x.cast(dtypes::int32), {3, 3}, "bicubic"), Catch::Contains("mode \"bicubic\" needs a float input, got int32"));
  CHECK_THROWS_WITH(nn::interpolate(l, {3, 3}), Catch::Contains("expected a 4-D input (N, C, H, W) for a size of two values"));
}

TEST_CASE("torch: pixel_shuffle and pixel_unshuffle, and Upsample as interpolate, with gradients", "[torch][nn][interpolate]") {
  Source src(325);
  Batch batch;
  for (at::ScalarType dt : kFloats) {
    at::Tensor x = src.values({2, 12, 3, 5}, dt), y = src.values({3, 2, 6, 4}, dt), b = src.values({18, 2, 2}, dt);
    at::Tensor finite = src.values({3, 2, 6, 4}, dt, Values::Finite);  // a norm-wise tolerance needs finite values
    for (int64_t r : {1, 2})
      check_op(batch, src, cat("pixel_shuffle ", r, " ", name(dt)), {x}, [&](auto& v) { return nn::pixel_shuffle(v[0], r); },
               [&](auto& v) { return at::pixel_shuffle(v[0], r); }, 0);
    check_op(batch, src, cat("pixel_shuffle 3, no batch ", name(dt)), {b}, [](auto& v) { return nn::pixel_shuffle(v[0], 3); },
             [](auto& v) { return at::pixel_shuffle(v[0], 3); }, 0);
    check_op(batch, src, cat("pixel_unshuffle 2 ", name(dt)), {y}, [](auto& v) { return nn::PixelUnshuffle(2).forward(v[0]); },
             [](auto& v) { return at::pixel_unshuffle(v[0], 2); }, 0);
    check_op(batch, src, cat("Upsample bilinear x2 ", name(dt)), {finite},
             [](auto& v) { return nn::Upsample(nn::InterpolateOptions().scale_factor({2.0}).mode("bilinear")).forward(v[0]); },
             [](auto& v) { return at::upsample_bilinear2d(v[0], {12, 8}, false, 2.0, 2.0); }, 16);
  }
  batch.run();
  Tensor t = Tensor::ones({1, 8, 4, 6});
  CHECK(nn::pixel_unshuffle(nn::pixel_shuffle(t, 2), 2).shape() == Shape{1, 8, 4, 6});
  CHECK_THROWS_WITH(nn::pixel_shuffle(t, 3), Catch::Contains("pixel_shuffle: 8 channels of shape (1, 8, 4, 6) are not divisible by the factor squared (9)"));
  CHECK_THROWS_WITH(nn::pixel_unshuffle(t, 4), Catch::Contains("pixel_unshuffle: height 4 and width 6 of shape (1, 8, 4, 6) must both be divisible by the factor 4"));
  CHECK_THROWS_WITH(nn::pixel_shuffle(Tensor::ones({4, 4}), 2), Catch::Contains("expected an input of 3 or more dimensions"));
  CHECK_THROWS_WITH(nn::pixel_shuffle(t, 0), Catch::Contains("the factor must be >= 1, got 0"));
}

}  // namespace
}  // namespace kiln::oracle
