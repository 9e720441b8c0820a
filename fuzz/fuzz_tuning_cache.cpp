// libFuzzer target: a tuning cache file (search/tuning_cache.h) as every `kiln cache` command and a
// search read it: list its entries, look one up, store one (which rewrites it or sets it aside),
// export, import it into another cache, and re-read the result.
#include "fuzz.h"
#include "search/tuning_cache.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  using namespace kiln;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fuzz::scratch(), ec)) fs::remove_all(e.path(), ec);
  std::string path = fuzz::write_scratch("tuning.json", data, size);
  return fuzz::expect_errors([&] {
    TuningCache cache(path);
    for (const auto& [key, entry] : cache.entries()) cache.lookup(key);
    TuningKey key{"0123456789abcdef", "CPU fuzz-arch fuzz-cc threads=1", "C", 1, "beam=2", kTuningCacheSchema};
    cache.lookup(key);
    TuningCache other((fuzz::scratch() / "other.json").string());
    try {
      other.import_from(path);
    } catch (const Error&) {  // refusing the whole file is an answer; the rest must still run
    }
    cache.store(key, TuningEntry{{}, "r_fuzz", 2e-3, 1e-3, "", ""});
    cache.export_to((fuzz::scratch() / "exported.json").string());
    if (cache.entries().empty()) std::abort();  // the entry just stored must read back
  });
}
