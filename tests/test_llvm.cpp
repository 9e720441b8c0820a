// The in-process LLVM compiler of the host kit (devices/llvm_compiler.cpp): hand-written LLVM IR
// kernels with the ABI of devices/host.h, its errors, its JIT namespace (one symbol per kernel version),
// its on-disk cache, concurrent compiles, and the CPU device's fallback to the C compiler. The renderer
// itself is certified by the whole suite (the main run is on CPU) against the reference evaluator.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "devices/cpu.h"
#include "devices/host.h"
#include "frontend/realize.h"
#include "frontend/tensor.h"
#include "helpers.h"
#include "uop/config.h"

using namespace kiln;

namespace {

// The LLVM compiler on a host device of its own, whatever the CPU device uses; opened once.
Device& llvm_device() {
  static std::unique_ptr<Device> device = make_host_device("LLVMTEST", make_llvm_compiler("LLVMTEST"));
  return *device;
}

// c[i] = a[i] OP b[i] over [gid_begin, gid_end), named `name` (typed pointers: LLVM 14 IR).
std::string binary_kernel(const std::string& name, const std::string& op, const std::string& salt = "") {
  return cat("; ", salt, "\ndefine void @", name, R"((i8** %bufs, i64* %vars, i64 %gid_begin, i64 %gid_end) {
entry:
  %p0 = load i8*, i8** %bufs
  %c = bitcast i8* %p0 to float*
  %a1 = getelementptr i8*, i8** %bufs, i64 1
  %p1 = load i8*, i8** %a1
  %a = bitcast i8* %p1 to float*
  %a2 = getelementptr i8*, i8** %bufs, i64 2
  %p2 = load i8*, i8** %a2
  %b = bitcast i8* %p2 to float*
  br label %head
head:
  %i = phi i64 [ %gid_begin, %entry ], [ %next, %body ]
  %more = icmp slt i64 %i, %gid_end
  br i1 %more, label %body, label %exit
body:
  %pa = getelementptr float, float* %a, i64 %i
  %va = load float, float* %pa
  %pb = getelementptr float, float* %b, i64 %i
  %vb = load float, float* %pb
  %s = )", op, R"( float %va, %vb
  %pc = getelementptr float, float* %c, i64 %i
  store float %s, float* %pc
  %next = add i64 %i, 1
  br label %head
exit:
  ret void
}
)");
}

// out[i] = vars[0] * i + vars[1]; and out[i] = (x[i] != x[i]) ? -1 : x[i] * 2 (IEEE: NaN is seen, inf stays).
const char* kAffine = R"(define void @affine(i8** %bufs, i64* %vars, i64 %gid_begin, i64 %gid_end) {
entry:
  %p0 = load i8*, i8** %bufs
  %out = bitcast i8* %p0 to i64*
  %m = load i64, i64* %vars
  %va = getelementptr i64, i64* %vars, i64 1
  %k = load i64, i64* %va
  br label %head
head:
  %i = phi i64 [ %gid_begin, %entry ], [ %next, %body ]
  %more = icmp slt i64 %i, %gid_end
  br i1 %more, label %body, label %exit
body:
  %mi = mul i64 %m, %i
  %v = add i64 %mi, %k
  %po = getelementptr i64, i64* %out, i64 %i
  store i64 %v, i64* %po
  %next = add i64 %i, 1
  br label %head
exit:
  ret void
}
)";

const char* kIeee = R"(define void @ieee(i8** %bufs, i64* %vars, i64 %gid_begin, i64 %gid_end) {
entry:
  %p0 = load i8*, i8** %bufs
  %out = bitcast i8* %p0 to float*
  %a1 = getelementptr i8*, i8** %bufs, i64 1
  %p1 = load i8*, i8** %a1
  %x = bitcast i8* %p1 to float*
  br label %head
head:
  %i = phi i64 [ %gid_begin, %entry ], [ %next, %body ]
  %more = icmp slt i64 %i, %gid_end
  br i1 %more, label %body, label %exit
