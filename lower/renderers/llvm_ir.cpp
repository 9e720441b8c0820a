#include "lower/renderers/llvm_ir.h"

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "uop/half.h"

namespace kiln {

namespace {

// The LLVM spelling of a scalar: bool is i1 as a value (i8 in memory, see memory_type), the 16-bit
// floats are their bits.
std::string scalar_type(ScalarType s) {
  switch (s) {
    case ScalarType::Void: return "void";
    case ScalarType::Bool: return "i1";
    case ScalarType::Int8: case ScalarType::UInt8: return "i8";
    case ScalarType::Int16: case ScalarType::UInt16: case ScalarType::Float16: case ScalarType::BFloat16: return "i16";
    case ScalarType::Int32: case ScalarType::UInt32: return "i32";
    case ScalarType::Int64: case ScalarType::UInt64: return "i64";
    case ScalarType::Float32: return "float";
    case ScalarType::Float64: return "double";
  }
  return "void";
}

std::string type_of(DType d) {
  std::string s = scalar_type(d.scalar);
  return d.count > 1 ? cat("<", d.count, " x ", s, ">") : s;
}

// What a value of dtype d is stored as: bool is a byte.
std::string memory_type(DType d) {
  std::string s = d.scalar == ScalarType::Bool ? "i8" : scalar_type(d.scalar);
  return d.count > 1 ? cat("<", d.count, " x ", s, ">") : s;
}

// The suffix of an overloaded intrinsic for the type: "f32", "v16f32", "i32".
std::string intrinsic_suffix(DType d) {
  std::string s = scalar_type(d.scalar);
  if (s == "float") s = "f32";
  if (s == "double") s = "f64";
  return d.count > 1 ? cat("v", d.count, s) : s;
}

// Arithmetic is done in the computing type: float32 for the 16-bit floats is the caller's job (CAST).
bool is_fp(DType d) { return d.scalar == ScalarType::Float32 || d.scalar == ScalarType::Float64; }

// A float literal: LLVM reads floats exactly as the hex of their double value (a float32's is exact).
std::string float_literal(double x, ScalarType s) {
  if (s == ScalarType::Float32) x = static_cast<double>(static_cast<float>(x));
  char text[32];
  std::snprintf(text, sizeof text, "0x%016" PRIX64, std::bit_cast<uint64_t>(x));
  return text;
}

// The scalar literal of v in dtype d's scalar: integers as their two's complement in the width (LLVM
// reads an unsigned 2^64-1 only as -1), bool as true/false, 16-bit floats as their bits.
std::string scalar_literal(const ConstValue& v, DType d) {
  ConstValue c = cast_const(v, d.scalar_of());
  switch (d.scalar) {
    case ScalarType::Bool: return std::get<bool>(c) ? "true" : "false";
    case ScalarType::Float16: return std::to_string(float_to_half_bits(static_cast<float>(std::get<double>(c))));
    case ScalarType::BFloat16: return std::to_string(float_to_bf16_bits(static_cast<float>(std::get<double>(c))));
    case ScalarType::Float32: case ScalarType::Float64: return float_literal(std::get<double>(c), d.scalar);
    case ScalarType::Int8: return std::to_string(static_cast<int8_t>(std::get<int64_t>(c)));
    case ScalarType::Int16: return std::to_string(static_cast<int16_t>(std::get<int64_t>(c)));
    case ScalarType::Int32: return std::to_string(static_cast<int32_t>(std::get<int64_t>(c)));
    case ScalarType::Int64: return std::to_string(std::get<int64_t>(c));
    case ScalarType::UInt8: return std::to_string(static_cast<int8_t>(std::get<uint64_t>(c)));
    case ScalarType::UInt16: return std::to_string(static_cast<int16_t>(std::get<uint64_t>(c)));
    case ScalarType::UInt32: return std::to_string(static_cast<int32_t>(std::get<uint64_t>(c)));
    case ScalarType::UInt64: return std::to_string(static_cast<int64_t>(std::get<uint64_t>(c)));
    case ScalarType::Void: break;
  }
  throw_internal("a constant has a value type", d.name(), __FILE__, __LINE__);
}

// The literal of v in every lane of d (an operand: the instruction names the type).
std::string literal(const ConstValue& v, DType d) {
  std::string lane = scalar_literal(v, d);
  if (d.count == 1) return lane;
  std::string s = "<";
  for (int i = 0; i < d.count; ++i) s += cat(i ? ", " : "", scalar_type(d.scalar), " ", lane);
  return s + ">";
}

class Renderer {
 public:
  std::string run(const std::string& name, const std::vector<UOpPtr>& linear, size_t num_buffers,
                  const std::vector<UOpPtr>& vars) {
    bool threaded = false;
    for (const UOpPtr& u : linear) {
      if (u->op == Op::SPECIAL) threaded = true;
      if (u->op == Op::ASSIGN) updates_.insert(u->src[1].get());  // emitted at the ASSIGN, as in C
    }
    single_accumulator_ = updates_.size() == 1;
    for (const UOpPtr& u : linear)
      if (widens(u)) wide_.insert(u.get());
    buffer_types_.assign(num_buffers, dtypes::uint8);
    for (const UOpPtr& u : linear)
      if (u->op == Op::DEFINE_GLOBAL) buffer_types_.at(static_cast<size_t>(u->arg_as<int64_t>())) = u->dtype.deref();
    for (size_t i = 0; i < num_buffers; ++i) {
      std::string slot = std::to_string(i), t = memory_type(buffer_types_[i]);
      prologue_ << "  %buf" << slot << ".at = getelementptr i8*, i8** %bufs, i64 " << slot << "\n"
                << "  %buf" << slot << ".raw = load i8*, i8** %buf" << slot << ".at, align 8\n"
                << "  %data" << slot << " = bitcast i8* %buf" << slot << ".raw to " << t << "*\n";
    }
    for (size_t i = 0; i < vars.size(); ++i) {
      std::string slot = std::to_string(i);
      prologue_ << "  %var" << slot << ".at = getelementptr i64, i64* %vars, i64 " << slot << "\n"
                << "  %var" << slot << ".i64 = load i64, i64* %var" << slot << ".at, align 8\n";
      if (type_of(vars[i]->dtype) == "i64") {
        names_[vars[i].get()] = "%var" + slot + ".i64";
      } else if (wide_.count(vars[i].get())) {
        names_[vars[i].get()] = "%var" + slot + ".i64";
        prologue_ << "  %var" << slot << " = trunc i64 %var" << slot << ".i64 to " << type_of(vars[i]->dtype) << "\n";
        narrow_[vars[i].get()] = "%var" + slot;
      } else {
        prologue_ << "  %var" << slot << " = trunc i64 %var" << slot << ".i64 to " << type_of(vars[i]->dtype) << "\n";
        names_[vars[i].get()] = "%var" + slot;
      }
    }
    if (threaded) {
      body_ << "  br label %gid.head\ngid.head:\n"
            << "  %gidx0 = phi i64 [ %gid_begin, %entry ], [ %gid.next, %gid.latch ]\n"
            << "  %gid.more = icmp slt i64 %gidx0, %gid_end\n"
            << "  br i1 %gid.more, label %gid.body, label %gid.exit\ngid.body:\n";
      block_ = "%gid.body";
    }
    for (const UOpPtr& u : linear) statement(u);
    if (threaded) {
      body_ << "  br label %gid.latch\ngid.latch:\n  %gid.next = add i64 %gidx0, 1\n  br label %gid.head\ngid.exit:\n";
    }
    body_ << "  ret void\n";

    std::ostringstream out;
    out << "define void @" << name << "(i8** %bufs, i64* %vars, i64 %gid_begin, i64 %gid_end) #0 {\nentry:\n"
        << allocas_.str() << prologue_.str() << body_.str() << "}\n\n";
    for (const std::string& d : declarations_) out << d << "\n";
    // no-trapping-math is clang's default; the target CPU and features come from the compiler.
    out << "attributes #0 = { nounwind \"no-trapping-math\"=\"true\" }\n";
    return out.str();
  }

