// `kiln devices --check` (devices_check.h): for every available device, a quick conformance run (copies
// of every bit pattern, integer and exact float ops compared bit for bit, a softmax within a few ulps,
// copies across to every other device) and a roofline probe (memory bandwidth, arithmetic rate, realize
// latency) judged against the machine's limits measured in the same run, then a verdict per device.
//
// The full certification is the test suite (`make test` runs the conformance suite on every device it
// finds); this is the one-minute answer to "does this device work here, and how fast is it".
#include "devices_check.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>
#include <type_traits>

#include "devices/device.h"
#include "frontend/tensor.h"
#include "uop/error.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

// Small multiples of `scale` (a power of two): sums and products of a few thousand of them are exact
// in float32, so the ops below have one right answer whatever order a device adds in.
std::vector<float> pattern(size_t n, float scale, int shift) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(static_cast<int64_t>((i * 7 + shift) % 19) - 9);
  return v;
}

// Every bit pattern is as likely: NaNs with payloads, infinities, subnormals and negative zero included.
std::vector<int32_t> random_bits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = static_cast<int32_t>(rng());
  return v;
}

// Units in the last place between two floats of the same sign (their bit patterns, as ordered integers).
int64_t ulps_apart(float a, float b) {
  auto ordered = [](float f) {
    int32_t i = std::bit_cast<int32_t>(f);
    return i < 0 ? int64_t(INT32_MIN) - i : int64_t(i);
  };
  return std::abs(ordered(a) - ordered(b));
}

template <typename T>
std::string bits_text(T v) {
  std::ostringstream out;
  out << std::setprecision(9) << v << " (0x" << std::hex << std::bit_cast<uint32_t>(v) << ")";
  return out.str();
}

// "" when got matches want: bit for bit with max_ulps == 0, else within max_ulps; otherwise what the
// first mismatch is.
template <typename T>
std::string compare(const std::vector<T>& got, const std::vector<T>& want, int64_t max_ulps) {
  if (got.size() != want.size()) return cat("WRONG: ", got.size(), " values, expected ", want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    int64_t apart = 0;
    if constexpr (std::is_same_v<T, float>) apart = ulps_apart(got[i], want[i]);
    else apart = got[i] == want[i] ? 0 : INT64_MAX;
    bool same_bits = std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(want[i]);
    if (same_bits || (max_ulps > 0 && apart <= max_ulps)) continue;
    return cat("WRONG at ", i, ": got ", bits_text(got[i]), ", expected ", bits_text(want[i]),
               max_ulps == 0 ? std::string(" (bit-exact op)") : cat(", ", apart, " ulps apart (at most ", max_ulps, ")"));
  }
  return "";
}

struct CheckCase {
  std::string name;
  std::function<std::string(const std::string&)> run;  // "" or what is wrong on the device
};

