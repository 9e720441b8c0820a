// The SPIR-V renderer: one linear op at a time into a SpirvModule (spirv_module.h).
//
// How kiln's IR maps to SPIR-V:
// - A value is one SSA id per lane: vector dtypes (upcasts) become lists of scalar ids, so no
//   OpTypeVector is needed and any width works. bool is OpTypeBool in registers, one byte in memory.
//   float16/bfloat16 are held as their 16 bits (uint16), converted to float32 for arithmetic and
//   rounded back (spirv_math.h), as the C renderer does.
// - DEFINE_GLOBAL slot i: a storage buffer {T data[]} at set 0, binding i. DEFINE_VAR i: member i
//   of the push-constant block, at offset 8*i (launch() writes int64s; a narrower var reads the low
//   bytes). DEFINE_REG: a Function variable per lane. DEFINE_LOCAL: a Workgroup array.
// - RANGE/END: a structured loop (OpLoopMerge) whose counter is an OpPhi. Gated loads and stores are
//   structured selections, so memory is not touched where the gate is false.
// - SPECIAL gidx<d>/lidx<d>: WorkgroupId/LocalInvocationId; the lidx sizes are the module's LocalSize.
// - Integer semantics follow uop/ops.h: wrapping arithmetic, C division; float->int casts saturate
//   and NaN gives 0; float MAX/MIN propagate NaN.
#include "lower/renderers/spirv.h"

#include <bit>
#include <cstring>
#include <unordered_map>

#include "lower/renderers/spirv_math.h"
#include "uop/error.h"
#include "uop/half.h"

namespace kiln {

namespace {

using SOp = spv::Op;  // SPIR-V opcodes (SOp::OpFAdd); kiln's ops stay kiln::Op
using Id = SpirvModule::Id;
using Lanes = std::vector<Id>;

bool is_narrow_float(DType t) { return t.scalar == ScalarType::Float16 || t.scalar == ScalarType::BFloat16; }
bool is_signed_int(DType t) { return is_int(t) && !is_unsigned(t); }

// Ops only defined on floats, which C applies to integers through double (math.h), as REF does.
bool is_float_math(kiln::Op op) {
  return op == kiln::Op::RECIP || op == kiln::Op::SQRT || op == kiln::Op::EXP2 || op == kiln::Op::LOG2 ||
         op == kiln::Op::SIN || op == kiln::Op::TRUNC || op == kiln::Op::POW;
}

// Memory that INDEX addresses: a storage buffer or a workgroup array.
struct Memory {
  Id variable = 0;
  spv::StorageClass storage = spv::StorageClass::StorageBuffer;
  DType element;  // kiln's element dtype (scalar)
};

struct Address {
  const Memory* memory = nullptr;
  Lanes index;  // the element index of each lane
};

struct Loop {
  Id header, body, next_block, merge, counter, next;
};

class SpirvRenderer {
 public:
  SpirvRenderer(const std::string& name, size_t num_buffers, const std::vector<UOpPtr>& vars)
      : name_(name), num_buffers_(num_buffers), vars_(vars) {}

  std::string run(const std::vector<UOpPtr>& linear) {
    entry_ = m_.begin_function(m_.type_void(), {});
    for (size_t pos = 0; pos < linear.size(); ++pos) {
      pos_ = pos;
      render(linear[pos]);
    }
    if (!loops_.empty()) fail(linear.back(), "a RANGE is never closed by an END");
    m_.op_void(SOp::OpReturn, {});
    m_.end_function();
    // IEEE results for NaN, inf and signed zero (uop/ops.h): without this, drivers may fold 0*x to 0.
    m_.capability(spv::Capability::SignedZeroInfNanPreserve);
    m_.execution_mode(spv::ExecutionMode::SignedZeroInfNanPreserve, {32});
    if (m_.has_capability(spv::Capability::Float64)) m_.execution_mode(spv::ExecutionMode::SignedZeroInfNanPreserve, {64});
    // For devices that bound the loop iterations of an invocation (devices/vulkan.cpp reads it).
    m_.module_processed(cat(kLoopIterationsNote, static_cast<uint64_t>(std::min(iterations_, 1e18))));
    SpirvModule::Words words = m_.finish(name_, entry_, local_size_);
    std::string bytes(words.size() * 4, '\0');
    std::memcpy(bytes.data(), words.data(), bytes.size());
    return bytes;
  }

 private:
  [[noreturn]] void fail(const UOpPtr& u, const std::string& what) const {
    throw Error(cat("render_spirv: kernel ", name_, ": linear op ", pos_, " (", op_name(u->op), " ", u->dtype.name(),
                    "): ", what));
  }

  // --- types and constants -------------------------------------------------------------------------

  // The register type of a scalar dtype.
  Id reg_type(DType t) {
    switch (t.scalar) {
      case ScalarType::Bool: return m_.type_bool();
      case ScalarType::Int8: case ScalarType::Int16: case ScalarType::Int32: case ScalarType::Int64:
        return m_.type_int(bits(t.scalar), true);
      case ScalarType::UInt8: case ScalarType::UInt16: case ScalarType::UInt32: case ScalarType::UInt64:
      case ScalarType::Float16: case ScalarType::BFloat16:
        return m_.type_int(bits(t.scalar), false);
      case ScalarType::Float32: case ScalarType::Float64: return m_.type_float(bits(t.scalar));
      case ScalarType::Void: break;
    }
    throw_internal("reg_type() of a value dtype", t.name(), __FILE__, __LINE__);
  }
  // The type an element has in memory: bool takes a byte.
  Id memory_type(DType t) { return is_bool(t) ? m_.type_int(8, false) : reg_type(t); }

