// kiln bench (see bench.h): the workloads, how each is timed, and how kiln's output is checked.
//
// Timing, for every workload:
// - inputs are made once and reused: fresh memory costs ~15 us per 4 KiB page here (NOTES.md);
// - kiln's figure is the wall time of building the graph over those inputs and realizing it, scheduling
//   included, as a user sees it. The first run compiles and is not timed; warm-up goes on (a little) until
//   the output lands in memory an earlier run used, since the device caches freed buffers, so first touch
//   of a fresh output is not timed either. A timed run that still got fresh output memory is noted;
// - kiln and the reference alternate run by run, so drift in memory bandwidth (up to 40% here) hits both;
//   a short timed run follows an untimed one of the same side (see kPrimeBelowSeconds);
// - a figure is the median of the timed runs (more of them for fast workloads), with [min..max] beside it.
#include "bench.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "bench_measure.h"
#include "bench_reference.h"
#include "bench_report.h"
#include "frontend/jit.h"
#include "frontend/nn.h"
#include "frontend/realize.h"
#include "frontend/tensor.h"
#include "lower/lower.h"
#include "train.h"
#include "uop/config.h"

namespace kiln {

const char* const kBenchHelp = R"(Workloads (float32), each beside a reference measured in the same run:
  relu(a*b+c)       16M elements     GB/s, 16 bytes per element   vs a C/OpenMP loop     target >= 80%
  sum               16M elements     GB/s, 4 bytes per element    vs a C/OpenMP loop     target >= 70%
  softmax rows      4096 x 4096      GB/s, 8 bytes per element    vs a C/OpenMP loop     target >= 60%
  matmul            1024^3           GFLOP/s                      vs OpenBLAS sgemm      target >= 30%
  realize overhead  a compiled 200-op elementwise graph on 16 elements: us per call      target < 100 us
  replay overhead   the same graph captured by kiln::Jit, replayed: us per call           target <= 10 us
  new kernel        first realize of a kernel no cache has seen: ms per kernel (lowering + compile)
An FMA peak loop and a triad bandwidth loop give the machine's limits in the same run.

The C/OpenMP references (tools/bench_reference.c) are compiled at run time with
gcc -O3 -march=native -fno-math-errno -fopenmp; OpenBLAS comes from libopenblas.so.0 when installed.
A figure is the median of several warm runs after a warm-up that compiles; [min..max] is the spread.
kiln's output is checked once per workload; a MISMATCH or a failure makes the exit status 1.
Memory bandwidth here drifts between runs: compare figures within one run, not across runs.)";

