#include "search/tuning_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lower/opts.h"
#include "search/actions.h"
#include "search/kernel_ast.h"
#include "search/tuning_file.h"
#include "uop/config.h"
#include "uop/hash.h"
#include "uop/serialize.h"

namespace kiln {

namespace fs = std::filesystem;
using json = nlohmann::json;
using tuning_file::BadJson;
using tuning_file::excerpt;
using tuning_file::excerpt_json;

namespace {

constexpr const char* kFormat = "kiln-tuning-cache";

std::string utc_now(const char* format) {
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, format, &tm);
  return text;
}

// --- entries as JSON ------------------------------------------------------------------------------

json key_json(const TuningKey& key) {
  return {{"ast_hash", key.ast_hash}, {"device", key.device},   {"renderer", key.renderer},
          {"action_space", key.action_space}, {"search", key.search}, {"schema", key.schema}};
}

json entry_json(const TuningKey& key, const TuningEntry& entry) {
  json opts = json::array();
  for (const Opt& o : entry.opts) opts.push_back(to_string(o));
  return {{"key", key_json(key)},           {"kernel", entry.kernel},
          {"opts", opts},                   {"default_seconds", entry.default_seconds},
          {"best_seconds", entry.best_seconds}, {"created", entry.created},
          {"ast", entry.ast}};
}

// Field readers for parse_entry: each throws the reason the entry is not trusted.
struct BadEntry {
  std::string why;
};
std::string text_field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_string()) throw BadEntry{cat("\"", name, "\" is missing or not a string")};
  return it->get<std::string>();
}
// The key's small counters (action-space and schema versions): an int, checked before narrowing.
int int_field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_number_integer()) throw BadEntry{cat("\"", name, "\" is missing or not an integer")};
  bool fits = it->is_number_unsigned() ? it->get<uint64_t>() <= INT_MAX : it->get<int64_t>() >= 0 && it->get<int64_t>() <= INT_MAX;
  if (!fits) throw BadEntry{cat("\"", name, "\" is ", it->dump(), ", not a version number in 0..", INT_MAX)};
  return it->get<int>();
}
double seconds_field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0)
    throw BadEntry{cat("\"", name, "\" is missing or not a number of seconds >= 0")};
  return it->get<double>();
}

// One entry of the file, or the reason it is not trusted.
std::pair<TuningKey, TuningEntry> parse_entry(const std::string& name, const json& j) {
  if (!j.is_object()) throw BadEntry{"not a JSON object"};
  auto k = j.find("key");
  if (k == j.end() || !k->is_object()) throw BadEntry{"\"key\" is missing or not an object"};
  TuningKey key{text_field(*k, "ast_hash"), text_field(*k, "device"),   text_field(*k, "renderer"),
                int_field(*k, "action_space"), text_field(*k, "search"), int_field(*k, "schema")};
  if (key.str() != name) throw BadEntry{cat("its name is not its key's text \"", excerpt(key.str(), 200), "\" (edited by hand?)")};
  TuningEntry entry;
  auto opts = j.find("opts");
  if (opts == j.end() || !opts->is_array()) throw BadEntry{"\"opts\" is missing or not an array"};
  for (const json& o : *opts) {
    std::optional<Opt> opt = o.is_string() ? parse_opt(o.get<std::string>()) : std::nullopt;
    if (!opt) throw BadEntry{cat("the opt ", excerpt_json(o), " is not of the form UPCAST(0,4)")};
    entry.opts.push_back(*opt);
  }
  entry.kernel = text_field(j, "kernel");
  entry.default_seconds = seconds_field(j, "default_seconds");
  entry.best_seconds = seconds_field(j, "best_seconds");
  entry.created = text_field(j, "created");
  entry.ast = text_field(j, "ast");
  return {key, entry};
}

// Why an entry's stored AST cannot be trusted; "" when it can, or when there is none (an older kiln's).
std::string ast_problem(const TuningKey& key, const TuningEntry& entry) {
  if (entry.ast.empty()) return "";
  try {
    std::string hash = hash_hex(hash_string(ast_text(parse_ast_text(entry.ast))));
    if (hash != key.ast_hash) return cat("its \"ast\" hashes to ", hash, ", not to its key's ", excerpt(key.ast_hash), " (edited by hand?)");
  } catch (const Error& e) {
    return cat("its \"ast\" is not a kernel AST: ", excerpt(e.what(), 300));
  }
  return "";
}

