// The pattern matcher, graph_rewrite (bottom-up, pre-order) and substitute: matching, memoization, loops.
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

TEST_CASE("pre-order: rules see a node before its sources are rewritten", "[rewrite]") {
  // (x+0)*1: bottom-up rewrites x+0 first, so a rule for "(y+0)*1 as built" never sees it.
  UOpPtr a = var("a", 0, 9);
  PatternMatcher pm{
      {(X + 0) * 1, [](const Match& m) { return m["x"] * 7; }},  // (x+0)*1 -> x*7, only as built
      {X + 0, keep_x},                                            // x+0 -> x
  };
  UOpPtr e = (a + 0) * 1;
  CHECK(graph_rewrite(e, pm, nullptr, {}, RewriteOrder::PreOrder) == a * 7);
  CHECK(graph_rewrite(e, pm) == a * 1);  // bottom-up: the sources changed first
  // A replacement is visited again: its own matches and its sources' are rewritten.
  UOpPtr nested = ((a + 0) * 1 + 0) * 1;
  CHECK(graph_rewrite(nested, pm, nullptr, {}, RewriteOrder::PreOrder) == (a * 7) * 7);
  // A node no rule matched is rebuilt over its rewritten sources, and not offered to the rules again.
  CHECK(graph_rewrite(-(a + 0), pm, nullptr, {}, RewriteOrder::PreOrder) == -a);
  CHECK(graph_rewrite((a * 1) + 0, pm, nullptr, {}, RewriteOrder::PreOrder) == a * 1);
}

TEST_CASE("pre-order: a shared subgraph is rewritten once, and loops and growth throw", "[rewrite][errors]") {
  int calls = 0;
  PatternMatcher once{{X * 1, [&calls](const Match& m) { ++calls; return m["x"]; }}};
  UOpPtr a = var("a", 0, 9), shared = a * 1, e = shared;
  for (int i = 0; i < 30; ++i) e = e + shared;
  graph_rewrite(e, once, nullptr, {}, RewriteOrder::PreOrder);
  CHECK(calls == 1);
  // x -> -x rewrites x again inside its own replacement: a loop.
  PatternMatcher wrap{{UPat::op(Op::DEFINE_VAR).named("x"), [](const Match& m) { return -m["x"]; }}};
  CHECK_THROWS_WITH(graph_rewrite(a + 1, wrap, nullptr, "wrap-test", RewriteOrder::PreOrder),
                    Catch::Contains("wrap-test") && Catch::Contains("loop"));
  // x*c -> x*(c+1) at one place forever: bounded.
  PatternMatcher grow{{UPat::op(Op::MUL, {X, UPat::cvar("c")}), [](const Match& m) {
                         return m["x"] * (as_int64(m["c"]->const_value()) + 1); }}};
  CHECK_THROWS_WITH(graph_rewrite(a * 1, grow, nullptr, {}, RewriteOrder::PreOrder), Catch::Contains("fixed point"));
  // --x -> x down a deep chain nests one replacement per level, which is not growth.
  PatternMatcher neg{{UPat::op(Op::NEG, {UPat::op(Op::NEG, {X})}), keep_x}};
  UOpPtr deep = a;
  for (int i = 0; i < 100001; ++i) deep = UOp::make(Op::NEG, deep->dtype, {deep});
  CHECK(graph_rewrite(deep, neg, nullptr, {}, RewriteOrder::PreOrder) == UOp::make(Op::NEG, a->dtype, {a}));
}

TEST_CASE("substitute matches keys as found, before their sources change", "[rewrite]") {
  UOpPtr a = var("a", 0, 9), b = var("b", 0, 9), c = var("c", 0, 9);
  // Both a and a+b are keys: a+b still matches although its source a is also replaced. (Bottom-up,
  // a+b was rebuilt as c+b first, which is no key, and the result was (c+b)*2.)
  UOpPtr sum = a + b;
  CHECK(substitute(sum * 2, {{a.get(), c}, {sum.get(), b}}) == b * 2);
  CHECK(substitute(a * sum, {{a.get(), c}, {sum.get(), b}}) == c * b);
  // Values are taken as they are: r -> r+1 ends, and a swap of two nodes needs no third name.
  CHECK(substitute(a * 3, {{a.get(), a + 1}}) == (a + 1) * 3);
  CHECK(substitute(a - b, {{a.get(), b}, {b.get(), a}}) == b - a);
  // Nodes that are no key keep their identity when nothing under them changes.
  UOpPtr untouched = b * 5;
  CHECK(substitute(untouched + a, {{a.get(), c}}) == untouched + c);
  CHECK(substitute(untouched, {{a.get(), c}}) == untouched);
}
