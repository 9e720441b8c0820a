// The libtorch oracle: helpers that put the same random values into a kiln Tensor and an ATen tensor,
// and compare kiln's result with libtorch's, printing what differs.
//
//   Source src(seed);                                          // fixed seed: the same inputs every run
//   Input x = src.input({3, 4}, at::kFloat, Layout::Permuted);  // x.ref (ATen), x.k (kiln, a permuted view)
//   CHECK(mismatch(x.k.exp(), x.ref.exp(), ulps(at::kFloat, 16)) == "");
//
// ATen only (not <torch/torch.h>): it is all the oracle needs and much cheaper to compile.
#pragma once
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/tensor.h"

namespace kiln::oracle {

// --- dtypes ----------------------------------------------------------------------------------------

// The dtypes both libraries have. kiln's uint16/uint32/uint64 have no counterpart in libtorch 1.13.
inline const std::vector<at::ScalarType>& all_dtypes() {
  static const std::vector<at::ScalarType> all = {at::kBool, at::kByte, at::kChar,     at::kShort, at::kInt,
                                                  at::kLong, at::kHalf, at::kBFloat16, at::kFloat, at::kDouble};
  return all;
}
inline const std::vector<at::ScalarType> float_dtypes = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};
inline const std::vector<at::ScalarType> int_dtypes = {at::kByte, at::kChar, at::kShort, at::kInt, at::kLong};

inline DType kiln_dtype(at::ScalarType s) {
  switch (s) {
    case at::kBool:
      return dtypes::bool_;
    case at::kByte:
      return dtypes::uint8;
    case at::kChar:
      return dtypes::int8;
    case at::kShort:
      return dtypes::int16;
    case at::kInt:
      return dtypes::int32;
    case at::kLong:
      return dtypes::int64;
    case at::kHalf:
      return dtypes::float16;
    case at::kBFloat16:
      return dtypes::bfloat16;
    case at::kFloat:
      return dtypes::float32;
    case at::kDouble:
      return dtypes::float64;
    default:
      throw Error(cat("oracle: no kiln dtype for ", c10::toString(s)));
  }
}

inline std::optional<at::ScalarType> aten_dtype(DType d) {
  for (at::ScalarType s : all_dtypes())
    if (kiln_dtype(s) == d) return s;
  return std::nullopt;
}

inline bool is_narrow(at::ScalarType s) { return s == at::kHalf || s == at::kBFloat16; }
inline std::string name(at::ScalarType s) { return c10::toString(s); }

// --- conversion --------------------------------------------------------------------------------------

inline std::vector<int64_t> sizes_of(const Shape& s) { return {s.begin(), s.end()}; }

// Realizes `t` and copies its values into a fresh, contiguous ATen tensor of the same dtype.
inline at::Tensor to_aten(Tensor t) {
  std::optional<at::ScalarType> s = aten_dtype(t.dtype());
  if (!s) throw Error(cat("oracle: kiln dtype ", t.dtype().name(), " has no libtorch counterpart"));
  std::vector<uint8_t> bytes = t.to_bytes();
  at::Tensor out = at::empty(sizes_of(t.shape()), at::TensorOptions().dtype(*s));
  if (!bytes.empty()) std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
  return out;
}

inline Tensor to_kiln(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return Tensor::from_raw(c.data_ptr(), kiln_dtype(c.scalar_type()), Shape(c.sizes().begin(), c.sizes().end()));
}

// --- inputs ----------------------------------------------------------------------------------------

// How the kiln input is laid out. Every layout holds the same logical values as `ref`; all but
// Contiguous make kiln read through a view (index math instead of a plain load).
enum class Layout { Contiguous, Permuted, Strided, Flipped };
inline const std::vector<Layout> all_layouts = {Layout::Contiguous, Layout::Permuted, Layout::Strided, Layout::Flipped};
inline const char* name(Layout l) {
  switch (l) {
    case Layout::Contiguous:
      return "contiguous";
    case Layout::Permuted:
      return "permuted";
    case Layout::Strided:
      return "strided";
    case Layout::Flipped:
      return "flipped";
  }
  return "?";
}

// Cycles through the layouts so that, over a table of cases, every layout meets every op family.
inline Layout layout_at(size_t i) { return all_layouts[i % all_layouts.size()]; }

// What values to draw.
enum class Values {
  Normal,    // floats: N(0, 2^2) with NaN, +-inf, -0.0 and exact .5 ties mixed in; ints: small (+-100)
  Finite,    // floats: N(0, 2^2), nothing special; ints: small
  Positive,  // floats: |N(0, 2^2)| + 0.05 (for log, sqrt, ...); ints: 1..100
  Full,      // ints: the whole range of the type (bitwise ops, casts); floats: as Normal
  NoNaN,     // as Normal, with 0.25 where Normal puts its NaN
};

