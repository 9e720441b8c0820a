// The pattern matcher and graph_rewrite: matching, composition, memoization, fixed points, loops.
#include "helpers.h"
#include "uop/rewrite.h"

using namespace kiln;

namespace {
const UPat X = UPat::var("x"), Y = UPat::var("y");
UOpPtr keep_x(const Match& m) { return m["x"]; }
}  // namespace

TEST_CASE("patterns bind names, and a repeated name must bind one node", "[rewrite]") {
  UOpPtr a = var("a", 0, 9), b = var("b", 0, 9);
  Match m(a, nullptr);
  UOpPtr sum = a + a;
  Match m2(sum, nullptr);
  CHECK(match_pattern(X + X, sum, m2));
  CHECK(m2["x"] == a);
  UOpPtr mixed = a + b;
  Match m3(mixed, nullptr);
  CHECK_FALSE(match_pattern(X + X, mixed, m3));
  CHECK(match_pattern(X + Y, mixed, m3));
  CHECK_FALSE(match_pattern(X * Y, mixed, m3));
  CHECK_THROWS_AS(m3["nope"], InternalError);
}

TEST_CASE("commutative patterns match either order, with backtracking into nested patterns", "[rewrite]") {
  UOpPtr a = var("a", 0, 9), b = var("b", 0, 9);
  UPat pat = (X * UPat::cvar("c1")) + (X * UPat::cvar("c2")).named("second");
  // Constants on the left of the MULs and the binding of x only succeeding in the second order:
  UOpPtr e = UOp::make(Op::ADD, a->dtype, {UOp::make(Op::MUL, a->dtype, {const_int(3), a}), UOp::make(Op::MUL, a->dtype, {a, const_int(5)})});
  Match m(e, nullptr);
  REQUIRE(match_pattern(pat, e, m));
  CHECK(m["x"] == a);
  CHECK(as_int64(m["c1"]->const_value()) + as_int64(m["c2"]->const_value()) == 8);
  UOpPtr different = a * 3 + b * 5;
  Match m2(different, nullptr);
  CHECK_FALSE(match_pattern(pat, different, m2));
  // SUB is not commutative: x - 0 matches, 0 - x does not.
  UPat minus_zero = UPat::op(Op::SUB, {X, UPat::cnst(0)});
  UOpPtr zero_minus = const_int(0) - a;
  Match m3(zero_minus, nullptr);
  CHECK_FALSE(match_pattern(minus_zero, zero_minus, m3));
}

TEST_CASE("patterns constrain dtype, arg and source count", "[rewrite]") {
  UOpPtr a = var("a", 0, 9);
  UOpPtr f = cast(a, dtypes::float32);
  Match m(f, nullptr);
  CHECK(match_pattern(UPat::op(Op::CAST, {X}).dtype_is(is_float), f, m));
  CHECK_FALSE(match_pattern(UPat::op(Op::CAST, {X}).dtype_is(is_int), f, m));
  UOpPtr r = range(3, const_int(8));
  Match mr(r, nullptr);
  CHECK(match_pattern(UPat::op(Op::RANGE).with_arg(int64_t{3}), r, mr));
  CHECK_FALSE(match_pattern(UPat::op(Op::RANGE).with_arg(int64_t{4}), r, mr));
  UOpPtr w = where(lt(a, const_int(3)), a, const_int(0));
  Match mw(w, nullptr);
  CHECK_FALSE(match_pattern(UPat::op(Op::WHERE, {X}), w, mw));  // 1 of 3 sources
  CHECK(match_pattern(UPat::op(Op::WHERE, {X}).any_len(), w, mw));
}

TEST_CASE("graph_rewrite rewrites bottom-up to a fixed point", "[rewrite]") {
  // Rules that each need the previous one's output: x+0 -> x exposes x*1 -> x.
  PatternMatcher pm{
      {X + 0, keep_x},
      {X * 1, keep_x},
  };
  UOpPtr a = var("a", 0, 9);
  UOpPtr e = (a + 0) * 1 + 0;
  CHECK(graph_rewrite(e, pm) == a);
  // A rule whose output is matched by another rule at the same root.
  PatternMatcher chain{
      {UPat::op(Op::NEG, {UPat::op(Op::NEG, {X})}), keep_x},                          // --x -> x
      {UPat::op(Op::SUB, {UPat::cnst(0), X}), [](const Match& m) { return -(-(-m["x"])); }},  // 0-x -> ---x
  };
  CHECK(graph_rewrite(const_int(0) - a, chain) == -a);
}