 private:
  // --- values ---------------------------------------------------------------------------------

  // The operand spelling of u: a literal for a constant; an accumulator is read here, where the
  // value is used, as the C renderer's variable is.
  std::string name(const UOpPtr& u) {
    if (u->op == Op::CONST) return literal(u->const_value(), u->dtype);
    if (u->op == Op::LOAD && u->src[0]->op == Op::DEFINE_REG)
      return emit(cat("load ", type_of(u->dtype), ", ", type_of(u->dtype), "* ", name(u->src[0])));
    if (!wide_context_ && wide_.count(u.get())) return narrow_.at(u.get());
    auto it = names_.find(u.get());
    if (it != names_.end()) return it->second;
    throw_internal("every source is rendered before its user", str(u), __FILE__, __LINE__);
  }

  // The value type of an accumulator: lowering gives DEFINE_REG the value's dtype (a pointer is accepted too).
  static DType register_type(const UOpPtr& reg) { return reg->dtype.is_ptr ? reg->dtype.deref() : reg->dtype; }

  std::string typed(const UOpPtr& u) { return value_type(u) + " " + name(u); }

  // --- index arithmetic in i64 ------------------------------------------------------------------
  // Integer index math (the launch index, loop counters, vars, and + - * // % max min over them) is
  // rendered in i64 where its value range lies strictly inside int32's, so every value is the int32
  // one and no operation can wrap differently. GEPs take it without a sign extension: with i32
  // index math, LLVM's induction-variable passes (widening each i32 counter for its sext users) took
  // about 60% of a tiled conv's compile time. A user that needs the int32 value (a store, a cast, an
  // ALU outside this set) reads a trunc made right after the definition.
  bool widens(const UOpPtr& u) const {
    if (u->dtype != dtypes::int32 || updates_.count(u.get())) return false;
    if (u->vmin() <= INT32_MIN || u->vmax() >= INT32_MAX) return false;  // the whole range: it may have wrapped
    auto wide_or_const = [&](const UOpPtr& x) { return x->op == Op::CONST || wide_.count(x.get()) > 0; };
    if (u->op == Op::SPECIAL || u->op == Op::DEFINE_VAR) return true;
    if (u->op == Op::RANGE) return wide_or_const(u->end());
    constexpr Op kArithmetic[] = {Op::ADD, Op::SUB, Op::MUL, Op::IDIV, Op::MOD, Op::MAX, Op::MIN, Op::NEG};
    return std::find(std::begin(kArithmetic), std::end(kArithmetic), u->op) != std::end(kArithmetic) &&
           std::all_of(u->src.begin(), u->src.end(), wide_or_const);
  }
  // The LLVM type u's value is rendered in where users read it at full width.
  std::string value_type(const UOpPtr& u) const { return wide_context_ && wide_.count(u.get()) ? "i64" : type_of(u->dtype); }
  // While one lives, operands are read at full width (i64 where wide).
  struct WideContext {
    bool& flag;
    bool saved;
    WideContext(bool& f, bool on) : flag(f), saved(f) { flag = on; }
    ~WideContext() { flag = saved; }
  };
  // A comparison of index values (all wide or constants, one at least wide) compares them in i64.
  bool compares_wide(const UOpPtr& u) const {
    if (u->op != Op::CMPLT && u->op != Op::CMPNE && u->op != Op::CMPEQ) return false;
    bool any = false;
    for (const UOpPtr& x : u->src) {
      if (wide_.count(x.get())) any = true;
      else if (x->op != Op::CONST || x->dtype != dtypes::int32) return false;
    }
    return any;
  }
  // After a wide definition: its int32 form, for the users that read int32.
  void make_narrow(const UOpPtr& u) {
    if (wide_.count(u.get())) narrow_[u.get()] = emit(cat("trunc i64 ", names_.at(u.get()), " to i32"));
  }

