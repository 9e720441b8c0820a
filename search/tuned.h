// Tuned kernels while realizing: with KILN_BEAM=k, each new kernel's opts come from the tuning cache, or
// from a BEAM search (beam.h) whose winner is stored there. frontend/realize.cpp calls it once per new
// kernel (its in-memory kernel cache makes repeats free); `kiln search` watches it.
//
//   LoweredKernel k = tuned_kernel(device, item.ast, kernel_buffers(item.bufs), config().beam);
//   watch_tuning({.done = [](const TunedKernel& t) { table.push_back(t); }});   // kiln search
#pragma once
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "search/beam.h"
#include "search/tuning_cache.h"

namespace kiln {

// One kernel's tuning, as `kiln search` reports it.
struct TunedKernel {
  std::string name;                  // the kernel's name, e.g. "r_1024_1024_1024"
  UOpPtr ast;
  std::vector<KernelBuffer> buffers;
  TuningKey key;
  TuningEntry entry;                 // what the cache holds now (on a hit: what it held)
  bool cache_hit = false;
  std::optional<SearchResult> search;  // when it was searched
};

// What a process watching the tuning wants to hear. Both are called on the thread that realizes.
struct TuningWatch {
  std::function<void(const std::string& kernel, const SearchProgress&)> progress;
  std::function<void(const TunedKernel&)> done;
  // > 0: kernels not in the cache are searched exhaustively to this depth instead of by BEAM
  // (SearchOptions::exhaustive_depth; `kiln search --exhaustive`), under their own cache keys.
  int exhaustive_depth = 0;
};
void watch_tuning(TuningWatch watch);  // process-wide; an empty watch stops watching

// The search parameters realize and `kiln search --beam k` use (their cache entries are the same).
SearchOptions tuning_options(int beam);

// The kernel lowered with its tuned opts: the cache's when they still apply, else a search's (stored).
// Cache warnings (a bad file set aside) go to stderr.
LoweredKernel tuned_kernel(Device& device, const UOpPtr& ast, std::span<const KernelBuffer> buffers, int beam);

}  // namespace kiln