body:
  %px = getelementptr float, float* %x, i64 %i
  %v = load float, float* %px
  %nan = fcmp uno float %v, %v
  %twice = fmul float %v, 2.0
  %r = select i1 %nan, float -1.0, float %twice
  %po = getelementptr float, float* %out, i64 %i
  store float %r, float* %po
  %next = add i64 %i, 1
  br label %head
exit:
  ret void
}
)";

LaunchDims dims(int64_t n) { return LaunchDims{{n, 1, 1}, {1, 1, 1}}; }

// A source no cache has seen: a comment with this process and a counter.
std::string unique(const std::string& source) {
  static std::atomic<int> counter{0};
  return cat("; unique ", getpid(), "-", std::chrono::steady_clock::now().time_since_epoch().count(), "-", counter++, "\n", source);
}

struct CacheDir {
  test::TempDir dir{"kiln_llvm"};
  std::string saved = config().cache_dir;
  CacheDir() { config().cache_dir = dir.path.string(); }
  ~CacheDir() { config().cache_dir = saved; }
};

// Runs a c = a OP b program on n elements and returns c.
std::vector<float> run_binary(Device& d, Program& p, const std::vector<float>& a, const std::vector<float>& b) {
  size_t bytes = a.size() * sizeof(float);
  RawBuffer ra = d.alloc(bytes), rb = d.alloc(bytes), rc = d.alloc(bytes);
  d.copy_in(ra, a.data(), bytes);
  d.copy_in(rb, b.data(), bytes);
  std::vector<RawBuffer> bufs = {rc, ra, rb};
  p.launch(bufs, {}, dims(int64_t(a.size())), false);
  std::vector<float> c(a.size());
  d.copy_out(c.data(), rc, bytes);
  for (RawBuffer r : {ra, rb, rc}) d.free(r);
  return c;
}

}  // namespace

TEST_CASE("llvm: the CPU device compiles LLVM IR in process, and says which compiler it uses", "[device][llvm]") {
  const DeviceSpec& spec = get_device("CPU").spec();
  INFO(spec.compiler << " / " << spec.note);
  if (config().cpu_compiler == "c") {
    CHECK(spec.lang == Language::C);
    return;
  }
  // libLLVM 14 is a preinstalled package here and in CI (scripts/deps.sh): the fallback would be a regression.
  CHECK(spec.lang == Language::LLVM);
  CHECK(spec.note.empty());
  CHECK(spec.compiler.find("LLVM 14") != std::string::npos);
  CHECK(spec.arch == get_device("CLANG").spec().arch);  // the same name for the same machine
  CHECK(spec.vector_bytes == get_device("CLANG").spec().vector_bytes);

  // KILN_CPU_COMPILER=c: the C compiler, and the note says why.
  std::string saved = config().cpu_compiler;
  config().cpu_compiler = "c";
  std::unique_ptr<Device> c = make_cpu_device();
  config().cpu_compiler = saved;
  CHECK(c->spec().name == "CPU");
  CHECK(c->spec().lang == Language::C);
  CHECK_THAT(c->spec().note, Catch::Contains("KILN_CPU_COMPILER=c"));
}