  std::string fresh() { return cat("%v", counter_++); }
  std::string label(const char* what) { return cat(what, counter_++); }

  // One instruction with a result; returns the result's name.
  std::string emit(const std::string& rhs) {
    std::string v = fresh();
    body_ << "  " << v << " = " << rhs << "\n";
    return v;
  }
  void line(const std::string& text) { body_ << "  " << text << "\n"; }
  void open_block(const std::string& l) {
    body_ << l << ":\n";
    block_ = "%" + l;
  }

  std::string declare(const std::string& ret, const std::string& fn, const std::string& params) {
    declarations_.insert(cat("declare ", ret, " @", fn, "(", params, ")"));
    return "@" + fn;
  }

  // A call of the overloaded intrinsic llvm.<base>.<suffix of t> on values of type t.
  std::string intrinsic(const std::string& base, DType t, const std::vector<std::string>& args) {
    std::string ty = type_of(t), params, call_args;
    for (size_t i = 0; i < args.size(); ++i) {
      params += cat(i ? ", " : "", ty);
      call_args += cat(i ? ", " : "", ty, " ", args[i]);
    }
    std::string fn = declare(ty, cat("llvm.", base, ".", intrinsic_suffix(t)), params);
    return emit(cat("call ", ty, " ", fn, "(", call_args, ")"));
  }

  std::string constant(double x, DType t) { return literal(ConstValue{x}, t); }
  std::string int_constant(int64_t x, DType t) { return literal(ConstValue{x}, t); }

