// The SPIR-V renderer and the VULKAN device on hand-built linear programs: every ALU op and cast on
// every dtype against the REF interpreter (the IR's semantics, independent of SPIR-V), float math
// against the C library, launch indices, workgroup memory and barriers, push-constant variables,
// accumulators and vector lanes against answers computed here, and the device's errors. Every module
// these tests render goes through spirv-val (skipped, with a warning, where it is not installed).
// Without a Vulkan device the tests that launch kernels are skipped with the reason.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "devices/device.h"
#include "frontend/tensor.h"
#include "helpers.h"
#include "lower/renderers/spirv.h"
#include "lower/renderers/spirv_math.h"
#include "uop/alu.h"
#include "uop/half.h"
#include "uop/process.h"
#include "uop/serialize.h"

using namespace kiln;
using Catch::Matchers::Contains;

namespace {

Device* vulkan() {
  for (const DeviceStatus& s : probe_devices())
    if (s.name == "VULKAN" && !s.available) {
      WARN("VULKAN is not available here, skipped: " << s.reason);
      return nullptr;
    }
  return &get_device("VULKAN");
}

// spirv-val --target-env vulkan1.2 on the module; a failure prints the validator's message.
void check_valid(const std::string& module) {
  static bool missing = false;
  if (missing) return;
  test::TempDir dir("kiln_spirv");
  std::string path = dir.write("m.spv", std::vector<uint8_t>(module.begin(), module.end()));
  ProcessResult r;
  try {
    r = run_process({"spirv-val", "--target-env", "vulkan1.2", path});
  } catch (const Error& e) {
    missing = true;
    WARN("spirv-val is not installed (spirv-tools): modules are not validated: " << e.what());
    return;
  }
  INFO("spirv-val: " << r.output);
  CHECK(r.exit_code == 0);
}

UOpPtr global(int64_t slot, DType element) { return UOp::make(Op::DEFINE_GLOBAL, element.ptr(), {}, slot); }
UOpPtr index(const UOpPtr& buffer, const UOpPtr& i) { return UOp::make(Op::INDEX, buffer->dtype, {buffer, i}); }
UOpPtr load(const UOpPtr& address) { return UOp::make(Op::LOAD, address->dtype.deref(), {address}); }
UOpPtr store(const UOpPtr& address, const UOpPtr& value) { return UOp::make(Op::STORE, dtypes::void_, {address, value}); }
UOpPtr end(const UOpPtr& r) { return UOp::make(Op::END, dtypes::void_, {r}); }
UOpPtr special(const std::string& name, int64_t size) { return UOp::make(Op::SPECIAL, dtypes::int32, {const_int(size)}, name); }

using Bytes = std::vector<uint8_t>;

// Runs a linear program on `device` (VULKAN: rendered to SPIR-V and validated; REF: its text form)
// with the given buffer contents, and returns every buffer's contents afterwards.
std::vector<Bytes> run(Device& device, const std::vector<UOpPtr>& linear, std::vector<Bytes> buffers,
                       const LaunchDims& dims = {}, std::vector<int64_t> var_values = {}) {
  std::vector<UOpPtr> vars;
  for (const UOpPtr& u : linear)
    if (u->op == Op::DEFINE_VAR) vars.push_back(u);
  std::string source;
  if (device.spec().lang == Language::SPIRV) {
    source = render_spirv("test_kernel", linear, buffers.size(), vars);
    check_valid(source);
  } else {
    source = serialize_program(linear);
  }
  std::unique_ptr<Program> program = device.load(device.compile(source, "test_kernel"));
  // The buffers go back to the device even when the launch throws (the tests expect some to).
  struct Buffers {
    Device& device;
    std::vector<RawBuffer> raws;
    ~Buffers() {
      for (RawBuffer& r : raws) device.free(r);
    }
  } held{device, {}};
  for (const Bytes& b : buffers) {
    held.raws.push_back(device.alloc(b.size()));
    device.copy_in(held.raws.back(), b.data(), b.size());
  }
  program->launch(held.raws, var_values, dims, false);
  for (size_t i = 0; i < buffers.size(); ++i) device.copy_out(buffers[i].data(), held.raws[i], buffers[i].size());
  return buffers;
}

// Element i of a buffer of dtype t, as a ConstValue (the way REF reads memory).
ConstValue element(const Bytes& b, DType t, size_t i) {
  uint64_t raw = 0;
  std::memcpy(&raw, b.data() + i * t.itemsize(), t.itemsize());
  switch (t.scalar) {
    case ScalarType::Bool: return raw != 0;
    case ScalarType::Float16: return double{half_bits_to_float(static_cast<uint16_t>(raw))};
    case ScalarType::BFloat16: return double{bf16_bits_to_float(static_cast<uint16_t>(raw))};
    case ScalarType::Float32: return double{std::bit_cast<float>(static_cast<uint32_t>(raw))};
    case ScalarType::Float64: return std::bit_cast<double>(raw);
    default: break;
  }
  if (is_unsigned(t)) return raw;
  int shift = 64 - bits(t.scalar);  // sign-extends narrower integers
  return static_cast<int64_t>(raw << shift) >> shift;
}

// A buffer of dtype t holding `values` (each cast to t first, as the IR casts constants).
Bytes buffer_of(DType t, const std::vector<ConstValue>& values) {
  Bytes out(values.size() * t.itemsize());
  for (size_t i = 0; i < values.size(); ++i) {
    ConstValue v = cast_const(values[i], t);
    uint64_t raw = 0;
    switch (t.scalar) {
      case ScalarType::Bool: raw = std::get<bool>(v); break;
      case ScalarType::Float16: raw = float_to_half_bits(static_cast<float>(std::get<double>(v))); break;
      case ScalarType::BFloat16: raw = float_to_bf16_bits(static_cast<float>(std::get<double>(v))); break;
      case ScalarType::Float32: raw = std::bit_cast<uint32_t>(static_cast<float>(std::get<double>(v))); break;
      case ScalarType::Float64: raw = std::bit_cast<uint64_t>(std::get<double>(v)); break;
      default: raw = is_unsigned(t) ? std::get<uint64_t>(v) : static_cast<uint64_t>(std::get<int64_t>(v)); break;
    }
    std::memcpy(out.data() + i * t.itemsize(), &raw, t.itemsize());
  }
  return out;
}

// Inputs that reach the edges: signed zero, subnormals, huge values, NaN and inf, integer limits.
std::vector<ConstValue> edge_values(DType t) {
  if (is_bool(t)) return {true, false, true, true, false, false, true, false};
  if (is_float(t))
    return {0.0, -0.0, 1.0, -1.0, 0.5, 3.75, -2.25, 1e-3, 123.456, -1e5, 1e30, -3e38, 1e-40, 65504.0, 7e4, -0.1, 2.5,
            std::nan(""), INFINITY, -INFINITY, 1e300, 5e-324, 0.3333333333333333, -7.0};
  std::vector<ConstValue> v{int64_t{0}, int64_t{1}, int64_t{-1}, int64_t{2}, int64_t{-7}, int64_t{100}, int64_t{-128},
                            int64_t{127}, int64_t{255}, int64_t{32767}, int64_t{-32768}, int64_t{INT32_MAX},
                            int64_t{INT32_MIN}, int64_t{3}, int64_t{-3000000000LL}, INT64_MIN, INT64_MAX,
                            int64_t{123456789012LL}, int64_t{6}, int64_t{-5}};
  return v;
}

bool same(const ConstValue& got, const ConstValue& want, double rtol) {
  if (got == want) return true;
  if (!std::holds_alternative<double>(want)) return false;
  double g = std::get<double>(got), w = std::get<double>(want);
  if (std::isnan(w) || std::isnan(g)) return std::isnan(w) && std::isnan(g);
  if (std::isinf(w) || std::isinf(g)) return g == w;
  return rtol > 0 && std::fabs(g - w) <= rtol * std::fabs(w) + 1e-300;
}

// One elementwise kernel: out[i] = op(a[i], b[i](, c[i])) over n elements, on REF and VULKAN; every
// element must match (floats: exactly, or within rtol; NaN matches NaN).
void compare_with_ref(Device& vk, Op op, DType in, DType out, std::vector<std::vector<ConstValue>> inputs, double rtol = 0) {
  size_t n = inputs[0].size();
  std::vector<UOpPtr> linear{global(0, out)}, operands;
  std::vector<Bytes> buffers{Bytes(n * out.itemsize())};
  UOpPtr r = range(0, const_int(static_cast<int64_t>(n)));
  for (size_t k = 0; k < inputs.size(); ++k) {
    DType t = op == Op::WHERE && k == 0 ? dtypes::bool_ : in;
    linear.push_back(global(static_cast<int64_t>(k + 1), t));
    buffers.push_back(buffer_of(t, inputs[k]));
  }
  linear.push_back(r);
  for (size_t k = 0; k < inputs.size(); ++k) {
    linear.push_back(index(linear[k + 1], r));
    operands.push_back(load(linear.back()));
    linear.push_back(operands.back());
  }
  UOpPtr value = UOp::make(op, out, operands);
  linear.insert(linear.end(), {value, index(linear[0], r), store(index(linear[0], r), value), end(r)});
  std::vector<Bytes> want = run(get_device("REF"), linear, buffers), got = run(vk, linear, buffers);
  for (size_t i = 0; i < n; ++i) {
    ConstValue g = element(got[0], out, i), w = element(want[0], out, i);
    INFO(op_name(op) << " " << in.name() << " -> " << out.name() << ", element " << i << ": inputs "
                     << const_to_string(inputs[0][i], in) << (inputs.size() > 1 ? ", " + const_to_string(inputs[1][i], in) : "")
                     << "; got " << const_to_string(g, out) << ", REF " << const_to_string(w, out));
    CHECK(same(g, w, rtol));
  }
}

std::vector<ConstValue> rotated(std::vector<ConstValue> v, size_t by) {
  std::rotate(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(by % v.size()), v.end());
  return v;
}

}  // namespace

