// One-line checks of the symbolic simplifier, one or more per rule of uop/symbolic.cpp.
//
// check(input, expected): simplify(input) must equal expected up to the canonical order of sums,
// i.e. equal simplify(expected), and expected must already be simplest (simplifying it may reorder
// terms but not shrink it). The property test in test_symbolic_fuzz.cpp checks values independently.
#include "helpers.h"
#include "uop/symbolic.h"

using namespace kiln;

namespace {

void check(const UOpPtr& input, const UOpPtr& expected) {
  UOpPtr got = simplify(input), want = simplify(expected);
  INFO("input:    " << str(input));
  INFO("got:      " << str(got));
  INFO("expected: " << str(expected));
  CHECK(got == want);
  CHECK(test::node_count(want) == test::node_count(expected));
}

UOpPtr c(int64_t v) { return const_int(v); }
const UOpPtr x = var("x", 0, 9), y = var("y", 0, 3), z = var("z", 0, 100), n = var("n", -10, 10);
const UOpPtr t = const_bool(true), f = const_bool(false);

}  // namespace

TEST_CASE("constant folding", "[symbolic]") {
  check(c(3) + c(4), c(7));
  check(c(3) * c(4) - c(20), c(-8));
  check(c(-7) / c(2), c(-3));  // C truncation
  check(c(-7) % c(2), c(-1));  // sign of the dividend
  check(c(7) % c(-2), c(1));
  check(lt(c(3), c(4)), t);
  check(max(c(3), c(-4)), c(3));
  check(cast(c(300), dtypes::uint8), const_int(44, dtypes::uint8));
  check(const_int(INT32_MAX) + c(1), c(INT32_MIN));  // int32 wraps
  check(c(1) / c(0), c(1) / c(0));                   // undefined: left alone
  check(const_of(dtypes::float32, 1.5) * const_of(dtypes::float32, 2.0), const_of(dtypes::float32, 3.0));
}

TEST_CASE("identities", "[symbolic]") {
  check(x + 0, x);
  check(x * 1, x);
  check(x * 0, c(0));
  check(x / 1, x);
  check(x / -1, x * -1);
  check(x % 1, c(0));
  check(x - x, c(0));
  check(-(-x), x);
  check(x + x, x * 2);
  check(x * 3 + x * -1, x * 2);
  check(x * 2 - x * 2 + y, y);
  check(where(t, x, y), x);
  check(where(f, x, y), y);
  check(where(lt(x, y), z, z), z);
  check(max(x, x), x);
  check(min(y, y), y);
  check(UOp::make(Op::CAST, dtypes::int32, {x}), x);
  check(alu(Op::AND, {lt(x, y), t}), lt(x, y));
  check(alu(Op::OR, {lt(x, y), t}), t);
  check(alu(Op::AND, {lt(x, y), f}), f);
  check(alu(Op::XOR, {x, c(0)}), x);
  check(alu(Op::OR, {x, c(0)}), x);
  check(alu(Op::AND, {x, c(-1)}), x);
}

TEST_CASE("float expressions keep IEEE semantics", "[symbolic]") {
  UOpPtr a = cast(x, dtypes::float32), zero = const_of(dtypes::float32, 0.0);
  check(a * const_of(dtypes::float32, 1.0), a);
  check(a / const_of(dtypes::float32, 1.0), a);
  check(a * zero, a * zero);  // NaN*0 and inf*0 are NaN: not folded
  check(a + zero, a + zero);  // -0+0 is +0: not folded
  check(ne(a, a), ne(a, a));  // NaN != NaN
}

