// The device layer on the CLANG device: hand-written C kernels that follow the ABI in devices/host.h,
// the compile cache, the buffer cache, the registry, and the errors each of them reports.
#include <catch2/catch.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <thread>
#include <vector>

#include "devices/cpu.h"
#include "devices/device.h"
#include "uop/config.h"
#include "uop/thread_pool.h"

using namespace kiln;

namespace {

const char* kAddSource = R"(#include <stdint.h>
void add_f32(void* const* bufs, const int64_t* vars, int64_t gid_begin, int64_t gid_end) {
  float* c = bufs[0];
  const float* a = bufs[1];
  const float* b = bufs[2];
  for (int64_t gid = gid_begin; gid < gid_end; ++gid) c[gid] = a[gid] + b[gid];
}
)";

// out[gid] = gid_begin + 1 shows which call computed each gid (0 = never computed); visits[gid] counts
// how often. Chunks are disjoint, so the plain increment is not a race unless a gid is computed twice.
const char* kChunkSource = R"(#include <stdint.h>
void chunk_of(void* const* bufs, const int64_t* vars, int64_t gid_begin, int64_t gid_end) {
  int64_t* out = bufs[0];
  int32_t* visits = bufs[1];
  for (int64_t gid = gid_begin; gid < gid_end; ++gid) {
    out[gid] = gid_begin + 1;
    visits[gid] += 1;
  }
}
)";

const char* kVarsSource = R"(#include <stdint.h>
void affine(void* const* bufs, const int64_t* vars, int64_t gid_begin, int64_t gid_end) {
  int64_t* out = bufs[0];
  for (int64_t gid = gid_begin; gid < gid_end; ++gid) out[gid] = vars[0] * gid + vars[1];
}
)";

// Under -ffast-math, x != x folds to 0 and inf arithmetic is undefined; kiln's flags must keep IEEE.
const char* kIeeeSource = R"(#include <stdint.h>
void ieee(void* const* bufs, const int64_t* vars, int64_t gid_begin, int64_t gid_end) {
  float* out = bufs[0];
  const float* x = bufs[1];
  for (int64_t gid = gid_begin; gid < gid_end; ++gid) out[gid] = (x[gid] != x[gid]) ? -1.0f : x[gid] * 2.0f;
}
)";

// The C compiler of the host kit: CLANG is always it (the CPU device may compile LLVM IR in process).
Device& cpu() { return get_device("CLANG"); }

LaunchDims dims(int64_t n) { return LaunchDims{{n, 1, 1}, {1, 1, 1}}; }

std::unique_ptr<Program> build(Device& device, const std::string& source, const std::string& name) {
  return device.load(device.compile(source, name));
}

// A host vector mirrored in a device buffer, freed when it goes out of scope.
template <typename T>
struct DeviceVector {
  Device& device;
  std::vector<T> host;
  RawBuffer buffer;
  DeviceVector(Device& d, std::vector<T> values) : device(d), host(std::move(values)), buffer(d.alloc(bytes())) {
    device.copy_in(buffer, host.data(), bytes());
  }
  ~DeviceVector() { device.free(buffer); }
  size_t bytes() const { return host.size() * sizeof(T); }
  std::vector<T> read() {
    std::vector<T> out(host.size());
    device.copy_out(out.data(), buffer, bytes());
    return out;
  }
};