  Id constant(DType t, const ConstValue& v) {
    ConstValue c = cast_const(v, t.scalar_of());
    switch (t.scalar) {
      case ScalarType::Bool: return m_.constant_bool(std::get<bool>(c));
      case ScalarType::Int8: case ScalarType::Int16: case ScalarType::Int32: case ScalarType::Int64: {
        int64_t x = std::get<int64_t>(c);  // narrower than 32 bits: sign-extended into the word
        return m_.constant(reg_type(t), bits(t.scalar) < 64 ? uint64_t{static_cast<uint32_t>(x)} : static_cast<uint64_t>(x));
      }
      case ScalarType::UInt8: case ScalarType::UInt16: case ScalarType::UInt32: case ScalarType::UInt64:
        return m_.constant(reg_type(t), std::get<uint64_t>(c));
      case ScalarType::Float16: return m_.constant(reg_type(t), float_to_half_bits(static_cast<float>(std::get<double>(c))));
      case ScalarType::BFloat16: return m_.constant(reg_type(t), float_to_bf16_bits(static_cast<float>(std::get<double>(c))));
      case ScalarType::Float32: return m_.constant(reg_type(t), std::bit_cast<uint32_t>(static_cast<float>(std::get<double>(c))));
      case ScalarType::Float64: return m_.constant(reg_type(t), std::bit_cast<uint64_t>(std::get<double>(c)));
      case ScalarType::Void: break;
    }
    throw_internal("constant() of a value dtype", t.name(), __FILE__, __LINE__);
  }
  Id u32(uint32_t v) { return m_.constant(m_.type_int(32, false), v); }

  const Lanes& lanes(const UOpPtr& u) {
    auto it = values_.find(u.get());
    if (it != values_.end()) return it->second;
    if (u->op == kiln::Op::CONST) return values_[u.get()] = Lanes(u->dtype.count, constant(u->dtype, u->const_value()));
    fail(u, "a source is used before the program computes it");
  }
  Id scalar(const UOpPtr& u) {
    const Lanes& l = lanes(u);
    if (l.size() != 1) fail(u, "a scalar is needed here");
    return l[0];
  }

  // --- conversions -----------------------------------------------------------------------------------

  Id op(SOp opcode, Id type, const SpirvModule::Words& operands) { return m_.op(opcode, type, operands); }
  Id is_nan(Id x) { return op(SOp::OpIsNan, m_.type_bool(), {x}); }

  // A float32 value of a narrow float's bits; other values unchanged.
  Id widen(Id x, DType t) {
    if (t.scalar == ScalarType::Float16) return math_.half_to_float(x);
    if (t.scalar == ScalarType::BFloat16) return math_.bf16_to_float(x);
    return x;
  }
  DType widened(DType t) { return is_narrow_float(t) ? dtypes::float32 : t.scalar_of(); }

  // CAST of one lane, with the rules of uop/ops.h and dtype.h's cast_const.
  Id convert(Id x, DType from, DType to) {
    from = from.scalar_of(), to = to.scalar_of();
    if (from == to) return x;
    if (is_narrow_float(from)) return convert(widen(x, from), dtypes::float32, to);
    if (is_narrow_float(to)) {
      Id f = convert(x, from, dtypes::float32);
      return to.scalar == ScalarType::Float16 ? math_.float_to_half(f) : math_.float_to_bf16(f);
    }
    Id t = reg_type(to);
    if (is_bool(to)) {
      if (is_float(from)) return op(SOp::OpFUnordNotEqual, t, {x, constant(from, 0.0)});  // NaN is true
      return op(SOp::OpINotEqual, t, {x, constant(from, int64_t{0})});
    }
    if (is_bool(from)) return op(SOp::OpSelect, t, {x, constant(to, int64_t{1}), constant(to, int64_t{0})});
    if (is_float(from) && is_float(to)) return op(SOp::OpFConvert, t, {x});
    if (is_float(to)) return op(is_unsigned(from) ? SOp::OpConvertUToF : SOp::OpConvertSToF, t, {x});
    if (is_float(from)) return float_to_int(x, from, to);
    if (bits(from.scalar) == bits(to.scalar)) return op(SOp::OpBitcast, t, {x});
    if (is_signed_int(from)) return op(SOp::OpSConvert, t, {x});
    Id wide = op(SOp::OpUConvert, m_.type_int(bits(to.scalar), false), {x});  // OpUConvert gives unsigned types
    return is_unsigned(to) ? wide : op(SOp::OpBitcast, t, {wide});
  }

