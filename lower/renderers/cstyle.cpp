#include "lower/renderers/cstyle.h"

#include "uop/half.h"

#include <bit>
#include <cmath>
#include <map>
#include <cstdio>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace kiln {

const CStyleLanguage& opencl_language() { throw Error("the OpenCL C renderer is not implemented yet"); }
const CStyleLanguage& cuda_language() { throw Error("the CUDA C renderer is not implemented yet"); }

const CStyleLanguage& c_language() {
  static const CStyleLanguage lang = [] {
    CStyleLanguage c;
    c.name = "C";
    c.preamble =
        "#include <stdint.h>\n#include <stdbool.h>\n#include <math.h>\n#include <string.h>\n"
        // A reduction's order is unspecified (uop/ops.h), so its float additions may be reassociated:
        // clang then vectorizes the loop. Only the accumulator update is marked, nothing else.
        "#if defined(__clang__)\n#define KILN_REASSOC _Pragma(\"clang fp reassociate(on)\")\n#else\n#define KILN_REASSOC\n#endif\n"
        // float16 and bfloat16 are stored as their bits and converted, rounding to nearest even.
        "static inline float kiln_h2f(uint16_t h) {\n"
        "  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x; float f;\n"
        "  if (e == 0) { f = (float)m * 5.9604644775390625e-08f; memcpy(&x, &f, 4); x |= sign; }\n"
        "  else if (e == 31) x = sign | 0x7f800000u | (m << 13);\n"
        "  else x = sign | ((e + 112u) << 23) | (m << 13);\n"
        "  memcpy(&f, &x, 4); return f;\n}\n"
        "static inline uint16_t kiln_f2h(float f) {\n"
        "  uint32_t x; memcpy(&x, &f, 4);\n"
        "  uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;\n"
        "  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));\n"
        "  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);\n"
        "  if (a < 0x38800000u) { float af; memcpy(&af, &a, 4); return (uint16_t)(sign | (uint32_t)rintf(af * 16777216.0f)); }\n"
        "  uint32_t m = a - 0x38000000u;\n"
        "  return (uint16_t)(sign | ((m + 0x0fffu + ((m >> 13) & 1u)) >> 13));\n}\n"
        "static inline float kiln_bf2f(uint16_t b) { uint32_t x = (uint32_t)b << 16; float f; memcpy(&f, &x, 4); return f; }\n"
        "static inline uint16_t kiln_f2bf(float f) {\n"
        "  uint32_t x; memcpy(&x, &f, 4);\n"
        "  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);\n"
        "  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);\n}\n";
    c.reassociate = "KILN_REASSOC ";
    // The CPU ABI: the runtime calls the kernel on chunks [gid_begin, gid_end) of launch dimension 0.
    c.kernel_open =
        "void {name}(void* const* bufs, const int64_t* vars, int64_t gid_begin, int64_t gid_end) {\n";
    c.kernel_close = "}\n";
    c.buffer_decl = "  {type}* restrict data{slot} = ({type}*)bufs[{slot}];\n";
    c.var_decl = "  const int64_t var{slot} = vars[{slot}];\n";
    // GCC's vector extension, which clang shares: element-wise operators, v[i], (T){a, b, ...}.
    c.vector_typedef = "typedef {scalar} {name} __attribute__((vector_size({bytes})));\n";
    c.unaligned_copy = "__builtin_memcpy({dst}, {src}, {bytes});";
    return c;
  }();
  return lang;
}

