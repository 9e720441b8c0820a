// BEAM search: which opts (lower/opts.h) make one kernel fastest on one device, by trying them.
//
//   SearchResult r = search_kernel(get_device("CPU"), item.ast, kernel_buffers(item.bufs), {.beam = 4});
//   LoweredKernel k = *lower_with_opts(item.ast, spec, r.opts).kernel;   // r.opts: the checked winner
//
//   SearchHooks hooks = ...;            // the engine alone, with injected pieces: tests use a fake timer
//   SearchResult r = beam_search(hooks, options);
//
// The engine (beam_search) starts from the default opts, the bare kernel (when the default is fast:
// bare_seed_max_s) and any seeds, and keeps the
// `beam` fastest opt lists. Each round it extends every kept list by
// each single action (action_space), builds the new candidates in parallel on the thread pool, drops
// those whose source is identical to one already seen, times the rest one after another (the minimum of
// `timing_runs` launches, stopping early once a candidate is clearly slower than the best), and keeps the
// `beam` fastest (of those within `early_stop` of the best: one whose timing stopped early is not
// extended). A kernel whose default runs in under `min_default_s` is not searched (too_small). It
// stops when a round improves the best time by less than `min_improvement`, after
// `max_rounds`, or when no new candidate appears. A candidate whose build fails (a compile error) or
// whose launch fails is disqualified and search goes on; so is one whose compile or launch took longer
// than its limit (measured when it ends: a compiler process or a CPU kernel is not interrupted).
// The few fastest that beat the default are then timed again beside it, round-robin (confirm_runs), and
// each is judged by the median over rounds of its time over the default's in the same round (paired, so
// the machine's drift between minutes cancels); of the fastest and its ties (within min_gain of it, and
// the faster in a round at least), fewer opts win, and the
// one picked must beat the default by min_gain again in fresh rounds (a memory-bound kernel: min_gain_memory
// in place of min_gain for the bar and the contenders' ties, and every list within it of the fastest is a
// tie). Then it is simplified: the simplest
// of its one-step-simpler lists (one opt dropped, one tile amount halved, a neighbour earlier in the tie
// order: hooks.neighbours) that runs within min_gain of (memory-bound too)
// the fastest list the walk has held, side by side, faster in one round at least, and (unless faster
// than that list) beats the default again takes its place, step by step (a step 15% behind after three
// rounds, or a contender slower than the default, is timed no more), so a plateau of near-equal
// kernels ends at the same simple list whichever end of it the beam reached. Lists that lower to one
// source are one candidate, named by the simplest of them (fewer opts, then a smaller tile, then text).
// Before the winner is accepted, its output is compared with the plain kernel's (no opts; search_kernel
// uses the default kernel past 2^26 loop iterations) on the same random inputs (search/verify.h, as `kiln cache verify` does); a winner that does not match is rejected
// and the next fastest is checked.
//
// search_kernel is the engine on a real device: lower_with_opts + Device::compile + load to build, timed
// launches on scratch buffers (never the caller's data) to time. A kernel whose default launch is long is
// timed on a shrunken launch (a fraction of global[0], the time scaled back up); the pick's retest and the
// reported times are full launches.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "devices/device.h"
#include "lower/opts.h"
#include "uop/uop.h"