TEST_CASE("spirv: every cast between the 13 dtypes matches REF, edge values included", "[spirv]") {
  Device* vk = vulkan();
  if (!vk) return;
  for (DType from : all_scalar_dtypes())
    for (DType to : all_scalar_dtypes()) compare_with_ref(*vk, Op::CAST, from, to, {edge_values(from)});
}

TEST_CASE("spirv: integer and bool ops wrap, divide and shift as REF does", "[spirv]") {
  Device* vk = vulkan();
  if (!vk) return;
  for (DType t : all_scalar_dtypes()) {
    if (is_float(t)) continue;
    std::vector<Op> ops = is_bool(t) ? std::vector<Op>{Op::AND, Op::OR, Op::XOR, Op::CMPNE, Op::CMPEQ, Op::CMPLT, Op::MAX, Op::MIN}
                                     : std::vector<Op>{Op::NEG, Op::ADD, Op::SUB, Op::MUL, Op::IDIV, Op::MOD, Op::MAX, Op::MIN,
                                                       Op::CMPLT, Op::CMPNE, Op::CMPEQ, Op::AND, Op::OR, Op::XOR, Op::SHL, Op::SHR};
    for (Op op : ops) {
      std::vector<ConstValue> a = edge_values(t), b = rotated(edge_values(t), 5);
      for (size_t i = 0; i < a.size(); ++i) {
        ConstValue bt = cast_const(b[i], t), at = cast_const(a[i], t);
        if ((op == Op::IDIV || op == Op::MOD) && as_double(bt) == 0) b[i] = int64_t{3};  // undefined: not compared
        if ((op == Op::IDIV || op == Op::MOD) && as_double(bt) == -1 && at == lowest(t) && bits(t.scalar) >= 32)
          b[i] = int64_t{2};  // traps in C (int8/int16 wrap, and are compared)
        if (op == Op::SHL || op == Op::SHR) b[i] = int64_t{static_cast<int64_t>(i) % bits(t.scalar)};
      }
      DType out = is_comparison(op) ? dtypes::bool_ : t;
      compare_with_ref(*vk, op, t, out, op == Op::NEG ? std::vector<std::vector<ConstValue>>{a} : std::vector<std::vector<ConstValue>>{a, b});
      if (is_comparison(op) || op == Op::MAX || op == Op::MIN) compare_with_ref(*vk, op, t, out, {a, a});  // ties
    }
    compare_with_ref(*vk, Op::WHERE, t, t, {edge_values(dtypes::bool_), edge_values(t), rotated(edge_values(t), 3)});
  }
}