// --- the file -------------------------------------------------------------------------------------

// A cache file as read: its document when it can be trusted, else why not and what of it survives.
struct Loaded {
  bool exists = false;
  json doc;             // {"format", "schema", "entries"}: a fresh one when the file is missing or bad
  std::string problem;  // empty: missing or good
  // A bad file whose "entries" could still be told apart: doc holds those that parse and check.
  bool salvaged = false;
  size_t recovered = 0, lost = 0;
};

json empty_doc() { return {{"format", kFormat}, {"schema", kTuningCacheSchema}, {"entries", json::object()}}; }

// What a warning says about a bad file: the problem, and what of it is still used.
std::string problem_text(const Loaded& l) {
  if (!l.salvaged) return l.problem;
  return cat(l.problem, "; ", l.recovered, l.recovered == 1 ? " entry still parses and is" : " entries still parse and are",
             " used, ", l.lost, l.lost == 1 ? " entry is" : " entries are", " lost");
}

// The entries of a kiln tuning cache that does not parse whole (cut short, one value nlohmann refuses,
// an entry nested too deep), each parsed and checked on its own; the text of a foreign file is left alone.
void salvage(std::string_view text, Loaded& l) {
  size_t open = text.find_first_not_of(" \t\r\n");
  if (open == std::string_view::npos || text[open] != '{') return;
  tuning_file::Members top = tuning_file::object_members(text.substr(open));
  auto key_is = [](const tuning_file::Member& m, const char* name) {
    try {
      return tuning_file::parse_bounded(m.key) == name;
    } catch (const BadJson&) {
      return false;
    }
  };
  std::optional<std::string_view> entries;
  for (const tuning_file::Member& m : top.whole) {
    if (key_is(m, "entries") && m.value.starts_with("{")) entries = m.value;
    if (!key_is(m, "format") && !key_is(m, "schema")) continue;
    try {  // another program's file, or another schema: not ours to pick apart
      json value = tuning_file::parse_bounded(m.value);
      if (value != (key_is(m, "format") ? json(kFormat) : json(kTuningCacheSchema))) return;
    } catch (const BadJson&) {
      return;
    }
  }
  if (top.partial && key_is(*top.partial, "entries") && top.partial->value.starts_with("{")) entries = top.partial->value;
  if (!entries) return;
  l.salvaged = true;
  tuning_file::Members found = tuning_file::object_members(*entries);
  for (const tuning_file::Member& m : found.whole) {
    try {
      json name = tuning_file::parse_bounded(m.key), value = tuning_file::parse_bounded(m.value);
      if (!name.is_string()) throw BadJson{};
      parse_entry(name.get<std::string>(), value);
      l.doc["entries"][name.get<std::string>()] = std::move(value);
      ++l.recovered;
    } catch (const BadJson&) {
      ++l.lost;
    } catch (const BadEntry&) {
      ++l.lost;
    }
  }
  if (found.partial || (found.broken && found.stop < entries->size())) ++l.lost;
}

Loaded load(const fs::path& file) {
  Loaded l{false, empty_doc(), "", false, 0, 0};
  std::error_code ec;
  fs::file_status status = fs::status(file, ec);
  if (status.type() == fs::file_type::not_found) return l;
  l.exists = true;
  if (ec) {
    l.problem = cat("cannot be read: ", ec.message());
    return l;
  }
  if (status.type() == fs::file_type::directory) {
    l.problem = "is a directory, not a file";
    return l;
  }
  if (status.type() != fs::file_type::regular) {
    l.problem = "is not a regular file";
    return l;
  }
  uintmax_t size = fs::file_size(file, ec);
  if (!ec && size > tuning_file::kMaxBytes) {
    l.problem = cat("is ", size, " bytes, more than the ", tuning_file::kMaxBytes >> 20, " MiB a tuning cache may be (not a tuning cache?)");
    return l;
  }
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  if (!(in && text << in.rdbuf()) && size > 0) {
    l.problem = cat("cannot be read: ", std::strerror(errno));
    return l;
  }
  json doc;
  try {
    doc = tuning_file::parse_bounded(text.view());
  } catch (const BadJson& bad) {  // not JSON, cut short (a truncated file), too deep, a number out of range
    l.problem = bad.why;
    salvage(text.view(), l);
    return l;
  }
  auto format = doc.is_object() ? doc.find("format") : doc.end();
  if (!doc.is_object() || format == doc.end() || *format != kFormat) {
    l.problem = cat("is JSON but not a kiln tuning cache (no \"format\": \"", kFormat, "\")");
    return l;
  }
  auto schema = doc.find("schema");
  if (schema == doc.end() || !schema->is_number_integer() || *schema != kTuningCacheSchema) {
    l.problem = cat("is a kiln tuning cache of schema ", schema == doc.end() ? "(none)" : excerpt_json(*schema),
                    "; this kiln reads schema ", kTuningCacheSchema);
    return l;
  }
  auto entries = doc.find("entries");
  if (entries == doc.end() || !entries->is_object()) {
    l.problem = "is a kiln tuning cache without an \"entries\" object";
    return l;
  }
  l.doc = std::move(doc);
  return l;
}