std::string c_type(DType dtype) {
  if (dtype.count > 1) return dtype.name();  // declared by the renderer (vector_typedef)
  std::string base;
  switch (dtype.scalar) {
    case ScalarType::Void: base = "void"; break;
    case ScalarType::Bool: base = "bool"; break;
    case ScalarType::Int8: base = "int8_t"; break;
    case ScalarType::Int16: base = "int16_t"; break;
    case ScalarType::Int32: base = "int32_t"; break;
    case ScalarType::Int64: base = "int64_t"; break;
    case ScalarType::UInt8: base = "uint8_t"; break;
    case ScalarType::UInt16: base = "uint16_t"; break;
    case ScalarType::UInt32: base = "uint32_t"; break;
    case ScalarType::UInt64: base = "uint64_t"; break;
    case ScalarType::Float16:
    case ScalarType::BFloat16: base = "uint16_t"; break;  // storage only: the bits, converted by CAST
    case ScalarType::Float32: base = "float"; break;
    case ScalarType::Float64: base = "double"; break;
  }
  return base;
}

namespace {

// An integer constant as a C literal of at least 64 bits. INT64_MIN has no literal (the minus applies
// to 9223372036854775808, which is then unsigned), so it is spelled as an expression.
std::string int_literal(const ConstValue& v, DType d) {
  std::string s = const_to_string(v, d);
  if (!is_unsigned(d) && s == "-9223372036854775808") return "(-9223372036854775807ll-1)";
  return s + (is_unsigned(d) ? "ull" : "ll");
}

std::string literal(const UOpPtr& u) {
  const ConstValue& v = u->const_value();
  if (u->dtype.count > 1) {  // the value in every lane
    std::string lane = literal(UOp::make(Op::CONST, u->dtype.scalar_of(), {}, v)), lanes;
    for (int i = 0; i < u->dtype.count; ++i) lanes += (i ? "," : "") + lane;
    return "((" + c_type(u->dtype) + "){" + lanes + "})";
  }
  DType d = u->dtype;
  if (is_bool(d)) return std::get<bool>(v) ? "1" : "0";
  if (d.scalar == ScalarType::Float16 || d.scalar == ScalarType::BFloat16) {
    float x = static_cast<float>(std::get<double>(v));
    unsigned bits = d.scalar == ScalarType::Float16 ? float_to_half_bits(x) : float_to_bf16_bits(x);
    return "((uint16_t)" + std::to_string(bits) + "u)";
  }
  if (is_float(d)) {
    double x = std::get<double>(v);
    if (std::isnan(x)) return "NAN";
    if (std::isinf(x)) return x > 0 ? "INFINITY" : "(-INFINITY)";
    std::string s = const_to_string(v, d);
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return d.scalar == ScalarType::Float32 ? "(" + s + "f)" : "(" + s + ")";
  }
  return "((" + c_type(d) + ")" + int_literal(v, d) + ")";
}

const char* math_fn(Op op) {
  static constexpr std::pair<Op, const char*> kMath[] = {
      {Op::SQRT, "sqrt"}, {Op::EXP2, "exp2"}, {Op::LOG2, "log2"}, {Op::SIN, "sin"}, {Op::TRUNC, "trunc"}, {Op::POW, "pow"}};
  for (auto [o, fn] : kMath)
    if (o == op) return fn;
  throw_internal("math_fn() is called for the math primitives", std::string(op_name(op)), __FILE__, __LINE__);
}

// Fills the spelling tables' named placeholders ("{name}", "{type}", "{slot}").
std::string fill(std::string pattern, const std::vector<std::pair<std::string, std::string>>& values) {
  for (const auto& [key, value] : values)
    for (size_t at = pattern.find(key); at != std::string::npos; at = pattern.find(key, at + value.size()))
      pattern.replace(at, key.size(), value);
  return pattern;
}

class Renderer {
 public:
  Renderer(const CStyleLanguage& lang) : lang_(lang) {}

