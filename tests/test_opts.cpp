// Opts (lower/opts.h): every single action, and chains of them, on elementwise, reduce, matmul, conv
// and softmax kernels give the results of the default kernel on REF (the interpreter); opts that do
// not apply are rejected with a reason.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <set>

#include "devices/device.h"
#include "frontend/tensor.h"
#include "helpers.h"
#include "lower/opts.h"
#include "search/actions.h"
#include "uop/serialize.h"
#include "uop/config.h"

namespace kiln {
namespace {

// Devices by what they are, never by name: the oracle every result is compared with (the interpreter),
// and the first CPU-style device with vector types, whose heuristics several cases below pin down.
std::string first_device(const std::function<bool(const DeviceSpec&)>& wanted, const char* what) {
  std::optional<std::string> found = find_device(wanted);
  if (!found) FAIL("no available device is " << what);
  return *found;
}
const std::string& oracle() {
  static const std::string name = first_device([](const DeviceSpec& s) { return s.oracle; }, "an oracle (DeviceSpec::oracle)");
  return name;
}
const std::string& host() {
  static const std::string name = first_device(
      [](const DeviceSpec& s) { return !s.oracle && s.max_local == 0 && s.vector_bytes > 0; }, "CPU-style with vector types");
  return name;
}

// Runs one kernel of a schedule lowered with `opts` (the heuristics' when null) on `device`: every
// buffer filled with the same deterministic values, then slot 0 read back as floats.
std::vector<float> run_kernel(const ScheduleItem& item, const std::string& device_name, const std::vector<Opt>* opts) {
  Device& device = get_device(device_name);
  LoweredKernel k;
  if (opts) {
    Lowering l = lower_with_opts(item.ast, device.spec(), *opts);
    INFO("rejected: " << l.rejected);
    REQUIRE(l.kernel.has_value());
    k = std::move(*l.kernel);
  } else {
    k = lower_kernel(item.ast, device.spec());
  }
  std::unique_ptr<Program> program = device.load(device.compile(k.source, k.name));
  std::vector<RawBuffer> bufs;
  std::vector<size_t> sizes;
  for (size_t slot = 0; slot < item.bufs.size(); ++slot) {
    size_t n = static_cast<size_t>(item.bufs[slot]->arg_as<BufferArg>().size);
    REQUIRE(item.bufs[slot]->dtype.scalar == ScalarType::Float32);
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = 0.25f + static_cast<float>((i * 7 + slot * 13) % 29) / 16.0f;  // never 0: some kernels divide
    bufs.push_back(device.alloc(n * 4));
    device.copy_in(bufs.back(), host.data(), n * 4);
    sizes.push_back(n);
  }
  program->launch(bufs, launch_values(item, k.vars), k.dims, false);
  std::vector<float> out(sizes[0]);
  device.copy_out(out.data(), bufs[0], sizes[0] * 4);
  for (RawBuffer& b : bufs) device.free(b);
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", expected " << want[i]);
    if (!std::isfinite(want[i])) {
      REQUIRE((std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i]));
      continue;
    }
    REQUIRE(std::abs(got[i] - want[i]) <= 1e-4f * (1 + std::abs(want[i])));
  }
}

struct Workload {
  const char* name;
  Tensor out;
};

std::vector<Workload> workloads() {
  Tensor a = Tensor::rand({24, 40}), b = Tensor::rand({24, 40}), c = Tensor::rand({40});
  Tensor m = Tensor::rand({16, 24}), n = Tensor::rand({24, 32});
  Tensor x = Tensor::rand({2, 4, 6, 6}), w = Tensor::rand({8, 4, 3, 3});
  for (Tensor* t : {&a, &b, &c, &m, &n, &x, &w}) t->realize();  // the kernels below read buffers, not the RNG
  return {
      {"elementwise", (a * b + c).relu()},
      {"row sum", a.sum({1})},
      {"column sum", a.sum({0})},
      {"matmul", m.matmul(n)},
      {"conv2d", x.conv2d(w, std::nullopt, {1, 1}, {1, 1})},
      {"softmax", a.softmax(1)},
  };
}

// Every kernel of every workload: (name, item).
std::vector<std::pair<std::string, ScheduleItem>> kernels() {
  std::vector<std::pair<std::string, ScheduleItem>> out;
  for (Workload& w : workloads()) {
    Schedule s = Tensor::schedule({w.out});
    for (const ScheduleItem& item : s.items)
      if (item.kind == ScheduleItem::Kind::Kernel) out.push_back({w.name, item});
  }
  return out;
}

// Every registered device that is available here (LOCAL, GROUP and GROUPTOP apply on GPU-style ones).
std::vector<std::string> opt_devices() {
  std::vector<std::string> out;
  for (const DeviceStatus& status : probe_devices())
    if (status.available) out.push_back(status.name);
  return out;
}

TEST_CASE("every single opt of the action space gives the default kernel's result on REF", "[opts]") {
  for (const std::string& device : opt_devices()) {
    for (auto& [name, item] : kernels()) {
      INFO(device << " " << name << ": " << str(item.ast->src[0]));
      std::vector<float> want = run_kernel(item, oracle(), nullptr);
      std::vector<Opt> actions = action_space(item.ast, get_device(device).spec());
      CHECK(actions.size() >= 3);
      for (const Opt& o : actions) {
        INFO(to_string(o));
        std::vector<Opt> one{o};
        expect_close(run_kernel(item, device, &one), want);
      }
    }
  }
}

TEST_CASE("chains of opts picked at random from the action space give the default kernel's result", "[opts]") {
  std::mt19937 rng(1234);
  for (auto& [name, item] : kernels()) {
    std::vector<float> want = run_kernel(item, oracle(), nullptr);
    for (int trial = 0; trial < 4 * config().fuzz; ++trial) {
      std::vector<Opt> chain;
      for (int step = 0; step < 3; ++step) {
        std::vector<Opt> next = action_space(item.ast, get_device(host()).spec(), chain);
        if (next.empty()) break;
        chain.push_back(next[rng() % next.size()]);
      }
      INFO(name << ": " << to_string(chain));
      expect_close(run_kernel(item, host(), &chain), want);
      std::vector<Opt> one_thread;  // REF runs one thread
      for (const Opt& o : chain)
        if (o.op != OptOp::THREAD) one_thread.push_back(o);
      expect_close(run_kernel(item, oracle(), &one_thread), want);
    }
  }
}