TEST_CASE("spirv: float ops match REF exactly, NaN, inf and signed zero included", "[spirv]") {
  Device* vk = vulkan();
  if (!vk) return;
  for (DType t : {dtypes::float16, dtypes::bfloat16, dtypes::float32, dtypes::float64}) {
    std::vector<ConstValue> a = edge_values(t), b = rotated(edge_values(t), 7);
    for (Op op : {Op::ADD, Op::SUB, Op::MUL, Op::FDIV, Op::MAX, Op::MIN, Op::CMPLT, Op::CMPNE, Op::CMPEQ}) {
      compare_with_ref(*vk, op, t, is_comparison(op) ? dtypes::bool_ : t, {a, b});
      compare_with_ref(*vk, op, t, is_comparison(op) ? dtypes::bool_ : t, {a, a});  // ties, 0 vs 0, NaN vs NaN
      compare_with_ref(*vk, op, t, is_comparison(op) ? dtypes::bool_ : t, {a, rotated(a, 1)});  // includes 0 vs -0
    }
    for (Op op : {Op::NEG, Op::TRUNC, Op::RECIP}) compare_with_ref(*vk, op, t, t, {a});
    compare_with_ref(*vk, Op::WHERE, t, t, {edge_values(dtypes::bool_), a, b});
    compare_with_ref(*vk, Op::MULACC, t, t, {a, b, rotated(a, 3)}, 1e-15);  // C rounds twice, REF once
  }
}