  // --- conversions ----------------------------------------------------------------------------

  // x (of dtype `from`, a 16-bit float's bits) as float32 lanes.
  std::string narrow_to_f32(const std::string& x, DType from) {
    DType f32 = dtypes::float32.vec(from.count);
    if (from.scalar == ScalarType::Float16) {
      std::string half = from.count > 1 ? cat("<", from.count, " x half>") : "half";
      std::string h = emit(cat("bitcast ", type_of(from), " ", x, " to ", half));
      return emit(cat("fpext ", half, " ", h, " to ", type_of(f32)));
    }
    DType i32 = dtypes::int32.vec(from.count);
    std::string w = emit(cat("zext ", type_of(from), " ", x, " to ", type_of(i32)));
    std::string s = emit(cat("shl ", type_of(i32), " ", w, ", ", int_constant(16, i32)));
    return emit(cat("bitcast ", type_of(i32), " ", s, " to ", type_of(f32)));
  }

  // float32 lanes x rounded (to nearest even) to the bits of `to`, a 16-bit float.
  std::string f32_to_narrow(const std::string& x, DType to) {
    DType f32 = dtypes::float32.vec(to.count), i32 = dtypes::int32.vec(to.count);
    if (to.scalar == ScalarType::Float16) {
      std::string half = to.count > 1 ? cat("<", to.count, " x half>") : "half";
      std::string h = emit(cat("fptrunc ", type_of(f32), " ", x, " to ", half));
      return emit(cat("bitcast ", half, " ", h, " to ", type_of(to)));
    }
    // bfloat16: a NaN keeps its sign and top bits, made quiet; anything else rounds to nearest even.
    std::string ti = type_of(i32);
    std::string bits = emit(cat("bitcast ", type_of(f32), " ", x, " to ", ti));
    std::string magnitude = emit(cat("and ", ti, " ", bits, ", ", int_constant(0x7fffffff, i32)));
    std::string nan = emit(cat("icmp ugt ", ti, " ", magnitude, ", ", int_constant(0x7f800000, i32)));
    std::string high = emit(cat("lshr ", ti, " ", bits, ", ", int_constant(16, i32)));
    std::string quiet = emit(cat("or ", ti, " ", high, ", ", int_constant(0x40, i32)));
    std::string odd = emit(cat("and ", ti, " ", high, ", ", int_constant(1, i32)));
    std::string bias = emit(cat("add ", ti, " ", odd, ", ", int_constant(0x7fff, i32)));
    std::string sum = emit(cat("add ", ti, " ", bits, ", ", bias));
    std::string rounded = emit(cat("lshr ", ti, " ", sum, ", ", int_constant(16, i32)));
    std::string chosen = emit(cat("select ", type_of(dtypes::bool_.vec(to.count)), " ", nan, ", ", ti, " ", quiet, ", ", ti, " ", rounded));
    return emit(cat("trunc ", ti, " ", chosen, " to ", type_of(to)));
  }

  // x of dtype `from` converted to `to` with CAST's meaning (uop/ops.h), lanes alike.
  std::string convert(std::string x, DType from, DType to) {
    if (from.scalar == to.scalar) return x;
    bool narrow_from = from.scalar == ScalarType::Float16 || from.scalar == ScalarType::BFloat16;
    bool narrow_to = to.scalar == ScalarType::Float16 || to.scalar == ScalarType::BFloat16;
    if (narrow_from) {
      x = narrow_to_f32(x, from);
      from = dtypes::float32.vec(from.count);
      if (from.scalar == to.scalar) return x;
    }
    if (narrow_to) {
      // Through float32, as the C renderer's kiln_f2h((float)x): one conversion to float32, then one rounding.
      DType f32 = dtypes::float32.vec(to.count);
      return f32_to_narrow(convert(x, from, f32), to);
    }
    std::string tf = type_of(from), tt = type_of(to);
    if (is_bool(to)) {
      if (is_fp(from)) return emit(cat("fcmp une ", tf, " ", x, ", ", constant(0.0, from)));
      return emit(cat("icmp ne ", tf, " ", x, ", ", int_constant(0, from)));
    }
    if (is_bool(from)) return emit(cat(is_fp(to) ? "uitofp " : "zext ", tf, " ", x, " to ", tt));
    if (is_int(from) && is_int(to)) {
      int fb = bits(from.scalar), tb = bits(to.scalar);
      if (fb == tb) return x;
      if (fb > tb) return emit(cat("trunc ", tf, " ", x, " to ", tt));
      return emit(cat(is_unsigned(from) ? "zext " : "sext ", tf, " ", x, " to ", tt));
    }
    if (is_int(from)) return emit(cat(is_unsigned(from) ? "uitofp " : "sitofp ", tf, " ", x, " to ", tt));
    if (is_int(to)) {
      // Saturating, NaN -> 0: cast_const's rule.
      std::string fn = declare(tt, cat(is_unsigned(to) ? "llvm.fptoui.sat." : "llvm.fptosi.sat.", intrinsic_suffix(to), ".",
                                       intrinsic_suffix(from)), tf);
      return emit(cat("call ", tt, " ", fn, "(", tf, " ", x, ")"));
    }
    return emit(cat(bits(from.scalar) < bits(to.scalar) ? "fpext " : "fptrunc ", tf, " ", x, " to ", tt));
  }

