// The on-disk cache of compiled kernels that the GPU devices share (the CPU keeps its shared objects
// its own way, devices/cpu.cpp): <cache_dir>/<kind>/<key>.bin, where the key hashes the source and
// everything else that changes the binary (the driver or compiler and its version, the target, the
// options). Each entry starts with a header (magic, the full key's check hash, size, payload hash), so a
// truncated, corrupt or foreign file is a miss and is replaced; a new entry is written to a temporary
// file and published whole with rename(), so concurrent processes never see half of one.
//
//   std::string key = binary_cache_key(source, fingerprint);
//   if (auto hit = read_cached_binary("opencl", key)) return *hit;
//   ... compile ...
//   write_cached_binary("opencl", key, bytes);   // best effort: an unwritable cache stays a miss
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "uop/config.h"
#include "uop/error.h"
#include "uop/hash.h"

namespace kiln {

struct BinaryCacheKey {
  std::string file;  // 16 hex digits
  uint64_t check;    // a second hash of the same text, kept in the header
};

inline BinaryCacheKey binary_cache_key(const std::string& source, const std::string& fingerprint) {
  std::string text = cat(source, '\0', fingerprint);
  return {hash_hex(hash_string(text)), hash_bytes(text.data(), text.size(), 0x6b696c6e)};
}

namespace binary_cache_detail {
constexpr char kMagic[8] = {'k', 'i', 'l', 'n', 'b', 'i', 'n', '1'};
constexpr size_t kHeader = 32;  // magic, check, size, payload hash

inline std::string path(const std::string& kind, const BinaryCacheKey& key) {
  return cat(config().cache_dir, "/", kind, "/", key.file, ".bin");
}

inline void put64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(uint8_t(v >> (8 * i)));
}
inline uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}
}  // namespace binary_cache_detail

inline std::optional<std::vector<uint8_t>> read_cached_binary(const std::string& kind, const BinaryCacheKey& key) {
  using namespace binary_cache_detail;
  std::ifstream in(path(kind, key), std::ios::binary);
  if (!in) return std::nullopt;
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad() || bytes.size() < kHeader || std::memcmp(bytes.data(), kMagic, 8) != 0) return std::nullopt;
  uint64_t size = get64(bytes.data() + 16);
  if (get64(bytes.data() + 8) != key.check || size != bytes.size() - kHeader) return std::nullopt;
  std::vector<uint8_t> payload(bytes.begin() + kHeader, bytes.end());
  if (hash_bytes(payload.data(), payload.size()) != get64(bytes.data() + 24)) return std::nullopt;
  return payload;
}

inline void write_cached_binary(const std::string& kind, const BinaryCacheKey& key, const std::vector<uint8_t>& payload) {
  using namespace binary_cache_detail;
  std::string dir = cat(config().cache_dir, "/", kind);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return;
  std::vector<uint8_t> bytes(kMagic, kMagic + 8);
  put64(bytes, key.check);
  put64(bytes, payload.size());
  put64(bytes, hash_bytes(payload.data(), payload.size()));
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  std::string temp = cat(dir, "/", key.file, "-XXXXXX");
  int fd = mkstemp(temp.data());
  if (fd < 0) return;
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += size_t(n);
  }
  close(fd);
  if (done != bytes.size() || std::rename(temp.c_str(), path(kind, key).c_str()) != 0) unlink(temp.c_str());
}

}  // namespace kiln
