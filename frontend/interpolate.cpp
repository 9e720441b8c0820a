// nn::interpolate: resampling one spatial axis at a time. For each axis, the host works out which input
// positions each output position reads (its taps) and with what weights, with PyTorch 1.13's CPU
// index arithmetic in PyTorch's precision (float for float32 and narrower, double for float64), so
// that the same positions are picked. The tensor graph then reads them through views where the
// positions are a few runs (integer factors: each input k times, every k-th input), each tap's view
// times an axis of weights; otherwise the nearest modes gather (index_select) and the others sum over
// an (out x in) table of the taps' weights. Gradients come from autograd of the views, mul, where and sum.
#include <algorithm>
#include <cmath>
#include <optional>

#include "frontend/detail.h"
#include "frontend/nn.h"

namespace kiln::nn {

namespace {

// One output position's taps: the input positions it reads and their weights (a nearest mode reads
// one position with no weight, so any dtype resamples exactly).
struct AxisTaps {
  std::vector<std::vector<int64_t>> index;  // index[o]: the input positions output o reads
  std::vector<std::vector<double>> weight;  // weight[o][k] for index[o][k]; empty for the nearest modes
};

enum class Mode { Nearest, NearestExact, Linear, Cubic, Area };

struct ModeInfo {
  const char* name;
  Mode mode;
  int64_t rank;  // 0: 3-D and 4-D inputs
};
constexpr ModeInfo kModes[] = {{"nearest", Mode::Nearest, 0},   {"nearest-exact", Mode::NearestExact, 0}, {"linear", Mode::Linear, 3},
                               {"bilinear", Mode::Linear, 4},   {"bicubic", Mode::Cubic, 4},              {"area", Mode::Area, 0}};

// The factor from output to input positions: 1/scale when a scale factor is used, else in/out
// (PyTorch's area_pixel_compute_scale); with align_corners, (in - 1)/(out - 1).
template <typename T>
T source_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) return out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
  return scale ? static_cast<T>(1.0 / *scale) : static_cast<T>(in) / static_cast<T>(out);
}

// The input position output i maps to: scaled corners, or scaled pixel centers (clamped at 0 unless
// cubic, which weighs the border neighbours by how far the position lies outside).
template <typename T>
T source_position(T scale, int64_t i, bool align_corners, bool cubic) {
  if (align_corners) return scale * static_cast<T>(i);
  T s = scale * (static_cast<T>(i) + T(0.5)) - T(0.5);
  return !cubic && s < T(0) ? T(0) : s;
}

// PyTorch floors positions in float (floorf), whatever precision they were computed in.
int64_t floor_float(double v) { return static_cast<int64_t>(std::floor(static_cast<float>(v))); }

template <typename T>
AxisTaps axis_taps(Mode mode, int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  AxisTaps taps;
  T s = source_scale<T>(in, out, align_corners, scale);
  for (int64_t i = 0; i < out; ++i) {
    switch (mode) {
      case Mode::Nearest:
        taps.index.push_back({std::min(floor_float(source_position(s, i, true, false)), in - 1)});
        break;
      case Mode::NearestExact:  // rounds the pixel-center position: floor(position + 0.5)
        taps.index.push_back({std::min(floor_float(static_cast<double>(source_position(s, i, false, false)) + 0.5), in - 1)});
        break;
      case Mode::Linear: {
        if (in == out) {  // PyTorch copies an axis whose size is kept, whatever the scale
          taps.index.push_back({i});
          taps.weight.push_back({1.0});
          break;
        }
        double x = source_position<double>(s, i, align_corners, false);  // accumulated in double, as PyTorch does
        auto lo = static_cast<int64_t>(x);
        T hi_weight = static_cast<T>(x - static_cast<double>(lo));
        taps.index.push_back({lo, lo + (lo < in - 1 ? 1 : 0)});
        taps.weight.push_back({T(1) - hi_weight, hi_weight});
        break;
      }
      case Mode::Cubic: {
        T x = source_position(s, i, align_corners, true);
        int64_t at = std::min(floor_float(x), in - 1);
        T t = std::min(std::max(x - static_cast<T>(at), T(0)), T(1));
        // Keys' cubic convolution, a = -0.75: |d| <= 1 and 1 < |d| < 2 for the taps at at-1 .. at+2.
        const T a = T(-0.75);
        auto near = [&](T d) { return ((a + 2) * d - (a + 3)) * d * d + 1; };
        auto far = [&](T d) { return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a; };
        taps.weight.push_back({far(t + T(1)), near(t), near(T(1) - t), far(T(2) - t)});
        std::vector<int64_t> at_border;
        for (int64_t k = -1; k <= 2; ++k) at_border.push_back(std::clamp<int64_t>(at + k, 0, in - 1));
        taps.index.push_back(at_border);
        break;
      }
      case Mode::Area: {  // adaptive average pooling: [floor(i * in / out), ceil((i + 1) * in / out))
        int64_t begin = i * in / out, end = ((i + 1) * in + out - 1) / out;
        std::vector<int64_t> window;
        for (int64_t j = begin; j < end; ++j) window.push_back(j);
        taps.index.push_back(window);
        taps.weight.push_back(std::vector<double>(window.size(), static_cast<double>(T(1) / static_cast<T>(end - begin))));
        break;
      }
    }
  }
  return taps;
}

