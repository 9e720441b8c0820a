#include "uop/symbolic.h"

#include <algorithm>
#include <numeric>

#include "uop/alu.h"
#include "uop/range.h"
#include "uop/rewrite.h"

namespace kiln {

namespace {

bool is_index(DType d) { return has_exact_range(d) && !is_bool(d); }  // ints whose ranges rules may trust
bool is_any_int(DType d) { return is_int(d); }
bool is_int_or_bool(DType d) { return is_int(d) || is_bool(d); }

int64_t value(const UOpPtr& c) { return as_int64(c->const_value()); }
UOpPtr konst(const UOpPtr& like, int64_t v) { return const_of(like->dtype, v); }

// --- constant folding ---------------------------------------------------------------------------

UOpPtr fold_constants(const Match& m) {
  const UOpPtr& u = m.root;
  std::vector<ConstValue> values;
  for (const UOpPtr& s : u->src) {
    if (s->op != Op::CONST) return nullptr;
    values.push_back(s->const_value());
  }
  DType in = u->op == Op::WHERE ? u->src[1]->dtype : u->src[0]->dtype;
  std::optional<ConstValue> out = exec_alu(u->op, u->dtype, values, in);
  return out ? const_of(u->dtype, *out) : nullptr;
}

// An integer or bool node that can take one value only is that value (decides comparisons too).
UOpPtr fold_single_value(const Match& m) {
  const UOpPtr& u = m.root;
  if (!has_exact_range(u->dtype) || u->vmin() != u->vmax()) return nullptr;
  return const_of(u->dtype, is_bool(u->dtype) ? ConstValue{u->vmin() != 0} : ConstValue{u->vmin()});
}

std::vector<Op> alu_and_cast_ops() {
  std::vector<Op> ops;
  for (int i = 0; i < kNumOps; ++i)
    if (is_alu(static_cast<Op>(i))) ops.push_back(static_cast<Op>(i));
  ops.push_back(Op::CAST);
  return ops;
}

// --- sums ---------------------------------------------------------------------------------------

// c1*t1 + c2*t2 + ... + constant, with each term t a node that is not itself a sum or a scaled node.
struct Sum {
  std::vector<std::pair<UOpPtr, int64_t>> terms;
  int64_t constant = 0;
  bool overflow = false;

  void add_term(const UOpPtr& t, int64_t coeff) {
    for (auto& [node, c] : terms)
      if (node == t) {
        overflow |= __builtin_add_overflow(c, coeff, &c);
        return;
      }
    terms.push_back({t, coeff});
  }

  void add(const UOpPtr& u, int64_t coeff) {
    int64_t scaled = 0;
    if (u->op == Op::ADD || u->op == Op::SUB) {
      add(u->src[0], coeff);
      add(u->src[1], u->op == Op::ADD ? coeff : -coeff);
      return;
    }
    if (u->op == Op::NEG) return add(u->src[0], -coeff);
    if (u->op == Op::CONST) {
      overflow |= __builtin_mul_overflow(value(u), coeff, &scaled) || __builtin_add_overflow(constant, scaled, &constant);
      return;
    }
    if (u->op == Op::MUL) {
      for (int i = 0; i < 2; ++i) {
        if (u->src[1 - i]->op != Op::CONST) continue;
        overflow |= __builtin_mul_overflow(value(u->src[1 - i]), coeff, &scaled);
        return add(u->src[i], scaled);
      }
    }
    add_term(u, coeff);
  }