// "" when equal, else where they first differ and both values there, for Catch to print.
template <typename T>
std::string mismatch(const std::vector<T>& got, const std::vector<T>& expected) {
  if (got.size() != expected.size()) return cat("got ", got.size(), " values, expected ", expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    if (!(got[i] == expected[i])) return cat("first mismatch at ", i, ": got ", got[i], ", expected ", expected[i]);
  return "";
}

// A fresh directory under /tmp, removed with everything in it at scope exit.
struct TempDir {
  std::string path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kiln-test-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

// Points config().cache_dir somewhere else for one test.
struct CacheDirOverride {
  std::string saved = config().cache_dir;
  explicit CacheDirOverride(const std::string& dir) { config().cache_dir = dir; }
  ~CacheDirOverride() { config().cache_dir = saved; }
};

// A source nobody compiled before: the compile cache cannot already hold it.
std::string unique_source(const std::string& source) {
  static std::atomic<int> counter{0};
  auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return cat(source, "// unique ", getpid(), "-", now, "-", counter++, "\n");
}

const std::vector<int64_t> kSizes = {1, 2, 3, 7, 1000, 4099, 100003};

}  // namespace

TEST_CASE("clang: the spec describes this machine and its compiler", "[device]") {
  const DeviceSpec& spec = cpu().spec();
  CHECK(spec.name == "CLANG");
  CHECK(spec.lang == Language::C);
  CHECK(spec.threads == int(std::max(1u, std::thread::hardware_concurrency())));
  CHECK(!spec.arch.empty());
  INFO(spec.compiler);
  CHECK((spec.compiler.find("clang") != std::string::npos || spec.compiler.find("gcc") != std::string::npos));
  CHECK(spec.compiler.find("-O2 -march=native") != std::string::npos);
  CHECK(spec.compiler.find("fast-math") == std::string::npos);
  CHECK(spec.max_global_dims == std::array<int64_t, 3>{INT64_MAX, 1, 1});
  CHECK(spec.max_local == 0);
}

TEST_CASE("clang: c = a + b is right at every size", "[device]") {
  std::unique_ptr<Program> add = build(cpu(), kAddSource, "add_f32");
  for (int64_t n : kSizes) {
    INFO("n = " << n);
    std::vector<float> a(n), b(n), expected(n);
    for (int64_t i = 0; i < n; ++i) {
      a[i] = float(i) * 0.5f - 3.0f;
      b[i] = float(i % 17) * 1.25f;
      expected[i] = a[i] + b[i];
    }
    DeviceVector<float> da(cpu(), a), db(cpu(), b), dc(cpu(), std::vector<float>(n, -7.0f));
    std::vector<RawBuffer> bufs = {dc.buffer, da.buffer, db.buffer};
    add->launch(bufs, {}, dims(n), false);
    std::vector<float> got = dc.read();
    CHECK(mismatch(got, expected) == "");
  }
}

TEST_CASE("clang: a launch computes every gid exactly once, in at most `threads` contiguous chunks", "[device]") {
  std::unique_ptr<Program> chunks = build(cpu(), kChunkSource, "chunk_of");
  int threads = cpu().spec().threads;
  for (int64_t n : kSizes) {
    INFO("n = " << n);
    DeviceVector<int64_t> out(cpu(), std::vector<int64_t>(n, 0));
    DeviceVector<int32_t> visits(cpu(), std::vector<int32_t>(n, 0));
    std::vector<RawBuffer> bufs = {out.buffer, visits.buffer};
    chunks->launch(bufs, {}, dims(n), false);
    std::vector<int32_t> counted = visits.read();
    CHECK(mismatch(counted, std::vector<int32_t>(n, 1)) == "");
    // Each call wrote its own gid_begin + 1: a chunk starts where the previous one ended.
    std::vector<int64_t> begins = out.read();
    std::set<int64_t> calls(begins.begin(), begins.end());
    CHECK(calls.size() <= size_t(std::min<int64_t>(n, threads)));
    CHECK(begins[0] == 1);
    for (int64_t i = 1; i < n; ++i)
      if (begins[i] != begins[i - 1]) REQUIRE(begins[i] == i + 1);
  }
}

TEST_CASE("clang: launches from pool workers and from several threads at once each run whole", "[device]") {
  std::unique_ptr<Program> chunks = build(cpu(), kChunkSource, "chunk_of");
  const int64_t n = 4099;
  const int launches = 6;
  std::vector<std::unique_ptr<DeviceVector<int64_t>>> outs;
  std::vector<std::unique_ptr<DeviceVector<int32_t>>> visits;
  for (int i = 0; i < launches; ++i) {
    outs.push_back(std::make_unique<DeviceVector<int64_t>>(cpu(), std::vector<int64_t>(n, 0)));
    visits.push_back(std::make_unique<DeviceVector<int32_t>>(cpu(), std::vector<int32_t>(n, 0)));
  }
  auto run = [&](int64_t i) {
    std::vector<RawBuffer> bufs = {outs[i]->buffer, visits[i]->buffer};
    chunks->launch(bufs, {}, dims(n), false);
  };
  // Inside a pool task the launch runs inline on that worker (nested parallel_for), as one chunk.
  default_pool().parallel_for(0, launches / 2, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) run(i);
  });
  std::vector<std::thread> threads;
  for (int i = launches / 2; i < launches; ++i) threads.emplace_back(run, i);
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < launches; ++i) {
    INFO("launch " << i);
    std::vector<int32_t> counted = visits[i]->read();
    CHECK(mismatch(counted, std::vector<int32_t>(n, 1)) == "");
  }
}