// One stretch of picks that a view of x reads: `length` outputs that read input `start` onwards, each
// input `repeat` times in order (the first one `head` times, head <= repeat), or with repeat 1, every
// `step`-th input (step 0: one input over and over).
struct Run {
  int64_t length = 0, start = 0, repeat = 1, head = 1, step = 1;
};

// The picks as few runs as greedy finds, or nullopt past kMaxRuns: integer up- and downsampling, with
// or without aligned corners, and the clamped taps of linear and cubic modes at those factors make a
// few (2x bilinear's lower taps: [0] and then each input twice); uneven factors (2.1x) make many.
constexpr size_t kMaxRuns = 8;
std::optional<std::vector<Run>> runs_of(const std::vector<int64_t>& picks) {
  auto out = static_cast<int64_t>(picks.size());
  auto at = [&](int64_t o) { return picks[static_cast<size_t>(o)]; };
  auto group = [&](int64_t o) {  // how many outputs from o read at(o)
    int64_t e = o;
    while (e < out && at(e) == at(o)) ++e;
    return e - o;
  };
  std::vector<Run> runs;
  for (int64_t o = 0; o < out;) {
    if (runs.size() == kMaxRuns) return std::nullopt;
    Run r{0, at(o), 1, 1, 0};
    int64_t g1 = group(o), next = o + g1;
    int64_t g2 = next < out ? group(next) : 0;
    if (g1 == 1 && next < out && g2 == 1 && at(next) > at(o)) {  // every step-th input
      r.step = at(next) - at(o);
      int64_t e = o;
      while (e < out && at(e) == r.start + (e - o) * r.step) ++e;
      r.length = e - o;
    } else if (next < out && at(next) == at(o) + 1 && g2 >= 2 && g1 <= g2) {  // each input g2 times
      r.repeat = g2;
      r.head = g1;
      r.step = 1;
      int64_t e = o;
      while (e < out && at(e) == r.start + (e - o + g2 - g1) / g2) ++e;
      r.length = e - o;
    } else {  // one input, g1 times
      r.length = g1;
    }
    runs.push_back(r);
    o += r.length;
  }
  return runs;
}

// x read at the picks along `axis` through views (slices, expands, reshapes; cat of the runs), or
// nullopt when the picks are not a few runs. A view costs no kernel of its own and its gradient is a
// sum, not a scatter: a UNet's 2x nearest upsampling through index_select gathered through a
// materialized index in a 4-7 ms kernel, and bilinear's (out x in) table summed in/2 zeros per output.
std::optional<Tensor> select_view(const Tensor& x, int64_t axis, const std::vector<int64_t>& picks) {
  std::optional<std::vector<Run>> runs = runs_of(picks);
  if (!runs) return std::nullopt;
  auto ax = static_cast<size_t>(axis);
  std::vector<Tensor> parts;
  for (const Run& r : *runs) {
    if (r.step == 0) {  // one input, repeated
      Shape wide = x.shape();
      wide[ax] = r.length;
      parts.push_back(x.slice(axis, r.start, r.start + 1).expand(wide));
    } else if (r.repeat == 1) {  // every step-th input
      parts.push_back(x.slice(axis, r.start, r.start + (r.length - 1) * r.step + 1, r.step));
    } else {  // each input `repeat` times: the inputs it reads, widened, then cut to the run
      int64_t skip = r.repeat - r.head, inputs = (skip + r.length + r.repeat - 1) / r.repeat;
      Tensor t = x.slice(axis, r.start, r.start + inputs).unsqueeze(axis + 1);
      Shape wide = t.shape();
      wide[ax + 1] = r.repeat;
      Shape merged = x.shape();
      merged[ax] = inputs * r.repeat;
      parts.push_back(t.expand(wide).reshape(merged).slice(axis, skip, skip + r.length));
    }
  }
  return parts.size() == 1 ? parts[0] : Tensor::cat(parts, axis);
}

