// The tuning cache: which opts won a search, for one kernel on one device. One JSON file a person can
// read, copy and merge (default $KILN_CACHE_DIR/tuning.json). See DESIGN.md, "Search".
//
//   TuningCache cache;                                    // the default file
//   TuningKey key = tuning_key(ast, device.spec(), "beam=4");
//   if (std::optional<TuningEntry> hit = cache.lookup(key)) use(hit->opts);
//   cache.store(key, TuningEntry{...});                   // atomic; safe with other processes writing too
//
// The key holds everything that changes the answer: the canonical kernel AST hash, the device
// fingerprint (name, arch, compiler/driver version), the renderer (language), the action-space version
// (lower/opts.h), the search parameters and the schema version of this file. A corrupt, truncated or
// foreign file is reported (warnings()) and ignored, never trusted.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "devices/device.h"
#include "lower/lower.h"
#include "uop/uop.h"

namespace kiln {

struct TuningKey {
  std::string ast_hash;       // canonical hash of the kernel AST (independent of buffer addresses)
  std::string device;         // fingerprint: name, arch, compiler/driver version
  std::string renderer;       // the language the kernel is rendered in
  int action_space = 0;       // kActionSpaceVersion
  std::string search;         // the search parameters, as text ("beam=4 ...")
  int schema = 0;             // the cache file's schema version
  std::string str() const;    // one string, the entry's key in the file
  bool operator==(const TuningKey&) const = default;
};

struct TuningEntry {
  std::vector<Opt> opts;      // the winner
  std::string kernel;         // the kernel's name, for people
  double default_seconds = 0; // the default-opts kernel's time when searched
  double best_seconds = 0;    // the winner's time
  std::string created;        // when, ISO 8601 UTC
};

TuningKey tuning_key(const UOpPtr& ast, const DeviceSpec& spec, const std::string& search_params);

class TuningCache {
 public:
  TuningCache();                                    // config().cache_dir / "tuning.json"
  explicit TuningCache(std::filesystem::path file);
  const std::filesystem::path& file() const;
  std::optional<TuningEntry> lookup(const TuningKey& key);
  void store(const TuningKey& key, const TuningEntry& entry);
  std::vector<std::pair<TuningKey, TuningEntry>> entries();
  std::vector<std::string> warnings() const;  // files that were corrupt or foreign and were ignored

 private:
  std::filesystem::path file_;
  std::vector<std::string> warnings_;
};

}  // namespace kiln
