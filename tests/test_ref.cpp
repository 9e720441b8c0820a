// The REF device and the text form of linear programs it compiles: round trips of lowered kernels,
// errors for malformed text, REF running lowered kernels against plain loops, and the errors REF
// raises where C would corrupt memory or trap.
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>

#include "devices/ref.h"
#include "frontend/tensor.h"
#include "helpers.h"
#include "lower/lower.h"
#include "lower/opts.h"
#include "uop/config.h"
#include "uop/serialize.h"

using namespace kiln;
using Catch::Matchers::Contains;

namespace {

// A CPU-like spec with a fixed thread count, so whether a kernel is threaded does not depend on the machine.
DeviceSpec c_spec() {
  DeviceSpec spec;
  spec.name = "CPU";
  spec.lang = Language::C;
  spec.threads = 8;
  spec.vector_bytes = 64;  // vector types, as the host kit's C renderer writes them (AVX-512 wide)
  spec.vector_registers = 32;
  return spec;
}

Device& ref() { return get_device("REF"); }

std::vector<float> sample_floats(size_t n, float scale = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(static_cast<int>((i * 37) % 23) - 11);
  return v;
}

// The one kernel that computes `out` from tensors made by from_vector.
struct Kernel {
  ScheduleItem item;
  LoweredKernel lowered;
};

Kernel lower_one(const Tensor& out, const DeviceSpec& spec = c_spec()) {
  Schedule s = Tensor::schedule({out});
  REQUIRE(s.items.size() == 1);
  REQUIRE(s.items[0].kind == ScheduleItem::Kind::Kernel);
  return {s.items[0], lower_kernel(s.items[0].ast, spec)};
}

// The same with the given opts instead of the heuristics' (a kernel of a known shape).
Kernel lower_one(const Tensor& out, std::vector<Opt> opts) {
  Schedule s = Tensor::schedule({out});
  REQUIRE(s.items.size() == 1);
  Lowering l = lower_with_opts(s.items[0].ast, c_spec(), opts);
  REQUIRE(l.kernel);
  return {s.items[0], *l.kernel};
}

// Runs the kernel on REF: slot 0 is the output, the other slots are filled from `inputs` by BUFFER.
std::vector<float> run_on_ref(const Kernel& k, const std::map<const UOp*, std::vector<float>>& inputs) {
  Device& dev = ref();
  std::vector<RawBuffer> bufs;
  for (const UOpPtr& buffer : k.item.bufs) {
    REQUIRE(buffer->dtype == dtypes::float32);
    size_t n = static_cast<size_t>(buffer->arg_as<BufferArg>().size);
    bufs.push_back(dev.alloc(n * sizeof(float)));
    if (auto it = inputs.find(buffer.get()); it != inputs.end()) dev.copy_in(bufs.back(), it->second.data(), n * sizeof(float));
  }
  std::unique_ptr<Program> program = dev.load(dev.compile(serialize_program(k.lowered.linear), k.lowered.name));
  program->launch(bufs, launch_values(k.item, k.lowered.vars), k.lowered.dims, false);
  std::vector<float> out(bufs[0].bytes / sizeof(float));
  dev.copy_out(out.data(), bufs[0], bufs[0].bytes);
  for (RawBuffer b : bufs) dev.free(b);
  return out;
}

const UOp* buffer_of(const Tensor& t) {  // from_vector tensors are RESHAPE(BUFFER)
  const UOpPtr& u = t.uop();
  return u->op == Op::BUFFER ? u.get() : u->src.at(0).get();
}

size_t count_ops(const std::vector<UOpPtr>& linear, Op op, size_t num_src = 0) {
  size_t n = 0;
  for (const UOpPtr& u : linear) n += u->op == op && (num_src == 0 || u->src.size() == num_src);
  return n;
}

void check_round_trip(const std::vector<UOpPtr>& linear) {
  std::string text = serialize_program(linear);
  std::vector<UOpPtr> back = parse_program(text);
  INFO(text);
  REQUIRE(back.size() == linear.size());
  for (size_t i = 0; i < linear.size(); ++i) CHECK(back[i] == linear[i]);
  CHECK(serialize_program(back) == text);
}

void check_equal(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", expected " << want[i]);
    CHECK((std::memcmp(&got[i], &want[i], sizeof(float)) == 0 || got[i] == want[i]));
  }
}