TEST_CASE("clang: a kernel reads its variables", "[device]") {
  std::unique_ptr<Program> affine = build(cpu(), kVarsSource, "affine");
  for (int64_t n : {int64_t(1), int64_t(1000)}) {
    for (std::vector<int64_t> vars : {std::vector<int64_t>{3, -5}, std::vector<int64_t>{-1, int64_t(1) << 40}}) {
      INFO("n = " << n << ", vars = " << vars[0] << ", " << vars[1]);
      DeviceVector<int64_t> out(cpu(), std::vector<int64_t>(n, 0));
      std::vector<int64_t> expected(n);
      for (int64_t i = 0; i < n; ++i) expected[i] = vars[0] * i + vars[1];
      std::vector<RawBuffer> bufs = {out.buffer};
      affine->launch(bufs, vars, dims(n), false);
      std::vector<int64_t> got = out.read();
      CHECK(mismatch(got, expected) == "");
    }
  }
}

TEST_CASE("clang: kernels keep IEEE semantics: NaN is detected and inf propagates", "[device]") {
  std::unique_ptr<Program> ieee = build(cpu(), kIeeeSource, "ieee");
  float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  DeviceVector<float> x(cpu(), {1.5f, nan, inf, -inf, -0.0f}), out(cpu(), std::vector<float>(5, 0.0f));
  std::vector<RawBuffer> bufs = {out.buffer, x.buffer};
  ieee->launch(bufs, {}, dims(5), false);
  std::vector<float> got = out.read();
  CHECK(got[0] == 3.0f);
  CHECK(got[1] == -1.0f);
  CHECK(got[2] == inf);
  CHECK(got[3] == -inf);
  CHECK(std::signbit(got[4]));
}

TEST_CASE("clang: a timed launch returns its wall time, an untimed one 0", "[device]") {
  std::unique_ptr<Program> add = build(cpu(), kAddSource, "add_f32");
  const int64_t n = 100003;
  DeviceVector<float> a(cpu(), std::vector<float>(n, 1.0f)), c(cpu(), std::vector<float>(n, 0.0f));
  std::vector<RawBuffer> bufs = {c.buffer, a.buffer, a.buffer};
  double seconds = add->launch(bufs, {}, dims(n), true);
  CHECK(seconds > 0.0);
  CHECK(seconds < 10.0);
  CHECK(add->launch(bufs, {}, dims(n), false) == 0.0);
  CHECK(c.read()[n - 1] == 2.0f);
}