namespace {

using namespace bench;

// Sizes and run counts, and what was changed from the full run's and why.
struct Plan {
  int runs = 7;                 // timed warm runs per workload
  int min_runs = 5;             // for a workload whose warm run takes longer than slow_run_s
  double slow_run_s = 2.0;
  double timed_seconds = 0.2;   // kiln's timed runs of a fast workload add up to about this (up to 51 runs)
  int64_t n = int64_t(16) << 20;                      // elements of the elementwise, sum and triad arrays
  int64_t softmax_rows = 4096, softmax_cols = 4096;   // rows * cols == n: softmax reuses the same arrays
  int64_t matmul = 1024;
  int overhead_calls = 200;     // timed realizes of the 200-op graph
  int new_kernels = 5;          // kernels compiled for the compile-time figure
  int clang_kernel_stride = 1;   // every n-th kernel of the training step compiled by clang for the compile row
  int64_t fma_iterations = 50'000'000;
  std::vector<std::string> changes;
};

Plan make_plan(bool quick, const DeviceSpec& spec) {
  Plan plan;
  if (quick) {
    // The memory-bound sizes stay: smaller arrays would sit in cache and measure something else.
    plan.runs = plan.min_runs = 3;
    plan.timed_seconds = 0.05;
    plan.matmul = 512;
    plan.overhead_calls = 50;
    plan.new_kernels = 3;
    plan.clang_kernel_stride = 3;
    plan.fma_iterations = 20'000'000;
    plan.changes.push_back("quick: 3 timed runs per workload instead of 7 (or more for fast ones), matmul 512^3 instead of 1024^3, 50 realize "
                           "calls instead of 200, 3 new kernels instead of 5, every third kernel of the step through clang; figures are "
                           "rougher than a full run's");
  }
  if (spec.lang == Language::UOps) {
    // An interpreter would take minutes per run at the full sizes (REF: ~3 s for 16M elements, ~3 min
    // for a 1024^3 matmul). The arrays then fit in cache, so the references' figures are cache-bound.
    plan.n = int64_t(1) << 18;
    plan.softmax_rows = plan.softmax_cols = 512;
    plan.matmul = 128;
    plan.changes.push_back(cat(spec.name, " interprets its kernels (linear UOps): sizes cut 64x (256K elements, "
                               "softmax 512x512, matmul 128^3) so the run ends; they fit in cache, so the ratios say "
                               "how fast the interpreter is, nothing about compiled kernels"));
  }
  return plan;
}

Tensor upload(HostArray& array, uint64_t seed) {
  fill_uniform(array, seed);
  return Tensor::from_raw(array.data(), dtypes::float32, {array.size()});
}

// The arrays every memory-bound workload shares, on the host for the references and on the device for
// kiln, made once.
struct Inputs {
  explicit Inputs(int64_t n) : a(n), b(n), c(n), out(n), got(n), ka(upload(a, 1)), kb(upload(b, 2)), kc(upload(c, 3)) {}
  HostArray a, b, c;
  HostArray out;  // the reference's output
  HostArray got;  // kiln's output, copied back for the check
  Tensor ka, kb, kc;
};

// realize() leaves a tensor as a view of the BUFFER holding it; null if it is anything else.
const DeviceBuffer* realized_storage(const Tensor& t) {
  const UOpPtr& u = t.uop();
  const UOpPtr& buffer = u->op == Op::RESHAPE ? u->src[0] : u;
  return buffer->op == Op::BUFFER ? &storage_of(buffer) : nullptr;
}

// Into memory we own: to_vector would fault in a fresh 64 MiB vector, ~0.25 s here.
void copy_to_host(Tensor& t, float* dst) {
  t.realize();
  if (const DeviceBuffer* storage = realized_storage(t); storage && storage->raw.handle) {
    storage->device->copy_out(dst, storage->raw, size_t(t.numel()) * sizeof(float));
    return;
  }
  std::vector<float> values = t.to_vector<float>();
  std::copy(values.begin(), values.end(), dst);
}

// A run of a few milliseconds is at the mercy of who ran last. Threads asleep take a while to wake (here,
// idle virtual CPUs take milliseconds), so a short timed run comes right after an untimed run of the same
// side, for kiln and the reference alike. And libgomp's workers spin for milliseconds after a parallel
// region (OpenBLAS's yield as they spin), taking a core from whoever runs next, so kiln's turn starts
// after a pause that outlasts the spinning.
constexpr double kPrimeBelowSeconds = 0.25;

void let_reference_threads_sleep() { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }

struct Comparison {
  std::function<Tensor()> graph;    // kiln's side: built anew each run over inputs made once
  std::function<void()> reference;  // writes the reference's output; empty: no reference
};

struct Timings {
  std::vector<double> kiln, reference;
  std::optional<Tensor> output;  // kiln's output of the last timed run, for the check
  int fresh_outputs = 0;         // timed runs whose output landed in memory no earlier run had used
};

// Outputs smaller than this come from malloc's own reuse; fresh memory only costs much for big ones.
constexpr size_t kWatchedOutputBytes = size_t(1) << 20;

Timings time_comparison(const Plan& plan, const Comparison& c) {
  Timings t;
  std::set<void*> seen;
  bool fresh = false;
  auto kiln_run = [&] {
    t.output.reset();  // the previous output goes back to the device's buffer cache before this run allocates
    auto start = Clock::now();
    t.output.emplace(c.graph());
    t.output->realize();
    get_device(t.output->device()).synchronize();
    double seconds = seconds_since(start);
    const DeviceBuffer* storage = realized_storage(*t.output);
    fresh = storage && storage->bytes >= kWatchedOutputBytes && seen.insert(storage->raw.handle).second;
    return seconds;
  };
  double warm = kiln_run();  // compiles
  // Warm up until the output lands in memory an earlier run used. A run of seconds (compiling included) is
  // not worth repeating for that: first touch of its output is noise beside it.
  for (int extra = 0; extra < 3 && (extra == 0 || fresh) && warm < 2 * plan.slow_run_s; ++extra) warm = kiln_run();
  // Runs of a millisecond or two are many: a median of a handful would be one stall away from another.
  int runs = warm > plan.slow_run_s ? plan.min_runs : std::clamp(int(plan.timed_seconds / warm), plan.runs, 51);
  bool prime_kiln = warm < kPrimeBelowSeconds, prime_reference = true;
  for (int i = 0; i < runs; ++i) {
    if (prime_kiln) kiln_run();
    t.kiln.push_back(kiln_run());
    t.fresh_outputs += fresh ? 1 : 0;
    prime_kiln = t.kiln.back() < kPrimeBelowSeconds;
    if (!c.reference) continue;
    if (prime_reference) c.reference();
    auto start = Clock::now();
    c.reference();
    t.reference.push_back(seconds_since(start));
    prime_reference = t.reference.back() < kPrimeBelowSeconds;
    let_reference_threads_sleep();
  }
  return t;
}

// Fills the figures of a comparison; `amount` is what one run moves or computes, in the unit's scale.
void record(BenchResult& r, const Timings& t, double amount) {
  r.runs = int(t.kiln.size());
  r.kiln = rate(t.kiln, amount);
  if (!t.reference.empty()) r.reference = rate(t.reference, amount);
  if (t.fresh_outputs > 0)
    r.notes.push_back(cat("kiln's output got fresh memory in ", t.fresh_outputs, " of ", t.kiln.size(),
                          " timed runs: freed buffers were not reused"));
}

BenchResult result(std::string name, std::string size, std::string unit) {
  BenchResult r;
  r.name = std::move(name);
  r.size = std::move(size);
  r.unit = std::move(unit);
  return r;
}

// A workload measured against a reference, with the issue's target as a percentage of it.
BenchResult compared(std::string name, std::string size, std::string unit, std::string reference, double target) {
  BenchResult r = result(std::move(name), std::move(size), std::move(unit));
  r.reference_name = std::move(reference);
  r.target_percent = target;
  return r;
}

// Runs one workload; what it throws becomes the result's failure, so the other workloads still run.
BenchResult guarded(BenchResult r, const std::function<void(BenchResult&)>& body) {
  try {
    body(r);
  } catch (const std::exception& e) {
    r.kiln.reset();
    r.failure = e.what();
  }
  return r;
}

std::string millions(int64_t n) { return n % (int64_t(1) << 20) == 0 ? cat(n >> 20, "M") : cat(n); }

// --- context: what this machine can do, measured with the same compiler as the references -----------

BenchResult fma_peak(const Plan& plan, const CReference& ref) {
  BenchResult r = result("FMA peak", cat(ref.threads(), " threads, C/OpenMP"), "GFLOP/s");
  float checksum = 0;
  ref.fma_peak(plan.fma_iterations / 10, &checksum);  // warm-up: wakes the threads and the clocks
  std::vector<double> seconds;
  double flops = 0;
  for (int i = 0; i < plan.runs; ++i) {
    auto start = Clock::now();
    flops = ref.fma_peak(plan.fma_iterations, &checksum);
    seconds.push_back(seconds_since(start));
  }
  r.runs = plan.runs;
  r.kiln = rate(seconds, flops * 1e-9);
  return r;
}

BenchResult triad(const Plan& plan, Inputs& in, const CReference& ref) {
  BenchResult r = result("triad bandwidth", cat(millions(plan.n), " x 3 arrays, C/OpenMP"), "GB/s");
  ref.triad(in.out.data(), in.b.data(), in.c.data(), 3.0f, plan.n);
  std::vector<double> seconds;
  for (int i = 0; i < plan.runs; ++i) {
    auto start = Clock::now();
    ref.triad(in.out.data(), in.b.data(), in.c.data(), 3.0f, plan.n);
    seconds.push_back(seconds_since(start));
  }
  r.runs = plan.runs;
  r.kiln = rate(seconds, 12.0 * double(plan.n) * 1e-9);
  return r;
}

// --- the workloads ---------------------------------------------------------------------------------

void elementwise(BenchResult& r, const Plan& plan, Inputs& in, const CReference& ref) {
  auto reference = [&] { ref.relu_fma(in.a.data(), in.b.data(), in.c.data(), in.out.data(), plan.n); };
  Timings t = time_comparison(plan, {[&] { return (in.ka * in.kb + in.kc).relu(); }, reference});
  record(r, t, 16.0 * double(plan.n) * 1e-9);  // a, b, c read and the output written, 4 bytes each
  copy_to_host(*t.output, in.got.data());
  r.check = compare(in.got.data(), in.out.data(), plan.n, 1e-6, 1e-5);
}

void sum(BenchResult& r, const Plan& plan, Inputs& in, const CReference& ref) {
  float reference = 0;
  Timings t = time_comparison(plan, {[&] { return in.ka.sum(); }, [&] { reference = ref.sum(in.a.data(), plan.n); }});
  record(r, t, 4.0 * double(plan.n) * 1e-9);
  float got = t.output->item<float>();
  double exact = 0, magnitude = 0;
  for (int64_t i = 0; i < plan.n; ++i) {
    exact += in.a.data()[i];
    magnitude += std::fabs(in.a.data()[i]);
  }
  // Both sides add floats in their own order: allow what float accumulation over sum|a| can lose.
  double allowed = 1e-5 * magnitude;
  std::string values = cat("kiln ", got, ", reference ", reference, ", exact (double) ", exact);
  bool ok = std::fabs(double(got) - double(reference)) <= allowed;
  r.check = Check{ok, ok ? values : cat(values, "; they differ by more than ", allowed, " (1e-5 x sum |a|)")};
}

void softmax(BenchResult& r, const Plan& plan, Inputs& in, const CReference& ref) {
  int64_t rows = plan.softmax_rows, cols = plan.softmax_cols;
  Tensor x = in.ka.reshape({rows, cols});
  Timings t = time_comparison(plan, {[&] { return x.softmax(1); },
                                     [&] { ref.softmax_rows(in.a.data(), in.out.data(), rows, cols); }});
  record(r, t, 8.0 * double(rows * cols) * 1e-9);  // each element read once and written once
  copy_to_host(*t.output, in.got.data());
  r.check = compare(in.got.data(), in.out.data(), rows * cols, 1e-9, 1e-4);
}

void matmul(BenchResult& r, const Plan& plan, Inputs& in, const OpenBlas& blas) {
  int m = int(plan.matmul);
  const float *a = in.a.data(), *b = in.b.data();  // the first m*m elements of the shared arrays
  float* c = in.out.data();
  Tensor ka = Tensor::from_raw(a, dtypes::float32, {m, m}), kb = Tensor::from_raw(b, dtypes::float32, {m, m});
  Comparison comparison{[&] { return ka.matmul(kb); }, nullptr};
  if (blas.sgemm) {
    comparison.reference = [&] {
      blas.sgemm(OpenBlas::kRowMajor, OpenBlas::kNoTrans, OpenBlas::kNoTrans, m, m, m, 1.0f, a, m, b, m, 0.0f, c, m);
    };
  } else {
    r.no_reference = cat("no OpenBLAS reference: ", blas.problem);
  }
  Timings t = time_comparison(plan, comparison);
  record(r, t, 2.0 * double(m) * m * m * 1e-9);
  copy_to_host(*t.output, in.got.data());
  if (blas.sgemm) {
    r.check = compare(in.got.data(), c, int64_t(m) * m, 1e-3, 1e-4);
    return;
  }
  // Without OpenBLAS: 256 sampled entries, summed in double on the host.
  std::vector<float> want, got;
  std::mt19937 rng(7);
  for (int s = 0; s < 256; ++s) {
    int i = int(rng() % unsigned(m)), j = int(rng() % unsigned(m));
    double dot = 0;
    for (int k = 0; k < m; ++k) dot += double(a[int64_t(i) * m + k]) * b[int64_t(k) * m + j];
    want.push_back(float(dot));
    got.push_back(in.got.data()[int64_t(i) * m + j]);
  }
  r.check = compare(got.data(), want.data(), int64_t(want.size()), 1e-3, 1e-4);
}

// 200 elementwise ops cycling through these four; f(t) = relu(sqrt(1.5 t + 0.25)) has a stable fixed point,
// so values stay near 1.65 however long the chain.
constexpr int kChainOps = 200;

Tensor op_chain(const Tensor& x) {
  Tensor t = x;
  for (int i = 0; i < kChainOps; ++i) {
    switch (i % 4) {
      case 0: t = t * 1.5; break;
      case 1: t = t + 0.25; break;
      case 2: t = t.sqrt(); break;
      case 3: t = t.relu(); break;
    }
  }
  return t;
}

float op_chain_on_host(float t) {
  for (int i = 0; i < kChainOps; ++i) {
    switch (i % 4) {
      case 0: t = t * 1.5f; break;
      case 1: t = t + 0.25f; break;
      case 2: t = std::sqrt(t); break;
      case 3: t = std::max(t, 0.0f); break;
    }
  }
  return t;
}

// The 200-op graph called plan.overhead_calls times as `call` makes it (build or replay, realize, copy
// out); target: microseconds per call.
void call_overhead(BenchResult& r, const Plan& plan, double target_us,
                   const std::function<std::vector<float>(const Tensor& x)>& call) {
  std::vector<float> values(16);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f + float(i) / 16;
  Tensor x = Tensor::from_vector(values, {16});
  std::vector<float> out;
  for (int i = 0; i < 4; ++i) out = call(x);  // compiles; a Jit records and starts replaying
  size_t lowered = realize_stats().kernels_lowered;
  std::vector<double> seconds;
  for (int i = 0; i < plan.overhead_calls; ++i) {
    auto start = Clock::now();
    out = call(x);
    seconds.push_back(seconds_since(start));
  }
  r.runs = plan.overhead_calls;
  r.kiln = duration(seconds, 1e6);
  r.higher_is_better = false;
  r.target_value = target_us;
  if (size_t again = realize_stats().kernels_lowered - lowered; again > 0)
    r.notes.push_back(cat("kiln lowered ", again, " kernels during the timed calls: its kernel cache missed"));
  std::vector<float> want(values.size());
  std::transform(values.begin(), values.end(), want.begin(), op_chain_on_host);
  r.check = compare(out.data(), want.data(), int64_t(want.size()), 1e-6, 1e-5);
}

// The whole call a user makes: build the graph, realize, copy out.
void realize_overhead(BenchResult& r, const Plan& plan) {
  call_overhead(r, plan, 100, [](const Tensor& x) { return op_chain(x).to_vector<float>(); });
}

// The same graph captured by a Jit: a replay launches the compiled kernel with the input's memory and
// the output is copied out; no graph is built.
void replay_overhead(BenchResult& r, const Plan& plan) {
  Jit jit([](const std::vector<Tensor>& in) { return std::vector<Tensor>{op_chain(in[0])}; });
  call_overhead(r, plan, 10, [&](const Tensor& x) { return jit({x})[0].to_vector<float>(); });
  if (jit.stats().replays < size_t(plan.overhead_calls)) r.notes.push_back(cat("the Jit replayed only ", jit.stats().replays, " calls"));
}

// Points the on-disk compile cache at an empty directory while it lives, so compiles cannot hit it.
class FreshCacheDir {
 public:
  FreshCacheDir() : saved_(config().cache_dir) { config().cache_dir = dir_.path.string(); }
  ~FreshCacheDir() { config().cache_dir = saved_; }
  FreshCacheDir(const FreshCacheDir&) = delete;
  FreshCacheDir& operator=(const FreshCacheDir&) = delete;

