// kiln cache: what kiln keeps under KILN_CACHE_DIR, the tuning cache (search/tuning_cache.h) and the
// compiled-kernel caches of the devices.
//
//   kiln cache ls             one line per tuning entry (kernel, device, opts, default vs best time,
//                             speedup), then each compiled-binary cache with what it holds and its size
//   kiln cache clear          deletes the tuning entries and the compiled binaries, saying what went
//   kiln cache export FILE    writes the tuning entries to FILE, a file of the same format
//   kiln cache import FILE    merges FILE's entries into the cache (of two entries with one key, the
//                             faster winner stays); a file of another format or schema is refused
//   kiln cache verify         re-runs each cached winner whose device is here and compares its outputs
//                             with the default-opts kernel's on random inputs; exit 1 on a mismatch
#include <CLI/CLI.hpp>

#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "lower/opts.h"
#include "search/tuning_cache.h"
#include "search/verify.h"
#include "uop/config.h"
#include "uop/error.h"

namespace kiln {

namespace {

namespace fs = std::filesystem;

// The compiled-binary caches kiln's devices keep under KILN_CACHE_DIR (devices/cpu.cpp writes compile/).
struct BinaryCache {
  const char* folder;
  const char* holds;
};
const BinaryCache kBinaryCaches[] = {
    {"compile", "CPU compiled kernels: shared objects keyed by a hash of the C source and the compiler fingerprint"},
};

std::string size_text(uintmax_t bytes) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1);
  if (bytes >= (uintmax_t{1} << 20)) out << static_cast<double>(bytes) / (1 << 20) << " MiB";
  else if (bytes >= (uintmax_t{1} << 10)) out << static_cast<double>(bytes) / (1 << 10) << " KiB";
  else return cat(bytes, " bytes");
  return out.str();
}

std::string time_text(double seconds) {
  std::ostringstream out;
  out << std::setprecision(3);
  if (seconds >= 1) out << seconds << " s";
  else if (seconds >= 1e-3) out << seconds * 1e3 << " ms";
  else out << seconds * 1e6 << " us";
  return out.str();
}

std::string count_text(size_t n, const char* one, const char* many) { return cat(n, " ", n == 1 ? one : many); }

struct FolderSize {
  size_t files = 0;
  uintmax_t bytes = 0;
};

FolderSize folder_size(const fs::path& dir) {
  FolderSize size;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    ++size.files;
    size.bytes += it->file_size(ec);
  }
  return size;
}

void print_warnings(const TuningCache& cache) {
  for (const std::string& w : cache.warnings()) std::cerr << "kiln: warning: " << w << '\n';
}

// Files a store() set aside because they were corrupt or foreign: listed, never deleted by kiln.
std::vector<fs::path> set_aside_files(const TuningCache& cache) {
  std::vector<fs::path> out;
  std::error_code ec;
  std::string prefix = cache.file().filename().string() + ".corrupt-";
  for (auto it = fs::directory_iterator(cache.file().parent_path(), ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->path().filename().string().starts_with(prefix)) out.push_back(it->path());
  return out;
}

void list() {
  TuningCache cache;
  auto entries = cache.entries();
  std::cout << "tuning cache " << cache.file() << ": " << count_text(entries.size(), "entry", "entries") << '\n';
  for (const auto& [key, entry] : entries) {
    std::string opts = entry.opts.empty() ? "(default opts)" : to_string(entry.opts);
    std::string speedup = entry.best_seconds > 0 ? cat(std::setprecision(3), entry.default_seconds / entry.best_seconds, "x") : "-";
    std::cout << "  " << entry.kernel << "  " << key.device << " (" << key.renderer << ")  " << opts << "  default "
              << time_text(entry.default_seconds) << ", best " << time_text(entry.best_seconds) << ", " << speedup
              << "  [" << key.search << ", " << entry.created << "]\n";
  }
  for (const fs::path& p : set_aside_files(cache))
    std::cout << "  set aside (corrupt or foreign, kept for you to inspect or delete): " << p << '\n';
  std::cout << "compiled binaries:\n";
  for (const BinaryCache& b : kBinaryCaches) {
    fs::path dir = fs::path(config().cache_dir) / b.folder;
    FolderSize size = folder_size(dir);
    std::cout << "  " << dir << ": " << count_text(size.files, "file", "files") << ", " << size_text(size.bytes) << " (" << b.holds << ")\n";
  }
  print_warnings(cache);
}

void clear() {
  TuningCache cache;
  bool existed = fs::exists(cache.file());
  size_t set_aside = set_aside_files(cache).size();
  size_t n = cache.clear();
  if (!existed) std::cout << "no tuning cache at " << cache.file() << '\n';
  else if (set_aside_files(cache).size() > set_aside) std::cout << "set aside " << cache.file() << ": not a valid tuning cache (see the warning)\n";
  else std::cout << "removed " << cache.file() << " (" << count_text(n, "tuning entry", "tuning entries") << ")\n";
  for (const BinaryCache& b : kBinaryCaches) {
    fs::path dir = fs::path(config().cache_dir) / b.folder;
    FolderSize size = folder_size(dir);
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec) throw Error(cat("kiln cache clear: cannot remove ", dir, ": ", ec.message()));
    std::cout << "removed " << dir << ": " << count_text(size.files, "file", "files") << ", " << size_text(size.bytes) << " (" << b.holds << ")\n";
  }
  print_warnings(cache);
}