TEST_CASE("clang: launch dims other than {n,1,1} x {1,1,1} are refused", "[device]") {
  std::unique_ptr<Program> add = build(cpu(), kAddSource, "add_f32");
  DeviceVector<float> a(cpu(), std::vector<float>(8, 1.0f));
  std::vector<RawBuffer> bufs = {a.buffer, a.buffer, a.buffer};
  for (LaunchDims bad : {LaunchDims{{4, 2, 1}, {1, 1, 1}}, LaunchDims{{4, 1, 3}, {1, 1, 1}},
                         LaunchDims{{4, 1, 1}, {2, 1, 1}}, LaunchDims{{-1, 1, 1}, {1, 1, 1}}}) {
    INFO("global " << bad.global[0] << "," << bad.global[1] << "," << bad.global[2] << " local " << bad.local[0]);
    CHECK_THROWS_WITH(add->launch(bufs, {}, bad, false), Catch::Contains("add_f32") && Catch::Contains("outside the device's limits"));
  }
  add->launch(bufs, {}, dims(0), false);  // nothing to do is fine
  CHECK(a.read() == std::vector<float>(8, 1.0f));
}

TEST_CASE("clang: a second compile of the same source is served by the on-disk cache", "[device]") {
  TempDir dir;
  CacheDirOverride use(dir.path);
  std::string source = unique_source(kAddSource);
  size_t before = cpu_compiler_invocations();
  Binary first = cpu().compile(source, "add_f32");
  CHECK(cpu_compiler_invocations() == before + 1);
  Binary second = cpu().compile(source, "add_f32");
  CHECK(cpu_compiler_invocations() == before + 1);
  CHECK(second.data == first.data);
  CHECK(second.name == "add_f32");

  // Only the finished shared object is left in the cache: no sources, logs or temp files.
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path + "/compile"))
    files.push_back(entry.path().filename().string());
  REQUIRE(files.size() == 1);
  CHECK(files[0].size() == 16 + 3);
  CHECK(files[0].substr(16) == ".so");

  // The cached binary works like a fresh one.
  std::unique_ptr<Program> add = cpu().load(second);
  DeviceVector<float> a(cpu(), {1, 2, 3}), c(cpu(), {0, 0, 0});
  std::vector<RawBuffer> bufs = {c.buffer, a.buffer, a.buffer};
  add->launch(bufs, {}, dims(3), false);
  CHECK(c.read() == std::vector<float>{2, 4, 6});
}

TEST_CASE("clang: an empty cache directory compiles again, and a corrupt entry is replaced", "[device]") {
  std::string source = unique_source(kAddSource);
  size_t before = cpu_compiler_invocations();
  std::string cached;
  {
    TempDir dir;
    CacheDirOverride use(dir.path);
    cpu().compile(source, "add_f32");
  }
  {
    TempDir dir;
    CacheDirOverride use(dir.path);
    cpu().compile(source, "add_f32");
    CHECK(cpu_compiler_invocations() == before + 2);
    for (const auto& entry : std::filesystem::directory_iterator(dir.path + "/compile")) cached = entry.path();
    FILE* f = std::fopen(cached.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fputs("not a shared object", f);
    std::fclose(f);
    Binary again = cpu().compile(source, "add_f32");
    CHECK(cpu_compiler_invocations() == before + 3);
    CHECK(again.data.size() > 4);
    CHECK(std::filesystem::file_size(cached) == again.data.size());
  }
}

TEST_CASE("clang: concurrent compiles of one source all get a working binary", "[device]") {
  TempDir dir;
  CacheDirOverride use(dir.path);
  std::string source = unique_source(kVarsSource);
  std::vector<Binary> binaries(3);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < binaries.size(); ++i)
    threads.emplace_back([&, i] { binaries[i] = cpu().compile(source, "affine"); });
  for (std::thread& t : threads) t.join();
  for (const Binary& binary : binaries) {
    std::unique_ptr<Program> affine = cpu().load(binary);
    DeviceVector<int64_t> out(cpu(), {0, 0});
    std::vector<RawBuffer> bufs = {out.buffer};
    affine->launch(bufs, std::vector<int64_t>{10, 1}, dims(2), false);
    CHECK(out.read() == std::vector<int64_t>{1, 11});
  }
}