 private:
  std::string saved_;
  TempDir dir_{"bench-cache"};
};

void new_kernel(BenchResult& r, const Plan& plan) {
  std::vector<float> values(256);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i % 16) / 16 - 0.5f;
  Tensor x = Tensor::from_vector(values, {16, 16});
  // Constants are baked into kernels, so fresh random ones give kernels no cache has seen, in this
  // process (the in-memory cache) or on disk (and the disk cache is an empty directory besides).
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> uniform(0.5, 1.0);
  auto graph = [&](double scale, double shift) { return ((x * scale).exp() + shift).sum({1}); };
  const DeviceSpec& spec = get_device(x.device()).spec();

  FreshCacheDir cache;
  std::vector<double> per_kernel, lowering;
  for (int k = 0; k < plan.new_kernels; ++k) {
    // Lowering alone, on a graph of its own, so the realize below still misses every cache.
    Schedule schedule = Tensor::schedule({graph(uniform(rng), uniform(rng))});
    for (const ScheduleItem& item : schedule.items) {
      if (item.kind != ScheduleItem::Kind::Kernel) continue;
      auto start = Clock::now();
      lower_kernel(item.ast, spec);
      lowering.push_back(seconds_since(start));
    }
    double scale = uniform(rng), shift = uniform(rng);
    size_t before = realize_stats().kernels_lowered;
    auto start = Clock::now();
    Tensor out = graph(scale, shift);
    out.realize();
    get_device(out.device()).synchronize();
    double seconds = seconds_since(start);
    size_t kernels = realize_stats().kernels_lowered - before;
    per_kernel.push_back(seconds / double(std::max<size_t>(kernels, 1)));
    if (kernels != 1) r.notes.push_back(cat("realize ", k, " lowered ", kernels, " kernels, expected 1"));
    if (k > 0) continue;
    std::vector<float> got = out.to_vector<float>(), want(16);
    for (int i = 0; i < 16; ++i) {
      double total = 0;
      for (int j = 0; j < 16; ++j) total += std::exp(double(values[size_t(i * 16 + j)]) * scale) + shift;
      want[size_t(i)] = float(total);
    }
    r.check = compare(got.data(), want.data(), 16, 1e-5, 1e-5);
  }
  r.runs = plan.new_kernels;
  r.higher_is_better = false;
  r.kiln = duration(per_kernel, 1e3);
  r.notes.push_back(cat("lowering ", short_number(median_of(lowering) * 1e3), " ms of it; the rest is compiling, ",
                        "loading and running; compiled into an empty cache directory"));
}

