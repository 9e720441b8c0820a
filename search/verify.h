// Checking a kernel's opts: the kernel lowered with them against the same kernel with the default (no
// opts: plain loops, the most literal lowering), run on the same device with the same random inputs. Search checks its
// winner this way; `kiln cache verify` re-checks cached winners.
//
//   OptsCheck c = verify_opts(ast, get_device("CPU"), entry.opts);
//   if (c.outcome != OptsCheck::Outcome::Match) std::cout << c.detail;
//   OptsCheck e = verify_entry(key, entry);       // a cache entry: its device, if here, and its stored AST
//
// Buffers are sized from the AST (the largest index each DEFINE_GLOBAL is read or written at, from the
// value ranges; a buffer indexed below 0 anywhere, gated or not, has all its indexes moved up first, since
// a stored AST is untrusted), every buffer starts with the same random values (floats in [-1, 1], integers in
// [1, 9] so no division by zero, bools 0/1), and each DEFINE_VAR takes its largest value. Outputs
// compare exactly for integers and bools, within |a - b| <= tol * (1 + |a|) for floats (tol 1e-3,
// 1e-2 for 16-bit floats: opts may reorder a reduction), with NaN equal to NaN.
// A kernel of more than 2^36 loop iterations is refused (an Error): checked alone it would run for minutes.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "devices/device.h"
#include "lower/lower.h"
#include "search/tuning_cache.h"
#include "uop/uop.h"

namespace kiln {

struct OptsCheck {
  // Skipped and Failed come from verify_entry only: the entry's device is not here (or differs), or the
  // entry cannot be checked (no AST stored, an AST that does not hash to its key, a compile error).
  enum class Outcome { Match, Mismatch, CouldNotApply, Skipped, Failed };
  Outcome outcome = Outcome::Match;
  std::string detail;  // why, for every outcome but Match
};
const char* outcome_name(OptsCheck::Outcome outcome);  // "ok", "MISMATCH", "could not apply", ...

// The product of the kernel's loop sizes (its RANGEs' largest values): what running it plainly costs.
double loop_iterations(const UOpPtr& ast);

// A launch's values for the kernel's variables (slice starts), each at its largest: how a search times
// and checks a kernel without the schedule's values.
std::vector<int64_t> largest_values(const LoweredKernel& kernel);

// Throws Error when the kernel cannot be run at all (a buffer past `max_buffer_bytes`, a compile error).
OptsCheck verify_opts(const UOpPtr& ast, Device& device, std::span<const Opt> opts, uint64_t seed = 1,
                      size_t max_buffer_bytes = size_t{1} << 30);

// What verify_opts does once both kernels are lowered: `candidate` against `reference` (lowerings of
// one AST, or of two ASTs with the same buffers), on random inputs sized from `ast`, or `elements` per
// buffer when the caller knows the real sizes (a search: a gather's index has no bound in the AST, only
// a gate, and sized from it an embedding's table needed 2^31 elements).
OptsCheck compare_kernels(const UOpPtr& ast, Device& device, const LoweredKernel& reference,
                          const LoweredKernel& candidate, uint64_t seed = 1, size_t max_buffer_bytes = size_t{1} << 30,
                          std::span<const int64_t> elements = {});

// Re-checks a cached winner on the device its key names (opened here by name, and only when its
// fingerprint matches the key's), rebuilding the kernel from the entry's stored AST. Never throws for a
// problem of the entry: that is the Failed outcome.
OptsCheck verify_entry(const TuningKey& key, const TuningEntry& entry, uint64_t seed = 1);

}  // namespace kiln