namespace kiln {

struct SearchOptions {
  int beam = 4;                   // opt lists kept per round, >= 1
  double min_improvement = 0.01;  // a round that improves the best by less than this fraction ends search
  // A winner must be this much faster than the default, else the default stays: timings of one kernel
  // vary by a few percent from run to run, and a "win" inside that made each fresh search pick another
  // list (a memory-bound elementwise kernel: four runs, three winners). Lists within it of each other are
  // ties, kept and picked fewer opts first. 5%: with 3%, five fresh searches of softmax 2048x2048 picked
  // five lists for its max kernel and two each for its sum and exp kernels; with 5% (and six contenders
  // confirmed), the sum and exp kernels kept one list in five; the max kernel still four (each 8 rows with
  // 4 or 8 reduce steps unrolled, spelled differently: near-equal kernels the noise still orders).
  double min_gain = 0.05;
  // min_gain for a memory-bound kernel (SearchHooks::memory_bound): a copy, an elementwise map, a row
  // reduce run at the memory's speed, which drifts here by up to 40% between minutes, and which of two
  // near-equal tilings of one is faster changed with it: paired rounds inside one search agreed, and fresh
  // searches minutes apart did not (five fresh searches of relu(a*b+c) over 16M floats, whose default runs
  // at the triad loop's bandwidth, kept it once and crowned four lists 2-6% faster in their own minutes;
  // softmax's row max won unrolled 4, 4x2, 8 or not at all, up to 8% apart; a transposing copy's 8x8 and
  // 16x8 tiles swapped). With 15%, each of these kept one list in five fresh searches.
  double min_gain_memory = 0.15;
  int max_rounds = 10;            // rounds of expansion after the starting candidates
  int timing_runs = 3;            // a candidate's time is the minimum of this many timings
  // search_kernel: one timing is the fastest of back-to-back launches filling this long (at most 256).
  // A single launch of a 6 us conv varied by 10-20% (waking the second thread); over 1 ms, by 2-3%.
  double time_batch_s = 1e-3;
  double early_stop = 1.5;        // stop timing a candidate once its best run is this many times the best's
  double compile_limit_s = 20;    // a build (lower + compile + load) that took longer is disqualified
  double launch_limit_s = 2;      // a launch longer than this and than the default's is disqualified
  // search_kernel: default launches longer than this are timed shrunken (to about half of it). At 20 ms a
  // 1024^3 matmul (10 ms) was timed whole: 1.7 s of its 2.4 s search went to launches (15.7 candidates
  // per second); at 5 ms, 0.5 s of 1.3 s (33.5 per second), the same winner at the same full-launch speed.
  double shrink_above_s = 0.005;
  int max_checks = 6;             // winners checked against the default before search settles for it
  // Lists faster than the default in search that are timed again beside it (confirm_runs): the ties among
  // the fastest simplest first, so a plateau's simplest list is among them.
  int max_contenders = 6;
  // A kernel whose default launch is faster keeps the default opts: search could save less than this per
  // launch, for seconds of compiling. 10 us: at 50, a 4x16x16x16 3x3 conv (31-35 us, 50 in a slow minute)
  // was searched in one fresh run of five, and that search made it 2.3x faster.
  double min_default_s = 10e-6;
  // BEAM starts from the bare kernel (no opts) too only when the default launch is faster than this: the
  // bare kernel runs scalar on one core, hundreds of times slower than the default (the 1024^3 matmul's
  // took 4.4 s of a 5.5 s search, and was disqualified), and the default's neighbours reach the rest.
  double bare_seed_max_s = 2e-3;
  // The contenders (the max_checks fastest that beat the default) are timed again this many rounds beside the
  // default, round-robin, before the winner is picked; within min_gain of the fastest, fewer opts win
  // (beam_search's settle). 0: the search's own timings decide. 15: with 5, an equal kernel was the faster
  // in 4 of 5 rounds by chance one time in five, and a conv whose default runs at 78% of the FMA peak won
  // with a list 2-5% faster (0.98-1.06 in the table) in three fresh searches of five; with 15 (12 of 15
  // by chance: 2%), the default in nine of ten. The rounds are cheap: the 7 ms conv's took 0.4 s.
  int confirm_runs = 15;
  bool check = true;              // compare the winner's output with the default's (off only in tests)
  // No candidate finished building or timing for this long: the search is stalled (a hang in a compiler,
  // a kernel or kiln), and SearchHooks::on_stall reports what was in flight. 0: never.
  double stall_limit_s = 300;
  // > 0: no beam. Every opt list of up to this many actions is built and timed (the bare kernel extended
  // one action at a time, each distinct kernel extended again; lists that make a kernel already seen are
  // timed once and not extended), beside the default: the best any beam could find within that depth,
  // for judging BEAM (`kiln search --exhaustive`). beam, min_improvement and max_rounds are unused. 1..4.
  int exhaustive_depth = 0;