TEST_CASE("the heuristics' opts are listed and reproduce lower_kernel", "[opts]") {
  Tensor m = Tensor::rand({64, 64}).realize(), n = Tensor::rand({64, 64}).realize();
  Schedule s = Tensor::schedule({m.matmul(n)});
  REQUIRE(s.items.size() == 1);
  const DeviceSpec& spec = get_device(host()).spec();
  std::vector<Opt> opts = heuristic_opts(s.items[0].ast, spec);
  CHECK(!opts.empty());
  Lowering l = lower_with_opts(s.items[0].ast, spec, opts);
  REQUIRE(l.kernel);
  CHECK(l.kernel->source == lower_kernel(s.items[0].ast, spec).source);
  CHECK(l.kernel->opts == opts);
}

TEST_CASE("a transpose is tiled along both axes, and split over threads along its vector axis when its lanes gather across pages", "[opts]") {
  // (128, 2048) -> (2048, 128): each lane of a 16-wide output vector reads another source row, 8 KiB
  // apart. Split along the vector axis, each thread walks only its own rows (fewer pages than the TLB
  // holds); a (32, 64) transpose, rows 256 bytes apart, keeps the outer split.
  const DeviceSpec& spec = get_device(host()).spec();
  for (int64_t cols : {2048, 64}) {
    CAPTURE(cols);
    Tensor m = Tensor::rand({128, cols}).realize();
    Schedule s = Tensor::schedule({m.permute({1, 0}).contiguous()});
    REQUIRE(s.items.size() == 1);
    std::vector<Opt> opts = heuristic_opts(s.items[0].ast, spec);
    INFO(to_string(opts));
    std::optional<int64_t> vector_axis, copies_axis, thread_axis;  // the vector is the first UPCAST
    for (const Opt& o : opts) {
      if (o.op == OptOp::UPCAST) (vector_axis ? copies_axis : vector_axis) = o.axis;
      if (o.op == OptOp::THREAD) thread_axis = o.axis;
    }
    REQUIRE(vector_axis);
    if (spec.threads > 1 && thread_axis) CHECK((*thread_axis == *vector_axis) == (cols == 2048));
    // Copies of the vector along the axis the source is contiguous in (a 16x16 tile: each gathered
    // line is read whole, from L1).
    CHECK(copies_axis == std::optional<int64_t>(1 - *vector_axis));
    // run_kernel fills slot 1 (the source) with its own values: the naive transpose of those.
    auto source = [](int64_t i) { return 0.25f + static_cast<float>((i * 7 + 13) % 29) / 16.0f; };
    std::vector<float> want(static_cast<size_t>(128 * cols));
    for (int64_t r = 0; r < 128; ++r)
      for (int64_t c = 0; c < cols; ++c) want[static_cast<size_t>(c * 128 + r)] = source(r * cols + c);
    expect_close(run_kernel(s.items[0], host(), nullptr), want);
  }
}

TEST_CASE("the copies of a transpose tile read their source with vector loads, a broadcast operand stays scalar", "[opts]") {
  // (64, 96) -> (96, 64): the output vector gathers one value per source row; its copies along the
  // source's contiguous axis read consecutive values, which one vector load fetches (combine_accesses).
  Tensor m = Tensor::rand({64, 96}).realize();
  Schedule s = Tensor::schedule({m.permute({1, 0}).contiguous()});
  REQUIRE(s.items.size() == 1);
  auto source = [](int64_t i) { return 0.25f + static_cast<float>((i * 7 + 13) % 29) / 16.0f; };
  std::vector<float> want(64 * 96);
  for (int64_t r = 0; r < 64; ++r)
    for (int64_t c = 0; c < 96; ++c) want[static_cast<size_t>(c * 64 + r)] = source(r * 96 + c);
  // An outer product a[m] * b[n]: the rows of its tile read consecutive values of a too, but each meets a
  // vector of b: a broadcast from memory, which a vector load would turn into a shuffle per use.
  // (A vector of 16 along n and 4 copies along m, as a matmul's register tile.)
  Tensor a = Tensor::rand({64}).realize(), b = Tensor::rand({64}).realize();
  Schedule mm = Tensor::schedule({a.reshape({64, 1}) * b.reshape({1, 64})});
  REQUIRE(mm.items.size() == 1);
  for (const DeviceStatus& device : probe_devices()) {
    const std::string& name = device.name;
    if (!device.available || get_device(name).spec().vector_bytes == 0) continue;
    CAPTURE(name);
    LoweredKernel k = lower_kernel(s.items[0].ast, get_device(name).spec());
    int vector_loads = 0, scalar_loads = 0;
    for (const UOpPtr& u : k.linear)
      if (u->op == Op::LOAD && u->src[0]->op == Op::INDEX && u->src[0]->src[0]->arg_as<int64_t>() == 1)
        (u->dtype.count >= 4 ? vector_loads : scalar_loads) += 1;
    CHECK(vector_loads > 0);
    CHECK(scalar_loads == 0);
    expect_close(run_kernel(s.items[0], name, nullptr), want);

    std::vector<Opt> tile{{OptOp::UPCAST, 1, 16}, {OptOp::UPCAST, 0, 4}};
    Lowering lm = lower_with_opts(mm.items[0].ast, get_device(name).spec(), tile);
    REQUIRE(lm.kernel.has_value());
    const LoweredKernel& km = *lm.kernel;
    int broadcasts = 0;
    for (const UOpPtr& u : km.linear) {
      if (u->op != Op::VECTORIZE || std::count(u->src.begin(), u->src.end(), u->src[0]) != static_cast<std::ptrdiff_t>(u->src.size())) continue;
      ++broadcasts;
      CHECK(u->src[0]->op == Op::LOAD);  // not a lane (GEP) of a vector load
    }
    CHECK(broadcasts > 0);
    expect_close(run_kernel(mm.items[0], name, &tile), run_kernel(mm.items[0], oracle(), nullptr));
  }
}

