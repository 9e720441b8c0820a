#include "uop/pattern.h"

#include <algorithm>
#include <filesystem>

namespace kiln {

// --- building patterns --------------------------------------------------------------------------

namespace {
UPat make_pat(PatNode node) { return UPat(std::move(node)); }
}  // namespace

UPat UPat::any(std::string name) {
  PatNode n;
  n.name = std::move(name);
  return make_pat(std::move(n));
}

UPat UPat::cvar(std::string name) {
  PatNode n;
  n.ops = {Op::CONST};
  n.name = std::move(name);
  return make_pat(std::move(n));
}

UPat UPat::cnst(int64_t value) {
  PatNode n;
  n.ops = {Op::CONST};
  n.const_value = value;
  return make_pat(std::move(n));
}

UPat UPat::op(Op op, std::vector<UPat> src, std::string name) {
  PatNode n;
  n.ops = {op};
  n.permute = is_commutative(op) && src.size() == 2;
  if (!src.empty()) n.src = std::move(src);  // no sources given: any sources
  n.name = std::move(name);
  return make_pat(std::move(n));
}

UPat UPat::ops(std::vector<Op> ops, std::string name) {
  PatNode n;
  n.ops = std::move(ops);
  n.name = std::move(name);
  return make_pat(std::move(n));
}

UPat UPat::named(std::string name) const {
  PatNode n = *node_;
  n.name = std::move(name);
  return make_pat(std::move(n));
}

UPat UPat::dtype_is(bool (*pred)(DType)) const {
  PatNode n = *node_;
  n.dtype_pred = pred;
  return make_pat(std::move(n));
}

UPat UPat::with_arg(Arg arg) const {
  PatNode n = *node_;
  n.arg = std::move(arg);
  return make_pat(std::move(n));
}

UPat UPat::any_len() const {
  PatNode n = *node_;
  n.any_len = true;
  return make_pat(std::move(n));
}

std::string UPat::to_string() const {
  const PatNode& n = *node_;
  std::string out;
  if (n.const_value) return cat(*n.const_value);
  if (n.ops.empty()) out = n.name.empty() ? "_" : n.name;
  else {
    for (size_t i = 0; i < n.ops.size(); ++i) out += cat(i ? "|" : "", op_name(n.ops[i]));
    if (!n.name.empty()) out += ":" + n.name;
  }
  if (n.src) {
    out += "(";
    for (size_t i = 0; i < n.src->size(); ++i) out += (i ? ", " : "") + (*n.src)[i].to_string();
    out += n.any_len ? ", ...)" : ")";
  }
  return out;
}

UPat operator+(const UPat& a, const UPat& b) { return UPat::op(Op::ADD, {a, b}); }
UPat operator-(const UPat& a, const UPat& b) { return UPat::op(Op::SUB, {a, b}); }
UPat operator*(const UPat& a, const UPat& b) { return UPat::op(Op::MUL, {a, b}); }
UPat operator/(const UPat& a, const UPat& b) { return UPat::op(Op::IDIV, {a, b}); }
UPat operator%(const UPat& a, const UPat& b) { return UPat::op(Op::MOD, {a, b}); }
UPat operator+(const UPat& a, int64_t c) { return a + UPat::cnst(c); }
UPat operator*(const UPat& a, int64_t c) { return a * UPat::cnst(c); }
UPat operator/(const UPat& a, int64_t c) { return a / UPat::cnst(c); }
UPat operator%(const UPat& a, int64_t c) { return a % UPat::cnst(c); }
UPat operator-(const UPat& a) { return UPat::op(Op::NEG, {a}); }
UPat max(const UPat& a, const UPat& b) { return UPat::op(Op::MAX, {a, b}); }
UPat min(const UPat& a, const UPat& b) { return UPat::op(Op::MIN, {a, b}); }
UPat lt(const UPat& a, const UPat& b) { return UPat::op(Op::CMPLT, {a, b}); }
UPat ne(const UPat& a, const UPat& b) { return UPat::op(Op::CMPNE, {a, b}); }
UPat eq(const UPat& a, const UPat& b) { return UPat::op(Op::CMPEQ, {a, b}); }
UPat where(const UPat& c, const UPat& a, const UPat& b) { return UPat::op(Op::WHERE, {c, a, b}); }
UPat cast(const UPat& x) { return UPat::op(Op::CAST, {x}); }

// --- matching -----------------------------------------------------------------------------------

const UOpPtr& Match::operator[](std::string_view name) const {
  for (const auto& [bound, node] : bindings_)
    if (bound == name) return *node;
  throw_internal("the pattern binds every name its action reads", cat("no binding named '", name, "'"), __FILE__, __LINE__);
}

bool Match::has(std::string_view name) const {
  return std::any_of(bindings_.begin(), bindings_.end(), [&](const auto& b) { return b.first == name; });
}

namespace {

bool const_equals(const ConstValue& c, int64_t value) {
  return std::visit(
      [&](auto x) -> bool {
        using T = decltype(x);
        if constexpr (std::is_same_v<T, double>) return x == static_cast<double>(value);
        else if constexpr (std::is_same_v<T, uint64_t>) return value >= 0 && x == static_cast<uint64_t>(value);
        else return static_cast<int64_t>(x) == value;
      },
      c);
}

using Todo = std::vector<std::pair<const PatNode*, const UOpPtr*>>;
using Bindings = std::vector<std::pair<std::string_view, const UOpPtr*>>;

// Matches every (pattern, node) pair still to do; backtracks over source orders of commutative ops.
bool solve(Todo todo, Bindings& bindings) {
  if (todo.empty()) return true;
  auto [pat, node_ref] = todo.back();
  todo.pop_back();
  const PatNode& p = *pat;
  const UOpPtr& u = *node_ref;
  if (!p.ops.empty() && std::find(p.ops.begin(), p.ops.end(), u->op) == p.ops.end()) return false;
  if (p.dtype_pred != nullptr && !p.dtype_pred(u->dtype)) return false;
  if (p.arg && !arg_equal(*p.arg, u->arg)) return false;
  if (p.const_value && !const_equals(u->const_value(), *p.const_value)) return false;
  size_t mark = bindings.size();
  if (!p.name.empty()) {
    auto bound = std::find_if(bindings.begin(), bindings.end(), [&](const auto& b) { return b.first == p.name; });
    if (bound != bindings.end() && *bound->second != u) return false;
    if (bound == bindings.end()) bindings.push_back({p.name, node_ref});
  }
  size_t after_self = bindings.size();
  if (!p.src) {
    if (solve(std::move(todo), bindings)) return true;
    bindings.resize(mark);
    return false;
  }
  const std::vector<UPat>& ps = *p.src;
  if (p.any_len ? u->src.size() < ps.size() : u->src.size() != ps.size()) {
    bindings.resize(mark);
    return false;
  }
  int orders = p.permute ? 2 : 1;
  for (int order = 0; order < orders; ++order) {
    Todo next = todo;
    for (size_t i = ps.size(); i-- > 0;) {
      size_t j = order == 0 ? i : ps.size() - 1 - i;
      next.push_back({&ps[i].node(), &u->src[j]});
    }
    if (solve(std::move(next), bindings)) return true;
    bindings.resize(after_self);
  }
  bindings.resize(mark);
  return false;
}

}  // namespace

bool match_pattern(const UPat& pattern, const UOpPtr& u, Match& m) {
  m.bindings_.clear();
  return solve(Todo{{&pattern.node(), &u}}, m.bindings_);
}

// --- rule tables --------------------------------------------------------------------------------

Rule::Rule(UPat pattern_, RewriteFn fn_, std::source_location loc)
    : pattern(std::move(pattern_)), fn(std::move(fn_)) {
  std::filesystem::path file(loc.file_name());
  where = cat(file.parent_path().filename().string(), "/", file.filename().string(), ":", loc.line());
}

PatternMatcher::PatternMatcher(std::vector<Rule> rules) : rules_(std::make_shared<const std::vector<Rule>>(std::move(rules))) {
  for (const Rule& rule : *rules_) {
    const std::vector<Op>& ops = rule.pattern.node().ops;
    if (ops.empty()) {
      for (auto& list : by_op_) list.push_back(&rule);
    } else {
      for (Op op : ops) by_op_[static_cast<size_t>(op)].push_back(&rule);
    }
  }
}

std::optional<PatternMatcher::Fired> PatternMatcher::rewrite(const UOpPtr& u, RewriteContext* ctx) const {
  Match m(u, ctx);
  for (const Rule* rule : by_op_[static_cast<size_t>(u->op)]) {
    if (!match_pattern(rule->pattern, u, m)) continue;
    UOpPtr out = rule->fn(m);
    if (out && out != u) return Fired{std::move(out), rule};
  }
  return std::nullopt;
}

PatternMatcher operator+(const PatternMatcher& a, const PatternMatcher& b) {
  std::vector<Rule> all = a.rules();
  all.insert(all.end(), b.rules().begin(), b.rules().end());
  return PatternMatcher(std::move(all));
}

}  // namespace kiln
