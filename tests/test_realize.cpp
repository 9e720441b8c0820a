// The realize engine's caches: a schedule is reused for the same computation on new data, never for a
// different one, and what a reused schedule computes matches the host.
#include <cmath>
#include <functional>
#include <future>
#include <sstream>

#include "devices/device.h"
#include "frontend/realize.h"
#include "frontend/tensor.h"
#include "helpers.h"
#include "uop/thread_pool.h"

using namespace kiln;

namespace {

std::vector<float> values(size_t n, float seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(seed + 0.37f * float(i)) * 3.0f;
  return v;
}

// "" when got matches want within float rounding, else the first difference with its index.
std::string mismatch(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return "sizes " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= 1e-5f + 1e-5f * std::fabs(want[i]))) {
      std::ostringstream out;
      out << "at " << i << ": got " << got[i] << ", want " << want[i];
      return out.str();
    }
  return "";
}

// What one realize did to the caches.
struct Delta {
  size_t hits, misses, lowered;
};

Delta run_counting(const std::function<void()>& body) {
  RealizeStats before = realize_stats();
  body();
  RealizeStats after = realize_stats();
  return {after.schedule_hits - before.schedule_hits, after.schedule_misses - before.schedule_misses,
          after.kernels_lowered - before.kernels_lowered};
}

std::vector<float> host_fma_relu(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c) {
  std::vector<float> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = std::max(a[i] * b[i] + c[i], 0.0f);
  return out;
}

}  // namespace

TEST_CASE("realize: the same graph on new data reuses the schedule and computes the new values", "[realize]") {
  auto graph = [](const Tensor& a, const Tensor& b, const Tensor& c) { return (a * b + c * 0.75).relu(); };
  std::vector<float> a = values(37, 1), b = values(37, 2), c = values(37, 3);
  std::vector<float> first = graph(Tensor::from_vector(a, {37}), Tensor::from_vector(b, {37}), Tensor::from_vector(c, {37})).to_vector<float>();
  for (float& x : c) x *= 0.75f;
  CHECK(mismatch(first, host_fma_relu(a, b, c)) == "");

  std::vector<float> a2 = values(37, 4), b2 = values(37, 5), c2 = values(37, 6), got;
  Delta d = run_counting([&] {
    got = graph(Tensor::from_vector(a2, {37}), Tensor::from_vector(b2, {37}), Tensor::from_vector(c2, {37})).to_vector<float>();
  });
  CHECK(d.hits == 1);
  CHECK(d.misses == 0);
  CHECK(d.lowered == 0);
  for (float& x : c2) x *= 0.75f;
  CHECK(mismatch(got, host_fma_relu(a2, b2, c2)) == "");
}

TEST_CASE("realize: a different graph with the same shapes is scheduled anew", "[realize]") {
  std::vector<float> a = values(29, 7), b = values(29, 8);
  Tensor ta = Tensor::from_vector(a, {29}), tb = Tensor::from_vector(b, {29});
  (ta * tb + 1.0).to_vector<float>();
  std::vector<float> got;
  SECTION("another op") {
    Delta d = run_counting([&] { got = (ta * tb - 1.0).to_vector<float>(); });
    CHECK(d.misses == 1);
    CHECK(d.hits == 0);
    for (size_t i = 0; i < a.size(); ++i) CHECK(got[i] == Approx(a[i] * b[i] - 1.0f));
  }
  SECTION("another constant") {
    Delta d = run_counting([&] { got = (ta * tb + 2.0).to_vector<float>(); });
    CHECK(d.misses == 1);
    for (size_t i = 0; i < a.size(); ++i) CHECK(got[i] == Approx(a[i] * b[i] + 2.0f));
  }
  SECTION("one input read twice instead of two inputs") {
    Delta d = run_counting([&] { got = (ta * ta + 1.0).to_vector<float>(); });
    CHECK(d.misses == 1);
    for (size_t i = 0; i < a.size(); ++i) CHECK(got[i] == Approx(a[i] * a[i] + 1.0f));
  }
  SECTION("inputs of another size") {
    std::vector<float> a3 = values(30, 9), b3 = values(30, 10);
    Delta d = run_counting([&] { got = (Tensor::from_vector(a3, {30}) * Tensor::from_vector(b3, {30}) + 1.0).to_vector<float>(); });
    CHECK(d.misses == 1);
    for (size_t i = 0; i < a3.size(); ++i) CHECK(got[i] == Approx(a3[i] * b3[i] + 1.0f));
  }
  SECTION("inputs of another dtype") {
    std::vector<double> a4(29), b4(29);
    for (size_t i = 0; i < 29; ++i) a4[i] = a[i], b4[i] = b[i];
    std::vector<double> got4;
    Delta d = run_counting([&] { got4 = (Tensor::from_vector(a4, {29}) * Tensor::from_vector(b4, {29}) + 1.0).to_vector<double>(); });
    CHECK(d.misses == 1);
    for (size_t i = 0; i < a4.size(); ++i) CHECK(got4[i] == Approx(a4[i] * b4[i] + 1.0));
  }
}