  std::string run(const std::string& name, const std::vector<UOpPtr>& linear, size_t num_buffers,
                  const std::vector<UOpPtr>& vars) {
    std::ostringstream body;
    std::vector<DType> buffer_types(num_buffers, dtypes::void_);
    for (size_t i = 0; i < vars.size(); ++i) names_[vars[i].get()] = "var" + std::to_string(i);
    bool threaded = false;
    for (const UOpPtr& u : linear) {
      if (u->op == Op::SPECIAL) threaded = true;
      if (u->op == Op::ASSIGN) updates_.insert(u->src[1].get());  // rendered inside the ASSIGN
    }
    // One accumulator: let the compiler vectorize its loop by reassociating. Several (an upcast tile):
    // they already are the parallel work, and vectorizing the reduce loop would gather strided loads.
    single_accumulator_ = updates_.size() == 1;
    int depth = threaded ? 2 : 1;  // indentation: inside the function, and inside the gid loop
    for (const UOpPtr& u : linear) {
      std::string line = statement(u, buffer_types);
      if (u->op == Op::END) --depth;
      if (!line.empty()) body << std::string(static_cast<size_t>(depth) * 2, ' ') << line << "\n";
      if (u->op == Op::RANGE) ++depth;
    }
    std::ostringstream out;
    out << lang_.preamble;
    for (const auto& [vname, t] : vector_types_)
      out << fill(lang_.vector_typedef, {{"{scalar}", c_type(t.scalar_of())}, {"{name}", vname},
                                         {"{bytes}", std::to_string(t.itemsize())}});
    out << fill(lang_.kernel_open, {{"{name}", name}});
    for (size_t i = 0; i < num_buffers; ++i)
      out << fill(lang_.buffer_decl, {{"{type}", c_type(buffer_types[i])}, {"{slot}", std::to_string(i)}});
    for (size_t i = 0; i < vars.size(); ++i) out << fill(lang_.var_decl, {{"{slot}", std::to_string(i)}});
    if (threaded) out << "  for (int64_t gidx0 = gid_begin; gidx0 < gid_end; gidx0++) {\n";
    out << body.str();
    if (threaded) out << "  }\n";
    out << lang_.kernel_close;
    return out.str();
  }

 private:
  const std::string& name(const UOpPtr& u) {
    auto it = names_.find(u.get());
    if (it != names_.end()) return it->second;
    if (u->op == Op::CONST) {
      type(u->dtype);  // a vector literal names its type
      return names_[u.get()] = literal(u);
    }
    throw_internal("every source is rendered before its user", str(u), __FILE__, __LINE__);
  }

  std::string fresh(const char* prefix, const UOpPtr& u) { return names_[u.get()] = prefix + std::to_string(counter_++); }

  // c_type, remembering the vector types the kernel needs declared.
  std::string type(DType t) {
    if (t.count > 1) vector_types_.emplace(c_type(t), t);
    return c_type(t);
  }

  std::string copy(const std::string& dst, const std::string& src, DType t) {
    return fill(lang_.unaligned_copy, {{"{dst}", dst}, {"{src}", src}, {"{bytes}", std::to_string(t.itemsize())}});
  }

  // Vector MAX/MIN: no ?: on vectors in C, so select with the comparison's mask (-1 or 0 per lane),
  // which has signed integer lanes of the values' size.
  std::string vector_select_max_min(const UOpPtr& u) {
    const std::string &a = name(u->src[0]), &b = name(u->src[1]);
    static constexpr ScalarType kMask[] = {ScalarType::Int8, ScalarType::Int16, ScalarType::Int32, ScalarType::Int64};
    DType mask{kMask[std::countr_zero(static_cast<unsigned>(bits(u->dtype.scalar) / 8))], u->dtype.count};
    std::string m = type(mask), cmp = u->op == Op::MAX ? ">" : "<";
    std::string first = "(" + a + cmp + b + ")";
    if (is_float(u->dtype)) first = "((" + a + "!=" + a + ")|" + first + ")";  // NaN wins, as for scalars
    return "((" + type(u->dtype) + ")((" + first + "&(" + m + ")" + a + ")|(~" + first + "&(" + m + ")" + b + ")))";
  }

