// [gpu] The C-family GPU renderers (OpenCL C, CUDA C) and devices (OPENCL, CUDA), with hand-built
// linear programs that use what only GPU-style kernels hold (lower/lower.h): SPECIAL gidx/lidx launch
// indices, DEFINE_LOCAL shared memory, BARRIER, IF blocks. Each runs on every GPU-style device that is
// available here against an answer computed on the host, and is compiled with NVRTC where NVRTC is
// installed (CUDA C, without a GPU); tests that need what is missing say so and pass.
//
// KILN_CUDA_COMPILE_ONLY=1 (tests/CMakeLists.txt: "conformance kernels compile with NVRTC"): every kernel
// the run lowers for its devices is also lowered for a CUDA DeviceSpec and compiled by NVRTC, so the
// conformance suite certifies the CUDA renderer's output compiles even where no GPU runs it; a kernel
// that does not compile fails the test that made it with NVRTC's log. Without NVRTC the run is skipped
// (exit 4) with the reason.
#define CATCH_CONFIG_EXTERNAL_INTERFACES  // the listener below
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <set>
#include <vector>

#include "devices/cuda.h"
#include "devices/device.h"
#include "frontend/realize.h"
#include "frontend/tensor.h"
#include "helpers.h"
#include "lower/lower.h"
#include "lower/renderers/cstyle.h"
#include "uop/config.h"
#include "uop/half.h"

using namespace kiln;