// Writes `doc` to a temp file in `file`'s folder and renames it over `file`: readers see the old file
// or the new one, whole, never a mix. The new file keeps the old one's permissions; a first file gets
// what the umask gives any new file (mkstemp's 0600 would hide a shared cache from its other users).
void write_atomically(const fs::path& file, const json& doc) {
  // Strings the file held came through parse_bounded (valid UTF-8, capped depth); a device string
  // from a driver might not be UTF-8, and is written with U+FFFD instead of failing the store.
  std::string text = doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  static std::atomic<uint64_t> counter{0};
  std::string temp;
  int fd = -1;
  do {  // a name left behind by a killed process with the same pid is skipped
    temp = cat(file.parent_path().empty() ? std::string(".") : file.parent_path().string(), "/.", file.filename().string(),
               ".tmp-", getpid(), "-", counter++);
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  } while (fd < 0 && errno == EEXIST);
  if (fd < 0)
    throw Error(cat("tuning cache: cannot create a temporary file beside ", file, ": ", std::strerror(errno),
                    "; set KILN_CACHE_DIR to a writable directory"));
  struct stat old {};
  if (::stat(file.c_str(), &old) == 0 && S_ISREG(old.st_mode))
    fchmod(fd, old.st_mode & 07777);  // best effort: the data matters more than the mode
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  bool ok = done == text.size() && fsync(fd) == 0;
  ok = (close(fd) == 0) && ok;
  if (!ok || std::rename(temp.c_str(), file.c_str()) != 0) {
    int err = errno;
    unlink(temp.c_str());
    throw Error(cat("tuning cache: cannot write ", file, ": ", std::strerror(err), " (disk full? read-only?)"));
  }
}

// An advisory lock on <file>.lock for a read-merge-write; released (and the descriptor closed) on scope exit.
class FileLock {
 public:
  explicit FileLock(const fs::path& file) {
    std::error_code ec;
    if (!file.parent_path().empty()) fs::create_directories(file.parent_path(), ec);
    if (ec)
      throw Error(cat("tuning cache: cannot create the directory ", file.parent_path(), ": ", ec.message(),
                      "; set KILN_CACHE_DIR to a writable directory"));
    std::string path = file.string() + ".lock";
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw Error(cat("tuning cache: cannot open the lock file ", path, ": ", std::strerror(errno),
                      "; set KILN_CACHE_DIR to a writable directory"));
    while (flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      int err = errno;
      close(fd_);
      throw Error(cat("tuning cache: cannot lock ", path, ": ", std::strerror(err)));
    }
  }
  ~FileLock() { close(fd_); }  // closing the descriptor releases the lock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

// --- keys -----------------------------------------------------------------------------------------

std::string TuningKey::str() const {
  return cat(ast_hash, " | ", device, " | ", renderer, " | actions=", action_space, " | ", search, " | schema=", schema);
}

std::string ast_text(const UOpPtr& ast) { return serialize_program(toposort(ast)); }  // not a rewrite: text out

UOpPtr parse_ast_text(const std::string& text) {
  // Counted before parsing: parse_program holds a record per line.
  if (size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); lines > kMaxKernelAstNodes + 1)
    throw Error(cat("parse_ast_text: ", lines, " lines, more than a kernel AST of at most ", kMaxKernelAstNodes, " nodes has"));
  std::vector<UOpPtr> nodes = parse_program(text);
  if (nodes.empty()) throw Error("parse_ast_text: the text holds no nodes; expected ast_text() of a kernel AST");
  if (nodes.back()->op != Op::SINK)  // toposort puts the root last
    throw Error(cat("parse_ast_text: the root is ", op_name(nodes.back()->op), ", not SINK; expected ast_text() of a kernel AST"));
  check_kernel_ast(nodes.back());
  return nodes.back();
}

