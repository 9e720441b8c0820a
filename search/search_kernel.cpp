// search_kernel (beam.h): the engine on a real device. Candidates are lowered with lower_with_opts,
// compiled and loaded on the thread pool, and launched on scratch buffers filled with random values.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <unordered_set>

#include "search/actions.h"
#include "search/beam.h"
#include "search/verify.h"
#include "uop/half.h"

namespace kiln {

std::vector<KernelBuffer> kernel_buffers(std::span<const UOpPtr> buffers) {
  std::vector<KernelBuffer> out;
  for (const UOpPtr& b : buffers) out.push_back({b->arg_as<BufferArg>().size, b->dtype});
  return out;
}

double kernel_flops(const UOpPtr& ast) {
  // The loops each node runs in: the RANGEs it depends on, minus those a REDUCE or END closed below it.
  std::map<const UOp*, std::set<const UOp*>> loops;
  auto iterations = [](const std::set<const UOp*>& ranges) {
    double n = 1;
    for (const UOp* r : ranges) n *= double(r->vmax() + 1);  // a RANGE runs 0..vmax
    return n;
  };
  double flops = 0;
  for (const UOpPtr& u : toposort(ast)) {  // analysis: counts flops, rewrites nothing
    std::set<const UOp*>& mine = loops[u.get()];
    for (const UOpPtr& s : u->src) mine.insert(loops[s.get()].begin(), loops[s.get()].end());
    if (u->op == Op::RANGE) mine.insert(u.get());
    bool on_floats = is_float(u->dtype) || (!u->src.empty() && is_float(u->src[0]->dtype));
    if ((is_alu(u->op) || u->op == Op::REDUCE) && on_floats) flops += iterations(mine);
    if (u->op == Op::REDUCE || u->op == Op::END)
      for (size_t i = 1; i < u->src.size(); ++i) mine.erase(u->src[i].get());
  }
  return flops;
}

double kernel_intensity(const UOpPtr& ast, std::span<const KernelBuffer> buffers) {
  double bytes = 0;
  for (const KernelBuffer& b : buffers) bytes += double(b.size) * double(b.dtype.itemsize());
  return bytes > 0 ? kernel_flops(ast) / bytes : 0;
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Timing inputs, tame for every kernel: floats in [-1, 1) (no denormals, no inf); integers in [1, 4],
// never 0, because integer division by zero traps in C; bools 0 or 1. (The output check makes its own,
// search/verify.h.)
std::vector<uint8_t> random_bytes(const KernelBuffer& b, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  size_t item = b.dtype.itemsize(), n = size_t(b.size);
  std::vector<uint8_t> bytes(n * item);
  for (size_t i = 0; i < n; ++i) {
    uint8_t* at = bytes.data() + i * item;
    switch (b.dtype.scalar) {
      case ScalarType::Float32: { float v = uniform(rng); std::memcpy(at, &v, 4); break; }
      case ScalarType::Float64: { double v = uniform(rng); std::memcpy(at, &v, 8); break; }
      case ScalarType::Float16: { uint16_t v = float_to_half_bits(uniform(rng)); std::memcpy(at, &v, 2); break; }
      case ScalarType::BFloat16: { uint16_t v = float_to_bf16_bits(uniform(rng)); std::memcpy(at, &v, 2); break; }
      case ScalarType::Bool: *at = uint8_t(rng() & 1); break;
      case ScalarType::Int8: case ScalarType::Int16: case ScalarType::Int32: case ScalarType::Int64:
      case ScalarType::UInt8: case ScalarType::UInt16: case ScalarType::UInt32: case ScalarType::UInt64: {
        uint64_t v = 1 + rng() % 4;  // little-endian: the low bytes hold the value at every width
        std::memcpy(at, &v, item);
        break;
      }
      case ScalarType::Void: break;
    }
  }
  return bytes;
}

struct Compiled {
  LoweredKernel kernel;
  std::unique_ptr<Program> program;
  std::vector<int64_t> vals;  // its launch variables' values
};

// Scratch buffers on the device for timing, with random contents, given back when the search ends.
class Scratch {
 public:
  Scratch(Device& device, std::span<const KernelBuffer> buffers) : device_(device) {
    for (size_t i = 0; i < buffers.size(); ++i) {
      std::vector<uint8_t> contents = random_bytes(buffers[i], 0x5eed + i);
      raws_.push_back(device.alloc(contents.size()));
      device.copy_in(raws_.back(), contents.data(), contents.size());
    }
  }
  ~Scratch() {
    for (RawBuffer& r : raws_) device_.free(r);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  std::span<const RawBuffer> raws() const { return raws_; }

 private:
  Device& device_;
  std::vector<RawBuffer> raws_;
};

class DeviceSearch {
 public:
  DeviceSearch(Device& device, const UOpPtr& ast, std::span<const KernelBuffer> buffers, const SearchOptions& options)
      : device_(device), ast_(ast), options_(options), scratch_(device, buffers),
        memory_bound_(kernel_intensity(ast, buffers) < kMemoryBoundIntensity) {
    for (const KernelBuffer& b : buffers) elements_.push_back(b.size);
  }

  SearchResult run(const std::function<void(const SearchProgress&)>& progress) {
    SearchHooks hooks;
    hooks.default_opts = lower_kernel(ast_, device_.spec()).opts;  // the heuristics' opts that apply, as realize uses them
    hooks.seeds = opt_neighbours(ast_, device_.spec(), hooks.default_opts);
    hooks.neighbours = [&](std::span<const Opt> opts) { return opt_neighbours(ast_, device_.spec(), opts); };
    hooks.actions = [&](std::span<const Opt> applied) { return action_space(ast_, device_.spec(), applied); };
    hooks.build = [&](std::span<const Opt> opts) { return build(opts, true); };
    hooks.time = [&](const Built& b) { return time(compiled(b), shrink_); };
    hooks.source = [&](std::span<const Opt> opts) -> std::optional<std::string> {
      Lowering lowering = lower_with_opts(ast_, device_.spec(), opts);
      if (!lowering.kernel) return std::nullopt;
      return std::move(lowering.kernel->source);
    };
    hooks.check = [&](const Built& candidate) { return check(compiled(candidate)); };
    hooks.progress = progress;
    hooks.kernel = detail::kernel_name(ast_);
    hooks.memory_bound = memory_bound_;
    choose_shrink(hooks.default_opts);
    if (shrink_ > 1) hooks.time_whole = [&](const Built& b) { return time(compiled(b), 1); };
    SearchResult r = beam_search(hooks, options_);
    r.lower_cpu_s = lower_ns_.load() * 1e-9;
    r.compile_cpu_s = compile_ns_.load() * 1e-9;
    if (shrink_ > 1 && !r.improved) retime_default(r);
    r.kernel_s = launch_ns_.load() * 1e-9;
    return r;
  }

 private:
  static Compiled& compiled(const Built& b) { return *static_cast<Compiled*>(b.artifact.get()); }

  // skip_seen: a source this search built before is a duplicate (a Built without artifact), not built again.
  BuildResult build(std::span<const Opt> opts, bool skip_seen = false) {
    auto start = Clock::now();
    Lowering lowering = lower_with_opts(ast_, device_.spec(), opts);
    lower_ns_ += int64_t(seconds_since(start) * 1e9);
    if (!lowering.kernel) return {std::nullopt, lowering.rejected};
    auto c = std::make_shared<Compiled>();
    c->kernel = std::move(*lowering.kernel);
    c->vals = largest_values(c->kernel);  // launch variables (a slice's start) only move addresses
    if (skip_seen) {
      std::lock_guard<std::mutex> lock(sources_mu_);
      if (!sources_.insert(hash_string(c->kernel.source)).second) return {Built{c->kernel.source, nullptr}, ""};
    }
    start = Clock::now();
    c->program = device_.load(device_.compile(c->kernel.source, c->kernel.name));
    compile_ns_ += int64_t(seconds_since(start) * 1e9);
    std::string source = c->kernel.source;
    return {Built{std::move(source), std::move(c)}, ""};
  }

  // One launch, in seconds: with `shrink` > 1, of about 1/shrink of global[0], the time scaled back up.
  double time(Compiled& c, int64_t shrink) {
    LaunchDims dims = c.kernel.dims;
    double scale = 1;
    if (shrink > 1) {
      int64_t whole = dims.global[0], step = std::max<int64_t>(1, device_.spec().max_local == 0 ? device_.spec().threads : 1);
      int64_t part = std::max(step, (whole / shrink + step - 1) / step * step);  // whole chunks for every thread
      if (part < whole) {
        dims.global[0] = part;
        scale = double(whole) / double(part);
      }
    }
    // The fastest of back-to-back launches filling at least time_batch_s: one launch of a short kernel
    // is mostly the noise of waking the threads.
    double best = 0, spent = 0;
    for (int n = 0; n < 256 && (n == 0 || spent < options_.time_batch_s); ++n) {
      double seconds = c.program->launch(scratch_.raws(), c.vals, dims, true);
      best = n == 0 ? seconds : std::min(best, seconds);
      spent += seconds;
    }
    launch_ns_ += int64_t(spent * 1e9);
    return best * scale;
  }

  // A kernel whose default launch takes longer than shrink_above_s is timed on a part of its launch, so a
  // search of a long kernel takes about as long as a short one's. The parts of a launch do the same work
  // each (a row, a thread's share), so the time scales; caches see a smaller working set, so the figure
  // is an estimate: the pick's retest and the reported figures are whole launches.
  void choose_shrink(const std::vector<Opt>& default_opts) {
    BuildResult b = build(default_opts);
    if (!b.built) return;  // the engine reports it
    Compiled& c = compiled(*b.built);
    time(c, 1);  // warm-up: first touch of the scratch buffers, the kernel's pages
    double seconds = time(c, 1);
    if (seconds > options_.shrink_above_s) shrink_ = std::max<int64_t>(1, int64_t(seconds / (options_.shrink_above_s / 2)));
  }

  // Without a winner, the default's reported time is a whole launch too (the winner's retest timed both
  // whole, beam.cpp).
  void retime_default(SearchResult& r) {
    auto start = Clock::now();
    BuildResult d = build(heuristic_opts(ast_, device_.spec()));
    double best = time(compiled(*d.built), 1);
    for (int i = 1; i < options_.timing_runs; ++i) best = std::min(best, time(compiled(*d.built), 1));
    r.default_seconds = r.best_seconds = best;
    r.timing_s += seconds_since(start);
  }

  // Against the plain kernel (no opts), as `kiln cache verify` checks cached winners (search/verify.h); a
  // kernel of more than 2^26 loop iterations against the default (heuristics') kernel instead, which the
  // suite certifies against the reference evaluator: the plain kernel's scalar loops on one core took
  // 4.6 s of a 7.1 s search of matmul 1024^3 (2^30 iterations).
  std::optional<std::string> check(Compiled& candidate) {
    if (!plain_) {
      bool big = loop_iterations(ast_) > double(int64_t{1} << 26);
      Lowering plain = lower_with_opts(ast_, device_.spec(), big ? heuristic_opts(ast_, device_.spec()) : std::vector<Opt>{});
      KILN_ASSERT(plain.kernel.has_value(), "every kernel lowers with no opts and with the heuristics': ", plain.rejected);
      plain_ = std::move(plain.kernel);
    }
    // On the real buffers' sizes, as the kernel runs in the model (and is timed here).
    OptsCheck c = compare_kernels(ast_, device_, *plain_, candidate.kernel, 1, size_t{1} << 30, elements_);
    if (c.outcome == OptsCheck::Outcome::Match) return std::nullopt;
    return c.detail;
  }

  Device& device_;
  UOpPtr ast_;
  const SearchOptions& options_;
  Scratch scratch_;
  std::optional<LoweredKernel> plain_;
  std::vector<int64_t> elements_;  // each buffer's size
  int64_t shrink_ = 1;
  bool memory_bound_;
  std::atomic<int64_t> lower_ns_{0}, compile_ns_{0}, launch_ns_{0};
  std::mutex sources_mu_;
  std::unordered_set<uint64_t> sources_;  // hashes of the sources built so far
};

}  // namespace

double time_kernel(Device& device, const LoweredKernel& kernel, std::span<const KernelBuffer> buffers, int runs) {
  if (runs < 1) throw Error(cat("time_kernel: ", runs, " runs; time at least one"));
  Scratch scratch(device, buffers);
  std::unique_ptr<Program> program = device.load(device.compile(kernel.source, kernel.name));
  std::vector<int64_t> vals = largest_values(kernel);
  program->launch(scratch.raws(), vals, kernel.dims, true);
  double best = program->launch(scratch.raws(), vals, kernel.dims, true);
  for (int i = 1; i < runs; ++i) best = std::min(best, program->launch(scratch.raws(), vals, kernel.dims, true));
  return best;
}

SearchResult search_kernel(Device& device, const UOpPtr& ast, std::span<const KernelBuffer> buffers,
                           const SearchOptions& options, const std::function<void(const SearchProgress&)>& progress) {
  return DeviceSearch(device, ast, buffers, options).run(progress);
}

}  // namespace kiln