std::vector<CheckCase> check_cases(const std::vector<std::string>& others) {
  std::vector<CheckCase> cases = {
      {"copy in and out, every bit pattern", [](const std::string& d) {
         std::vector<int32_t> a = random_bits(4099, 1);
         return compare(Tensor::from_vector(a, {4099}, d).to_vector<int32_t>(), a, 0);
       }},
      {"integer (a*b+c)^(a>>3)", [](const std::string& d) {
         std::vector<int32_t> a = random_bits(4099, 2), b = random_bits(4099, 3), c = random_bits(4099, 4), want(4099);
         for (size_t i = 0; i < want.size(); ++i) {  // wrapping, as kiln's integers do (uop/ops.h)
           uint32_t ab = uint32_t(a[i]) * uint32_t(b[i]) + uint32_t(c[i]);
           want[i] = int32_t(ab ^ uint32_t(a[i] >> 3));
         }
         Tensor ta = Tensor::from_vector(a, {4099}, d), tb = Tensor::from_vector(b, {4099}, d), tc = Tensor::from_vector(c, {4099}, d);
         return compare((ta * tb + tc).bitwise_xor(ta.shr(3)).to_vector<int32_t>(), want, 0);
       }},
      {"elementwise relu(a*b+c)", [](const std::string& d) {
         std::vector<float> a = pattern(4099, 0.25f, 1), b = pattern(4099, 0.5f, 2), c = pattern(4099, 0.125f, 3), want(4099);
         for (size_t i = 0; i < want.size(); ++i) want[i] = std::max(0.0f, a[i] * b[i] + c[i]);
         Tensor ta = Tensor::from_vector(a, {4099}, d), tb = Tensor::from_vector(b, {4099}, d), tc = Tensor::from_vector(c, {4099}, d);
         return compare((ta * tb + tc).relu().to_vector<float>(), want, 0);
       }},
      {"reduce sum over rows", [](const std::string& d) {
         std::vector<float> a = pattern(300 * 257, 0.25f, 4), want(300, 0.0f);
         for (size_t i = 0; i < 300; ++i)
           for (size_t j = 0; j < 257; ++j) want[i] += a[i * 257 + j];
         return compare(Tensor::from_vector(a, {300, 257}, d).sum({1}).to_vector<float>(), want, 0);
       }},
      {"matmul 67x45x33", [](const std::string& d) {
         std::vector<float> a = pattern(67 * 45, 0.25f, 5), b = pattern(45 * 33, 0.25f, 6), want(67 * 33, 0.0f);
         for (size_t i = 0; i < 67; ++i)
           for (size_t k = 0; k < 45; ++k)
             for (size_t j = 0; j < 33; ++j) want[i * 33 + j] += a[i * 45 + k] * b[k * 33 + j];
         Tensor ta = Tensor::from_vector(a, {67, 45}, d), tb = Tensor::from_vector(b, {45, 33}, d);
         return compare(ta.matmul(tb).to_vector<float>(), want, 0);
       }},
      // exp is not exact: the answer (computed in double, rounded once) may differ by a few ulps.
      {"softmax of a transposed view", [](const std::string& d) {
         std::vector<float> a = pattern(40 * 24, 0.5f, 7), want(24 * 40);
         for (size_t i = 0; i < 24; ++i) {
           double mx = -INFINITY, sum = 0;
           for (size_t j = 0; j < 40; ++j) mx = std::max<double>(mx, a[j * 24 + i]);
           for (size_t j = 0; j < 40; ++j) sum += std::exp(a[j * 24 + i] - mx);
           for (size_t j = 0; j < 40; ++j) want[i * 40 + j] = float(std::exp(a[j * 24 + i] - mx) / sum);
         }
         return compare(Tensor::from_vector(a, {40, 24}, d).permute({1, 0}).softmax(1).to_vector<float>(), want, 16);
       }},
  };
  for (const std::string& other : others) {
    cases.push_back({cat("copy to ", other, " and back"), [other](const std::string& d) {
                       std::vector<int32_t> a = random_bits(1000, 5);
                       return compare(Tensor::from_vector(a, {1000}, d).to(other).to(d).to_vector<int32_t>(), a, 0);
                     }});
    cases.push_back({cat("compute here, then on ", other), [other](const std::string& d) {
                       std::vector<float> a = pattern(1000, 0.5f, 8), want(1000);
                       for (size_t i = 0; i < 1000; ++i) want[i] = a[i] * 2 + 1;
                       Tensor t = (Tensor::from_vector(a, {1000}, d) * 2.0).to(other) + 1.0;
                       return compare(t.to(d).to_vector<float>(), want, 0);
                     }});
  }
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

struct Roofline {
  double gbs = 0, gflops = 0, latency_us = 0;
};

// Bandwidth of x*0.5+0.5 (8 bytes per element), arithmetic of 128 dependent multiply-adds in 8
// independent chains per element (so they overlap), and the latency of a tiny realize. An oracle gets
// a smaller problem: it interprets, so the full one would take minutes.
Roofline probe(const std::string& d) {
  bool oracle = get_device(d).spec().oracle;
  int64_t n = oracle ? (1 << 14) : (1 << 24), fn = oracle ? (1 << 10) : (1 << 22);
  const int chain = 128;
  Tensor x = Tensor::rand({n}, dtypes::float32, d).realize(), y = Tensor::rand({fn}, dtypes::float32, d).realize();
  double bw = median_seconds(x, [](const Tensor& v) { return v * 0.5 + 0.5; }, d, 5);
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
  return {8.0 * double(n) / bw * 1e-9, (2.0 * chain + 15) * double(fn) / peak * 1e-9, latency * 1e6};
}

}  // namespace