  // --- ALU --------------------------------------------------------------------------------------

  // MAX/MIN: a float NaN on either side wins, as in C's (a != a || a > b) ? a : b.
  std::string max_min(const UOpPtr& u) {
    DType t = u->src[0]->dtype;
    std::string ty = value_type(u), a = name(u->src[0]), b = name(u->src[1]);  // MAX/MIN: u has its operands' dtype
    std::string bt = type_of(dtypes::bool_.vec(t.count));
    bool max = u->op == Op::MAX;
    std::string pick;
    if (is_fp(t)) {
      std::string nan = emit(cat("fcmp uno ", ty, " ", a, ", ", a));
      std::string order = emit(cat("fcmp ", max ? "ogt " : "olt ", ty, " ", a, ", ", b));
      pick = emit(cat("or ", bt, " ", nan, ", ", order));
    } else {
      bool u_cmp = is_unsigned(t) || is_bool(t);
      pick = emit(cat("icmp ", max ? (u_cmp ? "ugt " : "sgt ") : (u_cmp ? "ult " : "slt "), ty, " ", a, ", ", b));
    }
    return emit(cat("select ", bt, " ", pick, ", ", ty, " ", a, ", ", ty, " ", b));
  }

  std::string alu(const UOpPtr& u) {
    DType t = u->dtype, s = u->src.empty() ? t : u->src.back()->dtype;
    std::string ty = value_type(u);  // t is u's dtype
    bool fp = is_fp(s), uns = is_unsigned(s) || is_bool(s);
    auto a = [&](size_t i) { return name(u->src[i]); };
    auto binary = [&](const char* fop, const char* iop) {
      std::string x = a(0), y = a(1);
      const char* op = fp ? fop : iop;
      // The one accumulator update of a single-accumulator reduction may be reassociated (C: KILN_REASSOC).
      bool reassoc = fp && single_accumulator_ && updates_.count(u.get()) && (u->op == Op::ADD || u->op == Op::MUL);
      // Wide index math never wraps (its range is inside int32's): nsw lets LLVM's scalar evolution
      // reason about it directly (a tiled conv's O2 pipeline ran 2x faster).
      bool nsw = wide_context_ && wide_.count(u.get()) && (u->op == Op::ADD || u->op == Op::SUB || u->op == Op::MUL);
      return emit(cat(op, reassoc ? " reassoc" : "", nsw ? " nsw" : "", " ", ty, " ", x, ", ", y));
    };
    auto compare = [&](const char* fop, const char* sop, const char* uop) {
      std::string x = a(0), y = a(1);
      return emit(cat(fp ? "fcmp " : "icmp ", fp ? fop : (uns ? uop : sop), " ", wide_context_ ? "i64" : type_of(s), " ", x, ", ", y));
    };
    switch (u->op) {
      case Op::NEG: {
        std::string x = a(0);
        return fp ? emit(cat("fneg ", ty, " ", x)) : emit(cat("sub ", ty, " ", int_constant(0, t), ", ", x));
      }
      case Op::RECIP: {
        std::string x = a(0);
        return emit(cat("fdiv ", ty, " ", constant(1.0, t), ", ", x));
      }
      case Op::SQRT: return intrinsic("sqrt", t, {a(0)});
      case Op::EXP2: return intrinsic("exp2", t, {a(0)});
      case Op::LOG2: return intrinsic("log2", t, {a(0)});
      case Op::SIN: return intrinsic("sin", t, {a(0)});
      case Op::TRUNC: return intrinsic("trunc", t, {a(0)});
      case Op::POW: return intrinsic("pow", t, {a(0), a(1)});
      // bool is i1 here, where add and mul would wrap: C's bool arithmetic is || and && (1 + 1 stores as true).
      case Op::ADD: return binary("fadd contract", is_bool(t) ? "or" : "add");
      case Op::SUB: return binary("fsub contract", "sub");
      case Op::MUL: return binary("fmul contract", is_bool(t) ? "and" : "mul");
      case Op::FDIV: return binary("fdiv", "sdiv");
      case Op::IDIV: return binary("fdiv", uns ? "udiv" : "sdiv");
      case Op::MOD: return binary("frem", uns ? "urem" : "srem");
      case Op::MAX: case Op::MIN: return max_min(u);
      case Op::CMPLT: return compare("olt", "slt", "ult");
      case Op::CMPNE: return compare("une", "ne", "ne");
      case Op::CMPEQ: return compare("oeq", "eq", "eq");
      case Op::AND: return binary("and", "and");
      case Op::OR: return binary("or", "or");
      case Op::XOR: return binary("xor", "xor");
      case Op::SHL: return binary("shl", "shl");
      case Op::SHR: return binary(uns ? "lshr" : "ashr", uns ? "lshr" : "ashr");
      case Op::WHERE: {
        std::string c = name(u->src[0]), x = a(1), y = a(2);
        return emit(cat("select ", type_of(u->src[0]->dtype), " ", c, ", ", ty, " ", x, ", ", ty, " ", y));
      }
      case Op::MULACC: {
        std::string x = a(0), y = a(1), z = a(2);
        std::string m = emit(cat(fp ? "fmul contract " : is_bool(t) ? "and " : "mul ", ty, " ", x, ", ", y));
        bool reassoc = fp && single_accumulator_ && updates_.count(u.get());
        return emit(cat(fp ? "fadd contract" : is_bool(t) ? "or" : "add", reassoc ? " reassoc " : " ", ty, " ", m, ", ", z));
      }
      case Op::CAST: return convert(a(0), u->src[0]->dtype, t);
      case Op::BITCAST: {
        std::string x = a(0), from = type_of(u->src[0]->dtype);
        return from == ty ? x : emit(cat("bitcast ", from, " ", x, " to ", ty));
      }
      case Op::SINK: case Op::NOOP: case Op::CONST: case Op::DEFINE_VAR: case Op::DEVICE: case Op::BUFFER:
      case Op::CONTIGUOUS: case Op::COPY: case Op::ASSIGN: case Op::DETACH: case Op::REDUCE_AXIS: case Op::IOTA: case Op::GATHER: case Op::SCATTER_ADD:
      case Op::RESHAPE: case Op::PERMUTE: case Op::EXPAND: case Op::PAD: case Op::SHRINK: case Op::FLIP:
      case Op::DEFINE_GLOBAL: case Op::DEFINE_LOCAL: case Op::DEFINE_REG: case Op::INDEX: case Op::LOAD: case Op::STORE:
      case Op::RANGE: case Op::END: case Op::REDUCE: case Op::SPECIAL: case Op::BARRIER: case Op::IF: case Op::ENDIF:
      case Op::VECTORIZE: case Op::GEP:
        break;
    }
    throw_internal("alu() is called for ALU ops and casts", std::string(op_name(u->op)), __FILE__, __LINE__);
  }

