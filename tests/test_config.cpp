#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <map>
#include <random>
#include <set>
#include <string>
#include <unordered_set>

#include "uop/config.h"
#include "uop/error.h"
#include "uop/hash.h"

using namespace kiln;

namespace {

// A made-up environment for Config::from_env; the map outlives the call because the lambda owns it.
std::function<const char*(const char*)> fake_env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

Config parse(std::map<std::string, std::string> vars) { return Config::from_env(fake_env(std::move(vars))); }

}  // namespace

TEST_CASE("config: an empty environment gives the documented defaults", "[config]") {
  Config c = parse({});
  CHECK(c.debug == 0);
  CHECK(c.device == "");
  CHECK(c.beam == 0);
  CHECK(c.cache_dir == "/tmp/kiln-cache");
  CHECK(c.jit == true);
  CHECK(c.fuzz == 1);
}

TEST_CASE("config: every knob is read from its variable", "[config]") {
  Config c = parse({{"KILN_DEBUG", "4"}, {"KILN_DEVICE", "cuda"}, {"KILN_BEAM", "8"},
                    {"KILN_CACHE_DIR", "/data/kc"}, {"KILN_JIT", "0"}, {"KILN_FUZZ", "10"}});
  CHECK(c.debug == 4);
  CHECK(c.device == "CUDA");
  CHECK(c.beam == 8);
  CHECK(c.cache_dir == "/data/kc");
  CHECK(c.jit == false);
  CHECK(c.fuzz == 10);
}

TEST_CASE("config: surrounding whitespace is accepted and blank means default", "[config]") {
  Config c = parse({{"KILN_DEBUG", " 2\t"}, {"KILN_DEVICE", "  opencl "}, {"KILN_BEAM", "   "}, {"KILN_JIT", " "}});
  CHECK(c.debug == 2);
  CHECK(c.device == "OPENCL");
  CHECK(c.beam == 0);
  CHECK(c.jit == true);
}

TEST_CASE("config: booleans accept 0/1/true/false in any case", "[config]") {
  for (auto [text, value] : std::map<std::string, bool>{
           {"0", false}, {"1", true}, {"true", true}, {"TRUE", true}, {"False", false}, {" false ", false}}) {
    INFO("KILN_JIT=\"" << text << "\"");
    CHECK(parse({{"KILN_JIT", text}}).jit == value);
  }
}

TEST_CASE("config: the cache directory follows XDG, then HOME, then /tmp", "[config]") {
  CHECK(parse({{"XDG_CACHE_HOME", "/xdg"}, {"HOME", "/home/u"}}).cache_dir == "/xdg/kiln");
  CHECK(parse({{"HOME", "/home/u"}}).cache_dir == "/home/u/.cache/kiln");
  CHECK(parse({{"XDG_CACHE_HOME", ""}, {"HOME", "/home/u"}}).cache_dir == "/home/u/.cache/kiln");
  CHECK(parse({{"XDG_CACHE_HOME", "relative"}, {"HOME", "/home/u"}}).cache_dir == "/home/u/.cache/kiln");
  CHECK(parse({{"HOME", ""}}).cache_dir == "/tmp/kiln-cache");
  CHECK(parse({{"KILN_CACHE_DIR", "/mine"}, {"XDG_CACHE_HOME", "/xdg"}}).cache_dir == "/mine");
  // Data that `make deps` fetched stays where scripts/deps.sh put it, wherever KILN_CACHE_DIR points.
  CHECK(parse({{"KILN_CACHE_DIR", "/mine"}, {"XDG_CACHE_HOME", "/xdg"}}).user_cache_dir == "/xdg/kiln");
  CHECK(parse({{"HOME", "/home/u"}}).user_cache_dir == "/home/u/.cache/kiln");
}