  // Truncates toward zero, saturates at the target's limits and gives 0 for NaN.
  Id float_to_int(Id x, DType from, DType to) {
    Id t = reg_type(to), b = m_.type_bool();
    Id hi = constant(from, as_double(highest(to))), lo = constant(from, as_double(lowest(to)));
    Id above = op(SOp::OpFOrdGreaterThanEqual, b, {x, hi}), below = op(SOp::OpFOrdLessThanEqual, b, {x, lo});
    Id inside = op(SOp::OpLogicalNot, b, {op(SOp::OpLogicalOr, b, {op(SOp::OpLogicalOr, b, {above, below}), is_nan(x)})});
    Id safe = op(SOp::OpSelect, reg_type(from), {inside, x, constant(from, 0.0)});
    Id value = is_unsigned(to) ? op(SOp::OpConvertFToU, t, {safe}) : op(SOp::OpConvertFToS, t, {safe});
    value = op(SOp::OpSelect, t, {below, constant(to, lowest(to)), value});
    return op(SOp::OpSelect, t, {above, constant(to, highest(to)), value});
  }

  // BITCAST of one lane: the same bits (narrow floats already are their bits).
  Id reinterpret(Id x, DType from, DType to) {
    if (is_bool(from) || is_bool(to)) return convert(x, from, to);
    Id t = reg_type(to);
    return reg_type(from) == t ? x : op(SOp::OpBitcast, t, {x});
  }

  // --- ALU -------------------------------------------------------------------------------------------

// The ops that never reach the switches over ALU ops below: every op outside uop/ops.def's Unary, Binary
// and Ternary groups, and CAST and WHERE, which alu() renders first. The switches end with these and the
// ALU ops they do not define instead of `default:`, so -Werror=switch names each of them for a new op.
#define KILN_SPIRV_NOT_REACHING_ALU                                                                                   \
  case kiln::Op::SINK: case kiln::Op::NOOP: case kiln::Op::CONST: case kiln::Op::DEFINE_VAR: case kiln::Op::DEVICE:    \
  case kiln::Op::BUFFER: case kiln::Op::CONTIGUOUS: case kiln::Op::COPY: case kiln::Op::ASSIGN: case kiln::Op::DETACH: \
  case kiln::Op::REDUCE_AXIS: case kiln::Op::IOTA: case kiln::Op::GATHER: case kiln::Op::SCATTER_ADD: case kiln::Op::RESHAPE: case kiln::Op::PERMUTE:                    \
  case kiln::Op::EXPAND: case kiln::Op::PAD: case kiln::Op::SHRINK: case kiln::Op::FLIP: case kiln::Op::DEFINE_GLOBAL: \
  case kiln::Op::DEFINE_LOCAL: case kiln::Op::DEFINE_REG: case kiln::Op::INDEX: case kiln::Op::LOAD:                   \
  case kiln::Op::STORE: case kiln::Op::RANGE: case kiln::Op::END: case kiln::Op::REDUCE: case kiln::Op::SPECIAL:       \
  case kiln::Op::BARRIER: case kiln::Op::IF: case kiln::Op::ENDIF: case kiln::Op::VECTORIZE: case kiln::Op::GEP:       \
  case kiln::Op::CAST: case kiln::Op::BITCAST: case kiln::Op::WHERE

  Id alu(const UOpPtr& u, DType in, std::vector<Id> x) {
    kiln::Op o = u->op;
    DType out = u->dtype.scalar_of();
    if (o == kiln::Op::CAST) return convert(x[0], in, out);
    if (o == kiln::Op::WHERE) return op(SOp::OpSelect, reg_type(out), {x[0], x[1], x[2]});
    if (is_narrow_float(in)) {  // computed in float32, rounded back when the result is a narrow float
      for (Id& v : x) v = widen(v, in);
      Id r = alu_binary(u, o, dtypes::float32, is_narrow_float(out) ? dtypes::float32 : out, x);
      return is_narrow_float(out) ? convert(r, dtypes::float32, out) : r;
    }
    if (!is_float(in) && is_float_math(o)) {  // e.g. sqrt of an int: in double, then converted back
      for (Id& v : x) v = convert(v, in, dtypes::float64);
      return convert(alu_binary(u, o, dtypes::float64, dtypes::float64, x), dtypes::float64, out);
    }
    return alu_binary(u, o, in, out, x);
  }