TEST_CASE("llvm: hand-written IR kernels compute every gid once, read vars, and keep IEEE semantics", "[device][llvm]") {
  Device& d = llvm_device();
  std::unique_ptr<Program> add = d.load(d.compile(binary_kernel("add_f32", "fadd"), "add_f32"));
  for (int64_t n : {1, 2, 3, 7, 1000, 100003}) {
    std::vector<float> a(static_cast<size_t>(n)), b(a.size()), want(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = float(i) * 0.5f;
      b[i] = 3.0f - float(i % 7);
      want[i] = a[i] + b[i];
    }
    CHECK(run_binary(d, *add, a, b) == want);
  }

  std::unique_ptr<Program> affine = d.load(d.compile(kAffine, "affine"));
  RawBuffer out = d.alloc(5 * sizeof(int64_t));
  std::vector<RawBuffer> bufs = {out};
  affine->launch(bufs, std::vector<int64_t>{3, -4}, dims(5), false);
  std::vector<int64_t> got(5);
  d.copy_out(got.data(), out, 5 * sizeof(int64_t));
  d.free(out);
  CHECK(got == std::vector<int64_t>{-4, -1, 2, 5, 8});

  std::unique_ptr<Program> ieee = d.load(d.compile(kIeee, "ieee"));
  float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {1.5f, nan, inf, -inf, -0.0f}, y(5);
  RawBuffer rx = d.alloc(20), ry = d.alloc(20);
  d.copy_in(rx, x.data(), 20);
  bufs = {ry, rx};
  ieee->launch(bufs, {}, dims(5), false);
  d.copy_out(y.data(), ry, 20);
  d.free(rx);
  d.free(ry);
  CHECK(y[0] == 3.0f);
  CHECK(y[1] == -1.0f);
  CHECK(y[2] == inf);
  CHECK(y[3] == -inf);
  CHECK((y[4] == 0.0f && std::signbit(y[4])));
}

TEST_CASE("llvm: IR that does not parse or verify is a CompileError with the kernel, LLVM's message and the IR", "[device][llvm]") {
  Device& d = llvm_device();
  std::string broken = "define void @broken(i8** %bufs) {\nentry:\n  %x = add i32 1,\n  ret void\n}\n";
  try {
    d.compile(broken, "broken");
    FAIL("a parse error did not throw");
  } catch (const CompileError& e) {
    CHECK(e.device == "LLVMTEST");
    CHECK(e.kernel == "broken");
    CHECK(e.source == broken);
    CHECK_THAT(e.log, Catch::Contains("parse error"));
    CHECK_THAT(std::string(e.what()), Catch::Contains("   3 |   %x = add i32 1,"));
  }
  // Well-formed text that the verifier refuses: a value used before it is defined.
  std::string unverified = "define void @bad(i8** %bufs, i64* %vars, i64 %b, i64 %e) {\nentry:\n  %x = add i64 %y, 1\n  %y = add i64 %b, 1\n  ret void\n}\n";
  CHECK_THROWS_AS(d.compile(unverified, "bad"), CompileError);
  CHECK_THROWS_WITH(d.compile(unverified, "bad"), Catch::Contains("bad") && Catch::Contains("dominate"));
  // The entry point must be the kernel's name.
  CHECK_THROWS_WITH(d.compile(binary_kernel("other", "fadd"), "add_f32"), Catch::Contains("no function @add_f32"));
}

TEST_CASE("llvm: bytes that are not an object, or a name the object lacks, are an Error naming the kernel", "[device][llvm]") {
  Device& d = llvm_device();
  CHECK_THROWS_WITH(d.load(Binary{"nonsense", {'n', 'o', 't'}}), Catch::Contains("nonsense") && Catch::Contains("not an object file"));
  Binary good = d.compile(binary_kernel("add_f32", "fadd"), "add_f32");
  Binary misnamed{"no_such_kernel", good.data};
  CHECK_THROWS_WITH(d.load(misnamed), Catch::Contains("no entry point named \"no_such_kernel\""));
  // The device still works after a failed load.
  std::unique_ptr<Program> add = d.load(good);
  CHECK(run_binary(d, *add, {1, 2}, {3, 4}) == std::vector<float>{4, 6});
}

