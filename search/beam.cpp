// The BEAM search engine (beam.h). It sees the world only through SearchHooks, so tests drive it with a
// deterministic timer and made-up failures; search_kernel.cpp gives it a real device.
#include "search/beam.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstdio>
#include <list>
#include <mutex>
#include <thread>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "uop/hash.h"
#include "uop/thread_pool.h"

namespace kiln {

std::string SearchOptions::params() const {
  // Only what changes which opts win; limits and the progress callback do not.
  // An exhaustive search has no beam, threshold or rounds: its key leaves them out.
  std::string how = exhaustive_depth > 0 ? cat("exhaustive=", exhaustive_depth)
                                         : cat("beam=", beam, " min_improvement=", min_improvement, " rounds=", max_rounds,
                                               " bare_seed_max_us=", bare_seed_max_s * 1e6);
  return cat(how, " runs=", timing_runs, " batch_us=", time_batch_s * 1e6, " check=", check ? 1 : 0, " min_default_us=", min_default_s * 1e6, " min_gain=", min_gain, " min_gain_memory=", min_gain_memory, " confirm=", confirm_runs);
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

constexpr size_t kMaxFailuresKept = 8;
constexpr int kMaxExhaustiveDepth = 4;
constexpr size_t kMaxSpellings = 256;  // lists canonical() lowers, at most
// Side by side, lists within this fraction of min_gain of each other are ties even when one was the faster
// in every round: a difference that small (1% at the default 5%) is not worth an opt.
constexpr double kAlwaysTie = 0.2;
// Simplification's steps more than kStepCut times its tie band behind the list they are timed beside after
// kCutRounds rounds are not timed on: most of a pick's neighbours (an upcast moved to a slow axis, a
// thread dropped) are 30-100% behind, and were timed every round of every step of the walk.
constexpr double kStepCut = 3;
constexpr int kCutRounds = 3;

// Watches a search for a stall: the candidates being built, timed or checked, and when the last of them
// finished. After limit_s with none finished, it calls on_stall once, from its own thread.
class Watchdog {
 public:
  Watchdog(double limit_s, std::string kernel, std::function<void(const std::string&)> on_stall)
      : limit_s_(limit_s), kernel_(std::move(kernel)), on_stall_(std::move(on_stall)) {
    if (limit_s_ > 0) thread_ = std::thread([this] { watch(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // `what` ("timing [opts]") is in flight while the returned guard lives.
  class Guard {
   public:
    Guard(Watchdog& w, std::list<std::string>::iterator it) : w_(w), it_(it) {}
    ~Guard() { w_.finished(it_); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    Watchdog& w_;
    std::list<std::string>::iterator it_;
  };
  Guard watch(std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_flight_.empty()) last_ = Clock::now();  // idle time between candidates is not a stall
    return Guard(*this, in_flight_.insert(in_flight_.end(), std::move(what)));
  }

 private:
  void finished(std::list<std::string>::iterator it) {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.erase(it);
    last_ = Clock::now();
  }

  void watch() {
    std::unique_lock<std::mutex> lock(mu_);
    auto period = std::chrono::duration<double>(std::min(1.0, limit_s_ / 4));
    while (!stopping_) {
      wake_.wait_for(lock, period);
      double idle = std::chrono::duration<double>(Clock::now() - last_).count();
      if (stopping_ || idle < limit_s_ || in_flight_.empty()) continue;
      std::string what;
      for (const std::string& w : in_flight_) what += (what.empty() ? "" : "; ") + w;
      std::string message = cat("search of kernel ", kernel_.empty() ? "(unnamed)" : kernel_, " stalled: nothing finished in ",
                                idle, " s (SearchOptions::stall_limit_s is ", limit_s_, "); in flight: ", what,
                                ". This is a bug in kiln, the compiler or the device: please report this message");
      lock.unlock();
      if (!on_stall_) {
        std::fprintf(stderr, "kiln: %s\n", message.c_str());
        std::abort();
      }
      on_stall_(message);
      return;  // once
    }
  }

  const double limit_s_;
  const std::string kernel_;
  const std::function<void(const std::string&)> on_stall_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::list<std::string> in_flight_;
  Clock::time_point last_ = Clock::now();
  bool stopping_ = false;
  std::thread thread_;
};

struct Timed {
  std::vector<Opt> opts;
  Built built;
  double seconds = 0;
};

// Opts whose amount is a tile's size (lanes, unrolled steps, a workgroup's extent).
bool tiles(OptOp op) {
  return op == OptOp::UPCAST || op == OptOp::UNROLL || op == OptOp::LOCAL || op == OptOp::GROUP || op == OptOp::GROUPTOP;
}

// The product of a list's tile sizes (a full unroll, amount 0, counts as large).
double tile_size(const std::vector<Opt>& opts) {
  double size = 1;
  for (const Opt& o : opts)
    if (tiles(o.op)) size *= o.amount > 0 ? double(o.amount) : 1024.0;
  return size;
}

// Fewer opts first, then the smaller tile, then by the opts' text: how ties are broken.
bool simpler(const std::vector<Opt>& a, const std::vector<Opt>& b) {
  if (a.size() != b.size()) return a.size() < b.size();
  double ta = tile_size(a), tb = tile_size(b);
  if (ta != tb) return ta < tb;
  return to_string(a) < to_string(b);
}
bool simpler(const Timed& a, const Timed& b) { return simpler(a.opts, b.opts); }

// Fastest first; equal times go to the simpler list: the same inputs always give the same order,
// whatever order the candidates were built in.
bool faster(const Timed& a, const Timed& b) { return a.seconds != b.seconds ? a.seconds < b.seconds : simpler(a, b); }

// Fastest first, except that the lists within `tie` (a fraction, min_gain) of the fastest are ties
// inside the timing noise and go simpler first: which of them a search keeps or picks no longer depends
// on the minute they were timed in (five fresh searches of one kernel kept three different lists).
template <typename T, typename Get>
void rank(std::vector<T>& v, double tie, Get get) {
  std::sort(v.begin(), v.end(), [&](const T& a, const T& b) { return faster(get(a), get(b)); });
  if (v.empty()) return;
  double limit = get(v.front()).seconds * (1 + tie);
  auto tier_end = std::find_if(v.begin(), v.end(), [&](const T& t) { return get(t).seconds > limit; });
  std::stable_sort(v.begin(), tier_end, [&](const T& a, const T& b) { return simpler(get(a), get(b)); });
}
void rank(std::vector<Timed>& v, double tie) {
  rank(v, tie, [](const Timed& t) -> const Timed& { return t; });
}

class Engine {
 public:
  Engine(const SearchHooks& hooks, const SearchOptions& options)
      : hooks_(hooks), options_(options),
        gain_(hooks.memory_bound ? std::max(options.min_gain, options.min_gain_memory) : options.min_gain),
        always_tie_(hooks.memory_bound ? gain_ : gain_ * kAlwaysTie),
        watchdog_(options.stall_limit_s, hooks.kernel, hooks.on_stall) {}

  SearchResult run() {
    if (options_.beam < 1 || options_.timing_runs < 1 || options_.max_rounds < 0)
      throw Error(cat("search: beam ", options_.beam, ", timing runs ", options_.timing_runs, " and rounds ",
                      options_.max_rounds, ": beam and runs must be >= 1 and rounds >= 0"));
    if (!hooks_.actions || !hooks_.build || !hooks_.time)
      throw Error("search: the hooks need actions, build and time (check too unless options.check is off)");
    if (options_.check && !hooks_.check) throw Error("search: options.check is on but the hooks have no check");
    if (!(options_.min_gain >= 0 && options_.min_gain < 1) || !(options_.min_gain_memory >= 0 && options_.min_gain_memory < 1))
      throw Error(cat("search: min_gain ", options_.min_gain, " and min_gain_memory ", options_.min_gain_memory,
                      ": each is a fraction of the default's time, in [0, 1)"));
    if (options_.confirm_runs < 0) throw Error(cat("search: confirm_runs ", options_.confirm_runs, ": use 0 (off) or more rounds"));
    if (options_.exhaustive_depth < 0 || options_.exhaustive_depth > kMaxExhaustiveDepth)
      throw Error(cat("search: exhaustive depth ", options_.exhaustive_depth, ": use 1..", kMaxExhaustiveDepth,
                      " actions (each more multiplies the candidates by the action space, ~20-60), or 0 for BEAM"));

    // Round 0: the default kernel (the baseline every winner must beat and match) and the bare kernel.
    // The default first and alone: timed in a batch, it could be stopped early behind a faster bare
    // kernel and then be missing as the baseline.
    std::vector<Timed> beam = evaluate({hooks_.default_opts});
    auto is_default = [&](const Timed& t) { return t.opts == hooks_.default_opts; };
    auto found = std::find_if(beam.begin(), beam.end(), is_default);
    if (found == beam.end())
      throw Error(cat("search: the default kernel of ", hooks_.kernel.empty() ? "(unnamed)" : hooks_.kernel, " (opts \"",
                      to_string(hooks_.default_opts), "\") could not be built or timed: ",
                      !default_rejected_.empty() ? cat("rejected: ", default_rejected_)
                      : result_.failures.empty()  ? "rejected"
                                                  : result_.failures.back()));
    default_ = *found;
    result_.default_seconds = default_.seconds;
    if (default_.seconds < options_.min_default_s) {
      result_.too_small = true;
      settle(std::move(beam));
      result_.wall_s = seconds_since(start_);
      return std::move(result_);
    }
    if (options_.exhaustive_depth > 0) return exhaustive(std::move(beam));
    std::vector<std::vector<Opt>> starts = hooks_.seeds;
    if (!hooks_.default_opts.empty() && default_.seconds < options_.bare_seed_max_s) starts.insert(starts.begin(), std::vector<Opt>{});
    for (Timed& t : evaluate(std::move(starts))) beam.push_back(std::move(t));
    std::erase_if(beam, [&](const Timed& t) { return !is_default(t) && t.seconds > best_seconds() * options_.early_stop; });
    std::vector<Timed> all = beam;
    rank(beam, options_.min_gain);
    if (beam.size() > size_t(options_.beam)) beam.resize(size_t(options_.beam));

    for (int round = 1; round <= options_.max_rounds && !beam.empty(); ++round) {
      progress_.round = round;
      result_.rounds = round;
      double best_before = best_seconds();
      std::vector<Timed> children = evaluate(expand(beam));
      if (children.empty()) break;
      all.insert(all.end(), children.begin(), children.end());
      // A child whose timing stopped early (clearly slower than the best) is not worth extending.
      std::erase_if(children, [&](const Timed& t) { return t.seconds > best_seconds() * options_.early_stop; });
      if (children.empty()) break;
      double fastest = std::min_element(children.begin(), children.end(), faster)->seconds;
      rank(children, options_.min_gain);
      if (children.size() > size_t(options_.beam)) children.resize(size_t(options_.beam));
      beam = std::move(children);
      if (fastest > best_before * (1 - options_.min_improvement)) break;
    }

    settle(std::move(all));
    result_.wall_s = seconds_since(start_);
    return std::move(result_);
  }

 private:
  // Every list of up to exhaustive_depth actions, level by level; `all` holds the default. Only the
  // fastest few are kept between levels (with their loaded kernels): settle checks no more than those.
  SearchResult exhaustive(std::vector<Timed> all) {
    const size_t keep = size_t(options_.max_checks) + 8;
    std::vector<Timed> level;  // the lists of the last depth, to extend
    if (!hooks_.default_opts.empty()) level = evaluate({{}});
    for (int depth = 1; depth <= options_.exhaustive_depth; ++depth) {
      // The default was timed first, so its list is never built again: extend it at its own depth.
      if (hooks_.default_opts.size() == size_t(depth - 1)) level.push_back(default_);
      if (level.empty()) break;
      progress_.round = depth;
      result_.rounds = depth;
      std::vector<Timed> next = evaluate(expand(level));
      // Only the fastest few can win (settle checks no more): let the others' loaded kernels go now.
      std::sort(next.begin(), next.end(), faster);
      for (size_t i = keep; i < next.size(); ++i) next[i].built.artifact.reset();
      all.insert(all.end(), std::make_move_iterator(level.begin()), std::make_move_iterator(level.end()));
      std::sort(all.begin(), all.end(), faster);
      if (all.size() > keep) all.resize(keep);
      level = std::move(next);
    }
    all.insert(all.end(), std::make_move_iterator(level.begin()), std::make_move_iterator(level.end()));
    settle(std::move(all));
    result_.wall_s = seconds_since(start_);
    return std::move(result_);
  }

  // Every kept list extended by each single action it allows.
  std::vector<std::vector<Opt>> expand(const std::vector<Timed>& beam) {
    std::vector<std::vector<Opt>> out;
    for (const Timed& parent : beam)
      for (const Opt& action : hooks_.actions(parent.opts)) {
        std::vector<Opt> opts = parent.opts;
        opts.push_back(action);
        out.push_back(std::move(opts));
      }
    return out;
  }

  // Builds the candidates in parallel, then times the new ones one at a time (timing must not share the
  // cores with compilers).
  // Each opt list is tried once in a search.
  std::vector<Timed> evaluate(std::vector<std::vector<Opt>> lists) {
    std::vector<std::vector<Opt>> candidates;
    for (std::vector<Opt>& opts : lists)
      if (tried_.insert(to_string(opts)).second) candidates.push_back(std::move(opts));
    result_.candidates += int(candidates.size());
    std::vector<std::optional<Built>> built(candidates.size());
    std::vector<std::string> failure(candidates.size());
    std::vector<char> rejected(candidates.size(), 0);
    auto build_start = Clock::now();
    default_pool().parallel_for(0, int64_t(candidates.size()), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        auto start = Clock::now();
        try {
          Watchdog::Guard watched = watchdog_.watch(cat("building [", to_string(candidates[size_t(i)]), "]"));
          BuildResult r = hooks_.build(candidates[size_t(i)]);
          if (!r.built) {
            rejected[size_t(i)] = 1;
            failure[size_t(i)] = std::move(r.rejected);  // why, for the default's error only
            continue;
          }
          double took = seconds_since(start);
          if (took > options_.compile_limit_s) {
            failure[size_t(i)] = cat("build took ", took, " s, over the limit of ", options_.compile_limit_s, " s");
            continue;
          }
          built[size_t(i)] = std::move(r.built);
        } catch (const std::exception& e) {
          failure[size_t(i)] = e.what();
        }
      }
    }, /*grain=*/1);
    result_.build_s += seconds_since(build_start);
    // Lists of this batch that lowered to one source: the parallel builds raced to compile it, and the
    // loser is a duplicate. Hand the compiled kernel to the simplest of them, so the list a search keeps
    // (and may pick) does not depend on which thread came first.
    std::unordered_map<uint64_t, size_t> simplest;  // source hash -> index of the simplest list
    std::vector<uint64_t> hashes(candidates.size(), 0);
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (!built[i]) continue;
      hashes[i] = hash_string(built[i]->source);
      auto [at, fresh] = simplest.try_emplace(hashes[i], i);
      if (!fresh && simpler(candidates[i], candidates[at->second])) at->second = i;
    }
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (!built[i] || simplest[hashes[i]] == i) continue;
      std::optional<Built>& keep = built[simplest[hashes[i]]];
      if (!keep->artifact) std::swap(keep->artifact, built[i]->artifact);
      built[i]->artifact.reset();
    }

    std::vector<Timed> out;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (rejected[i]) {
        ++result_.rejected;
        if (candidates[i] == hooks_.default_opts) default_rejected_ = failure[i];
        continue;
      }
      if (!failure[i].empty()) {
        fail(candidates[i], "build", failure[i]);
        continue;
      }
      ++result_.compiled;
      ++progress_.compiled;
      auto [spelled, fresh] = spelling_.try_emplace(hashes[i], candidates[i]);
      if (!fresh && simpler(candidates[i], spelled->second)) spelled->second = candidates[i];
      if (!built[i]->artifact) {  // build's own duplicate: a source it built before, not built again
        ++result_.duplicates;
        ++progress_.duplicates;
        continue;
      }
      if (!seen_sources_.insert(hashes[i]).second) {
        ++result_.duplicates;
        ++progress_.duplicates;
        continue;
      }
      if (std::optional<double> seconds = time(*built[i], candidates[i])) {
        out.push_back({candidates[i], std::move(*built[i]), *seconds});
        if (best_ == 0 || *seconds < best_) {
          best_ = *seconds;
          progress_.best_opts = candidates[i];
        }
      }
      report();
    }
    return out;
  }

  // The minimum of the runs, or nullopt when the launch failed or took too long.
  std::optional<double> time(const Built& built, const std::vector<Opt>& opts) {
    auto start = Clock::now();
    double best = 0;
    Watchdog::Guard watched = watchdog_.watch(cat("timing [", to_string(opts), "]"));
    try {
      for (int run = 0; run < options_.timing_runs; ++run) {
        double seconds = hooks_.time(built);
        result_.kernel_s += seconds;
        // Nothing slower than the default can win, so the limit is never below the default's time; the
        // default itself (timed first) is never disqualified.
        double limit = std::max(options_.launch_limit_s, result_.default_seconds);
        if (result_.default_seconds > 0 && seconds > limit) {
          fail(opts, "launch", cat("took ", seconds, " s, over the limit of ", limit, " s"));
          result_.timing_s += seconds_since(start);
          return std::nullopt;
        }
        best = run == 0 ? seconds : std::min(best, seconds);
        if (best_ > 0 && best > best_ * options_.early_stop) break;  // more runs cannot make it a winner
      }
    } catch (const std::exception& e) {
      fail(opts, "launch", e.what());
      result_.timing_s += seconds_since(start);
      return std::nullopt;
    }
    result_.timing_s += seconds_since(start);
    ++result_.timed;
    ++progress_.timed;
    return best;
  }

  // Lists that lower to one source are one kernel: it goes by the simplest spelling any of them had (the
  // first one built is timed; a simpler one met later is a duplicate), so the name a search reports does
  // not depend on the order it met them in (UPCAST(0,8) UNROLL(1,4) UNROLL(1,2) is UPCAST(0,8) UNROLL(1,8)).
  void respell(Timed& t) const {
    auto it = spelling_.find(hash_string(t.built.source));
    if (it != spelling_.end() && simpler(it->second, t.opts)) t.opts = it->second;
  }

  // The winner: the fastest candidate faster than the default by min_gain whose output is right; else the
  // default. The contenders (up to max_contenders that beat the default in search) are first timed again
  // beside the default, round-robin (confirm_runs rounds, each keeping its minimum of these runs), so all of
  // them are measured in the same minutes of a noisy machine: one timed in a quiet moment no longer beats
  // one timed in a busy one. Then, of the fastest and the lists within min_gain of it that were the faster
  // in a round at least, the simplest wins (confirm): those are ties inside the noise, and ties broken by
  // noise made each fresh search pick another list. The one picked is timed against the default once
  // more (retest), checked, and simplified (simplify) before it wins.
  void settle(std::vector<Timed> all) {
    std::sort(all.begin(), all.end(), faster);
    result_.opts = default_.opts;
    result_.best_seconds = default_.seconds;
    std::vector<Timed*> contenders;
    for (Timed& t : all) respell(t);
    // The contenders: the lists faster than the default in search, the ties among the fastest simplest
    // first (rank), at most max_contenders. Confirm's paired timings, not search's, then judge the gain.
    std::vector<Timed*> faster_than_default;
    for (Timed& t : all) {
      if (t.seconds >= default_.seconds || t.opts == default_.opts) continue;
      if (t.built.source == default_.built.source || !t.built.artifact) continue;
      faster_than_default.push_back(&t);
    }
    // The fastest half of them by search's times, then the simplest of the ties: with only the simplest
    // ties, a plateau of many near-equal lists filled the places, and the fastest, 5% ahead of them side
    // by side, was never confirmed (a copy's 16x8 tile against its 8x8 ones).
    std::vector<Timed*> by_time = faster_than_default;  // `all` was sorted fastest first
    rank(faster_than_default, gain_, [](const Timed* t) -> const Timed& { return *t; });
    const size_t places = size_t(std::max(options_.max_contenders, 1));
    if (options_.confirm_runs > 0)
      for (size_t i = 0; i < by_time.size() && contenders.size() < (places + 1) / 2; ++i) contenders.push_back(by_time[i]);
    for (Timed* t : faster_than_default) {
      if (options_.confirm_runs == 0 && t->seconds >= default_.seconds * (1 - gain_)) continue;
      if (options_.confirm_runs > 0 && contenders.size() == places) break;
      if (std::find(contenders.begin(), contenders.end(), t) == contenders.end()) contenders.push_back(t);
    }
    if (options_.confirm_runs > 0 && !contenders.empty()) confirm(contenders);
    int checks = 0;
    int retests = 0;
    for (Timed* t : contenders) {
      if (t->seconds >= default_.seconds * (1 - gain_)) continue;
      if (options_.confirm_runs > 0 || hooks_.time_whole) {
        if (retests++ == options_.max_checks) break;
        if (!retest(t)) continue;
      }
      if (options_.check) {
        if (checks++ == options_.max_checks) break;
        if (!matches(*t)) continue;
      }
      if (options_.confirm_runs > 0) t = simplify(t, all);
      result_.opts = canonical(*t);
      result_.best_seconds = t->seconds;
      result_.improved = true;
      return;
    }
  }

  // Whether the candidate's output matches (hooks.check); a mismatch is kept as a failure, and so is a
  // check that could not run (a winner that cannot be checked does not win; the search goes on).
  bool matches(const Timed& t) {
    auto start = Clock::now();
    std::optional<std::string> mismatch;
    bool ran = true;
    try {
      Watchdog::Guard watched = watchdog_.watch(cat("checking [", to_string(t.opts), "]"));
      mismatch = hooks_.check(t.built);
    } catch (const InternalError&) {
      throw;  // a bug in kiln: not this candidate's
    } catch (const Error& e) {
      mismatch = e.what();
      ran = false;
    }
    result_.check_s += seconds_since(start);
    if (!mismatch) return true;
    wrong_.insert(hash_string(t.built.source));
    if (!ran) {
      fail(t.opts, "output check", *mismatch);
      return false;
    }
    ++result_.mismatched;
    keep_failure(cat(to_string(t.opts), ": output differs from the default kernel's: ", *mismatch));
    return false;
  }

  // The lists one step simpler than `opts`: one opt dropped, one tile amount halved, or a neighbour
  // (hooks.neighbours) simpler in the order ties are broken by.
  std::vector<std::vector<Opt>> simpler_steps(const std::vector<Opt>& opts) const {
    std::vector<std::vector<Opt>> out;
    for (size_t i = 0; i < opts.size(); ++i) {
      std::vector<Opt> dropped = opts;
      dropped.erase(dropped.begin() + std::ptrdiff_t(i));
      out.push_back(std::move(dropped));
      if (tiles(opts[i].op) && opts[i].amount >= 4 && opts[i].amount % 2 == 0) {
        std::vector<Opt> halved = opts;
        halved[i].amount /= 2;
        out.push_back(std::move(halved));
      }
    }
    if (hooks_.neighbours)
      for (std::vector<Opt>& n : hooks_.neighbours(opts))
        if (simpler(n, opts)) out.push_back(std::move(n));
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return simpler(a, b); });
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  // The candidates for `lists` with their loaded kernels, each one this search built (by its list, or
  // by its source under another spelling) or built now, in parallel; nullptr where a list does not
  // apply, failed before or fails to build. The result is in the order of `lists`.
  std::vector<Timed*> built(const std::vector<std::vector<Opt>>& lists, std::vector<Timed>& all) {
    std::vector<Timed*> out(lists.size(), nullptr);
    std::vector<size_t> fresh;  // lists to build now
    for (size_t i = 0; i < lists.size(); ++i) {
      auto known = [&](Timed& t) { return t.opts == lists[i]; };
      if (auto e = std::find_if(extra_.begin(), extra_.end(), known); e != extra_.end()) out[i] = e->built.artifact ? &*e : nullptr;
      else if (auto a = std::find_if(all.begin(), all.end(), known); a != all.end()) out[i] = a->built.artifact ? &*a : nullptr;
      else if (tried_.insert(to_string(lists[i])).second) fresh.push_back(i);  // else rejected, failed or over a limit
    }
    std::vector<BuildResult> results(fresh.size());
    std::vector<std::string> failure(fresh.size());
    default_pool().parallel_for(0, int64_t(fresh.size()), [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) {
        try {
          Watchdog::Guard watched = watchdog_.watch(cat("building [", to_string(lists[fresh[size_t(k)]]), "]"));
          results[size_t(k)] = hooks_.build(lists[fresh[size_t(k)]]);
        } catch (const std::exception& e) {
          failure[size_t(k)] = e.what();
        }
      }
    }, /*grain=*/1);
    // First the kernels built now, then the lists whose source one of them or an earlier candidate has
    // (the parallel builds of one source race, and the loser has no artifact), each kernel named by the
    // simplest list that made it, whichever thread won.
    auto of_source = [&](const std::string& source) -> Timed* {
      auto same = [&](Timed& t) { return t.built.artifact && t.built.source == source; };
      if (auto e = std::find_if(extra_.begin(), extra_.end(), same); e != extra_.end()) return &*e;
      if (auto a = std::find_if(all.begin(), all.end(), same); a != all.end()) return &*a;
      return nullptr;
    };
    for (size_t k = 0; k < fresh.size(); ++k) {
      std::optional<Built>& b = results[k].built;
      if (!failure[k].empty()) fail(lists[fresh[k]], "build", failure[k]);
      if (!b || !b->artifact || of_source(b->source)) continue;
      extra_.push_back({lists[fresh[k]], std::move(*b), 0});
      out[fresh[k]] = &extra_.back();
    }
    for (size_t k = 0; k < fresh.size(); ++k) {
      const std::optional<Built>& b = results[k].built;
      if (out[fresh[k]] || !b) continue;
      out[fresh[k]] = of_source(b->source);
    }
    for (size_t i = 0; i < lists.size(); ++i)
      if (out[i] && simpler(lists[i], out[i]->opts)) out[i]->opts = lists[i];
    return out;
  }

  // Simplification (beam.h): the simplest list one step simpler than the current pick replaces it, step
  // by step, when it runs side by side within min_gain of the fastest list the walk has held (the
  // search's pick, or a step that beat it) and is a tie there, the faster in one round at least (a copy's
  // 8x8 tile was slower than its 16x8 by 5-6% in every round: not a tie, though at the edge of min_gain),
  // beats the default by min_gain again (retest; not needed by a step faster than the fastest held, which
  // passed its own) and computes the same output. Judged beside the fastest held, steps cannot add up to a
  // slower kernel, and a copy's UPCAST(3,2), 24% behind the UPCAST(3,4) the walk had reached from
  // UPCAST(3,8) but 10% behind that, no longer won or lost by the minute. A plateau's lists are ties, and
  // which end of it the beam reached was the noise's choice: fresh searches of a small conv's main kernel
  // won with and without a trailing SWAP.
  Timed* simplify(Timed* winner, std::vector<Timed>& all) {
    Timed* fastest = winner;  // the fastest list the walk has held: steps are judged beside it
    std::unordered_set<const Timed*> visited{winner};
    for (bool moved = true; moved;) {
      moved = false;
      std::vector<std::vector<Opt>> lists = simpler_steps(winner->opts);
      std::erase(lists, default_.opts);
      std::vector<Timed*> steps;  // simplest first, each strictly simpler than the winner
      for (Timed* t : built(lists, all))
        if (t && !visited.count(t) && simpler(t->opts, winner->opts) && t->built.source != default_.built.source &&
            !wrong_.count(hash_string(t->built.source)) && std::find(steps.begin(), steps.end(), t) == steps.end())
          steps.push_back(t);
      std::stable_sort(steps.begin(), steps.end(), [](const Timed* a, const Timed* b) { return simpler(*a, *b); });
      if (steps.empty()) break;
      std::vector<double> base;
      auto start = Clock::now();
      // A step is a tie of the fastest held within min_gain, a memory-bound kernel's too: each step also
      // beats the default by gain_ again, and on a memory-bound kernel whose tilings slope gently down to
      // the default, a band as wide as that bar walked each fresh search to the first list that failed it
      // in its own minute (a transposing copy's 8x8 tile, 0.78 of the default, walked to 8x4 at 0.84-0.85
      // on the 0.85 bar, then to 4x4 or 4x2: four winners in five).
      const double tie = options_.min_gain;
      std::vector<Paired> paired =
          time_paired(steps, base, hooks_.time, options_.confirm_runs, fastest, nullptr, 1 + kStepCut * tie);
      result_.timing_s += seconds_since(start);
      for (size_t i = 0; i < steps.size() && !moved; ++i) {
        if (paired[i].failed || paired[i].median > 1 + tie) continue;
        if (paired[i].wins == 0 && paired[i].median > 1 + tie * kAlwaysTie) continue;
        steps[i]->seconds = fastest->seconds * paired[i].median;  // beside it (retest may time it whole)
        // One faster than the fastest held, which beat the default in its retest, needs no retest of its
        // own: each retest is one more chance for a noisy minute to decide (a copy's UPCAST(3,4), 0.66-0.71
        // of the default's time in four retests, measured 1.04 in a fifth and lost to the UPCAST(3,8) it
        // was 10% faster than side by side).
        const bool faster = paired[i].median < 1;
        if (!faster && !retest(steps[i])) continue;
        if (options_.check && !matches(*steps[i])) continue;
        winner = steps[i];
        visited.insert(winner);
        if (faster) fastest = winner;
        moved = true;
      }
    }
    return winner;
  }

  // The simplest spelling of the winner's kernel (SearchHooks::source): its lists reachable by swapping
  // two neighbouring opts or merging two neighbouring tiles of one axis (UPCAST(0,4) UPCAST(0,2) ->
  // UPCAST(0,8)) that lower to the same source, at most kMaxSpellings of them.
  std::vector<Opt> canonical(const Timed& winner) {
    if (!hooks_.source) return winner.opts;
    std::vector<Opt> best = winner.opts;
    std::set<std::string> seen{to_string(best)};
    std::vector<std::vector<Opt>> frontier{best};
    size_t budget = kMaxSpellings;
    while (!frontier.empty() && budget > 0) {
      std::vector<std::vector<Opt>> next;
      auto offer = [&](std::vector<Opt> opts) {
        if (next.size() < budget && seen.insert(to_string(opts)).second) next.push_back(std::move(opts));
      };
      for (const std::vector<Opt>& opts : frontier)
        for (size_t i = 0; i + 1 < opts.size(); ++i) {
          std::vector<Opt> swapped = opts;
          std::swap(swapped[i], swapped[i + 1]);
          offer(std::move(swapped));
          const Opt &a = opts[i], &b = opts[i + 1];
          if (a.op == b.op && a.axis == b.axis && tiles(a.op) && a.amount > 0 && b.amount > 0) {
            std::vector<Opt> merged = opts;
            merged[i].amount *= b.amount;
            merged.erase(merged.begin() + std::ptrdiff_t(i + 1));
            offer(std::move(merged));
          }
        }
      budget -= next.size();
      std::vector<char> same(next.size(), 0);
      default_pool().parallel_for(0, int64_t(next.size()), [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          try {
            std::optional<std::string> source = hooks_.source(next[size_t(i)]);
            same[size_t(i)] = source && *source == winner.built.source;
          } catch (const InternalError&) {
            throw;
          } catch (const Error&) {  // the opts do not lower: not a spelling of this kernel
          }
        }
      }, /*grain=*/1);
      frontier.clear();
      for (size_t i = 0; i < next.size(); ++i) {
        if (!same[i]) continue;
        if (simpler(next[i], best)) best = next[i];
        frontier.push_back(std::move(next[i]));
      }
    }
    return best;
  }

  // One contender against the default, over confirm_runs rounds of timing both.
  struct Paired {
    bool failed = false;
    double median = 1;  // of its time over the default's in the same round
    size_t wins = 0, rounds = 0;
    // The faster in at least 4 rounds of 5: an equal kernel is, by chance, in half of them, and a median
    // that noise pulled below 1 - min_gain alone does not make it a winner.
    bool consistently_faster() const { return !failed && rounds > 0 && wins * 5 >= rounds * 4; }
  };

  // The median over rounds of a list's time over the base's in the same round (the first rounds of base
  // when the list was timed in fewer).
  static double median_ratio(const std::vector<double>& times, const std::vector<double>& base) {
    std::vector<double> ratios;
    for (size_t r = 0; r < times.size(); ++r) ratios.push_back(times[r] / base[r]);
    if (ratios.empty()) return 1;
    std::sort(ratios.begin(), ratios.end());
    size_t m = ratios.size();
    return m % 2 ? ratios[m / 2] : 0.5 * (ratios[m / 2 - 1] + ratios[m / 2]);
  }

  // Times the contenders and the default (or `against`) round-robin, `runs` rounds (the default first in
  // every other round, so neither side always follows the other), and pairs each contender's time with
  // the default's in the same round: the machine's speed drifts between minutes, so comparing each one's
  // minimum let a contender that met a fast moment beat an equal default (a memory-bound elementwise
  // kernel: four fresh searches, four winners). `base`: the default's times.
  std::vector<Paired> time_paired(const std::vector<Timed*>& contenders, std::vector<double>& base,
                                  const std::function<double(const Built&)>& time, int runs, Timed* against = nullptr,
                                  std::vector<std::vector<double>>* times = nullptr, double cut = 0) {
    std::vector<Timed*> timed = contenders;
    timed.push_back(against ? against : &default_);
    std::vector<std::vector<double>> rounds(timed.size());  // each one's time in each round
    std::vector<Paired> out(contenders.size());
    std::vector<char> dropped(contenders.size(), 0);
    for (int run = 0; run < runs; ++run) {
      if (cut > 0 && run == kCutRounds)
        for (size_t i = 0; i < out.size(); ++i)
          if (!out[i].failed && median_ratio(rounds[i], rounds.back()) > cut) dropped[i] = 1;
      for (size_t k = 0; k < timed.size(); ++k) {
        size_t i = run % 2 ? (k + timed.size() - 1) % timed.size() : k;  // odd rounds: the default first
        if (i < out.size() && (out[i].failed || dropped[i])) continue;
        try {
          Watchdog::Guard watched = watchdog_.watch(cat("timing [", to_string(timed[i]->opts), "] again"));
          double seconds = time(timed[i]->built);
          result_.kernel_s += seconds;
          rounds[i].push_back(seconds);
        } catch (const std::exception& e) {
          if (i + 1 == timed.size()) throw;  // the default launched before: a failure now is not the candidates'
          fail(timed[i]->opts, "launch", e.what());
          out[i].failed = true;
        }
      }
    }
    base = rounds.back();
    if (times) *times = rounds;
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i].failed) continue;
      out[i].median = median_ratio(rounds[i], base);
      out[i].wins = 0;
      for (size_t r = 0; r < rounds[i].size(); ++r) out[i].wins += rounds[i][r] < base[r];
      out[i].rounds = rounds[i].size();
    }
    return out;
  }

  // Times the contenders and the default again side by side (see settle) and orders the contenders: a
  // contender's time is the default's best times its median ratio, when it is consistently faster.
  void confirm(std::vector<Timed*>& contenders) {
    auto start = Clock::now();
    std::vector<double> base;
    std::vector<std::vector<double>> times;
    // One slower than the default after kCutRounds rounds cannot win, nor be the fastest's tie.
    std::vector<Paired> paired = time_paired(contenders, base, hooks_.time, options_.confirm_runs, nullptr, &times, 1.0);
    default_.seconds = *std::min_element(base.begin(), base.end());
    std::vector<size_t> kept;
    for (size_t i = 0; i < contenders.size(); ++i) {
      if (paired[i].failed) continue;
      contenders[i]->seconds = paired[i].consistently_faster() ? default_.seconds * paired[i].median : default_.seconds;
      kept.push_back(i);
    }
    result_.default_seconds = default_.seconds;
    result_.best_seconds = default_.seconds;
    // Fastest first; then the ties of the fastest go simplest first: those within min_gain of it that
    // were the faster of the two in one round at least. One slower in every round is another kernel,
    // however close: at a fixed 5% band, a copy's 8x8 tile (5-6% behind its 16x8 in every round) won or
    // lost by the minute.
    std::sort(kept.begin(), kept.end(), [&](size_t a, size_t b) { return faster(*contenders[a], *contenders[b]); });
    std::vector<Timed*> ordered;
    if (!kept.empty()) {
      const size_t fastest = kept.front();
      auto ties = [&](size_t i) {
        if (i == fastest) return true;
        double ratio = contenders[i]->seconds / contenders[fastest]->seconds;
        if (ratio > 1 + gain_) return false;
        if (ratio <= 1 + always_tie_) return true;
        for (size_t r = 0; r < times[i].size() && r < times[fastest].size(); ++r)
          if (times[i][r] < times[fastest][r]) return true;
        return false;
      };
      auto tier_end = std::stable_partition(kept.begin(), kept.end(), ties);
      std::stable_sort(kept.begin(), tier_end, [&](size_t a, size_t b) { return simpler(*contenders[a], *contenders[b]); });
    }
    for (size_t i : kept) ordered.push_back(contenders[i]);
    contenders = std::move(ordered);
    result_.timing_s += seconds_since(start);
  }

  // The confirmed winner timed against the default once more, in fresh rounds: picked as the best of
  // several, its confirm figure is biased low (a memory-bound kernel at the bandwidth: the best of six
  // equal lists measured 6% under the default in one fresh search of five). It wins only if it is
  // faster by min_gain again, on whole launches where search timed parts (hooks.time_whole), whose
  // figures are then the ones reported.
  bool retest(Timed* winner) {
    auto start = Clock::now();
    std::vector<double> base;
    const bool whole = bool(hooks_.time_whole);
    // Five rounds at least: without confirmation (confirm_runs 0) a pick from parts is still checked whole.
    Paired p = time_paired({winner}, base, whole ? hooks_.time_whole : hooks_.time, std::max(options_.confirm_runs, 5))[0];
    result_.timing_s += seconds_since(start);
    bool wins = p.consistently_faster() && p.median < 1 - gain_;
    if (whole && wins) {
      winner->seconds = *std::min_element(base.begin(), base.end()) * p.median;
      result_.default_seconds = *std::min_element(base.begin(), base.end());
    }
    return wins;
  }

  void fail(const std::vector<Opt>& opts, const char* stage, const std::string& why) {
    ++result_.failed;
    ++progress_.failed;
    keep_failure(cat("[", to_string(opts), "] ", stage, " failed: ", why));
    report();
  }
  // The first line, shortened: a compile error's text holds the compiler's whole log and the source.
  void keep_failure(std::string text) {
    text = text.substr(0, text.find('\n'));
    if (text.size() > 300) text = text.substr(0, 297) + "...";
    if (result_.failures.size() < kMaxFailuresKept) result_.failures.push_back(std::move(text));
  }
  double best_seconds() const { return best_; }

  void report() {
    if (!hooks_.progress) return;
    progress_.elapsed_s = seconds_since(start_);
    progress_.best_seconds = best_;
    hooks_.progress(progress_);
  }

  const SearchHooks& hooks_;
  const SearchOptions& options_;
  const double gain_;  // the gain a winner needs and the band of ties: min_gain, min_gain_memory if memory-bound
  // Side by side, lists within this of each other are ties even when one was the faster in every round:
  // kAlwaysTie of min_gain; the whole band for a memory-bound kernel, whose order inside it one search
  // sees consistently and the next, minutes later, does not.
  const double always_tie_;
  Clock::time_point start_ = Clock::now();
  SearchResult result_;
  SearchProgress progress_;
  Timed default_;
  double best_ = 0;                      // fastest time so far (0: none yet)
  std::set<std::string> tried_;          // opt lists already built, as text
  std::string default_rejected_;         // why the default opts did not apply, if they did not
  std::unordered_set<uint64_t> seen_sources_;
  std::unordered_map<uint64_t, std::vector<Opt>> spelling_;  // source hash -> the simplest list that built it
  std::unordered_set<uint64_t> wrong_;  // sources whose output did not match
  std::deque<Timed> extra_;  // lists simplify() built (not in the search's own candidates)
  Watchdog watchdog_;  // last: its thread stops before the rest goes
};

}  // namespace

SearchResult beam_search(const SearchHooks& hooks, const SearchOptions& options) { return Engine(hooks, options).run(); }

}  // namespace kiln