TEST_CASE("a tile whose vector runs along a strided output axis stores its copies' lanes together, and ops on loaded lanes run on the vectors", "[opts]") {
  // (64, 96) -> (96, 64) plus one, with the vector (16) along the output's rows, which the source is
  // contiguous in, and 8 copies along its columns, which the output is contiguous in: each lane's 8
  // copies are 8 consecutive outputs, stored as one vector (combine_accesses), and the add runs on the
  // loaded vectors, not lane by lane.
  Tensor m = Tensor::rand({64, 96}).realize();
  Schedule s = Tensor::schedule({m.permute({1, 0}) + 1.0});
  REQUIRE(s.items.size() == 1);
  auto source = [](int64_t i) { return 0.25f + static_cast<float>((i * 7 + 13) % 29) / 16.0f; };
  std::vector<float> want(64 * 96);
  for (int64_t r = 0; r < 64; ++r)
    for (int64_t c = 0; c < 96; ++c) want[static_cast<size_t>(c * 64 + r)] = source(r * 96 + c) + 1.0f;
  std::vector<Opt> tile{{OptOp::UPCAST, 0, 16}, {OptOp::UPCAST, 1, 8}};
  for (const DeviceStatus& device : probe_devices()) {
    if (!device.available || get_device(device.name).spec().vector_bytes < 32) continue;
    CAPTURE(device.name);
    Lowering l = lower_with_opts(s.items[0].ast, get_device(device.name).spec(), tile);
    REQUIRE(l.kernel.has_value());
    int vector_stores = 0, scalar_stores = 0, scalar_adds = 0;
    for (const UOpPtr& u : l.kernel->linear) {
      if (u->op == Op::STORE) (u->src[1]->dtype.count >= 8 ? vector_stores : scalar_stores) += 1;
      if (u->op == Op::ADD && is_float(u->dtype) && u->dtype.count == 1) ++scalar_adds;
    }
    CHECK(vector_stores == 16);
    CHECK(scalar_stores == 0);
    CHECK(scalar_adds == 0);
    expect_close(run_kernel(s.items[0], device.name, &tile), want);
  }
}

TEST_CASE("a sum over an axis every moving load is contiguous in keeps one accumulator for the compiler to vectorize", "[opts]") {
  // A layer norm's backward sum over 128 features of (32, 64): the mean and the inverse deviation are
  // contiguous along the tokens, the gradient and the input along the features. A vector along the
  // tokens gathered 16 lanes per load (138 us, 365 ms to build), 16 x 8 scalar copies were strided
  // chains (461 us); the plain loop, vectorized along the features by the compiler, ran 20 us.
  Tensor g = Tensor::rand({32, 64, 128}).realize(), x = Tensor::rand({32, 64, 128}).realize(), gamma = Tensor::rand({128}).realize();
  Tensor mean = Tensor::rand({32, 64, 1}).realize(), rstd = Tensor::rand({32, 64, 1}).realize();
  Schedule s = Tensor::schedule({(g * gamma * ((x - mean) * rstd)).sum({2})});
  REQUIRE(s.items.size() == 1);
  std::vector<Opt> opts = heuristic_opts(s.items[0].ast, get_device(host()).spec());
  INFO(to_string(opts));
  CHECK(std::none_of(opts.begin(), opts.end(), [](const Opt& o) { return o.op == OptOp::UPCAST || o.op == OptOp::UNROLL; }));
  expect_close(run_kernel(s.items[0], host(), nullptr), run_kernel(s.items[0], oracle(), nullptr));
}

TEST_CASE("an elementwise kernel whose innermost output loop is too short for a vector takes one along a loop its loads walk contiguously", "[opts]") {
  // (64, 3, 3, 32) -> (64, 32, 3, 3), as a conv's weight gradient is put back in order: the output's
  // innermost loop has 3 elements; the source is contiguous along the 32 channels, which take the
  // vector, its lanes stored 9 apart. (16, 14, 14, 32) -> (16, 32, 14, 14), a 1x1 stride-2 conv's
  // output put back in NCHW order: the width gives only 2 lanes, so the channels take the vector too.
  for (Shape nhwc : {Shape{64, 3, 3, 32}, Shape{16, 14, 14, 32}}) {
    CAPTURE(shape_str(nhwc));
    Tensor m = Tensor::rand(nhwc).realize();
    Schedule s = Tensor::schedule({m.permute({0, 3, 1, 2}).contiguous()});
    REQUIRE(s.items.size() == 1);
    for (const DeviceStatus& device : probe_devices()) {
      if (!device.available || get_device(device.name).spec().vector_bytes == 0) continue;
      CAPTURE(device.name);
      std::vector<Opt> opts = heuristic_opts(s.items[0].ast, get_device(device.name).spec());
      INFO(to_string(opts));
      REQUIRE(!opts.empty());
      CHECK(opts[0] == (Opt{OptOp::UPCAST, 1, std::clamp<int64_t>(get_device(device.name).spec().vector_bytes / 4, 2, 16)}));
      Lowering l = lower_with_opts(s.items[0].ast, get_device(device.name).spec(), opts);
      REQUIRE(l.kernel.has_value());
      bool vector_load = false;
      for (const UOpPtr& u : l.kernel->linear) vector_load |= u->op == Op::LOAD && u->dtype.count > 1;
      CHECK(vector_load);
      expect_close(run_kernel(s.items[0], device.name, nullptr), run_kernel(s.items[0], oracle(), nullptr));
    }
  }
}

TEST_CASE("a sum with no tile over a short innermost loop folds several steps of the next reduce loop", "[opts]") {
  // A weight or bias gradient of few channels: 6 outputs, each summing (64, 24, 24) values with the
  // 24-wide rows innermost. The one accumulator's vector loop would close its horizontal sum every 24
  // values; UNROLL of the 24 rows above it gives it 8 rows per close.
  Tensor a = Tensor::rand({64, 6, 24, 24}).realize(), b = Tensor::rand({64, 6, 24, 24}).realize();
  Schedule s = Tensor::schedule({(a * b).sum({0, 2, 3})});
  REQUIRE(s.items.size() == 1);
  std::vector<Opt> opts = heuristic_opts(s.items[0].ast, get_device(host()).spec());
  INFO(to_string(opts));
  CHECK(std::count_if(opts.begin(), opts.end(), [](const Opt& o) { return o.op == OptOp::UNROLL && o.amount == 8; }) == 1);
  expect_close(run_kernel(s.items[0], host(), nullptr), run_kernel(s.items[0], oracle(), nullptr));
}

TEST_CASE("a product summed into a vector with no register rows folds 4 steps per accumulator update", "[opts]") {
  // A weight gradient of 16 output channels (the vector) and 9 input channels (not a multiple of 4,
  // too many to take whole as rows): one vector accumulator, whose FMAs would each wait for the last;
  // UNROLL 4 of the reduce loop.
  Tensor dy = Tensor::rand({64, 16}).realize(), x = Tensor::rand({64, 9}).realize();
  Schedule s = Tensor::schedule({(dy.reshape({64, 16, 1}) * x.reshape({64, 1, 9})).sum({0})});
  REQUIRE(s.items.size() == 1);
  std::vector<Opt> opts = heuristic_opts(s.items[0].ast, get_device(host()).spec());
  INFO(to_string(opts));
  CHECK(std::count_if(opts.begin(), opts.end(), [](const Opt& o) { return o.op == OptOp::UNROLL && o.amount == 4; }) == 1);
  expect_close(run_kernel(s.items[0], host(), nullptr), run_kernel(s.items[0], oracle(), nullptr));
  // A column sum (nothing reused along the vector) keeps its plain accumulator.
  Schedule col = Tensor::schedule({dy.sum({0})});
  REQUIRE(col.items.size() == 1);
  std::vector<Opt> col_opts = heuristic_opts(col.items[0].ast, get_device(host()).spec());
  INFO(to_string(col_opts));
  CHECK(std::none_of(col_opts.begin(), col_opts.end(), [](const Opt& o) { return o.op == OptOp::UNROLL; }));
}

