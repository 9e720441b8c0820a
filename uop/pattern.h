// Patterns over UOps, and rule tables that rewrite what they match.
//
//   UPat x = UPat::var("x");
//   PatternMatcher pm_example{
//       {x * 1, [](const Match& m) { return m["x"]; }},                       // x*1 -> x
//       {x + x, [](const Match& m) { return m["x"] * 2; }},                   // x+x -> x*2
//   };
//   UOpPtr out = graph_rewrite(expr, pm_example);                              // see uop/rewrite.h
//
// A pattern constrains a node's op, dtype, arg and sources, and binds names to the nodes it matched.
// A name used twice must bind the same node (`x + x`). Binary patterns of commutative ops also try
// their sources swapped, with backtracking, so `(x*c1) + (x*c2)` matches however the sums are ordered.
// On UPat, `/` means IDIV: rule tables over index math are integer algebra (floats: UPat::op(Op::FDIV)).
// An action returns the replacement, or nullptr when the rule does not apply after all.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "uop/uop.h"

namespace kiln {

struct PatNode;

class UPat {
 public:
  explicit UPat(PatNode node);
  static UPat any(std::string name = "");                        // any node
  static UPat var(std::string name) { return any(std::move(name)); }
  static UPat cvar(std::string name = "");                       // any CONST
  static UPat cnst(int64_t value);                               // a CONST equal to value (any dtype)
  static UPat op(Op op, std::vector<UPat> src = {}, std::string name = "");  // src {}: any sources
  static UPat ops(std::vector<Op> ops, std::string name = "");   // one of these ops, any sources

  UPat named(std::string name) const;
  UPat dtype_is(bool (*pred)(DType)) const;                      // e.g. .dtype_is(is_int)
  UPat with_arg(Arg arg) const;
  UPat any_len() const;                                          // src is a prefix of the sources

  const PatNode& node() const { return *node_; }
  std::string to_string() const;

 private:
  std::shared_ptr<const PatNode> node_;
};

struct PatNode {
  std::vector<Op> ops;                            // empty: any op
  bool (*dtype_pred)(DType) = nullptr;
  std::optional<Arg> arg;
  std::optional<int64_t> const_value;             // for UPat::cnst
  std::optional<std::vector<UPat>> src;           // nullopt: any sources
  bool any_len = false;
  bool permute = false;                           // try the two sources in both orders
  std::string name;
};

inline UPat::UPat(PatNode node) : node_(std::make_shared<const PatNode>(std::move(node))) {}

UPat operator+(const UPat& a, const UPat& b);
UPat operator-(const UPat& a, const UPat& b);
UPat operator*(const UPat& a, const UPat& b);
UPat operator/(const UPat& a, const UPat& b);  // IDIV
UPat operator%(const UPat& a, const UPat& b);
UPat operator+(const UPat& a, int64_t c);
UPat operator*(const UPat& a, int64_t c);
UPat operator/(const UPat& a, int64_t c);
UPat operator%(const UPat& a, int64_t c);
UPat operator-(const UPat& a);
UPat max(const UPat& a, const UPat& b);
UPat min(const UPat& a, const UPat& b);
UPat lt(const UPat& a, const UPat& b);
UPat ne(const UPat& a, const UPat& b);
UPat eq(const UPat& a, const UPat& b);
UPat where(const UPat& c, const UPat& a, const UPat& b);
UPat cast(const UPat& x);

// Passed through graph_rewrite to actions that need state (a lowering context, a buffer map, ...).
class RewriteContext {
 public:
  virtual ~RewriteContext() = default;
};

// What an action sees: the matched root, the names bound by the pattern, and the context.
class Match {
 public:
  Match(const UOpPtr& root, RewriteContext* ctx) : root(root), ctx_(ctx) {}
  const UOpPtr& root;
  const UOpPtr& operator[](std::string_view name) const;
  bool has(std::string_view name) const;
  template <typename T>
  T& context() const {
    T* typed = dynamic_cast<T*>(ctx_);
    KILN_ASSERT(typed != nullptr, "the rewrite was given the context type its rules need");
    return *typed;
  }

 private:
  friend class PatternMatcher;
  friend bool match_pattern(const UPat&, const UOpPtr&, Match&);
  std::vector<std::pair<std::string_view, const UOpPtr*>> bindings_;
  RewriteContext* ctx_;
};

// Whether pattern matches u; on success, m holds the bindings.
bool match_pattern(const UPat& pattern, const UOpPtr& u, Match& m);

using RewriteFn = std::function<UOpPtr(const Match&)>;

struct Rule {
  Rule(UPat pattern, RewriteFn fn, std::source_location where = std::source_location::current());
  UPat pattern;
  RewriteFn fn;
  std::string where;  // "uop/symbolic.cpp:57", named in loop errors and debug output
  std::string describe() const { return where + " " + pattern.to_string(); }
};

class PatternMatcher {
 public:
  PatternMatcher(std::initializer_list<Rule> rules) : PatternMatcher(std::vector<Rule>(rules)) {}
  explicit PatternMatcher(std::vector<Rule> rules);

  struct Fired {
    UOpPtr replacement;
    const Rule* rule;
  };
  // The first rule (in table order) whose pattern matches u and whose action returns a new node.
  std::optional<Fired> rewrite(const UOpPtr& u, RewriteContext* ctx = nullptr) const;

  const std::vector<Rule>& rules() const { return *rules_; }
  friend PatternMatcher operator+(const PatternMatcher& a, const PatternMatcher& b);

 private:
  std::shared_ptr<const std::vector<Rule>> rules_;
  std::array<std::vector<const Rule*>, kNumOps> by_op_;  // rules that may match a root of each op
};

}  // namespace kiln