TEST_CASE("canonical sums", "[symbolic]") {
  check((x + 3) + 4, x + 7);
  check(c(3) + x, x + 3);
  check((x + y) - x, y);
  check((x + 1) * 4, x * 4 + 4);
  check((x * 2) * 3, x * 6);
  check((x + y) + (y + x), x * 2 + y * 2);
  check(y + x, x + y);  // both orders canonicalize to the same node
  check((x / 4) * 4 + x % 4, x);
  check(((z / 8) * 8 + y) + z % 8, z + y);
  check((n / 3) * 6 + (n % 3) * 2, n * 2);  // holds for negative n too (C semantics)
  // A flattened index: (N, C, H, W) read as (N, C*H*W) splits k into k//(H*W), (k//W)%H and k%W.
  check((z / 12) * 12 + ((z / 3) % 4) * 3 + z % 3, z);
  check(((z / 3) % 4) * 6 + (z % 3) * 2, (z % 12) * 2);
  const UOpPtr w = var("w", -50, 50);
  check(((w / 3) % 4) * 3 + w % 3, w % 12);  // negative w too
}

TEST_CASE("division and remainder by constants", "[symbolic]") {
  check((x * 4 + y) / 4, x);
  check((x * 4 + y) % 4, y);
  check((y + x * 4) / 4, x);
  check(y / 4, c(0));
  check(y % 4, y);
  check(x % 10, x);
  check(x / 10, c(0));
  check((x * 8 + 5) / 4, x * 2 + 1);
  check((x * 8 + 5) % 4, c(1));
  check((x * 6 + y) / 3, x * 2 + y / 3);  // R = y may reach 3, so y//3 stays
  check((x * 4 + y * 2) / 2, x * 2 + y);
  check((x * 4 + 2) / 8, x / 2);  // common factor 2: (2x+1)//4 -> x//2
  check((x * 4 + 2) % 8, (x % 2) * 4 + 2);
  check((x * 6) % 4, (x % 2) * 2);
  check(x / -2, (x / 2) * -1);
  check(x % -4, x % 4);
  check((z + 4) / 4, z / 4 + 1);
  check(n / 20, c(0));  // quotient is 0 over [-10, 10] with truncation
  check((n + 10) / 4 * 4 + (n + 10) % 4, n + 10);
  // A flattened row's columns drop out of a division by whole rows: w*4 + y in [0, 16).
  const UOpPtr w = var("w", 0, 3);
  check((z * 16 + w * 4 + y) / 64, z / 4);
  check((z * 16 + w * 4 + y) % 64, (z % 4) * 16 + w * 4 + y);
  check((z * 16 + y) / 32, z / 2);
  check((z * 16 + x * 4 + y) / 32, (z * 4 + x) / 8);  // x*4 + y reaches 40 > 16: only y drops out
}

TEST_CASE("nested division and remainder", "[symbolic]") {
  check((z / 4) / 5, z / 20);
  check((n / 2) / 3, n / 6);  // truncation composes for any sign
  check((z % 12) % 4, z % 4);
  check((z % 12) % 5, (z % 12) % 5);  // 5 does not divide 12: left alone
  check(((x * 4 + y) / 2) / 2, x);
}

TEST_CASE("comparisons decided by ranges", "[symbolic]") {
  check(lt(x, c(10)), t);
  check(lt(x, c(0)), f);
  check(lt(x, c(5)), lt(x, c(5)));
  check(lt(x, x), f);
  check(lt(y, x + 4), t);
  check(ne(x, c(-1)), t);
  check(eq(x, c(20)), f);
  check(eq(x, x), t);
  check(ne(y, y), f);
  check(lt(x + 3, c(5)), lt(x, c(2)));
  check(lt(x * 4, c(10)), lt(x, c(3)));
  check(lt(x * 4, c(12)), lt(x, c(3)));
  check(max(x, y + 10), y + 10);
  check(min(x, y + 10), x);
  check(max(y, c(3)), c(3));
}

TEST_CASE("ranges of simplified index expressions", "[symbolic]") {
  UOpPtr r = range(0, c(16)), e = simplify((r * 4 + y) % 4);
  CHECK(e == y);
  UOpPtr q = simplify((r * 4 + y) / 4);
  CHECK(q == r);
  CHECK(q->vmin() == 0);
  CHECK(q->vmax() == 15);
  UOpPtr s = simplify(x * 3 - y);
  CHECK(s->vmin() == -3);
  CHECK(s->vmax() == 27);
}