  std::string expr(const UOpPtr& u) {
    auto a = [&](size_t i) -> const std::string& { return name(u->src[i]); };
    bool fp = is_float(u->src.empty() ? u->dtype : u->src.back()->dtype);
    if (u->dtype.count > 1 && (u->op == Op::MAX || u->op == Op::MIN)) return vector_select_max_min(u);
    switch (u->op) {
      case Op::NEG: return "(-" + a(0) + ")";
      case Op::RECIP: return "(" + std::string(u->dtype.scalar == ScalarType::Float32 ? "1.0f" : "1.0") + "/" + a(0) + ")";
      case Op::SQRT: case Op::EXP2: case Op::LOG2: case Op::SIN: case Op::TRUNC:
        return std::string(math_fn(u->op)) + (u->dtype.scalar == ScalarType::Float32 && lang_.fmath_suffix ? "f" : "") + "(" + a(0) + ")";
      case Op::POW:
        return std::string("pow") + (u->dtype.scalar == ScalarType::Float32 && lang_.fmath_suffix ? "f" : "") + "(" + a(0) + ", " + a(1) + ")";
      case Op::ADD: return "(" + a(0) + "+" + a(1) + ")";
      case Op::SUB: return "(" + a(0) + "-" + a(1) + ")";
      case Op::MUL: return "(" + a(0) + "*" + a(1) + ")";
      case Op::FDIV: case Op::IDIV: return "(" + a(0) + "/" + a(1) + ")";
      case Op::MOD: return "(" + a(0) + "%" + a(1) + ")";
      // Float MAX/MIN propagate NaN (uop/ops.h): a NaN on either side wins.
      case Op::MAX: return fp ? "((" + a(0) + "!=" + a(0) + "||" + a(0) + ">" + a(1) + ")?" + a(0) + ":" + a(1) + ")"
                              : "((" + a(0) + ">" + a(1) + ")?" + a(0) + ":" + a(1) + ")";
      case Op::MIN: return fp ? "((" + a(0) + "!=" + a(0) + "||" + a(0) + "<" + a(1) + ")?" + a(0) + ":" + a(1) + ")"
                              : "((" + a(0) + "<" + a(1) + ")?" + a(0) + ":" + a(1) + ")";
      case Op::CMPLT: return "(" + a(0) + "<" + a(1) + ")";
      case Op::CMPNE: return "(" + a(0) + "!=" + a(1) + ")";
      case Op::CMPEQ: return "(" + a(0) + "==" + a(1) + ")";
      case Op::AND: return "(" + a(0) + "&" + a(1) + ")";
      case Op::OR: return "(" + a(0) + "|" + a(1) + ")";
      case Op::XOR: return "(" + a(0) + "^" + a(1) + ")";
      case Op::SHL: return "(" + a(0) + "<<" + a(1) + ")";
      case Op::SHR: return "(" + a(0) + ">>" + a(1) + ")";
      case Op::WHERE: return "(" + a(0) + "?" + a(1) + ":" + a(2) + ")";
      case Op::MULACC: return "((" + a(0) + "*" + a(1) + ")+" + a(2) + ")";
      case Op::CAST: {
        // Narrow floats convert through float32.
        std::string x = a(0);
        ScalarType from = u->src[0]->dtype.scalar, to = u->dtype.scalar;
        if (from == ScalarType::Float16) x = "kiln_h2f(" + x + ")";
        if (from == ScalarType::BFloat16) x = "kiln_bf2f(" + x + ")";
        if (to == ScalarType::Float16) return "kiln_f2h((float)" + x + ")";
        if (to == ScalarType::BFloat16) return "kiln_f2bf((float)" + x + ")";
        if (is_bool(u->dtype)) return "(" + x + "!=0)";
        if (is_float(u->src[0]->dtype) && is_int(u->dtype)) {
          // Float to int saturates and NaN gives 0 (cast_const's rule; a plain C cast is undefined there).
          std::string t = c_type(u->dtype);
          std::string lo = int_literal(lowest(u->dtype), u->dtype), hi = int_literal(highest(u->dtype), u->dtype);
          return "(" + x + "!=" + x + "?(" + t + ")0:" + x + ">=(double)" + hi + "?(" + t + ")" + hi + ":" + x +
                 "<=(double)(" + lo + ")?(" + t + ")(" + lo + "):(" + t + ")" + x + ")";
        }
        return "((" + c_type(u->dtype) + ")" + x + ")";
      }
      case Op::SINK: case Op::NOOP: case Op::CONST: case Op::DEFINE_VAR: case Op::DEVICE: case Op::BUFFER:
      case Op::CONTIGUOUS: case Op::COPY: case Op::ASSIGN: case Op::DETACH: case Op::REDUCE_AXIS: case Op::IOTA:
      case Op::RESHAPE: case Op::PERMUTE: case Op::EXPAND: case Op::PAD: case Op::SHRINK: case Op::FLIP:
      case Op::DEFINE_GLOBAL: case Op::DEFINE_LOCAL: case Op::DEFINE_REG: case Op::INDEX: case Op::LOAD: case Op::STORE:
      case Op::RANGE: case Op::END: case Op::REDUCE: case Op::SPECIAL: case Op::BARRIER: case Op::IF: case Op::ENDIF:
      case Op::VECTORIZE: case Op::GEP: case Op::BITCAST:
        break;
    }
    throw_internal("expr() is called for ALU ops and casts", std::string(op_name(u->op)), __FILE__, __LINE__);
  }

