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

#include "search/beam.h"
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
  for (const UOpPtr& u : toposort(ast)) {
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

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Values random enough to tell a wrong kernel from a right one and tame enough for every kernel: floats
// in [-1, 1); integers in [1, 4], never 0, because integer division by zero traps in C; bools 0 or 1.
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

double value_at(const std::vector<uint8_t>& bytes, DType dtype, size_t i) {
  const uint8_t* at = bytes.data() + i * dtype.itemsize();
  auto read = [&]<typename T>(T) { T v; std::memcpy(&v, at, sizeof v); return v; };
  switch (dtype.scalar) {
    case ScalarType::Float32: return read(float{});
    case ScalarType::Float64: return read(double{});
    case ScalarType::Float16: return half_bits_to_float(read(uint16_t{}));
    case ScalarType::BFloat16: return bf16_bits_to_float(read(uint16_t{}));
    case ScalarType::Bool: case ScalarType::UInt8: return read(uint8_t{});
    case ScalarType::Int8: return read(int8_t{});
    case ScalarType::Int16: return read(int16_t{});
    case ScalarType::Int32: return read(int32_t{});
    case ScalarType::Int64: return double(read(int64_t{}));
    case ScalarType::UInt16: return read(uint16_t{});
    case ScalarType::UInt32: return read(uint32_t{});
    case ScalarType::UInt64: return double(read(uint64_t{}));
    case ScalarType::Void: return 0;
  }
  return 0;
}

// Nullopt when `got` matches `want`. Floats may differ by what reassociating a float sum costs (the
// winner may add in another order): |got - want| <= rtol |want| + atol * max(1, largest |want|). NaN
// matches NaN, inf matches the same inf; integers and bools match exactly.
std::optional<std::string> compare(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, DType dtype, size_t slot) {
  size_t n = want.size() / dtype.itemsize();
  bool half = dtype.scalar == ScalarType::Float16 || dtype.scalar == ScalarType::BFloat16;
  double rtol = half ? 1e-2 : 1e-3, atol = half ? 1e-2 : 1e-4, scale = 1;
  if (is_float(dtype))
    for (size_t i = 0; i < n; ++i)
      if (double w = std::fabs(value_at(want, dtype, i)); std::isfinite(w)) scale = std::max(scale, w);
  for (size_t i = 0; i < n; ++i) {
    double g = value_at(got, dtype, i), w = value_at(want, dtype, i);
    bool same = g == w || (std::isnan(g) && std::isnan(w)) ||
                (is_float(dtype) && std::isfinite(w) && std::fabs(g - w) <= rtol * std::fabs(w) + atol * scale);
    if (!same)
      return cat("buffer ", slot, " (", dtype.name(), ") element ", i, " is ", g, ", the default kernel's is ", w,
                 " (", n, " elements)");
  }
  return std::nullopt;
}

struct Compiled {
  LoweredKernel kernel;
  std::unique_ptr<Program> program;
};

// Scratch buffers on the device with random contents, given back when the search ends.
class Scratch {
 public:
  Scratch(Device& device, std::span<const KernelBuffer> buffers) : device_(device) {
    for (size_t i = 0; i < buffers.size(); ++i) {
      dtypes_.push_back(buffers[i].dtype);
      contents_.push_back(random_bytes(buffers[i], 0x5eed + i));
      raws_.push_back(device.alloc(contents_.back().size()));
    }
    refill();
  }
  ~Scratch() {
    for (RawBuffer& r : raws_) device_.free(r);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  void refill() {
    for (size_t i = 0; i < raws_.size(); ++i) device_.copy_in(raws_[i], contents_[i].data(), contents_[i].size());
  }
  std::vector<uint8_t> read(size_t slot) {
    std::vector<uint8_t> out(contents_[slot].size());
    device_.copy_out(out.data(), raws_[slot], out.size());
    return out;
  }
  std::span<const RawBuffer> raws() const { return raws_; }
  DType dtype(size_t slot) const { return dtypes_[slot]; }

 private:
  Device& device_;
  std::vector<DType> dtypes_;
  std::vector<std::vector<uint8_t>> contents_;
  std::vector<RawBuffer> raws_;
};

// The DEFINE_GLOBAL slots the kernel stores to.
std::vector<size_t> output_slots(const UOpPtr& ast) {
  std::set<size_t> slots;
  for (const UOpPtr& u : toposort(ast))
    if (u->op == Op::STORE && u->src[0]->op == Op::INDEX && u->src[0]->src[0]->op == Op::DEFINE_GLOBAL)
      slots.insert(size_t(u->src[0]->src[0]->arg_as<int64_t>()));
  return {slots.begin(), slots.end()};
}

class DeviceSearch {
 public:
  DeviceSearch(Device& device, const UOpPtr& ast, std::span<const KernelBuffer> buffers, const SearchOptions& options)
      : device_(device), ast_(ast), options_(options), scratch_(device, buffers), outputs_(output_slots(ast)) {
    for (size_t slot : outputs_)
      if (slot >= buffers.size())
        throw Error(cat("search: the kernel stores to buffer slot ", slot, " but only ", buffers.size(),
                        " buffers were given; pass one KernelBuffer per DEFINE_GLOBAL slot"));
  }

  SearchResult run(const std::function<void(const SearchProgress&)>& progress) {
    SearchHooks hooks;
    hooks.default_opts = heuristic_opts(ast_, device_.spec());
    hooks.actions = [&](std::span<const Opt> applied) { return action_space(ast_, device_.spec(), applied); };
    hooks.build = [&](std::span<const Opt> opts) { return build(opts); };
    hooks.time = [&](const Built& b) { return time(compiled(b), shrink_); };
    hooks.check = [&](const Built& candidate, const Built& reference) { return check(compiled(candidate), compiled(reference)); };
    hooks.progress = progress;
    choose_shrink(hooks.default_opts);
    SearchResult r = beam_search(hooks, options_);
    r.lower_cpu_s = lower_ns_.load() * 1e-9;
    r.compile_cpu_s = compile_ns_.load() * 1e-9;
    if (shrink_ > 1) retime_full(r);
    return r;
  }

 private:
  static Compiled& compiled(const Built& b) { return *static_cast<Compiled*>(b.artifact.get()); }

  BuildResult build(std::span<const Opt> opts) {
    auto start = Clock::now();
    Lowering lowering = lower_with_opts(ast_, device_.spec(), opts);
    lower_ns_ += int64_t(seconds_since(start) * 1e9);
    if (!lowering.kernel) return {std::nullopt, lowering.rejected};
    auto c = std::make_shared<Compiled>();
    c->kernel = std::move(*lowering.kernel);
    if (!c->kernel.vars.empty())
      throw Error(cat("search: kernel ", c->kernel.name, " has ", c->kernel.vars.size(),
                      " variables; searching kernels with symbolic sizes is not implemented yet"));
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
    return c.program->launch(scratch_.raws(), {}, dims, true) * scale;
  }

  // A kernel whose default launch takes longer than shrink_above_s is timed on a part of its launch, so a
  // search of a long kernel takes about as long as a short one's. The parts of a launch do the same work
  // each (a row, a thread's share), so the time scales; caches see a smaller working set, so the figure
  // is an estimate, and the final figures are full launches (retime_full).
  void choose_shrink(const std::vector<Opt>& default_opts) {
    BuildResult b = build(default_opts);
    if (!b.built) return;  // the engine reports it
    Compiled& c = compiled(*b.built);
    time(c, 1);  // warm-up: first touch of the scratch buffers, the kernel's pages
    double seconds = time(c, 1);
    if (seconds > options_.shrink_above_s) shrink_ = std::max<int64_t>(1, int64_t(seconds / (options_.shrink_above_s / 2)));
  }

  double full_time(Compiled& c) {
    double best = time(c, 1);
    for (int i = 1; i < options_.timing_runs; ++i) best = std::min(best, time(c, 1));
    return best;
  }

  void retime_full(SearchResult& r) {
    auto start = Clock::now();
    BuildResult d = build(heuristic_opts(ast_, device_.spec()));
    r.default_seconds = full_time(compiled(*d.built));
    r.best_seconds = r.default_seconds;
    if (r.improved) {
      BuildResult w = build(r.opts);
      r.best_seconds = full_time(compiled(*w.built));
      if (r.best_seconds >= r.default_seconds) {  // the shrunken launches misjudged it: keep the default
        r.failures.push_back(cat("[", to_string(r.opts), "] was faster on shrunken launches but not on full ones (",
                                 r.best_seconds, " s vs the default's ", r.default_seconds, " s)"));
        r.opts = heuristic_opts(ast_, device_.spec());
        r.best_seconds = r.default_seconds;
        r.improved = false;
      }
    }
    r.timing_s += seconds_since(start);
  }

  std::optional<std::string> check(Compiled& candidate, Compiled& reference) {
    auto outputs_of = [&](Compiled& c) {
      scratch_.refill();  // the same inputs for both, even when the kernel writes a buffer it reads
      c.program->launch(scratch_.raws(), {}, c.kernel.dims, false);
      device_.synchronize();
      std::vector<std::vector<uint8_t>> out;
      for (size_t slot : outputs_) out.push_back(scratch_.read(slot));
      return out;
    };
    std::vector<std::vector<uint8_t>> want = outputs_of(reference), got = outputs_of(candidate);
    for (size_t i = 0; i < outputs_.size(); ++i)
      if (auto mismatch = compare(got[i], want[i], scratch_.dtype(outputs_[i]), outputs_[i])) return mismatch;
    return std::nullopt;
  }

  Device& device_;
  UOpPtr ast_;
  const SearchOptions& options_;
  Scratch scratch_;
  std::vector<size_t> outputs_;
  int64_t shrink_ = 1;
  std::atomic<int64_t> lower_ns_{0}, compile_ns_{0};
};

}  // namespace

SearchResult search_kernel(Device& device, const UOpPtr& ast, std::span<const KernelBuffer> buffers,
                           const SearchOptions& options, const std::function<void(const SearchProgress&)>& progress) {
  return DeviceSearch(device, ast, buffers, options).run(progress);
}

}  // namespace kiln
