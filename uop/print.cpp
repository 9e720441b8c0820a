// Printing UOps for humans: KILN_DEBUG dumps and test failure messages.
#include <cctype>
#include <ostream>
#include <sstream>
#include <unordered_map>

#include "uop/uop.h"

namespace kiln {

std::ostream& operator<<(std::ostream& os, Op op) { return os << op_name(op); }

std::string arg_to_string(const Arg& arg, DType dtype) {
  struct Printer {
    DType dtype;
    std::string operator()(std::monostate) const { return ""; }
    std::string operator()(const ConstValue& c) const { return const_to_string(c, dtype); }
    std::string operator()(int64_t x) const { return std::to_string(x); }
    std::string operator()(Op op) const { return std::string(op_name(op)); }
    std::string operator()(const std::string& s) const { return '"' + s + '"'; }
    std::string operator()(const std::vector<int64_t>& v) const {
      std::string out = "(";
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
      return out + (v.size() == 1 ? ",)" : ")");
    }
    std::string operator()(const Pairs& v) const {
      std::string out = "(";
      for (size_t i = 0; i < v.size(); ++i) out += cat(i ? ", " : "", "(", v[i].first, ", ", v[i].second, ")");
      return out + ")";
    }
    std::string operator()(const VarArg& v) const { return cat(v.name, "[", v.min, "..", v.max, "]"); }
    std::string operator()(const ReduceArg& r) const { return cat(op_name(r.op), " ", (*this)(r.axes)); }
    std::string operator()(const BufferArg& b) const { return cat("id=", b.id, " size=", b.size); }
  };
  return std::visit(Printer{dtype}, arg);
}

namespace {

// Binary ops printed infix; everything else prints as name(sources, arg).
const char* infix(Op op) {
  static constexpr std::pair<Op, const char*> kInfix[] = {
      {Op::ADD, "+"},   {Op::SUB, "-"},   {Op::MUL, "*"},  {Op::FDIV, "/"}, {Op::IDIV, "//"},
      {Op::MOD, "%"},   {Op::CMPLT, "<"}, {Op::CMPNE, "!="}, {Op::CMPEQ, "=="}, {Op::AND, "&"},
      {Op::OR, "|"},    {Op::XOR, "^"},   {Op::SHL, "<<"}, {Op::SHR, ">>"}};
  for (auto [o, sym] : kInfix)
    if (o == op) return sym;
  return nullptr;
}

void render(const UOpPtr& u, std::ostream& os) {
  if (u->op == Op::CONST) {
    os << const_to_string(u->const_value(), u->dtype);
    return;
  }
  if (u->op == Op::DEFINE_VAR) {
    os << u->var().name;
    return;
  }
  if (u->op == Op::RANGE) {
    os << "r" << u->axis_id();
    return;
  }
  if (const char* sym = infix(u->op); sym != nullptr && u->src.size() == 2) {
    os << "(";
    render(u->src[0], os);
    os << sym;
    render(u->src[1], os);
    os << ")";
    return;
  }
  std::string name(op_name(u->op));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  os << name << "(";
  if (u->op == Op::CAST || u->op == Op::BITCAST) os << u->dtype.name() << (u->src.empty() ? "" : ", ");
  for (size_t i = 0; i < u->src.size(); ++i) {
    if (i) os << ", ";
    render(u->src[i], os);
  }
  std::string arg = arg_to_string(u->arg, u->dtype);
  if (!arg.empty()) os << (u->src.empty() ? "" : ", ") << arg;
  os << ")";
}

}  // namespace

std::string str(const UOpPtr& u) {
  if (!u) return "<null>";
  std::ostringstream os;
  render(u, os);
  return os.str();
}

std::string print_graph(const UOpPtr& root) {
  std::vector<UOpPtr> nodes = toposort(root);
  std::unordered_map<const UOp*, size_t> index;
  std::ostringstream os;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const UOpPtr& u = nodes[i];
    index[u.get()] = i;
    os.width(4);
    os << i << " " << op_name(u->op) << " " << u->dtype.name() << " [";
    for (size_t j = 0; j < u->src.size(); ++j) os << (j ? ", " : "") << index.at(u->src[j].get());
    os << "]";
    std::string arg = arg_to_string(u->arg, u->dtype);
    if (!arg.empty()) os << " " << arg;
    os << "\n";
  }
  return os.str();
}

}  // namespace kiln