  // (x//c)*(c*k) + (x%c)*k -> x*k: the C identity x == (x/c)*c + x%c, for any sign of x.
  // ((x//c)%b)*(c*k) + (x%c)*k -> (x%(c*b))*k for c, b > 0: C's x/c/b == x/(c*b), so both sides are
  // x - (x/(c*b))*(c*b). A flattened index splits that way (a (N, C, H, W) buffer read as (N, C*H*W):
  // (k//144)*144 + ((k//12)%12)*12 + k%12 is k), and index_stride must see it is contiguous.
  bool recombine_divmod() {
    for (size_t i = 0; i < terms.size(); ++i) {
      const auto& [d, kd] = terms[i];
      UOpPtr div = d;
      int64_t parts = 0;  // b of the second form
      if (d->op == Op::MOD && d->src[1]->op == Op::CONST && d->src[0]->op == Op::IDIV && value(d->src[1]) > 0) {
        div = d->src[0];
        parts = value(d->src[1]);
      }
      if (div->op != Op::IDIV || div->src[1]->op != Op::CONST) continue;
      int64_t c = value(div->src[1]), expect = 0, modulus = 0;
      if (parts != 0 && (c <= 0 || __builtin_mul_overflow(c, parts, &modulus))) continue;
      const UOpPtr& x = div->src[0];
      for (size_t j = 0; j < terms.size(); ++j) {
        const auto& [r, kr] = terms[j];
        if (r->op != Op::MOD || r->src[0] != x || r->src[1] != div->src[1]) continue;
        if (__builtin_mul_overflow(c, kr, &expect) || expect != kd) continue;
        UOpPtr whole = parts == 0 ? x : UOp::make(Op::MOD, d->dtype, {x, const_of(d->dtype, modulus)});  // what the pair recombines into
        int64_t k = kr;
        terms.erase(terms.begin() + static_cast<std::ptrdiff_t>(std::max(i, j)));
        terms.erase(terms.begin() + static_cast<std::ptrdiff_t>(std::min(i, j)));
        add(whole, k);
        return true;
      }
    }
    return false;
  }