TEST_CASE("clang: a kernel that does not compile throws CompileError with the log and numbered source", "[device]") {
  std::string source = unique_source("#include <stdint.h>\nvoid broken(void* const* bufs) {\n  int x = ;\n}\n");
  try {
    cpu().compile(source, "broken");
    FAIL("compile of a syntax error did not throw");
  } catch (const CompileError& e) {
    std::string message = e.what();
    INFO(message);
    CHECK(e.kernel == "broken");
    CHECK(e.device == "CLANG");
    CHECK(e.source == source);
    CHECK(message.find("broken") != std::string::npos);
    CHECK(message.find("error") != std::string::npos);       // the compiler's complaint ...
    CHECK_THAT(e.log, Catch::Contains("expected expression"));  // ... in clang's and gcc's words
    CHECK(message.find("   3 |   int x = ;") != std::string::npos);  // the source, numbered
  }
}

TEST_CASE("clang: loading bytes that are not a kernel throws Error naming the kernel", "[device]") {
  Binary garbage{"nonsense", {'n', 'o', 't', ' ', 'E', 'L', 'F'}};
  CHECK_THROWS_AS(cpu().load(garbage), Error);
  CHECK_THROWS_WITH(cpu().load(garbage), Catch::Contains("nonsense") && Catch::Contains("dlopen"));
  CHECK_THROWS_WITH(cpu().load(Binary{"empty", {}}), Catch::Contains("empty"));

  Binary misnamed = cpu().compile(kAddSource, "add_f32");
  misnamed.name = "no_such_kernel";
  CHECK_THROWS_WITH(cpu().load(misnamed), Catch::Contains("no entry point named \"no_such_kernel\""));
}

TEST_CASE("clang: many programs loaded and unloaded stay distinct", "[device]") {
  // Each program keeps its own memfd; a path that glibc already knows would return the wrong library.
  Binary add = cpu().compile(kAddSource, "add_f32"), affine = cpu().compile(kVarsSource, "affine");
  for (int round = 0; round < 20; ++round) {
    std::unique_ptr<Program> p = cpu().load(round % 2 ? add : affine);
    std::unique_ptr<Program> q = cpu().load(round % 2 ? affine : add);
    DeviceVector<int64_t> out(cpu(), {0, 0});
    std::vector<RawBuffer> bufs = {out.buffer};
    (round % 2 ? q : p)->launch(bufs, std::vector<int64_t>{2, round}, dims(2), false);
    CHECK(out.read() == std::vector<int64_t>{round, 2 + round});
  }
}

TEST_CASE("device: a freed buffer is reused for the same size and counted while cached", "[device]") {
  std::unique_ptr<Device> device = make_cpu_device();
  RawBuffer a = device->alloc(1000);
  CHECK(device->cached_bytes() == 0);
  device->free(a);
  CHECK(device->cached_bytes() == 1000);
  RawBuffer other_size = device->alloc(1001);
  CHECK(other_size.handle != a.handle);
  CHECK(device->cached_bytes() == 1000);
  RawBuffer b = device->alloc(1000);
  CHECK(b.handle == a.handle);
  CHECK(b.bytes == 1000);
  CHECK(device->cached_bytes() == 0);
  device->free(b);
  device->free(other_size);
  device->free(RawBuffer{});  // a null buffer is ignored
  CHECK(device->cached_bytes() == 2001);
  device->release_cached();
  CHECK(device->cached_bytes() == 0);
}

TEST_CASE("device: buffers of every size class are 64-byte aligned and usable", "[device]") {
  std::unique_ptr<Device> device = make_cpu_device();
  for (size_t bytes : {size_t(0), size_t(1), size_t(63), size_t(4096), (size_t(2) << 20) - 1, size_t(2) << 20,
                       (size_t(5) << 20) + 3}) {
    INFO(bytes << " bytes");
    RawBuffer buffer = device->alloc(bytes);
    REQUIRE(buffer.handle != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(buffer.handle) % 64 == 0);
    CHECK(buffer.bytes == bytes);
    std::vector<uint8_t> pattern(bytes), back(bytes);
    for (size_t i = 0; i < bytes; ++i) pattern[i] = uint8_t(i * 7 + 1);
    device->copy_in(buffer, pattern.data(), bytes);
    device->copy_out(back.data(), buffer, bytes);
    CHECK(back == pattern);
    device->free(buffer);
  }
  device->release_cached();
}

