// Random graphs of ops and views, realized through the whole pipeline and compared with the naive
// reference evaluator, which shares no code with the scheduler, the lowering or the renderer. Fixed
// seed; KILN_FUZZ=k runs k times as many graphs.
#include <functional>
#include <random>

#include "frontend/tensor.h"
#include "helpers.h"
#include "reference/reference.h"
#include "uop/config.h"

using namespace kiln;
namespace R = kiln::ref;

namespace {

struct Pair {
  Tensor t;
  R::Array r;
};

class GraphGen {
 public:
  explicit GraphGen(uint64_t seed) : rng_(seed) {}

  int64_t pick(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }

  Pair input(Shape shape) {
    std::vector<double> v(static_cast<size_t>(numel(shape)));
    std::uniform_real_distribution<double> u(-2, 2);
    for (double& x : v) x = u(rng_);
    R::Array r = R::array(shape, v, dtypes::float32);
    std::vector<float> f(v.begin(), v.end());
    for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(r.data[i]);
    return {Tensor::from_vector(f, shape), r};
  }

  Shape random_shape() {
    Shape s(static_cast<size_t>(pick(1, 3)));
    for (int64_t& d : s) d = pick(0, 9) == 0 ? 0 : pick(1, 5);  // sometimes empty: size-0 axes go everywhere too
    return s;
  }

  // One random step applied to x (and the same on the reference).
  Pair step(const Pair& x) {
    const Shape& s = x.t.shape();
    int64_t nd = static_cast<int64_t>(s.size());
    if (nd == 0) return {x.t.reshape({1}), R::reshape(x.r, {1})};
    switch (pick(0, 11)) {
      case 0: return {x.t.exp2().minimum(x.t.full_like(100)), R::minimum(R::exp2(x.r), R::full(s, 100))};
      case 1: return {x.t.relu(), R::relu(x.r)};
      case 2: return {-x.t * 0.5, R::mul(R::neg(x.r), R::scalar(0.5))};
      case 3: {  // binary with a broadcast partner of the same rank, some axes 1
        Shape p = s;
        for (int64_t& d : p)
          if (pick(0, 1)) d = 1;
        Pair y = input(p);
        if (pick(0, 1)) return {x.t + y.t, R::add(x.r, y.r)};
        return {x.t.maximum(y.t), R::maximum(x.r, y.r)};
      }
      case 4: {  // reduce
        int64_t axis = pick(-nd, nd - 1);
        bool keep = pick(0, 1);
        bool empty = s[static_cast<size_t>(axis < 0 ? axis + nd : axis)] == 0;  // max of nothing is an error
        if (empty || pick(0, 1)) return {x.t.sum({axis}, keep), R::sum(x.r, {axis}, keep)};
        return {x.t.max({axis}, keep), R::max(x.r, {axis}, keep)};
      }
      case 5: {  // permute
        std::vector<int64_t> order(static_cast<size_t>(nd));
        for (int64_t i = 0; i < nd; ++i) order[static_cast<size_t>(i)] = i;
        std::shuffle(order.begin(), order.end(), rng_);
        return {x.t.permute(order), R::permute(x.r, order)};
      }
      case 6: {  // flip
        int64_t axis = pick(0, nd - 1);
        return {x.t.flip({axis}), R::flip(x.r, {axis})};
      }
      case 7: {  // pad
        std::vector<std::pair<int64_t, int64_t>> p;
        for (int64_t i = 0; i < nd; ++i) p.push_back({pick(0, 2), pick(0, 2)});
        return {x.t.pad(p), R::pad(x.r, p)};
      }
      case 8: {  // shrink
        std::vector<std::pair<int64_t, int64_t>> b;
        for (int64_t d : s) {
          int64_t lo = d == 0 ? 0 : pick(0, d - 1);
          b.push_back({lo, d == 0 || pick(0, 9) == 0 ? lo : pick(lo + 1, d)});  // sometimes an empty range
        }
        return {x.t.shrink(b), R::shrink(x.r, b)};
      }
      case 9: {  // reshape: flatten, or split the flat size into two factors
        int64_t n = numel(s);
        Shape ns{n};
        for (int64_t f = 2; f < n; ++f)
          if (n % f == 0 && pick(0, 1)) {
            ns = {f, n / f};
            break;
          }
        return {x.t.reshape(ns), R::reshape(x.r, ns)};
      }
      case 10: {  // expand a size-1 axis (insert one first if none)
        Shape ns = s, big = s;
        ns.insert(ns.begin(), 1);
        big = ns;
        big[0] = pick(2, 3);
        return {x.t.reshape(ns).expand(big), R::expand(R::reshape(x.r, ns), big)};
      }
      default: {  // strided slice
        int64_t axis = pick(0, nd - 1);
        int64_t stride = pick(1, 2) * (pick(0, 3) == 0 ? -1 : 1);
        return {x.t.slice(axis, std::nullopt, std::nullopt, stride), R::slice(x.r, [&] {
                  std::vector<R::Slice> sl(static_cast<size_t>(axis + 1));
                  sl[static_cast<size_t>(axis)] = {std::nullopt, std::nullopt, stride};
                  return sl;
                }())};
      }
    }
  }

 private:
  std::mt19937_64 rng_;
};

}  // namespace

TEST_CASE("random graphs of ops and views match the naive evaluator", "[fuzz]") {
  const int graphs = 200 * config().fuzz;
  GraphGen gen(1234);
  for (int g = 0; g < graphs; ++g) {
    Pair x = gen.input(gen.random_shape());
    std::string ops;
    int steps = static_cast<int>(gen.pick(1, 6));
    for (int i = 0; i < steps; ++i) {
      if (x.t.numel() > 4096 || x.t.ndim() > 4) break;
      x = gen.step(x);
      ops += cat(" ", shape_str(x.t.shape()));
      if (gen.pick(0, 4) == 0) x.t = x.t.contiguous();  // sometimes a kernel boundary mid-graph
    }
    std::vector<float> got = x.t.to_vector<float>();
    R::Array g_arr = R::array(x.t.shape(), std::vector<double>(got.begin(), got.end()), dtypes::float32);
    std::string why;
    bool ok = R::allclose(g_arr, x.r, 1e-5, 1e-5, &why);
    if (!ok) FAIL("graph " << g << " (shapes after each step:" << ops << ") differs from the reference: " << why
                           << "\n  got  " << R::to_string(g_arr) << "\n  want " << R::to_string(x.r));
  }
}
