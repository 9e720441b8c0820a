// `kiln devices --check`: for every available device, a quick conformance run (a few ops of every
// kind against host loops and, for every other device, a copy across) and a roofline probe (memory
// bandwidth, arithmetic peak, realize latency), then a verdict per device.
//
// The full certification is the test suite (`make test` runs the conformance suite on every device it
// finds); this is the one-minute answer to "does this device work here, and how fast is it".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "devices/device.h"
#include "frontend/tensor.h"
#include "uop/error.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<float> pattern(size_t n, float scale, int shift) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(static_cast<int64_t>((i * 7 + shift) % 19) - 9);
  return v;
}

// The worst relative error of got against want; inf when sizes differ or a NaN appears.
double worst_error(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double e = std::abs(double(got[i]) - want[i]) / (1 + std::abs(double(want[i])));
    if (std::isnan(e)) return INFINITY;
    worst = std::max(worst, e);
  }
  return worst;
}

struct CheckCase {
  std::string name;
  std::function<double(const std::string&)> run;  // the worst error on the device
};

std::vector<CheckCase> check_cases(const std::vector<std::string>& others) {
  std::vector<CheckCase> cases = {
      {"elementwise relu(a*b+c)", [](const std::string& d) {
         std::vector<float> a = pattern(4099, 0.25f, 1), b = pattern(4099, 0.5f, 2), c = pattern(4099, 0.125f, 3), want(4099);
         for (size_t i = 0; i < want.size(); ++i) want[i] = std::max(0.0f, a[i] * b[i] + c[i]);
         Tensor ta = Tensor::from_vector(a, {4099}, d), tb = Tensor::from_vector(b, {4099}, d), tc = Tensor::from_vector(c, {4099}, d);
         return worst_error((ta * tb + tc).relu().to_vector<float>(), want);
       }},
      {"reduce sum over rows", [](const std::string& d) {
         std::vector<float> a = pattern(300 * 257, 0.25f, 4), want(300, 0.0f);
         for (size_t i = 0; i < 300; ++i)
           for (size_t j = 0; j < 257; ++j) want[i] += a[i * 257 + j];
         return worst_error(Tensor::from_vector(a, {300, 257}, d).sum({1}).to_vector<float>(), want);
       }},
      {"matmul 67x45x33", [](const std::string& d) {
         std::vector<float> a = pattern(67 * 45, 0.25f, 5), b = pattern(45 * 33, 0.25f, 6), want(67 * 33, 0.0f);
         for (size_t i = 0; i < 67; ++i)
           for (size_t k = 0; k < 45; ++k)
             for (size_t j = 0; j < 33; ++j) want[i * 33 + j] += a[i * 45 + k] * b[k * 33 + j];
         Tensor ta = Tensor::from_vector(a, {67, 45}, d), tb = Tensor::from_vector(b, {45, 33}, d);
         return worst_error(ta.matmul(tb).to_vector<float>(), want);
       }},
      {"softmax of a transposed view", [](const std::string& d) {
         std::vector<float> a = pattern(40 * 24, 0.5f, 7), want(24 * 40);
         for (size_t i = 0; i < 24; ++i) {
           double mx = -INFINITY, sum = 0;
           for (size_t j = 0; j < 40; ++j) mx = std::max<double>(mx, a[j * 24 + i]);
           for (size_t j = 0; j < 40; ++j) sum += std::exp(a[j * 24 + i] - mx);
           for (size_t j = 0; j < 40; ++j) want[i * 40 + j] = float(std::exp(a[j * 24 + i] - mx) / sum);
         }
         return worst_error(Tensor::from_vector(a, {40, 24}, d).permute({1, 0}).softmax(1).to_vector<float>(), want);
       }},
  };
  for (const std::string& other : others)
    cases.push_back({cat("copy to ", other, " and back"), [other](const std::string& d) {
                       std::vector<float> a = pattern(1000, 0.5f, 8), want(1000);
                       for (size_t i = 0; i < 1000; ++i) want[i] = a[i] * 2 + 1;
                       Tensor t = (Tensor::from_vector(a, {1000}, d) * 2.0).to(other) + 1.0;
                       return worst_error(t.to(d).to_vector<float>(), want);
                     }});
  return cases;
}