bool check_device(const std::string& d, const std::vector<std::string>& others, const MachineLimits* machine,
                  std::ostream& out) {
  out << d << "\n";
  int passed = 0, total = 0;
  for (const CheckCase& c : check_cases(others)) {
    ++total;
    std::string result;
    try {
      result = c.run(d);
    } catch (const std::exception& e) {
      result = cat("ERROR: ", e.what());
    }
    passed += result.empty();
    out << "    " << std::left << std::setw(36) << c.name << (result.empty() ? "ok" : result) << "\n";
  }
  std::vector<std::string> slow;
  bool probed = true;
  try {
    Roofline r = probe(d);
    out << std::fixed << std::setprecision(1) << "    bandwidth " << r.gbs << " GB/s, arithmetic " << r.gflops
        << " GFLOP/s, realize latency " << r.latency_us << " us\n";
    if (machine && get_device(d).spec().oracle) {
      out << "    (an oracle: its rates are not compared with the machine's)\n";
    } else if (machine) {
      double bw_ratio = r.gbs / machine->triad_gbs, fma_ratio = r.gflops / machine->fma_gflops;
      out << std::setprecision(3) << "    of the machine's: bandwidth " << bw_ratio << " x " << std::setprecision(1)
          << machine->triad_gbs << " GB/s (" << machine->triad_note << "), arithmetic " << std::setprecision(3)
          << fma_ratio << " x " << std::setprecision(1) << machine->fma_gflops << " GFLOP/s (FMA peak loop)\n";
      if (bw_ratio < kMinBandwidthRatio) slow.push_back(cat("bandwidth below ", kMinBandwidthRatio, " of the machine's"));
      if (fma_ratio < kMinArithmeticRatio) slow.push_back(cat("arithmetic below ", kMinArithmeticRatio, " of the machine's"));
    }
    out << std::defaultfloat;
  } catch (const std::exception& e) {
    out << std::defaultfloat << "    probe failed: " << e.what() << "\n";
    probed = false;
  }
  bool ok = passed == total && probed && slow.empty();
  std::string why;
  if (passed < total) why = cat(total - passed, " of ", total, " checks failed");
  if (!probed) why += cat(why.empty() ? "" : "; ", "the probe did not run");
  for (const std::string& s : slow) why += cat(why.empty() ? "" : "; ", s, " (built without optimization?)");
  std::string verdict = ok ? cat("works (", passed, "/", total, " checks passed)")
                          : passed == total && probed ? cat("NOT CERTIFIED (", why, ")") : cat("FAILED (", why, ")");
  out << "    verdict: " << verdict << "\n";
  return ok;
}

void run_devices_check(const MachineLimits& machine) {
  std::cout << std::fixed << std::setprecision(1) << "machine: " << machine.triad_gbs << " GB/s (" << machine.triad_note
            << "), " << machine.fma_gflops << " GFLOP/s (" << machine.fma_note << ")\n" << std::defaultfloat;
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
    failed_devices += !check_device(d, others, &machine, std::cout);
  }
  if (failed_devices > 0) throw Error(cat("devices --check: ", failed_devices, " device(s) not certified (see each verdict above)"));
}

}  // namespace kiln
