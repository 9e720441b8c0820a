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

namespace {

// The float16/bfloat16 conversions, from one template: {q} qualifies each function, {u16} and {u32}
// name the unsigned integer types, {u2f}/{f2u} move a uint32's bits to a float and back, {rint} rounds
// to the nearest even integer. Subnormal halves are built in float arithmetic (2^-24 steps), so a
// device that flushes float32 subnormals still converts them (each is a normal float32).
std::string narrow_float_helpers(const std::string& q, const std::string& u16, const std::string& u32,
                                 const std::string& u2f, const std::string& f2u, const std::string& rint) {
  std::string t =
      "{q} float kiln_h2f({u16} h) {\n"
      "  {u32} sign = ({u32})(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;\n"
      "  if (e == 0) return {u2f}({f2u}((float)m * 5.9604644775390625e-08f) | sign);\n"
      "  if (e == 31) x = sign | 0x7f800000u | (m << 13);\n"
      "  else x = sign | ((e + 112u) << 23) | (m << 13);\n"
      "  return {u2f}(x);\n}\n"
      "{q} {u16} kiln_f2h(float f) {\n"
      "  {u32} x = {f2u}(f);\n"
      "  {u32} sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;\n"
      "  if (a > 0x7f800000u) return ({u16})(sign | 0x7e00u | ((a >> 13) & 0x3ffu));\n"
      "  if (a >= 0x477ff000u) return ({u16})(sign | 0x7c00u);\n"
      "  if (a < 0x38800000u) return ({u16})(sign | ({u32}){rint}({u2f}(a) * 16777216.0f));\n"
      "  {u32} m = a - 0x38000000u;\n"
      "  return ({u16})(sign | ((m + 0x0fffu + ((m >> 13) & 1u)) >> 13));\n}\n"
      "{q} float kiln_bf2f({u16} b) { return {u2f}(({u32})b << 16); }\n"
      "{q} {u16} kiln_f2bf(float f) {\n"
      "  {u32} x = {f2u}(f);\n"
      "  if ((x & 0x7fffffffu) > 0x7f800000u) return ({u16})((x >> 16) | 0x40u);\n"
      "  return ({u16})((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);\n}\n";
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"{q}", q}, {"{u16}", u16}, {"{u32}", u32}, {"{u2f}", u2f}, {"{f2u}", f2u}, {"{rint}", rint}})
    for (size_t at = t.find(key); at != std::string::npos; at = t.find(key, at + value.size())) t.replace(at, key.size(), value);
  return t;
}

}  // namespace

const CStyleLanguage& c_language() {
  static const CStyleLanguage lang = [] {
    CStyleLanguage c;
    c.name = "C";
    c.preamble =
        "#include <stdint.h>\n#include <stdbool.h>\n#include <math.h>\n#include <string.h>\n"
        // A reduction's order is unspecified (uop/ops.h), so its float additions may be reassociated:
        // clang then vectorizes the loop. Only the accumulator update is marked, nothing else.
        "#if defined(__clang__)\n#define KILN_REASSOC _Pragma(\"clang fp reassociate(on)\")\n#else\n#define KILN_REASSOC\n#endif\n"
        "static inline float kiln_u2f(uint32_t x) { float f; memcpy(&f, &x, 4); return f; }\n"
        "static inline uint32_t kiln_f2u(float f) { uint32_t x; memcpy(&x, &f, 4); return x; }\n" +
        narrow_float_helpers("static inline", "uint16_t", "uint32_t", "kiln_u2f", "kiln_f2u", "rintf");
    c.reassociate = "KILN_REASSOC ";
    // The CPU ABI: the runtime calls the kernel on chunks [gid_begin, gid_end) of launch dimension 0.
    c.kernel_open =
        "void {name}(void* const* bufs, const int64_t* vars, int64_t gid_begin, int64_t gid_end) {\n";
    c.kernel_close = "}\n";
    c.buffer_decl = "  {type}* restrict data{slot} = ({type}*)bufs[{slot}];\n";
    c.var_decl = "  const int64_t var{slot} = vars[{slot}];\n";
    c.gid_loop_open = "for (int64_t gidx0 = gid_begin; gidx0 < gid_end; gidx0++) {";
    // GCC's vector extension, which clang shares: element-wise operators, v[i], (T){a, b, ...}.
    c.vector_typedef = "typedef {scalar} {name} __attribute__((vector_size({bytes})));\n";
    c.unaligned_copy = "__builtin_memcpy({dst}, {src}, {bytes});";
    // Through a local: the source may be a literal or a vector's lane, which have no address.
    c.bitcast = "{in_type} {v}_in = {x}; {type} {v}; memcpy(&{v}, &{v}_in, sizeof({v}));";
    return c;
  }();
  return lang;
}