void export_to(const std::string& file) {
  TuningCache cache;
  size_t n = cache.export_to(file);
  std::cout << "exported " << count_text(n, "tuning entry", "tuning entries") << " from " << cache.file() << " to " << fs::path(file) << '\n';
  print_warnings(cache);
}

void import_from(const std::string& file) {
  TuningCache cache;
  ImportReport r = cache.import_from(file);
  std::cout << "imported " << fs::path(file) << " into " << cache.file() << ": " << r.added << " added, " << r.replaced
            << " replaced (the imported winner was faster), " << r.kept << " kept (the entry here was as fast), "
            << r.refused.size() << " refused\n";
  for (const std::string& why : r.refused) std::cout << "  refused " << why << '\n';
  print_warnings(cache);
}

void verify() {
  TuningCache cache;
  auto entries = cache.entries();
  std::map<OptsCheck::Outcome, int> counts;
  for (const auto& [key, entry] : entries) {
    OptsCheck check = verify_entry(key, entry);
    ++counts[check.outcome];
    std::string opts = entry.opts.empty() ? "(default opts)" : to_string(entry.opts);
    std::cout << outcome_name(check.outcome) << "  " << entry.kernel << "  " << opts << "  " << key.device;
    if (!check.detail.empty()) std::cout << ": " << check.detail;
    std::cout << '\n';
  }
  using O = OptsCheck::Outcome;
  std::cout << "verified " << count_text(entries.size(), "entry", "entries") << ": " << counts[O::Match] << " ok, " << counts[O::Mismatch]
            << " mismatched, " << counts[O::CouldNotApply] << " could not apply, " << counts[O::Skipped]
            << " skipped (device not here), " << counts[O::Failed] << " failed\n";
  print_warnings(cache);
  if (counts[O::Mismatch] + counts[O::Failed] > 0)
    throw Error(cat("kiln cache verify: ", counts[O::Mismatch], " cached winners give outputs that differ from the "
                    "default kernel's and ", counts[O::Failed], " could not be checked (listed above); "
                    "`kiln cache clear` drops them, and a search stores new ones"));
}

}  // namespace

std::function<void()> setup_cache(CLI::App& command) {
  command.require_subcommand(1, 1);
  auto file = std::make_shared<std::string>();
  CLI::App* ls = command.add_subcommand("ls", "List the tuning entries and the compiled-binary caches with their sizes");
  CLI::App* clear_cmd = command.add_subcommand("clear", "Delete the tuning entries and the compiled binaries");
  CLI::App* export_cmd = command.add_subcommand("export", "Write the tuning entries to FILE (the same JSON format)");
  export_cmd->add_option("FILE", *file, "where to write")->required();
  CLI::App* import_cmd = command.add_subcommand("import", "Merge the tuning entries of FILE (the faster of two winners stays)");
  import_cmd->add_option("FILE", *file, "a file `kiln cache export` wrote")->required()->check(CLI::ExistingFile);
  CLI::App* verify_cmd = command.add_subcommand(
      "verify", "Re-run each cached winner whose device is here; compare with the default kernel on random inputs");
  return [=] {
    if (ls->parsed()) list();
    if (clear_cmd->parsed()) clear();
    if (export_cmd->parsed()) export_to(*file);
    if (import_cmd->parsed()) import_from(*file);
    if (verify_cmd->parsed()) verify();
  };
}

}  // namespace kiln