// x resampled along `axis` by the taps. The nearest modes select: through views where the picks are a
// few runs (select_view), else index_select. The others, where each output has as many taps and each
// tap's picks are a few runs, sum the taps' views times their weights (an axis of `out` constants); else
// they sum each output's taps, weighted, over an (out x in) table: where() keeps the positions an output
// does not read out of the sum, so an infinity there cannot turn it into NaN (0 * inf).
Tensor resample_axis(const Tensor& x, int64_t axis, int64_t in, const AxisTaps& taps) {
  auto out = static_cast<int64_t>(taps.index.size());
  if (taps.weight.empty()) {
    std::vector<int64_t> picks;
    for (const auto& t : taps.index) picks.push_back(t[0]);
    if (std::optional<Tensor> view = select_view(x, axis, picks)) return *view;
    return x.index_select(axis, Tensor::from_vector(picks, {out}, x.device()));
  }
  size_t k_taps = taps.index[0].size();
  bool even = std::all_of(taps.index.begin(), taps.index.end(), [&](const auto& t) { return t.size() == k_taps; });
  if (even) {
    Shape along(static_cast<size_t>(x.ndim()), 1);
    along[static_cast<size_t>(axis)] = out;
    std::optional<Tensor> sum;
    for (size_t k = 0; k < k_taps; ++k) {
      std::vector<int64_t> picks;
      std::vector<double> weights;
      for (int64_t o = 0; o < out; ++o) {
        picks.push_back(taps.index[static_cast<size_t>(o)][k]);
        weights.push_back(taps.weight[static_cast<size_t>(o)][k]);
      }
      std::optional<Tensor> view = select_view(x, axis, picks);
      if (!view) {
        sum.reset();
        break;
      }
      Tensor w = x.dtype() == dtypes::float64 ? Tensor::from_vector(weights, along, x.device())
                                              : Tensor::from_vector(std::vector<float>(weights.begin(), weights.end()), along, x.device());
      Tensor term = *view * w.cast(x.dtype());
      sum = sum ? *sum + term : term;
    }
    if (sum) return *sum;
  }
  std::vector<double> table(static_cast<size_t>(out * in), 0.0);
  std::vector<uint8_t> reads(table.size(), 0);
  for (int64_t o = 0; o < out; ++o)
    for (size_t k = 0; k < taps.index[static_cast<size_t>(o)].size(); ++k) {
      auto at = static_cast<size_t>(o * in + taps.index[static_cast<size_t>(o)][k]);
      table[at] += taps.weight[static_cast<size_t>(o)][k];  // border taps that coincide add up
      reads[at] = 1;
    }
  Tensor weights = Tensor::from_vector(table, {out, in}, x.device()).cast(x.dtype());
  Tensor mask = Tensor::from_vector(reads, {out, in}, x.device()).cast(dtypes::bool_);
  Tensor t = x.transpose(axis, -1);  // (..., in)
  Shape wide = t.shape();
  wide.insert(wide.end() - 1, out);  // (..., out, in)
  Tensor terms = t.unsqueeze(-2).expand(wide) * weights;
  return mask.expand(wide).where(terms, terms.zeros_like()).sum({-1}).transpose(axis, -1);
}

const ModeInfo& find_mode(const std::string& name, const Tensor& x) {
  for (const ModeInfo& m : kModes)
    if (name == m.name) {
      if (m.rank != 0 && m.rank != x.ndim())
        throw Error(kiln::cat("interpolate: mode \"", name, "\" needs a ", m.rank, "-D input ", m.rank == 3 ? "(N, C, L)" : "(N, C, H, W)", ", got shape ",
                              shape_str(x.shape()), "; use \"", m.rank == 3 ? "bilinear" : "linear", "\" for ",
                              m.rank == 3 ? "(N, C, H, W)" : "(N, C, L)"));
      return m;
    }
  throw Error(kiln::cat("interpolate: mode \"", name, "\" is not supported; use \"nearest\", \"nearest-exact\", \"linear\" (3-D), \"bilinear\" (4-D), ",
                        "\"bicubic\" (4-D) or \"area\""));
}

