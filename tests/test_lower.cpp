// Lowering: vector upcasts (lower/upcast.h) in the generated source, and their results on CPU and REF
// against plain host loops, on shapes where the lanes line up and where they do not.
#include <limits>
#include <cmath>
#include <numeric>

#include "devices/device.h"
#include "frontend/tensor.h"
#include "helpers.h"
#include "lower/lower.h"
#include "lower/upcast.h"

namespace kiln {
namespace {

const char* const kDevices[] = {"CPU", "CLANG", "REF"};

std::vector<float> iota_floats(size_t n, float scale = 0.25f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(static_cast<int64_t>(i % 23) - 11);
  return v;
}

// The source lower_kernel gives the one kernel that realizes `out` on `device`.
std::string kernel_source(const Tensor& out, const std::string& device) {
  Schedule s = Tensor::schedule({out});
  REQUIRE(s.items.size() == 1);
  return lower_kernel(s.items[0].ast, get_device(device).spec()).source;
}

// The host kernels' float vector type: as wide as this machine's vector register (AVX-512: 16 lanes,
// AVX2: 8), spelled in C ("float32x16") or in LLVM IR ("<16 x float>") as the device's language is.
int64_t host_lanes() { return get_device("CLANG").spec().vector_bytes / 4; }
std::string cpu_vector() { return cat("float32x", host_lanes()); }
bool renders_llvm(const std::string& device) { return get_device(device).spec().lang == Language::LLVM; }
bool renders_c(const std::string& device) { return get_device(device).spec().lang == Language::C; }
std::string llvm_vector() { return cat("<", host_lanes(), " x float>"); }

// No float comparison of a single lane in LLVM IR: every fcmp is of vectors.
bool compares_only_vectors(const std::string& ir) {
  for (size_t at = ir.find("fcmp "); at != std::string::npos; at = ir.find("fcmp ", at + 1))
    if (ir.substr(at, ir.find('\n', at) - at).find(" x float>") == std::string::npos) return false;
  return true;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", expected " << want[i]);
    CHECK(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])));
  }
}

TEST_CASE("an elementwise kernel on a contiguous axis loads, computes and stores vectors", "[lower]") {
  Tensor a = Tensor::from_vector(iota_floats(64), {4, 16}, "CLANG"), b = Tensor::from_vector(iota_floats(64, 0.5f), {4, 16}, "CLANG");
  std::string c = kernel_source((a * b + a).relu(), "CLANG");
  INFO(c);
  CHECK(c.find(cat("typedef float ", cpu_vector(), " __attribute__((vector_size(", get_device("CLANG").spec().vector_bytes, ")));")) != std::string::npos);
  CHECK(c.find(cpu_vector() + " val") != std::string::npos);
  CHECK(c.find("__builtin_memcpy(&val") != std::string::npos);  // unaligned vector loads
  CHECK(c.find("__builtin_memcpy((data0+") != std::string::npos);  // and an unaligned vector store
  if (renders_llvm("CPU")) {
    Tensor la = Tensor::from_vector(iota_floats(64), {4, 16}, "CPU"), lb = Tensor::from_vector(iota_floats(64, 0.5f), {4, 16}, "CPU");
    std::string ir = kernel_source((la * lb + la).relu(), "CPU");
    INFO(ir);
    CHECK(ir.find(cat("load ", llvm_vector(), ", ", llvm_vector(), "* ")) != std::string::npos);  // vector loads
    CHECK(ir.find(cat("store ", llvm_vector(), " ")) != std::string::npos);                      // and a vector store
  }
  Tensor ra = Tensor::from_vector(iota_floats(64), {4, 16}, "REF");
  CHECK(kernel_source(ra + ra, "REF").find("LOAD float32x16") != std::string::npos);
}

TEST_CASE("a transposed input is read lane by lane and put together into a vector", "[lower]") {
  for (const char* device : kDevices) {
    INFO(device);
    std::vector<float> x = iota_floats(16 * 32);
    Tensor t = Tensor::from_vector(x, {16, 32}, device).permute({1, 0});  // [32, 16], stride 32 along the last axis
    Tensor y = t * 2.0 + 1.0;
    if (renders_c(device)) CHECK(kernel_source(y, device).find("(" + cpu_vector() + "){") != std::string::npos);
    if (renders_llvm(device)) CHECK(kernel_source(y, device).find("insertelement " + llvm_vector()) != std::string::npos);
    std::vector<float> want(32 * 16);
    for (size_t i = 0; i < 32; ++i)
      for (size_t j = 0; j < 16; ++j) want[i * 16 + j] = x[j * 32 + i] * 2 + 1;
    expect_near(y.to_vector<float>(), want);
  }
}

