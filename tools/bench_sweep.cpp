// kiln bench sweep: matmul in every layout and size, the batched matmuls of attention, and conv2d
// forward, input gradient and weight gradient over channels, sizes, kernels, strides, padding and
// batch, each as GFLOP/s and % of the FMA peak measured beside it (time_case), with the worst and the median
// per group. The default heuristics only (no search). Measured, never asserted.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench.h"
#include "bench_reference.h"
#include "devices/device.h"
#include "frontend/jit.h"
#include "frontend/tensor.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

struct SweepCase {
  std::string group, name;
  double flops;
  std::function<Tensor()> build;  // a fresh graph of the same computation each call (inputs realized)
};

// This machine's speed swings up to 2x between minutes (other tenants of the host: the FMA peak read
// 232 and 442 GFLOP/s in two runs ten seconds apart), so each case is measured in rounds that alternate
// with short runs of the FMA peak loop, and its figure is the median of the per-round ratios to the faster
// of the two peaks timed just before and just after the round (within milliseconds of it).
struct Timing {
  double seconds;  // median over all timed replays
  double ratio;    // median over rounds of (the round's GFLOP/s) / (the faster of the peaks measured just before and after)
  double peak;     // median of the rounds' peaks, GFLOP/s
};

// The kernels alone: the case is captured by a Jit and its replays are timed (no graph building,
// scheduling, cache lookups or allocation in the timed part, which made single realizes of the small
// cases swing 2-3x between runs).
constexpr std::chrono::duration<double> kRoundSeconds{0.002};

