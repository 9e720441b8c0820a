// [search] The engine on memory-bound kernels and the paired timings that decide a winner, in the made-up
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

// One paired timing is the fastest of calls filling paired_batch_s: a candidate twice as fast as the
// default whose every other launch meets a slow moment (a second core busy for a while) is the faster in
// every round then, and the winner; timed one launch per round it is the faster in half of them, not
// consistently, and the default stays.
TEST_CASE("search: a paired timing is the fastest of calls filling paired_batch_s", "[search]") {
  for (double batch : {0.0, 4e-3}) {
    CAPTURE(batch);
    FakeWorld w;
    w.default_opts = {up(0, 2)};
    w.times = {{"UPCAST(0,2)", 1e-3}, {"", 1e-3}};
    SearchHooks h = w.hooks();
    std::map<std::string, int> calls;
    auto fake = h.time;
    h.time = [&](const Built& b) {
      const std::string& text = *static_cast<std::string*>(b.artifact.get());
      if (text != "UPCAST(0,2) UNROLL(1,4)") return fake(b);
      return calls[text]++ % 2 ? 2.2e-3 : 0.5e-3;
    };
    SearchOptions o = options();
    o.paired_batch_s = batch;
    o.launch_limit_s = 1;
    SearchResult r = beam_search(h, o);
    CHECK(r.improved == (batch > 0));
    CHECK(to_string(r.opts) == (batch > 0 ? "UPCAST(0,2) UNROLL(1,4)" : "UPCAST(0,2)"));
  }
}