  std::string statement(const UOpPtr& u, std::vector<DType>& buffer_types) {
    switch (u->op) {
      case Op::CONST: name(u); return "";
      case Op::DEFINE_GLOBAL: {
        int64_t slot = u->arg_as<int64_t>();
        buffer_types.at(static_cast<size_t>(slot)) = u->dtype.deref();
        names_[u.get()] = "data" + std::to_string(slot);
        return "";
      }
      case Op::DEFINE_VAR: return "";
      case Op::SPECIAL: names_[u.get()] = "gidx0"; return "";
      case Op::RANGE: {
        std::string r = names_[u.get()] = "ridx" + std::to_string(u->axis_id());
        return "for (" + c_type(u->dtype) + " " + r + " = 0; " + r + " < " + name(u->end()) + "; " + r + "++) {";
      }
      case Op::END: return "}";
      case Op::INDEX: {  // an element, or the address a vector is copied from or to
        bool vector = u->dtype.count > 1;
        names_[u.get()] = vector ? "(" + name(u->src[0]) + "+" + name(u->src[1]) + ")" : name(u->src[0]) + "[" + name(u->src[1]) + "]";
        return "";
      }
      case Op::LOAD: {
        if (u->src[0]->op == Op::DEFINE_REG) {  // the accumulator, read after its loop
          names_[u.get()] = name(u->src[0]);
          return "";
        }
        std::string v = fresh("val", u);
        bool gated = u->src.size() == 3;
        if (u->dtype.count > 1) {
          std::string read = copy("&" + v, name(u->src[0]), u->dtype);
          return type(u->dtype) + " " + v + (gated ? " = " + name(u->src[1]) + "; if (" + name(u->src[2]) + ") " : "; ") + read;
        }
        std::string read = name(u->src[0]);
        if (gated) read = "(" + name(u->src[2]) + "?" + read + ":" + name(u->src[1]) + ")";
        return c_type(u->dtype) + " " + v + " = " + read + ";";
      }
      case Op::STORE: {
        std::string write = u->src[1]->dtype.count > 1 ? copy(name(u->src[0]), "&" + name(u->src[1]), u->src[1]->dtype)
                                                       : name(u->src[0]) + " = " + name(u->src[1]) + ";";
        return u->src.size() == 3 ? "if (" + name(u->src[2]) + ") " + write : write;
      }
      case Op::DEFINE_REG: {
        std::string acc = names_[u.get()] = "acc" + std::to_string(u->arg_as<int64_t>());
        return type(u->dtype) + " " + acc + " = " + name(u->src[0]) + ";";
      }
      case Op::VECTORIZE: {
        std::string v = fresh("vec", u), lanes;
        for (size_t i = 0; i < u->src.size(); ++i) lanes += (i ? "," : "") + name(u->src[i]);
        return type(u->dtype) + " " + v + " = (" + type(u->dtype) + "){" + lanes + "};";
      }
      case Op::GEP: names_[u.get()] = name(u->src[0]) + "[" + std::to_string(u->arg_as<int64_t>()) + "]"; return "";
      case Op::ASSIGN: {
        const UOpPtr& update = u->src[1];
        bool reassociate = single_accumulator_ && !lang_.reassociate.empty() && is_float(u->dtype) &&
                           (update->op == Op::ADD || update->op == Op::MUL);
        std::string assign = name(u->src[0]) + " = " + name(update) + ";";
        return reassociate ? "{ " + lang_.reassociate + assign + " }" : assign;
      }
      case Op::BITCAST: {
        // Through a local: the source may be a literal or a vector's lane, which have no address.
        std::string v = fresh("cast", u), in = v + "_in";
        return type(u->src[0]->dtype) + " " + in + " = " + name(u->src[0]) + "; " + type(u->dtype) + " " + v + "; memcpy(&" + v +
               ", &" + in + ", sizeof(" + v + "));";
      }
      case Op::SINK: case Op::NOOP: case Op::DEVICE: case Op::BUFFER: case Op::CONTIGUOUS: case Op::COPY:
      case Op::DETACH: case Op::REDUCE_AXIS: case Op::IOTA: case Op::RESHAPE: case Op::PERMUTE: case Op::EXPAND:
      case Op::PAD: case Op::SHRINK: case Op::FLIP: case Op::DEFINE_LOCAL: case Op::REDUCE: case Op::BARRIER:
      case Op::IF: case Op::ENDIF:
        throw_internal("the C renderer handles every op a lowered kernel holds", cat(op_name(u->op), ": ", str(u)), __FILE__, __LINE__);
      case Op::CAST: case Op::NEG: case Op::RECIP: case Op::SQRT: case Op::EXP2: case Op::LOG2: case Op::SIN:
      case Op::TRUNC: case Op::ADD: case Op::SUB: case Op::MUL: case Op::FDIV: case Op::IDIV: case Op::MOD:
      case Op::MAX: case Op::MIN: case Op::POW: case Op::CMPLT: case Op::CMPNE: case Op::CMPEQ: case Op::AND:
      case Op::OR: case Op::XOR: case Op::SHL: case Op::SHR: case Op::WHERE: case Op::MULACC:
        break;
    }
    if (updates_.count(u.get())) {  // an accumulator update: its expression goes into the ASSIGN
      names_[u.get()] = expr(u);
      return "";
    }
    if (is_alu(u->op) || u->op == Op::CAST) {
      std::string v = fresh("alu", u);
      return type(u->dtype) + " " + v + " = " + expr(u) + ";";
    }
    throw_internal("the C renderer handles every op a lowered kernel holds", cat(op_name(u->op), ": ", str(u)), __FILE__, __LINE__);
  }

  const CStyleLanguage& lang_;
  std::unordered_map<const UOp*, std::string> names_;
  std::unordered_set<const UOp*> updates_;
  std::map<std::string, DType> vector_types_;  // by the name they are declared under
  bool single_accumulator_ = false;
  int counter_ = 0;
};

}  // namespace

std::string render_cstyle(const CStyleLanguage& lang, const std::string& name, const std::vector<UOpPtr>& linear,
                          size_t num_buffers, const std::vector<UOpPtr>& vars) {
  return Renderer(lang).run(name, linear, num_buffers, vars);
}

}  // namespace kiln