  // --- memory -----------------------------------------------------------------------------------

  // The address of INDEX u as a pointer to `value` (a vector reads count elements from there).
  std::string address(const UOpPtr& index, DType value) {
    const std::string& element = names_.at(index.get());
    if (value.count == 1) return element;
    std::string scalar = memory_type(value.scalar_of());
    return emit(cat("bitcast ", scalar, "* ", element, " to ", memory_type(value), "*"));
  }

  std::string load(const UOpPtr& u) {
    DType t = u->dtype;
    std::string mem = memory_type(t);
    std::string p = address(u->src[0], t);
    std::string raw = emit(cat("load ", mem, ", ", mem, "* ", p, ", align ", bits(t.scalar) / 8));
    if (!is_bool(t)) return raw;
    return emit(cat("icmp ne ", mem, " ", raw, ", ", literal(ConstValue{int64_t{0}}, dtypes::int8.vec(t.count))));
  }

  void store(const UOpPtr& u) {
    const UOpPtr& value = u->src[1];
    DType t = value->dtype;
    std::string mem = memory_type(t), v = name(value);
    if (is_bool(t)) v = emit(cat("zext ", type_of(t), " ", v, " to ", mem));
    std::string p = address(u->src[0], t);
    line(cat("store ", mem, " ", v, ", ", mem, "* ", p, ", align ", bits(t.scalar) / 8));
  }