// --- hand-made programs: out[i] = f(in[i]) over a RANGE --------------------------------------------

UOpPtr global(int64_t slot, DType element) { return UOp::make(Op::DEFINE_GLOBAL, element.ptr(), {}, slot); }
UOpPtr index(const UOpPtr& buffer, const UOpPtr& i) { return UOp::make(Op::INDEX, buffer->dtype, {buffer, i}); }
UOpPtr load(const UOpPtr& address) { return UOp::make(Op::LOAD, address->dtype.deref(), {address}); }
UOpPtr store(const UOpPtr& address, const UOpPtr& value) { return UOp::make(Op::STORE, dtypes::void_, {address, value}); }
UOpPtr end(const UOpPtr& r) { return UOp::make(Op::END, dtypes::void_, {r}); }

// A linear program computing out[i] = op(in[i], rhs) for i in [0, n), elements of `dtype`.
std::vector<UOpPtr> binary_program(Op op, DType dtype, int64_t n, const UOpPtr& rhs) {
  UOpPtr out = global(0, dtype), in = global(1, dtype), bound = const_int(n), r = range(0, bound);
  UOpPtr x = load(index(in, r)), y = UOp::make(op, is_comparison(op) ? dtypes::bool_ : dtype, {x, rhs});
  UOpPtr st = store(index(out, r), y);
  return {out, in, bound, r, index(in, r), x, rhs, y, index(out, r), st, end(r)};
}

template <typename T>
std::vector<T> run_program(const std::vector<UOpPtr>& linear, std::vector<T> out, const std::vector<T>& in,
                           std::vector<int64_t> vars = {}) {
  Device& dev = ref();
  RawBuffer a = dev.alloc(out.size() * sizeof(T)), b = dev.alloc(std::max<size_t>(in.size(), 1) * sizeof(T));
  dev.copy_in(a, out.data(), out.size() * sizeof(T));
  dev.copy_in(b, in.data(), in.size() * sizeof(T));
  std::vector<RawBuffer> bufs{a, RawBuffer{b.handle, in.size() * sizeof(T)}};
  struct Free {
    Device& dev;
    RawBuffer a, b;
    ~Free() { dev.free(a), dev.free(b); }
  } free_later{dev, a, b};
  dev.load(dev.compile(serialize_program(linear), "hand"))->launch(bufs, vars, LaunchDims{}, false);
  dev.copy_out(out.data(), a, out.size() * sizeof(T));
  return out;
}

}  // namespace

// --- the text form ---------------------------------------------------------------------------------

TEST_CASE("lowered kernels round-trip through their text form", "[ref]") {
  Tensor a = Tensor::from_vector(sample_floats(16 * 32), {16, 32}), b = Tensor::from_vector(sample_floats(32 * 8), {32, 8});
  for (const Tensor& out :
       {(a * 2.0 + 1.0).relu(), a.sum({1}), a.max({0}), a.sum(), a.pad({{1, 2}, {0, 3}}) + 1.0, a.matmul(b)}) {
    check_round_trip(lower_one(out).lowered.linear);
  }
}

TEST_CASE("a reduce kernel's text holds the graph-level END its accumulator read waits for", "[ref]") {
  Tensor a = Tensor::from_vector(sample_floats(16 * 32), {16, 32});
  std::vector<UOpPtr> linear = lower_one(a.sum({1})).lowered.linear;
  std::string text = serialize_program(linear);
  CHECK_THAT(text, Contains("\n+"));  // a node outside the program
  std::vector<UOpPtr> back = parse_program(text);
  bool found = false;
  for (const UOpPtr& u : back)
    if (u->op == Op::LOAD && u->src[0]->op == Op::DEFINE_REG) found = u->src.at(1)->op == Op::END && u->src[1]->src.size() > 1;
  CHECK(found);
}

