// Shared test helpers: Catch2 prints UOps as expressions, not as pointers.
#pragma once
#include <catch2/catch.hpp>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "uop/uop.h"

namespace Catch {
template <>
struct StringMaker<kiln::UOpPtr> {
  static std::string convert(const kiln::UOpPtr& u) { return kiln::str(u); }
};
}  // namespace Catch

namespace kiln::test {

inline size_t node_count(const UOpPtr& u) { return toposort(u).size(); }

// n uniform floats in [lo, hi) from a fixed seed.
inline std::vector<float> randoms(size_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Each element of `got` within tol of `want` (absolute or relative).
inline void check_close(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).margin(tol).epsilon(tol));
  }
}

// A fresh folder, removed with everything in it at scope exit.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "kiln_test") {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() / cat(prefix, "_", getpid(), "_", counter++);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) const {
    std::ofstream out(path / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return (path / name).string();
  }
  std::vector<std::string> files() const {  // names, sorted
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

}  // namespace kiln::test