// Median seconds of `runs` realizes of step(x), each on the previous result, so every realize computes
// (a graph over the same input could be found realized) and compiles nothing after the first.
double median_seconds(Tensor x, const std::function<Tensor(const Tensor&)>& step, const std::string& device, int runs) {
  std::vector<double> times;
  for (int i = 0; i < runs + 2; ++i) {
    Tensor t = step(x);
    auto start = Clock::now();
    t.realize();
    get_device(device).synchronize();
    x = t;
    if (i > 1) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());  // the first compiles, the second gets fresh memory
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

void run_devices_check() {
  std::vector<std::string> available;
  for (const DeviceStatus& status : probe_devices()) {
    if (status.available) available.push_back(status.name);
    else std::cout << status.name << "  not available: " << status.reason << "\n";
  }
  int failed_devices = 0;
  for (const std::string& d : available) {
    std::vector<std::string> others;
    for (const std::string& o : available)
      if (o != d) others.push_back(o);
    std::cout << d << "\n";
    int passed = 0, total = 0;
    for (const CheckCase& c : check_cases(others)) {
      ++total;
      std::string result;
      try {
        double err = c.run(d);
        bool ok = err <= 1e-5;
        passed += ok;
        result = ok ? "ok" : cat("WRONG (worst relative error ", err, ")");
      } catch (const std::exception& e) {
        result = cat("ERROR: ", e.what());
      }
      std::cout << "    " << std::left << std::setw(34) << c.name << result << "\n";
    }
    // Roofline probe. REF interprets: a smaller problem keeps it to seconds.
    bool slow = d == "REF";
    int64_t n = slow ? (1 << 14) : (1 << 24), fn = slow ? (1 << 10) : (1 << 22);
    const int chain = 128;
    try {
      Tensor x = Tensor::rand({n}, dtypes::float32, d).realize(), y = Tensor::rand({fn}, dtypes::float32, d).realize();
      double bw = median_seconds(x, [](const Tensor& v) { return v * 0.5 + 0.5; }, d, 5);
      // Eight independent chains per element, so the multiply-adds overlap instead of waiting on each other.
      double peak = median_seconds(y, [&](const Tensor& v) {
        std::vector<Tensor> w;
        for (int k = 0; k < 8; ++k) w.push_back(v + 0.01 * k);
        for (int i = 0; i < chain / 8; ++i)
          for (Tensor& c : w) c = c * 0.999 + 0.001;
        Tensor total = w[0];
        for (int k = 1; k < 8; ++k) total = total + w[k];
        return total;
      }, d, 5);
      double latency = median_seconds(Tensor::rand({16}, dtypes::float32, d).realize(), [](const Tensor& v) { return v + 1.0; }, d, 21);
      std::cout << std::fixed << std::setprecision(1) << "    bandwidth " << 8.0 * n / bw * 1e-9 << " GB/s (x*0.5+0.5 on "
                << n << " floats), arithmetic " << (2.0 * chain + 15) * fn / peak * 1e-9 << " GFLOP/s (" << chain
                << " multiply-adds per element), realize latency " << latency * 1e6 << " us\n" << std::defaultfloat;
    } catch (const std::exception& e) {
      std::cout << "    probe failed: " << e.what() << "\n";
      passed = -1;
    }
    bool ok = passed == total;
    failed_devices += !ok;
    std::cout << "    verdict: " << (ok ? cat("works (", passed, "/", total, " checks passed)")
                                      : passed < 0 ? std::string("FAILED (the probe did not run)")
                                                   : cat("FAILED (", total - passed, " of ", total, " checks failed)"))
              << "\n";
  }
  if (failed_devices > 0) throw Error(cat("devices --check: ", failed_devices, " device(s) failed their checks (above)"));
}

}  // namespace kiln