namespace {

// --- building linear programs by hand -----------------------------------------------------------

UOpPtr global(int64_t slot, DType element) { return UOp::make(Op::DEFINE_GLOBAL, element.ptr(), {}, slot); }
UOpPtr shared(int64_t slot, DType element, int64_t count) {
  return UOp::make(Op::DEFINE_LOCAL, element.ptr(AddrSpace::Local), {const_int(count)}, slot);
}
UOpPtr special(const char* name, int64_t size) { return UOp::make(Op::SPECIAL, dtypes::int32, {const_int(size)}, std::string(name)); }
UOpPtr index(const UOpPtr& buffer, const UOpPtr& i) { return UOp::make(Op::INDEX, buffer->dtype, {buffer, i}); }
UOpPtr load(const UOpPtr& address) { return UOp::make(Op::LOAD, address->dtype.deref(), {address}); }
// A load that reads `address` only where `gate` holds (else 0): distinct per gate, so two reads of one
// shared element on either side of a barrier are two nodes.
UOpPtr gated_load(const UOpPtr& address, const UOpPtr& gate) {
  return UOp::make(Op::LOAD, address->dtype.deref(), {address, const_of(address->dtype.deref(), 0.0), gate});
}
UOpPtr store(const UOpPtr& address, const UOpPtr& value) { return UOp::make(Op::STORE, dtypes::void_, {address, value}); }
UOpPtr barrier(const UOpPtr& store) { return UOp::make(Op::BARRIER, dtypes::void_, {store}); }
UOpPtr if_block(const UOpPtr& cond) { return UOp::make(Op::IF, dtypes::void_, {cond}); }
UOpPtr end_if(const UOpPtr& block) { return UOp::make(Op::ENDIF, dtypes::void_, {block}); }
UOpPtr end(const UOpPtr& r) { return UOp::make(Op::END, dtypes::void_, {r}); }

// A linear program in statement order: emit() appends a node after the sources it needs (constants
// are inlined by the renderers, so they need no place).
struct Linear {
  std::vector<UOpPtr> nodes;
  std::set<const UOp*> placed;
  const UOpPtr& emit(const UOpPtr& u) {
    if (placed.count(u.get())) return u;
    for (const UOpPtr& s : u->src)
      if (u->op != Op::ENDIF && u->op != Op::BARRIER && u->op != Op::END) emit(s);
    if (u->op != Op::CONST) nodes.push_back(u);
    placed.insert(u.get());
    return u;
  }
};

// One program and what it needs to run: its launch, its vars and its buffers' bytes.
struct HandKernel {
  std::string name;
  std::vector<UOpPtr> linear;
  LaunchDims dims;
  std::vector<UOpPtr> vars;
  std::vector<int64_t> var_values;
  std::vector<std::vector<uint8_t>> buffers;  // initial contents; buffer 0 is the output
  std::vector<uint8_t> expected;              // buffer 0 afterwards
};

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// A workgroup tree-sum: each of `groups` workgroups of `local` work-items copies its slice into shared
// memory, halves the live range after every barrier, and work-item 0 stores the slice's sum.
HandKernel tree_sum(int64_t groups, int64_t local) {
  Linear p;
  UOpPtr out = p.emit(global(0, dtypes::float32)), in = p.emit(global(1, dtypes::float32));
  UOpPtr g = p.emit(special("gidx0", groups)), l = p.emit(special("lidx0", local));
  UOpPtr temp = p.emit(shared(0, dtypes::float32, local));
  p.emit(barrier(p.emit(store(index(temp, l), load(index(in, g * local + l))))));
  for (int64_t s = local / 2; s >= 1; s /= 2) {
    UOpPtr live = lt(l, s), block = p.emit(if_block(live));
    UOpPtr sum = gated_load(index(temp, l), live) + gated_load(index(temp, l + s), live);
    UOpPtr st = p.emit(store(index(temp, l), sum));
    p.emit(end_if(block));
    p.emit(barrier(st));
  }
  UOpPtr first = eq(l, const_int(0)), block = p.emit(if_block(first));
  p.emit(store(index(out, g), gated_load(index(temp, const_int(0)), first)));
  p.emit(end_if(block));

  std::vector<float> input(static_cast<size_t>(groups * local)), sums(static_cast<size_t>(groups), 0.0f);
  for (size_t i = 0; i < input.size(); ++i) {
    input[i] = float(int64_t(i * 7919 % 1000) - 500);  // integers: every summation order is exact
    sums[i / static_cast<size_t>(local)] += input[i];
  }
  HandKernel k{"tree_sum", p.nodes, LaunchDims{{groups, 1, 1}, {local, 1, 1}}, {}, {},
               {bytes_of(std::vector<float>(sums.size(), -1.0f)), bytes_of(input)}, bytes_of(sums)};
  return k;
}

// Every launch index of a 3-D launch: out[z][y][x] = z * 1e6 + y * 1e3 + x, each coordinate made of
// its workgroup and work-item ids (gidx<d> * local[d] + lidx<d>).
HandKernel coordinates(std::array<int64_t, 3> groups, std::array<int64_t, 3> local) {
  Linear p;
  UOpPtr out = p.emit(global(0, dtypes::int32));
  std::array<UOpPtr, 3> pos;
  std::array<int64_t, 3> size{};
  for (int d = 0; d < 3; ++d) {
    std::string gname = cat("gidx", d), lname = cat("lidx", d);
    UOpPtr g = p.emit(special(gname.c_str(), groups[d])), l = p.emit(special(lname.c_str(), local[d]));
    pos[d] = g * local[d] + l;
    size[d] = groups[d] * local[d];
  }
  UOpPtr value = pos[2] * 1000000 + pos[1] * 1000 + pos[0];
  p.emit(store(index(out, (pos[2] * size[1] + pos[1]) * size[0] + pos[0]), value));
  std::vector<int32_t> want(static_cast<size_t>(size[0] * size[1] * size[2]));
  for (int64_t z = 0; z < size[2]; ++z)
    for (int64_t y = 0; y < size[1]; ++y)
      for (int64_t x = 0; x < size[0]; ++x) want[size_t((z * size[1] + y) * size[0] + x)] = int32_t(z * 1000000 + y * 1000 + x);
  return HandKernel{"coordinates", p.nodes, LaunchDims{groups, local}, {}, {}, {bytes_of(std::vector<int32_t>(want.size(), -1))},
                    bytes_of(want)};
}

// float16 and bfloat16 stored narrow, computed in float: out = narrow(wide(h) * 2.5 + wide(b)), in a
// plain loop (a GPU-style kernel may have no SPECIAL at all: one work-item runs it).
HandKernel narrow_floats(DType narrow) {
  const int64_t n = 64;
  Linear p;
  UOpPtr out = p.emit(global(0, narrow)), a = p.emit(global(1, narrow)), b = p.emit(global(2, narrow));
  UOpPtr r = p.emit(range(0, const_int(n)));
  UOpPtr x = cast(load(index(a, r)), dtypes::float32), y = cast(load(index(b, r)), dtypes::float32);
  p.emit(store(index(out, r), cast(x * const_of(dtypes::float32, 2.5) + y, narrow)));
  p.emit(end(r));
  bool half = narrow.scalar == ScalarType::Float16;
  auto to_bits = [&](float f) { return half ? float_to_half_bits(f) : float_to_bf16_bits(f); };
  auto to_float = [&](uint16_t h) { return half ? half_bits_to_float(h) : bf16_bits_to_float(h); };
  std::vector<uint16_t> av(n), bv(n), want(n);
  for (int64_t i = 0; i < n; ++i) {
    av[size_t(i)] = to_bits(float(i - 32) * 0.37f);
    bv[size_t(i)] = to_bits(i == 5 ? 1e-7f : float(i) * 1.25f);  // a subnormal half among them
    want[size_t(i)] = to_bits(to_float(av[size_t(i)]) * 2.5f + to_float(bv[size_t(i)]));
  }
  return HandKernel{half ? "narrow_f16" : "narrow_bf16", p.nodes, LaunchDims{}, {}, {},
                    {bytes_of(std::vector<uint16_t>(n, 0)), bytes_of(av), bytes_of(bv)}, bytes_of(want)};
}

// Vars come after the buffers: out[i] = var0 * i + var1 (int64), and a BITCAST of float bits.
HandKernel vars_and_bitcast() {
  const int64_t n = 16;
  Linear p;
  UOpPtr out = p.emit(global(0, dtypes::int64)), bits = p.emit(global(1, dtypes::uint32)), in = p.emit(global(2, dtypes::float32));
  UOpPtr scale = p.emit(var("scale", -1000, 1000, dtypes::int64)), offset = p.emit(var("offset", -1000, 1000, dtypes::int64));
  UOpPtr r = p.emit(range(0, const_int(n)));
  p.emit(store(index(out, r), scale * cast(r, dtypes::int64) + offset));
  p.emit(store(index(bits, r), UOp::make(Op::BITCAST, dtypes::uint32, {load(index(in, r))})));
  p.emit(end(r));
  std::vector<int64_t> want(n);
  for (int64_t i = 0; i < n; ++i) want[size_t(i)] = -7 * i + 3;
  std::vector<float> floats(n);
  for (int64_t i = 0; i < n; ++i) floats[size_t(i)] = float(i) * -0.5f;
  return HandKernel{"vars_and_bitcast", p.nodes, LaunchDims{}, {scale, offset}, {-7, 3},
                    {bytes_of(std::vector<int64_t>(n, 0)), bytes_of(std::vector<uint32_t>(n, 0)), bytes_of(floats)}, bytes_of(want)};
}

std::vector<HandKernel> hand_kernels() {
  return {tree_sum(5, 64), tree_sum(3, 256), coordinates({3, 2, 2}, {4, 3, 2}), narrow_floats(dtypes::float16),
          narrow_floats(dtypes::bfloat16), vars_and_bitcast()};
}

size_t num_buffers(const HandKernel& k) { return k.buffers.size(); }

const CStyleLanguage& language_of(const DeviceSpec& spec) {
  return spec.lang == Language::CUDA ? cuda_language() : opencl_language();
}

// The GPU-style devices available here (OPENCL, CUDA), each with its reason when not.
std::vector<Device*> gpu_devices() {
  std::vector<Device*> out;
  for (const DeviceStatus& s : probe_devices()) {
    if (s.name != "OPENCL" && s.name != "CUDA") continue;
    if (!s.available) {
      static std::set<std::string> told;  // once per device and run
      if (told.insert(s.name).second) WARN(s.name << " is not available here, so its [gpu] runs are skipped: " << s.reason);
      continue;
    }
    out.push_back(&get_device(s.name));
  }
  return out;
}

// Runs the kernel on the device; returns buffer 0's bytes afterwards.
std::vector<uint8_t> run_on(Device& device, const HandKernel& k) {
  std::string source = render_cstyle(language_of(device.spec()), k.name, k.linear, num_buffers(k), k.vars);
  INFO(source);
  std::vector<RawBuffer> bufs;
  for (const auto& b : k.buffers) {
    bufs.push_back(device.alloc(b.size()));
    device.copy_in(bufs.back(), b.data(), b.size());
  }
  device.load(device.compile(source, k.name))->launch(bufs, k.var_values, k.dims, false);
  std::vector<uint8_t> out(k.buffers[0].size());
  device.copy_out(out.data(), bufs[0], out.size());
  for (RawBuffer b : bufs) device.free(b);
  return out;
}

}  // namespace

