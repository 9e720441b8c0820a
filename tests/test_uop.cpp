// The UOp node: interning, hashing, toposort, value ranges and printing.
#include <map>
#include <thread>

#include "helpers.h"
#include "uop/hash.h"
#include "uop/range.h"

using namespace kiln;

TEST_CASE("ops.def generates names, groups and commutativity", "[uop]") {
  CHECK(op_name(Op::ADD) == "ADD");
  CHECK(op_name(Op::SINK) == "SINK");
  CHECK(is_binary(Op::IDIV));
  CHECK(is_unary(Op::EXP2));
  CHECK(is_ternary(Op::WHERE));
  CHECK(is_movement(Op::PERMUTE));
  CHECK(is_commutative(Op::MUL));
  CHECK_FALSE(is_commutative(Op::SUB));
  CHECK_FALSE(is_alu(Op::LOAD));
  int names = 0;
  for (int i = 0; i < kNumOps; ++i) names += !op_name(static_cast<Op>(i)).empty();
  CHECK(names == kNumOps);
}

TEST_CASE("structurally equal nodes are the same object", "[uop]") {
  UOpPtr x = var("x", 0, 9);
  UOpPtr a = x * 4 + 1, b = x * 4 + 1;
  CHECK(a == b);
  CHECK(a->hash() == b->hash());
  CHECK(x * 4 + 2 != a);
  CHECK(const_int(1, dtypes::int32) != const_int(1, dtypes::int64));  // dtype is part of identity
  CHECK(const_of(dtypes::float32, std::nan("")) == const_of(dtypes::float32, std::nan("")));  // by bits
  CHECK(const_of(dtypes::float32, 0.0) != const_of(dtypes::float32, -0.0));
  CHECK(UOp::make(Op::RESHAPE, dtypes::float32, {x}, std::vector<int64_t>{2, 3}) ==
        UOp::make(Op::RESHAPE, dtypes::float32, {x}, std::vector<int64_t>{2, 3}));
}

TEST_CASE("hashes are structural and do not depend on addresses", "[uop]") {
  uint64_t first = 0;
  {
    UOpPtr e = var("q", 0, 5) * 3 + 7;
    first = e->hash();
  }
  // The nodes above are gone; building them again gives a new object with the same hash.
  UOpPtr again = var("q", 0, 5) * 3 + 7;
  CHECK(again->hash() == first);
  CHECK((var("q", 0, 5) * 3 + 8)->hash() != first);
}

TEST_CASE("dead nodes leave the interning table", "[uop]") {
  size_t before = live_uop_count();
  {
    UOpPtr e = var("tmp_var_for_count", 0, 5) * 12345 + 67890;
    CHECK(live_uop_count() >= before + 5);
  }
  CHECK(live_uop_count() == before);
}

TEST_CASE("the interning table keeps finding nodes while many others come and go", "[uop]") {
  // Enough nodes to grow the table several times, freed in an interleaved order, so that entries
  // move when their neighbours leave: each survivor must still be the node an equal make() returns.
  size_t before = live_uop_count();
  std::vector<UOpPtr> nodes;
  for (int64_t i = 0; i < 20000; ++i) nodes.push_back(const_int(i, dtypes::uint16));
  for (size_t i = 0; i < nodes.size(); i += 3) nodes[i] = nullptr;
  for (size_t i = 1; i < nodes.size(); i += 3) nodes[i] = nullptr;
  CHECK(live_uop_count() == before + nodes.size() / 3);
  for (size_t i = 2; i < nodes.size(); i += 3) REQUIRE(const_int(static_cast<int64_t>(i), dtypes::uint16) == nodes[i]);
  nodes.clear();
  CHECK(live_uop_count() == before);
}

TEST_CASE("freeing a long chain of nodes does not recurse per node", "[uop]") {
  size_t before = live_uop_count();
  {
    UOpPtr x = var("chain_x", 0, 9);
    for (int i = 0; i < 200000; ++i) x = x + 1;  // freed when x goes out of scope
  }
  CHECK(live_uop_count() == before);
}