  // One ALU op on operands of dtype `in` held in registers (not narrow floats), giving `out`.
  Id alu_binary(const UOpPtr& u, kiln::Op o, DType in, DType out, const std::vector<Id>& x) {
    Id t = reg_type(out), b = m_.type_bool();
    if (is_bool(in)) return alu_bool(u, o, x);
    if (is_float(in)) {
      int width = bits(in.scalar);
      switch (o) {
        case kiln::Op::NEG: return op(SOp::OpFNegate, t, {x[0]});
        case kiln::Op::RECIP: return op(SOp::OpFDiv, t, {constant(in, 1.0), x[0]});
        case kiln::Op::SQRT: case kiln::Op::EXP2: case kiln::Op::LOG2: case kiln::Op::SIN: case kiln::Op::POW:
          return math_.call(o, width, x);
        case kiln::Op::TRUNC: return m_.glsl(GLSLstd450Trunc, t, {x[0]});
        case kiln::Op::ADD: return op(SOp::OpFAdd, t, {x[0], x[1]});
        case kiln::Op::SUB: return op(SOp::OpFSub, t, {x[0], x[1]});
        case kiln::Op::MUL: return op(SOp::OpFMul, t, {x[0], x[1]});
        case kiln::Op::MULACC: return op(SOp::OpFAdd, t, {op(SOp::OpFMul, t, {x[0], x[1]}), x[2]});  // rounded twice, as in C
        case kiln::Op::FDIV: case kiln::Op::IDIV: return op(SOp::OpFDiv, t, {x[0], x[1]});  // C's `/` on floats
        case kiln::Op::MAX: case kiln::Op::MIN: {  // a NaN on either side wins, ties give b (as rendered in C)
          Id better = op(o == kiln::Op::MAX ? SOp::OpFOrdGreaterThan : SOp::OpFOrdLessThan, b, {x[0], x[1]});
          return op(SOp::OpSelect, t, {op(SOp::OpLogicalOr, b, {is_nan(x[0]), better}), x[0], x[1]});
        }
        case kiln::Op::CMPLT: return op(SOp::OpFOrdLessThan, t, {x[0], x[1]});
        case kiln::Op::CMPNE: return op(SOp::OpFUnordNotEqual, t, {x[0], x[1]});
        case kiln::Op::CMPEQ: return op(SOp::OpFOrdEqual, t, {x[0], x[1]});
        case kiln::Op::MOD: case kiln::Op::AND: case kiln::Op::OR: case kiln::Op::XOR: case kiln::Op::SHL: case kiln::Op::SHR:
        KILN_SPIRV_NOT_REACHING_ALU: fail(u, cat(op_name(o), " is not defined on ", in.name(), " (nor in C)"));
      }
    }
    bool is_signed = is_signed_int(in);
    switch (o) {
      case kiln::Op::NEG: return op(SOp::OpSNegate, t, {x[0]});
      case kiln::Op::ADD: return op(SOp::OpIAdd, t, {x[0], x[1]});
      case kiln::Op::SUB: return op(SOp::OpISub, t, {x[0], x[1]});
      case kiln::Op::MUL: return op(SOp::OpIMul, t, {x[0], x[1]});
      case kiln::Op::MULACC: return op(SOp::OpIAdd, t, {op(SOp::OpIMul, t, {x[0], x[1]}), x[2]});
      case kiln::Op::IDIV: case kiln::Op::FDIV: case kiln::Op::MOD: {
        bool div = o != kiln::Op::MOD;
        if (!is_signed) return op(div ? SOp::OpUDiv : SOp::OpUMod, t, {x[0], x[1]});
        if (bits(in.scalar) >= 32) return op(div ? SOp::OpSDiv : SOp::OpSRem, t, {x[0], x[1]});
        // int8/int16 divide as C does, in int: -128 / -1 wraps back to -128 instead of overflowing.
        Id i32 = m_.type_int(32, true);
        Id wide = op(div ? SOp::OpSDiv : SOp::OpSRem, i32, {op(SOp::OpSConvert, i32, {x[0]}), op(SOp::OpSConvert, i32, {x[1]})});
        return op(SOp::OpSConvert, t, {wide});
      }
      case kiln::Op::MAX: case kiln::Op::MIN: {
        SOp greater = is_signed ? SOp::OpSGreaterThan : SOp::OpUGreaterThan, less = is_signed ? SOp::OpSLessThan : SOp::OpULessThan;
        return op(SOp::OpSelect, t, {op(o == kiln::Op::MAX ? greater : less, b, {x[0], x[1]}), x[0], x[1]});
      }
      case kiln::Op::CMPLT: return op(is_signed ? SOp::OpSLessThan : SOp::OpULessThan, t, {x[0], x[1]});
      case kiln::Op::CMPNE: return op(SOp::OpINotEqual, t, {x[0], x[1]});
      case kiln::Op::CMPEQ: return op(SOp::OpIEqual, t, {x[0], x[1]});
      case kiln::Op::AND: return op(SOp::OpBitwiseAnd, t, {x[0], x[1]});
      case kiln::Op::OR: return op(SOp::OpBitwiseOr, t, {x[0], x[1]});
      case kiln::Op::XOR: return op(SOp::OpBitwiseXor, t, {x[0], x[1]});
      case kiln::Op::SHL: return op(SOp::OpShiftLeftLogical, t, {x[0], x[1]});
      case kiln::Op::SHR: return op(is_signed ? SOp::OpShiftRightArithmetic : SOp::OpShiftRightLogical, t, {x[0], x[1]});
      // Float-only ops reach here in double (alu()).
      case kiln::Op::RECIP: case kiln::Op::SQRT: case kiln::Op::EXP2: case kiln::Op::LOG2: case kiln::Op::SIN:
      case kiln::Op::TRUNC: case kiln::Op::POW:
      KILN_SPIRV_NOT_REACHING_ALU: fail(u, cat(op_name(o), " is not defined on ", in.name()));
    }
  }