TEST_CASE("float32 exp, log, sigmoid and gelu are vector ALU code on the CPU devices and match REF", "[opts]") {
  // Their exp2 and log2 become polynomials and bit tricks (lower/transcendental.h), so the heuristics
  // vectorize the loop; a device that keeps the library calls keeps EXP2 and LOG2.
  Tensor x = (Tensor::rand({8, 256}) * 6.0 - 3.0).realize();
  const std::vector<std::pair<const char*, Tensor>> cases = {
      {"exp", x.exp()}, {"log", x.abs().log()}, {"sigmoid", x.sigmoid()}, {"gelu", x.gelu()}};
  int devices = 0;
  for (const DeviceStatus& status : probe_devices()) {
    if (!status.available || !get_device(status.name).spec().alu_transcendentals) continue;
    ++devices;
    const std::string& device = status.name;
    const DeviceSpec& spec = get_device(device).spec();
    for (const auto& [name, out] : cases) {
      INFO(device << " " << name);
      Schedule s = Tensor::schedule({out});
      REQUIRE(s.items.size() == 1);
      LoweredKernel k = lower_kernel(s.items[0].ast, spec);
      bool vector_alu = false, calls = false;
      for (const UOpPtr& u : k.linear) {
        vector_alu |= is_alu(u->op) && u->dtype.count > 1;
        calls |= u->op == Op::EXP2 || u->op == Op::LOG2;
      }
      CHECK(vector_alu);
      CHECK(!calls);
      expect_close(run_kernel(s.items[0], device, nullptr), run_kernel(s.items[0], oracle(), nullptr));
      DeviceSpec library = spec;
      library.alu_transcendentals = false;
      bool kept = false;
      for (const UOpPtr& u : lower_kernel(s.items[0].ast, library).linear) kept |= u->op == Op::EXP2 || u->op == Op::LOG2;
      CHECK(kept);
    }
  }
  CHECK(devices >= 1);  // the CPU device (in-process LLVM or a C compiler) is one
}

TEST_CASE("a reduction over operands contiguous along different axes is vectorized along one of them, and matches", "[opts]") {
  // Batch norm's sums over a conv's output (stored channels innermost) times an NCHW gradient: no axis
  // has every load contiguous, so the channels are the vector (one load contiguous, the other gathered
  // lane by lane) rather than a scalar loop that reads each conv output line once per channel.
  const int64_t n = 4, c = 16, h = 6, w = 6;
  Tensor nhwc = Tensor::rand({n, h, w, c}).realize(), nchw = Tensor::rand({n, c, h, w}).realize();
  Tensor out = (nhwc.permute({0, 3, 1, 2}) * nchw).sum({0, 2, 3});
  Schedule s = Tensor::schedule({out});
  REQUIRE(s.items.size() == 1);
  const DeviceSpec& spec = get_device(host()).spec();
  LoweredKernel k = lower_kernel(s.items[0].ast, spec);
  bool vector_load = false;
  for (const UOpPtr& u : k.linear) vector_load |= u->op == Op::LOAD && u->dtype.count > 1;
  CHECK(vector_load == (spec.vector_bytes > 0));
  std::vector<float> a = nhwc.to_vector<float>(), b = nchw.to_vector<float>(), got = out.to_vector<float>();
  for (int64_t ch = 0; ch < c; ++ch) {
    double want = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) want += double(a[((i * h + y) * w + x) * c + ch]) * b[((i * c + ch) * h + y) * w + x];
    CHECK(got[size_t(ch)] == Approx(want).epsilon(1e-5));
  }
}

TEST_CASE("the neighbours of the heuristics' opts apply, differ from them, and give the same result", "[opts]") {
  for (auto& [name, item] : kernels()) {
    const DeviceSpec& spec = get_device(host()).spec();
    std::vector<Opt> start = heuristic_opts(item.ast, spec);
    std::vector<std::vector<Opt>> near = opt_neighbours(item.ast, spec, start);
    INFO(name << ": " << to_string(start));
    std::set<std::string> seen;
    std::vector<float> want = run_kernel(item, oracle(), nullptr);
    for (std::vector<Opt>& list : near) {
      INFO(to_string(list));
      CHECK(to_string(list) != to_string(start));
      CHECK(seen.insert(to_string(list)).second);
      CHECK(lower_with_opts(item.ast, spec, list).kernel.has_value());
      expect_close(run_kernel(item, host(), &list), want);
    }
    // Each opt of the start is dropped in one neighbour (when the rest still applies).
    if (start.size() >= 2) CHECK(near.size() >= 1);
  }
  // A matmul's register tile: the rows halved, THREAD on the other output axis or gone, and the rows'
  // UPCAST moved to the other output axis, are neighbours.
  Tensor m = Tensor::rand({256, 256}).realize(), n = Tensor::rand({256, 256}).realize();
  const ScheduleItem item = Tensor::schedule({m.matmul(n)}).items.back();
  std::vector<Opt> start{{OptOp::UPCAST, 0, 8}, {OptOp::UPCAST, 1, 16}, {OptOp::THREAD, 1, 0}};
  std::set<std::string> near;
  for (const std::vector<Opt>& l : opt_neighbours(item.ast, get_device(host()).spec(), start)) near.insert(to_string(l));
  CHECK(near.count("UPCAST(0,4) UPCAST(1,16) THREAD(1,0)"));
  CHECK(near.count("UPCAST(0,8) UPCAST(1,16) THREAD(0,0)"));
  CHECK(near.count("UPCAST(0,8) UPCAST(1,16)"));
  CHECK(near.count("UPCAST(1,8) UPCAST(1,16) THREAD(1,0)"));
  CHECK(near.count("UPCAST(1,16) THREAD(1,0)"));
  CHECK(near.count("UPCAST(0,8) UPCAST(1,16) THREAD(1,0)") == 0);
}

TEST_CASE("PADTO masks the extra iterations of output and reduce axes", "[opts]") {
  Tensor a = Tensor::rand({30, 30}).realize();
  for (Tensor out : {a.sum({1}), (a * 2.0).exp()}) {
    Schedule s = Tensor::schedule({out});
    REQUIRE(s.items.size() == 1);
    std::vector<float> want = run_kernel(s.items[0], oracle(), nullptr);
    int last = static_cast<int>(action_space(s.items[0].ast, get_device(oracle()).spec()).back().axis);
    for (const std::string& device : {host(), oracle()}) {
      std::vector<Opt> pad{{OptOp::PADTO, last, 16}, {OptOp::UPCAST, 0, 2}};
      INFO(device << " " << to_string(pad));
      expect_close(run_kernel(s.items[0], device, &pad), want);
    }
  }
}