// The kernels of one training step of the demo CNN (forward and backward, batch 64), lowered for
// `device` and compiled one by one into an empty cache directory: seconds per kernel (compile and load).
std::vector<double> step_compile_seconds(const std::string& device, const Schedule& schedule) {
  Device& d = get_device(device);
  FreshCacheDir cache;
  std::vector<double> seconds;
  for (const ScheduleItem& item : schedule.items) {
    if (item.kind != ScheduleItem::Kind::Kernel) continue;
    LoweredKernel k = lower_kernel(item.ast, d.spec());
    auto start = Clock::now();
    d.load(d.compile(k.source, k.name));
    seconds.push_back(seconds_since(start));
  }
  return seconds;
}

// Compile time per kernel over a training step's kernels: the CPU device's in-process LLVM compiler,
// and the C compiler as a process (the CLANG device) on the same kernels, in this run.
void compile_step(BenchResult& r, const Plan& plan) {
  std::string in_process = in_process_device(), c_process = c_process_device();
  std::shared_ptr<nn::Sequential> model = make_mnist_cnn();
  Tensor x = Tensor::randn({64, 1, 28, 28}, dtypes::float32, in_process);
  Tensor labels = Tensor::randint(0, 10, {64}, dtypes::int64, in_process);
  Tensor loss = nn::cross_entropy(model->forward(x), labels);
  std::vector<Tensor> outputs = gradients(loss, model->parameters());
  outputs.push_back(loss);
  Schedule schedule = Tensor::schedule(outputs);
  std::vector<double> llvm = step_compile_seconds(in_process, schedule);
  // Quick: every third kernel through clang (a few seconds instead of ~20).
  Schedule some;
  for (size_t i = 0; i < schedule.items.size(); i += size_t(plan.clang_kernel_stride)) some.items.push_back(schedule.items[i]);
  std::vector<double> clang = step_compile_seconds(c_process, some);
  r.runs = int(llvm.size());
  r.higher_is_better = false;
  r.kiln = duration(llvm, 1e3);
  r.reference = duration(clang, 1e3);
  r.notes.push_back(cat(llvm.size(), " kernels, in-process LLVM ", short_number(std::accumulate(llvm.begin(), llvm.end(), 0.0)),
                        " s in all; clang ", clang.size(), " kernels ", short_number(std::accumulate(clang.begin(), clang.end(), 0.0)),
                        " s; [min..max] over kernels, empty cache directories"));
}

