#include "uop/hash.h"

namespace kiln {
namespace {

constexpr uint64_t kMul1 = 0x87c37b91114253d5ull;  // MurmurHash3's x64 lane constants
constexpr uint64_t kMul2 = 0x4cf5ad432745937full;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// Assembles the word byte by byte so big-endian hosts agree; compilers turn this into one load.
uint64_t load_le(const unsigned char* p, size_t n) {
  uint64_t word = 0;
  for (size_t i = 0; i < n; ++i) word |= uint64_t(p[i]) << (8 * i);
  return word;
}

// Scrambles one word before it enters the state, so nearby words do not cancel.
uint64_t scramble(uint64_t word) { return rotl(word * kMul1, 31) * kMul2; }

}  // namespace

// A single-lane MurmurHash3-style block hash: one multiply-rotate round per 8-byte word (much faster than
// byte-at-a-time FNV-1a on kernel sources and buffers), the length folded in so zero-padded tails differ,
// and splitmix64's finalizer for full avalanche. Not cryptographic: cache keys need stability, not secrecy.
uint64_t hash_bytes(const void* data, size_t n, uint64_t seed) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint64_t h = hash_mix(seed ^ 0x9e3779b97f4a7c15ull);  // offset, so empty input with seed 0 is not 0
  size_t i = 0;
  for (; i + 8 <= n; i += 8) h = rotl(h ^ scramble(load_le(bytes + i, 8)), 27) * 5 + 0x52dce729;
  if (i < n) h ^= scramble(load_le(bytes + i, n - i));
  return hash_mix(h ^ uint64_t(n));
}

uint64_t hash_string(std::string_view s) { return hash_bytes(s.data(), s.size()); }

std::string hash_hex(uint64_t h) {
  const char* digits = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) out[i] = digits[h & 15];
  return out;
}

}  // namespace kiln