  // bool operands, as C computes them (promoted to int, the result read as != 0).
  Id alu_bool(const UOpPtr& u, kiln::Op o, const std::vector<Id>& x) {
    Id b = m_.type_bool();
    switch (o) {
      case kiln::Op::AND: case kiln::Op::MIN: case kiln::Op::MUL: return op(SOp::OpLogicalAnd, b, {x[0], x[1]});
      case kiln::Op::OR: case kiln::Op::MAX: case kiln::Op::ADD: return op(SOp::OpLogicalOr, b, {x[0], x[1]});
      case kiln::Op::XOR: case kiln::Op::CMPNE: case kiln::Op::SUB: return op(SOp::OpLogicalNotEqual, b, {x[0], x[1]});
      case kiln::Op::CMPEQ: return op(SOp::OpLogicalEqual, b, {x[0], x[1]});
      case kiln::Op::CMPLT: return op(SOp::OpLogicalAnd, b, {op(SOp::OpLogicalNot, b, {x[0]}), x[1]});
      case kiln::Op::NEG: return x[0];
      case kiln::Op::RECIP: case kiln::Op::SQRT: case kiln::Op::EXP2: case kiln::Op::LOG2: case kiln::Op::SIN:
      case kiln::Op::TRUNC: case kiln::Op::FDIV: case kiln::Op::IDIV: case kiln::Op::MOD: case kiln::Op::POW:
      case kiln::Op::SHL: case kiln::Op::SHR: case kiln::Op::MULACC:
      KILN_SPIRV_NOT_REACHING_ALU: fail(u, cat(op_name(o), " is not defined on bool in SPIR-V (nor meaningful in C)"));
    }
  }

#undef KILN_SPIRV_NOT_REACHING_ALU

  // --- memory ----------------------------------------------------------------------------------------

  const Memory& buffer(const UOpPtr& u) {
    int64_t slot = u->arg_as<int64_t>();
    if (slot < 0 || static_cast<size_t>(slot) >= num_buffers_ || !u->dtype.is_ptr || u->dtype.count != 1)
      fail(u, cat("a buffer slot in [0, ", num_buffers_, ") holding scalars is needed, not slot ", slot));
    DType element = u->dtype.deref();
    Id type = memory_type(element);
    if (bits(element.scalar) == 8) m_.capability(spv::Capability::StorageBuffer8BitAccess);
    if (bits(element.scalar) == 16) m_.capability(spv::Capability::StorageBuffer16BitAccess);
    Id block = m_.type_block({m_.type_runtime_array(type, static_cast<int>(element.itemsize()))}, {0});
    Id var = m_.global_variable(m_.type_pointer(spv::StorageClass::StorageBuffer, block), spv::StorageClass::StorageBuffer);
    m_.decorate(var, spv::Decoration::DescriptorSet, {0});
    m_.decorate(var, spv::Decoration::Binding, {static_cast<uint32_t>(slot)});
    return memories_[u.get()] = Memory{var, spv::StorageClass::StorageBuffer, element};
  }

  const Memory& local_array(const UOpPtr& u) {
    if (u->src.empty() || u->src[0]->op != kiln::Op::CONST || !u->dtype.is_ptr || u->dtype.count != 1)
      fail(u, "DEFINE_LOCAL needs a scalar element type and a CONST number of elements (lower/lower.h)");
    int64_t size = as_int64(u->src[0]->const_value());
    if (size <= 0 || size > INT32_MAX) fail(u, cat("a workgroup array of ", size, " elements"));
    DType element = u->dtype.deref();
    Id length = m_.constant(m_.type_int(32, false), static_cast<uint64_t>(size));
    Id array = m_.type_array(memory_type(element), length);
    Id var = m_.global_variable(m_.type_pointer(spv::StorageClass::Workgroup, array), spv::StorageClass::Workgroup);
    return memories_[u.get()] = Memory{var, spv::StorageClass::Workgroup, element};
  }

  Id element_pointer(const Address& a, size_t lane) {
    const Memory& mem = *a.memory;
    Id ptr = m_.type_pointer(mem.storage, memory_type(mem.element));
    if (mem.storage == spv::StorageClass::StorageBuffer) return op(SOp::OpAccessChain, ptr, {mem.variable, u32(0), a.index[lane]});
    return op(SOp::OpAccessChain, ptr, {mem.variable, a.index[lane]});
  }

  Lanes load(const Address& a, DType value) {
    Lanes out;
    for (size_t l = 0; l < a.index.size(); ++l) {
      Id raw = op(SOp::OpLoad, memory_type(a.memory->element), {element_pointer(a, l)});
      if (is_bool(a.memory->element)) raw = op(SOp::OpINotEqual, m_.type_bool(), {raw, m_.constant(m_.type_int(8, false), 0)});
      out.push_back(convert(raw, a.memory->element, value));  // LOAD's dtype is the element's (checked by REF)
    }
    return out;
  }

  void store(const Address& a, const Lanes& value, DType value_dtype) {
    for (size_t l = 0; l < a.index.size(); ++l) {
      Id v = convert(value[l], value_dtype, a.memory->element);
      if (is_bool(a.memory->element)) {
        Id u8 = m_.type_int(8, false);
        v = op(SOp::OpSelect, u8, {v, m_.constant(u8, 1), m_.constant(u8, 0)});
      }
      m_.op_void(SOp::OpStore, {element_pointer(a, l), v});
    }
  }

  // Runs `body` only where `gate` holds: a structured selection. Returns the block `body` ended in.
  template <typename Body>
  Id guarded(Id gate, Body body) {
    Id then = m_.fresh(), merge = m_.fresh();
    m_.op_void(SOp::OpSelectionMerge, {merge, static_cast<uint32_t>(spv::SelectionControlMask::MaskNone)});
    m_.op_void(SOp::OpBranchConditional, {gate, then, merge});
    m_.label(then);
    body();
    Id last = m_.current_block();
    m_.op_void(SOp::OpBranch, {merge});
    m_.label(merge);
    return last;
  }