  UOpPtr build(DType dtype) const {
    std::vector<std::pair<UOpPtr, int64_t>> live;
    for (const auto& t : terms)
      if (t.second != 0) live.push_back(t);
    std::sort(live.begin(), live.end(), [](const auto& a, const auto& b) { return a.first->hash() < b.first->hash(); });
    UOpPtr out;
    for (const auto& [node, coeff] : live) {
      UOpPtr term = coeff == 1 ? node : UOp::make(Op::MUL, dtype, {node, const_of(dtype, coeff)});
      out = out ? UOp::make(Op::ADD, dtype, {out, term}) : term;
    }
    if (!out) return const_of(dtype, constant);
    return constant == 0 ? out : UOp::make(Op::ADD, dtype, {out, const_of(dtype, constant)});
  }
};

std::optional<Sum> flatten(const UOpPtr& u) {
  Sum s;
  s.add(u, 1);
  while (s.recombine_divmod()) {
  }
  if (s.overflow) return std::nullopt;
  return s;
}

// A sum in canonical form: flattened, like terms merged, ordered, constant last.
UOpPtr canonicalize_sum(const Match& m) {
  std::optional<Sum> s = flatten(m.root);
  if (!s) return nullptr;
  UOpPtr out = s->build(m.root->dtype);
  return out == m.root ? nullptr : out;
}

// --- division and remainder by a constant -------------------------------------------------------

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

// x//c and x%c for c > 0, folded over the terms of x. Soundness needs x >= 0, where C's truncating
// division is floor division.
UOpPtr fold_divmod(const Match& m) {
  const UOpPtr& u = m.root;
  const UOpPtr& x = m["x"];
  int64_t c = value(m["c"]);
  bool is_div = u->op == Op::IDIV;
  DType dtype = u->dtype;
  if (c <= 0) return nullptr;
  // The quotient is one value over x's whole range: x//c -> q, x%c -> x - q*c.
  if (x->vmin() / c == x->vmax() / c) {
    int64_t q = x->vmin() / c;
    if (is_div) return const_of(dtype, q);
    return q == 0 ? x : x + const_of(dtype, -q * c);
  }
  if (x->vmin() < 0) return nullptr;
  std::optional<Sum> s = flatten(x);
  if (!s) return nullptr;
  // Split each coefficient a = q*c + r (0 <= r < c): x = c*Q + R. If R >= 0, then x//c = Q + R//c
  // and x%c = R%c, and R//c is 0 when R < c: (x*4+y)//4 -> x + y//4 -> x for y in [0, 4).
  Sum quotient, remainder;
  bool has_quotient = floor_div(s->constant, c) != 0;
  for (const auto& [t, a] : s->terms) {
    quotient.add_term(t, floor_div(a, c));
    remainder.add_term(t, floor_mod(a, c));
    has_quotient |= floor_div(a, c) != 0;
  }
  quotient.constant = floor_div(s->constant, c);
  remainder.constant = floor_mod(s->constant, c);
  UOpPtr r = remainder.build(dtype);
  if (r->vmin() >= 0) {
    if (is_div && has_quotient) return quotient.build(dtype) + UOp::make(Op::IDIV, dtype, {r, m["c"]});
    if (!is_div && r != x) return UOp::make(Op::MOD, dtype, {r, m["c"]});
  }
  // Split x = m*Y + B where m divides c and every coefficient of Y's terms, and B (the other terms and
  // the constant's remainder) stays in [0, m): x//c = Y//(c/m) and x%c = (Y%(c/m))*m + B. With every
  // term in Y this divides out the gcd; with the small terms in B it drops a flattened row's columns
  // from a division by whole rows: (k*1024 + h*32 + w)//4096 -> k//4 for h, w in [0, 32).
  std::vector<int64_t> factors;
  int64_t all = c;  // divides every coefficient
  for (const auto& [t, a] : s->terms) {
    all = std::gcd(all, a);
    int64_t m = std::gcd(c, a);
    if (m > 1 && std::find(factors.begin(), factors.end(), m) == factors.end()) factors.push_back(m);
  }
  if (all > 1 && std::find(factors.begin(), factors.end(), all) == factors.end()) factors.push_back(all);
  std::sort(factors.rbegin(), factors.rend());
  for (int64_t m : factors) {
    Sum scaled, small;
    for (const auto& [t, a] : s->terms) {
      if (a % m == 0) scaled.add_term(t, a / m);
      else small.add_term(t, a);
    }
    scaled.constant = floor_div(s->constant, m);
    small.constant = floor_mod(s->constant, m);
    UOpPtr b = small.build(dtype);
    if (b->vmin() < 0 || b->vmax() >= m) continue;
    UOpPtr y = scaled.build(dtype), cm = const_of(dtype, c / m);
    if (is_div) return UOp::make(Op::IDIV, dtype, {y, cm});
    return UOp::make(Op::MOD, dtype, {y, cm}) * m + b;
  }
  return nullptr;
}

// (x//a)//b -> x//(a*b) for a, b > 0 (holds for C's truncation, any sign of x).
UOpPtr fold_nested_div(const Match& m) {
  int64_t a = value(m["a"]), b = value(m["b"]), ab = 0;
  if (a <= 0 || b <= 0 || __builtin_mul_overflow(a, b, &ab) || ab > dtype_range(m.root->dtype).second) return nullptr;
  return UOp::make(Op::IDIV, m.root->dtype, {m["x"], konst(m.root, ab)});
}

// (x%a)%b -> x%b when b divides a (a, b > 0; any sign of x).
UOpPtr fold_nested_mod(const Match& m) {
  int64_t a = value(m["a"]), b = value(m["b"]);
  if (a <= 0 || b <= 0 || a % b != 0) return nullptr;
  return UOp::make(Op::MOD, m.root->dtype, {m["x"], m["b"]});
}

// --- comparisons --------------------------------------------------------------------------------

// (x+c) < d -> x < d-c, when x+c cannot wrap.
UOpPtr fold_lt_offset(const Match& m) {
  const UOpPtr& x = m["x"];
  int64_t c = value(m["c"]), d = value(m["d"]), lo = 0, hi = 0, dc = 0;
  auto [dmin, dmax] = dtype_range(x->dtype);
  if (__builtin_add_overflow(x->vmin(), c, &lo) || __builtin_add_overflow(x->vmax(), c, &hi) || lo < dmin || hi > dmax) return nullptr;
  if (__builtin_sub_overflow(d, c, &dc) || dc < dmin || dc > dmax) return nullptr;
  return lt(x, konst(x, dc));
}

// x*c < d -> x < ceil(d/c) for c > 0, when x*c cannot wrap.
UOpPtr fold_lt_scale(const Match& m) {
  const UOpPtr& x = m["x"];
  int64_t c = value(m["c"]), d = value(m["d"]), lo = 0, hi = 0;
  auto [dmin, dmax] = dtype_range(x->dtype);
  if (c <= 0 || d == INT64_MIN || __builtin_mul_overflow(x->vmin(), c, &lo) || __builtin_mul_overflow(x->vmax(), c, &hi) || lo < dmin || hi > dmax) return nullptr;
  return lt(x, konst(x, -floor_div(-d, c)));
}

// --- ordering -----------------------------------------------------------------------------------

// Commutative ops keep a constant on the right; integer ones order other sources by hash (ADD is
// ordered by canonicalize_sum instead).
UOpPtr order_sources(const Match& m) {
  const UOpPtr& u = m.root;
  if (u->src.size() != 2 || !is_commutative(u->op)) return nullptr;
  const UOpPtr &a = u->src[0], &b = u->src[1];
  bool swap = a->op == Op::CONST && b->op != Op::CONST;
  if (!swap && is_index(u->src[0]->dtype) && u->op != Op::ADD && a->op != Op::CONST && b->op != Op::CONST)
    swap = a->hash() > b->hash();
  return swap ? u->with_src({b, a}) : nullptr;
}

PatternMatcher make_pm_symbolic() {
  UPat x = UPat::var("x"), y = UPat::var("y"), c = UPat::cvar("c"), d = UPat::cvar("d");
  UPat ix = x.dtype_is(is_index), iy = y.dtype_is(is_index);
  UPat ints = UPat::var("x").dtype_is(is_any_int);
  auto keep = [](const char* name) { return [name](const Match& m) { return m[name]; }; };
  auto zero = [](const Match& m) { return konst(m.root, 0); };
  return PatternMatcher{
      // folding: all-constant ALU ops and single-valued integer nodes
      {UPat::ops(alu_and_cast_ops()), fold_constants},
      {UPat::ops(alu_and_cast_ops()), fold_single_value},
      // identities valid for every dtype, floats included (exact in IEEE arithmetic)
      {x * 1, keep("x")},                                                         // x*1 -> x
      {UPat::op(Op::FDIV, {x, UPat::cnst(1)}), keep("x")},                       // x/1 -> x
      {where(UPat::cvar("c"), x, y),                                              // where(c, x, y) -> x or y
       [](const Match& m) { return as_double(m["c"]->const_value()) != 0 ? m["x"] : m["y"]; }},
      {where(UPat::var("c"), x, x), keep("x")},                                   // where(c, x, x) -> x
      {cast(x), [](const Match& m) { return m["x"]->dtype == m.root->dtype ? m["x"] : nullptr; }},  // cast to own dtype
      // integer identities (two's complement arithmetic is a ring, so these hold under wrapping)
      {ints + 0, keep("x")},                                                       // x+0 -> x
      {ints * 0, zero},                                                            // x*0 -> 0
      {UPat::op(Op::SUB, {ints, y}), [](const Match& m) { return m["x"] + m["y"] * -1; }},  // x-y -> x+y*-1
      {UPat::op(Op::NEG, {ints}), [](const Match& m) { return m["x"] * -1; }},     // -x -> x*-1
      {ints / 1, keep("x")},                                                       // x//1 -> x
      {ints / -1, [](const Match& m) { return m["x"] * -1; }},                     // x//-1 -> -x
      {ints % 1, zero},                                                            // x%1 -> 0
      {ints % -1, zero},                                                           // x%-1 -> 0
      {ints / c, [](const Match& m) {                                              // x//c -> -(x//-c) for c < 0
         int64_t v = value(m["c"]);
         if (v >= 0 || v == INT64_MIN) return UOpPtr{};
         return UOp::make(Op::IDIV, m.root->dtype, {m["x"], konst(m.root, -v)}) * -1; }},
      {ints % c, [](const Match& m) {                                              // x%c -> x%-c for c < 0
         int64_t v = value(m["c"]);
         if (v >= 0 || v == INT64_MIN) return UOpPtr{};
         return UOp::make(Op::MOD, m.root->dtype, {m["x"], konst(m.root, -v)}); }},
      {UPat::op(Op::AND, {x.dtype_is(is_int_or_bool), x}), keep("x")},             // x&x -> x
      {UPat::op(Op::OR, {x.dtype_is(is_int_or_bool), x}), keep("x")},              // x|x -> x
      {UPat::op(Op::AND, {x.dtype_is(is_int_or_bool), UPat::cnst(0)}), zero},      // x&0 -> 0
      {UPat::op(Op::OR, {x.dtype_is(is_int_or_bool), UPat::cnst(0)}), keep("x")},  // x|0 -> x
      {UPat::op(Op::XOR, {x.dtype_is(is_int_or_bool), UPat::cnst(0)}), keep("x")}, // x^0 -> x
      {UPat::op(Op::AND, {x.dtype_is(is_bool), UPat::cnst(1)}), keep("x")},        // x&true -> x
      {UPat::op(Op::OR, {x.dtype_is(is_bool), UPat::cnst(1)}),                     // x|true -> true
       [](const Match&) { return const_bool(true); }},
      {UPat::op(Op::AND, {ints, UPat::cnst(-1)}), keep("x")},                      // x&-1 -> x
      {max(x.dtype_is(is_int_or_bool), x), keep("x")},                            // max(x,x) -> x
      {min(x.dtype_is(is_int_or_bool), x), keep("x")},                            // min(x,x) -> x
      {max(ix, iy), [](const Match& m) {                                           // max(x,y) -> x if x >= y always
         if (m["x"]->vmin() >= m["y"]->vmax()) return m["x"];
         return m["y"]->vmin() >= m["x"]->vmax() ? m["y"] : nullptr; }},
      {min(ix, iy), [](const Match& m) {                                           // min(x,y) -> x if x <= y always
         if (m["x"]->vmax() <= m["y"]->vmin()) return m["x"];
         return m["y"]->vmax() <= m["x"]->vmin() ? m["y"] : nullptr; }},
      {lt(x.dtype_is(is_any_int), x), [](const Match&) { return const_bool(false); }},  // x<x -> false
      {ne(x.dtype_is(is_int_or_bool), x), [](const Match&) { return const_bool(false); }},  // x!=x -> false
      {eq(x.dtype_is(is_int_or_bool), x), [](const Match&) { return const_bool(true); }},   // x==x -> true
      // canonical order and canonical sums
      {UPat::ops({Op::ADD, Op::MUL, Op::MAX, Op::MIN, Op::AND, Op::OR, Op::XOR, Op::CMPNE, Op::CMPEQ}), order_sources},
      {UPat::op(Op::ADD, {ix, iy}), canonicalize_sum},                            // flatten, merge like terms
      {UPat::op(Op::MUL, {UPat::op(Op::ADD).dtype_is(is_index), c}), canonicalize_sum},  // (x+y)*c -> x*c+y*c
      {(x * c).dtype_is(is_index) * d, [](const Match& m) {                       // (x*c)*d -> x*(c*d)
         uint64_t cd = static_cast<uint64_t>(value(m["c"])) * static_cast<uint64_t>(value(m["d"]));  // wraps like the ring
         return m["x"] * const_of(m.root->dtype, static_cast<int64_t>(cd)); }},
      // division and remainder by constants
      {ix / c, fold_divmod},
      {ix % c, fold_divmod},
      {(ix / UPat::cvar("a")) / UPat::cvar("b"), fold_nested_div},                // (x//a)//b -> x//(a*b)
      {(ix % UPat::cvar("a")) % UPat::cvar("b"), fold_nested_mod},                // (x%a)%b -> x%b if b | a
      // comparisons against constants
      {lt(ix + c, d), fold_lt_offset},                                             // (x+c)<d -> x<d-c
      {lt(ix * c, d), fold_lt_scale},                                              // x*c<d -> x<ceil(d/c)
  };
}

}  // namespace

const PatternMatcher& pm_symbolic() {
  static const PatternMatcher pm = make_pm_symbolic();
  return pm;
}

UOpPtr simplify(const UOpPtr& x) { return graph_rewrite(x, pm_symbolic()); }

std::optional<int64_t> index_stride(const UOpPtr& index, const UOpPtr& r) {
  // A step from x to x+1 inside the loop: x runs to end-2, so both ends are iterations r has (with r
  // itself, r+1 could reach end, and the index math that folds for r's values would not fold for it).
  UOpPtr x = var("step", 0, std::max<int64_t>(r->end()->vmax() - 2, 0), r->dtype);
  UOpPtr step = simplify(substitute(index, {{r.get(), x + const_int(1, r->dtype)}}) - substitute(index, {{r.get(), x}}));
  if (step->op != Op::CONST) return std::nullopt;
  return as_int64(step->const_value());
}

bool is_contiguous(const UOpPtr& index, const UOpPtr& r) { return index_stride(index, r) == 1; }

bool depends_on(const UOpPtr& u, const UOpPtr& r) {
  for (const UOpPtr& n : toposort(u))
    if (n == r) return true;
  return false;
}

}  // namespace kiln