TEST_CASE("llvm: kernels of one name but different code live side by side, one object loaded twice shares its code", "[device][llvm]") {
  Device& d = llvm_device();
  // A search compiles many versions of one kernel name: each keeps its own code.
  Binary add = d.compile(binary_kernel("k", "fadd"), "k"), sub = d.compile(binary_kernel("k", "fsub"), "k");
  CHECK(add.name != sub.name);
  CHECK(add.name.rfind("k_", 0) == 0);
  std::vector<float> a = {5, 7}, b = {1, 2};
  for (int round = 0; round < 3; ++round) {  // loaded, dropped and loaded again: the symbols come and go
    std::unique_ptr<Program> p = d.load(add), q = d.load(sub), p2 = d.load(add);
    CHECK(run_binary(d, *p, a, b) == std::vector<float>{6, 9});
    CHECK(run_binary(d, *q, a, b) == std::vector<float>{4, 5});
    p.reset();  // p2 shares the code and still runs
    CHECK(run_binary(d, *p2, a, b) == std::vector<float>{6, 9});
  }
}

TEST_CASE("llvm: a compile is served by the on-disk cache the second time, and a corrupt entry is compiled again", "[device][llvm]") {
  Device& d = llvm_device();
  CacheDir cache;
  std::string source = unique(binary_kernel("add_f32", "fadd"));
  size_t before = llvm_compilations();
  Binary first = d.compile(source, "add_f32");
  CHECK(llvm_compilations() == before + 1);
  Binary second = d.compile(source, "add_f32");
  CHECK(llvm_compilations() == before + 1);
  CHECK(second.data == first.data);
  CHECK(second.name == first.name);
  // Corrupt every cached file: the next compile is a miss and works.
  for (const auto& entry : std::filesystem::recursive_directory_iterator(cache.dir.path))
    if (entry.is_regular_file()) std::ofstream(entry.path(), std::ios::binary) << "garbage";
  Binary third = d.compile(source, "add_f32");
  CHECK(llvm_compilations() == before + 2);
  std::unique_ptr<Program> add = d.load(third);
  CHECK(run_binary(d, *add, {1}, {2}) == std::vector<float>{3});
}

TEST_CASE("llvm: threads compiling and loading at once all get working programs", "[device][llvm]") {
  Device& d = llvm_device();
  CacheDir cache;
  std::string shared = unique(binary_kernel("add_f32", "fadd"));
  std::vector<std::string> own;
  for (int t = 0; t < 8; ++t) own.push_back(unique(binary_kernel("mul_f32", "fmul")));
  std::atomic<int> right{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      std::unique_ptr<Program> add = d.load(d.compile(shared, "add_f32"));
      std::unique_ptr<Program> mul = d.load(d.compile(own[size_t(t)], "mul_f32"));
      std::vector<float> a = {float(t), 2}, b = {3, 4};
      if (run_binary(d, *add, a, b) == std::vector<float>{float(t) + 3, 6} &&
          run_binary(d, *mul, a, b) == std::vector<float>{float(t) * 3, 8})
        ++right;
    });
  for (std::thread& t : threads) t.join();
  CHECK(right == 8);
}

TEST_CASE("llvm: eight threads realizing graphs that share kernels compile each kernel once", "[device][llvm][realize]") {
  if (get_device("CPU").spec().lang != Language::LLVM) return;  // KILN_CPU_COMPILER=c
  CacheDir cache;
  // Constants are baked into kernels: fresh ones give two kernels no cache has seen.
  double salt = double(std::chrono::steady_clock::now().time_since_epoch().count() % 100000) / 1e6;
  std::vector<float> values(64);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i) * 0.25f - 4;
  size_t before = llvm_compilations();
  std::atomic<int> right{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      Tensor x = Tensor::from_vector(values, {8, 8}, "CPU");
      double scale = t % 2 ? 1.5 + salt : 0.5 + salt;
      std::vector<float> got = ((x * scale).exp2() + 1.0).to_vector<float>();
      bool ok = true;
      for (size_t i = 0; i < values.size(); ++i)
        ok = ok && std::abs(got[i] - float(std::exp2(double(values[i]) * scale) + 1.0)) <= 1e-5f * (1 + std::abs(got[i]));
      if (ok) ++right;
    });
  for (std::thread& t : threads) t.join();
  CHECK(right == 8);
  CHECK(llvm_compilations() - before == 2);  // two distinct kernels, each compiled once
}