// The thread count is in it: a kernel split over 2 cores may want other opts than over 16.
std::string device_fingerprint(const DeviceSpec& spec) { return cat(spec.name, " ", spec.arch, " ", spec.compiler, " threads=", spec.threads); }

TuningKey tuning_key(const UOpPtr& ast, const DeviceSpec& spec, const std::string& search_params) {
  return TuningKey{hash_hex(hash_string(ast_text(ast))), device_fingerprint(spec), language_name(spec.lang),
                   kActionSpaceVersion, search_params, kTuningCacheSchema};
}

// --- the cache ------------------------------------------------------------------------------------

TuningCache::TuningCache() : TuningCache(fs::path(config().cache_dir) / "tuning.json") {}
TuningCache::TuningCache(fs::path file) : file_(std::move(file)) {}
const fs::path& TuningCache::file() const { return file_; }
std::vector<std::string> TuningCache::warnings() const { return warnings_; }

void TuningCache::warn(std::string message) {
  for (const std::string& w : warnings_)
    if (w == message) return;
  warnings_.push_back(std::move(message));
}

namespace {

// The warning for a bad file a read found: what is wrong, what of it is used, and what happens next.
std::string ignored_text(const fs::path& file, const Loaded& l) {
  if (!l.salvaged) return cat("tuning cache: ", file, " ", l.problem, "; ignored (the next store moves it aside)");
  return cat("tuning cache: ", file, " ", problem_text(l), " (the next store moves the file aside and keeps them)");
}

// The file's document for a read-merge-write (the lock held): a bad file is moved aside first, and
// the entries that could be salvaged from it start the new one.
json load_for_write(const fs::path& file, const std::function<void(std::string)>& warn) {
  Loaded l = load(file);
  if (l.problem.empty()) return std::move(l.doc);
  fs::path aside = file.string() + ".corrupt-" + utc_now("%Y%m%dT%H%M%SZ");
  for (int n = 2; fs::exists(aside); ++n) aside = file.string() + ".corrupt-" + utc_now("%Y%m%dT%H%M%SZ") + cat("-", n);
  std::error_code ec;
  fs::rename(file, aside, ec);
  if (ec)
    throw Error(cat("tuning cache: ", file, " ", l.problem, "; it could not be moved aside to ", aside, " (",
                    ec.message(), "), so nothing was written. Move or delete it, or set KILN_CACHE_DIR"));
  warn(cat("tuning cache: ", file, " ", problem_text(l), "; moved it aside to ", aside, " and started a new file",
           l.recovered > 0 ? cat(" with the ", l.recovered, " that parse") : ""));
  return std::move(l.doc);
}

}  // namespace

std::optional<TuningEntry> TuningCache::lookup(const TuningKey& key) {
  Loaded l = load(file_);
  if (!l.problem.empty()) warn(ignored_text(file_, l));
  const json& entries = l.doc["entries"];
  auto it = entries.find(key.str());
  if (it == entries.end()) return std::nullopt;
  try {
    auto [stored_key, entry] = parse_entry(it.key(), *it);
    if (stored_key == key) return entry;
  } catch (const BadEntry& bad) {
    warn(cat("tuning cache: ", file_, ": entry \"", excerpt(it.key(), 200), "\" ignored: ", bad.why));
  }
  return std::nullopt;
}

void TuningCache::store(const TuningKey& key, const TuningEntry& entry) {
  if (key.schema != kTuningCacheSchema || key.ast_hash.empty() || key.device.empty())
    throw Error(cat("tuning cache: store with the key \"", key.str(), "\": make keys with tuning_key() (schema ",
                    kTuningCacheSchema, ", an AST hash and a device fingerprint)"));
  TuningEntry stamped = entry;
  if (stamped.created.empty()) stamped.created = utc_now("%Y-%m-%dT%H:%M:%SZ");
  FileLock lock(file_);
  json doc = load_for_write(file_, [this](std::string m) { warn(std::move(m)); });
  doc["entries"][key.str()] = entry_json(key, stamped);
  write_atomically(file_, doc);
}