  Id gate_of(const UOpPtr& u, size_t i) {
    DType t = u->src.at(i)->dtype;
    if (t.count != 1) fail(u, cat("the gate must be a scalar, not ", t.name()));
    return convert(scalar(u->src[i]), t, dtypes::bool_);
  }

  // --- the ops -----------------------------------------------------------------------------------

  Id builtin(spv::BuiltIn which, Id& cache) {
    if (cache == 0) {
      Id v3 = m_.type_vector(m_.type_int(32, false), 3);
      cache = m_.global_variable(m_.type_pointer(spv::StorageClass::Input, v3), spv::StorageClass::Input);
      m_.decorate(cache, spv::Decoration::BuiltIn, {static_cast<uint32_t>(which)});
    }
    return cache;
  }

  Lanes special(const UOpPtr& u) {
    const std::string* name = std::get_if<std::string>(&u->arg);
    bool global = name && name->size() == 5 && name->rfind("gidx", 0) == 0, local = name && name->size() == 5 && name->rfind("lidx", 0) == 0;
    int dim = name && name->size() == 5 ? (*name)[4] - '0' : -1;
    if (!(global || local) || dim < 0 || dim > 2 || !is_int(u->dtype))
      fail(u, "a SPECIAL is an integer named gidx0..2 or lidx0..2 (lower/lower.h)");
    if (local) {
      if (u->src.empty() || u->src[0]->op != kiln::Op::CONST)
        fail(u, "the size of a lidx SPECIAL must be a constant: it is the workgroup size baked into the module");
      int64_t size = as_int64(u->src[0]->const_value());
      if (size < 1 || size > 65535) fail(u, cat("a workgroup size of ", size));
      if (local_size_[dim] != 1 && local_size_[dim] != static_cast<uint32_t>(size))
        fail(u, cat("lidx", dim, " has two sizes, ", local_size_[dim], " and ", size));
      local_size_[dim] = static_cast<uint32_t>(size);
    }
    Id var = global ? builtin(spv::BuiltIn::WorkgroupId, workgroup_id_) : builtin(spv::BuiltIn::LocalInvocationId, local_id_);
    Id v3 = op(SOp::OpLoad, m_.type_vector(m_.type_int(32, false), 3), {var});
    Id index = op(SOp::OpCompositeExtract, m_.type_int(32, false), {v3, static_cast<uint32_t>(dim)});
    return {convert(index, dtypes::uint32, u->dtype)};
  }

  Lanes var_value(const UOpPtr& u) {
    size_t i = 0;
    while (i < vars_.size() && vars_[i] != u) ++i;
    if (i == vars_.size()) fail(u, "a DEFINE_VAR that is not among the kernel's vars");
    if (!is_int(u->dtype) || bits(u->dtype.scalar) < 32) fail(u, "kernel variables are 32- or 64-bit integers");
    if (push_block_ == 0) {
      std::vector<Id> members;
      std::vector<int> offsets;
      for (size_t k = 0; k < vars_.size(); ++k) {
        members.push_back(reg_type(vars_[k]->dtype));
        offsets.push_back(static_cast<int>(8 * k));
      }
      push_block_ = m_.global_variable(m_.type_pointer(spv::StorageClass::PushConstant, m_.type_block(members, offsets)),
                                       spv::StorageClass::PushConstant);
    }
    Id ptr = m_.type_pointer(spv::StorageClass::PushConstant, reg_type(u->dtype));
    return {op(SOp::OpLoad, reg_type(u->dtype), {op(SOp::OpAccessChain, ptr, {push_block_, u32(static_cast<uint32_t>(i))})})};
  }

  // Opens one structured loop counting 0, 1, ... while below `bound`; the body follows.
  Loop begin_loop(Id bound, DType t) {
    Id before = m_.current_block();
    Loop loop{m_.fresh(), m_.fresh(), m_.fresh(), m_.fresh(), m_.fresh(), m_.fresh()};
    m_.op_void(SOp::OpBranch, {loop.header});
    m_.label(loop.header);
    m_.op(SOp::OpPhi, reg_type(t), {constant(t, int64_t{0}), before, loop.next, loop.next_block}, loop.counter);
    Id more = op(is_unsigned(t) ? SOp::OpULessThan : SOp::OpSLessThan, m_.type_bool(), {loop.counter, bound});
    m_.op_void(SOp::OpLoopMerge, {loop.merge, loop.next_block, static_cast<uint32_t>(spv::LoopControlMask::MaskNone)});
    m_.op_void(SOp::OpBranchConditional, {more, loop.body, loop.merge});
    m_.label(loop.body);
    return loop;
  }

  void end_loop(const Loop& loop, DType t) {
    m_.op_void(SOp::OpBranch, {loop.next_block});
    m_.label(loop.next_block);
    m_.op(SOp::OpIAdd, reg_type(t), {loop.counter, constant(t, int64_t{1})}, loop.next);
    m_.op_void(SOp::OpBranch, {loop.header});
    m_.label(loop.merge);
  }

  void open_loop(const UOpPtr& u) {
    if (!is_int(u->dtype) || u->src.empty()) fail(u, "a RANGE is an integer loop counter with its bound as source 0");
    Loop loop = begin_loop(scalar(u->src[0]), u->dtype.scalar_of());
    values_[u.get()] = {loop.counter};
    loops_.push_back({u.get(), loop});
    trips_.push_back(std::max<double>(1, static_cast<double>(u->src[0]->vmax())) * (trips_.empty() ? 1 : trips_.back()));
  }

