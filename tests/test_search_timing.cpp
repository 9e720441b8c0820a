// [search] The engine on memory-bound kernels and the paired rounds that decide a winner, in the made-up
// world of search_world.h.
#include <catch2/catch.hpp>

#include "search/beam.h"
#include "search_world.h"

using namespace kiln;
using namespace kiln::test;

// A memory-bound kernel's near-equal tilings swap places with the machine's state between minutes: a
// winner there must be min_gain_memory faster, and only there.
TEST_CASE("search: a memory-bound kernel needs min_gain_memory to replace its default", "[search]") {
  const SearchOptions o = options();
  REQUIRE(o.min_gain_memory > o.min_gain);
  const double between = 1 - 0.5 * (o.min_gain + o.min_gain_memory);  // 0.90: enough for min_gain only
  for (bool memory_bound : {false, true})
    for (double fastest : {between, 1 - o.min_gain_memory - 0.01}) {
      FakeWorld w;
      w.default_opts = {up(0, 2)};
      w.times = {{"UPCAST(0,2)", 1.0}, {"", 1.0}, {"UPCAST(0,2) UNROLL(1,4)", fastest}};
      SearchHooks h = w.hooks();
      h.memory_bound = memory_bound;
      SearchResult r = beam_search(h, o);
      INFO("memory-bound " << memory_bound << ", fastest " << fastest << ": " << to_string(r.opts));
      bool wins = fastest < 1 - (memory_bound ? o.min_gain_memory : o.min_gain);
      CHECK(r.improved == wins);
      CHECK(to_string(r.opts) == (wins ? "UPCAST(0,2) UNROLL(1,4)" : "UPCAST(0,2)"));
    }
}

// Ties are within the same wider band: a memory-bound kernel's fastest and a simpler list 10% behind it
// (both well past the default) are ties, and the simpler one wins; a compute-bound kernel keeps the fastest.
TEST_CASE("search: a memory-bound kernel's ties are within min_gain_memory", "[search]") {
  for (bool memory_bound : {false, true}) {
    FakeWorld w;
    w.default_opts = {up(0, 2)};
    w.times = {{"UPCAST(0,2)", 2.0}, {"", 2.0}, {"UPCAST(0,2) UNROLL(1,4)", 1.1}, {"UPCAST(0,2) UNROLL(1,4) UPCAST(0,4)", 1.0}};
    SearchHooks h = w.hooks();
    h.memory_bound = memory_bound;
    SearchResult r = beam_search(h, options());
    INFO("memory-bound " << memory_bound << ": " << to_string(r.opts));
    CHECK(r.improved);
    CHECK(to_string(r.opts) == (memory_bound ? "UPCAST(0,2) UNROLL(1,4)" : "UPCAST(0,2) UNROLL(1,4) UPCAST(0,4)"));
  }
}

// Simplification steps are ties within min_gain on a memory-bound kernel too: its bar is wider, and steps
// judged within that bar walked down a slope of tilings, each a little slower, to the first list that
// failed the bar in its own minute. A step 8% behind the pick (0.54 of the default) is not taken; one
// 3% behind, the faster in one round, is.
TEST_CASE("search: a memory-bound kernel's simplification steps are ties within min_gain", "[search]") {
  for (bool memory_bound : {false, true})
    for (double step : {5.15, 5.4}) {
      CAPTURE(memory_bound, step);
      FakeWorld w;
      w.actions = {up(0, 4), un(1, 4)};
      w.times = {{"", 10.0}, {"UPCAST(0,4)", 7.0}, {"UNROLL(1,4)", 9.0}, {"UPCAST(0,4) UNROLL(1,4)", 5.0}};
      w.sequence = {{"UPCAST(0,4) UNROLL(1,2)", {step, 4.9, step}}};
      SearchHooks h = w.hooks();
      h.memory_bound = memory_bound;
      SearchResult r = beam_search(h, options());
      CHECK(r.improved);
      CHECK(to_string(r.opts) == (step < 5.25 ? "UPCAST(0,4) UNROLL(1,2)" : "UPCAST(0,4) UNROLL(1,4)"));
    }
}

// Most of a pick's simpler neighbours are far behind it (an upcast on a slow axis, a thread dropped): after
// three rounds side by side, a step more than three tie bands (15%) behind is timed no more, and one
// nearer is timed every round, and taken when it is a tie.
TEST_CASE("search: a simplification step far behind the pick is timed three rounds and no more", "[search]") {
  for (double step : {5.5, 6.5, 5.1}) {
    CAPTURE(step);
    FakeWorld w;
    w.actions = {up(0, 4), un(1, 4)};
    w.times = {{"", 10.0}, {"UPCAST(0,4)", 9.0}, {"UNROLL(1,4)", 9.0}, {"UPCAST(0,4) UNROLL(1,4)", 5.0}};
    w.sequence = {{"UPCAST(0,4) UNROLL(1,2)", {step, 4.9, step}}};
    SearchOptions o = options();
    o.confirm_runs = 15;
    SearchResult r = beam_search(w.hooks(), o);
    // Beside the pick; a tie then 15 rounds more beside the default (its retest).
    CHECK(w.launches["UPCAST(0,4) UNROLL(1,2)"] == (step > 5.75 ? 3 : step < 5.25 ? 15 + 15 : 15));
    CHECK(to_string(r.opts) == (step < 5.25 ? "UPCAST(0,4) UNROLL(1,2)" : "UPCAST(0,4) UNROLL(1,4)"));
  }
}

// A contender slower than the default after three rounds of confirmation cannot win nor be the fastest's
// tie: it is timed no more.
TEST_CASE("search: a contender slower than the default side by side is timed three rounds of confirmation", "[search]") {
  FakeWorld w;
  w.actions = {up(0, 4), un(1, 4)};
  w.times = {{"", 8.0}, {"UPCAST(0,4)", 4.0}};
  w.sequence = {{"UNROLL(1,4)", {2.0, 2.0, 2.0, 9.0}}};  // fast while searched, slower than the default after
  SearchOptions o = options();
  o.confirm_runs = 15;
  SearchResult r = beam_search(w.hooks(), o);
  CHECK(to_string(r.opts) == "UPCAST(0,4)");
  CHECK(w.launches["UNROLL(1,4)"] == 3 + 3);
}