TEST_CASE("float math on a transposed input runs on the packed vector, not lane by lane", "[lower]") {
  // The store packs the lanes anyway: packing them where they are read makes SiLU's ~40 ops one vector
  // op each instead of one per lane (in LLVM IR: no fcmp of a single float).
  for (const char* device : kDevices) {
    INFO(device);
    std::vector<float> x = iota_floats(16 * 32, 0.25f);
    Tensor t = Tensor::from_vector(x, {16, 32}, device).permute({1, 0});
    Tensor y = (t * 1.5 + 0.25).silu();
    if (renders_llvm(device)) {
      std::string ir = kernel_source(y, device);
      INFO(ir);
      CHECK(ir.find("insertelement " + llvm_vector()) != std::string::npos);
      CHECK(compares_only_vectors(ir));
    }
    std::vector<float> want(32 * 16);
    for (size_t i = 0; i < 32; ++i)
      for (size_t j = 0; j < 16; ++j) {
        double v = x[j * 32 + i] * 1.5 + 0.25;
        want[i * 16 + j] = static_cast<float>(v / (1 + std::exp(-v)));
      }
    expect_near(y.to_vector<float>(), want, 1e-5f);
  }
}

TEST_CASE("odd sizes, offsets and padding give the host's results", "[lower]") {
  for (const char* device : kDevices) {
    INFO(device);
    std::vector<float> x = iota_floats(6 * 40);
    Tensor t = Tensor::from_vector(x, {6, 40}, device);
    // An offset view (shrink) starting at an odd element, 32 wide: vector loads from unaligned addresses.
    std::vector<float> want_shrink;
    for (size_t i = 1; i < 5; ++i)
      for (size_t j = 3; j < 35; ++j) want_shrink.push_back(x[i * 40 + j] * x[i * 40 + j]);
    Tensor s = t.shrink({{1, 5}, {3, 35}});
    expect_near((s * s).to_vector<float>(), want_shrink);
    // Padding: lanes near the edge are gated, the others are not.
    std::vector<float> want_pad;
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = -4; j < 44; ++j) want_pad.push_back(j >= 0 && j < 40 ? x[static_cast<size_t>(i * 40 + j)] + 1 : 1);
    expect_near((t.pad({{0, 0}, {4, 4}}) + 1.0).to_vector<float>(), want_pad);
    // 37 columns: no vector width divides them, the kernel stays scalar.
    Tensor o = Tensor::from_vector(iota_floats(3 * 37), {3, 37}, device);
    std::vector<float> want_odd = iota_floats(3 * 37);
    for (float& v : want_odd) v = std::max(v - 1, 0.0f);
    expect_near((o - 1.0).relu().to_vector<float>(), want_odd);
  }
}

TEST_CASE("narrow floats and integers move as vectors of their storage", "[lower]") {
  for (const char* device : kDevices) {
    INFO(device);
    std::vector<float> x = iota_floats(48);
    for (DType t : {dtypes::float16, dtypes::bfloat16}) {
      Tensor h = Tensor::from_vector(x, {48}, device).cast(t).realize();
      std::vector<float> want(48);
      for (size_t i = 0; i < 48; ++i) want[i] = x[i] * 2 + 0.5f;  // exact in float16 and bfloat16 for these values
      expect_near((h * 2.0 + 0.5).cast(dtypes::float32).to_vector<float>(), want, 0);
    }
    std::vector<int32_t> i(96);
    std::iota(i.begin(), i.end(), -40);
    Tensor ti = Tensor::from_vector(i, {96}, device);
    std::vector<int32_t> want(96);
    for (size_t k = 0; k < 96; ++k) want[k] = std::max(i[k] * 3 - 7, i[k]);
    CHECK((ti * 3 - 7).maximum(ti).to_vector<int32_t>() == want);
    std::vector<int8_t> b(32);
    for (size_t k = 0; k < 32; ++k) b[k] = static_cast<int8_t>(k * 9);
    std::vector<int8_t> want8(32);
    for (size_t k = 0; k < 32; ++k) want8[k] = static_cast<int8_t>(b[k] + b[k]);
    Tensor t8 = Tensor::from_vector(b, {32}, device);
    CHECK((t8 + t8).to_vector<int8_t>() == want8);
  }
}

TEST_CASE("matmul and column sums accumulate in vectors", "[lower]") {
  for (const char* device : kDevices) {
    INFO(device);
    std::vector<float> a = iota_floats(24 * 20), b = iota_floats(20 * 32, 0.125f);
    Tensor ta = Tensor::from_vector(a, {24, 20}, device), tb = Tensor::from_vector(b, {20, 32}, device);
    Tensor mm = ta.matmul(tb);
    if (renders_c(device)) CHECK(kernel_source(mm, device).find(cpu_vector() + " acc") != std::string::npos);
    if (renders_llvm(device)) CHECK(kernel_source(mm, device).find("alloca " + llvm_vector()) != std::string::npos);
    std::vector<float> want(24 * 32, 0.0f);
    for (size_t i = 0; i < 24; ++i)
      for (size_t j = 0; j < 32; ++j)
        for (size_t k = 0; k < 20; ++k) want[i * 32 + j] += a[i * 20 + k] * b[k * 32 + j];
    expect_near(mm.to_vector<float>(), want, 1e-4f);
    std::vector<float> cols(32, 0.0f);
    for (size_t k = 0; k < 20; ++k)
      for (size_t j = 0; j < 32; ++j) cols[j] = std::max(k == 0 ? b[j] : cols[j], b[k * 32 + j]);
    expect_near(tb.max({0}).to_vector<float>(), cols, 0);
  }
}