TEST_CASE("config: mpirun's OMPI_COMM_WORLD_SIZE is read, 0 without it", "[config]") {
  CHECK(parse({}).mpi_world_size == 0);
  CHECK(parse({{"OMPI_COMM_WORLD_SIZE", "4"}}).mpi_world_size == 4);
  CHECK(parse({{"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}).mpi_local_size == 2);
  CHECK(parse({}).mpi_local_size == 0);
  CHECK_THROWS_WITH(parse({{"OMPI_COMM_WORLD_LOCAL_SIZE", "x"}}), Catch::Contains("OMPI_COMM_WORLD_LOCAL_SIZE"));
  CHECK_THROWS_WITH(parse({{"OMPI_COMM_WORLD_SIZE", "0"}}), "OMPI_COMM_WORLD_SIZE=\"0\" is out of range; use an integer >= 1");
}

TEST_CASE("config: bad numbers name the variable, the value and the accepted range", "[config]") {
  CHECK_THROWS_WITH(parse({{"KILN_DEBUG", "abc"}}), "KILN_DEBUG=\"abc\" is not a number; use an integer 0..6");
  CHECK_THROWS_WITH(parse({{"KILN_DEBUG", "3x"}}), "KILN_DEBUG=\"3x\" is not a number; use an integer 0..6");
  CHECK_THROWS_WITH(parse({{"KILN_DEBUG", "3 4"}}), "KILN_DEBUG=\"3 4\" is not a number; use an integer 0..6");
  CHECK_THROWS_WITH(parse({{"KILN_DEBUG", "2.5"}}), "KILN_DEBUG=\"2.5\" is not a number; use an integer 0..6");
  CHECK_THROWS_WITH(parse({{"KILN_DEBUG", "7"}}), "KILN_DEBUG=\"7\" is out of range; use an integer 0..6");
  CHECK_THROWS_WITH(parse({{"KILN_BEAM", "-1"}}), "KILN_BEAM=\"-1\" is out of range; use an integer >= 0");
  CHECK_THROWS_WITH(parse({{"KILN_BEAM", "99999999999999999999"}}),
                    "KILN_BEAM=\"99999999999999999999\" is out of range; use an integer >= 0");
  CHECK_THROWS_WITH(parse({{"KILN_FUZZ", "0"}}), "KILN_FUZZ=\"0\" is out of range; use an integer >= 1");
}

TEST_CASE("config: bad booleans name the variable, the value and the accepted words", "[config]") {
  CHECK_THROWS_AS(parse({{"KILN_JIT", "yes"}}), Error);
  CHECK_THROWS_WITH(parse({{"KILN_JIT", "maybe"}}), "KILN_JIT=\"maybe\" is not a boolean; use 0, 1, true or false");
  CHECK_THROWS_WITH(parse({{"KILN_JIT", "2"}}), "KILN_JIT=\"2\" is not a boolean; use 0, 1, true or false");
}

TEST_CASE("config: every knob has a unique name and variable, and parses its own default value", "[config]") {
  std::set<std::string> names, envs;
  for (const KnobInfo& knob : Config::knobs()) {
    INFO(knob.name);
    CHECK(names.insert(knob.name).second);
    CHECK(envs.insert(knob.env).second);
    CHECK(std::string(knob.env).rfind("KILN_", 0) == 0);
    CHECK(std::string(knob.help).find('\n') == std::string::npos);
    // get() then parse() round-trips: what describe() shows is what the variable would accept.
    Config c = parse({});
    knob.parse(c, knob.env, knob.get(parse({})));
    CHECK(knob.get(c) == knob.get(parse({})));
  }
  CHECK(envs == std::set<std::string>{"KILN_DEBUG", "KILN_DEVICE", "KILN_BEAM", "KILN_CACHE_DIR", "KILN_JIT",
                                      "KILN_JIT_CHECK", "KILN_STRICT", "KILN_FUZZ", "KILN_SPIRV_VAL", "KILN_CPU_COMPILER",
                                      "KILN_CUDA_COMPILE_ONLY"});
}

TEST_CASE("config: describe lists every knob on its own line with its current value", "[config]") {
  Config c = parse({{"KILN_DEBUG", "3"}, {"KILN_DEVICE", "cpu"}});
  std::string text = c.describe();
  INFO(text);
  CHECK(std::count(text.begin(), text.end(), '\n') == long(Config::knobs().size()));
  CHECK(text.find("KILN_DEBUG      =\"3\"") != std::string::npos);
  CHECK(text.find("KILN_DEVICE     =\"CPU\"") != std::string::npos);
  CHECK(text.find("KILN_CACHE_DIR  =\"/tmp/kiln-cache\"") != std::string::npos);
  for (const KnobInfo& knob : Config::knobs()) CHECK(text.find(knob.help) != std::string::npos);
}

TEST_CASE("config: the process-wide instance is created once and changeable from code", "[config]") {
  Config& first = config();
  CHECK(&first == &config());
  int saved = first.beam;
  config().beam = 3;
  CHECK(config().beam == 3);
  config().beam = saved;
}

// ---- hash ----

// Golden values: these hashes name files in on-disk caches. If this test fails, a change altered every
// cache key; that needs a deliberate decision (and a cache version bump), not an updated constant.
TEST_CASE("hash: outputs are pinned across versions and platforms", "[hash]") {
  CHECK(hash_hex(hash_string("")) == "48218226ff3cd4bf");
  CHECK(hash_hex(hash_string("a")) == "0e4147b2f5377b6b");
  CHECK(hash_hex(hash_string("kiln")) == "82db795cb5f83eaa");
  CHECK(hash_hex(hash_string("the quick brown fox jumps over the lazy dog")) == "be99bb69e0dcceca");
  CHECK(hash_hex(hash_bytes("kiln", 4, 42)) == "fd0ab5066449398b");
  CHECK(hash_hex(hash_mix(1)) == "5692161d100b05e5");
  CHECK(hash_hex(hash_combine(1, 2)) == "72fdc7f1d738255c");
}

TEST_CASE("hash: hex is 16 lowercase digits", "[hash]") {
  CHECK(hash_hex(0) == "0000000000000000");
  CHECK(hash_hex(0xDEADBEEFull) == "00000000deadbeef");
  CHECK(hash_hex(~0ull) == "ffffffffffffffff");
}

TEST_CASE("hash: different inputs, lengths and seeds differ", "[hash]") {
  CHECK(hash_string("a") != hash_string("b"));
  CHECK(hash_string("ab") != hash_string("ba"));
  CHECK(hash_bytes("\0", 1) != hash_bytes("\0\0", 2));  // zero tails still count through the length
  CHECK(hash_bytes("", 0) != hash_bytes("\0", 1));
  CHECK(hash_bytes("kiln", 4, 0) != hash_bytes("kiln", 4, 1));
  CHECK(hash_string("kiln") == hash_bytes("kiln", 4));
}

TEST_CASE("hash: combine depends on order", "[hash]") {
  CHECK(hash_combine(1, 2) != hash_combine(2, 1));
  CHECK(hash_combine(hash_combine(0, 1), 2) != hash_combine(hash_combine(0, 2), 1));
  CHECK(hash_combine(0, 0) != hash_combine(hash_combine(0, 0), 0));
}

TEST_CASE("hash: no collisions among 100k distinct short strings", "[hash]") {
  std::unordered_set<uint64_t> seen;
  for (int i = 0; i < 100000; ++i) {
    std::string s = std::to_string(i);
    s += s.size() % 2 ? "x" : "";  // mixed lengths, so the tail path is exercised as well as full words
    INFO(s);
    REQUIRE(seen.insert(hash_string(s)).second);
  }
  for (int i = 0; i < 1000; ++i) CHECK(seen.insert(hash_string(std::string(size_t(i), 'a'))).second);
}

TEST_CASE("hash: flipping one input bit flips about half the output bits", "[hash]") {
  std::mt19937_64 rng(7);
  for (size_t length : {1, 7, 8, 13, 64}) {
    double flipped = 0;
    int trials = 2000;
    for (int t = 0; t < trials; ++t) {
      std::string s(length, '\0');
      for (char& c : s) c = char(rng());
      uint64_t before = hash_string(s);
      s[rng() % length] ^= char(1 << (rng() % 8));
      flipped += std::popcount(before ^ hash_string(s));
    }
    INFO("length " << length << ": " << flipped / trials << " bits flipped on average");
    CHECK(flipped / trials > 24);
    CHECK(flipped / trials < 40);
  }
  double mix_flipped = 0;
  for (int t = 0; t < 2000; ++t) {
    uint64_t x = rng();
    mix_flipped += std::popcount(hash_mix(x) ^ hash_mix(x ^ (1ull << (t % 64))));
  }
  CHECK(mix_flipped / 2000 > 24);
  CHECK(mix_flipped / 2000 < 40);
}