TEST_CASE("every kind of arg round-trips exactly, bits of doubles included", "[ref]") {
  UOpPtr x = const_int(3);
  std::vector<UOpPtr> nodes = {
      const_of(dtypes::float32, std::nan("")),
      const_of(dtypes::float64, -0.0),
      const_of(dtypes::float64, 0.1),
      const_of(dtypes::float16, 65504.0),
      const_of(dtypes::uint64, std::numeric_limits<uint64_t>::max()),
      const_of(dtypes::int64, std::numeric_limits<int64_t>::min()),
      const_bool(true),
      var("n", -4, 1 << 20),
      UOp::make(Op::DEVICE, dtypes::void_, {}, std::string("a \"quoted\" name\twith\\ escapes\n\x01 # not a comment")),
      UOp::make(Op::RESHAPE, dtypes::int32, {x}, std::vector<int64_t>{2, -1, 3}),
      UOp::make(Op::PERMUTE, dtypes::int32, {x}, std::vector<int64_t>{}),
      UOp::make(Op::PAD, dtypes::int32, {x}, Pairs{{0, 1}, {-2, 3}}),
      UOp::make(Op::REDUCE_AXIS, dtypes::int32, {x}, ReduceArg{Op::MAX, {0, 2}}),
      UOp::make(Op::BUFFER, dtypes::float32, {}, BufferArg{7, 128, nullptr}),
      UOp::make(Op::REDUCE, dtypes::int32, {x}, Op::ADD),
      UOp::make(Op::DEFINE_GLOBAL, dtypes::float32.vec(4).ptr(AddrSpace::Local), {}, int64_t{2}),
      UOp::make(Op::DEFINE_REG, dtypes::int8.ptr(AddrSpace::Reg), {x}, int64_t{0}),
  };
  check_round_trip(nodes);
}

TEST_CASE("a program may reference nodes after they appear, and nodes outside it", "[ref]") {
  UOpPtr a = const_int(1), b = a + const_int(2);
  UOpPtr outside = UOp::make(Op::END, dtypes::void_, {b, range(0, const_int(4))});
  check_round_trip({b, UOp::make(Op::NOOP, dtypes::void_, {outside}), a});
}

TEST_CASE("dtype names parse back, vectors and pointers included", "[ref]") {
  for (DType t : {dtypes::float32, dtypes::bool_, dtypes::bfloat16.vec(8), dtypes::int32.ptr(),
                  dtypes::float32.vec(4).ptr(AddrSpace::Local), dtypes::uint8.ptr(AddrSpace::Reg), dtypes::void_}) {
    INFO(t.name());
    CHECK(parse_dtype(t.name()) == t);
  }
  for (const char* bad : {"", "float", "float32x1", "float32x", "int32*global", "x4", "float32x4x4", "float32**"}) {
    INFO(bad);
    CHECK_FALSE(parse_dtype(bad).has_value());
  }
}

TEST_CASE("malformed program text is an Error naming the line and the problem", "[ref]") {
  const std::string h = "kiln-uops 1\n";
  const std::pair<std::string, std::string> cases[] = {
      {h + "0 FOO int32 [] -", "unknown op \"FOO\""},
      {h + "0 CONST int33 [] const.int:1", "unknown dtype \"int33\""},
      {h + "1 CONST int32 [] const.int:1", "expected 0, got 1"},
      {h + "0 NEG int32 [5] -", "source id 5 names no node"},
      {h + "0 ADD int32 [0] -", "ADD takes 2 source(s), not 1"},
      {h + "0 RANGE int32 [] int:0", "RANGE takes 1 source(s), not 0"},
      {h + "0 CONST int32 [] const.double:0x3ff0000000000000", "not a canonical int32 value"},
      {h + "0 CONST int32 [] const.int:4294967296", "not a canonical int32 value"},
      {h + "0 CONST float32 [] const.double:0x3fb999999999999a", "not a canonical float32 value"},
      {h + "0 CONST float32* [] const.double:0x0000000000000000", "needs a value dtype"},
      {h + "0 CONST int32 [] const.double:0x3ff", "16 hex digits"},
      {h + "0 CONST int32 []", "missing arg"},
      {h + "0 CONST int32 [] const.int:1 junk", "unexpected text after the arg"},
      {h + "0 CONST int32 [ const.int:1", "a source id"},
      {h + "0 CONST int32 [] konst:1", "unknown arg tag \"konst\""},
      {h + "0 DEFINE_VAR int32 [] int:3", "DEFINE_VAR needs a var: arg"},
      {h + "0 DEVICE void [] str:\"CPU", "unterminated string"},
      {h + "0 DEVICE void [] str:\"\\q\"", "unknown escape"},
      {h + "0 NEG int32 [0] -", "depends on itself"},
      {h + "0 RESHAPE int32 [] ints:1,x", "expected an integer"},
  };
  for (const auto& [text, what] : cases) {
    INFO(text);
    CHECK_THROWS_WITH(parse_program(text), Contains("line 2") && Contains(what));
  }
  CHECK_THROWS_WITH(parse_program(""), Contains("empty text"));
  CHECK_THROWS_WITH(parse_program("kiln-uops 99\n"), Contains("line 1") && Contains("kiln-uops 1"));
}