// --- the renderers ------------------------------------------------------------------------------

TEST_CASE("gpu renderers: launch indices, shared memory and barriers in each language's spelling", "[gpu]") {
  HandKernel k = tree_sum(5, 64);
  std::string cl = render_cstyle(opencl_language(), k.name, k.linear, 2, {});
  CHECK_THAT(cl, Catch::Contains("__kernel void tree_sum(__global float* restrict data0, __global float* restrict data1)"));
  CHECK_THAT(cl, Catch::Contains("get_group_id(0)"));
  CHECK_THAT(cl, Catch::Contains("get_local_id(0)"));
  CHECK_THAT(cl, Catch::Contains("__local float temp0[64];"));
  CHECK_THAT(cl, Catch::Contains("barrier(CLK_LOCAL_MEM_FENCE);"));
  std::string cu = render_cstyle(cuda_language(), k.name, k.linear, 2, {});
  CHECK_THAT(cu, Catch::Contains("extern \"C\" __global__ void tree_sum(float* __restrict__ data0, float* __restrict__ data1)"));
  CHECK_THAT(cu, Catch::Contains("blockIdx.x"));
  CHECK_THAT(cu, Catch::Contains("threadIdx.x"));
  CHECK_THAT(cu, Catch::Contains("__shared__ float temp0[64];"));
  CHECK_THAT(cu, Catch::Contains("__syncthreads();"));
  // The shared array is declared once, at the top of the body (OpenCL allows no __local inside blocks).
  CHECK(cl.find("__local") > cl.find("{"));
  CHECK(cl.find("__local") < cl.find("get_group_id"));
}