// Unsigned integers of fixed width, 32-bit limbs, least significant first: just what the table's check needs.
struct Big {
  std::vector<uint64_t> limb;  // each < 2^32
  explicit Big(size_t limbs) : limb(limbs, 0) {}
  static Big power_of_two(size_t limbs, size_t bit) {
    Big b(limbs);
    b.limb.at(bit / 32) = uint64_t{1} << (bit % 32);
    return b;
  }
  Big div(uint64_t d) const {  // floor(*this / d), d < 2^32
    Big q(limb.size());
    uint64_t rem = 0;
    for (size_t i = limb.size(); i-- > 0;) {
      uint64_t cur = (rem << 32) | limb[i];
      q.limb[i] = cur / d;
      rem = cur % d;
    }
    return q;
  }
  Big add(const Big& o, bool subtract = false) const {  // *this + o or *this - o (no sign: *this >= o)
    Big r(limb.size());
    int64_t carry = 0;
    for (size_t i = 0; i < limb.size(); ++i) {
      int64_t v = int64_t(limb[i]) + (subtract ? -int64_t(o.limb[i]) : int64_t(o.limb[i])) + carry;
      carry = v < 0 ? -1 : v >> 32;
      r.limb[i] = uint64_t(v) & 0xffffffffu;
    }
    return r;
  }
  Big mul(const Big& o) const {
    Big r(limb.size());
    for (size_t i = 0; i < limb.size(); ++i) {
      uint64_t carry = 0;
      for (size_t j = 0; i + j < limb.size(); ++j) {
        uint64_t v = r.limb[i + j] + limb[i] * o.limb[j] + carry;
        r.limb[i + j] = v & 0xffffffffu;
        carry = v >> 32;
      }
    }
    return r;
  }
  bool less(const Big& o) const {
    for (size_t i = limb.size(); i-- > 0;)
      if (limb[i] != o.limb[i]) return limb[i] < o.limb[i];
    return false;
  }
};

// atan(1/n) * 2^bits by its series, each term truncated (a few units low in all).
Big atan_inverse(size_t limbs, size_t bits, uint64_t n) {
  Big total(limbs), term = Big::power_of_two(limbs, bits).div(n);
  for (uint64_t k = 0; std::any_of(term.limb.begin(), term.limb.end(), [](uint64_t l) { return l != 0; }); ++k) {
    total = total.add(term.div(2 * k + 1), k % 2 == 1);
    term = term.div(n * n);
  }
  return total;
}