TEST_CASE("mutated program text parses or throws Error, and REF compiles it or throws CompileError", "[ref]") {
  Tensor a = Tensor::from_vector(sample_floats(16 * 32), {16, 32});
  const std::string text = serialize_program(lower_one(a.pad({{1, 0}, {0, 2}}).max({1})).lowered.linear);
  const std::string alphabet = "0123456789[],:-+x*#\" \nabcdefgilnorstuxADEGILNORST_.";
  std::mt19937 rng(1234);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  size_t parsed = 0;
  for (int round = 0; round < 2000 * config().fuzz; ++round) {
    std::string mutated = text;
    for (size_t edits = 1 + pick(3); edits > 0; --edits) {
      size_t at = pick(mutated.size());
      if (rng() % 2) mutated[at] = alphabet[pick(alphabet.size())];
      else mutated.erase(at, 1 + pick(4));
    }
    INFO(mutated);
    try {
      parse_program(mutated);
      ++parsed;
    } catch (const Error&) {
      continue;
    }
    try {
      ref().compile(mutated, "mutated");
    } catch (const CompileError&) {
    }
  }
  CHECK(parsed > 0);  // some mutations (comments, digits of constants) still parse
}

TEST_CASE("REF's compile reports malformed text and programs it cannot run as CompileError", "[ref]") {
  CHECK_THROWS_AS(ref().compile("kiln-uops 1\n0 FOO int32 [] -\n", "bad"), CompileError);
  UOpPtr r = range(0, const_int(4));
  CHECK_THROWS_WITH(ref().compile(serialize_program({const_int(4), r}), "open_loop"), Contains("never closed"));
  UOpPtr unbound = range(1, var("n", 1, 8));  // its bound, a DEFINE_VAR, is not in the program
  CHECK_THROWS_WITH(ref().compile(serialize_program({unbound, end(unbound)}), "undefined"),
                    Contains("not computed before its use"));
  UOpPtr in_loop = r + const_int(1);
  CHECK_THROWS_WITH(ref().compile(serialize_program({const_int(4), r, in_loop, end(r), in_loop * 2}), "scope"),
                    Contains("which has ended"));
}

TEST_CASE("REF's spec and lower_kernel's source for it", "[ref]") {
  const DeviceSpec& spec = ref().spec();
  CHECK(spec.name == "REF");
  CHECK(spec.lang == Language::UOps);
  CHECK(spec.threads == 1);
  CHECK(spec.arch == "interpreter");
  CHECK(spec.compiler == cat("kiln-ref ", kProgramFormatVersion));
  Tensor a = Tensor::from_vector(sample_floats(8), {8});
  Kernel k = lower_one(a * 3.0, spec);
  CHECK(k.lowered.source == serialize_program(k.lowered.linear));
}

// --- REF runs lowered kernels ----------------------------------------------------------------------