  void close_loop(const UOpPtr& u) {
    if (u->src.size() != 1 || loops_.empty() || loops_.back().first != u->src[0].get())
      fail(u, "an END closes the innermost open RANGE, its one source");
    end_loop(loops_.back().second, u->src[0]->dtype.scalar_of());
    loops_.pop_back();
    iterations_ += trips_.back();
    trips_.pop_back();
  }

  Address address(const UOpPtr& u) {
    if (u->op != kiln::Op::INDEX) fail(u, "memory is accessed through an INDEX");
    auto it = addresses_.find(u.get());
    if (it == addresses_.end()) fail(u, "the INDEX is not computed before its use");
    return it->second;
  }

  void render(const UOpPtr& u) {
    switch (u->op) {
      case kiln::Op::CONST: lanes(u); return;
      case kiln::Op::DEFINE_GLOBAL: buffer(u); return;
      case kiln::Op::DEFINE_LOCAL: local_array(u); return;
      case kiln::Op::DEFINE_VAR: values_[u.get()] = var_value(u); return;
      case kiln::Op::SPECIAL: values_[u.get()] = special(u); return;
      case kiln::Op::RANGE: open_loop(u); return;
      case kiln::Op::END: close_loop(u); return;
      case kiln::Op::BARRIER: {
        Id scope = u32(static_cast<uint32_t>(spv::Scope::Workgroup));
        Id semantics = u32(static_cast<uint32_t>(spv::MemorySemanticsMask::AcquireRelease | spv::MemorySemanticsMask::WorkgroupMemory));
        m_.op_void(SOp::OpControlBarrier, {scope, scope, semantics});
        return;
      }
      case kiln::Op::INDEX: {
        if (u->src.size() != 2) fail(u, "INDEX is (buffer, index); a validity source has no defined meaning (gate the LOAD/STORE)");
        auto mem = memories_.find(u->src[0].get());
        if (mem == memories_.end()) fail(u, "INDEX addresses a DEFINE_GLOBAL or DEFINE_LOCAL defined before it");
        DType index_type = u->src[1]->dtype;
        if (!is_int(index_type) || index_type.count != 1) fail(u, "the index is a scalar integer");
        Address a{&mem->second, {scalar(u->src[1])}};
        for (int l = 1; l < u->dtype.deref().count; ++l)  // a vector access moves consecutive elements
          a.index.push_back(op(SOp::OpIAdd, reg_type(index_type), {a.index[0], constant(index_type, int64_t{l})}));
        addresses_[u.get()] = a;
        return;
      }
      case kiln::Op::LOAD: {
        if (u->src.at(0)->op == kiln::Op::DEFINE_REG) {  // the accumulator's value; other sources only order the read
          Lanes out;
          for (Id var : registers_.at(u->src[0].get())) out.push_back(op(SOp::OpLoad, reg_type(u->dtype.scalar_of()), {var}));
          values_[u.get()] = out;
          return;
        }
        Address a = address(u->src[0]);
        if (a.index.size() != u->dtype.count) fail(u, "the INDEX has as many lanes as the value");
        if (u->src.size() != 3) {  // a second source alone only orders the load
          values_[u.get()] = load(a, u->dtype);
          return;
        }
        const Lanes& alt = lanes(u->src[1]);
        Id gate = gate_of(u, 2), before = m_.current_block();
        Lanes loaded;
        Id then = guarded(gate, [&] { loaded = load(a, u->dtype); });
        Lanes out;
        for (size_t l = 0; l < loaded.size(); ++l)
          out.push_back(m_.op(SOp::OpPhi, reg_type(u->dtype.scalar_of()), {loaded[l], then, alt.at(l), before}));
        values_[u.get()] = out;
        return;
      }
      case kiln::Op::STORE: {
        if (u->src.size() < 2 || u->src.size() > 3) fail(u, "a STORE is (INDEX, value[, gate])");
        Address a = address(u->src[0]);
        const Lanes& value = lanes(u->src[1]);
        if (a.index.size() != value.size()) fail(u, "the INDEX has as many lanes as the value");
        if (u->src.size() == 2) store(a, value, u->src[1]->dtype);
        else guarded(gate_of(u, 2), [&] { store(a, value, u->src[1]->dtype); });
        return;
      }
      case kiln::Op::DEFINE_REG: {
        if (u->src.empty()) fail(u, "DEFINE_REG needs its initial value as source 0");
        DType t = u->dtype.is_ptr ? u->dtype.deref() : u->dtype;  // lowering gives the value's dtype, REF accepts both
        auto [it, added] = registers_.emplace(u.get(), Lanes{});
        if (added)
          for (int l = 0; l < t.count; ++l)
            it->second.push_back(m_.local_variable(m_.type_pointer(spv::StorageClass::Function, reg_type(t.scalar_of()))));
        const Lanes& init = lanes(u->src[0]);
        for (size_t l = 0; l < it->second.size(); ++l)  // (re)initialized here, each time the program passes
          m_.op_void(SOp::OpStore, {it->second[l], convert(init.at(l), u->src[0]->dtype, t)});
        return;
      }
      case kiln::Op::ASSIGN: {
        if (u->src.size() < 2 || u->src[0]->op != kiln::Op::DEFINE_REG) fail(u, "ASSIGN in a kernel is (DEFINE_REG, value, ranges...)");
        const Lanes& vars = registers_.at(u->src[0].get());
        const Lanes& value = lanes(u->src[1]);
        if (value.size() != vars.size()) fail(u, "the value has as many lanes as the register");
        for (size_t l = 0; l < vars.size(); ++l) m_.op_void(SOp::OpStore, {vars[l], value[l]});
        values_[u.get()] = value;
        return;
      }
      case kiln::Op::VECTORIZE: {
        Lanes out;
        for (const UOpPtr& s : u->src) out.push_back(scalar(s));
        values_[u.get()] = out;
        return;
      }
      case kiln::Op::GEP: {
        const Lanes& from = lanes(u->src.at(0));
        int64_t lane = u->arg_as<int64_t>();
        if (lane < 0 || static_cast<size_t>(lane) >= from.size()) fail(u, cat("lane ", lane, " of ", from.size()));
        values_[u.get()] = {from[static_cast<size_t>(lane)]};
        return;
      }
      case kiln::Op::BITCAST: {
        const Lanes& x = lanes(u->src.at(0));
        if (u->src[0]->dtype.itemsize() != u->dtype.itemsize()) fail(u, "a BITCAST keeps the size");
        Lanes out;
        for (Id v : x) out.push_back(reinterpret(v, u->src[0]->dtype, u->dtype));
        values_[u.get()] = out;
        return;
      }
      case kiln::Op::CAST: case kiln::Op::NEG: case kiln::Op::RECIP: case kiln::Op::SQRT: case kiln::Op::EXP2:
      case kiln::Op::LOG2: case kiln::Op::SIN: case kiln::Op::TRUNC: case kiln::Op::ADD: case kiln::Op::SUB:
      case kiln::Op::MUL: case kiln::Op::FDIV: case kiln::Op::IDIV: case kiln::Op::MOD: case kiln::Op::MAX:
      case kiln::Op::MIN: case kiln::Op::POW: case kiln::Op::CMPLT: case kiln::Op::CMPNE: case kiln::Op::CMPEQ:
      case kiln::Op::AND: case kiln::Op::OR: case kiln::Op::XOR: case kiln::Op::SHL: case kiln::Op::SHR:
      case kiln::Op::WHERE: case kiln::Op::MULACC: {
        size_t first = u->op == kiln::Op::WHERE ? 1 : 0;  // WHERE's condition is read as bool
        DType in = u->src.at(first)->dtype.scalar_of();
        std::vector<const Lanes*> src;
        for (const UOpPtr& s : u->src) {
          src.push_back(&lanes(s));
          if (src.back()->size() != u->dtype.count) fail(u, "operands have the result's lanes");
        }
        Lanes out;
        for (size_t l = 0; l < u->dtype.count; ++l) {
          std::vector<Id> x;
          for (size_t i = 0; i < src.size(); ++i) x.push_back((*src[i])[l]);
          if (u->op == kiln::Op::WHERE) x[0] = convert(x[0], u->src[0]->dtype, dtypes::bool_);
          out.push_back(alu(u, in, x));
        }
        values_[u.get()] = out;
        return;
      }
      case kiln::Op::IF: case kiln::Op::ENDIF:
        fail(u, "IF/ENDIF blocks are not implemented yet in the SPIR-V renderer (nor in the C renderer)");
      case kiln::Op::SINK: case kiln::Op::NOOP: case kiln::Op::DEVICE: case kiln::Op::BUFFER: case kiln::Op::CONTIGUOUS:
      case kiln::Op::COPY: case kiln::Op::DETACH: case kiln::Op::REDUCE_AXIS: case kiln::Op::IOTA: case kiln::Op::GATHER: case kiln::Op::SCATTER_ADD: case kiln::Op::RESHAPE:
      case kiln::Op::PERMUTE: case kiln::Op::EXPAND: case kiln::Op::PAD: case kiln::Op::SHRINK: case kiln::Op::FLIP:
      case kiln::Op::REDUCE:
        break;
    }
    fail(u, "not an op of a lowered (linear) program");
  }

  std::string name_;
  size_t num_buffers_;
  const std::vector<UOpPtr>& vars_;
  SpirvModule m_;
  SpirvMath math_{m_};
  Id entry_ = 0, push_block_ = 0, workgroup_id_ = 0, local_id_ = 0;
  std::array<uint32_t, 3> local_size_{1, 1, 1};
  size_t pos_ = 0;
  std::unordered_map<const UOp*, Lanes> values_, registers_;
  std::unordered_map<const UOp*, Memory> memories_;
  std::unordered_map<const UOp*, Address> addresses_;
  std::vector<std::pair<const UOp*, Loop>> loops_;
  std::vector<double> trips_;  // per open loop: the most times its body runs in one invocation
  double iterations_ = 0;      // the most loop iterations (back edges) one invocation runs
};

}  // namespace

std::string render_spirv(const std::string& name, const std::vector<UOpPtr>& linear, size_t num_buffers,
                         const std::vector<UOpPtr>& vars) {
  return SpirvRenderer(name, num_buffers, vars).run(linear);
}

}  // namespace kiln
