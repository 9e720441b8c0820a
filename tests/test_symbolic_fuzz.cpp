// Property test of the symbolic simplifier against a plain interpreter written here, independently of
// uop/alu.cpp: random int32 expressions over variables with random bounds, evaluated before and after
// simplification at random points within the bounds. Also checks that vmin/vmax bound every value
// that every node takes, and that simplify() reaches a fixed point.
#include <map>
#include <random>

#include "helpers.h"
#include "uop/config.h"
#include "uop/symbolic.h"

using namespace kiln;

namespace {

using Env = std::map<std::string, int64_t>;

int64_t wrap32(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v))); }

// C semantics at int32: wrap after each op, truncating division, remainder with the dividend's sign.
int64_t eval(const UOpPtr& u, const Env& env, std::map<const UOp*, int64_t>& seen) {
  if (auto it = seen.find(u.get()); it != seen.end()) return it->second;
  auto at = [&](size_t i) { return eval(u->src[i], env, seen); };
  int64_t v = 0;
  switch (u->op) {
    case Op::CONST: v = std::holds_alternative<bool>(u->const_value()) ? std::get<bool>(u->const_value()) : std::get<int64_t>(u->const_value()); break;
    case Op::DEFINE_VAR: v = env.at(u->var().name); break;
    case Op::ADD: v = wrap32(at(0) + at(1)); break;
    case Op::SUB: v = wrap32(at(0) - at(1)); break;
    case Op::MUL: v = wrap32(at(0) * at(1)); break;
    case Op::NEG: v = wrap32(-at(0)); break;
    case Op::IDIV: v = wrap32(at(0) / at(1)); break;
    case Op::MOD: v = wrap32(at(0) % at(1)); break;
    case Op::MAX: v = std::max(at(0), at(1)); break;
    case Op::MIN: v = std::min(at(0), at(1)); break;
    case Op::CMPLT: v = at(0) < at(1); break;
    case Op::CMPNE: v = at(0) != at(1); break;
    case Op::CMPEQ: v = at(0) == at(1); break;
    case Op::AND: v = at(0) & at(1); break;
    case Op::OR: v = at(0) | at(1); break;
    case Op::WHERE: v = at(0) ? at(1) : at(2); break;
    case Op::CAST: v = at(0); break;  // bool -> int32 only, in these expressions
    default: FAIL("the test interpreter does not know " << op_name(u->op));
  }
  seen[u.get()] = v;
  return v;
}

struct Generator {
  std::mt19937_64 rng{20261130};
  std::vector<UOpPtr> vars;

  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }

  void new_vars() {
    vars.clear();
    for (const char* name : {"a", "b", "c"}) {
      // Mostly non-negative (index math), sometimes signed.
      int64_t lo = uniform(0, 3) == 0 ? uniform(-12, 0) : uniform(0, 4);
      vars.push_back(var(name, lo, lo + uniform(0, 24)));
    }
    vars.push_back(var("d", 1, uniform(1, 6)));  // a divisor that is never zero
  }

  UOpPtr constant() {
    int64_t v = uniform(-6, 8);
    if (uniform(0, 3) == 0) v *= uniform(2, 16);
    return const_int(v);
  }

  UOpPtr divisor() {
    if (uniform(0, 5) == 0) return vars[3];
    int64_t v = uniform(1, 12);
    return const_int(uniform(0, 6) == 0 ? -v : v);
  }

  UOpPtr expr(int depth) {
    if (depth == 0 || uniform(0, 5) == 0) return uniform(0, 3) == 0 ? constant() : vars[uniform(0, 2)];
    switch (uniform(0, 12)) {
      case 0: case 1: return expr(depth - 1) + expr(depth - 1);
      case 2: return expr(depth - 1) - expr(depth - 1);
      case 3: case 4: return expr(depth - 1) * constant();
      case 5: return expr(depth - 1) * expr(depth - 1);
      case 6: case 7: return expr(depth - 1) / divisor();
      case 8: case 9: return expr(depth - 1) % divisor();
      case 10: return uniform(0, 1) ? max(expr(depth - 1), expr(depth - 1)) : min(expr(depth - 1), expr(depth - 1));
      case 11: return -expr(depth - 1);
      default: {
        UOpPtr cond = uniform(0, 1) ? lt(expr(depth - 1), expr(depth - 1)) : ne(expr(depth - 1), constant());
        return uniform(0, 1) ? where(cond, expr(depth - 1), expr(depth - 1)) : cast(cond, dtypes::int32);
      }
    }
  }

  Env assignment() {
    Env env;
    for (const UOpPtr& v : vars) {
      const VarArg& a = v->var();
      int64_t pick = uniform(0, 4);
      env[a.name] = pick == 0 ? a.min : pick == 1 ? a.max : uniform(a.min, a.max);
    }
    return env;
  }
};

std::string show(const Env& env) {
  std::string out;
  for (const auto& [name, value] : env) out += cat(name, "=", value, " ");
  return out;
}

void check_bounds(const UOpPtr& root, const std::map<const UOp*, int64_t>& seen, const char* which, const Env& env) {
  for (const UOpPtr& u : toposort(root)) {
    auto it = seen.find(u.get());
    if (it == seen.end()) continue;  // not evaluated (an untaken branch)
    if (it->second < u->vmin() || it->second > u->vmax())
      FAIL(which << " node " << str(u) << " took " << it->second << " outside its range [" << u->vmin() << ", "
                 << u->vmax() << "] at " << show(env) << "\n  whole expression: " << str(root));
  }
}

}  // namespace

TEST_CASE("simplify preserves values and ranges bound them, on random expressions", "[symbolic][fuzz]") {
  Generator gen;
  const int expressions = 3000 * config().fuzz;
  int simplified_smaller = 0;
  for (int i = 0; i < expressions; ++i) {
    if (i % 50 == 0) gen.new_vars();
    UOpPtr e = gen.expr(static_cast<int>(gen.uniform(1, 5)));
    UOpPtr s = simplify(e);
    if (simplify(s) != s) FAIL("not a fixed point: " << str(e) << " -> " << str(s) << " -> " << str(simplify(s)));
    if (test::node_count(s) < test::node_count(e)) ++simplified_smaller;
    for (int k = 0; k < 12; ++k) {
      Env env = gen.assignment();
      std::map<const UOp*, int64_t> seen_e, seen_s;
      int64_t want = eval(e, env, seen_e), got = eval(s, env, seen_s);
      if (want != got)
        FAIL("value changed by simplify\n  expression: " << str(e) << "\n  simplified: " << str(s)
                                                         << "\n  assignment: " << show(env) << "\n  original "
                                                         << want << ", simplified " << got);
      check_bounds(e, seen_e, "original", env);
      check_bounds(s, seen_s, "simplified", env);
    }
  }
  // The generator must exercise the rules, not just produce already-simple expressions.
  CHECK(simplified_smaller > expressions / 4);
}