// OpenCL C 1.2: buffers are __global kernel parameters, vars are `long` parameters after them; the
// math built-ins are overloaded (no f suffix); fp64 is enabled where the device has it.
const CStyleLanguage& opencl_language() {
  static const CStyleLanguage lang = [] {
    CStyleLanguage cl;
    cl.name = "OpenCL";
    cl.type_names = {"void", "bool", "char", "short", "int", "long", "uchar", "ushort", "uint", "ulong",
                     "ushort", "ushort", "float", "double"};
    cl.bool_storage = "uchar";  // bool has no defined size, so OpenCL allows no bool buffers
    cl.preamble = "#ifdef cl_khr_fp64\n#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n#endif\n" +
                  narrow_float_helpers("static inline", "ushort", "uint", "as_float", "as_uint", "rint");
    cl.kernel_open = "__kernel void {name}({params}) {\n";
    cl.kernel_close = "}\n";
    cl.buffer_param = "__global {type}* restrict data{slot}";
    cl.var_param = "long var{slot}";
    cl.group_id = "get_group_id({dim})";
    cl.local_id = "get_local_id({dim})";
    cl.local_decl = "__local {type} {name}[{count}];";
    cl.barrier = "barrier(CLK_LOCAL_MEM_FENCE);";
    cl.bitcast = "{type} {v} = as_{type}({x});";
    cl.int64_suffix = "l";
    cl.uint64_suffix = "ul";
    cl.fmath_suffix = false;
    return cl;
  }();
  return lang;
}

