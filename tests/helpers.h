// Shared test helpers: Catch2 prints UOps as expressions, not as pointers.
#pragma once
#include <catch2/catch.hpp>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
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