TEST_CASE("a shared subgraph is rewritten once", "[rewrite]") {
  int calls = 0;
  PatternMatcher pm{
      {X * 1, [&calls](const Match& m) { ++calls; return m["x"]; }},
  };
  UOpPtr a = var("a", 0, 9);
  UOpPtr shared = a * 1;
  UOpPtr e = shared;
  for (int i = 0; i < 30; ++i) e = e + shared;  // shared is used 31 times
  size_t fired_before = rewrite_rules_fired();
  UOpPtr out = graph_rewrite(e, pm);
  CHECK(calls == 1);
  CHECK(rewrite_rules_fired() - fired_before == 1);
  for (const UOpPtr& u : toposort(out)) CHECK(u->op != Op::MUL);
}

TEST_CASE("rule tables compose with +, first rule wins", "[rewrite]") {
  PatternMatcher first{{X + 0, [](const Match&) { return const_int(111); }}};
  PatternMatcher second{{X + 0, keep_x}, {X * 1, keep_x}};
  UOpPtr a = var("a", 0, 9);
  CHECK(graph_rewrite(a + 0, first + second) == const_int(111));
  CHECK(graph_rewrite(a + 0, second + first) == a);
  CHECK(graph_rewrite(a * 1, first + second) == a);
  CHECK((first + second).rules().size() == 3);
}

TEST_CASE("rules get the context passed to graph_rewrite", "[rewrite]") {
  struct Renames : RewriteContext {
    int seen = 0;
  } ctx;
  PatternMatcher pm{{UPat::op(Op::DEFINE_VAR).named("v"), [](const Match& m) {
                       auto& c = m.context<Renames>();
                       ++c.seen;
                       return m["v"]->var().name == "a" ? var("b", 0, 9) : nullptr;
                     }}};
  UOpPtr a = var("a", 0, 9);
  CHECK(graph_rewrite(a + 1, pm, &ctx) == var("b", 0, 9) + 1);
  CHECK(ctx.seen == 2);  // a, then b (which matches but is left alone)
  CHECK_THROWS_AS(graph_rewrite(a + 1, pm), InternalError);  // no context given
}

TEST_CASE("a rule set that loops stops with an error naming the rules", "[rewrite][errors]") {
  // x+y -> y+x forever: a cycle of two nodes.
  PatternMatcher swap{{UPat::op(Op::ADD, {X, Y}), [](const Match& m) { return UOp::make(Op::ADD, m.root->dtype, {m["y"], m["x"]}); }}};
  UOpPtr a = var("a", 0, 9), b = var("b", 0, 9);
  try {
    graph_rewrite(a + b, swap, nullptr, "swap-test");
    FAIL("expected an error");
  } catch (const InternalError& e) {
    std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("swap-test") != std::string::npos);
    CHECK(msg.find("loop") != std::string::npos);
    CHECK(msg.find("test_rewrite.cpp:") != std::string::npos);  // where the rule is defined
  }
  // x -> x+1 on a DEFINE_VAR: grows forever without repeating a node.
  PatternMatcher grow{{UPat::op(Op::MUL, {X, UPat::cvar("c")}), [](const Match& m) {
                         return m["x"] * (as_int64(m["c"]->const_value()) + 1); }}};
  CHECK_THROWS_WITH(graph_rewrite(a * 1, grow), Catch::Contains("test_rewrite.cpp:") && Catch::Contains("fixed point"));
}

TEST_CASE("graph_rewrite and node destruction handle very deep graphs", "[rewrite]") {
  PatternMatcher pm{{UPat::op(Op::NEG, {UPat::op(Op::NEG, {X})}), keep_x}};  // --x -> x
  UOpPtr a = var("a", 0, 9);
  UOpPtr e = a;
  for (int i = 0; i < 100001; ++i) e = UOp::make(Op::NEG, e->dtype, {e});
  CHECK(graph_rewrite(e, pm) == UOp::make(Op::NEG, a->dtype, {a}));
  e = nullptr;  // frees a 100001-node chain without recursing per node
  CHECK(a->op == Op::DEFINE_VAR);
}