// CUDA C++ for NVRTC, needing no headers: the integer types are declared in the preamble, INFINITY and
// NAN are spelled with the bit-move intrinsics, the math functions are NVRTC's built-ins.
const CStyleLanguage& cuda_language() {
  static const CStyleLanguage lang = [] {
    CStyleLanguage cu;
    cu.name = "CUDA";
    cu.preamble =
        "typedef signed char int8_t;\ntypedef short int16_t;\ntypedef int int32_t;\ntypedef long long int64_t;\n"
        "typedef unsigned char uint8_t;\ntypedef unsigned short uint16_t;\ntypedef unsigned int uint32_t;\n"
        "typedef unsigned long long uint64_t;\n"
        "#define INFINITY (__int_as_float(0x7f800000))\n#define NAN (__int_as_float(0x7fc00000))\n" +
        narrow_float_helpers("static __device__ __forceinline__", "uint16_t", "uint32_t", "__uint_as_float",
                             "__float_as_uint", "rintf");
    cu.kernel_open = "extern \"C\" __global__ void {name}({params}) {\n";
    cu.kernel_close = "}\n";
    cu.buffer_param = "{type}* __restrict__ data{slot}";
    cu.var_param = "int64_t var{slot}";
    cu.group_id = "blockIdx.{xyz}";
    cu.local_id = "threadIdx.{xyz}";
    cu.local_decl = "__shared__ {type} {name}[{count}];";
    cu.barrier = "__syncthreads();";
    cu.bitcast = "{type} {v}; { {in_type} {v}_in = {x}; memcpy(&{v}, &{v}_in, sizeof({v})); }";
    return cu;
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

// The language's name of a scalar type (c_type's unless its table names it).
std::string scalar_name(const CStyleLanguage& lang, DType d) {
  size_t i = static_cast<size_t>(d.scalar);
  if (d.count == 1 && i < lang.type_names.size() && !lang.type_names[i].empty()) return lang.type_names[i];
  return c_type(d);
}

// An integer constant as a literal of at least 64 bits. INT64_MIN has no literal (the minus applies
// to 9223372036854775808, which is then unsigned), so it is spelled as an expression.
std::string int_literal(const CStyleLanguage& lang, const ConstValue& v, DType d) {
  std::string s = const_to_string(v, d);
  if (!is_unsigned(d) && s == "-9223372036854775808") return "(-9223372036854775807" + lang.int64_suffix + "-1)";
  return s + (is_unsigned(d) ? lang.uint64_suffix : lang.int64_suffix);
}

std::string literal(const CStyleLanguage& lang, const UOpPtr& u) {
  const ConstValue& v = u->const_value();
  if (u->dtype.count > 1) {  // the value in every lane
    std::string lane = literal(lang, UOp::make(Op::CONST, u->dtype.scalar_of(), {}, v)), lanes;
    for (int i = 0; i < u->dtype.count; ++i) lanes += (i ? "," : "") + lane;
    return "((" + c_type(u->dtype) + "){" + lanes + "})";
  }
  DType d = u->dtype;
  if (is_bool(d)) return std::get<bool>(v) ? "1" : "0";
  if (d.scalar == ScalarType::Float16 || d.scalar == ScalarType::BFloat16) {
    float x = static_cast<float>(std::get<double>(v));
    unsigned bits = d.scalar == ScalarType::Float16 ? float_to_half_bits(x) : float_to_bf16_bits(x);
    return "((" + scalar_name(lang, d) + ")" + std::to_string(bits) + "u)";
  }
  if (is_float(d)) {
    double x = std::get<double>(v);
    if (std::isnan(x)) return "NAN";
    if (std::isinf(x)) return x > 0 ? "INFINITY" : "(-INFINITY)";
    std::string s = const_to_string(v, d);
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return d.scalar == ScalarType::Float32 ? "(" + s + lang.float_suffix + ")" : "(" + s + ")";
  }
  return "((" + scalar_name(lang, d) + ")" + int_literal(lang, v, d) + ")";
}

// The language's spelling of an ALU op (float_alu first for float operands), or null.
const std::string* alu_spelling(const CStyleLanguage& lang, Op op, bool fp) {
  if (fp)
    for (const auto& [o, spelling] : lang.float_alu)
      if (o == op) return &spelling;
  for (const auto& [o, spelling] : lang.alu)
    if (o == op) return &spelling;
  return nullptr;
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
    buffer_types_.assign(num_buffers, dtypes::void_);
    for (size_t i = 0; i < vars.size(); ++i) names_[vars[i].get()] = "var" + std::to_string(i);
    bool threaded = false;  // a CPU-style launch loop around the body
    for (const UOpPtr& u : linear) {
      if (u->op == Op::SPECIAL) threaded = !lang_.gid_loop_open.empty();
      if (u->op == Op::ASSIGN) updates_.insert(u->src[1].get());  // rendered inside the ASSIGN
    }
    // One accumulator: let the compiler vectorize its loop by reassociating. Several (an upcast tile):
    // they already are the parallel work, and vectorizing the reduce loop would gather strided loads.
    single_accumulator_ = updates_.size() == 1;
    int depth = threaded ? 2 : 1;  // indentation: inside the function, and inside the gid loop
    for (const UOpPtr& u : linear) {
      std::string line = statement(u);
      if (u->op == Op::END || u->op == Op::ENDIF) --depth;
      if (!line.empty()) body << std::string(static_cast<size_t>(depth) * 2, ' ') << line << "\n";
      if (u->op == Op::RANGE || u->op == Op::IF) ++depth;
    }
    std::ostringstream out;
    out << lang_.preamble;
    for (const auto& [vname, t] : vector_types_) {
      // A bool vector is a mask of 32-bit lanes (-1 or 0; nonzero is true), as vector comparisons give.
      DType lane = is_bool(t) ? DType{ScalarType::Int32, 1} : t.scalar_of();
      out << fill(lang_.vector_typedef, {{"{scalar}", c_type(lane)}, {"{name}", vname},
                                         {"{bytes}", std::to_string(lane.itemsize() * t.count)}});
    }
    std::string params;
    auto param = [&](const std::string& text) { params += (params.empty() || text.empty() ? "" : ", ") + text; };
    for (size_t i = 0; i < num_buffers; ++i)
      param(fill(lang_.buffer_param, {{"{type}", buffer_type(buffer_types_[i])}, {"{slot}", std::to_string(i)}}));
    for (size_t i = 0; i < vars.size(); ++i) param(fill(lang_.var_param, {{"{slot}", std::to_string(i)}}));
    out << fill(lang_.kernel_open, {{"{name}", name}, {"{params}", params}});
    for (size_t i = 0; i < num_buffers; ++i)
      out << fill(lang_.buffer_decl, {{"{type}", buffer_type(buffer_types_[i])}, {"{slot}", std::to_string(i)}});
    for (size_t i = 0; i < vars.size(); ++i) out << fill(lang_.var_decl, {{"{slot}", std::to_string(i)}});
    for (const std::string& decl : local_decls_) out << "  " << decl << "\n";
    if (threaded) out << "  " << lang_.gid_loop_open << "\n";
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
      return names_[u.get()] = literal(lang_, u);
    }
    throw_internal("every source is rendered before its user", str(u), __FILE__, __LINE__);
  }

  std::string fresh(const char* prefix, const UOpPtr& u) { return names_[u.get()] = prefix + std::to_string(counter_++); }

  // The type's name in the language, remembering the vector types the kernel needs declared.
  std::string type(DType t) {
    if (t.count > 1) {
      if (lang_.vector_typedef.empty())
        throw_internal("kernels for a language without vector types have no vector dtypes (DeviceSpec::vector_bytes = 0)",
                       cat(lang_.name, ": ", t.name()), __FILE__, __LINE__);
      vector_types_.emplace(c_type(t), t);
    }
    return scalar_name(lang_, t);
  }

  std::string buffer_type(DType t) {
    return is_bool(t) && t.count == 1 && !lang_.bool_storage.empty() ? lang_.bool_storage : type(t);
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

  // Vector WHERE: no ?: on vectors in C; the condition (a mask, or lanes of 0 and 1 put together from
  // scalars) is made a mask of -1 and 0 with != 0, and the values are selected bitwise.
  std::string vector_select(const UOpPtr& u) {
    DType mask{ScalarType::Int32, u->dtype.count};
    std::string m = type(mask), c = "((" + m + ")(" + name(u->src[0]) + "!=0))";
    return "((" + type(u->dtype) + ")((" + c + "&(" + m + ")" + name(u->src[1]) + ")|(~" + c + "&(" + m + ")" + name(u->src[2]) + ")))";
  }

  // A launch index: the CPU's launch loop variable, or a GPU's workgroup or work-item id.
  std::string special(const UOpPtr& u) {
    const std::string& label = u->arg_as<std::string>();
    if (!lang_.gid_loop_open.empty()) {
      KILN_ASSERT(label == "gidx0", "CPU-style kernels have the one launch index gidx0: ", str(u));
      names_[u.get()] = "gidx0";
      return "";
    }
    bool group = label.rfind("gidx", 0) == 0, local = label.rfind("lidx", 0) == 0;
    KILN_ASSERT((group || local) && label.size() == 5 && label[4] >= '0' && label[4] <= '2',
                "a SPECIAL is gidx<d> or lidx<d> with d in 0..2: ", str(u));
    std::string dim(1, label[4]), xyz(1, "xyz"[label[4] - '0']), t = type(u->dtype);
    names_[u.get()] = label;
    return "const " + t + " " + label + " = (" + t + ")" + fill(group ? lang_.group_id : lang_.local_id, {{"{dim}", dim}, {"{xyz}", xyz}}) + ";";
  }

  std::string expr(const UOpPtr& u) {
    auto a = [&](size_t i) -> const std::string& { return name(u->src[i]); };
    bool fp = is_float(u->src.empty() ? u->dtype : u->src.back()->dtype);
    if (u->dtype.count > 1 && (u->op == Op::MAX || u->op == Op::MIN)) return vector_select_max_min(u);
    if (u->dtype.count > 1 && u->op == Op::WHERE) return vector_select(u);
    if (u->op != Op::CAST) {
      const std::string* spelling = alu_spelling(lang_, u->op, fp);
      if (!spelling) throw_internal("the language's alu table spells every ALU op", cat(lang_.name, ": ", op_name(u->op)), __FILE__, __LINE__);
      bool f32 = u->dtype.scalar == ScalarType::Float32;
      std::vector<std::pair<std::string, std::string>> values{{"{f}", f32 ? lang_.float_suffix : ""},
                                                             {"{fm}", f32 && lang_.fmath_suffix ? "f" : ""}};
      for (size_t i = 0; i < u->src.size(); ++i) values.push_back({cat("{", i, "}"), a(i)});
      return fill(*spelling, values);
    }
    switch (u->op) {
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
          // The bounds are compared in x's own float type: a bound rounds to a power of two there, so
          // x >= (float)INT32_MAX is exactly "x does not fit", and no device needs fp64 for it.
          std::string t = type(u->dtype), f = from == ScalarType::Float64 ? type(dtypes::float64) : type(dtypes::float32);
          std::string lo = int_literal(lang_, lowest(u->dtype), u->dtype), hi = int_literal(lang_, highest(u->dtype), u->dtype);
          return "(" + x + "!=" + x + "?(" + t + ")0:" + x + ">=(" + f + ")" + hi + "?(" + t + ")" + hi + ":" + x +
                 "<=(" + f + ")(" + lo + ")?(" + t + ")(" + lo + "):(" + t + ")" + x + ")";
        }
        return "((" + type(u->dtype) + ")" + x + ")";
      }
      case Op::SINK: case Op::NOOP: case Op::CONST: case Op::DEFINE_VAR: case Op::DEVICE: case Op::BUFFER:
      case Op::CONTIGUOUS: case Op::COPY: case Op::ASSIGN: case Op::DETACH: case Op::REDUCE_AXIS: case Op::IOTA: case Op::GATHER: case Op::SCATTER_ADD:
      case Op::RESHAPE: case Op::PERMUTE: case Op::EXPAND: case Op::PAD: case Op::SHRINK: case Op::FLIP:
      case Op::DEFINE_GLOBAL: case Op::DEFINE_LOCAL: case Op::DEFINE_REG: case Op::INDEX: case Op::LOAD: case Op::STORE:
      case Op::RANGE: case Op::END: case Op::REDUCE: case Op::SPECIAL: case Op::BARRIER: case Op::IF: case Op::ENDIF:
      case Op::VECTORIZE: case Op::GEP: case Op::BITCAST:
      case Op::NEG: case Op::RECIP: case Op::SQRT: case Op::EXP2: case Op::LOG2: case Op::SIN: case Op::TRUNC:
      case Op::POW: case Op::ADD: case Op::SUB: case Op::MUL: case Op::FDIV: case Op::IDIV: case Op::MOD:
      case Op::MAX: case Op::MIN: case Op::CMPLT: case Op::CMPNE: case Op::CMPEQ: case Op::AND: case Op::OR:
      case Op::XOR: case Op::SHL: case Op::SHR: case Op::WHERE: case Op::MULACC:  // the alu table's, above
        break;
    }
    throw_internal("expr() is called for ALU ops and casts", std::string(op_name(u->op)), __FILE__, __LINE__);
  }

  // The statement rules: for each op of a lowered kernel, the line it renders, or "" when it only names
  // a value that its users spell inline (an INDEX, a GEP, a constant). ALU ops and CAST share one rule
  // that spells them from the language's alu table (expr). The languages differ only in CStyleLanguage's
  // entries; an op with no rule never reaches a renderer (schedule-level and tensor-level ops).
  using Rule = std::string (*)(Renderer&, const UOpPtr&);
  static const std::array<Rule, kNumOps>& statement_rules() {
    static const std::array<Rule, kNumOps> rules = [] {
      std::array<Rule, kNumOps> t{};
      auto on = [&t](std::initializer_list<Op> ops, Rule rule) {
        for (Op op : ops) t[static_cast<size_t>(op)] = rule;
      };
      on({Op::CONST}, [](Renderer& r, const UOpPtr& u) {  // a literal, spelled where it is used
        r.name(u);
        return std::string();
      });
      on({Op::DEFINE_VAR}, [](Renderer&, const UOpPtr&) { return std::string(); });
      on({Op::DEFINE_GLOBAL}, [](Renderer& r, const UOpPtr& u) {
        int64_t slot = u->arg_as<int64_t>();
        r.buffer_types_.at(static_cast<size_t>(slot)) = u->dtype.deref();
        r.names_[u.get()] = "data" + std::to_string(slot);
        return std::string();
      });
      on({Op::SPECIAL}, [](Renderer& r, const UOpPtr& u) { return r.special(u); });
      on({Op::RANGE}, [](Renderer& r, const UOpPtr& u) {
        std::string i = r.names_[u.get()] = "ridx" + std::to_string(u->axis_id());
        return "for (" + r.type(u->dtype) + " " + i + " = 0; " + i + " < " + r.name(u->end()) + "; " + i + "++) {";
      });
      on({Op::END, Op::ENDIF}, [](Renderer&, const UOpPtr&) { return std::string("}"); });
      on({Op::IF}, [](Renderer& r, const UOpPtr& u) { return "if (" + r.name(u->src[0]) + ") {"; });
      on({Op::INDEX}, [](Renderer& r, const UOpPtr& u) {  // an element, or the address a vector is copied from or to
        bool vector = u->dtype.count > 1;
        r.names_[u.get()] = vector ? "(" + r.name(u->src[0]) + "+" + r.name(u->src[1]) + ")" : r.name(u->src[0]) + "[" + r.name(u->src[1]) + "]";
        return std::string();
      });
      on({Op::LOAD}, [](Renderer& r, const UOpPtr& u) {
        if (u->src[0]->op == Op::DEFINE_REG) {  // the accumulator, read after its loop
          r.names_[u.get()] = r.name(u->src[0]);
          return std::string();
        }
        std::string v = r.fresh("val", u);
        bool gated = u->src.size() == 3;
        if (u->dtype.count > 1) {
          std::string read = r.copy("&" + v, r.name(u->src[0]), u->dtype);
          return r.type(u->dtype) + " " + v + (gated ? " = " + r.name(u->src[1]) + "; if (" + r.name(u->src[2]) + ") " : "; ") + read;
        }
        std::string read = r.name(u->src[0]);
        if (gated) read = "(" + r.name(u->src[2]) + "?" + read + ":" + r.name(u->src[1]) + ")";
        return r.type(u->dtype) + " " + v + " = " + read + ";";
      });
      on({Op::STORE}, [](Renderer& r, const UOpPtr& u) {
        std::string write = u->src[1]->dtype.count > 1 ? r.copy(r.name(u->src[0]), "&" + r.name(u->src[1]), u->src[1]->dtype)
                                                       : r.name(u->src[0]) + " = " + r.name(u->src[1]) + ";";
        return u->src.size() == 3 ? "if (" + r.name(u->src[2]) + ") " + write : write;
      });
      on({Op::DEFINE_REG}, [](Renderer& r, const UOpPtr& u) {
        std::string acc = r.names_[u.get()] = "acc" + std::to_string(u->arg_as<int64_t>());
        return r.type(u->dtype) + " " + acc + " = " + r.name(u->src[0]) + ";";
      });
      on({Op::VECTORIZE}, [](Renderer& r, const UOpPtr& u) {
        std::string v = r.fresh("vec", u), lanes;
        for (size_t i = 0; i < u->src.size(); ++i) lanes += (i ? "," : "") + r.name(u->src[i]);
        return r.type(u->dtype) + " " + v + " = (" + r.type(u->dtype) + "){" + lanes + "};";
      });
      on({Op::GEP}, [](Renderer& r, const UOpPtr& u) {  // a lane of a bool vector (a mask) is made 0 or 1
        std::string lane = r.name(u->src[0]) + "[" + std::to_string(u->arg_as<int64_t>()) + "]";
        r.names_[u.get()] = is_bool(u->dtype) ? "(" + lane + "!=0)" : lane;
        return std::string();
      });
      on({Op::ASSIGN}, [](Renderer& r, const UOpPtr& u) {
        const UOpPtr& update = u->src[1];
        bool reassociate = r.single_accumulator_ && !r.lang_.reassociate.empty() && is_float(u->dtype) &&
                           (update->op == Op::ADD || update->op == Op::MUL);
        std::string assign = r.name(u->src[0]) + " = " + r.name(update) + ";";
        return reassociate ? "{ " + r.lang_.reassociate + assign + " }" : assign;
      });
      on({Op::BITCAST}, [](Renderer& r, const UOpPtr& u) {
        std::string v = r.fresh("cast", u);
        return fill(r.lang_.bitcast, {{"{in_type}", r.type(u->src[0]->dtype)}, {"{type}", r.type(u->dtype)}, {"{x}", r.name(u->src[0])},
                                      {"{v}", v}});
      });
      on({Op::DEFINE_LOCAL}, [](Renderer& r, const UOpPtr& u) {
        KILN_ASSERT(!r.lang_.local_decl.empty(), r.lang_.name, " has no workgroup-shared memory: ", str(u));
        std::string temp = r.names_[u.get()] = "temp" + (std::holds_alternative<int64_t>(u->arg) ? std::to_string(u->arg_as<int64_t>())
                                                                                                    : std::to_string(r.counter_++));
        int64_t count = u->src.empty() ? 0 : u->src[0]->vmax();
        KILN_ASSERT(count > 0, "DEFINE_LOCAL's src[0] holds its number of elements: ", str(u));
        r.local_decls_.push_back(fill(r.lang_.local_decl, {{"{type}", r.type(u->dtype.deref())}, {"{name}", temp},
                                                           {"{count}", std::to_string(count)}}));
        return std::string();
      });
      on({Op::BARRIER}, [](Renderer& r, const UOpPtr& u) {
        KILN_ASSERT(!r.lang_.barrier.empty(), r.lang_.name, " has no workgroup barrier: ", str(u));
        return r.lang_.barrier;
      });
      auto alu = [](Renderer& r, const UOpPtr& u) {
        if (r.updates_.count(u.get())) {  // an accumulator update: its expression goes into the ASSIGN
          r.names_[u.get()] = r.expr(u);
          return std::string();
        }
        std::string v = r.fresh("alu", u);
        return r.type(u->dtype) + " " + v + " = " + r.expr(u) + ";";
      };
      on({Op::CAST}, alu);
      for (size_t op = 0; op < t.size(); ++op)
        if (is_alu(static_cast<Op>(op))) t[op] = alu;
      return t;
    }();
    return rules;
  }

  std::string statement(const UOpPtr& u) {
    Rule rule = statement_rules()[static_cast<size_t>(u->op)];
    if (!rule) throw_internal("the C renderer has a rule for every op a lowered kernel holds", cat(op_name(u->op), ": ", str(u)), __FILE__, __LINE__);
    return rule(*this, u);
  }

  const CStyleLanguage& lang_;
  std::unordered_map<const UOp*, std::string> names_;
  std::unordered_set<const UOp*> updates_;
  std::map<std::string, DType> vector_types_;  // by the name they are declared under
  std::vector<std::string> local_decls_;       // workgroup-shared arrays, declared at the top
  std::vector<DType> buffer_types_;            // each slot's element type, from its DEFINE_GLOBAL
  bool single_accumulator_ = false;
  int counter_ = 0;
};

}  // namespace

std::string render_cstyle(const CStyleLanguage& lang, const std::string& name, const std::vector<UOpPtr>& linear,
                          size_t num_buffers, const std::vector<UOpPtr>& vars) {
  return Renderer(lang).run(name, linear, num_buffers, vars);
}

}  // namespace kiln