  // Blocks for a gate: the guarded code runs in `then`; returns {then, after}.
  std::pair<std::string, std::string> branch_on(const UOpPtr& gate) {
    std::string g = name(gate), then = label("then"), after = label("after");
    line(cat("br i1 ", g, ", label %", then, ", label %", after));
    return {then, after};
  }

  // --- statements -------------------------------------------------------------------------------

  void statement(const UOpPtr& u) {
    switch (u->op) {
      case Op::CONST: case Op::DEFINE_VAR: return;  // literals; vars are read in the prologue
      case Op::DEFINE_GLOBAL: names_[u.get()] = cat("%data", u->arg_as<int64_t>()); return;
      case Op::SPECIAL: {
        KILN_ASSERT(u->arg_as<std::string>() == "gidx0", "CPU-style kernels have the one launch index gidx0: ", str(u));
        names_[u.get()] = type_of(u->dtype) == "i64" || wide_.count(u.get()) ? "%gidx0" : emit(cat("trunc i64 %gidx0 to ", type_of(u->dtype)));
        make_narrow(u);
        return;
      }
      case Op::RANGE: {
        WideContext wide(wide_context_, wide_.count(u.get()) > 0);
        std::string loop = label("loop"), t = value_type(u);
        std::string end = wide_context_ ? name(u->end()) : convert(name(u->end()), u->end()->dtype, u->dtype);
        std::string r = cat("%", loop, ".i");
        names_[u.get()] = r;
        loops_[u.get()] = loop;
        line(cat("br label %", loop, ".head"));
        body_ << loop << ".head:\n";
        body_ << "  " << r << " = phi " << t << " [ 0, " << block_ << " ], [ %" << loop << ".next, %" << loop << ".latch ]\n";
        line(cat("%", loop, ".more = icmp slt ", t, " ", r, ", ", end));
        line(cat("br i1 %", loop, ".more, label %", loop, ".body, label %", loop, ".exit"));
        open_block(loop + ".body");
        make_narrow(u);
        return;
      }
      case Op::END: {
        const UOpPtr& r = u->src.at(0);
        const std::string& loop = loops_.at(r.get());
        line(cat("br label %", loop, ".latch"));
        body_ << loop << ".latch:\n";
        line(cat("%", loop, ".next = add nsw ", wide_.count(r.get()) ? "i64" : type_of(r->dtype), " ", names_.at(r.get()), ", 1"));  // < end
        line(cat("br label %", loop, ".head"));
        open_block(loop + ".exit");
        return;
      }
      case Op::INDEX: {
        DType element = u->src[0]->dtype.deref().scalar_of();
        std::string buffer = name(u->src[0]);
        WideContext wide(wide_context_, true);  // a GEP takes any integer width
        std::string index = typed(u->src[1]);
        names_[u.get()] = emit(cat("getelementptr inbounds ", memory_type(element), ", ", memory_type(element), "* ", buffer, ", ", index));
        return;
      }
      case Op::LOAD: {
        if (u->src[0]->op == Op::DEFINE_REG) return;  // read where used (name())
        if (u->src.size() < 3) {
          names_[u.get()] = load(u);
          return;
        }
        std::string alt = name(u->src[1]), from = block_;
        auto [then, after] = branch_on(u->src[2]);
        open_block(then);
        std::string loaded = load(u);
        std::string loaded_in = block_;
        line(cat("br label %", after));
        open_block(after);
        std::string t = type_of(u->dtype);
        names_[u.get()] = emit(cat("phi ", t, " [ ", loaded, ", ", loaded_in, " ], [ ", alt, ", ", from, " ]"));
        return;
      }
      case Op::STORE: {
        if (u->src.size() < 3) {
          store(u);
          return;
        }
        auto [then, after] = branch_on(u->src[2]);
        open_block(then);
        store(u);
        line(cat("br label %", after));
        open_block(after);
        return;
      }
      case Op::DEFINE_REG: {
        DType t = register_type(u);
        std::string acc = cat("%acc", counter_++);
        allocas_ << "  " << acc << " = alloca " << type_of(t) << "\n";
        names_[u.get()] = acc;
        std::string init = convert(name(u->src[0]), u->src[0]->dtype, t);
        line(cat("store ", type_of(t), " ", init, ", ", type_of(t), "* ", acc));
        return;
      }
      case Op::ASSIGN: {
        const UOpPtr& update = u->src[1];
        std::string value = names_.count(update.get()) ? names_[update.get()] : (names_[update.get()] = compute(update));
        DType t = register_type(u->src[0]);
        line(cat("store ", type_of(t), " ", value, ", ", type_of(t), "* ", name(u->src[0])));
        return;
      }
      case Op::VECTORIZE: {
        std::string t = type_of(u->dtype), v = "undef";
        if (std::all_of(u->src.begin(), u->src.end(), [&](const UOpPtr& s) { return s == u->src[0]; })) {
          // A broadcast: LLVM's splat idiom, two instructions instead of one insertelement per lane (16
          // per broadcast made the IR of a register-tiled conv 8x longer and its passes seconds long).
          std::string one = emit(cat("insertelement ", t, " undef, ", typed(u->src[0]), ", i32 0"));
          names_[u.get()] = emit(cat("shufflevector ", t, " ", one, ", ", t, " undef, <", u->src.size(), " x i32> zeroinitializer"));
          return;
        }
        for (size_t i = 0; i < u->src.size(); ++i) {
          std::string lane = typed(u->src[i]);
          v = emit(cat("insertelement ", t, " ", v, ", ", lane, ", i32 ", i));
        }
        names_[u.get()] = v;
        return;
      }
      case Op::GEP: {
        std::string v = typed(u->src[0]);
        names_[u.get()] = emit(cat("extractelement ", v, ", i32 ", u->arg_as<int64_t>()));
        return;
      }
      case Op::IF: {
        auto [then, after] = branch_on(u->src[0]);
        ifs_[u.get()] = after;
        open_block(then);
        return;
      }
      case Op::ENDIF: {
        const std::string& after = ifs_.at(u->src.at(0).get());
        line(cat("br label %", after));
        open_block(after);
        return;
      }
      case Op::DEFINE_LOCAL: case Op::BARRIER:
        throw_internal("CPU-style kernels have no workgroup memory or barriers", str(u), __FILE__, __LINE__);
      case Op::SINK: case Op::NOOP: case Op::DEVICE: case Op::BUFFER: case Op::CONTIGUOUS: case Op::COPY:
      case Op::DETACH: case Op::REDUCE_AXIS: case Op::IOTA: case Op::GATHER: case Op::SCATTER_ADD: case Op::RESHAPE: case Op::PERMUTE: case Op::EXPAND:
      case Op::PAD: case Op::SHRINK: case Op::FLIP: case Op::REDUCE:
        throw_internal("the LLVM IR renderer handles every op a lowered kernel holds", cat(op_name(u->op), ": ", str(u)), __FILE__, __LINE__);
      case Op::CAST: case Op::BITCAST: case Op::NEG: case Op::RECIP: case Op::SQRT: case Op::EXP2: case Op::LOG2:
      case Op::SIN: case Op::TRUNC: case Op::ADD: case Op::SUB: case Op::MUL: case Op::FDIV: case Op::IDIV: case Op::MOD:
      case Op::MAX: case Op::MIN: case Op::POW: case Op::CMPLT: case Op::CMPNE: case Op::CMPEQ: case Op::AND:
      case Op::OR: case Op::XOR: case Op::SHL: case Op::SHR: case Op::WHERE: case Op::MULACC:
        if (updates_.count(u.get())) return;  // emitted by its ASSIGN, reading the accumulator there
        {
          WideContext wide(wide_context_, wide_.count(u.get()) > 0 || compares_wide(u));
          names_[u.get()] = compute(u);
        }
        make_narrow(u);
        return;
    }
  }

  std::string compute(const UOpPtr& u) { return alu(u); }

  std::unordered_map<const UOp*, std::string> names_, loops_, ifs_;
  std::unordered_set<const UOp*> updates_;
  std::unordered_set<const UOp*> wide_;              // rendered in i64 (widens())
  std::unordered_map<const UOp*, std::string> narrow_;  // their int32 form
  bool wide_context_ = false;                        // operands are read at full width
  std::set<std::string> declarations_;
  std::vector<DType> buffer_types_;
  std::ostringstream allocas_, prologue_, body_;
  std::string block_ = "%entry";
  bool single_accumulator_ = false;
  int counter_ = 0;
};

}  // namespace

std::string render_llvm_ir(const std::string& name, const std::vector<UOpPtr>& linear, size_t num_buffers,
                           const std::vector<UOpPtr>& vars) {
  return Renderer().run(name, linear, num_buffers, vars);
}

}  // namespace kiln
