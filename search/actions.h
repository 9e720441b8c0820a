// The search's action space: the single opts BEAM may append to a list, and the lists one step from a
// list that appending cannot reach. Both only offer opts that apply (each is probed on the kernel).
//
//   for (const Opt& o : action_space(ast, spec, applied)) ...     // every next step
//   for (const std::vector<Opt>& l : opt_neighbours(ast, spec, heuristic_opts(ast, spec))) ...
#pragma once
#include <span>
#include <vector>

#include "devices/device.h"
#include "lower/lower.h"
#include "uop/uop.h"

namespace kiln {

// Bumped whenever the meaning of an opt list changes (new ops, different axis numbering, different
// lowering of an opt): tuning-cache entries of another version are not trusted.
inline constexpr int kActionSpaceVersion = 1;

// Every single opt search may append to `applied` that applies after it.
std::vector<Opt> action_space(const UOpPtr& ast, const DeviceSpec& spec, std::span<const Opt> applied = {});

// The opt lists one step from `opts` that appending actions cannot reach: one opt's amount halved or
// doubled, one opt dropped, THREAD or an UPCAST moved to another output axis. Only lists that apply, none twice.
// Search starts from these beside the heuristics' list (a register tile of another shape, say).
std::vector<std::vector<Opt>> opt_neighbours(const UOpPtr& ast, const DeviceSpec& spec, std::span<const Opt> opts);

}  // namespace kiln