TEST_CASE("a ReLU and its gradient mask inside a matmul's tile stay vectors", "[lower]") {
  // relu(b) as the right operand, and where(a > 0, ...) as the left one: the comparisons and selects
  // become mask vectors (no lane taken apart), and the values match direct loops, NaN and -0 included.
  for (const char* device : kDevices) {
    INFO(device);
    std::vector<float> a = iota_floats(24 * 20), b = iota_floats(20 * 32, 0.125f);
    for (size_t k = 0; k < b.size(); ++k) b[k] = (k % 3 == 0 ? -1.0f : 1.0f) * b[k];
    b[5] = std::numeric_limits<float>::quiet_NaN();
    b[7] = -0.0f;
    Tensor ta = Tensor::from_vector(a, {24, 20}, device), tb = Tensor::from_vector(b, {20, 32}, device);
    Tensor mm = ta.matmul(tb.relu());
    if (renders_c(device)) {
      std::string src = kernel_source(mm, device);
      CHECK(src.find(cpu_vector() + " acc") != std::string::npos);
      CHECK(src.find("[0]<") == std::string::npos);  // no comparison of a single lane
    }
    if (renders_llvm(device)) {
      std::string src = kernel_source(mm, device);
      INFO(src);
      CHECK(src.find("alloca " + llvm_vector()) != std::string::npos);
      CHECK(compares_only_vectors(src));
    }
    std::vector<float> want(24 * 32, 0.0f);
    for (size_t i = 0; i < 24; ++i)
      for (size_t j = 0; j < 32; ++j)
        for (size_t k = 0; k < 20; ++k) {
          float r = b[k * 32 + j];
          want[i * 32 + j] += a[i * 20 + k] * (r <= 0.0f ? 0.0f : r);
        }
    std::vector<float> got = mm.to_vector<float>();
    for (size_t j = 0; j < 32; ++j) CHECK(std::isnan(got[j]) == (j == 5));  // the NaN's column
    for (size_t k = 0; k < got.size(); ++k)
      if (k % 32 != 5) CHECK(got[k] == Approx(want[k]).epsilon(1e-5));
  }
}

TEST_CASE("index strides along a loop", "[lower]") {
  UOpPtr r = range(0, const_int(64)), s = range(1, const_int(8));
  CHECK(index_stride(r * 4 + s, r) == 4);
  CHECK(index_stride(r * 4 + s, s) == 1);
  CHECK(index_stride(s * 3, r) == 0);
  CHECK(index_stride((r * 4 + s) % 5, r) == std::nullopt);
  CHECK(is_contiguous(s + r * 8 + 3, s));
}

TEST_CASE("lower: the LLVM renderer does index math in i64 where no value can differ, and int32 math that wraps still wraps", "[lower][llvm]") {
  if (!renders_llvm("CPU")) return;  // KILN_CPU_COMPILER=c
  // A transposing copy: its loop counters and offsets are index math, in i64 (nsw: in int32's range).
  Tensor x = Tensor::arange(0, 64 * 48, 1, dtypes::float32).reshape({64, 48});
  Tensor t = x.transpose(0, 1).contiguous();
  std::string ir = kernel_source(t, "CPU");
  CHECK_THAT(ir, Catch::Contains("add nsw i64"));
  CHECK(t.to_vector<float>() == t.to("REF").to_vector<float>());
  // Values made from the index: 999 * 2147483 stays inside int32 (rendered wide); 999 * 3000000 does not
  // (rendered in i32, wrapping). Division, remainder, comparison and max of both against the reference
  // evaluator, value for value.
  for (int64_t scale : {int64_t{2147483}, int64_t{3000000}}) {
    INFO("scale " << scale);
    Tensor i = Tensor::arange(1000) * Tensor::full({}, double(scale), dtypes::int32);
    Tensor c7 = Tensor::full({}, 7.0, dtypes::int32), c1000 = Tensor::full({}, 1000.0, dtypes::int32);
    for (Tensor r : {i, i.div(c7, "trunc"), i.floor_divide(c7), i.remainder(c1000), i.lt(Tensor::full({}, 0.0, dtypes::int32)).cast(dtypes::int32),
                     i.maximum(Tensor::full({}, 5e8, dtypes::int32))}) {
      std::vector<int32_t> cpu = r.realize().to_vector<int32_t>(), ref = r.to("REF").to_vector<int32_t>();
      CHECK(cpu == ref);
    }
  }
  // The wrapped product itself, against int32 arithmetic on the host.
  std::vector<int32_t> wrapped = (Tensor::arange(1000) * Tensor::full({}, 3e6, dtypes::int32)).to_vector<int32_t>();
  for (int64_t k : {int64_t{0}, int64_t{715}, int64_t{716}, int64_t{999}})
    CHECK(wrapped[size_t(k)] == static_cast<int32_t>(static_cast<uint32_t>(k) * 3000000u));
}

}  // namespace
}  // namespace kiln