TEST_CASE("REF runs an elementwise kernel", "[ref]") {
  std::vector<float> av = sample_floats(12 * 10, 0.5f), bv = sample_floats(12 * 10, -0.25f);
  Tensor a = Tensor::from_vector(av, {12, 10}), b = Tensor::from_vector(bv, {12, 10});
  Kernel k = lower_one((a * b + 1.0).relu());
  std::vector<float> want(av.size());
  for (size_t i = 0; i < av.size(); ++i) want[i] = std::max(av[i] * bv[i] + 1.0f, 0.0f);
  check_equal(run_on_ref(k, {{buffer_of(a), av}, {buffer_of(b), bv}}), want);
}

TEST_CASE("REF runs a sum over the inner axis", "[ref]") {
  std::vector<float> av = sample_floats(16 * 32);
  Tensor a = Tensor::from_vector(av, {16, 32});
  Kernel k = lower_one(a.sum({1}), std::vector<Opt>{});
  CHECK(count_ops(k.lowered.linear, Op::DEFINE_REG) == 1);
  std::vector<float> want(16, 0.0f);
  for (size_t i = 0; i < 16; ++i)
    for (size_t j = 0; j < 32; ++j) want[i] += av[i * 32 + j];
  check_equal(run_on_ref(k, {{buffer_of(a), av}}), want);
}

TEST_CASE("REF runs a sum over all axes", "[ref]") {
  std::vector<float> av = sample_floats(16 * 32);
  Tensor a = Tensor::from_vector(av, {16, 32});
  Kernel k = lower_one(a.sum());
  float want = 0.0f;
  for (float x : av) want += x;
  check_equal(run_on_ref(k, {{buffer_of(a), av}}), {want});
}

TEST_CASE("REF runs a max over the outer axis, NaN propagating", "[ref]") {
  std::vector<float> av = sample_floats(8 * 16);
  av[3 * 16 + 5] = std::numeric_limits<float>::quiet_NaN();  // column 5 has a NaN in row 3
  Tensor a = Tensor::from_vector(av, {8, 16});
  Kernel k = lower_one(a.max({0}));
  std::vector<float> want(16, -std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < 8; ++i)
    for (size_t j = 0; j < 16; ++j) want[j] = std::max(want[j], av[i * 16 + j]);
  want[5] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> got = run_on_ref(k, {{buffer_of(a), av}});
  CHECK(std::isnan(got[5]));
  got[5] = want[5];
  check_equal(got, want);
}

TEST_CASE("REF runs a padded view through gated loads", "[ref]") {
  std::vector<float> av = sample_floats(4 * 6);
  Tensor a = Tensor::from_vector(av, {4, 6});
  Kernel k = lower_one(a.pad({{1, 2}, {0, 3}}) + 1.0);
  CHECK(count_ops(k.lowered.linear, Op::LOAD, 3) >= 1);  // the gated load
  std::vector<float> want(7 * 9);
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 9; ++j) {
      bool inside = i >= 1 && i < 5 && j < 6;
      want[static_cast<size_t>(i * 9 + j)] = (inside ? av[static_cast<size_t>((i - 1) * 6 + j)] : 0.0f) + 1.0f;
    }
  check_equal(run_on_ref(k, {{buffer_of(a), av}}), want);
}

TEST_CASE("REF runs a threaded kernel, one gid per outer index", "[ref]") {
  std::vector<float> av = sample_floats(256 * 128);
  Tensor a = Tensor::from_vector(av, {256, 128});
  Kernel k = lower_one(a.sum({1}) * 0.5, std::vector<Opt>{{OptOp::THREAD, 0, 0}});
  REQUIRE(count_ops(k.lowered.linear, Op::SPECIAL) == 1);
  CHECK(k.lowered.dims.global[0] == 256);
  std::vector<float> want(256, 0.0f);
  for (size_t i = 0; i < 256; ++i) {
    for (size_t j = 0; j < 128; ++j) want[i] += av[i * 128 + j];
    want[i] *= 0.5f;
  }
  check_equal(run_on_ref(k, {{buffer_of(a), av}}), want);
}

