#include "uop/serialize.h"

#include <bit>
#include <charconv>
#include <cstdio>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace kiln {

namespace {

constexpr std::string_view kHeader = "kiln-uops";

// --- writing --------------------------------------------------------------------------------------

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') out += cat('\\', ch);
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c >= 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string join(const std::vector<int64_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out += cat(i ? "," : "", values[i]);
  return out;
}

std::string double_bits(double d) {
  char hex[24];
  std::snprintf(hex, sizeof hex, "0x%016llx", static_cast<unsigned long long>(std::bit_cast<uint64_t>(d)));
  return hex;
}

// The arg as a tagged token, and a human-readable comment where the token is not (float bits).
std::string write_arg(const Arg& arg, std::string& comment) {
  struct Writer {
    std::string& comment;
    std::string operator()(std::monostate) const { return "-"; }
    std::string operator()(const ConstValue& c) const {
      if (const bool* b = std::get_if<bool>(&c)) return cat("const.bool:", *b ? "true" : "false");
      if (const int64_t* i = std::get_if<int64_t>(&c)) return cat("const.int:", *i);
      if (const uint64_t* u = std::get_if<uint64_t>(&c)) return cat("const.uint:", *u);
      double d = std::get<double>(c);
      comment = const_to_string(d, dtypes::float64);
      return "const.double:" + double_bits(d);
    }
    std::string operator()(int64_t x) const { return cat("int:", x); }
    std::string operator()(Op op) const { return cat("op:", op_name(op)); }
    std::string operator()(const std::string& s) const { return "str:" + quote(s); }
    std::string operator()(const std::vector<int64_t>& v) const { return "ints:" + join(v); }
    std::string operator()(const Pairs& v) const {
      std::string out = "pairs:";
      for (size_t i = 0; i < v.size(); ++i) out += cat(i ? "," : "", v[i].first, ":", v[i].second);
      return out;
    }
    std::string operator()(const VarArg& v) const { return cat("var:", quote(v.name), ",", v.min, ",", v.max); }
    std::string operator()(const ReduceArg& r) const { return cat("reduce:", op_name(r.op), ":", join(r.axes)); }
    std::string operator()(const BufferArg& b) const { return cat("buffer:", b.id, ",", b.size); }
  };
  return std::visit(Writer{comment}, arg);
}

// --- reading --------------------------------------------------------------------------------------

// Reads one line left to right; every failure names what was expected at which column.
class Cursor {
 public:
  explicit Cursor(std::string_view text) : text_(text) {}