Timing time_case(const SweepCase& c, const CReference& ref, int rounds) {
  Jit jit([&](const std::vector<Tensor>&) { return std::vector<Tensor>{c.build()}; });
  for (int i = 0; i < 4; ++i) jit({});  // warm-up and the two recorded calls, then one replay
  Device& device = get_device(jit({})[0].device());
  std::vector<double> all, ratios, peaks;
  float checksum = 0;
  auto peak_now = [&] {
    ref.fma_peak(200'000, &checksum);  // wakes libgomp's threads
    auto start = Clock::now();
    double flops = ref.fma_peak(3'000'000, &checksum);
    return flops / std::chrono::duration<double>(Clock::now() - start).count() * 1e-9;
  };
  double before = peak_now();
  for (int r = 0; r < rounds; ++r) {
    // Back-to-back replays, as a training step runs its kernels, for at least kRoundSeconds: the launch
    // team's helpers sleep through the peak loop, and waking one takes tens of microseconds on these
    // VMs, during which the caller runs every chunk itself; three replays of a 3 us kernel (matmul 64^3)
    // all fell inside that wake-up and timed one thread, not two.
    std::vector<double> seconds;
    for (auto round_start = Clock::now(); seconds.size() < 3 || Clock::now() - round_start < kRoundSeconds;) {
      auto start = Clock::now();
      jit({});
      device.synchronize();
      seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    std::sort(seconds.begin(), seconds.end());
    double after = peak_now();  // the faster of the peaks just before and just after: a conservative ratio
    peaks.push_back(std::max(before, after));
    ratios.push_back(c.flops / seconds[seconds.size() / 2] * 1e-9 / peaks.back());
    before = after;
    all.insert(all.end(), seconds.begin(), seconds.end());
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return {median(all), median(ratios), median(peaks)};
}

Tensor input(Shape shape) { return Tensor::randn(shape).realize(); }

void add_matmuls(std::vector<SweepCase>& cases, bool quick) {
  std::vector<int64_t> sizes = quick ? std::vector<int64_t>{64, 256, 1024} : std::vector<int64_t>{64, 128, 256, 512, 1024, 2048};
  for (int64_t n : sizes)
    for (int layout = 0; layout < 4; ++layout) {
      bool ta = layout & 2, tb = layout & 1;
      Tensor a = input({n, n}), b = input({n, n});
      std::string name = cat("A", ta ? "t" : "", ".B", tb ? "t" : "", " ", n, "^3");
      cases.push_back({"matmul", name, 2.0 * n * n * n, [=] {
                         Tensor l = ta ? a.transpose(0, 1) : a, r = tb ? b.transpose(0, 1) : b;
                         return l.matmul(r);
                       }});
    }
  // The three matmuls of nn.Linear(784, 512) on a batch of 256: forward, input and weight gradients.
  Tensor x = input({256, 784}), w = input({512, 784}), g = input({256, 512});
  double f = 2.0 * 256 * 784 * 512;
  cases.push_back({"matmul", "Linear fwd x.Wt 256x784->512", f, [=] { return x.matmul(w.transpose(0, 1)); }});
  cases.push_back({"matmul", "Linear dx g.W", f, [=] { return g.matmul(w); }});
  cases.push_back({"matmul", "Linear dW gt.x", f, [=] { return g.transpose(0, 1).matmul(x); }});
  // Attention: 8 heads x batch 4, 128 tokens, 64 per head.
  Tensor q = input({32, 128, 64}), k = input({32, 128, 64}), p = input({32, 128, 128});
  cases.push_back({"attention", "q.kt 32x128x128x64", 2.0 * 32 * 128 * 128 * 64, [=] { return q.matmul(k.transpose(1, 2)); }});
  cases.push_back({"attention", "p.v 32x128x64x128", 2.0 * 32 * 128 * 64 * 128, [=] { return p.matmul(k); }});
  cases.push_back({"attention", "dv = pt.do", 2.0 * 32 * 128 * 64 * 128, [=] { return p.transpose(1, 2).matmul(q); }});
}

struct Conv {
  int64_t n, c, k, h, r, stride, pad;
};

void add_convs(std::vector<SweepCase>& cases, bool quick) {
  std::vector<Conv> convs{{32, 64, 64, 32, 3, 1, 1}, {128, 32, 64, 26, 3, 1, 0}, {8, 16, 32, 28, 3, 2, 1}, {16, 128, 128, 14, 1, 1, 0},
                          {16, 32, 64, 16, 5, 1, 2},  {4, 3, 16, 64, 7, 2, 3},   {1, 256, 256, 7, 3, 1, 1},
                          // The same 26x26 conv padded (its output keeps NCHW order inside the kernel),
                          // and a ResNet-style 1x1 stride-2 downsample.
                          {128, 32, 64, 26, 3, 1, 1}, {16, 64, 128, 28, 1, 2, 0}};
  if (quick) convs.resize(4);
  for (const Conv& v : convs) {
    int64_t oh = (v.h + 2 * v.pad - v.r) / v.stride + 1;
    double f = 2.0 * v.n * v.k * oh * oh * v.c * v.r * v.r;
    Tensor x = input({v.n, v.c, v.h, v.h}), w = input({v.k, v.c, v.r, v.r}), g = input({v.n, v.k, oh, oh});
    std::array<int64_t, 2> s{v.stride, v.stride}, p{v.pad, v.pad};
    std::string name = cat("N", v.n, " ", v.c, "->", v.k, " ", v.h, "x", v.h, " k", v.r, " s", v.stride, " p", v.pad);
    cases.push_back({"conv fwd", name, f, [=] { return x.conv2d(w, std::nullopt, s, p); }});
    auto grad = [=](bool of_input) {
      Tensor xi = x.detach(), wi = w.detach();
      (of_input ? xi : wi).requires_grad_();
      (xi.conv2d(wi, std::nullopt, s, p) * g).sum().backward();
      Tensor out = *(of_input ? xi : wi).grad();
      (of_input ? xi : wi).requires_grad_(false);
      return out;
    };
    cases.push_back({"conv dx", name, f, [=] { return grad(true); }});
    cases.push_back({"conv dW", name, f, [=] { return grad(false); }});
  }
}


}  // namespace

void run_bench_sweep(const BenchOptions& options) {
  // The peak loop runs between a case's replays: libgomp's threads, spinning after it by default, took
  // the cores from kiln's launch team (a 64^3 matmul took 1 ms instead of 8 us). Set before libgomp loads,
  // and only if the user did not choose.
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  CReference ref = CReference::build();
  std::vector<SweepCase> cases;
  add_matmuls(cases, options.quick);
  add_convs(cases, options.quick);
  if (!options.only.empty()) {
    std::erase_if(cases, [&](const SweepCase& c) { return (c.group + " " + c.name).find(options.only) == std::string::npos; });
    if (cases.empty()) throw Error(cat("kiln bench sweep --only ", options.only, ": no case matches (a group and name, e.g. \"conv dx N8\")"));
  }
  struct Row {
    const SweepCase* c;
    double gflops, pct, peak;
  };
  std::vector<Row> rows;
  std::vector<double> peaks;
  for (const SweepCase& c : cases) {
    Timing t = time_case(c, ref, options.quick ? 3 : 5);
    rows.push_back({&c, c.flops / t.seconds * 1e-9, 100 * t.ratio, t.peak});
    peaks.push_back(t.peak);
    if (!options.json)
      std::cout << "  " << std::left << std::setw(10) << c.group << std::setw(34) << c.name << std::right << std::fixed
                << std::setprecision(1) << std::setw(8) << rows.back().gflops << " GFLOP/s  " << std::setw(5) << rows.back().pct
                << "% of peak (" << std::lround(t.peak) << ")\n"
                << std::flush;
  }
  std::sort(peaks.begin(), peaks.end());
  double peak = peaks[peaks.size() / 2];
  nlohmann::json out = nlohmann::json::array();
  std::vector<std::string> groups;
  for (const SweepCase& c : cases)
    if (std::find(groups.begin(), groups.end(), c.group) == groups.end()) groups.push_back(c.group);
  if (!options.json)
    std::cout << "FMA peak " << std::lround(peak) << " GFLOP/s (" << ref.threads() << " threads; median of the peaks measured beside each case, "
              << std::lround(peaks.front()) << ".." << std::lround(peaks.back()) << ")\n";
  for (const std::string& gname : groups) {
    std::vector<double> pct;
    std::string worst;
    double worst_pct = 1e9;
    for (const Row& r : rows)
      if (r.c->group == gname) {
        pct.push_back(r.pct);
        if (pct.back() < worst_pct) worst_pct = pct.back(), worst = r.c->name;
      }
    std::sort(pct.begin(), pct.end());
    double median = pct[pct.size() / 2];
    if (options.json)
      out.push_back({{"group", gname}, {"cases", pct.size()}, {"worst_pct_of_peak", worst_pct}, {"worst", worst}, {"median_pct_of_peak", median}});
    else
      std::cout << std::left << std::setw(10) << gname << std::right << " " << pct.size() << " cases: worst " << std::setprecision(1)
                << worst_pct << "% of peak (" << worst << "), median " << median << "%\n";
  }
  if (options.json) {
    nlohmann::json all = {{"fma_peak_gflops", peak}, {"groups", out}, {"cases", nlohmann::json::array()}};
    for (const Row& r : rows)
      all["cases"].push_back({{"group", r.c->group}, {"name", r.c->name}, {"gflops", r.gflops}, {"pct_of_peak", r.pct}, {"peak_gflops", r.peak}});
    std::cout << all.dump(2) << "\n";
  }
}

}  // namespace kiln
