#include "search/verify.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <unordered_map>
#include <vector>

#include "lower/opts.h"
#include "uop/half.h"

namespace kiln {

namespace {

// One DEFINE_GLOBAL slot of the kernel: its element type and how many elements it must hold.
struct Slot {
  DType element;
  int64_t elements = 0;
  bool written = false;
};

// The most loop iterations a kernel checked alone may run (each of its two lowerings once): about a
// minute of the plain lowering's scalar loops. A matmul 2048^3 is 2^33.
constexpr double kMaxCheckedIterations = 68719476736.0;  // 2^36
constexpr int64_t kMaxIndexShift = int64_t{1} << 40;      // past any buffer verify would allocate

// ast with every buffer's indexes moved up so that none can be below 0, whatever the gates say. kiln's
// own kernels index below 0 only on paper (a padded conv's gated loads), but a stored AST is untrusted:
// an ungated INDEX of -5 would read before the buffer. A walk, not a rewrite: each original INDEX moves
// exactly once, and a moved index may equal another original one (a rule would move it again).
UOpPtr indexes_from_zero(const UOpPtr& ast) {
  std::map<int64_t, int64_t> lowest;  // slot -> lowest index
  for (const UOpPtr& u : toposort(ast))  // analysis: the lowest index per buffer
    if (u->op == Op::INDEX && u->src[0]->op == Op::DEFINE_GLOBAL) {
      int64_t& low = lowest.try_emplace(u->src[0]->arg_as<int64_t>(), 0).first->second;
      low = std::min(low, u->src[1]->vmin());
    }
  if (std::none_of(lowest.begin(), lowest.end(), [](const auto& kv) { return kv.second < 0; })) return ast;
  for (const auto& [slot, low] : lowest)
    if (low < -kMaxIndexShift)
      throw Error(cat("verify_opts: buffer ", slot, " is indexed as low as ", low, " (an index with no lower bound?); such ",
                      "kernels cannot be checked alone"));
  std::unordered_map<const UOp*, UOpPtr> moved;
  for (const UOpPtr& u : toposort(ast)) {  // a walk: substitute() could serve now
    std::vector<UOpPtr> src;
    for (const UOpPtr& s : u->src) src.push_back(moved.at(s.get()));
    UOpPtr n = u->with_src(std::move(src));
    if (n->op == Op::INDEX && n->src[0]->op == Op::DEFINE_GLOBAL)
      if (int64_t low = lowest.at(n->src[0]->arg_as<int64_t>()); low < 0)
        n = n->with_src({n->src[0], alu(Op::ADD, {n->src[1], const_int(-low, n->src[1]->dtype)})});
    moved[u.get()] = n;
  }
  return moved.at(ast.get());
}

std::vector<Slot> slots_of(const UOpPtr& ast) {
  std::map<int64_t, Slot> slots;
  for (const UOpPtr& u : toposort(ast)) {  // analysis: the slots and their sizes
    if (u->op == Op::DEFINE_GLOBAL) slots.emplace(u->arg_as<int64_t>(), Slot{u->dtype.deref(), 1, false});
    if (u->op == Op::INDEX && u->src[0]->op == Op::DEFINE_GLOBAL) {
      Slot& s = slots[u->src[0]->arg_as<int64_t>()];
      s.elements = std::max(s.elements, u->src[1]->vmax() + 1);
    }
    if (u->op == Op::STORE && u->src[0]->op == Op::INDEX) slots[u->src[0]->src[0]->arg_as<int64_t>()].written = true;
  }
  std::vector<Slot> out;
  for (auto& [slot, s] : slots) {
    KILN_ASSERT(slot == static_cast<int64_t>(out.size()), "a kernel's DEFINE_GLOBAL slots are numbered 0..n-1");
    KILN_ASSERT(s.element.count == 1, "kernel ASTs hold scalar buffers");
    out.push_back(s);
  }
  return out;
}

double get_element(const uint8_t* p, ScalarType t) {
  auto read = [p]<typename T>(T) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (t) {
    case ScalarType::Bool: return read(uint8_t{}) != 0;
    case ScalarType::Int8: return read(int8_t{});
    case ScalarType::Int16: return read(int16_t{});
    case ScalarType::Int32: return read(int32_t{});
    case ScalarType::Int64: return static_cast<double>(read(int64_t{}));
    case ScalarType::UInt8: return read(uint8_t{});
    case ScalarType::UInt16: return read(uint16_t{});
    case ScalarType::UInt32: return read(uint32_t{});
    case ScalarType::UInt64: return static_cast<double>(read(uint64_t{}));
    case ScalarType::Float16: return half_bits_to_float(read(uint16_t{}));
    case ScalarType::BFloat16: return bf16_bits_to_float(read(uint16_t{}));
    case ScalarType::Float32: return read(float{});
    case ScalarType::Float64: return read(double{});
    case ScalarType::Void: break;
  }
  KILN_ASSERT(false, "a buffer holds values, not void");
}

void set_element(uint8_t* p, ScalarType t, double v) {
  auto write = [p]<typename T>(T x) { std::memcpy(p, &x, sizeof x); };
  switch (t) {
    case ScalarType::Bool: return write(static_cast<uint8_t>(v != 0));
    case ScalarType::Int8: return write(static_cast<int8_t>(v));
    case ScalarType::Int16: return write(static_cast<int16_t>(v));
    case ScalarType::Int32: return write(static_cast<int32_t>(v));
    case ScalarType::Int64: return write(static_cast<int64_t>(v));
    case ScalarType::UInt8: return write(static_cast<uint8_t>(v));
    case ScalarType::UInt16: return write(static_cast<uint16_t>(v));
    case ScalarType::UInt32: return write(static_cast<uint32_t>(v));
    case ScalarType::UInt64: return write(static_cast<uint64_t>(v));
    case ScalarType::Float16: return write(float_to_half_bits(static_cast<float>(v)));
    case ScalarType::BFloat16: return write(float_to_bf16_bits(static_cast<float>(v)));
    case ScalarType::Float32: return write(static_cast<float>(v));
    case ScalarType::Float64: return write(v);
    case ScalarType::Void: break;
  }
  KILN_ASSERT(false, "a buffer holds values, not void");
}

std::vector<uint8_t> random_contents(const Slot& s, std::mt19937_64& rng) {
  size_t size = s.element.itemsize();
  std::vector<uint8_t> bytes(static_cast<size_t>(s.elements) * size);
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> small(1, 9), bit(0, 1);
  for (size_t i = 0; i < static_cast<size_t>(s.elements); ++i) {
    double v = is_float(s.element) ? real(rng) : is_bool(s.element) ? bit(rng) : small(rng);
    set_element(bytes.data() + i * size, s.element.scalar, v);
  }
  return bytes;
}

// Runs one lowered kernel on fresh buffers holding `inputs`; returns every buffer's contents after.
std::vector<std::vector<uint8_t>> run(Device& device, const LoweredKernel& k, const std::vector<std::vector<uint8_t>>& inputs) {
  Binary binary = device.compile(k.source, k.name);
  std::unique_ptr<Program> program = device.load(binary);
  std::vector<RawBuffer> bufs;
  std::vector<std::vector<uint8_t>> out = inputs;
  try {
    for (const std::vector<uint8_t>& in : inputs) {
      bufs.push_back(device.alloc(in.size()));
      device.copy_in(bufs.back(), in.data(), in.size());
    }
    program->launch(bufs, largest_values(k), k.dims, false);
    device.synchronize();
    for (size_t i = 0; i < bufs.size(); ++i) device.copy_out(out[i].data(), bufs[i], out[i].size());
  } catch (...) {
    for (RawBuffer b : bufs) device.free(b);
    throw;
  }
  for (RawBuffer b : bufs) device.free(b);
  return out;
}

}  // namespace

std::vector<int64_t> largest_values(const LoweredKernel& kernel) {
  std::vector<int64_t> out;
  for (const UOpPtr& v : kernel.vars) out.push_back(v->var().max);
  return out;
}

double loop_iterations(const UOpPtr& ast) {
  double iterations = 1;
  for (const UOpPtr& u : toposort(ast))  // analysis: multiplies loop sizes, rewrites nothing
    if (u->op == Op::RANGE) iterations *= static_cast<double>(u->src[0]->vmax());
  return iterations;
}

OptsCheck verify_opts(const UOpPtr& original, Device& device, std::span<const Opt> opts, uint64_t seed, size_t max_buffer_bytes) {
  // Only here, for kernels checked alone (`kiln cache verify`, whose ASTs are untrusted); search checks its
  // own winners through compare_kernels whatever their size.
  double iterations = loop_iterations(original);
  if (iterations > kMaxCheckedIterations)
    throw Error(cat("verify_opts: kernel ", detail::kernel_name(original), " runs up to ", iterations,
                    " loop iterations (more than 2^36, about a minute); such kernels are checked by running the model, not alone"));
  UOpPtr ast = indexes_from_zero(original);
  Lowering tuned = lower_with_opts(ast, device.spec(), opts);
  if (!tuned.kernel) return {OptsCheck::Outcome::CouldNotApply, tuned.rejected};
  Lowering plain = lower_with_opts(ast, device.spec(), {});
  KILN_ASSERT(plain.kernel.has_value(), "every kernel lowers with no opts: ", plain.rejected);
  return compare_kernels(ast, device, *plain.kernel, *tuned.kernel, seed, max_buffer_bytes);
}

OptsCheck compare_kernels(const UOpPtr& ast, Device& device, const LoweredKernel& reference,
                          const LoweredKernel& candidate, uint64_t seed, size_t max_buffer_bytes, std::span<const int64_t> elements) {
  std::vector<Slot> slots = slots_of(ast);
  if (!elements.empty()) {
    if (elements.size() != slots.size())
      throw InternalError(cat("compare_kernels: kernel ", reference.name, " has ", slots.size(), " buffers, given ", elements.size(), " sizes"));
    for (size_t i = 0; i < slots.size(); ++i) slots[i].elements = elements[i];
  }
  std::mt19937_64 rng(seed);
  std::vector<std::vector<uint8_t>> inputs;
  for (size_t i = 0; i < slots.size(); ++i) {
    size_t bytes = static_cast<size_t>(slots[i].elements) * slots[i].element.itemsize();
    if (slots[i].elements <= 0 || bytes > max_buffer_bytes)
      throw Error(cat("verify_opts: kernel ", reference.name, ": buffer ", i, " would need ", slots[i].elements,
                      " elements of ", slots[i].element.name(), " (more than ", max_buffer_bytes,
                      " bytes); such kernels are checked by running the model, not alone"));
    inputs.push_back(random_contents(slots[i], rng));
  }
  std::vector<std::vector<uint8_t>> want = run(device, reference, inputs), got = run(device, candidate, inputs);

  for (size_t i = 0; i < slots.size(); ++i) {
    if (!slots[i].written) continue;
    ScalarType t = slots[i].element.scalar;
    size_t size = slots[i].element.itemsize();
    double tol = !is_float(slots[i].element) ? 0 : size == 2 ? 1e-2 : 1e-3;
    for (size_t e = 0; e < static_cast<size_t>(slots[i].elements); ++e) {
      double a = get_element(want[i].data() + e * size, t), b = get_element(got[i].data() + e * size, t);
      bool same = (std::isnan(a) && std::isnan(b)) || a == b || std::abs(a - b) <= tol * (1 + std::abs(a));
      if (!same)
        return {OptsCheck::Outcome::Mismatch,
                cat("buffer ", i, " element ", e, ": the default kernel gives ", a, ", with opts \"", to_string(candidate.opts),
                    "\" ", b, " (tolerance ", tol, " * (1 + |default|))")};
    }
  }
  return {OptsCheck::Outcome::Match, ""};
}

const char* outcome_name(OptsCheck::Outcome outcome) {
  switch (outcome) {
    case OptsCheck::Outcome::Match: return "ok";
    case OptsCheck::Outcome::Mismatch: return "MISMATCH";
    case OptsCheck::Outcome::CouldNotApply: return "could not apply";
    case OptsCheck::Outcome::Skipped: return "skipped";
    case OptsCheck::Outcome::Failed: return "FAILED";
  }
  return "?";
}

OptsCheck verify_entry(const TuningKey& key, const TuningEntry& entry, uint64_t seed) {
  using Outcome = OptsCheck::Outcome;
  std::string name = key.device.substr(0, key.device.find(' '));
  std::vector<std::string> names = device_names();
  if (std::find(names.begin(), names.end(), name) == names.end())
    return {Outcome::Skipped, cat("no device named ", name, " in this kiln")};
  Device* device = nullptr;
  try {
    device = &get_device(name);
  } catch (const Error& e) {
    return {Outcome::Skipped, cat(name, " is not available here: ", e.what())};
  }
  const DeviceSpec& spec = device->spec();
  if (device_fingerprint(spec) != key.device || language_name(spec.lang) != key.renderer)
    return {Outcome::Skipped, cat("cached for \"", key.device, "\" (", key.renderer, "); here ", name, " is \"",
                                  device_fingerprint(spec), "\" (", language_name(spec.lang), ")")};
  if (entry.ast.empty()) return {Outcome::Failed, "the entry holds no AST (written by a kiln that did not store it)"};
  try {
    UOpPtr ast = parse_ast_text(entry.ast);
    if (std::string hash = tuning_key(ast, spec, key.search).ast_hash; hash != key.ast_hash)
      return {Outcome::Failed, cat("the stored AST hashes to ", hash, ", not to the key's ", key.ast_hash, " (edited by hand?)")};
    return verify_opts(ast, *device, entry.opts, seed);
  } catch (const Error& e) {
    return {Outcome::Failed, e.what()};
  }
}

}  // namespace kiln