// sin's large-argument reduction on Vulkan reads 2/pi's bits from a table: a wrong bit anywhere would
// put some x's quadrant or remainder off. pi * 2^B from Machin's formula (pi/4 = 4 atan 1/5 - atan 1/239)
// in integers, then T (the table's fraction bits as an integer, 2/pi * 2^K truncated) must satisfy
// T * pi <= 2^(K+1) < (T + 1) * pi, to within pi's error of a few units in 2^-B.
TEST_CASE("spirv: the table of 2/pi's bits is 2/pi, every bit of it", "[spirv]") {
  std::span<const uint32_t> words = two_over_pi_words();
  REQUIRE(words.size() > 4);
  CHECK(words[0] == 0);
  CHECK(words[1] == 0);
  const size_t k_bits = 32 * (words.size() - 2), b_bits = k_bits + 64, limbs = (k_bits + b_bits) / 32 + 4;
  Big pi = atan_inverse(limbs, b_bits, 5).mul(Big::power_of_two(limbs, 4));  // 16 atan(1/5)
  pi = pi.add(atan_inverse(limbs, b_bits, 239).mul(Big::power_of_two(limbs, 2)), true);
  Big table(limbs);
  for (size_t i = 2; i < words.size(); ++i) table.limb[words.size() - 1 - i] = words[i];
  Big two = Big::power_of_two(limbs, k_bits + b_bits + 1);
  Big low = table.mul(pi), high = table.add(Big::power_of_two(limbs, 0)).mul(pi);
  // Each series term is truncated twice (~300 terms for 1/5): pi is low by well under 2^16 units, so
  // T * pi by under 2^(k_bits + 16). One unit of T moves T * pi by pi * 2^B, about 2^(k_bits + 65).
  Big slack = Big::power_of_two(limbs, k_bits + 20);
  CHECK(low.less(two.add(slack)));
  CHECK(two.less(high.add(slack)));
  // So one unit off in the last word fails the check.
  Big off = table.add(Big::power_of_two(limbs, 0));
  CHECK_FALSE(off.mul(pi).less(two.add(slack)));
}

TEST_CASE("spirv: exp2, log2, sin, sqrt and pow are accurate in float32 and float64", "[spirv]") {
  Device* vk = vulkan();
  if (!vk) return;
  std::vector<ConstValue> wide, positive, angles, bases, exponents;
  for (int i = 0; i < 200; ++i) {
    double u = (i * 0.6180339887498949) - std::floor(i * 0.6180339887498949);  // spread over [0, 1)
    wide.push_back(-140 + 270 * u);
    positive.push_back(std::ldexp(0.5 + u, (i % 80) - 40));
    angles.push_back(-40 + 80 * u);
    bases.push_back(0.05 + 20 * u);
    exponents.push_back(-6 + 12 * std::fmod(u * 7, 1.0));
  }
  for (double special : std::vector<double>{0.0, -0.0, 1.0, -1.0, 2.0, 0.5, INFINITY, -INFINITY, std::nan(""), 1e-40, -3.0, 1e-310}) {
    for (auto* list : {&wide, &positive, &angles, &bases, &exponents}) list->push_back(special);
  }
  bases.insert(bases.end(), {-2.0, -2.0, -0.0, -0.0, 0.0, -INFINITY, -1.0, 1.0, std::nan(""), -8.0});
  exponents.insert(exponents.end(), {3.0, 0.5, -1.0, 0.5, -2.0, 3.0, INFINITY, std::nan(""), 0.0, -1.0 / 3});
  bases.resize(exponents.size(), 1.5);
  for (DType t : {dtypes::float32, dtypes::float64}) {
    // float32: REF rounds a double result once (correctly rounded); SPIR-V works in float32 (a few ulp).
    double rtol = t == dtypes::float32 ? 4e-7 : 4e-15;
    compare_with_ref(*vk, Op::EXP2, t, t, {wide}, rtol);
    compare_with_ref(*vk, Op::LOG2, t, t, {positive}, rtol);
    compare_with_ref(*vk, Op::SIN, t, t, {angles}, rtol);
    compare_with_ref(*vk, Op::SQRT, t, t, {positive}, rtol);
    compare_with_ref(*vk, Op::SQRT, t, t, {angles}, rtol);  // negative inputs give NaN
    compare_with_ref(*vk, Op::POW, t, t, {bases, exponents}, t == dtypes::float32 ? 4e-6 : 1e-13);
  }
}