TEST_CASE("REF and the host devices (LLVM IR and C) agree on lowered kernels", "[ref]") {
  std::vector<float> av = sample_floats(64 * 48, 0.125f), bv = sample_floats(48 * 16, 0.5f);
  Tensor a = Tensor::from_vector(av, {64, 48}), b = Tensor::from_vector(bv, {48, 16});
  for (const char* host : {"CPU", "CLANG"})
  for (const Tensor& out : {a.matmul(b), (a.exp2() - a.sqrt()).max({1}), a.pad({{2, 0}, {1, 1}}).sum({0})}) {
    Device& cpu = get_device(host);
    DeviceSpec spec = cpu.spec();
    spec.threads = 8;  // fixed, so the kernels do not depend on the machine
    Kernel k = lower_one(out, spec);
    INFO(host);
    std::vector<RawBuffer> bufs;
    for (const UOpPtr& buffer : k.item.bufs) {
      size_t bytes = static_cast<size_t>(buffer->arg_as<BufferArg>().size) * sizeof(float);
      bufs.push_back(cpu.alloc(bytes));
      const std::vector<float>* host = buffer.get() == buffer_of(a) ? &av : buffer.get() == buffer_of(b) ? &bv : nullptr;
      if (host) cpu.copy_in(bufs.back(), host->data(), bytes);
    }
    cpu.load(cpu.compile(k.lowered.source, k.lowered.name))->launch(bufs, launch_values(k.item, k.lowered.vars), k.lowered.dims, false);
    std::vector<float> on_cpu(bufs[0].bytes / sizeof(float));
    cpu.copy_out(on_cpu.data(), bufs[0], bufs[0].bytes);
    for (RawBuffer raw : bufs) cpu.free(raw);
    std::vector<float> on_ref = run_on_ref(k, {{buffer_of(a), av}, {buffer_of(b), bv}});
    INFO(k.lowered.name);
    REQUIRE(on_ref.size() == on_cpu.size());
    for (size_t i = 0; i < on_ref.size(); ++i) {
      INFO("element " << i);
      if (std::isnan(on_cpu[i])) CHECK(std::isnan(on_ref[i]));
      else CHECK(on_ref[i] == Approx(on_cpu[i]).epsilon(1e-6));  // libm's exp2f/sqrtf vs double rounded once
    }
  }
}

TEST_CASE("REF reads DEFINE_VARs in program order and checks their declared range", "[ref]") {
  UOpPtr out = global(0, dtypes::int32), bound = const_int(4), r = range(0, bound);
  UOpPtr n = var("n", 1, 10), m = var("m", -5, 5), value = r * n + m;
  UOpPtr address = index(out, r);
  std::vector<UOpPtr> linear{out, n, m, bound, r, r * n, value, address, store(address, value), end(r)};
  CHECK(run_program<int32_t>(linear, {0, 0, 0, 0}, {}, {3, -2}) == std::vector<int32_t>{-2, 1, 4, 7});
  CHECK_THROWS_WITH(run_program<int32_t>(linear, {0, 0, 0, 0}, {}, {11, 0}),
                    Contains("n = 11 is outside its declared range [1, 10]"));
  CHECK_THROWS_WITH(run_program<int32_t>(linear, {0, 0, 0, 0}, {}, {3}), Contains("1 variable values; the kernel has 2"));
}

TEST_CASE("REF's float MAX and MIN are the C renderer's: NaN wins, equal operands give the second", "[ref]") {
  float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> in{1.0f, nan, 0.0f, -0.0f};
  std::vector<float> got = run_program<float>(binary_program(Op::MAX, dtypes::float32, 4, const_of(dtypes::float32, -0.0)),
                                              std::vector<float>(4), in);
  CHECK(got[0] == 1.0f);
  CHECK(std::isnan(got[1]));
  CHECK(std::signbit(got[2]));  // max(0, -0): neither is greater, so the second
  std::vector<UOpPtr> min_nan = binary_program(Op::MIN, dtypes::float32, 4, const_of(dtypes::float32, nan));
  got = run_program<float>(min_nan, std::vector<float>(4), in);
  for (float x : got) CHECK(std::isnan(x));
}

// --- what C leaves undefined, REF reports ----------------------------------------------------------