TEST_CASE("gpu renderers: bool buffers are uchar in OpenCL, 64-bit literals fit each language", "[gpu]") {
  Linear p;
  UOpPtr out = p.emit(global(0, dtypes::bool_)), in = p.emit(global(1, dtypes::int64));
  UOpPtr r = p.emit(range(0, const_int(4)));
  p.emit(store(index(out, r), lt(load(index(in, r)), const_of(dtypes::int64, std::numeric_limits<int64_t>::min() + 1))));
  p.emit(end(r));
  std::string cl = render_cstyle(opencl_language(), "cmp", p.nodes, 2, {});
  CHECK_THAT(cl, Catch::Contains("__global uchar* restrict data0"));
  CHECK_THAT(cl, Catch::Contains("__global long* restrict data1"));
  CHECK_THAT(cl, Catch::Contains("-9223372036854775807l)"));
  std::string cu = render_cstyle(cuda_language(), "cmp", p.nodes, 2, {});
  CHECK_THAT(cu, Catch::Contains("bool* __restrict__ data0"));
  CHECK_THAT(cu, Catch::Contains("-9223372036854775807ll)"));
}

TEST_CASE("gpu renderers: the C renderer keeps its CPU launch loop and refuses GPU-only ops", "[gpu]") {
  HandKernel k = tree_sum(2, 4);
  CHECK_THROWS_WITH(render_cstyle(c_language(), k.name, k.linear, 2, {}), Catch::Contains("gidx0"));
}

// --- running them -------------------------------------------------------------------------------

TEST_CASE("gpu devices: hand-built kernels with launch indices, shared memory and barriers match the host", "[gpu]") {
  for (Device* device : gpu_devices()) {
    for (const HandKernel& k : hand_kernels()) {
      INFO(device->spec().name << ": kernel " << k.name);
      CHECK(run_on(*device, k) == k.expected);
    }
  }
}

TEST_CASE("gpu devices: long reductions take the shared-memory path (GROUPTOP) and match the host", "[gpu]") {
  for (Device* device : gpu_devices()) {
    const std::string name = device->spec().name;
    INFO(name);
    for (int64_t n : {int64_t{8192}, int64_t{100000}}) {
      std::vector<float> values(size_t(3 * n));
      std::vector<float> sums(3, 0.0f), maxes(3, -1e30f);
      for (size_t i = 0; i < values.size(); ++i) {
        values[i] = float(int64_t(i * 7919 % 2001) - 1000);  // integers: every summation order is exact
        sums[i / size_t(n)] += values[i];
        maxes[i / size_t(n)] = std::max(maxes[i / size_t(n)], values[i]);
      }
      Tensor a = Tensor::from_vector(values, {3, n}, name);
      Tensor s = a.sum({1}), m = a.max({1});
      bool shared = false;
      for (const ScheduleItem& item : schedule_uops({s.uop()}).items) {
        if (item.kind != ScheduleItem::Kind::Kernel) continue;
        for (const UOpPtr& u : lower_kernel(item.ast, device->spec()).linear) shared |= u->op == Op::DEFINE_LOCAL;
      }
      CHECK(shared);
      CHECK(s.to_vector<float>() == sums);
      CHECK(m.to_vector<float>() == maxes);
    }
  }
}

