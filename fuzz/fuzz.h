// Shared by the libFuzzer targets in fuzz/: what counts as a finding.
//
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
//     return kiln::fuzz::expect_errors([&] { parse_idx({data, data + size}, "fuzz input"); });
//   }
//
// A kiln::Error is the right answer to a bad input. Anything else is a finding: a crash or sanitizer
// report (libFuzzer sees those itself), an InternalError ("this is a kiln bug"), or another exception
// (std::bad_alloc, nlohmann's, std::out_of_range): each aborts with its message, so libFuzzer keeps the
// input as crash-<sha1> and .ci/run fails.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "uop/error.h"

namespace kiln::fuzz {

template <typename F>
int expect_errors(F&& body) {
  try {
    body();
  } catch (const InternalError& e) {
    std::fprintf(stderr, "fuzz: an InternalError for untrusted input: %s\n", e.what());
    std::abort();
  } catch (const Error&) {
    // the expected outcome for a bad input
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: an exception that is not a kiln::Error: %s\n", e.what());
    std::abort();
  }
  return 0;
}

// A scratch folder for targets whose parser reads a path, one per process (removed at exit).
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d = std::filesystem::temp_directory_path() / ("kiln_fuzz_" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] { std::error_code ec; std::filesystem::remove_all(scratch(), ec); });
    return d;
  }();
  return dir;
}

inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  std::filesystem::path p = scratch() / name;
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return p.string();
}

}  // namespace kiln::fuzz