struct Input {
  at::Tensor ref;  // the logical values, for libtorch
  Tensor k;        // the same values in kiln, laid out as asked
};

class Source {
 public:
  explicit Source(uint64_t seed) : gen_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

  // Random values of `dtype` and `shape`, drawn with this source's generator.
  at::Tensor values(std::vector<int64_t> shape, at::ScalarType dtype, Values v = Values::Normal) {
    auto opts = at::TensorOptions().dtype(at::kDouble);
    if (dtype == at::kBool) return at::randint(0, 2, shape, gen_, opts).to(at::kBool);
    if (at::isIntegralType(dtype, false)) {
      if (v == Values::Full) {
        // randint takes int64 bounds [low, high): the 64-bit type's range comes from raw bits.
        if (dtype == at::kLong) return full_range_int64(shape);
        auto info = int_range(dtype);
        return at::randint(info.first, info.second + 1, shape, gen_, at::TensorOptions().dtype(at::kLong)).to(dtype);
      }
      int64_t lo = v == Values::Positive ? 1 : (dtype == at::kByte ? 0 : -100), hi = 101;
      return at::randint(lo, hi, shape, gen_, at::TensorOptions().dtype(at::kLong)).to(dtype);
    }
    at::Tensor x = at::randn(shape, gen_, opts) * 2.0;
    if (v == Values::Positive) x = x.abs() + 0.05;
    if (v == Values::Normal || v == Values::Full || v == Values::NoNaN) {
      // Overwrite a few fixed positions with the values that tell implementations apart.
      const double specials[] = {v == Values::NoNaN ? 0.25 : NAN, INFINITY, -INFINITY, -0.0, 0.0, 0.5, -2.5, 1.5};
      at::Tensor flat = x.view({-1});
      for (int64_t i = 0, j = 3; j < flat.numel() && i < 8; ++i, j += 5) flat[j] = specials[i];
    }
    return x.to(dtype);
  }

  Input input(std::vector<int64_t> shape, at::ScalarType dtype, Layout layout = Layout::Contiguous, Values v = Values::Normal) {
    int64_t nd = static_cast<int64_t>(shape.size());
    if (nd == 0 || layout == Layout::Contiguous) {
      at::Tensor x = values(shape, dtype, v);
      return {x, to_kiln(x)};
    }
    switch (layout) {
      case Layout::Contiguous:
        break;
      case Layout::Permuted: {  // stored with the axes reversed, read back through a permute
        std::vector<int64_t> order, stored;
        for (int64_t i = nd - 1; i >= 0; --i) {
          order.push_back(i);
          stored.push_back(shape[static_cast<size_t>(i)]);
        }
        at::Tensor base = values(stored, dtype, v);
        return {base.permute(order), to_kiln(base).permute(order)};
      }
      case Layout::Strided: {  // every other element of a longer last axis
        std::vector<int64_t> stored = shape;
        stored.back() = 2 * stored.back() + 1;
        at::Tensor base = values(stored, dtype, v);
        return {base.slice(-1, 1, INT64_MAX, 2), to_kiln(base).slice(-1, 1, std::nullopt, 2)};
      }
      case Layout::Flipped: {  // stored reversed on every axis
        std::vector<int64_t> axes;
        for (int64_t i = 0; i < nd; ++i) axes.push_back(i);
        at::Tensor base = values(shape, dtype, v);
        return {base.flip(axes), to_kiln(base).flip(axes)};
      }
    }
    throw Error("oracle: unknown layout");
  }

  at::Generator& gen() { return gen_; }

 private:
  static std::pair<int64_t, int64_t> int_range(at::ScalarType s) {
    switch (s) {
      case at::kByte:
        return {0, 255};
      case at::kChar:
        return {-128, 127};
      case at::kShort:
        return {-32768, 32767};
      case at::kInt:
        return {INT32_MIN, INT32_MAX};
      default:
        return {INT64_MIN, INT64_MAX};
    }
  }
  at::Tensor full_range_int64(const std::vector<int64_t>& shape) {
    auto opts = at::TensorOptions().dtype(at::kLong);
    at::Tensor hi = at::randint(INT32_MIN, static_cast<int64_t>(INT32_MAX) + 1, shape, gen_, opts);
    at::Tensor lo = at::randint(0, int64_t{1} << 32, shape, gen_, opts);
    return hi * (int64_t{1} << 32) + lo;
  }
  at::Generator gen_;
};