TEST_CASE("opts that do not apply are rejected with a reason", "[opts]") {
  Tensor m = Tensor::rand({16, 24}).realize(), n = Tensor::rand({24, 32}).realize();
  Schedule s = Tensor::schedule({m.matmul(n)});
  REQUIRE(s.items.size() == 1);
  const UOpPtr& ast = s.items[0].ast;
  const DeviceSpec& cpu = get_device(host()).spec();
  auto rejected = [&](std::vector<Opt> opts) {
    Lowering l = lower_with_opts(ast, cpu, opts);
    CHECK(!l.kernel);
    return l.rejected;
  };
  // Axes: 0 (16 rows), 1 (32 columns), 2 (the 24-long reduction).
  CHECK_THAT(rejected({{OptOp::UPCAST, 2, 4}}), Catch::Contains("UPCAST takes an output axis"));
  CHECK_THAT(rejected({{OptOp::UNROLL, 0, 4}}), Catch::Contains("UNROLL takes a reduce axis"));
  CHECK_THAT(rejected({{OptOp::UPCAST, 0, 5}}), Catch::Contains("5 does not divide the axis's 16 iterations"));
  CHECK_THAT(rejected({{OptOp::UPCAST, 7, 2}}), Catch::Contains("the kernel has 3 axes"));
  CHECK_THAT(rejected({{OptOp::LOCAL, 0, 4}}), Catch::Contains("has no workgroups"));
  CHECK_THAT(rejected({{OptOp::GROUP, 2, 8}}), Catch::Contains("has no workgroups"));
  CHECK_THAT(rejected({{OptOp::PADTO, 0, 16}}), Catch::Contains("already a multiple"));
  CHECK_THAT(rejected({{OptOp::UPCAST, 0, 2}, {OptOp::PADTO, 0, 32}}), Catch::Contains("PADTO comes before"));
  CHECK_THAT(rejected({{OptOp::SWAP, 0, 2}}), Catch::Contains("different output axis"));
  // A body of 16 x 4 rows (not a vector: axis 0 is strided) times 16 unrolled steps is 1024 copies.
  Tensor big_m = Tensor::rand({64, 64}).realize(), big_n = Tensor::rand({64, 64}).realize();
  Schedule big = Tensor::schedule({big_m.matmul(big_n)});
  REQUIRE(big.items.size() == 1);
  DeviceSpec wide = cpu;  // 16-float vectors (AVX-512), whatever this machine has: only lowered here
  wide.vector_bytes = 64;
  wide.vector_registers = 32;
  Lowering huge = lower_with_opts(big.items[0].ast, wide, std::vector<Opt>{{OptOp::UPCAST, 0, 16}, {OptOp::UPCAST, 0, 4}, {OptOp::UNROLL, 2, 16}});
  CHECK(!huge.kernel);
  CHECK_THAT(huge.rejected, Catch::Contains("1024 copies of the work (64 outputs in vectors of 1, 16 reduce steps unrolled); at most 512"));
  // The same rows with vectors of 16 along axis 1 are 64 copies: fine.
  CHECK(lower_with_opts(big.items[0].ast, wide, std::vector<Opt>{{OptOp::UPCAST, 1, 16}, {OptOp::UPCAST, 0, 4}, {OptOp::UNROLL, 2, 16}}).kernel);
  CHECK_THAT(rejected({{OptOp::UPCAST, 0, 16}, {OptOp::UPCAST, 1, 32}}), Catch::Contains("more than 256"));
  if (cpu.threads > 1) CHECK_THAT(rejected({{OptOp::THREAD, 0, 0}, {OptOp::THREAD, 1, 0}}), Catch::Contains("already threaded"));
  CHECK_THAT(rejected({{OptOp::THREAD, 2, 0}}), Catch::Contains(cpu.threads > 1 ? "THREAD takes an output axis" : "runs one thread"));
}

// A loop that never runs (found by fuzz_kernel_text in a stored kernel; kiln's scheduler makes none) has
// nothing to split: an UPCAST of it made pieces that interned as the loop itself, and upcast's
// substitution rewrote it forever. Every opt on it is refused, and the default lowering stores nothing.
TEST_CASE("opts on a loop of 0 iterations are refused, and the kernel lowers and runs, storing nothing", "[opts]") {
  std::vector<UOpPtr> prog = parse_program(
      "kiln-uops 1\n"
      "0 DEFINE_GLOBAL float32* [] int:0\n"
      "1 CONST int32 [] const.int:0\n"
      "2 RANGE int32 [1] int:0\n"
      "3 INDEX float32* [0,2] -\n"
      "4 DEFINE_GLOBAL float32* [] int:1\n"
      "5 INDEX float32* [4,2] -\n"
      "6 LOAD float32 [5] -\n"
      "7 STORE void [3,6] -\n"
      "8 SINK void [7] -\n");
  const UOpPtr& ast = prog.back();
  for (const DeviceStatus& d : probe_devices()) {
    if (!d.available) continue;
    INFO(d.name);
    Device& device = get_device(d.name);
    for (Opt o : std::vector<Opt>{{OptOp::UPCAST, 0, 8}, {OptOp::UPCAST, 0, 0}, {OptOp::PADTO, 0, 16}}) {
      Lowering l = lower_with_opts(ast, device.spec(), std::vector<Opt>{o});
      CHECK(!l.kernel);
      CHECK_THAT(l.rejected, Catch::Contains("the axis runs 0 iterations; there is nothing to split"));
    }
    LoweredKernel k = lower_kernel(ast, device.spec());
    std::unique_ptr<Program> program = device.load(device.compile(k.source, k.name));
    float out = 7.0f, in = 3.0f;
    std::vector<RawBuffer> bufs{device.alloc(4), device.alloc(4)};
    device.copy_in(bufs[0], &out, 4);
    device.copy_in(bufs[1], &in, 4);
    program->launch(bufs, {}, k.dims, false);
    device.copy_out(&out, bufs[0], 4);
    CHECK(out == 7.0f);
    for (RawBuffer& b : bufs) device.free(b);
  }
}