TEST_CASE("device: copies larger than the buffer are refused on every device, and leave the buffer as it was", "[device]") {
  for (const DeviceStatus& status : probe_devices()) {
    if (!status.available) continue;
    INFO(status.name);
    Device& device = get_device(status.name);
    RawBuffer small = device.alloc(16);
    std::vector<uint8_t> host(32, 0xAB), before(16), after(16, 0xCD);
    for (size_t i = 0; i < 16; ++i) before[i] = uint8_t(i + 1);
    device.copy_in(small, before.data(), 16);
    CHECK_THROWS_WITH(device.copy_in(small, host.data(), 32),
                      Catch::Contains(status.name + ": copy_in") && Catch::Contains("32 bytes") && Catch::Contains("16 bytes"));
    CHECK_THROWS_WITH(device.copy_out(host.data(), small, 17), Catch::Contains(status.name + ": copy_out") && Catch::Contains("17 bytes"));
    CHECK(host == std::vector<uint8_t>(32, 0xAB));  // nothing was copied out
    device.copy_out(after.data(), small, 16);
    CHECK(after == before);
    device.free(small);
  }
}

TEST_CASE("device: an impossible allocation throws OutOfMemory naming the size, and the device still works", "[device]") {
  std::unique_ptr<Device> device = make_cpu_device();
  device->free(device->alloc(4096));
  CHECK(device->cached_bytes() == 4096);
  size_t absurd = size_t(1) << 60;
  CHECK_THROWS_AS(device->alloc(absurd), OutOfMemory);
  CHECK_THROWS_WITH(device->alloc(absurd), Catch::Contains("CPU") && Catch::Contains("1152921504606846976 bytes"));
  CHECK(device->cached_bytes() == 0);  // the retry released the cache first
  CHECK_THROWS_AS(device->alloc(SIZE_MAX), OutOfMemory);
  RawBuffer fine = device->alloc(4096);
  CHECK(fine.handle != nullptr);
  device->free(fine);
}

TEST_CASE("registry: CPU is registered, available and the default", "[device]") {
  CHECK(device_names().front() == "CPU");
  bool listed = false;
  for (const DeviceStatus& status : probe_devices()) {
    if (status.name != "CPU") continue;
    listed = true;
    CHECK(status.available);
    CHECK(status.reason.empty());
  }
  CHECK(listed);
  CHECK(&get_device("CPU") == &get_device("cpu"));  // opened once, any case
  std::string saved = config().device;
  config().device = "";
  CHECK(default_device_name() == "CPU");
  config().device = "CPU";
  CHECK(default_device_name() == "CPU");
  config().device = saved;
}

TEST_CASE("registry: an unknown device name is an Error listing the registered devices", "[device]") {
  CHECK_THROWS_WITH(get_device("NOPE"), Catch::Contains("\"NOPE\"") && Catch::Contains("CPU"));
  std::string saved = config().device;
  config().device = "NOPE";
  CHECK_THROWS_WITH(default_device_name(), Catch::Contains("\"NOPE\"") && Catch::Contains("CPU"));
  config().device = saved;
}

TEST_CASE("CompileError: the message names the device and kernel and numbers the source lines", "[device]") {
  CompileError e("GPU9", "E_4", "k.c:2:1: error: oops", "int a;\nint b\n");
  std::string message = e.what();
  CHECK(message.find("GPU9") != std::string::npos);
  CHECK(message.find("E_4") != std::string::npos);
  CHECK(message.find("k.c:2:1: error: oops\n") != std::string::npos);
  CHECK(message.find("   1 | int a;\n   2 | int b\n") != std::string::npos);
}