// --- comparison ------------------------------------------------------------------------------------

// |actual - expected| <= atol + rtol * |expected| (+ bound, elementwise, when given).
struct Tol {
  double rtol = 0, atol = 0;
};

// Machine epsilon of a float dtype (the spacing of values in [1, 2)); 0 for integers and bool.
inline double eps(at::ScalarType s) {
  switch (s) {
    case at::kHalf:
      return std::ldexp(1.0, -10);
    case at::kBFloat16:
      return std::ldexp(1.0, -7);
    case at::kFloat:
      return std::ldexp(1.0, -23);
    case at::kDouble:
      return std::ldexp(1.0, -52);
    default:
      return 0.0;
  }
}

// The eps of the type kiln computes a float result in: float64 stays float64; float16, bfloat16 and
// integer inputs to float math compute in float32.
inline double compute_eps(at::ScalarType result) { return eps(result == at::kDouble ? at::kDouble : at::kFloat); }

// A tolerance of `n` units of float32/float64 rounding, relative and (for results near 0) absolute.
// float16/bfloat16: kiln computes in float32 and rounds once; libtorch does too, or computes in the
// narrow type, so results that straddle a rounding boundary may land one narrow ulp apart: one eps of
// the narrow type on top of n float32 units.
// n = 0 means exact in every dtype: one correctly rounded float32 result rounds to the same narrow value
// on both sides.
inline Tol ulps(at::ScalarType s, double n) {
  if (n == 0) return {};
  if (is_narrow(s)) {
    double e = eps(s) + n * eps(at::kFloat);
    return {e, e};
  }
  return {n * eps(s), n * eps(s)};
}

inline std::string shape_text(at::IntArrayRef s) {
  std::ostringstream o;
  o << "(";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << ")";
  return o.str();
}

// The multi-index of flat position `i` in a contiguous tensor of `sizes`.
inline std::string index_text(int64_t i, at::IntArrayRef sizes) {
  std::vector<int64_t> idx(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    idx[d] = sizes[d] ? i % sizes[d] : 0;
    i = sizes[d] ? i / sizes[d] : 0;
  }
  return shape_text(idx);
}

// "" when kiln's dtype and shape are torch's, else what differs.
inline std::string header_mismatch(const Tensor& actual, const at::Tensor& expected) {
  std::ostringstream o;
  std::optional<at::ScalarType> dt = aten_dtype(actual.dtype());
  if (!dt || *dt != expected.scalar_type()) o << "dtype: kiln " << actual.dtype().name() << ", torch " << name(expected.scalar_type()) << "; ";
  if (actual.shape() != Shape(expected.sizes().begin(), expected.sizes().end()))
    o << "shape: kiln " << shape_str(actual.shape()) << ", torch " << shape_text(expected.sizes()) << "; ";
  return o.str();
}

// "" when every value of `actual` (kiln's, already on the host, any dtype that holds them exactly)
// matches `expected`: integers and bool exactly, floats within `tol` (NaN matches NaN; an infinity must
// be the same infinity). Otherwise the count and the first few differing elements.
inline std::string value_mismatch(const at::Tensor& actual, const at::Tensor& expected, Tol tol = {},
                                  std::optional<at::Tensor> bound = std::nullopt) {
  at::Tensor a = actual.contiguous().reshape({-1}), e = expected.contiguous().reshape({-1});
  bool integral = !at::isFloatingType(expected.scalar_type());
  at::Tensor bad;
  if (integral) {
    bad = a.to(at::kLong).ne(e.to(at::kLong));
  } else {
    at::Tensor ad = a.to(at::kDouble), ed = e.to(at::kDouble);
    at::Tensor limit = tol.atol + tol.rtol * ed.abs();
    if (bound) limit = limit + bound->to(at::kDouble).reshape({-1});
    // Only finite values get a tolerance: an infinity must be matched exactly, and a NaN by a NaN.
    at::Tensor near = ad.isfinite() & ed.isfinite() & (ad - ed).abs().le(limit);
    bad = (ad.eq(ed) | (ad.isnan() & ed.isnan()) | near).logical_not();
  }
  int64_t count = bad.sum().item<int64_t>();
  if (count == 0) return "";
  std::ostringstream o;
  o << count << " of " << e.numel() << " values differ (shape " << shape_text(expected.sizes()) << ", " << name(expected.scalar_type());
  if (!integral) o << ", rtol " << tol.rtol << ", atol " << tol.atol;
  o << "):";
  at::Tensor where = bad.nonzero().reshape({-1});
  o.precision(10);
  for (int64_t j = 0; j < std::min<int64_t>(where.numel(), 6); ++j) {
    int64_t i = where[j].item<int64_t>();
    o << " at " << index_text(i, expected.sizes()) << " kiln ";
    if (integral)
      o << a[i].item<int64_t>() << " torch " << e[i].item<int64_t>();
    else
      o << a[i].item<double>() << " torch " << e[i].item<double>();
    o << ";";
  }
  return o.str();
}

