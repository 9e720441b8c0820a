// The REF device (see ref.h): compile() checks the text of a linear program, load() turns it into a
// list of steps with loops matched and sources resolved, launch() walks the steps once per gid.
#include "devices/ref.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "uop/alu.h"
#include "uop/half.h"
#include "uop/serialize.h"

namespace kiln {
namespace {

// What a step does at run time. Every op the C renderer handles maps to one of these.
enum class Kind : uint8_t {
  Nothing,     // DEFINE_GLOBAL: a buffer, addressed through INDEX
  Const,       // CONST
  Var,         // DEFINE_VAR: the launch's vars[i]
  Special,     // SPECIAL gidx0: the gid
  Range,       // RANGE: opens a loop (skips to after its END when empty)
  End,         // END: closes the loop of its RANGE (jumps back while it runs)
  Index,       // INDEX: the element index into a buffer
  Load,        // LOAD(INDEX), LOAD(INDEX, ordering)
  LoadGated,   // LOAD(INDEX, alt, gate): alt where gate is false, memory untouched
  LoadReg,     // LOAD(DEFINE_REG, END): the accumulator's value
  Store,       // STORE(INDEX, value)
  StoreGated,  // STORE(INDEX, value, gate)
  DefineReg,   // DEFINE_REG(init, ranges...): (re)initializes the accumulator
  Assign,      // ASSIGN(DEFINE_REG, value)
  Alu,         // ALU ops and CAST, lane by lane on vectors
  Bitcast,     // BITCAST, lane by lane on vectors
  Vectorize,   // VECTORIZE: a vector of its scalar sources
  Gep,         // GEP: one lane of a vector
};

// Values live in one array of slots: a scalar takes one, a vector one per lane (lanes in order).
struct Step {
  Kind kind = Kind::Nothing;
  const UOp* node = nullptr;
  DType dtype;                      // of the value (a DEFINE_REG's pointee when it is a pointer)
  DType in;                         // ALU: the operands' dtype; memory steps: the buffer's element dtype
  size_t out = 0;                   // the slot of the step's value (its first lane)
  size_t lanes = 1;                 // lanes of the value (of the stored value, for a STORE)
  std::array<int32_t, 3> src{-1, -1, -1};  // slots of the sources' values the step reads
  std::vector<int32_t> vector_src;  // VECTORIZE: the slot of each lane's source
  size_t aux = 0;                   // RANGE: its END; END: its RANGE; memory steps: buffer slot; Var: index;
                                    // GEP: the lane
  ConstValue value;                 // CONST
  std::pair<int64_t, int64_t> bounds{0, 0};  // DEFINE_VAR: the range the program was simplified for
};

// --- memory: elements as the C kernel stores them ------------------------------------------------

template <typename T>
T read_as(const unsigned char* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

template <typename T>
void write_as(unsigned char* p, T value) {
  std::memcpy(p, &value, sizeof value);
}

ConstValue read_element(const unsigned char* p, DType t) {
  switch (t.scalar) {
    case ScalarType::Bool: return p[0] != 0;
    case ScalarType::Int8: return int64_t{read_as<int8_t>(p)};
    case ScalarType::Int16: return int64_t{read_as<int16_t>(p)};
    case ScalarType::Int32: return int64_t{read_as<int32_t>(p)};
    case ScalarType::Int64: return read_as<int64_t>(p);
    case ScalarType::UInt8: return uint64_t{read_as<uint8_t>(p)};
    case ScalarType::UInt16: return uint64_t{read_as<uint16_t>(p)};
    case ScalarType::UInt32: return uint64_t{read_as<uint32_t>(p)};
    case ScalarType::UInt64: return read_as<uint64_t>(p);
    case ScalarType::Float16: return double{half_bits_to_float(read_as<uint16_t>(p))};
    case ScalarType::BFloat16: return double{bf16_bits_to_float(read_as<uint16_t>(p))};
    case ScalarType::Float32: return double{read_as<float>(p)};
    case ScalarType::Float64: return read_as<double>(p);
    case ScalarType::Void: break;
  }
  throw_internal("elements have a value dtype", t.name(), __FILE__, __LINE__);
}

// `v` already holds a value of t (cast_const), so every narrowing here is exact.
void write_element(unsigned char* p, DType t, const ConstValue& v) {
  switch (t.scalar) {
    case ScalarType::Bool: write_as<uint8_t>(p, std::get<bool>(v) ? 1 : 0); return;
    case ScalarType::Int8: write_as(p, static_cast<int8_t>(std::get<int64_t>(v))); return;
    case ScalarType::Int16: write_as(p, static_cast<int16_t>(std::get<int64_t>(v))); return;
    case ScalarType::Int32: write_as(p, static_cast<int32_t>(std::get<int64_t>(v))); return;
    case ScalarType::Int64: write_as(p, std::get<int64_t>(v)); return;
    case ScalarType::UInt8: write_as(p, static_cast<uint8_t>(std::get<uint64_t>(v))); return;
    case ScalarType::UInt16: write_as(p, static_cast<uint16_t>(std::get<uint64_t>(v))); return;
    case ScalarType::UInt32: write_as(p, static_cast<uint32_t>(std::get<uint64_t>(v))); return;
    case ScalarType::UInt64: write_as(p, std::get<uint64_t>(v)); return;
    case ScalarType::Float16: write_as(p, float_to_half_bits(static_cast<float>(std::get<double>(v)))); return;
    case ScalarType::BFloat16: write_as(p, float_to_bf16_bits(static_cast<float>(std::get<double>(v)))); return;
    case ScalarType::Float32: write_as(p, static_cast<float>(std::get<double>(v))); return;
    case ScalarType::Float64: write_as(p, std::get<double>(v)); return;
    case ScalarType::Void: break;
  }
  throw_internal("elements have a value dtype", t.name(), __FILE__, __LINE__);
}

// An integer value (indices, loop bounds, gids) as int64; values are canonical, so no doubles here.
int64_t as_index(const ConstValue& v) {
  if (const int64_t* i = std::get_if<int64_t>(&v)) return *i;
  if (const uint64_t* u = std::get_if<uint64_t>(&v)) return static_cast<int64_t>(*u);
  if (const bool* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  throw_internal("index values are integers", "a float", __FILE__, __LINE__);
}

bool truthy(const ConstValue& v) { return std::get<bool>(cast_const(v, dtypes::bool_)); }

// Ops only defined on floats, which C applies to integers by converting them to double (math.h).
bool is_float_math(Op op) {
  return op == Op::RECIP || op == Op::SQRT || op == Op::EXP2 || op == Op::LOG2 || op == Op::SIN || op == Op::TRUNC ||
         op == Op::POW;
}

class RefProgram : public Program {
 public:
  RefProgram(const DeviceSpec& spec, std::string name, std::vector<UOpPtr> linear)
      : Program(spec, std::move(name)), linear_(std::move(linear)) {
    build_steps();
  }

 protected:
  double run(std::span<const RawBuffer> bufs, std::span<const int64_t> vars, const LaunchDims& dims, bool timed) override;

 private:
  struct Frame {
    std::span<const RawBuffer> bufs;
    std::vector<ConstValue> var_values;
    std::vector<ConstValue> values;  // the slots of the program's values, then of the inlined constants
    int64_t gid = 0;
  };

  [[noreturn]] void fail(size_t pos, const std::string& what) const {
    throw Error(cat("REF: kernel ", name_, ": linear op ", pos, " (", op_name(linear_[pos]->op), " ",
                    linear_[pos]->dtype.name(), "): ", what));
  }
  void build_steps();
  Step make_step(size_t pos, const std::unordered_map<const UOp*, size_t>& defined, const std::vector<int>& loop_of,
                 const std::vector<bool>& open);
  void run(Frame& f) const;
  ConstValue alu(const Step& s, const Frame& f, size_t pos, size_t lane) const;
  unsigned char* address(const Step& s, const Frame& f, size_t pos, const char* access) const;
  // A CONST source that is not in the program: its value (in every lane) lives after the program's.
  size_t inline_const(const UOpPtr& u) {
    auto [it, added] = inline_slots_.emplace(u.get(), program_slots_ + inline_consts_.size());
    if (added) inline_consts_.insert(inline_consts_.end(), u->dtype.count, u->const_value());
    return it->second;
  }

  std::vector<UOpPtr> linear_;
  std::vector<Step> steps_;
  size_t num_buffers_ = 0, num_vars_ = 0, program_slots_ = 0;
  std::vector<ConstValue> inline_consts_;
  std::unordered_map<const UOp*, size_t> inline_slots_;
};

// Matches loops, resolves every source to the position that computed it, and checks that the program
// is one REF (and the C renderer) can run: each value computed before it is used and still in scope.
void RefProgram::build_steps() {
  std::unordered_map<const UOp*, size_t> defined;  // node -> its latest position
  std::vector<int> loop_of(linear_.size(), -1);    // innermost RANGE open at each position
  std::vector<bool> open(linear_.size(), false);
  std::vector<size_t> loops;
  std::vector<size_t> slots;
  for (const UOpPtr& u : linear_) {
    slots.push_back(program_slots_);
    program_slots_ += u->dtype.is_ptr ? 1 : u->dtype.count;
  }
  for (size_t pos = 0; pos < linear_.size(); ++pos) {
    const UOpPtr& u = linear_[pos];
    steps_.push_back(make_step(pos, defined, loop_of, open));
    steps_.back().out = slots[pos];
    if (u->op != Op::STORE) steps_.back().lanes = u->dtype.is_ptr ? 1 : u->dtype.count;
    loop_of[pos] = loops.empty() ? -1 : static_cast<int>(loops.back());
    if (u->op == Op::RANGE) {
      loops.push_back(pos);
      open[pos] = true;
    }
    if (u->op == Op::END) {
      if (loops.empty() || linear_[loops.back()] != u->src[0])
        fail(pos, loops.empty() ? std::string("closes a loop, but none is open")
                                : cat("closes a loop, but the innermost open loop is the RANGE at ", loops.back()));
      open[loops.back()] = false;
      steps_[pos].aux = loops.back();
      steps_[loops.back()].aux = pos;
      loops.pop_back();
    }
    defined[u.get()] = pos;
  }
  if (!loops.empty()) fail(loops.back(), "this loop is never closed by an END");
}

Step RefProgram::make_step(size_t pos, const std::unordered_map<const UOp*, size_t>& defined,
                           const std::vector<int>& loop_of, const std::vector<bool>& open) {
  const UOpPtr& u = linear_[pos];
  Step s;
  s.node = u.get();
  s.dtype = u->dtype.is_ptr ? u->dtype.deref() : u->dtype;
  // The position of source i, which must be computed earlier and visible here (C's block scoping).
  auto position = [&](size_t i) -> size_t {
    const UOpPtr& src = u->src.at(i);
    auto it = defined.find(src.get());
    if (it == defined.end() && src->op == Op::CONST) return SIZE_MAX;  // the C renderer inlines these
    if (it == defined.end()) fail(pos, cat("source ", i, " (", op_name(src->op), ") is not computed before its use"));
    size_t q = it->second;
    int loop = linear_[q]->op == Op::RANGE ? static_cast<int>(q) : loop_of[q];
    if (loop >= 0 && !open[static_cast<size_t>(loop)])
      fail(pos, cat("source ", i, " was computed at ", q, " inside the loop of RANGE ", loop, ", which has ended"));
    return q;
  };
  auto step_of = [&](size_t i) -> const Step& {
    size_t q = position(i);
    if (q == SIZE_MAX) fail(pos, cat("source ", i, " must be computed by the program, not be a constant"));
    return steps_[q];
  };
  // The slot of source i's value.
  auto use = [&](size_t i) -> int32_t {
    size_t q = position(i);
    return static_cast<int32_t>(q == SIZE_MAX ? inline_const(u->src[i]) : steps_[q].out);
  };
  auto need_int = [&](size_t i, const char* what) {
    if (!is_int(u->src.at(i)->dtype)) fail(pos, cat(what, " must be an integer, not ", u->src[i]->dtype.name()));
  };
  auto need_arg = [&](auto* value, const char* what) {
    if (value == nullptr) fail(pos, cat("its arg must be ", what));
    return *value;
  };
  // A LOAD or STORE through INDEX: the buffer slot and element dtype come from the INDEX's DEFINE_GLOBAL.
  auto through_index = [&]() {
    if (u->src[0]->op != Op::INDEX) fail(pos, cat("source 0 must be an INDEX, not ", op_name(u->src[0]->op)));
    const Step& index = step_of(0);
    s.src[0] = index.out;
    s.aux = index.aux;
    s.in = index.in;
    // A vector access moves consecutive elements: the INDEX points to as many as the value has lanes.
    DType value = u->op == Op::LOAD ? u->dtype : u->src.at(1)->dtype;
    if (value.count != u->src[0]->dtype.deref().count)
      fail(pos, cat("a ", value.name(), " moves through an INDEX of ", u->src[0]->dtype.name(), ": the lanes must match"));
    s.lanes = value.count;
  };
  auto need_scalar_gate = [&](size_t i) {
    if (u->src.at(i)->dtype.count != 1) fail(pos, cat("the gate must be a scalar, not ", u->src[i]->dtype.name()));
  };
  switch (u->op) {
    case Op::CONST:
      s.kind = Kind::Const;
      s.value = u->const_value();
      return s;
    case Op::DEFINE_GLOBAL: {
      int64_t slot = need_arg(std::get_if<int64_t>(&u->arg), "a buffer slot (int)");
      if (slot < 0 || !u->dtype.is_ptr || u->dtype.addr != AddrSpace::Global || u->dtype.scalar == ScalarType::Void)
        fail(pos, "needs a slot >= 0 and a global pointer to values");
      s.aux = static_cast<size_t>(slot);
      num_buffers_ = std::max(num_buffers_, s.aux + 1);
      return s;
    }
    case Op::DEFINE_VAR: {
      const VarArg& v = need_arg(std::get_if<VarArg>(&u->arg), "a variable (var:)");
      if (!is_int(u->dtype)) fail(pos, "variables are integers");
      s.kind = Kind::Var;
      s.aux = num_vars_++;  // the order lower_kernel collects k.vars in: order of appearance
      s.bounds = {v.min, v.max};
      return s;
    }
    case Op::SPECIAL:
      if (need_arg(std::get_if<std::string>(&u->arg), "a launch index name") != "gidx0")
        fail(pos, "REF (like the CPU ABI) runs launch dimension 0 only: the one SPECIAL is gidx0");
      need_int(0, "the SPECIAL's size");
      s.kind = Kind::Special;
      s.src[0] = use(0);
      return s;
    case Op::RANGE:
      need_arg(std::get_if<int64_t>(&u->arg), "an axis id (int)");
      if (!is_int(u->dtype)) fail(pos, "loop counters are integers");
      need_int(0, "the loop bound");
      s.kind = Kind::Range;
      s.src[0] = use(0);
      return s;
    case Op::END:
      if (u->src.size() != 1 || u->src[0]->op != Op::RANGE)
        fail(pos, "a linear END closes exactly one RANGE (graph-level ENDs are not part of the program)");
      s.kind = Kind::End;
      return s;
    case Op::INDEX:
      if (u->src[0]->op != Op::DEFINE_GLOBAL)
        fail(pos, cat("REF indexes DEFINE_GLOBAL buffers only, not ", op_name(u->src[0]->op)));
      if (u->src.size() == 3)
        fail(pos, "INDEX with a validity source: its meaning is not defined (the C renderer ignores it); "
                  "gate the LOAD/STORE instead");
      need_int(1, "the index");
      s.kind = Kind::Index;
      s.aux = step_of(0).aux;
      s.in = u->src[0]->dtype.deref();
      s.src[0] = use(1);
      return s;
    case Op::LOAD:
      if (u->src[0]->op == Op::DEFINE_REG) {  // the other sources (ranges, the loop's END) only order the read
        s.kind = Kind::LoadReg;
        s.src[0] = use(0);
        return s;
      }
      if (u->src.size() > 3) fail(pos, "a LOAD through INDEX has at most (INDEX, alt, gate)");
      through_index();
      s.kind = Kind::Load;  // a second source alone only orders the load (as in the C renderer)
      if (u->src.size() == 3) {
        s.kind = Kind::LoadGated;
        need_scalar_gate(2);
        if (u->src[1]->dtype != u->dtype) fail(pos, cat("the value where the gate is false must be a ", u->dtype.name()));
        s.src[1] = use(1);
        s.src[2] = use(2);
      }
      return s;
    case Op::STORE:
      if (u->src.size() > 3) fail(pos, "a STORE has at most (INDEX, value, gate)");
      through_index();
      s.kind = u->src.size() == 3 ? Kind::StoreGated : Kind::Store;
      s.src[1] = use(1);
      if (u->src.size() == 3) {
        need_scalar_gate(2);
        s.src[2] = use(2);
      }
      return s;
    case Op::DEFINE_REG:  // sources after the initial value are the loops it lives in: ordering only
      need_arg(std::get_if<int64_t>(&u->arg), "an accumulator id (int)");
      if (u->src.empty()) fail(pos, "DEFINE_REG needs its initial value as source 0");
      s.kind = Kind::DefineReg;
      s.src[0] = use(0);
      return s;
    case Op::ASSIGN:
      // Sources after the value are the loops the update runs in: ordering only, as in the C renderer.
      if (u->src.size() < 2 || u->src[0]->op != Op::DEFINE_REG)
        fail(pos, "ASSIGN in a kernel writes (DEFINE_REG, value, ranges...)");
      s.kind = Kind::Assign;
      s.dtype = step_of(0).dtype;
      if (u->src[1]->dtype != s.dtype) fail(pos, cat("assigns a ", u->src[1]->dtype.name(), " to a ", s.dtype.name()));
      s.src[0] = use(0);
      s.src[1] = use(1);
      return s;
    case Op::BITCAST:
      if (u->src[0]->dtype.itemsize() != u->dtype.itemsize() || u->dtype.is_ptr || u->src[0]->dtype.is_ptr ||
          u->src[0]->dtype.count != u->dtype.count)
        fail(pos, cat("BITCAST from ", u->src[0]->dtype.name(), " changes the size (or the lanes)"));
      s.kind = Kind::Bitcast;
      s.in = u->src[0]->dtype;
      s.src[0] = use(0);
      return s;
    case Op::CAST:
    case Op::NEG: case Op::RECIP: case Op::SQRT: case Op::EXP2: case Op::LOG2: case Op::SIN: case Op::TRUNC:
    case Op::ADD: case Op::SUB: case Op::MUL: case Op::FDIV: case Op::IDIV: case Op::MOD: case Op::MAX:
    case Op::MIN: case Op::POW: case Op::CMPLT: case Op::CMPNE: case Op::CMPEQ: case Op::AND: case Op::OR:
    case Op::XOR: case Op::SHL: case Op::SHR: case Op::WHERE: case Op::MULACC: {
      s.kind = Kind::Alu;
      size_t first = u->op == Op::WHERE ? 1 : 0;  // WHERE's condition is read as bool, whatever its dtype
      s.in = u->src[first]->dtype;
      for (size_t i = 0; i < u->src.size(); ++i) {
        if (u->src[i]->dtype.is_ptr || u->src[i]->dtype.scalar == ScalarType::Void)
          fail(pos, cat("source ", i, " (", op_name(u->src[i]->op), ") has no value"));
        if (i >= first && u->op != Op::CAST && u->src[i]->dtype != s.in)
          fail(pos, cat("operands of one op share a dtype (uop/ops.h), got ", s.in.name(), " and ", u->src[i]->dtype.name()));
        if (u->src[i]->dtype.count != u->dtype.count)
          fail(pos, cat("operands have the result's lanes: ", u->src[i]->dtype.name(), " for a ", u->dtype.name()));
        s.src[i] = use(i);
      }
      if (u->dtype.is_ptr || u->dtype.scalar == ScalarType::Void) fail(pos, "an ALU result needs a value dtype");
      return s;
    }
    case Op::SINK: case Op::NOOP: case Op::DEVICE: case Op::BUFFER: case Op::CONTIGUOUS: case Op::COPY:
    case Op::DETACH: case Op::REDUCE_AXIS: case Op::IOTA: case Op::GATHER: case Op::SCATTER_ADD: case Op::RESHAPE: case Op::PERMUTE: case Op::EXPAND:
    case Op::PAD: case Op::SHRINK: case Op::FLIP: case Op::DEFINE_LOCAL: case Op::REDUCE: case Op::BARRIER:
    case Op::IF: case Op::ENDIF:
      break;
    case Op::VECTORIZE:
      if (u->dtype.is_ptr || u->src.size() != u->dtype.count)
        fail(pos, cat("a VECTORIZE of ", u->dtype.name(), " has one scalar source per lane, not ", u->src.size()));
      s.kind = Kind::Vectorize;
      for (size_t i = 0; i < u->src.size(); ++i) {
        if (u->src[i]->dtype != u->dtype.scalar_of()) fail(pos, cat("source ", i, " is a ", u->src[i]->dtype.name()));
        s.vector_src.push_back(use(i));
      }
      return s;
    case Op::GEP: {
      int64_t lane = need_arg(std::get_if<int64_t>(&u->arg), "a lane (int)");
      DType from = u->src[0]->dtype;
      if (from.is_ptr || lane < 0 || lane >= from.count || u->dtype != from.scalar_of())
        fail(pos, cat("GEP ", lane, " of a ", from.name(), " gives one of its lanes"));
      s.kind = Kind::Gep;
      s.aux = static_cast<size_t>(lane);
      s.src[0] = use(0);
      return s;
    }
  }
  fail(pos, "not an op of a lowered program REF runs (the C renderer does not handle it either)");
}

unsigned char* RefProgram::address(const Step& s, const Frame& f, size_t pos, const char* access) const {
  const RawBuffer& buffer = f.bufs[s.aux];
  int64_t index = as_index(f.values[static_cast<size_t>(s.src[0])]);
  size_t item = s.in.itemsize(), elements = buffer.bytes / item;
  if (index < 0 || static_cast<uint64_t>(index) >= elements || elements - static_cast<uint64_t>(index) < s.lanes)
    fail(pos, cat(access, " of buffer ", s.aux, " at index ", index, s.lanes > 1 ? cat(" (", s.lanes, " lanes)") : "", " (gid ",
                  f.gid, "), outside the buffer: it holds ", elements, " elements of ", s.in.name(), " (", buffer.bytes, " bytes)"));
  return static_cast<unsigned char*>(buffer.handle) + static_cast<size_t>(index) * item;
}

ConstValue RefProgram::alu(const Step& s, const Frame& f, size_t pos, size_t lane) const {
  const UOp& u = *s.node;
  std::array<ConstValue, 3> x;
  size_t n = 0;
  for (; n < x.size() && s.src[n] >= 0; ++n) x[n] = f.values[static_cast<size_t>(s.src[n]) + lane];
  std::span<const ConstValue> operands(x.data(), n);
  Op op = u.op;
  bool fp = is_float(s.in);
  if (op == Op::CAST) return cast_const(x[0], s.dtype);
  if (fp && (op == Op::MAX || op == Op::MIN)) {  // as rendered: a NaN on either side wins, ties give b
    double a = as_double(x[0]), b = as_double(x[1]);
    bool first = std::isnan(a) || (op == Op::MAX ? a > b : a < b);
    return cast_const(first ? x[0] : x[1], s.dtype);
  }
  if (fp && op == Op::IDIV) op = Op::FDIV;  // C's `/` on floats
  if (!fp && (op == Op::IDIV || op == Op::MOD || op == Op::FDIV)) {
    if (as_double(x[1]) == 0)
      throw Error(cat("REF: integer division by zero in kernel ", name_, " (linear op ", pos, ": ", op_name(u.op), " of ",
                      s.in.name(), " ", const_to_string(x[0], s.in), " by 0, gid ", f.gid, ")"));
    // int8/int16 are promoted to int in C and wrap on the way back; int32/int64 trap (x86 idiv).
    if (!is_unsigned(s.in) && !is_bool(s.in) && bits(s.in.scalar) >= 32 && as_index(x[1]) == -1 &&
        x[0] == cast_const(lowest(s.in), s.in))
      throw Error(cat("REF: integer division overflow in kernel ", name_, " (linear op ", pos, ": ", op_name(u.op), " of ",
                      s.in.name(), " ", const_to_string(x[0], s.in), " by -1, gid ", f.gid, ")"));
    if (op == Op::FDIV) op = Op::IDIV;  // C's `/` on integers
  }
  if (std::optional<ConstValue> r = exec_alu(op, s.dtype, operands, s.in)) return *r;
  if (!fp && is_float_math(op)) {  // e.g. sqrt(int): math.h computes in double, the result converts back
    std::array<ConstValue, 2> d{as_double(x[0]), n > 1 ? as_double(x[1]) : 0.0};
    std::optional<ConstValue> r = exec_alu(op, dtypes::float64, std::span(d.data(), n), dtypes::float64);
    if (r) return cast_const(*r, s.dtype);
  }
  if (op == Op::SHL || op == Op::SHR)
    throw Error(cat("REF: shift out of range in kernel ", name_, " (linear op ", pos, ": ", op_name(u.op), " of ", s.in.name(),
                    " by ", const_to_string(x[1], s.in), "; the IR defines shifts by 0..", bits(s.in.scalar) - 1, ", gid ",
                    f.gid, ")"));
  throw Error(cat("REF: kernel ", name_, ": linear op ", pos, ": ", op_name(u.op), " of ", s.in.name(),
                  " is not defined by the IR (and does not compile as C)"));
}

void RefProgram::run(Frame& f) const {
  std::vector<ConstValue>& v = f.values;
  // Lane l of source i (a scalar source has lane 0 only).
  auto at = [&](const Step& s, int i, size_t l = 0) -> const ConstValue& {
    return v[static_cast<size_t>(s.src[static_cast<size_t>(i)]) + l];
  };
  for (size_t pos = 0; pos < steps_.size();) {
    const Step& s = steps_[pos];
    ConstValue* out = &v[s.out];
    switch (s.kind) {
      case Kind::Nothing: break;
      case Kind::Const: std::fill_n(out, s.lanes, s.value); break;
      case Kind::Var: *out = f.var_values[s.aux]; break;
      case Kind::Special:
        if (f.gid >= as_index(at(s, 0)))
          fail(pos, cat("launched with global[0] > ", as_index(at(s, 0)), ", the size of gidx0 (gid ", f.gid, ")"));
        *out = cast_const(f.gid, s.dtype);
        break;
      case Kind::Range:
        if (as_index(at(s, 0)) <= 0) {  // an empty loop: continue after its END
          pos = s.aux + 1;
          continue;
        }
        *out = cast_const(int64_t{0}, s.dtype);
        break;
      case Kind::End: {
        const Step& range = steps_[s.aux];
        int64_t next = as_index(v[range.out]) + 1;
        if (next < as_index(at(range, 0))) {
          v[range.out] = cast_const(next, range.dtype);
          pos = s.aux + 1;
          continue;
        }
        break;
      }
      case Kind::Index: *out = as_index(at(s, 0)); break;
      case Kind::LoadGated:
        if (!truthy(at(s, 2))) {  // the C renderer's (gate ? data[i] : alt): no access
          for (size_t l = 0; l < s.lanes; ++l) out[l] = cast_const(at(s, 1, l), s.dtype);
          break;
        }
        [[fallthrough]];
      case Kind::Load: {
        const unsigned char* p = address(s, f, pos, "LOAD");
        for (size_t l = 0; l < s.lanes; ++l) out[l] = cast_const(read_element(p + l * s.in.itemsize(), s.in), s.dtype);
        break;
      }
      case Kind::StoreGated:
        if (!truthy(at(s, 2))) break;
        [[fallthrough]];
      case Kind::Store: {
        unsigned char* p = address(s, f, pos, "STORE");
        for (size_t l = 0; l < s.lanes; ++l) write_element(p + l * s.in.itemsize(), s.in, cast_const(at(s, 1, l), s.in));
        break;
      }
      case Kind::LoadReg:
      case Kind::DefineReg:
        for (size_t l = 0; l < s.lanes; ++l) out[l] = cast_const(at(s, 0, l), s.dtype);
        break;
      case Kind::Assign:
        for (size_t l = 0; l < s.lanes; ++l) out[l] = v[static_cast<size_t>(s.src[0]) + l] = cast_const(at(s, 1, l), s.dtype);
        break;
      case Kind::Alu:
        for (size_t l = 0; l < s.lanes; ++l) out[l] = alu(s, f, pos, l);
        break;
      case Kind::Bitcast:
        for (size_t l = 0; l < s.lanes; ++l) {
          unsigned char bytes[8];
          write_element(bytes, s.in, at(s, 0, l));
          out[l] = read_element(bytes, s.dtype);
        }
        break;
      case Kind::Vectorize:
        for (size_t l = 0; l < s.lanes; ++l) out[l] = v[static_cast<size_t>(s.vector_src[l])];
        break;
      case Kind::Gep: *out = at(s, 0, s.aux); break;
    }
    ++pos;
  }
}

double RefProgram::run(std::span<const RawBuffer> bufs, std::span<const int64_t> vars, const LaunchDims& dims, bool timed) {
  if (bufs.size() < num_buffers_)
    throw Error(cat("REF: launch of kernel ", name_, " with ", bufs.size(), " buffers; the kernel uses ", num_buffers_));
  if (vars.size() != num_vars_)
    throw Error(cat("REF: launch of kernel ", name_, " with ", vars.size(), " variable values; the kernel has ", num_vars_));
  Frame f{bufs, {}, std::vector<ConstValue>(program_slots_), 0};
  f.values.insert(f.values.end(), inline_consts_.begin(), inline_consts_.end());
  for (const Step& s : steps_) {
    if (s.kind != Kind::Var) continue;
    int64_t value = vars[s.aux];
    if (value < s.bounds.first || value > s.bounds.second)
      throw Error(cat("REF: launch of kernel ", name_, ": variable ", s.node->var().name, " = ", value,
                      " is outside its declared range [", s.bounds.first, ", ", s.bounds.second, "]"));
    f.var_values.push_back(cast_const(value, s.dtype));
  }
  auto start = std::chrono::steady_clock::now();
  for (f.gid = 0; f.gid < dims.global[0]; ++f.gid) run(f);
  if (!timed) return 0.0;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class RefDevice : public Device {
 public:
  RefDevice() {
    spec_.name = "REF";
    spec_.arch = "interpreter";
    spec_.compiler = cat("kiln-ref ", kProgramFormatVersion);
    spec_.lang = Language::UOps;
    spec_.threads = 1;
    spec_.max_global_dims = {INT64_MAX, 1, 1};
    // It runs vector dtypes lane by lane: lowered for 64-byte vectors (AVX-512's), it checks the
    // vector lowering the host renderers get.
    spec_.vector_bytes = 64;
    spec_.vector_registers = 32;
    spec_.has_fp16 = true;  // stored as 16 bits, computed in double and rounded once
    spec_.has_fp64 = true;
    spec_.oracle = true;
  }
  ~RefDevice() override { release_cached(); }

  const DeviceSpec& spec() const override { return spec_; }

  void synchronize() override {}  // launch() returns when the kernel is done

  // Compiling is checking: the text parses and load() accepts the program.
  Binary compile(const std::string& source, const std::string& name) override {
    try {
      RefProgram(spec_, name, parse_program(source));
    } catch (const Error& e) {
      throw CompileError("REF", name, e.what(), source);
    }
    return Binary{name, std::vector<uint8_t>(source.begin(), source.end())};
  }
  std::unique_ptr<Program> load(const Binary& binary) override {
    return std::make_unique<RefProgram>(spec_, binary.name, parse_program(std::string(binary.data.begin(), binary.data.end())));
  }

 protected:
  RawBuffer alloc_raw(size_t bytes) override {
    void* p = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
    if (p == nullptr) throw OutOfMemory(cat("aligned_alloc of ", bytes, " bytes failed"));
    return RawBuffer{p, bytes};
  }
  void free_raw(RawBuffer buffer) override { std::free(buffer.handle); }
  void copy_in_raw(RawBuffer dst, const void* src, size_t bytes) override { std::memcpy(dst.handle, src, bytes); }
  void copy_out_raw(void* dst, RawBuffer src, size_t bytes) override { std::memcpy(dst, src.handle, bytes); }

 private:

  DeviceSpec spec_;
};

}  // namespace

std::unique_ptr<Device> make_ref_device() { return std::make_unique<RefDevice>(); }

}  // namespace kiln