std::string machine_text(const OtherLoad& load, std::optional<double>& cores_busy) {
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  cores_busy = load.cores();
  if (!cores_busy) return cat(cores, " cores");
  std::string text =
      cat(cores, " cores; other processes kept ", short_number(*cores_busy), " of them busy during the run");
  if (*cores_busy > 0.2)
    text += " (so figures are noisy, and ratios skewed: an OpenMP barrier waits for a preempted thread)";
  return text;
}

}  // namespace

void run_bench(const BenchOptions& options) {
  const DeviceSpec& spec = get_device(default_device_name()).spec();
  const Plan plan = make_plan(options.quick, spec);
  BenchReport report;
  report.quick = options.quick;
  report.changes = plan.changes;
  report.runs = plan.runs;
  report.device = spec.name;
  report.device_detail =
      cat(spec.arch, ", ", spec.compiler, ", ", spec.threads, spec.threads == 1 ? " thread" : " threads");

  OtherLoad other_load;

  CReference ref = CReference::build();
  OpenBlas blas = OpenBlas::load();
  report.references = cat("C/OpenMP loops built by ", ref.compiler, " in ", short_number(ref.compile_seconds), " s, ",
                          ref.threads(), " threads; ",
                          blas.sgemm ? cat(blas.config, ", core ", blas.core) : cat("no OpenBLAS: ", blas.problem));

  Inputs in(plan.n);
  report.context.push_back(fma_peak(plan, ref));
  report.context.push_back(triad(plan, in, ref));

  auto wanted = [&](const std::string& name) { return options.only.empty() || name.find(options.only) != std::string::npos; };
  auto add = [&](BenchResult r, const std::function<void(BenchResult&)>& body) {
    if (wanted(r.name)) report.results.push_back(guarded(std::move(r), body));
  };
  std::string n = cat(millions(plan.n), " float32");
  add(compared("relu(a*b+c)", n, "GB/s", "C/OpenMP", 80), [&](BenchResult& r) { elementwise(r, plan, in, ref); });
  add(compared("sum", n, "GB/s", "C/OpenMP", 70), [&](BenchResult& r) { sum(r, plan, in, ref); });
  add(compared("softmax rows", cat(plan.softmax_rows, "x", plan.softmax_cols, " float32"), "GB/s", "C/OpenMP", 60),
      [&](BenchResult& r) { softmax(r, plan, in, ref); });
  add(compared("matmul", cat(plan.matmul, "^3 float32"), "GFLOP/s", cat("OpenBLAS sgemm, core ", blas.core), 30),
      [&](BenchResult& r) { matmul(r, plan, in, blas); });
  add(result("realize, compiled 200-op graph", "16 float32", "us"), [&](BenchResult& r) { realize_overhead(r, plan); });
  add(result("replay, captured 200-op graph", "16 float32", "us"), [&](BenchResult& r) { replay_overhead(r, plan); });
  add(result("first realize of a new kernel", "16x16 exp+sum", "ms/kernel"),
      [&](BenchResult& r) { new_kernel(r, plan); });
  if (cpu_style(spec) && spec.lang == Language::LLVM)
    add(compared("compile a training step's kernels", "demo CNN fwd+bwd", "ms/kernel", "a C compiler process", 0),
        [&](BenchResult& r) { compile_step(r, plan); });

  // The CPU device's in-process code beside the C path's (the CLANG device) on the same workloads, in
  // this run: the in-process compiler must not make kernels slower.
  if (spec.lang == Language::LLVM) {
    std::string saved = config().device;
    try {
      std::string c_process = c_process_device();
      config().device = c_process;
      Inputs clang_in(plan.n);
      auto beside = [&](const std::string& cpu_row, BenchResult r, const std::function<void(BenchResult&)>& body) {
        r.target_percent.reset();
        r.name += " on " + c_process;
        if (!wanted(r.name)) return;
        BenchResult done = guarded(std::move(r), body);
        // Each side as a share of its own same-run reference, so drift between the two runs cancels.
        for (const BenchResult& row : report.results) {
          std::optional<double> cpu = percent_of_reference(row), clang = percent_of_reference(done);
          if (row.name == cpu_row && cpu && clang && *clang > 0)
            done.notes.push_back(cat("in-process LLVM (", spec.name, ") / C (", c_process, "), each against its reference: ",
                                     short_number(*cpu / *clang)));
        }
        report.results.push_back(std::move(done));
      };
      beside("relu(a*b+c)", compared("relu(a*b+c)", n, "GB/s", "C/OpenMP", 0), [&](BenchResult& r) { elementwise(r, plan, clang_in, ref); });
      beside("sum", compared("sum", n, "GB/s", "C/OpenMP", 0), [&](BenchResult& r) { sum(r, plan, clang_in, ref); });
      beside("softmax rows", compared("softmax rows", cat(plan.softmax_rows, "x", plan.softmax_cols, " float32"), "GB/s", "C/OpenMP", 0),
             [&](BenchResult& r) { softmax(r, plan, clang_in, ref); });
      beside("matmul", compared("matmul", cat(plan.matmul, "^3 float32"), "GFLOP/s", cat("OpenBLAS sgemm, core ", blas.core), 0),
             [&](BenchResult& r) { matmul(r, plan, clang_in, blas); });
    } catch (const Error& e) {
      report.changes.push_back(cat("no figures of a C compiler process beside ", spec.name, "'s: ", e.what()));
    }
    config().device = saved;
  }
  // On another device, the CPU device's figures for the same two workloads, measured in this run.
  if (find_device(cpu_style) != spec.name) {
    std::string saved = config().device;
    try {
      std::string host = host_device();
      config().device = host;  // the workloads make their tensors on the default device
      Inputs cpu_in(plan.n);
      auto untargeted = [](BenchResult r) {
        r.target_percent.reset();  // the targets are the bench device's; these are for comparison
        return r;
      };
      add(untargeted(compared("relu(a*b+c) on " + host, n, "GB/s", "C/OpenMP", 0)), [&](BenchResult& r) { elementwise(r, plan, cpu_in, ref); });
      add(untargeted(compared("matmul on " + host, cat(plan.matmul, "^3 float32"), "GFLOP/s", cat("OpenBLAS sgemm, core ", blas.core), 0)),
          [&](BenchResult& r) { matmul(r, plan, cpu_in, blas); });
    } catch (const Error& e) {
      report.changes.push_back(cat("no CPU-style figures beside ", spec.name, "'s: ", e.what()));
    }
    config().device = saved;
  }
  report.machine = machine_text(other_load, report.other_cores_busy);
  if (options.json) {
    std::cout << to_json(report).dump(2) << '\n';
  } else {
    print_text(report, std::cout);
  }
  if (size_t failed = report.failures(); failed > 0)
    throw Error(cat("bench: ", failed, " workload", failed == 1 ? "" : "s",
                    " failed or gave a wrong result (FAILED or MISMATCH above); the figures for ",
                    failed == 1 ? "it mean" : "them mean", " nothing until that is fixed"));
}

namespace {

std::string device_where(const std::function<bool(const DeviceSpec&)>& wanted, const std::string& what) {
  std::optional<std::string> found = find_device(wanted);
  if (!found) throw Error(cat("bench: no available device ", what, " here; `kiln devices` says why each is not"));
  return *found;
}

}  // namespace

bool cpu_style(const DeviceSpec& spec) { return spec.max_local == 0 && !spec.oracle; }

std::string host_device() { return device_where(cpu_style, "is CPU-style"); }
std::string in_process_device() {
  return device_where([](const DeviceSpec& s) { return cpu_style(s) && s.lang == Language::LLVM; },
                      "compiles LLVM IR in process (libLLVM 14)");
}
std::string c_process_device() {
  return device_where([](const DeviceSpec& s) { return cpu_style(s) && s.lang == Language::C; }, "is CPU-style and compiles C");
}

}  // namespace kiln