TEST_CASE("gpu devices: the spec comes from the driver and asks for no vector types", "[gpu]") {
  for (Device* device : gpu_devices()) {
    const DeviceSpec& spec = device->spec();
    INFO(spec.name << ": " << spec.arch << "; " << spec.compiler);
    CHECK(spec.max_local > 0);
    for (int d = 0; d < 3; ++d) {
      CHECK(spec.max_local_dims[d] >= 1);
      CHECK(spec.max_global_dims[d] >= 1);
    }
    CHECK(spec.shared_bytes > 0);
    CHECK(spec.max_buffer_bytes > 0);
    CHECK(spec.vector_bytes == 0);
    CHECK(spec.threads == 1);
    CHECK_FALSE(spec.compiler.empty());
  }
}

TEST_CASE("gpu devices: a kernel that does not compile names the device and kernel and has the compiler log", "[gpu]") {
  for (Device* device : gpu_devices()) {
    std::string name = device->spec().name;
    std::string source = device->spec().lang == Language::CUDA
                             ? "extern \"C\" __global__ void broken(float* out) { out[0] = undeclared_thing; }\n"
                             : "__kernel void broken(__global float* out) { out[0] = undeclared_thing; }\n";
    try {
      device->compile(source, "broken");
      FAIL("compiled");
    } catch (const CompileError& e) {
      CHECK(e.device == name);
      CHECK(e.kernel == "broken");
      CHECK_THAT(e.log, Catch::Contains("undeclared_thing"));
      CHECK_THAT(std::string(e.what()), Catch::Contains(name) && Catch::Contains("broken"));
    }
  }
}

TEST_CASE("gpu devices: an allocation beyond the device's limit names its size and the limit", "[gpu]") {
  for (Device* device : gpu_devices()) {
    size_t too_big = size_t(device->spec().max_buffer_bytes) + 1;
    try {
      device->alloc(too_big);
      FAIL("allocated");
    } catch (const OutOfMemory& e) {
      CHECK_THAT(std::string(e.what()), Catch::Contains(device->spec().name) && Catch::Contains(std::to_string(too_big)) &&
                                            Catch::Contains(std::to_string(device->spec().max_buffer_bytes)));
    }
    RawBuffer fine = device->alloc(64);  // the device still works
    CHECK(fine.handle != nullptr);
    device->free(fine);
  }
}

TEST_CASE("gpu devices: compiled programs are cached on disk, and a corrupt entry is compiled again", "[gpu]") {
  for (Device* device : gpu_devices()) {
    test::TempDir dir("kiln_gpu_cache");
    std::string saved = config().cache_dir;
    config().cache_dir = dir.path.string();
    HandKernel k = coordinates({2, 1, 1}, {2, 1, 1});
    std::string source = render_cstyle(language_of(device->spec()), k.name, k.linear, 1, {});
    Binary first = device->compile(source, k.name);
    std::string kind = device->spec().lang == Language::CUDA ? "cuda" : "opencl";
    std::vector<std::filesystem::path> entries;
    for (const auto& e : std::filesystem::directory_iterator(dir.path / kind)) entries.push_back(e.path());
    REQUIRE(entries.size() == 1);
    CHECK(device->compile(source, k.name).data == first.data);  // from the cache
    {
      std::ofstream corrupt(entries[0], std::ios::binary | std::ios::trunc);
      corrupt << "not a program";
    }
    CHECK(device->compile(source, k.name).data == first.data);  // compiled again
    CHECK(run_on(*device, k) == k.expected);
    config().cache_dir = saved;
  }
}

// --- copies between devices -----------------------------------------------------------------------