TEST_CASE("spirv: launch indices: gidx and lidx in two dimensions", "[spirv]") {
  Device* vk = vulkan();
  if (!vk) return;
  // out[((g1*2 + l1) * 3 + g0) * 4 + l0] = that same position: every work-item writes its own id.
  UOpPtr out = global(0, dtypes::int32);
  UOpPtr g0 = special("gidx0", 3), g1 = special("gidx1", 5), l0 = special("lidx0", 4), l1 = special("lidx1", 2);
  UOpPtr position = ((g1 * 2 + l1) * 3 + g0) * 4 + l0;
  std::vector<UOpPtr> linear{out, g0, g1, l0, l1};
  for (const UOpPtr& u : toposort(position))
    if (u->op != Op::SPECIAL && u->op != Op::CONST) linear.push_back(u);
  linear.push_back(index(out, position));
  linear.push_back(store(index(out, position), position));
  std::vector<Bytes> got = run(*vk, linear, {Bytes(120 * 4, 0xff)}, LaunchDims{{3, 5, 1}, {4, 2, 1}});
  for (size_t i = 0; i < 120; ++i) {
    INFO("element " << i);
    CHECK(as_int64(element(got[0], dtypes::int32, i)) == static_cast<int64_t>(i));
  }
  CHECK_THROWS_WITH(run(*vk, linear, {Bytes(120 * 4)}, LaunchDims{{3, 5, 1}, {8, 1, 1}}),
                    Contains("local[0] = 8") && Contains("4x2x1"));
}

TEST_CASE("spirv: a workgroup tree sum through shared memory and barriers", "[spirv]") {
  Device* vk = vulkan();
  if (!vk) return;
  // Workgroup g sums in[g*16 .. g*16+15]: each work-item stores its element in local memory, then in
  // rounds of s = 8, 4, 2, 1 the items below s add the element s further on; item 0 writes the total.
  constexpr int64_t kGroups = 6, kSize = 16;
  UOpPtr out = global(0, dtypes::float32), in = global(1, dtypes::float32);
  UOpPtr shared = UOp::make(Op::DEFINE_LOCAL, dtypes::float32.ptr(AddrSpace::Local), {const_int(kSize)}, int64_t{0});
  UOpPtr g = special("gidx0", kGroups), l = special("lidx0", kSize);
  UOpPtr at = g * kSize + l;
  std::vector<UOpPtr> linear{out, in, shared, g, l, g * kSize, at, index(in, at), load(index(in, at)), index(shared, l),
                             store(index(shared, l), load(index(in, at)))};
  UOpPtr last = linear.back();
  for (int64_t s = kSize / 2; s >= 1; s /= 2) {
    UOpPtr barrier = UOp::make(Op::BARRIER, dtypes::void_, {last});
    UOpPtr active = lt(l, const_int(s)), other = l + s;
    UOpPtr mine = UOp::make(Op::LOAD, dtypes::float32, {index(shared, l), barrier});
    UOpPtr theirs = UOp::make(Op::LOAD, dtypes::float32, {index(shared, other), const_of(dtypes::float32, 0.0), active});
    UOpPtr sum = mine + theirs;
    UOpPtr write = UOp::make(Op::STORE, dtypes::void_, {index(shared, l), sum, active});
    UOpPtr after = UOp::make(Op::BARRIER, dtypes::void_, {write});
    linear.insert(linear.end(), {barrier, active, other, mine, index(shared, other), theirs, sum, write, after});
    last = after;
  }
  UOpPtr total = UOp::make(Op::LOAD, dtypes::float32, {index(shared, const_int(0)), last});
  UOpPtr first = eq(l, const_int(0));
  linear.insert(linear.end(), {index(shared, const_int(0)), total, first, index(out, g),
                               UOp::make(Op::STORE, dtypes::void_, {index(out, g), total, first})});
  std::vector<ConstValue> values;
  for (int64_t i = 0; i < kGroups * kSize; ++i) values.push_back(static_cast<double>((i * 37) % 23) - 11.0);
  std::vector<Bytes> got = run(*vk, linear, {Bytes(kGroups * 4), buffer_of(dtypes::float32, values)},
                               LaunchDims{{kGroups, 1, 1}, {kSize, 1, 1}});
  for (int64_t gi = 0; gi < kGroups; ++gi) {
    double want = 0;
    for (int64_t i = 0; i < kSize; ++i) want += as_double(values[static_cast<size_t>(gi * kSize + i)]);
    INFO("workgroup " << gi);
    CHECK(as_double(element(got[0], dtypes::float32, static_cast<size_t>(gi))) == want);
  }
}