TEST_CASE("REF reports a LOAD or STORE outside its buffer, naming kernel, slot, index and size", "[ref]") {
  std::vector<UOpPtr> linear = binary_program(Op::ADD, dtypes::float32, 5, const_of(dtypes::float32, 1.0));
  CHECK_THROWS_WITH(run_program<float>(linear, std::vector<float>(5), std::vector<float>(4)),
                    Contains("kernel hand") && Contains("LOAD of buffer 1 at index 4") &&
                        Contains("4 elements of float32 (16 bytes)"));
  CHECK_THROWS_WITH(run_program<float>(linear, std::vector<float>(4), std::vector<float>(5)),
                    Contains("STORE of buffer 0 at index 4") && Contains("4 elements"));
}

TEST_CASE("REF's gated load reads the alternative without touching memory", "[ref]") {
  UOpPtr out = global(0, dtypes::float32), in = global(1, dtypes::float32), bound = const_int(6), r = range(0, bound);
  UOpPtr shifted = r - const_int(1), gate = alu(Op::AND, {lt(const_int(-1), shifted), lt(shifted, const_int(4))});
  UOpPtr address = index(in, shifted), alt = const_of(dtypes::float32, -7.0);
  UOpPtr x = UOp::make(Op::LOAD, dtypes::float32, {address, alt, gate});
  std::vector<UOpPtr> linear{out, in, bound, r, shifted, lt(const_int(-1), shifted), lt(shifted, const_int(4)), gate,
                             address, alt, x, index(out, r), store(index(out, r), x), end(r)};
  CHECK(run_program<float>(linear, std::vector<float>(6), {1, 2, 3, 4}) == std::vector<float>{-7, 1, 2, 3, 4, -7});
}

TEST_CASE("REF reports integer division by zero and INT_MIN / -1 instead of trapping", "[ref]") {
  std::vector<UOpPtr> div = binary_program(Op::IDIV, dtypes::int32, 2, const_int(0));
  CHECK_THROWS_WITH(run_program<int32_t>(div, {0, 0}, {7, 8}), Contains("REF: integer division by zero in kernel hand"));
  std::vector<UOpPtr> mod = binary_program(Op::MOD, dtypes::int64, 1, const_int(0, dtypes::int64));
  CHECK_THROWS_WITH(run_program<int64_t>(mod, {0}, {7}), Contains("integer division by zero"));
  std::vector<UOpPtr> overflow = binary_program(Op::IDIV, dtypes::int32, 1, const_int(-1));
  CHECK_THROWS_WITH(run_program<int32_t>(overflow, {0}, {std::numeric_limits<int32_t>::min()}),
                    Contains("integer division overflow in kernel hand"));
  // int8 is promoted to int in C, so -128 / -1 is defined there: it wraps back to -128.
  std::vector<UOpPtr> narrow = binary_program(Op::IDIV, dtypes::int8, 2, const_int(-1, dtypes::int8));
  CHECK(run_program<int8_t>(narrow, {0, 0}, {-128, 5}) == std::vector<int8_t>{-128, -5});
  std::vector<UOpPtr> shift = binary_program(Op::SHL, dtypes::int32, 1, const_int(32));
  CHECK_THROWS_WITH(run_program<int32_t>(shift, {0}, {1}), Contains("shift out of range"));
}

TEST_CASE("REF computes the IR's integer semantics: truncating division, wrapping arithmetic", "[ref]") {
  std::vector<UOpPtr> div = binary_program(Op::IDIV, dtypes::int32, 4, const_int(2));
  CHECK(run_program<int32_t>(div, {0, 0, 0, 0}, {-7, 7, -1, 1}) == std::vector<int32_t>{-3, 3, 0, 0});
  std::vector<UOpPtr> mod = binary_program(Op::MOD, dtypes::int32, 2, const_int(3));
  CHECK(run_program<int32_t>(mod, {0, 0}, {-7, 7}) == std::vector<int32_t>{-1, 1});
  std::vector<UOpPtr> wrap = binary_program(Op::ADD, dtypes::uint8, 2, const_int(200, dtypes::uint8));
  CHECK(run_program<uint8_t>(wrap, {0, 0}, {100, 55}) == std::vector<uint8_t>{44, 255});
}
