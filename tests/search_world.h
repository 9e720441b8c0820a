// The made-up world the [search] engine tests drive BEAM through: a table of candidate times (so no test
// depends on how fast anything runs), builds that fail on demand, and an output check that says which
// candidates are wrong.
#pragma once
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "search/beam.h"

namespace kiln::test {

inline Opt up(int axis, int64_t n) { return Opt{OptOp::UPCAST, axis, n}; }
inline Opt un(int axis, int64_t n) { return Opt{OptOp::UNROLL, axis, n}; }

// A deterministic world. Candidates are opt lists; each list's time comes from `times` by its text
// (lists not in the table take `slow`); the source of a list is its text unless `same_source` maps it
// to another's. Every list may be extended by every action in `actions` not already in it.
struct FakeWorld {
  std::vector<Opt> actions = {up(0, 2), up(0, 4), un(1, 4)};
  std::map<std::string, double> times;
  std::map<std::string, std::vector<double>> sequence;  // successive launches of a list, the last repeated (noise)
  double slow = 10.0;
  std::set<std::string> fail_build, fail_launch, wrong_output;
  std::map<std::string, std::string> same_source;
  bool skip_duplicate_builds = false;  // build returns no artifact for a list in same_source, as search_kernel does
  bool lowers = false;                 // hooks.source is set (a list's source, as for build)
  std::vector<Opt> default_opts;

  std::mutex mu;
  std::map<std::string, int> launches;  // per source
  std::vector<std::string> checked;

  SearchHooks hooks() {
    SearchHooks h;
    h.default_opts = default_opts;
    h.actions = [this](std::span<const Opt> applied) {
      std::vector<Opt> out;
      for (const Opt& a : actions)
        if (std::find(applied.begin(), applied.end(), a) == applied.end()) out.push_back(a);
      return out;
    };
    h.build = [this](std::span<const Opt> opts) -> BuildResult {
      std::string text = to_string(opts);
      if (fail_build.count(text)) throw Error(cat("fake compile error for ", text));
      auto alias = same_source.find(text);
      std::string source = alias == same_source.end() ? text : alias->second;
      if (alias != same_source.end() && skip_duplicate_builds) return {Built{source, nullptr}, ""};
      return {Built{source, std::make_shared<std::string>(text)}, ""};
    };
    if (lowers)
      h.source = [this](std::span<const Opt> opts) -> std::optional<std::string> {
        std::string text = to_string(opts);
        auto alias = same_source.find(text);
        return alias == same_source.end() ? text : alias->second;
      };
    h.time = [this](const Built& b) {
      const std::string& text = *static_cast<std::string*>(b.artifact.get());
      int launch = 0;  // this one's place among the source's launches
      {
        std::lock_guard<std::mutex> lock(mu);
        launch = launches[b.source]++;
      }
      if (fail_launch.count(text)) throw Error("fake launch failure");
      if (auto s = sequence.find(text); s != sequence.end()) return s->second[std::min<size_t>(size_t(launch), s->second.size() - 1)];
      auto t = times.find(text);
      return t == times.end() ? slow : t->second;
    };
    h.check = [this](const Built& candidate) -> std::optional<std::string> {
      const std::string& text = *static_cast<std::string*>(candidate.artifact.get());
      checked.push_back(text);
      if (wrong_output.count(text)) return "fake mismatch";
      return std::nullopt;
    };
    return h;
  }
};

inline SearchOptions options(int beam = 2) {
  SearchOptions o;
  o.beam = beam;
  o.launch_limit_s = 1e9;  // the fake times are seconds-long
  o.min_default_s = 0;     // and the real searches below are of tiny kernels
  o.bare_seed_max_s = 1e9;  // the bare kernel is always a starting point
  o.confirm_runs = 5;       // the launch sequences below are written for five rounds side by side
  return o;
}

}  // namespace kiln::test