TEST_CASE("opts print and parse", "[opts]") {
  for (OptOp op : {OptOp::UPCAST, OptOp::UNROLL, OptOp::LOCAL, OptOp::GROUP, OptOp::GROUPTOP, OptOp::THREAD, OptOp::PADTO, OptOp::SWAP}) {
    Opt o{op, 2, 16};
    CHECK(parse_opt(to_string(o)) == o);
  }
  CHECK(to_string(std::vector<Opt>{{OptOp::UPCAST, 1, 8}, {OptOp::UNROLL, 2, 4}}) == "UPCAST(1,8) UNROLL(2,4)");
  for (const char* bad : {"", "UPCAST", "UPCAST(1)", "UPCAST(1,2", "FOO(1,2)", "UPCAST(a,2)", "UPCAST(1,2x)", "UPCAST(1,2) "})
    CHECK(!parse_opt(bad));
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A GPU-style spec for lowering only (no device runs it here; OPENCL and VULKAN run these kernels in
// their conformance runs): the linear program must be well formed and the launch dims consistent.
DeviceSpec fake_gpu_spec() {
  DeviceSpec spec = get_device(oracle()).spec();
  spec.max_local = 256;
  spec.max_local_dims = {256, 256, 64};
  spec.max_global_dims = {65535, 65535, 65535};
  spec.shared_bytes = 16384;
  spec.threads = 1;
  spec.vector_bytes = 0;
  return spec;
}

TEST_CASE("GPU-style lowering: LOCAL and GROUP map to work-item ids, shared memory and one barrier", "[opts]") {
  DeviceSpec gpu = fake_gpu_spec();
  for (auto& [name, item] : kernels()) {
    INFO(name);
    std::vector<Opt> opts = heuristic_opts(item.ast, gpu);
    Lowering l = lower_with_opts(item.ast, gpu, opts);
    INFO(to_string(opts) << " " << l.rejected);
    REQUIRE(l.kernel);
    for (const Opt& o : action_space(item.ast, gpu)) {
      INFO(to_string(o));
      std::vector<Opt> one{o};
      Lowering k = lower_with_opts(item.ast, gpu, one);
      REQUIRE(k.kernel);
      int64_t locals = 1, barriers = 0, shared = 0;
      for (const UOpPtr& u : k.kernel->linear) {
        if (u->op == Op::SPECIAL && u->arg_as<std::string>().starts_with("lidx")) locals *= u->src[0]->vmax();
        barriers += u->op == Op::BARRIER;
        shared += u->op == Op::DEFINE_LOCAL;
      }
      CHECK(locals == k.kernel->dims.local[0] * k.kernel->dims.local[1] * k.kernel->dims.local[2]);
      bool group = o.op == OptOp::GROUP || o.op == OptOp::GROUPTOP;
      CHECK(barriers == (group ? 1 : 0));
      CHECK((shared > 0) == group);
      if (o.op == OptOp::LOCAL || group) CHECK(locals == o.amount);
    }
  }
}

TEST_CASE("GPU-style lowering splits a loop longer than a grid dimension allows", "[opts]") {
  DeviceSpec gpu = fake_gpu_spec();
  gpu.max_global_dims = {1000, 1000, 1000};
  Tensor x = Tensor::rand({1 << 20}).realize();
  Schedule s = Tensor::schedule({x * 2.0 + 1.0});
  REQUIRE(s.items.size() == 1);
  Lowering l = lower_with_opts(s.items[0].ast, gpu, heuristic_opts(s.items[0].ast, gpu));
  INFO(l.rejected);
  REQUIRE(l.kernel);
  int64_t items = 1;
  for (int d = 0; d < 3; ++d) {
    CHECK(l.kernel->dims.global[d] <= 1000);
    items *= l.kernel->dims.global[d] * l.kernel->dims.local[d];
  }
  CHECK(items == (1 << 20));
}


TEST_CASE("GPU-style heuristics fit their shared-memory reductions in the device's shared memory", "[opts]") {
  DeviceSpec gpu = fake_gpu_spec();  // 16 KiB of shared memory
  for (int64_t n : {64, 128, 256}) {
    Tensor a = Tensor::rand({n, n}).realize(), b = Tensor::rand({n, n}).realize();
    for (Tensor out : {a.matmul(b), a.sum({1}), a.sum()}) {
      Schedule s = Tensor::schedule({out});
      for (const ScheduleItem& item : s.items) {
        std::vector<Opt> opts = heuristic_opts(item.ast, gpu);
        Lowering l = lower_with_opts(item.ast, gpu, opts);
        INFO(n << ": " << to_string(opts) << ": " << l.rejected);
        CHECK(l.kernel);
      }
    }
  }
}


TEST_CASE("a tile with no axis for rows takes eight vectors along its vector axis, with REF's results", "[opts]") {
  // (9, 256) x (256, 512): 9 rows are neither a multiple of 4 nor few enough to take whole, so no
  // register rows; one vector would be one chain of FMAs, each waiting for the last. Eight vectors along
  // the output columns are eight accumulators fed by the same broadcast of the left operand. The
  // results equal REF's default kernel.
  const DeviceSpec& spec = get_device(host()).spec();
  Tensor a = Tensor::rand({9, 256}).realize(), b = Tensor::rand({256, 512}).realize();
  Schedule s = Tensor::schedule({a.matmul(b)});
  REQUIRE(s.items.size() == 1);
  std::vector<Opt> opts = heuristic_opts(s.items[0].ast, spec);
  INFO(to_string(opts));
  int64_t lanes = 1;
  std::set<int64_t> upcast_axes;
  for (const Opt& o : opts)
    if (o.op == OptOp::UPCAST) lanes *= o.amount, upcast_axes.insert(o.axis);
  CHECK(upcast_axes.size() == 1);
  CHECK(lanes == 8 * std::clamp<int64_t>(spec.vector_bytes / 4, 2, 16));  // eight registers of float32 lanes
  expect_close(run_kernel(s.items[0], host(), nullptr), run_kernel(s.items[0], oracle(), nullptr));
}

TEST_CASE("a pooling reduction gets no register rows for a load outside its loop, with REF's results", "[opts]") {
  // max_pool2d of x * scale (one scale per channel): the scale does not move along the batch, but it is
  // loaded once per output, outside the 2x2 loop, so rows along the batch reuse nothing; they only
  // multiplied the code (8 x 32 copies of a gated max: 0.66 s to compile).
  const DeviceSpec& spec = get_device(host()).spec();
  Tensor x = Tensor::rand({128, 32, 14, 14}).realize(), scale = Tensor::rand({1, 32, 1, 1}).realize();
  Schedule s = Tensor::schedule({(x * scale).max_pool2d({2, 2})});
  REQUIRE(s.items.size() == 1);
  std::vector<Opt> opts = heuristic_opts(s.items[0].ast, spec);
  INFO(to_string(opts));
  std::set<int64_t> upcast_axes;
  for (const Opt& o : opts)
    if (o.op == OptOp::UPCAST) upcast_axes.insert(o.axis);
  CHECK(upcast_axes.size() == 1);
  expect_close(run_kernel(s.items[0], host(), nullptr), run_kernel(s.items[0], oracle(), nullptr));
}

TEST_CASE("register rows only for a reduction that multiplies or selects across them, with REF's results", "[opts]") {
  // A layer norm's sum of squares of x + pos (pos shared by the batch) reuses pos along the batch but
  // multiplies nothing across it: no rows (its 8-row tile took 0.9 s to compile). An embedding's
  // gradient selects g where the token matches each vocabulary row: rows share each load of g.
  const DeviceSpec& spec = get_device(host()).spec();
  auto upcast_axes = [&](const ScheduleItem& item) {
    std::vector<Opt> opts = heuristic_opts(item.ast, spec);
    INFO(to_string(opts));
    std::set<int64_t> axes;
    for (const Opt& o : opts)
      if (o.op == OptOp::UPCAST) axes.insert(o.axis);
    return axes.size();
  };
  Tensor x = Tensor::rand({32, 64, 128}).realize(), pos = Tensor::rand({64, 128}).realize();
  Tensor h = x + pos;
  Schedule norm = Tensor::schedule({(h * h).sum({2})});
  REQUIRE(norm.items.size() == 1);
  CHECK(upcast_axes(norm.items[0]) <= 1);  // no rows
  expect_close(run_kernel(norm.items[0], host(), nullptr), run_kernel(norm.items[0], oracle(), nullptr));
  Tensor tokens = Tensor::rand({512, 1, 1}).realize(), g = Tensor::rand({512, 1, 128}).realize();
  Tensor rows = Tensor::arange(256).reshape({1, 256, 1}).cast(dtypes::float32);
  Schedule embed = Tensor::schedule({tokens.lt(rows).where(g, g.zeros_like()).sum({0})});
  REQUIRE(embed.items.size() == 1);
  CHECK(upcast_axes(embed.items[0]) == 2);
  expect_close(run_kernel(embed.items[0], host(), nullptr), run_kernel(embed.items[0], oracle(), nullptr));
}

// A register tile of 8 accumulators is squarer with 16 vector registers (AVX2): 4 rows x 2 vectors, 6
// loads per 8 FMAs, not 8 rows x 1 vector, 9; with 32 (AVX-512), 8 rows x 2 vectors.
TEST_CASE("a matmul's register tile fits the vector registers: 4 rows x 2 vectors with 16, 8 x 2 with 32, with REF's results", "[opts]") {
  DeviceSpec spec = get_device(host()).spec();
  Tensor a = Tensor::rand({64, 128}).realize(), b = Tensor::rand({128, 256}).realize();
  Schedule mm = Tensor::schedule({a.matmul(b)});
  REQUIRE(mm.items.size() == 1);
  spec.vector_bytes = 32;  // 8 floats per vector
  for (int64_t registers : {16, 32}) {
    spec.vector_registers = registers;
    std::vector<Opt> opts = heuristic_opts(mm.items[0].ast, spec);
    INFO(registers << " registers: " << to_string(opts));
    int64_t rows = registers == 16 ? 4 : 8;
    CHECK(std::count(opts.begin(), opts.end(), Opt{OptOp::UPCAST, 0, rows}) == 1);
    CHECK(std::count(opts.begin(), opts.end(), Opt{OptOp::UPCAST, 1, 8}) == 1);
    CHECK(std::count(opts.begin(), opts.end(), Opt{OptOp::UPCAST, 1, 2}) == 1);
  }
  expect_close(run_kernel(mm.items[0], host(), nullptr), run_kernel(mm.items[0], oracle(), nullptr));
}

TEST_CASE("a short row axis is taken whole, and a tile with no vector puts its copies before its rows, with REF's results", "[opts]") {
  const DeviceSpec& spec = get_device(host()).spec();
  // (7, 256) x (256, 512): the 7 rows whole (7 x 2 vectors: 8 us, where 8 vectors without rows took 28).
  Tensor a = Tensor::rand({7, 256}).realize(), b = Tensor::rand({256, 512}).realize();
  Schedule mm = Tensor::schedule({a.matmul(b)});
  REQUIRE(mm.items.size() == 1);
  std::vector<Opt> opts = heuristic_opts(mm.items[0].ast, spec);
  INFO(to_string(opts));
  CHECK(std::count(opts.begin(), opts.end(), Opt{OptOp::UPCAST, 0, 7}) == 1);
  expect_close(run_kernel(mm.items[0], host(), nullptr), run_kernel(mm.items[0], oracle(), nullptr));
  // (28, 256) x (256, 512): 28 rows, a multiple of neither 8 nor 4 twice over, give tiles of 7 rows (a
  // 14- or 28-wide image's rows in a conv), where the registers hold 7 x 2 vectors' accumulators.
  Tensor a28 = Tensor::rand({28, 256}).realize();
  Schedule mm28 = Tensor::schedule({a28.matmul(b)});
  REQUIRE(mm28.items.size() == 1);
  DeviceSpec many_registers = spec;
  many_registers.vector_registers = 32;
  std::vector<Opt> opts28 = heuristic_opts(mm28.items[0].ast, many_registers);
  INFO(to_string(opts28));
  CHECK(std::count(opts28.begin(), opts28.end(), Opt{OptOp::UPCAST, 0, 7}) == 1);
  expect_close(run_kernel(mm28.items[0], host(), nullptr), run_kernel(mm28.items[0], oracle(), nullptr));
  // A 3x3 conv of a width-padded (N, K, H, W) view into 3 channels stored innermost (the layout the
  // phases of a stride-2 3-channel input gradient once had): the loads are masked along the width and
  // the stores scattered, so no axis takes a vector. Its scalar tile: 16 copies along the width (which
  // the loads walk contiguously), then the 3 channels whole as rows (which share each loaded value):
  // 422 -> 118 us; rows first: 665 us.
  Tensor g = Tensor::rand({4, 16, 32, 32}).realize(), w = Tensor::rand({3, 16, 3, 3}).realize();
  Tensor win = g.pad({{0, 0}, {0, 0}, {1, 1}, {1, 1}}).windows({3, 3}, {1, 1}, {1, 1});  // (4, 16, 32, 32, 3, 3)
  Tensor gv = win.permute({0, 2, 3, 1, 4, 5}).reshape({4, 32, 32, 1, 16, 3, 3}).expand({4, 32, 32, 3, 16, 3, 3});
  Tensor wv = w.reshape({1, 1, 1, 3, 16, 3, 3}).expand({4, 32, 32, 3, 16, 3, 3});
  Schedule conv = Tensor::schedule({(gv * wv).sum({4, 5, 6})});
  REQUIRE(conv.items.size() == 1);
  REQUIRE(detail::kernel_name(conv.items[0].ast) == "r_4_32_32_3_16_3_3");  // (n, h, w, c | k, kh, kw)
  std::vector<Opt> o = heuristic_opts(conv.items[0].ast, spec);
  INFO(to_string(o));
  REQUIRE(o.size() >= 2);
  CHECK(o[0].op == OptOp::UPCAST);
  CHECK(o[0].amount == 16);
  CHECK(o[1] == (Opt{OptOp::UPCAST, 3, 3}));
  expect_close(run_kernel(conv.items[0], host(), nullptr), run_kernel(conv.items[0], oracle(), nullptr));
}

TEST_CASE("a conv with few output channels runs along rows of pixels: the stride-2 RGB input gradient's phases take the width as their vector, with REF's results", "[opts]") {
  // Each phase of the input gradient is a stride-1 conv into the 3 input channels. With the channels
  // innermost no axis took a vector (5% of the FMA peak in `kiln bench sweep`); with the pixels innermost
  // and one stored padded copy of the output gradient (no lane-by-lane masks) the width does.
  const DeviceSpec& spec = get_device(host()).spec();
  Tensor x = Tensor::rand({4, 3, 64, 64}).realize(), w = Tensor::rand({16, 3, 7, 7}).realize(), g = Tensor::rand({4, 16, 32, 32}).realize();
  Tensor xi = x.detach();
  xi.requires_grad_();
  (xi.conv2d(w, std::nullopt, {2, 2}, {3, 3}) * g).sum().backward();
  Schedule dx = Tensor::schedule({*xi.grad()});
  int phases = 0, padded_copies = 0;
  for (const ScheduleItem& item : dx.items) {
    std::string name = detail::kernel_name(item.ast);
    padded_copies += name.rfind("E_4_16_", 0) == 0;
    if (name.rfind("r_4_3_32_32_16_", 0) != 0) continue;  // (n, c, h, w | k, kh, kw)
    std::vector<Opt> o = heuristic_opts(item.ast, spec);
    ++phases;
    INFO(name << ": " << to_string(o));
    if (spec.vector_bytes > 0) CHECK(std::count(o.begin(), o.end(), Opt{OptOp::UPCAST, 3, spec.vector_bytes / 4}) == 1);  // the width
    CHECK(std::count(o.begin(), o.end(), Opt{OptOp::UPCAST, 1, 3}) == 1);  // the 3 channels as rows
    expect_close(run_kernel(item, host(), nullptr), run_kernel(item, oracle(), nullptr));
  }
  CHECK(phases == 4);
  CHECK(padded_copies == 1);
}


TEST_CASE("scalar copies whose loads gather across them unroll the reduce loop those loads walk contiguously, with REF's results", "[opts]") {
  // The weight gradient of a 1 -> 32 channel 3x3 conv (a UNet's first layer): dW[c, 0, kh, kw] sums
  // dy[n, c, h, w] * x[n, 0, h + kh - 1, w + kw - 1]. No output axis has every moving load contiguous;
  // the copies along the 32 channels read dy 1024 floats apart. 4 steps of the width per iteration
  // make each copy's loads one vector (r_3_3_32_16_32_32: 1.3-1.5 -> 0.6-0.8 ms).
  Tensor dy = Tensor::rand({16, 32, 32, 32}).realize(), x = Tensor::rand({16, 1, 32, 32}).realize();
  Tensor win = x.pad({{0, 0}, {0, 0}, {1, 1}, {1, 1}}).windows({3, 3}, {1, 1}, {1, 1});  // (16, 1, 32, 32, 3, 3)
  Tensor xv = win.permute({4, 5, 1, 0, 2, 3}).expand({3, 3, 32, 16, 32, 32});
  Tensor dv = dy.permute({1, 0, 2, 3}).reshape({1, 1, 32, 16, 32, 32}).expand({3, 3, 32, 16, 32, 32});
  Schedule s = Tensor::schedule({(xv * dv).sum({3, 4, 5})});
  REQUIRE(s.items.size() == 1);
  REQUIRE(detail::kernel_name(s.items[0].ast) == "r_3_3_32_16_32_32");
  std::vector<Opt> opts = heuristic_opts(s.items[0].ast, get_device(host()).spec());
  INFO(to_string(opts));
  CHECK(std::count(opts.begin(), opts.end(), Opt{OptOp::UNROLL, 5, 4}) == 1);
  expect_close(run_kernel(s.items[0], host(), nullptr), run_kernel(s.items[0], oracle(), nullptr));
}

TEST_CASE("a long reduction's vector axis that the lanes do not divide is padded to full vectors, with REF's results", "[opts]") {
  // (8, 4096) x (4096, 200): 200 columns make 8-lane vectors; padded to 224, two 16-lane vectors (an
  // LSTM LM's decoder gradient, (700, 10000) x (10000, 200): 57 -> 101 GFLOP/s). A 1000-long sum is not
  // padded: its masked stores cost more than the wider FMAs save.
  const DeviceSpec& spec = get_device(host()).spec();
  Tensor b = Tensor::rand({4096, 200}).realize(), a = Tensor::rand({8, 4096}).realize();
  Schedule s = Tensor::schedule({a.matmul(b)});
  REQUIRE(s.items.size() == 1);
  std::vector<Opt> opts = heuristic_opts(s.items[0].ast, spec);
  INFO(to_string(opts));
  int64_t lanes = std::clamp<int64_t>(spec.vector_bytes / 4, 2, 16);  // float32 lanes of a register
  REQUIRE(!opts.empty());
  if (200 % lanes != 0) {  // AVX-512: 16 lanes; AVX2's 8 divide 200 and need no padding
    CHECK(opts[0].op == OptOp::PADTO);
    CHECK(opts[0].amount == 2 * lanes);
  }
  expect_close(run_kernel(s.items[0], host(), nullptr), run_kernel(s.items[0], oracle(), nullptr));
  Tensor shorter = Tensor::rand({8, 1000}).realize(), b1000 = Tensor::rand({1000, 200}).realize();
  Schedule t = Tensor::schedule({shorter.matmul(b1000)});
  REQUIRE(t.items.size() == 1);
  std::vector<Opt> short_opts = heuristic_opts(t.items[0].ast, spec);
  INFO(to_string(short_opts));
  CHECK(std::none_of(short_opts.begin(), short_opts.end(), [](const Opt& o) { return o.op == OptOp::PADTO; }));
}

}  // namespace
}  // namespace kiln
