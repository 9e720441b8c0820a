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
//
// The file (schema 1):
//   {"format": "kiln-tuning-cache", "schema": 1,
//    "entries": {"<key.str()>": {"key": {"ast_hash": .., "device": .., "renderer": .., "action_space": 1,
//                                        "search": "beam=4", "schema": 1},
//                                "kernel": "r_16_16", "opts": ["UPCAST(0,4)"], "default_seconds": ..,
//                                "best_seconds": .., "created": "2026-11-30T12:00:00Z",
//                                "ast": "<serialize_program(toposort(ast))>"}}}
//
// Concurrency: writers take an advisory lock (flock on <file>.lock) around read-merge-write, and publish
// the new file with rename(), so readers (who take no lock) always see a whole file and two processes
// storing different entries both keep theirs.
//
// A bad file (not JSON, truncated, nested too deep, a number out of range, valid JSON of another format
// or schema, a directory): warnings() says what and where. The next store, clear or import moves it
// aside to <file>.corrupt-<UTC time>, so a file someone pointed kiln at is never destroyed, says so in
// warnings() and starts a new file. A kiln file that does not parse whole is split into its entries
// (search/tuning_file.h): each that parses and checks on its own is used, and starts the new file; the
// warning says how many were lost. A bad entry in a good file is skipped with a warning and kept as it
// is when other entries are written. An entry's "ast" is checked (parse_ast_text, search/kernel_ast.h)
// by import and verify. The cache prints nothing itself: callers show warnings() to the user.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "devices/device.h"
#include "lower/lower.h"
#include "uop/uop.h"

namespace kiln {

// Bumped whenever the file's layout or the meaning of a key field changes.
inline constexpr int kTuningCacheSchema = 1;

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
  std::string created;        // when, ISO 8601 UTC ("" when stored: store() fills in now)
  std::string ast;            // the kernel AST as ast_text(ast), so `kiln cache verify` can rebuild it
};

TuningKey tuning_key(const UOpPtr& ast, const DeviceSpec& spec, const std::string& search_params);

// The canonical text of a kernel AST (uop/serialize.h over its toposort) and its inverse. The AST hash
// is the hash of this text: it names ops and dtypes by name, so it holds across runs and processes.
std::string ast_text(const UOpPtr& ast);
// Throws Error for text ast_text did not write, or that is not a kernel AST (check_kernel_ast).
UOpPtr parse_ast_text(const std::string& text);

std::string device_fingerprint(const DeviceSpec& spec);  // "CPU x86-64-v4 clang 14.0.6 -O2 ..."

// What import_from() did with each entry of the imported file.
struct ImportReport {
  int added = 0;     // new keys
  int replaced = 0;  // keys present here whose imported entry was faster (smaller best_seconds)
  int kept = 0;      // keys present here whose entry was at least as fast: left as it was
  std::vector<std::string> refused;  // entries not imported, each with the reason
};

class TuningCache {
 public:
  TuningCache();                                    // config().cache_dir / "tuning.json"
  explicit TuningCache(std::filesystem::path file);
  const std::filesystem::path& file() const;
  std::optional<TuningEntry> lookup(const TuningKey& key);
  void store(const TuningKey& key, const TuningEntry& entry);
  std::vector<std::pair<TuningKey, TuningEntry>> entries();  // every valid entry, in key order
  std::vector<std::string> warnings() const;  // bad files and entries ignored, files set aside: show them

  bool remove(const TuningKey& key);  // false when there was no such entry
  size_t clear();  // deletes the file (a bad one is set aside instead); returns how many valid entries it held
  // Writes the valid entries to `dest` (a file of the same format); returns how many.
  size_t export_to(const std::filesystem::path& dest);
  // Merges the entries of a file export_to() (or another kiln) wrote. A file that is not a kiln tuning
  // cache of this schema is refused whole with an Error; a bad entry is refused with a reason.
  ImportReport import_from(const std::filesystem::path& source);

 private:
  void warn(std::string message);
  std::filesystem::path file_;
  std::vector<std::string> warnings_;
};

}  // namespace kiln