TEST_CASE("to(device) copies between every pair of available devices, through the host", "[gpu]") {
  std::vector<std::string> names;
  for (const DeviceStatus& s : probe_devices())
    if (s.available) names.push_back(s.name);
  std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f};
  for (const std::string& from : names) {
    for (const std::string& to : names) {
      INFO(from << " -> " << to);
      Tensor a = Tensor::from_vector(values, {2, 3}, from);
      Tensor b = (a * 2.0f).to(to) + 1.0f;  // computed on `from`, copied, computed on `to`
      CHECK(b.device() == to);
      std::vector<float> got = b.to_vector<float>();
      REQUIRE(got.size() == values.size());
      for (size_t i = 0; i < values.size(); ++i) CHECK(got[i] == values[i] * 2.0f + 1.0f);
    }
  }
}

// --- CUDA without a GPU: NVRTC ------------------------------------------------------------------

TEST_CASE("cuda: the rendered hand-built kernels compile with NVRTC", "[gpu]") {
  const NvrtcStatus& nvrtc = nvrtc_status();
  if (!nvrtc.available) {
    WARN("skipped: " << nvrtc.reason);
    return;
  }
  std::string arch = cuda_compile_only_spec().arch;
  for (const HandKernel& k : hand_kernels()) {
    std::string source = render_cstyle(cuda_language(), k.name, k.linear, num_buffers(k), k.vars);
    INFO(source);
    CHECK_FALSE(nvrtc_compile(source, k.name, arch).empty());
  }
}

TEST_CASE("cuda: a kernel NVRTC rejects is a CompileError with NVRTC's log", "[gpu]") {
  const NvrtcStatus& nvrtc = nvrtc_status();
  if (!nvrtc.available) {
    WARN("skipped: " << nvrtc.reason);
    return;
  }
  try {
    nvrtc_compile("extern \"C\" __global__ void broken(float* out) { out[0] = undeclared_thing; }\n", "broken",
                  cuda_compile_only_spec().arch);
    FAIL("compiled");
  } catch (const CompileError& e) {
    CHECK(e.device == "CUDA");
    CHECK(e.kernel == "broken");
    CHECK_THAT(e.log, Catch::Contains("undeclared_thing"));
  }
}

TEST_CASE("cuda: without libcuda.so.1 the device is unavailable and says why", "[gpu]") {
  for (const DeviceStatus& s : probe_devices()) {
    if (s.name != "CUDA" || s.available) continue;
    CHECK_FALSE(s.reason.empty());
    CHECK_THROWS_WITH(get_device("CUDA"), Catch::Contains("CUDA") && Catch::Contains(s.reason));
  }
}

// --- KILN_CUDA_COMPILE_ONLY=1: every kernel of the run through NVRTC too -------------------------

namespace {

class NvrtcEveryKernel : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;

  void testRunStarting(const Catch::TestRunInfo& info) override {
    TestEventListenerBase::testRunStarting(info);
    if (!config().cuda_compile_only) return;
    const NvrtcStatus& nvrtc = nvrtc_status();
    if (!nvrtc.available) {
      std::cout << "SKIPPED: KILN_CUDA_COMPILE_ONLY=1, but " << nvrtc.reason << "\n";
      std::exit(4);  // CTest's SKIP_RETURN_CODE
    }
    active_ = true;
    spec_ = cuda_compile_only_spec();
    set_kernel_observer([this](const UOpPtr& ast) {
      if (!seen_.insert(ast.get()).second) return;
      kept_.push_back(ast);  // keeps the address unique for the run
      LoweredKernel k = lower_kernel(ast, spec_);
      nvrtc_compile(k.source, k.name, spec_.arch);  // CompileError: the realize, and so the test, fails
      ++kernels_;
    });
  }

  void testRunEnded(const Catch::TestRunStats& stats) override {
    if (active_) {
      set_kernel_observer(nullptr);
      std::cout << "KILN_CUDA_COMPILE_ONLY: " << kernels_ << " kernels of this run compiled with NVRTC "
                << nvrtc_status().version << " for " << spec_.arch << " (" << nvrtc_compiles()
                << " NVRTC runs, the rest from the cache)\n";
    }
    TestEventListenerBase::testRunEnded(stats);
  }

 private:
  bool active_ = false;
  DeviceSpec spec_;
  std::set<const UOp*> seen_;
  std::vector<UOpPtr> kept_;
  size_t kernels_ = 0;
};

}  // namespace

CATCH_REGISTER_LISTENER(NvrtcEveryKernel)