TEST_CASE("spirv: push-constant variables bound loops and offsets", "[spirv]") {
  Device* vk = vulkan();
  if (!vk) return;
  // out[i] = i * k + 1000 for i < n, with n (int32) and k (int64) given at launch.
  UOpPtr out = global(0, dtypes::int64), n = var("n", 0, 64), k = var("k", -100, 100, dtypes::int64);
  UOpPtr r = range(0, n), value = cast(r, dtypes::int64) * k + UOp::make(Op::CONST, dtypes::int64, {}, ConstValue{int64_t{1000}});
  std::vector<UOpPtr> linear{out, n, k, r};
  for (const UOpPtr& u : toposort(value))
    if (u->op != Op::CONST && u->op != Op::DEFINE_VAR && u->op != Op::RANGE) linear.push_back(u);
  linear.insert(linear.end(), {index(out, r), store(index(out, r), value), end(r)});
  std::vector<Bytes> got = run(*vk, linear, {Bytes(64 * 8, 0)}, LaunchDims{}, {40, -7});
  for (int64_t i = 0; i < 64; ++i) {
    INFO("element " << i);
    CHECK(as_int64(element(got[0], dtypes::int64, static_cast<size_t>(i))) == (i < 40 ? i * -7 + 1000 : 0));
  }
  CHECK_THROWS_WITH(run(*vk, linear, {Bytes(64 * 8)}, LaunchDims{}, {40}), Contains("1 variable values") && Contains("has 2"));
}

TEST_CASE("spirv: vector accumulators, lanes and gated loads", "[spirv]") {
  Device* vk = vulkan();
  if (!vk) return;
  // out[i] (4 lanes of float32 per i) = sum over j < 5 of in[(i*5 + j)*4 + lane] (0 where j == 3).
  DType v4 = dtypes::float32.vec(4);
  UOpPtr out = global(0, dtypes::float32), in = global(1, dtypes::float32);
  UOpPtr i = range(0, const_int(3)), zero = UOp::make(Op::CONST, v4, {}, ConstValue{0.0});
  UOpPtr acc = UOp::make(Op::DEFINE_REG, v4.ptr(AddrSpace::Reg), {zero, i}, int64_t{0});
  UOpPtr j = range(1, const_int(5));
  UOpPtr at = (i * 5 + j) * 4;
  UOpPtr address = UOp::make(Op::INDEX, v4.ptr(), {in, at});
  UOpPtr x = UOp::make(Op::LOAD, v4, {address, zero, ne(j, const_int(3))});
  UOpPtr before = UOp::make(Op::LOAD, v4, {acc, j});
  UOpPtr sum = before + x;
  UOpPtr assign = UOp::make(Op::ASSIGN, v4, {acc, sum, j});
  UOpPtr after = UOp::make(Op::LOAD, v4, {acc, end(j)});
  UOpPtr reversed = UOp::make(Op::VECTORIZE, v4, {UOp::make(Op::GEP, dtypes::float32, {after}, int64_t{3}),
                                                  UOp::make(Op::GEP, dtypes::float32, {after}, int64_t{2}),
                                                  UOp::make(Op::GEP, dtypes::float32, {after}, int64_t{1}),
                                                  UOp::make(Op::GEP, dtypes::float32, {after}, int64_t{0})});
  UOpPtr target = UOp::make(Op::INDEX, v4.ptr(), {out, i * 4});
  std::vector<UOpPtr> linear{out, in, i, zero, acc, j, i * 5, i * 5 + j, at, address, ne(j, const_int(3)), x, before,
                             sum, assign, end(j), after};
  for (const UOpPtr& g : reversed->src) linear.push_back(g);
  linear.insert(linear.end(), {reversed, i * 4, target, store(target, reversed), end(i)});
  std::vector<ConstValue> values;
  for (int k = 0; k < 60; ++k) values.push_back(k * 0.25 - 3);
  // (REF keeps one slot for a DEFINE_REG, so a vector accumulator is checked against sums computed here.)
  std::vector<Bytes> got = run(*vk, linear, {Bytes(12 * 4), buffer_of(dtypes::float32, values)});
  for (int row = 0; row < 3; ++row)
    for (int m = 0; m < 4; ++m) {
      double want = 0;
      for (int jj = 0; jj < 5; ++jj)
        if (jj != 3) want += as_double(values[static_cast<size_t>((row * 5 + jj) * 4 + 3 - m)]);
      INFO("row " << row << " lane " << m);
      CHECK(as_double(element(got[0], dtypes::float32, static_cast<size_t>(row * 4 + m))) == want);
    }
}