  // What changes the answer, as text for the tuning-cache key ("beam=4 ...").
  std::string params() const;
};

// A built candidate: its source (identical source = the same candidate) and whatever time() and check()
// need (for search_kernel, the loaded program), opaque to the engine.
struct Built {
  std::string source;
  std::shared_ptr<void> artifact;
};

// build()'s answer: a built candidate, or `rejected` saying why the opts do not apply (not a candidate,
// not a failure). A failure (a compile error) is thrown.
struct BuildResult {
  std::optional<Built> built;
  std::string rejected;
};

struct SearchProgress {
  int round = 0;             // 0: the starting candidates
  int compiled = 0, timed = 0, failed = 0, duplicates = 0;
  double elapsed_s = 0;
  double best_seconds = 0;   // 0 until a candidate has been timed
  std::vector<Opt> best_opts;
  double candidates_per_s() const { return elapsed_s > 0 ? compiled / elapsed_s : 0; }
};

// The engine's view of the world. build may be called from several threads at once; the others are
// called from the thread running beam_search.
struct SearchHooks {
  std::vector<Opt> default_opts;  // the kernel without search (heuristics): the baseline to beat
  // More starting lists, tried in round 0 beside the default and the bare kernel (search_kernel: the
  // default's neighbours, opt_neighbours in search/actions.h); the fastest `beam` of all of them go on.
  std::vector<std::vector<Opt>> seeds;
  std::function<std::vector<Opt>(std::span<const Opt> applied)> actions;
  // A Built without an artifact: a source this search built before (a duplicate, not timed). The engine
  // drops duplicates by source anyway; this lets build skip compiling them.
  std::function<BuildResult(std::span<const Opt> opts)> build;
  std::function<double(const Built& built)> time;  // one launch, in seconds; throws when the launch fails
  // Optional: one launch of the whole kernel, when `time` launches a part of it (search_kernel's shrunken
  // launches). The pick's retest against the default then times whole launches, paired round by round:
  // a part's smaller working set misjudges a memory-bound kernel, and the whole launches' minimums,
  // compared unpaired, let the machine's drift between minutes pick a list.
  std::function<double(const Built& built)> time_whole;
  // Optional: the source a list lowers to, without compiling (nullopt: the opts do not apply). The
  // winner is then named by the simplest list of the same source among its reorderings and merges
  // (UPCAST(0,4) UNROLL(1,8) UPCAST(0,2) is UPCAST(0,8) UNROLL(1,8)), not by whichever spelling this
  // search happened to meet: fresh searches of one kernel reported the same kernel under three names.
  std::function<std::optional<std::string>(std::span<const Opt> opts)> source;
  // Optional: the lists one step from a list that appending actions cannot reach (search_kernel:
  // opt_neighbours: a THREAD or an UPCAST moved to another axis, among others). Simplification also steps
  // to those of them simpler than the pick in the order ties are broken by (the same opts with one moved
  // to a lower axis, say): a plateau of equal kernels is reached by many paths, and fresh searches of a
  // conv picked THREAD(0,0) or THREAD(1,0) beside the same tile, by the path the beam took.
  std::function<std::vector<std::vector<Opt>>(std::span<const Opt> opts)> neighbours;
  // nullopt when the candidate's output matches the plain kernel's on the same inputs, else what differs.
  std::function<std::optional<std::string>(const Built& candidate)> check;
  std::function<void(const SearchProgress&)> progress;  // optional: after each candidate is timed
  std::string kernel;  // the kernel's name, for messages
  // The kernel is memory-bound: a winner must beat the default by min_gain_memory, and ties are within it
  // (search_kernel: fewer than kMemoryBoundIntensity flops per byte of its buffers, kernel_intensity).
  bool memory_bound = false;
  // Called once, from a watchdog thread, when the search stalls (SearchOptions::stall_limit_s), with a
  // message naming the kernel and the candidates in flight. Unset: the message goes to stderr and the
  // process aborts, since a stuck thread cannot be made to return (and a core dump shows where it is).
  std::function<void(const std::string& message)> on_stall;
};

struct SearchResult {
  std::vector<Opt> opts;        // the winner (default_opts when nothing faster passed the check)
  bool improved = false;        // opts differ from the default's and were faster
  double default_seconds = 0;   // the default kernel's time (minimum of the runs)
  double best_seconds = 0;      // the winner's time
  int rounds = 0;
  bool too_small = false;       // the default was under min_default_s: not searched
  int candidates = 0;           // opt lists tried (built or rejected)
  int rejected = 0;             // opts that do not apply
  int compiled = 0, duplicates = 0, timed = 0, failed = 0, mismatched = 0;
  std::vector<std::string> failures;  // the first few failures and mismatches, each naming the opts
  // Where the wall time went: building (lowering + compiling + loading, in parallel), timing (launches
  // and the work between them; kernel_s of it inside the kernels, as launched: shrunken launches count
  // their own time, not the scaled-up figure), checking outputs.
  double wall_s = 0, build_s = 0, timing_s = 0, kernel_s = 0, check_s = 0;
  double lower_cpu_s = 0, compile_cpu_s = 0;  // summed over threads, when the hooks report them
};

SearchResult beam_search(const SearchHooks& hooks, const SearchOptions& options);

// --- on a device ----------------------------------------------------------------------------------

// One buffer a kernel takes, in DEFINE_GLOBAL slot order (ScheduleItem::bufs).
struct KernelBuffer {
  int64_t size = 0;  // elements
  DType dtype;
};
std::vector<KernelBuffer> kernel_buffers(std::span<const UOpPtr> buffers);  // from BUFFER nodes

SearchResult search_kernel(Device& device, const UOpPtr& ast, std::span<const KernelBuffer> buffers,
                           const SearchOptions& options, const std::function<void(const SearchProgress&)>& progress = {});

// The minimum of `runs` timed launches (after one untimed) of a lowered kernel, on scratch buffers with
// random contents: how `kiln search` measures the default and the tuned kernel side by side.
double time_kernel(Device& device, const LoweredKernel& kernel, std::span<const KernelBuffer> buffers, int runs);

// Floating-point operations one run of the kernel does: each float ALU op once per iteration of the
// loops it depends on (an estimate: ops the lowering folds or duplicates are not seen).
double kernel_flops(const UOpPtr& ast);

// Flops per byte of the kernel's buffers (kernel_flops over their sizes): each buffer moved once, as a
// roofline counts it. Under kMemoryBoundIntensity the kernel waits on memory on any machine kiln targets
// (their balance is 5-20 flops per byte: 200 GFLOP/s over 30 GB/s here, an H100's 60 TFLOP/s over 3 TB/s),
// and search treats it as memory-bound (SearchHooks::memory_bound).
double kernel_intensity(const UOpPtr& ast, std::span<const KernelBuffer> buffers);
constexpr double kMemoryBoundIntensity = 2.0;

}  // namespace kiln
