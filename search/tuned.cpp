#include "search/tuned.h"

#include <algorithm>
#include <iostream>
#include <mutex>

#include "uop/config.h"

namespace kiln {

namespace {

std::mutex& watch_mutex() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}
TuningWatch& current_watch() {
  static TuningWatch* watch = new TuningWatch();
  return *watch;
}
TuningWatch watch_now() {
  std::lock_guard<std::mutex> lock(watch_mutex());
  return current_watch();
}

// Prints the cache's warnings once each (they repeat on every lookup of a bad file).
void report_warnings(const TuningCache& cache) {
  static std::mutex mu;
  static std::vector<std::string>* printed = new std::vector<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  for (const std::string& w : cache.warnings()) {
    if (std::find(printed->begin(), printed->end(), w) != printed->end()) continue;
    std::cerr << "kiln: warning: " << w << "\n";  // w names the tuning cache itself
    printed->push_back(w);
  }
}

}  // namespace

void watch_tuning(TuningWatch watch) {
  std::lock_guard<std::mutex> lock(watch_mutex());
  current_watch() = std::move(watch);
}

SearchOptions tuning_options(int beam) {
  SearchOptions options;
  options.beam = beam;
  return options;
}

LoweredKernel tuned_kernel(Device& device, const UOpPtr& ast, std::span<const KernelBuffer> buffers, int beam) {
  const DeviceSpec& spec = device.spec();
  TuningWatch watch = watch_now();
  SearchOptions options = tuning_options(beam);
  options.exhaustive_depth = watch.exhaustive_depth;
  TunedKernel t;
  t.ast = ast;
  t.buffers.assign(buffers.begin(), buffers.end());
  t.key = tuning_key(ast, spec, options.params());
  TuningCache cache;
  std::optional<TuningEntry> hit = cache.lookup(t.key);
  report_warnings(cache);

  if (hit) {
    Lowering l = lower_with_opts(ast, spec, hit->opts);
    if (l.kernel) {
      t.name = l.kernel->name;
      t.entry = *hit;
      t.cache_hit = true;
      if (config().debug >= 1) std::cerr << "kiln: search: " << t.name << ": cached opts " << to_string(hit->opts) << "\n";
      if (watch.done) watch.done(t);
      return std::move(*l.kernel);
    }
    std::cerr << "kiln: tuning cache: the cached opts \"" << to_string(hit->opts) << "\" of kernel " << hit->kernel
              << " no longer apply (" << l.rejected << "); searching again\n";
  }

  LoweredKernel plain = lower_kernel(ast, spec);
  t.name = plain.name;
  auto progress = [&](const SearchProgress& p) {
    if (watch.progress) watch.progress(t.name, p);
  };
  t.search = search_kernel(device, ast, buffers, options, progress);
  const SearchResult& r = *t.search;
  t.entry = TuningEntry{r.opts, t.name, r.default_seconds, r.best_seconds, "", ast_text(ast)};
  cache.store(t.key, t.entry);
  report_warnings(cache);
  if (config().debug >= 1)
    std::cerr << "kiln: search: " << t.name << ": " << r.default_seconds * 1e6 << " us -> " << r.best_seconds * 1e6
              << " us with \"" << to_string(r.opts) << "\" (" << r.compiled << " compiled in " << r.wall_s << " s)\n";
  if (watch.done) watch.done(t);
  Lowering l = lower_with_opts(ast, spec, r.opts);
  KILN_ASSERT(l.kernel.has_value(), "the searched winner lowers: ", l.rejected);
  return std::move(*l.kernel);
}

}  // namespace kiln