  bool done() const { return pos_ >= text_.size(); }
  char peek() const { return done() ? '\0' : text_[pos_]; }
  bool eat(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c, const char* what) {
    if (!eat(c)) fail(cat("expected '", c, "' ", what));
  }
  void skip_spaces() {
    while (peek() == ' ' || peek() == '\t' || peek() == '\r') ++pos_;
  }
  // Characters up to a space or one of `stops`.
  std::string_view word(std::string_view stops = "") {
    size_t begin = pos_;
    while (!done() && peek() != ' ' && peek() != '\t' && peek() != '\r' && stops.find(peek()) == std::string_view::npos) ++pos_;
    return text_.substr(begin, pos_ - begin);
  }
  template <typename T>
  T number(const char* what) {
    T value{};
    const char* begin = text_.data() + pos_;
    auto [end, ec] = std::from_chars(begin, text_.data() + text_.size(), value);
    if (ec != std::errc()) fail(cat("expected ", what));
    pos_ += static_cast<size_t>(end - begin);
    return value;
  }
  uint64_t hex64() {
    if (!eat('0') || !eat('x')) fail("expected 0x and 16 hex digits (the bits of a double)");
    uint64_t value = 0;
    const char* begin = text_.data() + pos_;
    auto [end, ec] = std::from_chars(begin, text_.data() + text_.size(), value, 16);
    if (ec != std::errc() || end - begin != 16) fail("expected 16 hex digits (the bits of a double)");
    pos_ += 16;
    return value;
  }
  std::string quoted() {
    expect('"', "to open a string");
    std::string out;
    for (;;) {
      if (done()) fail("unterminated string");
      char c = text_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      char e = done() ? '\0' : text_[pos_++];
      if (e == '\\' || e == '"') out += e;
      else if (e == 'n') out += '\n';
      else if (e == 't') out += '\t';
      else if (e == 'x' && pos_ + 2 <= text_.size()) {
        unsigned value = 0;
        auto [end, ec] = std::from_chars(text_.data() + pos_, text_.data() + pos_ + 2, value, 16);
        if (ec != std::errc() || end != text_.data() + pos_ + 2) fail("bad \\x escape in a string (needs 2 hex digits)");
        out += static_cast<char>(value);
        pos_ += 2;
      } else {
        fail(cat("unknown escape \\", e, " in a string"));
      }
    }
  }
  [[noreturn]] void fail(const std::string& what) const { throw Error(cat(what, " at column ", pos_ + 1)); }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

std::optional<Op> op_from_name(std::string_view name) {
  for (int i = 0; i < kNumOps; ++i)
    if (op_name(static_cast<Op>(i)) == name) return static_cast<Op>(i);
  return std::nullopt;
}

std::vector<int64_t> int_list(Cursor& c) {
  std::vector<int64_t> out;
  if (c.done() || c.peek() == ' ') return out;
  do out.push_back(c.number<int64_t>("an integer"));
  while (c.eat(','));
  return out;
}

ConstValue read_const(Cursor& c, std::string_view kind) {
  if (kind == "bool") {
    std::string_view w = c.word();
    if (w != "true" && w != "false") c.fail("expected true or false");
    return w == "true";
  }
  if (kind == "int") return c.number<int64_t>("an int64");
  if (kind == "uint") return c.number<uint64_t>("a uint64");
  if (kind == "double") return std::bit_cast<double>(c.hex64());
  c.fail(cat("unknown constant kind const.", kind, " (bool, int, uint or double)"));
}

Arg read_arg(Cursor& c) {
  if (c.eat('-')) return std::monostate{};
  std::string_view tag = c.word(":");
  c.expect(':', cat("after the arg tag ", tag).c_str());
  if (tag.starts_with("const.")) return read_const(c, tag.substr(6));
  if (tag == "int") return c.number<int64_t>("an int64");
  if (tag == "op") {
    std::string_view name = c.word();
    std::optional<Op> op = op_from_name(name);
    if (!op) c.fail(cat("unknown op \"", name, "\""));
    return *op;
  }
  if (tag == "str") return c.quoted();
  if (tag == "ints") return int_list(c);
  if (tag == "pairs") {
    Pairs out;
    if (c.done() || c.peek() == ' ') return out;
    do {
      int64_t a = c.number<int64_t>("an integer");
      c.expect(':', "between the two numbers of a pair");
      out.emplace_back(a, c.number<int64_t>("an integer"));
    } while (c.eat(','));
    return out;
  }
  if (tag == "var") {
    VarArg v;
    v.name = c.quoted();
    c.expect(',', "after the variable's name");
    v.min = c.number<int64_t>("the variable's min");
    c.expect(',', "after the variable's min");
    v.max = c.number<int64_t>("the variable's max");
    return v;
  }
  if (tag == "reduce") {
    std::string_view name = c.word(":");
    std::optional<Op> op = op_from_name(name);
    if (!op) c.fail(cat("unknown reduce op \"", name, "\""));
    c.expect(':', "after the reduce op");
    return ReduceArg{*op, int_list(c)};
  }
  if (tag == "buffer") {
    BufferArg b;
    b.id = c.number<int64_t>("a buffer id");
    c.expect(',', "after the buffer id");
    b.size = c.number<int64_t>("a buffer size");
    return b;
  }
  c.fail(cat("unknown arg tag \"", tag, "\" (-, const.*, int, op, str, ints, pairs, var, reduce, buffer)"));
}

struct Record {
  size_t line;  // 1-based, for messages
  std::string text;
  bool in_program;
  Op op;
  DType dtype;
  std::vector<size_t> src;
  Arg arg;
};

// Sources UOp::make and the range analysis rely on; ops.def documents each. Ops that never appear in
// lowered programs are left free so that any graph still round-trips.
std::optional<std::string> check_arity(Op op, size_t n) {
  auto need = [&](size_t lo, size_t hi) -> std::optional<std::string> {
    if (n >= lo && n <= hi) return std::nullopt;
    if (lo == hi) return cat(op_name(op), " takes ", lo, " source(s), not ", n);
    if (hi == SIZE_MAX) return cat(op_name(op), " takes at least ", lo, " source(s), not ", n);
    return cat(op_name(op), " takes ", lo, " to ", hi, " sources, not ", n);
  };
  if (is_unary(op)) return need(1, 1);
  if (is_binary(op)) return need(2, 2);
  if (is_ternary(op)) return need(3, 3);
  switch (op) {
    case Op::CONST: case Op::DEFINE_VAR: case Op::DEFINE_GLOBAL: return need(0, 0);
    case Op::NOOP: case Op::RANGE: case Op::SPECIAL: case Op::GEP: case Op::CAST: case Op::BITCAST: case Op::ENDIF:
      return need(1, 1);
    case Op::INDEX: case Op::STORE: return need(2, SIZE_MAX);
    case Op::LOAD: case Op::END: case Op::REDUCE: case Op::VECTORIZE: case Op::IF: return need(1, SIZE_MAX);
    case Op::SINK: case Op::DEVICE: case Op::BUFFER: case Op::CONTIGUOUS: case Op::COPY: case Op::ASSIGN:
    case Op::DETACH: case Op::REDUCE_AXIS: case Op::IOTA: case Op::GATHER: case Op::SCATTER_ADD: case Op::RESHAPE: case Op::PERMUTE: case Op::EXPAND:
    case Op::PAD: case Op::SHRINK: case Op::FLIP: case Op::DEFINE_LOCAL: case Op::DEFINE_REG: case Op::BARRIER:
      return std::nullopt;
    case Op::NEG: case Op::RECIP: case Op::SQRT: case Op::EXP2: case Op::LOG2: case Op::SIN: case Op::TRUNC:
    case Op::ADD: case Op::SUB: case Op::MUL: case Op::FDIV: case Op::IDIV: case Op::MOD: case Op::MAX:
    case Op::MIN: case Op::POW: case Op::CMPLT: case Op::CMPNE: case Op::CMPEQ: case Op::AND: case Op::OR:
    case Op::XOR: case Op::SHL: case Op::SHR: case Op::WHERE: case Op::MULACC:
      break;  // handled above by group
  }
  return std::nullopt;
}

// Args the node's construction reads (the value range of CONST and DEFINE_VAR).
std::optional<std::string> check_arg(Op op, DType dtype, const Arg& arg) {
  if (op == Op::CONST) {
    const ConstValue* c = std::get_if<ConstValue>(&arg);
    if (c == nullptr) return "CONST needs a const.* arg";
    if (dtype.is_ptr || dtype.scalar == ScalarType::Void) return cat("CONST of ", dtype.name(), " (needs a value dtype)");
    if (!arg_equal(Arg{cast_const(*c, dtype)}, arg))
      return cat("the constant is not a canonical ", dtype.name(), " value (bool: const.bool, signed: const.int, ",
                 "unsigned: const.uint, float: const.double holding a value of the dtype)");
  }
  if (op == Op::DEFINE_VAR && !std::holds_alternative<VarArg>(arg)) return "DEFINE_VAR needs a var: arg";
  return std::nullopt;
}

Record read_record(std::string_view line, size_t line_no, size_t expected_id) {
  Cursor c(line);
  Record r{line_no, std::string(line), !c.eat('+'), Op::NOOP, {}, {}, {}};
  size_t id = c.number<size_t>("a node id");
  if (id != expected_id) c.fail(cat("node ids count up from 0 (expected ", expected_id, ", got ", id, ")"));
  c.skip_spaces();
  std::string_view name = c.word();
  std::optional<Op> op = op_from_name(name);
  if (!op) c.fail(cat("unknown op \"", name, "\""));
  r.op = *op;
  c.skip_spaces();
  std::string_view dtype_name = c.word();
  std::optional<DType> dtype = parse_dtype(dtype_name);
  if (!dtype) c.fail(cat("unknown dtype \"", dtype_name, "\""));
  r.dtype = *dtype;
  c.skip_spaces();
  c.expect('[', "to open the source list");
  c.skip_spaces();
  while (!c.eat(']')) {
    if (!r.src.empty()) c.expect(',', "between source ids");
    c.skip_spaces();
    r.src.push_back(c.number<size_t>("a source id"));
    c.skip_spaces();
  }
  c.skip_spaces();
  if (c.done()) c.fail("missing arg (write - for none)");
  r.arg = read_arg(c);
  c.skip_spaces();
  if (!c.done() && c.peek() != '#') c.fail("unexpected text after the arg");
  if (auto problem = check_arity(r.op, r.src.size())) c.fail(*problem);
  if (auto problem = check_arg(r.op, r.dtype, r.arg)) c.fail(*problem);
  return r;
}

[[noreturn]] void fail_line(const Record& r, const std::string& what) {
  throw Error(cat("parse_program: line ", r.line, ": ", what, "\n  ", r.text));
}

// Makes every node, sources first; sources may come later in the text, so this is a walk with a cycle check.
std::vector<UOpPtr> build_nodes(const std::vector<Record>& records) {
  std::vector<UOpPtr> nodes(records.size());
  std::vector<uint8_t> state(records.size(), 0);  // 0 new, 1 waiting for its sources, 2 made
  for (size_t root = 0; root < records.size(); ++root) {
    std::vector<size_t> stack{root};
    while (!stack.empty()) {
      size_t i = stack.back();
      const Record& r = records[i];
      if (state[i] == 2) {
        stack.pop_back();
        continue;
      }
      if (state[i] == 0) {
        state[i] = 1;
        for (size_t s : r.src) {
          if (s >= records.size()) fail_line(r, cat("source id ", s, " names no node (ids go up to ", records.size() - 1, ")"));
          if (state[s] == 1) fail_line(r, cat("node ", i, " depends on itself through source ", s));
          if (state[s] == 0) stack.push_back(s);
        }
        continue;
      }
      std::vector<UOpPtr> src;
      for (size_t s : r.src) src.push_back(nodes[s]);
      try {
        nodes[i] = UOp::make(r.op, r.dtype, std::move(src), r.arg);
      } catch (const std::exception& e) {
        fail_line(r, cat("cannot build the node: ", e.what()));
      }
      state[i] = 2;
      stack.pop_back();
    }
  }
  return nodes;
}

}  // namespace

std::optional<DType> parse_dtype(std::string_view name) {
  std::string_view rest = name;
  DType t;
  if (size_t star = rest.find('*'); star != std::string_view::npos) {
    std::string_view space = rest.substr(star + 1);
    t.is_ptr = true;
    if (space == "local") t.addr = AddrSpace::Local;
    else if (space == "reg") t.addr = AddrSpace::Reg;
    else if (!space.empty()) return std::nullopt;
    rest = rest.substr(0, star);
  }
  if (size_t x = rest.rfind('x'); x != std::string_view::npos) {
    unsigned count = 0;
    auto [end, ec] = std::from_chars(rest.data() + x + 1, rest.data() + rest.size(), count);
    if (ec != std::errc() || end != rest.data() + rest.size() || count < 2 || count > UINT16_MAX) return std::nullopt;
    t.count = static_cast<uint16_t>(count);
    rest = rest.substr(0, x);
  }
  std::optional<DType> scalar = dtype_from_name(rest);
  if (!scalar || scalar->name() != rest) return std::nullopt;  // aliases ("float") are not names
  t.scalar = scalar->scalar;
  return t;
}

std::string serialize_program(const std::vector<UOpPtr>& linear) {
  // Lines: the program in order, each preceded by the nodes it references that are not in the program.
  std::unordered_set<const UOp*> in_program;
  for (const UOpPtr& u : linear) in_program.insert(u.get());
  std::vector<std::pair<const UOp*, bool>> lines;
  std::unordered_map<const UOp*, size_t> id;
  auto add_line = [&](const UOp* u, bool program) {
    id.emplace(u, lines.size());
    lines.emplace_back(u, program);
  };
  for (const UOpPtr& u : linear) {
    KILN_ASSERT(u != nullptr, "a program holds no null nodes");
    for (const UOpPtr& s : u->src) {
      if (in_program.count(s.get()) || id.count(s.get())) continue;
      for (const UOpPtr& extra : toposort(s))
        if (!in_program.count(extra.get()) && !id.count(extra.get())) add_line(extra.get(), false);
    }
    add_line(u.get(), true);
  }
  std::ostringstream out;
  out << kHeader << " " << kProgramFormatVersion << "\n";
  for (size_t i = 0; i < lines.size(); ++i) {
    const UOp& u = *lines[i].first;
    out << (lines[i].second ? "" : "+") << i << " " << op_name(u.op) << " " << u.dtype.name() << " [";
    for (size_t j = 0; j < u.src.size(); ++j) out << (j ? "," : "") << id.at(u.src[j].get());
    std::string comment;
    out << "] " << write_arg(u.arg, comment);
    if (!comment.empty()) out << "  # " << comment;
    out << "\n";
  }
  return out.str();
}

std::vector<UOpPtr> parse_program(const std::string& text) {
  std::vector<Record> records;
  bool header = false;
  std::istringstream in(text);
  std::string line;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    std::string_view body = std::string_view(line).substr(first);
    if (!header) {
      std::string expected = cat(kHeader, " ", kProgramFormatVersion);
      if (body.substr(0, body.find_last_not_of(" \t\r") + 1) != expected)
        throw Error(cat("parse_program: line ", line_no, ": expected the header \"", expected, "\", got: ", line));
      header = true;
      continue;
    }
    try {
      records.push_back(read_record(body, line_no, records.size()));
    } catch (const Error& e) {
      throw Error(cat("parse_program: line ", line_no, ": ", e.what(), "\n  ", line));
    }
  }
  if (!header) throw Error(cat("parse_program: empty text; a program starts with \"", kHeader, " ", kProgramFormatVersion, "\""));
  std::vector<UOpPtr> nodes = build_nodes(records);
  std::vector<UOpPtr> program;
  for (size_t i = 0; i < records.size(); ++i)
    if (records[i].in_program) program.push_back(nodes[i]);
  return program;
}

}  // namespace kiln