TEST_CASE("spirv: device errors name the device, the kernel and the limit", "[spirv]") {
  Device* vk = vulkan();
  if (!vk) return;
  CHECK_THROWS_AS(vk->compile("not a module", "bad_kernel"), CompileError);
  CHECK_THROWS_WITH(vk->compile(std::string(20, '\0'), "bad_kernel"), Contains("VULKAN") && Contains("bad_kernel") && Contains("SPIR-V"));
  int64_t limit = vk->spec().max_buffer_bytes;
  REQUIRE(limit < INT64_MAX);
  CHECK_THROWS_WITH(vk->alloc(static_cast<size_t>(limit) + 1),
                    Contains(std::to_string(limit + 1)) && Contains(std::to_string(limit)) && Contains("VULKAN"));
  CHECK_THROWS_WITH(render_spirv("k", {UOp::make(Op::IF, dtypes::void_, {const_bool(true)})}, 0, {}),
                    Contains("not implemented yet") && Contains("k"));
  CHECK(vk->spec().vector_bytes == 0);
  CHECK(vk->spec().max_local > 0);
}
TEST_CASE("spirv: long loops run to the end, or fail to compile where the driver would cut them short", "[spirv]") {
  Device* vk = vulkan();
  if (!vk) return;
  auto count_up = [](int64_t n) {  // out[i] = i for i < n
    UOpPtr out = global(0, dtypes::float32), r = range(0, const_int(n)), value = cast(r, dtypes::float32);
    return std::vector<UOpPtr>{out, r, value, index(out, r), store(index(out, r), value), end(r)};
  };
  std::vector<Bytes> got = run(*vk, count_up(60000), {Bytes(60000 * 4)});
  CHECK(as_double(element(got[0], dtypes::float32, 59999)) == 59999.0);
  CHECK(as_double(element(got[0], dtypes::float32, 31234)) == 31234.0);
  if (vk->spec().arch.find("llvmpipe") == std::string::npos) return;
  // lavapipe ends an invocation's loops after 65535 iterations in all: a clear error, not wrong numbers.
  CHECK_THROWS_WITH(run(*vk, count_up(70000), {Bytes(70000 * 4)}), Contains("70000 loop iterations") && Contains("65535"));
}

TEST_CASE("spirv: lowered reductions (shared-memory GROUP opts where the heuristics pick them) and copies between devices", "[spirv]") {
  Device* vk = vulkan();
  if (!vk) return;
  for (Shape shape : std::vector<Shape>{{1, 65536}, {3, 8192}, {64, 300}}) {
    std::vector<float> v(static_cast<size_t>(shape[0] * shape[1]));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 37) % 23) - 11.0f;  // sums are exact
    std::vector<float> got = Tensor::from_vector(v, shape, "VULKAN").sum({1}).to("CPU").to_vector<float>();
    REQUIRE(got.size() == static_cast<size_t>(shape[0]));
    for (int64_t r = 0; r < shape[0]; ++r) {
      double want = 0;
      for (int64_t c = 0; c < shape[1]; ++c) want += v[static_cast<size_t>(r * shape[1] + c)];
      INFO("shape " << shape[0] << "x" << shape[1] << " row " << r);
      CHECK(got[static_cast<size_t>(r)] == want);
    }
  }
  // Every pair of devices available here, through the host where needed.
  std::vector<std::string> names;
  for (const DeviceStatus& s : probe_devices())
    if (s.available) names.push_back(s.name);
  Tensor start = Tensor::from_vector<int32_t>({1, -2, 3, 40000}, {4}, "VULKAN");
  for (const std::string& to : names) {
    INFO("VULKAN -> " << to << " -> VULKAN");
    CHECK((start.to(to) * 2).to("VULKAN").to_vector<int32_t>() == std::vector<int32_t>{2, -4, 6, 80000});
  }
}