TEST_CASE("realize: a reused schedule of several kernels gives the new data's values", "[realize]") {
  // x - max(x) per row, then a sum: a reduce broadcast back is its own kernel, so this is several.
  auto graph = [](const Tensor& x) { return (x - x.max({1}, true)).exp().sum({1}); };
  auto host = [](const std::vector<float>& x) {
    std::vector<float> out(4);
    for (size_t r = 0; r < 4; ++r) {
      float m = -INFINITY, total = 0;
      for (size_t j = 0; j < 9; ++j) m = std::max(m, x[r * 9 + j]);
      for (size_t j = 0; j < 9; ++j) total += std::exp(x[r * 9 + j] - m);
      out[r] = total;
    }
    return out;
  };
  std::vector<float> x1 = values(36, 11), x2 = values(36, 12), got;
  CHECK(mismatch(graph(Tensor::from_vector(x1, {4, 9})).to_vector<float>(), host(x1)) == "");
  RealizeStats before = realize_stats();
  Delta d = run_counting([&] { got = graph(Tensor::from_vector(x2, {4, 9})).to_vector<float>(); });
  CHECK(d.hits == 1);
  CHECK(d.lowered == 0);
  CHECK(realize_stats().kernels_launched - before.kernels_launched >= 2);
  CHECK(mismatch(got, host(x2)) == "");
}

TEST_CASE("realize: a graph reading a node realized earlier uses its buffer, cached or not", "[realize]") {
  for (float seed : {13.0f, 14.0f}) {  // the second pass replays the first one's schedules
    INFO("seed " << seed);
    std::vector<float> x = values(21, seed);
    Tensor tx = Tensor::from_vector(x, {3, 7});
    Tensor y = tx * 2.0;
    Tensor z = y.sum({1}) + y.reshape({7, 3}).sum({0}).reshape({3, 1}).expand({3, 7}).sum({1});
    y.realize();  // z's graph still holds y's old node: the realized map serves its buffer
    std::vector<float> got = z.to_vector<float>(), want(3);
    for (size_t r = 0; r < 3; ++r) {  // row r of y, plus 7 times column r of y viewed as 7x3
      float col = 0;
      for (size_t k = 0; k < 7; ++k) col += 2 * x[r + 3 * k];
      float row = 0;
      for (size_t j = 0; j < 7; ++j) row += 2 * x[r * 7 + j];
      want[r] = row + 7 * col;
    }
    CHECK(mismatch(got, want) == "");
  }
}

TEST_CASE("realize: a long chain on new data hits without the big-stack scheduler and stays correct", "[realize]") {
  auto chain = [](Tensor t) {
    for (int i = 0; i < 400; ++i) t = i % 2 ? t * 0.5 : t + 1.0;
    return t;
  };
  std::vector<float> x1 = values(8, 15), x2 = values(8, 16), got;
  chain(Tensor::from_vector(x1, {8})).to_vector<float>();
  Delta d = run_counting([&] { got = chain(Tensor::from_vector(x2, {8})).to_vector<float>(); });
  CHECK(d.hits == 1);
  std::vector<float> want = x2;
  for (float& v : want)
    for (int i = 0; i < 400; ++i) v = i % 2 ? v * 0.5f : v + 1.0f;
  CHECK(mismatch(got, want) == "");
}

TEST_CASE("realize: a compile queued behind busy workers holds none of the schedule's memory after the realize", "[realize]") {
  // Every worker is busy, so the realize's prefetches stay queued and the realize builds its kernels
  // itself. Once it returns and the output is dropped, its memory must be back in the device cache (a
  // queued task that kept the schedule's buffers would hold it until a worker got to it).
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::vector<std::future<void>> busy;
  for (unsigned i = 0; i < default_pool().size(); ++i) busy.push_back(default_pool().submit([gate] { gate.wait(); }));
  Tensor probe = Tensor::ones({1});
  Device& device = get_device(probe.device());
  size_t held = 0;
  {
    // A constant no other test uses: these kernels are new to the kernel cache, so they are prefetched.
    Tensor big = ((Tensor::ones({1 << 20}) * 2.0f + 0.4375f).exp() * 3.0f).realize();
    CHECK(big.to_vector<float>()[12345] == Approx(std::exp(2.4375f) * 3.0f));
    held = device.cached_bytes();
  }
  size_t after = device.cached_bytes();
  release.set_value();
  for (std::future<void>& f : busy) f.get();
  CHECK(after >= held + (size_t{4} << 20));
}
