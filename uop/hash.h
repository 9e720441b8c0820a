// Stable 64-bit hashes: the same bytes give the same hash on every run, platform and process, because
// these values become on-disk cache keys (std::hash promises none of that).
//
//   uint64_t h = hash_string(kernel_source);
//   h = hash_combine(h, device_id);              // order matters: combine(a, b) != combine(b, a)
//   std::string file = hash_hex(h) + ".so";      // 16 lowercase hex digits
//
// Changing any function here changes every cache key; tests/test_config.cpp pins golden values for that.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

// Hashes `n` bytes, reading them as little-endian 64-bit words on every platform.
uint64_t hash_bytes(const void* data, size_t n, uint64_t seed = 0);

uint64_t hash_string(std::string_view s);

// splitmix64's finalizer: a bijection in which every input bit affects every output bit. Inline because
// hash-consing calls it for every node.
inline uint64_t hash_mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Order-dependent: the seed is shifted into the sum asymmetrically before the final mix (boost-style).
inline uint64_t hash_combine(uint64_t seed, uint64_t v) {
  return hash_mix(seed ^ (hash_mix(v) + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2)));
}

// One mix per step, for folding values that are already hashes (or small integers) into a running hash:
// half the cost of hash_combine, which matters where every node pays it. Order-dependent too.
inline uint64_t hash_fold(uint64_t seed, uint64_t v) { return hash_mix((seed * 0x9e3779b97f4a7c15ull) ^ v); }

std::string hash_hex(uint64_t h);

}  // namespace kiln