std::vector<std::pair<TuningKey, TuningEntry>> TuningCache::entries() {
  std::vector<std::pair<TuningKey, TuningEntry>> out;
  Loaded l = load(file_);
  if (!l.problem.empty()) warn(ignored_text(file_, l));
  for (auto it = l.doc["entries"].begin(); it != l.doc["entries"].end(); ++it) {
    try {
      out.push_back(parse_entry(it.key(), *it));
    } catch (const BadEntry& bad) {
      warn(cat("tuning cache: ", file_, ": entry \"", excerpt(it.key(), 200), "\" ignored: ", bad.why));
    }
  }
  return out;
}

bool TuningCache::remove(const TuningKey& key) {
  FileLock lock(file_);
  Loaded l = load(file_);
  if (!l.problem.empty() || !l.doc["entries"].contains(key.str())) return false;
  l.doc["entries"].erase(key.str());
  write_atomically(file_, l.doc);
  return true;
}

size_t TuningCache::clear() {
  FileLock lock(file_);
  if (!load(file_).problem.empty()) {
    load_for_write(file_, [this](std::string m) { warn(std::move(m)); });  // a bad file is set aside, not deleted
    return 0;
  }
  size_t count = entries().size();
  std::error_code ec;
  fs::remove(file_, ec);
  if (ec) throw Error(cat("tuning cache: cannot delete ", file_, ": ", ec.message()));
  return count;
}

size_t TuningCache::export_to(const fs::path& dest) {
  Loaded l = load(file_);
  if (!l.problem.empty() && l.recovered == 0)
    throw Error(cat("tuning cache: export: ", file_, " ", l.problem, "; nothing to export (`kiln cache clear` sets it aside)"));
  json doc = empty_doc();
  std::vector<std::pair<TuningKey, TuningEntry>> valid = entries();
  for (const auto& [key, entry] : valid) doc["entries"][key.str()] = entry_json(key, entry);
  write_atomically(dest, doc);
  return valid.size();
}

ImportReport TuningCache::import_from(const fs::path& source) {
  Loaded in = load(source);
  if (!in.exists) throw Error(cat("tuning cache: import: ", source, " does not exist; name a file `kiln cache export` wrote"));
  if (!in.problem.empty()) throw Error(cat("tuning cache: import: refused ", source, ": it ", in.problem));
  ImportReport report;
  FileLock lock(file_);
  json doc = load_for_write(file_, [this](std::string m) { warn(std::move(m)); });
  json& mine = doc["entries"];
  for (auto it = in.doc["entries"].begin(); it != in.doc["entries"].end(); ++it) {
    std::pair<TuningKey, TuningEntry> theirs;
    try {
      theirs = parse_entry(it.key(), *it);
    } catch (const BadEntry& bad) {
      report.refused.push_back(cat("\"", excerpt(it.key(), 200), "\": ", bad.why));
      continue;
    }
    if (theirs.first.schema != kTuningCacheSchema) {
      report.refused.push_back(cat("\"", excerpt(it.key(), 200), "\": its key has schema ", theirs.first.schema,
                                   "; this kiln reads schema ", kTuningCacheSchema));
      continue;
    }
    if (std::string why = ast_problem(theirs.first, theirs.second); !why.empty()) {
      report.refused.push_back(cat("\"", excerpt(it.key(), 200), "\": ", why));
      continue;
    }
    auto existing = mine.find(it.key());
    if (existing != mine.end()) {
      try {
        if (parse_entry(existing.key(), *existing).second.best_seconds <= theirs.second.best_seconds) {
          ++report.kept;
          continue;
        }
        ++report.replaced;
      } catch (const BadEntry&) {  // the entry here is not trusted: the imported one replaces it
        ++report.replaced;
      }
    } else {
      ++report.added;
    }
    mine[it.key()] = entry_json(theirs.first, theirs.second);
  }
  write_atomically(file_, doc);
  return report;
}

}  // namespace kiln