// "" when kiln's `actual` has torch's shape and dtype and its values match `expected` (value_mismatch).
// Realizes `actual` on its own: one kernel, storing to its own dtype.
inline std::string mismatch(Tensor actual, const at::Tensor& expected, Tol tol = {}, std::optional<at::Tensor> bound = std::nullopt) {
  std::string header = header_mismatch(actual, expected);
  if (!header.empty()) return header;
  return value_mismatch(to_aten(actual), expected, tol, bound);
}

// Many checks realized together. Compiling a kernel costs ~0.3 s of clang, so a table of elementwise
// cases realized one by one spends minutes compiling; a batch computes all its results in a few kernels
// (one per 48 results when they are elementwise). Each result's dtype and shape are checked as kiln
// made them; its values then travel cast to a carrier that holds them exactly (float64 for floats,
// int64 for integers and bool), flattened and concatenated, and are compared piece by piece.
class Batch {
 public:
  void check(std::string what, const Tensor& actual, const at::Tensor& expected, Tol tol = {}, std::optional<at::Tensor> bound = std::nullopt) {
    std::string header = header_mismatch(actual, expected);
    if (!header.empty()) {
      INFO(what);
      CHECK(header == "");
      return;
    }
    bool is_float = at::isFloatingType(expected.scalar_type());
    Tensor flat = actual.cast(is_float ? dtypes::float64 : dtypes::int64).reshape({actual.numel()});
    items_.push_back({std::move(what), flat, expected, tol, std::move(bound), is_float});
  }

  // Realizes the pending results and CHECKs each one; the message names the case that failed.
  void run() {
    for (bool is_float : {true, false}) {
      std::vector<const Item*> group;
      for (const Item& item : items_)
        if (item.is_float == is_float && item.flat.numel() > 0)
          group.push_back(&item);
        else if (item.is_float == is_float)
          check_one(item, at::empty({0}, at::kDouble));
      for (size_t begin = 0; begin < group.size(); begin += kPerKernel) {
        size_t end = std::min(group.size(), begin + kPerKernel);
        std::vector<Tensor> flats;
        for (size_t i = begin; i < end; ++i) flats.push_back(group[i]->flat);
        at::Tensor all = to_aten(Tensor::cat(flats, 0));
        int64_t offset = 0;
        for (size_t i = begin; i < end; ++i) {
          int64_t n = group[i]->flat.numel();
          check_one(*group[i], all.slice(0, offset, offset + n));
          offset += n;
        }
      }
    }
    items_.clear();
  }

 private:
  static constexpr size_t kPerKernel = 48;  // bounds the size of one generated kernel
  struct Item {
    std::string what;
    Tensor flat;
    at::Tensor expected;
    Tol tol;
    std::optional<at::Tensor> bound;
    bool is_float;
  };
  static void check_one(const Item& item, const at::Tensor& values) {
    INFO(item.what);
    CHECK(value_mismatch(values, item.expected, item.tol, item.bound) == "");
  }
  std::vector<Item> items_;
};

// The torch result for a narrow float (float16/bfloat16) input when libtorch 1.13 has no CPU kernel for
// that dtype: compute in float32 and round once, which is what libtorch does where it has one.
inline at::Tensor torch_narrow(const std::function<at::Tensor(const std::vector<at::Tensor>&)>& f, const std::vector<at::Tensor>& in) {
  try {
    return f(in);
  } catch (const c10::Error&) {
    at::ScalarType narrow = at::kFloat;
    std::vector<at::Tensor> wide;
    for (const at::Tensor& t : in) {
      if (is_narrow(t.scalar_type())) narrow = t.scalar_type();
      wide.push_back(is_narrow(t.scalar_type()) ? t.to(at::kFloat) : t);
    }
    at::Tensor r = f(wide);
    return at::isFloatingType(r.scalar_type()) ? r.to(narrow) : r;
  }
}

}  // namespace kiln::oracle

// batch.check named by its context, its line and the kiln expression, as Catch's CHECK would show them.
#define KILN_BATCH_CHECK(batch, context, actual, ...) (batch).check(::kiln::cat(context, " (line ", __LINE__, "): ", #actual), actual, __VA_ARGS__)
