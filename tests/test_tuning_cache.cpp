// The tuning cache (search/tuning_cache.h) and checking cached winners (search/verify.h): keys, the
// file's round trip, two writer processes at once, bad files, export/import and verify.
#include <sys/stat.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "devices/device.h"
#include "frontend/tensor.h"
#include "helpers.h"
#include "lower/opts.h"
#include "search/actions.h"
#include "search/tuning_cache.h"
#include "search/verify.h"
#include "uop/hash.h"

namespace kiln {
namespace {

using test::TempDir;
namespace fs = std::filesystem;

// out[i] = in[i] * scale for i < n: a kernel AST built by hand, as the scheduler writes them.
UOpPtr scale_ast(int64_t n, double scale) {
  DType ptr = dtypes::float32.ptr();
  UOpPtr out = UOp::make(Op::DEFINE_GLOBAL, ptr, {}, int64_t{0}), in = UOp::make(Op::DEFINE_GLOBAL, ptr, {}, int64_t{1});
  UOpPtr i = range(0, const_int(n));
  UOpPtr x = UOp::make(Op::LOAD, dtypes::float32, {UOp::make(Op::INDEX, ptr, {in, i})});
  UOpPtr store = UOp::make(Op::STORE, dtypes::void_, {UOp::make(Op::INDEX, ptr, {out, i}), x * const_of(dtypes::float32, scale)});
  return UOp::make(Op::SINK, dtypes::void_, {store});
}

// The one kernel the scheduler makes for sum((a * 2 + 1), axis 1) of a 4x16 tensor.
UOpPtr scheduled_ast() {
  std::vector<float> data(64);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i % 7) - 3;
  Tensor a = Tensor::from_vector(data, {4, 16}, "CPU");
  Schedule s = Tensor::schedule({(a * 2.0 + 1.0).sum({1})});
  REQUIRE(s.items.size() == 1);
  return s.items[0].ast;
}

// A key made by hand, for tests about the file rather than about kernels.
TuningKey fake_key(int i, const std::string& device = "CPU test-arch test-cc 1") {
  return TuningKey{cat("hash", i), device, "C", kActionSpaceVersion, "beam=2", kTuningCacheSchema};
}

TuningEntry fake_entry(int i) {
  TuningEntry e;
  e.opts = {Opt{OptOp::UPCAST, 0, 4}, Opt{OptOp::UNROLL, 1, i % 8 + 1}};
  e.kernel = cat("r_", i);
  e.default_seconds = 2e-3;
  e.best_seconds = 1e-3;
  return e;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

std::string lines(const std::vector<std::string>& texts) {
  std::string out;
  for (const std::string& t : texts) out += t + "\n";
  return out;
}

std::string all_warnings(const TuningCache& c) { return lines(c.warnings()); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<fs::path> set_aside(const TempDir& dir) {
  std::vector<fs::path> out;
  for (const std::string& name : dir.files())
    if (name.starts_with("tuning.json.corrupt-")) out.push_back(dir.path / name);
  return out;
}

// --- keys -----------------------------------------------------------------------------------------

TEST_CASE("the AST hash is the hash of the AST's canonical text, pinned across runs and processes", "[cache]") {
  // Changing this value changes every cache key: do it only on purpose (with the serializer's version).
  const DeviceSpec& spec = get_device("CPU").spec();
  const std::string text =
      "kiln-uops 1\n"
      "0 DEFINE_GLOBAL float32* [] int:0\n"
      "1 CONST int32 [] const.int:16\n"
      "2 RANGE int32 [1] int:0\n"
      "3 INDEX float32* [0,2] -\n"
      "4 DEFINE_GLOBAL float32* [] int:1\n"
      "5 INDEX float32* [4,2] -\n"
      "6 LOAD float32 [5] -\n"
      "7 CONST float32 [] const.double:0x4000000000000000  # 2\n"
      "8 MUL float32 [6,7] -\n"
      "9 STORE void [3,8] -\n"
      "10 SINK void [9] -\n";
  CHECK(ast_text(scale_ast(16, 2.0)) == text);
  TuningKey key = tuning_key(scale_ast(16, 2.0), spec, "beam=2");
  CHECK(key.ast_hash == hash_hex(hash_string(text)));
  CHECK(key.ast_hash == "2e3254def45ed796");
  CHECK(key.device == device_fingerprint(spec));
  CHECK(key.renderer == language_name(spec.lang));
  CHECK(key.action_space == kActionSpaceVersion);
  CHECK(key.search == "beam=2");
  CHECK(key.schema == kTuningCacheSchema);
}

TEST_CASE("the AST hash depends on the kernel, not on where its nodes live", "[cache]") {
  const DeviceSpec& spec = get_device("CPU").spec();
  std::string first = tuning_key(scheduled_ast(), spec, "").ast_hash;
  std::vector<UOpPtr> unrelated;  // other nodes in between, so a rebuilt graph lands at other addresses
  for (int i = 0; i < 100; ++i) unrelated.push_back(var(cat("v", i), 0, i + 1));
  CHECK(tuning_key(scheduled_ast(), spec, "").ast_hash == first);
  CHECK(tuning_key(scale_ast(16, 2.0), spec, "").ast_hash != tuning_key(scale_ast(16, 3.0), spec, "").ast_hash);
  CHECK(tuning_key(scale_ast(16, 2.0), spec, "").ast_hash != tuning_key(scale_ast(17, 2.0), spec, "").ast_hash);
}

TEST_CASE("the stored AST text rebuilds the same AST", "[cache]") {
  UOpPtr ast = scheduled_ast();
  CHECK(parse_ast_text(ast_text(ast)) == ast);
  CHECK_THROWS_AS(parse_ast_text("kiln-uops 1\n"), Error);
  CHECK_THROWS_AS(parse_ast_text("not an AST"), Error);
  CHECK_THROWS_WITH(parse_ast_text(ast_text(const_int(3))), Catch::Contains("not SINK"));
}

// --- the file -------------------------------------------------------------------------------------

TEST_CASE("an entry stored is read back whole by another cache object on the same file", "[cache]") {
  TempDir dir;
  TuningKey key = tuning_key(scheduled_ast(), get_device("CPU").spec(), "beam=2");
  TuningEntry entry = fake_entry(3);
  entry.ast = ast_text(scheduled_ast());
  TuningCache(dir.path / "tuning.json").store(key, entry);

  TuningCache cache(dir.path / "tuning.json");
  std::optional<TuningEntry> hit = cache.lookup(key);
  REQUIRE(hit);
  CHECK(hit->opts == entry.opts);
  CHECK(hit->kernel == entry.kernel);
  CHECK(hit->default_seconds == entry.default_seconds);
  CHECK(hit->best_seconds == entry.best_seconds);
  CHECK(hit->ast == entry.ast);
  CHECK(hit->created.size() == 20);  // store() stamps it: 2026-11-30T12:00:00Z
  auto all = cache.entries();
  REQUIRE(all.size() == 1);
  CHECK(all[0].first == key);
  CHECK(cache.warnings().empty());
  // The file is for people too: the kernel name and the opts are there as text.
  std::string text = read_text(dir.path / "tuning.json");
  CHECK(contains(text, "\"kiln-tuning-cache\""));
  CHECK(contains(text, "\"UPCAST(0,4)\""));
}

TEST_CASE("the second run of the same kernel hits what the first run stored", "[cache]") {
  TempDir dir;
  const DeviceSpec& spec = get_device("CPU").spec();
  {  // first run: a miss, then the search's result is stored
    TuningCache cache(dir.path / "tuning.json");
    TuningKey key = tuning_key(scheduled_ast(), spec, "beam=2");
    REQUIRE_FALSE(cache.lookup(key));
    cache.store(key, fake_entry(1));
  }
  // second run: the graph is built again from scratch
  TuningCache cache(dir.path / "tuning.json");
  std::optional<TuningEntry> hit = cache.lookup(tuning_key(scheduled_ast(), spec, "beam=2"));
  REQUIRE(hit);
  CHECK(hit->opts == fake_entry(1).opts);
}

TEST_CASE("a changed device fingerprint, action-space version, renderer or search misses", "[cache]") {
  TempDir dir;
  TuningCache cache(dir.path / "tuning.json");
  TuningKey key = tuning_key(scale_ast(16, 2.0), get_device("CPU").spec(), "beam=2");
  cache.store(key, fake_entry(1));
  REQUIRE(cache.lookup(key));

  TuningKey other = key;
  other.device += " (another compiler version)";
  CHECK_FALSE(cache.lookup(other));
  other = key;
  other.action_space = kActionSpaceVersion + 1;
  CHECK_FALSE(cache.lookup(other));
  other = key;
  other.renderer = "OpenCL C";
  CHECK_FALSE(cache.lookup(other));
  other = key;
  other.search = "beam=4";
  CHECK_FALSE(cache.lookup(other));
  CHECK_FALSE(cache.lookup(tuning_key(scale_ast(16, 2.0), get_device("REF").spec(), "beam=2")));
  CHECK(cache.warnings().empty());
}

TEST_CASE("two processes storing at once both keep every entry", "[cache]") {
  TempDir dir;
  fs::path file = dir.path / "tuning.json";
  const int per_process = 60;
  std::vector<pid_t> children;
  for (int p = 0; p < 2; ++p) {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // the child: no Catch2 here, only an exit status
      int status = 0;
      try {
        TuningCache cache(file);
        for (int i = 0; i < per_process; ++i) cache.store(fake_key(p * 1000 + i), fake_entry(i));
      } catch (...) {
        status = 1;
      }
      _exit(status);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  TuningCache cache(file);
  CHECK(cache.entries().size() == 2 * per_process);
  for (int p = 0; p < 2; ++p)
    for (int i = 0; i < per_process; ++i) {
      INFO("process " << p << " entry " << i);
      CHECK(cache.lookup(fake_key(p * 1000 + i)));
    }
  CHECK(cache.warnings().empty());
  CHECK(set_aside(dir).empty());
  for (const std::string& name : dir.files()) CHECK_FALSE(contains(name, ".tmp-"));  // no temp file left behind
}

TEST_CASE("a writer killed with SIGKILL mid-store leaves a cache that loads with every earlier entry", "[cache]") {
  TempDir dir;
  fs::path file = dir.path / "tuning.json";
  for (int round = 0; round < 4; ++round) {
    int before = static_cast<int>(TuningCache(file).entries().size());
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // the child stores new entries until it is killed
      try {
        TuningCache cache(file);
        for (int i = before;; ++i) cache.store(fake_key(i), fake_entry(i));
      } catch (...) {
      }
      _exit(1);
    }
    // Once it has stored a few (however slow this machine is), kill it a little later each round: it
    // stores without pause, so the kill lands while it is rewriting the file.
    for (int waited = 0; TuningCache(file).entries().size() < static_cast<size_t>(before + 2) && waited < 20000; ++waited) usleep(1000);
    usleep(static_cast<useconds_t>(700 * round));
    REQUIRE(kill(pid, SIGKILL) == 0);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFSIGNALED(status));
    TuningCache cache(file);
    int n = static_cast<int>(cache.entries().size());
    INFO("round " << round << ": " << before << " entries before, " << n << " after; " << all_warnings(cache));
    CHECK(cache.warnings().empty());
    CHECK(n > before);
    for (int i = 0; i < n; ++i) CHECK(cache.lookup(fake_key(i)));  // the entries are 0..n-1: none lost
    cache.store(fake_key(n), fake_entry(n));  // the dead writer's lock went with it
    CHECK(TuningCache(file).entries().size() == static_cast<size_t>(n + 1));
  }
  CHECK(set_aside(dir).empty());
}

// The bad files: each is reported, never trusted, and set aside (not destroyed) by the next store.
void check_bad_file(const std::string& contents, const std::string& expected_warning) {
  TempDir dir;
  fs::path file = dir.path / "tuning.json";
  write_text(file, contents);
  TuningCache cache(file);
  CHECK_FALSE(cache.lookup(fake_key(1)));
  CHECK(cache.entries().empty());
  std::string warnings = all_warnings(cache);
  INFO(warnings);
  CHECK(contains(warnings, file.string()));
  CHECK(contains(warnings, expected_warning));
  CHECK_THROWS_AS(cache.export_to(dir.path / "out.json"), Error);

  cache.store(fake_key(2), fake_entry(2));
  CHECK(contains(all_warnings(cache), "moved it aside"));
  std::vector<fs::path> aside = set_aside(dir);
  REQUIRE(aside.size() == 1);
  CHECK(read_text(aside[0]) == contents);  // the bad file, byte for byte
  TuningCache fresh(file);
  CHECK(fresh.lookup(fake_key(2)));
  CHECK(fresh.entries().size() == 1);
  CHECK(fresh.warnings().empty());
}

TEST_CASE("an empty cache file is reported, missed and set aside", "[cache]") { check_bad_file("", "is not valid JSON"); }

// A good file of entries 0..n-1, as text.
std::string good_file_text(int n) {
  TempDir dir;
  TuningCache good(dir.path / "tuning.json");
  for (int i = 0; i < n; ++i) good.store(fake_key(i), fake_entry(i));
  return read_text(dir.path / "tuning.json");
}

// A bad file whose other entries still parse: they are used, the count lost is said, and the next
// store sets the file aside byte for byte and starts the new one with them.
void check_salvaged_file(const std::string& contents, const std::string& expected_problem, const std::vector<int>& kept, int lost) {
  TempDir dir;
  fs::path file = dir.path / "tuning.json";
  write_text(file, contents);
  TuningCache cache(file);
  for (int i : kept) CHECK(cache.lookup(fake_key(i)));
  CHECK(cache.entries().size() == kept.size());
  std::string warnings = all_warnings(cache);
  INFO(warnings);
  CHECK(contains(warnings, file.string()));
  CHECK(contains(warnings, expected_problem));
  CHECK(contains(warnings, cat(kept.size(), kept.size() == 1 ? " entry still parses" : " entries still parse")));
  CHECK(contains(warnings, cat(lost, lost == 1 ? " entry is lost" : " entries are lost")));
  CHECK(warnings.size() < 2000);  // a bad value is quoted short, never whole

  cache.store(fake_key(99), fake_entry(99));
  CHECK(contains(all_warnings(cache), "moved it aside"));
  std::vector<fs::path> aside = set_aside(dir);
  REQUIRE(aside.size() == 1);
  CHECK(read_text(aside[0]) == contents);
  TuningCache fresh(file);
  CHECK(fresh.entries().size() == kept.size() + 1);
  for (int i : kept) CHECK(fresh.lookup(fake_key(i)));
  CHECK(fresh.lookup(fake_key(99)));
  CHECK(fresh.warnings().empty());
}

TEST_CASE("a truncated cache file keeps the entries before the cut and says how many were lost", "[cache]") {
  std::string text = good_file_text(3);
  size_t third = text.find(fake_key(2).str());  // entries are in key order: hash0, hash1, hash2
  REQUIRE(third != std::string::npos);
  check_salvaged_file(text.substr(0, third + 100), "is not valid JSON", {0, 1}, 1);
  check_salvaged_file(text.substr(0, third - 1), "is not valid JSON", {0, 1}, 0);  // cut between two entries
}

TEST_CASE("a number out of range in one entry names the file, and the other entries are kept", "[cache]") {
  std::string text = good_file_text(3);
  size_t at = text.find("\"best_seconds\"", text.find(fake_key(1).str()));
  REQUIRE(at != std::string::npos);
  size_t value = text.find(':', at) + 2;
  text.replace(value, text.find(',', value) - value, "1e400");
  check_salvaged_file(text, "holds a number out of range", {0, 2}, 1);
}

TEST_CASE("an entry nested 60,000 levels deep is refused without recursing, and the others are kept", "[cache]") {
  std::string text = good_file_text(3);
  std::string opts = "\"opts\": [";
  size_t at = text.find(opts, text.find(fake_key(1).str()));
  REQUIRE(at != std::string::npos);
  text.insert(at + opts.size(), std::string(60000, '[') + std::string(60000, ']') + ", ");
  check_salvaged_file(text, "nests JSON more than 16 levels deep", {0, 2}, 1);
}

TEST_CASE("a tuning.json that is a directory is reported as one and set aside", "[cache]") {
  TempDir dir;
  fs::path file = dir.path / "tuning.json";
  fs::create_directories(file / "inside");
  TuningCache cache(file);
  CHECK_FALSE(cache.lookup(fake_key(1)));
  CHECK(contains(all_warnings(cache), "is a directory, not a file"));
  CHECK_FALSE(contains(all_warnings(cache), "JSON"));
  cache.store(fake_key(1), fake_entry(1));
  REQUIRE(set_aside(dir).size() == 1);
  CHECK(fs::is_directory(set_aside(dir)[0] / "inside"));  // moved, not deleted
  CHECK(TuningCache(file).lookup(fake_key(1)));
}

TEST_CASE("an action_space or schema too big for an int is refused with its value, not narrowed", "[cache]") {
  TempDir dir;
  fs::path file = dir.path / "tuning.json";
  TuningKey key = fake_key(1);
  std::string text = good_file_text(2);
  // 4294967297 narrows to 1 (kActionSpaceVersion): name the entry with what the narrowed key would say
  std::string field = cat("\"action_space\": ", kActionSpaceVersion);
  size_t at = text.find(field, text.find(key.str()));
  REQUIRE(at != std::string::npos);
  text.replace(at, field.size(), cat("\"action_space\": ", (int64_t{1} << 32) + kActionSpaceVersion));
  write_text(file, text);
  TuningCache cache(file);
  CHECK_FALSE(cache.lookup(key));
  CHECK(cache.lookup(fake_key(0)));
  INFO(all_warnings(cache));
  CHECK(contains(all_warnings(cache), cat("\"action_space\" is ", (int64_t{1} << 32) + kActionSpaceVersion, ", not a version number")));
  CHECK_FALSE(contains(all_warnings(cache), "edited by hand"));
}

TEST_CASE("a rewrite keeps the cache file's permissions, a new file gets what the umask gives", "[cache]") {
  TempDir dir;
  fs::path file = dir.path / "tuning.json";
  mode_t old_mask = umask(022);
  TuningCache(file).store(fake_key(1), fake_entry(1));
  umask(old_mask);
  CHECK((fs::status(file).permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read));
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  TuningCache(file).store(fake_key(2), fake_entry(2));
  CHECK((fs::status(file).permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
}

TEST_CASE("a corrupt cache file is reported, missed and set aside", "[cache]") {
  check_bad_file("\x7f" "ELF\x01\x02 this is not json at all", "is not valid JSON");
  check_bad_file("{\"format\": \"kiln-tuning-cache\", \"schema\": 1, \"entries\": {", "is not valid JSON");
}

TEST_CASE("a foreign JSON file (another program's, another schema) is reported, missed and set aside", "[cache]") {
  check_bad_file("{\"editor.fontSize\": 14}", "not a kiln tuning cache");
  check_bad_file("[1, 2, 3]", "not a kiln tuning cache");
  check_bad_file("{\"format\": \"kiln-tuning-cache\", \"schema\": 99, \"entries\": {}}", "schema 99");
  check_bad_file("{\"format\": \"kiln-tuning-cache\", \"schema\": 1}", "without an \"entries\" object");
}

TEST_CASE("a bad entry in a good file is skipped with a warning and kept when others are written", "[cache]") {
  TempDir dir;
  fs::path file = dir.path / "tuning.json";
  TuningCache(file).store(fake_key(1), fake_entry(1));
  std::string text = read_text(file);
  std::string good = "\"UPCAST(0,4)\"";
  text.replace(text.find(good), good.size(), "\"UPCAST(zero,4)\"");  // a hand edit gone wrong
  write_text(file, text);

  TuningCache cache(file);
  CHECK_FALSE(cache.lookup(fake_key(1)));
  CHECK(contains(all_warnings(cache), "UPCAST(zero,4)"));
  cache.store(fake_key(2), fake_entry(2));
  CHECK(cache.entries().size() == 1);
  CHECK(contains(read_text(file), "UPCAST(zero,4)"));  // still there for the person who edited it
  CHECK(set_aside(dir).empty());
}

TEST_CASE("store refuses a key not made by tuning_key", "[cache]") {
  TempDir dir;
  TuningCache cache(dir.path / "tuning.json");
  CHECK_THROWS_WITH(cache.store(TuningKey{}, fake_entry(1)), Catch::Contains("make keys with tuning_key()"));
  CHECK_FALSE(fs::exists(dir.path / "tuning.json"));
}

TEST_CASE("remove and clear delete entries and say how many", "[cache]") {
  TempDir dir;
  TuningCache cache(dir.path / "tuning.json");
  for (int i = 0; i < 3; ++i) cache.store(fake_key(i), fake_entry(i));
  CHECK(cache.remove(fake_key(1)));
  CHECK_FALSE(cache.remove(fake_key(1)));
  CHECK_FALSE(cache.lookup(fake_key(1)));
  CHECK(cache.lookup(fake_key(2)));
  CHECK(cache.clear() == 2);
  CHECK_FALSE(fs::exists(cache.file()));
  CHECK(cache.entries().empty());
  CHECK(cache.clear() == 0);
}

TEST_CASE("export writes the entries, import merges them and the faster winner stays", "[cache]") {
  TempDir dir;
  TuningCache a(dir.path / "a.json"), b(dir.path / "b.json");
  for (int i = 0; i < 3; ++i) a.store(fake_key(i), fake_entry(i));
  CHECK(a.export_to(dir.path / "exported.json") == 3);

  TuningEntry slow = fake_entry(0), fast = fake_entry(2);
  slow.best_seconds = 5e-3;
  fast.best_seconds = 1e-4;
  fast.opts = {Opt{OptOp::UPCAST, 0, 8}};
  b.store(fake_key(0), slow);   // a's entry is faster: replaced
  b.store(fake_key(2), fast);   // b's entry is faster: kept
  b.store(fake_key(7), fake_entry(7));
  ImportReport r = b.import_from(dir.path / "exported.json");
  CHECK(r.added == 1);
  CHECK(r.replaced == 1);
  CHECK(r.kept == 1);
  CHECK(r.refused.empty());
  CHECK(b.entries().size() == 4);
  CHECK(b.lookup(fake_key(0))->best_seconds == fake_entry(0).best_seconds);
  CHECK(b.lookup(fake_key(2))->opts == fast.opts);
  CHECK(b.lookup(fake_key(1))->opts == fake_entry(1).opts);

  ImportReport again = b.import_from(dir.path / "exported.json");
  CHECK(again.added == 0);
  CHECK(again.kept == 3);
}

TEST_CASE("import refuses foreign files whole and entries of another schema one by one", "[cache]") {
  TempDir dir;
  TuningCache cache(dir.path / "tuning.json");
  cache.store(fake_key(1), fake_entry(1));
  write_text(dir.path / "foreign.json", "{\"format\": \"something-else\"}");
  CHECK_THROWS_WITH(cache.import_from(dir.path / "foreign.json"), Catch::Contains("not a kiln tuning cache"));
  write_text(dir.path / "newer.json", "{\"format\": \"kiln-tuning-cache\", \"schema\": 2, \"entries\": {}}");
  CHECK_THROWS_WITH(cache.import_from(dir.path / "newer.json"), Catch::Contains("this kiln reads schema 1"));
  write_text(dir.path / "cut.json", "{\"format\": \"kiln-tuning-c");
  CHECK_THROWS_WITH(cache.import_from(dir.path / "cut.json"), Catch::Contains("not valid JSON"));
  CHECK_THROWS_WITH(cache.import_from(dir.path / "missing.json"), Catch::Contains("does not exist"));

  // A schema-1 file holding one entry whose key says schema 2, and one entry that is not an object.
  TuningKey odd = fake_key(5);
  odd.schema = 2;
  TuningCache other(dir.path / "other.json");
  other.store(fake_key(6), fake_entry(6));
  std::string text = read_text(dir.path / "other.json");
  std::string entries = "\"entries\": {";
  text.insert(text.find(entries) + entries.size(),
              cat("\"", odd.str(), "\": {\"key\": {\"ast_hash\": \"hash5\", \"device\": \"", odd.device,
                  "\", \"renderer\": \"C\", \"action_space\": ", kActionSpaceVersion,
                  ", \"search\": \"beam=2\", \"schema\": 2}, \"kernel\": \"k\", \"opts\": [], \"default_seconds\": 1,",
                  " \"best_seconds\": 1, \"created\": \"\", \"ast\": \"\"}, \"junk\": 5, "));
  write_text(dir.path / "other.json", text);
  ImportReport r = cache.import_from(dir.path / "other.json");
  CHECK(r.added == 1);
  REQUIRE(r.refused.size() == 2);
  std::string refused = lines(r.refused);
  INFO(refused);
  CHECK(contains(refused, "its key has schema 2"));
  CHECK(contains(refused, "\"junk\": not a JSON object"));
  CHECK(cache.entries().size() == 2);
}

UOpPtr matmul_ast();

// An AST that parses and whose root is a SINK, but that no scheduler writes: it stores an int32
// into a float32 buffer. Lowering it used to break an internal invariant ("this is a kiln bug").
UOpPtr malformed_ast() {
  DType ptr = dtypes::float32.ptr();
  UOpPtr out = UOp::make(Op::DEFINE_GLOBAL, ptr, {}, int64_t{0});
  UOpPtr i = range(0, const_int(8));
  return UOp::make(Op::SINK, dtypes::void_, {UOp::make(Op::STORE, dtypes::void_, {UOp::make(Op::INDEX, ptr, {out, i}), i})});
}

TEST_CASE("parse_ast_text refuses text that parses but is not a kernel AST, naming the node", "[cache]") {
  CHECK_THROWS_WITH(parse_ast_text(ast_text(malformed_ast())), Catch::Contains("the value stored is int32 into a buffer of float32"));
  UOpPtr nested_sink = UOp::make(Op::SINK, dtypes::void_, {UOp::make(Op::SINK, dtypes::void_, {})});
  CHECK_THROWS_WITH(parse_ast_text(ast_text(nested_sink)), Catch::Contains("node 0 (SINK void): a SINK below the root"));
  std::string text = ast_text(scale_ast(16, 2.0));
  text.replace(text.find("DEFINE_GLOBAL float32* [] int:1"), 31, "DEFINE_GLOBAL float32* [] int:5");
  CHECK_THROWS_WITH(parse_ast_text(text), Catch::Contains("slot 5 is out of place"));
  // Found by fuzz/fuzz_kernel_text: a REDUCE over the output loop broke an invariant of linearize.
  std::string reduce_over_output =
      "kiln-uops 1\n0 DEFINE_GLOBAL float32* [] int:0\n1 CONST int32 [] const.int:2\n2 RANGE int32 [1] int:0\n"
      "3 INDEX float32* [0,2] -\n4 DEFINE_GLOBAL float32* [] int:1\n5 CONST int32 [] const.int:16\n6 RANGE int32 [5] int:1\n"
      "7 MUL int32 [2,5] -\n8 ADD int32 [7,6] -\n9 INDEX float32* [4,8] -\n10 LOAD float32 [9] -\n"
      "11 REDUCE float32 [10,2] op:ADD\n12 STORE void [3,11] -\n13 SINK void [12] -\n";
  CHECK_THROWS_WITH(parse_ast_text(reduce_over_output), Catch::Contains("the value stored runs over the RANGE with axis id 1"));
  // Also found by it: lowering a loop that never runs made graph_rewrite loop ("rules loop").
  std::string empty_loop = ast_text(scale_ast(16, 2.0));
  empty_loop.replace(empty_loop.find("const.int:16"), 12, "const.int:0");
  CHECK_THROWS_WITH(parse_ast_text(empty_loop), Catch::Contains("node 2 (RANGE int32): a RANGE whose end is 0"));
  CHECK_NOTHROW(parse_ast_text(ast_text(scheduled_ast())));
  CHECK_NOTHROW(parse_ast_text(ast_text(matmul_ast())));
}

TEST_CASE("import refuses an entry whose AST is garbage or hashes to another key, and imports the rest", "[cache]") {
  TempDir dir;
  const DeviceSpec& spec = get_device("CPU").spec();
  UOpPtr ast = scheduled_ast();
  TuningKey good_key = tuning_key(ast, spec, "beam=2"), garbage_key = fake_key(1), other_key = fake_key(2);
  TuningEntry good = fake_entry(0), garbage = fake_entry(1), other = fake_entry(2);
  good.ast = ast_text(ast);
  garbage.ast = "kiln-uops 1\n0 SINK void [7] -\n";
  other.ast = ast_text(ast);  // a real AST, but not the one fake_key(2) names
  TuningCache source(dir.path / "source.json");
  source.store(good_key, good);
  source.store(garbage_key, garbage);
  source.store(other_key, other);
  TuningCache cache(dir.path / "tuning.json");
  ImportReport r = cache.import_from(dir.path / "source.json");
  CHECK(r.added == 1);
  REQUIRE(r.refused.size() == 2);
  std::string refused = lines(r.refused);
  INFO(refused);
  CHECK(contains(refused, "its \"ast\" is not a kernel AST: parse_program: line 2"));
  CHECK(contains(refused, cat("its \"ast\" hashes to ", good_key.ast_hash, ", not to its key's hash2")));
  CHECK(cache.lookup(good_key));
  CHECK_FALSE(cache.lookup(garbage_key));
}

// --- verify ---------------------------------------------------------------------------------------

TEST_CASE("compare_kernels finds a wrong output and accepts one within the tolerance", "[cache]") {
  Device& cpu = get_device("CPU");
  UOpPtr ast = scale_ast(40, 2.0);
  LoweredKernel reference = lower_kernel(ast, cpu.spec());
  OptsCheck wrong = compare_kernels(ast, cpu, reference, lower_kernel(scale_ast(40, 2.5), cpu.spec()));
  CHECK(wrong.outcome == OptsCheck::Outcome::Mismatch);
  CHECK(contains(wrong.detail, "buffer 0 element"));
  OptsCheck close = compare_kernels(ast, cpu, reference, lower_kernel(scale_ast(40, 2.0 * (1 + 1e-5)), cpu.spec()));
  CHECK(close.outcome == OptsCheck::Outcome::Match);
}

// The one kernel of a 12x32 @ 32x16 matmul (a reduce with two output loops).
UOpPtr matmul_ast() {
  Tensor a = Tensor::from_vector(std::vector<float>(12 * 32, 1.f), {12, 32}, "CPU");
  Tensor b = Tensor::from_vector(std::vector<float>(32 * 16, 1.f), {32, 16}, "CPU");
  Schedule s = Tensor::schedule({a.matmul(b)});
  REQUIRE(s.items.size() == 1);
  return s.items[0].ast;
}

TEST_CASE("verify_opts: kernels with opts give the plain kernel's outputs, an opt that does not apply says why", "[cache]") {
  using O = OptsCheck::Outcome;
  for (const char* name : {"CPU", "REF"}) {
    Device& device = get_device(name);
    UOpPtr sum = scheduled_ast(), mm = matmul_ast();  // sum: axes 0 (4, output), 1 (16, reduce)
    std::vector<std::pair<UOpPtr, std::vector<Opt>>> cases = {
        {sum, {}},
        {sum, {Opt{OptOp::UNROLL, 1, 4}}},
        {sum, {Opt{OptOp::UPCAST, 0, 4}}},
        {sum, {Opt{OptOp::UPCAST, 0, 2}, Opt{OptOp::UNROLL, 1, 8}}},
        {sum, heuristic_opts(sum, device.spec())},
        {mm, heuristic_opts(mm, device.spec())},
        {mm, {Opt{OptOp::UPCAST, 0, 4}, Opt{OptOp::UPCAST, 1, 8}, Opt{OptOp::UNROLL, 2, 4}}},
    };
    for (const auto& [ast, opts] : cases) {
      OptsCheck c = verify_opts(ast, device, opts);
      INFO(name << " " << to_string(opts) << ": " << outcome_name(c.outcome) << " " << c.detail);
      CHECK(c.outcome == O::Match);
    }
    for (std::vector<Opt> bad : {std::vector<Opt>{Opt{OptOp::UNROLL, 0, 4}}, std::vector<Opt>{Opt{OptOp::UPCAST, 0, 3}}}) {
      OptsCheck c = verify_opts(sum, device, bad);
      INFO(name << " " << to_string(bad) << ": " << outcome_name(c.outcome) << " " << c.detail);
      CHECK(c.outcome == O::CouldNotApply);
      CHECK_FALSE(c.detail.empty());
      CHECK(c.detail == lower_with_opts(sum, device.spec(), bad).rejected);
    }
  }
}

// A stored AST is untrusted: an ungated read at i - 5 would read before its buffer, and a loop of 2^40
// would keep `kiln cache verify` busy for hours. REF checks every access against its buffer, so the
// first case throws there unless verify sizes buffers for the indexes below 0.
TEST_CASE("verify_opts: indexes below 0 stay inside the buffers, and a kernel too long to run alone is refused", "[cache]") {
  DType ptr = dtypes::float32.ptr();
  UOpPtr out = UOp::make(Op::DEFINE_GLOBAL, ptr, {}, int64_t{0}), in = UOp::make(Op::DEFINE_GLOBAL, ptr, {}, int64_t{1});
  UOpPtr i = range(0, const_int(16));
  UOpPtr x = UOp::make(Op::LOAD, dtypes::float32, {UOp::make(Op::INDEX, ptr, {in, i - 5})});
  UOpPtr store = UOp::make(Op::STORE, dtypes::void_, {UOp::make(Op::INDEX, ptr, {out, i}), x * const_of(dtypes::float32, 3.0)});
  UOpPtr below = UOp::make(Op::SINK, dtypes::void_, {store});
  REQUIRE(i->op == Op::RANGE);
  for (const char* name : {"REF", "CPU"}) {
    Device& device = get_device(name);
    for (std::vector<Opt> opts : {std::vector<Opt>{}, std::vector<Opt>{Opt{OptOp::UPCAST, 0, 4}}}) {
      OptsCheck c = verify_opts(below, device, opts);
      INFO(name << " " << to_string(opts) << ": " << outcome_name(c.outcome) << " " << c.detail);
      CHECK(c.outcome == OptsCheck::Outcome::Match);
    }
  }

  UOpPtr r = range(0, const_int(int64_t{1} << 40, dtypes::int64));
  UOpPtr total = UOp::make(Op::REDUCE, dtypes::float32, {cast(r, dtypes::float32), r}, Op::ADD);
  UOpPtr long_sum = UOp::make(Op::SINK, dtypes::void_, {UOp::make(Op::STORE, dtypes::void_, {UOp::make(Op::INDEX, ptr, {out, const_int(0)}), total})});
  CHECK_THROWS_WITH(verify_opts(long_sum, get_device("CPU"), {}), Catch::Contains("runs up to 1.09951e+12 loop iterations (more than 2^36"));
}

TEST_CASE("verify_entry re-runs an entry for a device here and skips or fails the others with a reason", "[cache]") {
  const DeviceSpec& spec = get_device("CPU").spec();
  UOpPtr ast = scheduled_ast();
  TuningKey key = tuning_key(ast, spec, "beam=2");
  TuningEntry entry = fake_entry(1);
  entry.opts.clear();
  entry.ast = ast_text(ast);
  auto expect = [](const TuningKey& k, const TuningEntry& e, OptsCheck::Outcome want, const std::string& detail_part) {
    OptsCheck c = verify_entry(k, e);
    INFO(outcome_name(c.outcome) << ": " << c.detail);
    CHECK(c.outcome == want);
    CHECK(contains(c.detail, detail_part));
  };
  using O = OptsCheck::Outcome;
  expect(key, entry, O::Match, "");
  TuningEntry tuned = entry;
  tuned.opts = {Opt{OptOp::UPCAST, 0, 2}, Opt{OptOp::UNROLL, 1, 4}};
  expect(key, tuned, O::Match, "");

  TuningKey elsewhere = key, unknown = key;
  elsewhere.device = "CPU x86-64-v2 gcc 4.8";
  unknown.device = "TPU v9";
  expect(elsewhere, entry, O::Skipped, "cached for \"CPU x86-64-v2 gcc 4.8\"");
  expect(unknown, entry, O::Skipped, "no device named TPU");

  TuningEntry no_ast = entry, other_ast = entry, garbled = entry;
  no_ast.ast.clear();
  other_ast.ast = ast_text(scale_ast(16, 2.0));
  garbled.ast = "kiln-uops 1\n0 NOT_AN_OP void [] -\n";
  expect(key, no_ast, O::Failed, "holds no AST");
  expect(key, other_ast, O::Failed, "edited by hand");
  expect(key, garbled, O::Failed, "unknown op \"NOT_AN_OP\"");

  // A malformed AST stored under its own hash: an entry's problem, never "internal error ... a kiln bug".
  TuningEntry malformed = entry;
  malformed.ast = ast_text(malformed_ast());
  TuningKey malformed_key = tuning_key(malformed_ast(), spec, "beam=2");
  expect(malformed_key, malformed, O::Failed, "check_kernel_ast: node");
  CHECK_FALSE(contains(verify_entry(malformed_key, malformed).detail, "kiln bug"));
}

}  // namespace
}  // namespace kiln