TEST_CASE("interning is thread-safe: equal nodes built on many threads are one object", "[uop][threads]") {
  constexpr int kThreads = 8, kNodes = 400;
  std::vector<std::vector<UOpPtr>> built(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread builds the same expressions, and also creates and drops garbage, so inserts and
      // deletions race with lookups.
      for (int i = 0; i < kNodes; ++i) {
        UOpPtr v = var(cat("v", i % 17), 0, 100);
        built[t].push_back((v * (i + 1) + i) / 3);
        UOpPtr garbage = v * (1000 + t) + i;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 1; t < kThreads; ++t)
    for (int i = 0; i < kNodes; ++i) REQUIRE(built[t][i] == built[0][i]);
}

TEST_CASE("toposort lists each node once, sources first", "[uop]") {
  UOpPtr x = var("x", 0, 9), y = var("y", 0, 9);
  UOpPtr shared = x * y;
  UOpPtr root = shared + shared * 2;
  std::vector<UOpPtr> order = toposort(root);
  CHECK(order.back() == root);
  CHECK(order.size() == 6);  // x, y, x*y, 2, (x*y)*2, root
  std::map<const UOp*, size_t> pos;
  for (size_t i = 0; i < order.size(); ++i) pos[order[i].get()] = i;
  CHECK(pos.size() == order.size());
  for (const UOpPtr& u : order)
    for (const UOpPtr& s : u->src) CHECK(pos.at(s.get()) < pos.at(u.get()));
}

TEST_CASE("toposort can leave out what a memo already knows, and only that", "[uop]") {
  UOpPtr x = var("x", 0, 9), y = var("y", 0, 9);
  UOpPtr shared = x * y;
  UOpPtr root = shared + shared * 2;
  // x*y known: neither it nor x and y (beneath it only) are walked; 2 and the rest are, sources first.
  std::vector<UOpPtr> order = toposort(root, [&](const UOp* u) { return u == shared.get(); });
  CHECK(order.size() == 3);  // 2, (x*y)*2, root
  CHECK(order.back() == root);
  for (const UOpPtr& u : order) CHECK(u != shared);
  // y also under a new node: then it is walked.
  UOpPtr other = root + y;
  CHECK(toposort(other, [&](const UOp* u) { return u == root.get(); }).size() == 2);  // y, root + y
  CHECK(toposort(root, [&](const UOp* u) { return u == root.get(); }).empty());
  CHECK(toposort(root, [](const UOp*) { return false; }).size() == toposort(root).size());
}

TEST_CASE("toposort handles graphs deeper than the call stack would", "[uop]") {
  UOpPtr e = var("x", 0, 1);
  for (int i = 0; i < 100000; ++i) e = UOp::make(Op::NEG, e->dtype, {e});
  CHECK(toposort(e).size() == 100001);
}

TEST_CASE("value ranges", "[uop][range]") {
  UOpPtr x = var("x", 0, 9), n = var("n", -5, 3), d = var("d", 2, 4);
  auto range_of = [](const UOpPtr& u) { return std::make_pair(u->vmin(), u->vmax()); };
  using P = std::pair<int64_t, int64_t>;
  CHECK(range_of(x + n) == P{-5, 12});
  CHECK(range_of(x - n) == P{-3, 14});
  CHECK(range_of(x * n) == P{-45, 27});
  CHECK(range_of(-n) == P{-3, 5});
  CHECK(range_of(x / 4) == P{0, 2});
  CHECK(range_of(n / 2) == P{-2, 1});  // truncation
  CHECK(range_of(x / d) == P{0, 4});
  CHECK(range_of(x % 4) == P{0, 3});
  CHECK(range_of(x % 20) == P{0, 9});
  CHECK(range_of(n % 4) == P{-3, 3});
  CHECK(range_of(n % d) == P{-3, 3});
  CHECK(range_of(max(x, n)) == P{0, 9});
  CHECK(range_of(min(x, n)) == P{-5, 3});
  CHECK(range_of(lt(x, const_int(10))) == P{1, 1});
  CHECK(range_of(lt(x, const_int(0))) == P{0, 0});
  CHECK(range_of(lt(x, n)) == P{0, 1});
  CHECK(range_of(range(0, const_int(16))) == P{0, 15});
  CHECK(range_of(where(lt(x, n), x, n)) == P{-5, 9});
  CHECK(range_of(cast(n, dtypes::uint8)) == P{0, 255});  // may wrap: the whole uint8 range
  CHECK(range_of(cast(x, dtypes::int8)) == P{0, 9});
  // int32 arithmetic that may overflow wraps, so nothing is known
  UOpPtr big = var("big", 0, INT32_MAX);
  CHECK(range_of(big + 1) == P{INT32_MIN, INT32_MAX});
  CHECK(range_of(var("w", -1, 1) * const_int(INT32_MIN)) == P{INT32_MIN, INT32_MAX});
  // floats carry no range
  CHECK(range_of(cast(x, dtypes::float32)) == P{INT64_MIN, INT64_MAX});
  CHECK_FALSE(has_exact_range(dtypes::uint64));
}

TEST_CASE("printing", "[uop][print]") {
  UOpPtr x = var("x", 0, 9), y = var("y", 0, 3);
  CHECK(str((x * 4 + y) / 4) == "(((x*4)+y)//4)");
  CHECK(str(where(lt(x, y), x, y)) == "where((x<y), x, y)");
  CHECK(str(cast(x, dtypes::float32)) == "cast(float32, x)");
  CHECK(str(const_bool(true)) == "true");
  std::string listing = print_graph(x + 1);
  CHECK(listing.find("DEFINE_VAR int32 [] x[0..9]") != std::string::npos);
  CHECK(listing.find("ADD int32 [0, 1]") != std::string::npos);
}

TEST_CASE("bad construction is reported", "[uop][errors]") {
  UOpPtr x = var("x", 0, 9);
  CHECK_THROWS_AS(var("bad", 5, 1), Error);
  CHECK_THROWS_WITH(x + cast(x, dtypes::float32),
                    Catch::Contains("ADD") && Catch::Contains("int32") && Catch::Contains("float32"));
  CHECK_THROWS_AS(x->end(), InternalError);  // end() is for RANGE nodes
}