// One value per spatial axis from `values`, which holds one for all axes or one per axis.
template <typename V>
std::vector<V> per_axis(const std::vector<V>& values, size_t axes, const char* what, const Shape& shape) {
  if (values.size() == 1) return std::vector<V>(axes, values[0]);
  if (values.size() != axes)
    throw Error(kiln::cat("interpolate: ", what, " has ", values.size(), " values for the ", axes, " spatial axes of shape ", shape_str(shape),
                          "; give one value, or one per axis"));
  return values;
}

}  // namespace

Tensor interpolate(const Tensor& x, const InterpolateOptions& o) {
  if (x.ndim() != 3 && x.ndim() != 4)
    throw Error(kiln::cat("interpolate: expected a 3-D input (N, C, L) or a 4-D input (N, C, H, W), got shape ", shape_str(x.shape())));
  const ModeInfo& mode = find_mode(o.mode_, x);
  bool nearest = mode.mode == Mode::Nearest || mode.mode == Mode::NearestExact;
  if (o.align_corners_ && (nearest || mode.mode == Mode::Area))
    throw Error(kiln::cat("interpolate: align_corners applies to \"linear\", \"bilinear\" and \"bicubic\" only, not \"", o.mode_, "\""));
  if (o.size_.empty() == o.scale_factor_.empty())
    throw Error(kiln::cat("interpolate: give either size or scale_factor (got ", o.size_.empty() ? "neither" : "both", ")"));
  if (!nearest && !is_float(x.dtype()))
    throw Error(kiln::cat("interpolate: mode \"", o.mode_, "\" needs a float input, got ", x.dtype().name(), " (cast it first)"));
  if (detail::is_narrow_float(x.dtype()) && !nearest) return interpolate(x.cast(dtypes::float32), o).cast(x.dtype());
  size_t axes = static_cast<size_t>(x.ndim()) - 2;
  std::vector<int64_t> size = o.size_.empty() ? std::vector<int64_t>{} : per_axis(o.size_, axes, "size", x.shape());
  std::vector<double> scale = o.scale_factor_.empty() ? std::vector<double>{} : per_axis(o.scale_factor_, axes, "scale_factor", x.shape());
  Tensor y = x;
  for (size_t i = axes; i-- > 0;) {  // the last axis first, as PyTorch's kernels do
    auto axis = static_cast<int64_t>(i + 2);
    int64_t in = x.shape()[i + 2], out = 0;
    std::optional<double> factor;
    if (!scale.empty()) {
      if (!(scale[i] > 0) || !std::isfinite(scale[i]))
        throw Error(kiln::cat("interpolate: scale_factor must be positive and finite, got ", scale[i]));
      double scaled = std::floor(static_cast<double>(in) * scale[i]);
      if (scaled > double(int64_t{1} << 31))
        throw Error(kiln::cat("interpolate: scale_factor ", scale[i], " makes axis ", i + 2, " of shape ", shape_str(x.shape()),
                              " ", scaled, " long (more than 2^31); use a smaller scale"));
      out = static_cast<int64_t>(scaled);
      // "area" always recomputes the scale from the sizes (PyTorch's functional does so).
      if (!o.recompute_scale_factor_ && mode.mode != Mode::Area) factor = scale[i];
    } else {
      out = size[i];
    }
    if (in <= 0 || out <= 0)
      throw Error(kiln::cat("interpolate: input and output sizes must be positive, got input ", in, " and output ", out, " on axis ", axis,
                            " of shape ", shape_str(x.shape()), scale.empty() ? "" : kiln::cat(" (scale_factor ", scale[i], ")")));
    AxisTaps taps = x.dtype() == dtypes::float64 ? axis_taps<double>(mode.mode, in, out, o.align_corners_, factor)
                                                 : axis_taps<float>(mode.mode, in, out, o.align_corners_, factor);
    y = resample_axis(y, axis, in, taps);
  }
  return y;
}

Tensor interpolate(const Tensor& x, std::array<int64_t, 2> size, const std::string& mode, bool align_corners) {
  if (x.ndim() != 4) throw Error(kiln::cat("interpolate: expected a 4-D input (N, C, H, W) for a size of two values, got shape ", shape_str(x.shape())));
  return interpolate(x, InterpolateOptions().size({size[0], size[1]}).mode(mode).align_corners(align_corners));
}

}  // namespace kiln::nn
