// A text form of a linear program (lower/linearize.h), so it can travel as a device's "source".
//
//   std::string text = serialize_program(k.linear);       // what the REF device compiles
//   std::vector<UOpPtr> back = parse_program(text);        // back[i] == k.linear[i], as pointers
//
// One line per node: an id (the line's number among node lines), the op, the dtype, the source ids and
// the arg. A line starting with `+` is a node the program references but does not hold (the graph-level
// END a LOAD of an accumulator waits for); the others are the program, in order. `#` starts a comment.
//
//   kiln-uops 1
//   0 DEFINE_GLOBAL float32* [] int:0
//   1 CONST int32 [] const.int:16
//   2 RANGE int32 [1] int:0
//   3 CONST float32 [] const.double:0x3ff0000000000000  # 1
//   +7 END void [6,2] -
//
// Args are tagged: `-` (none), const.bool:true, const.int:-5, const.uint:7, const.double:<hex bits>,
// int:3, op:ADD, str:"gidx0" (C escapes), ints:1,2,3, pairs:0:1,2:3, var:"n",1,64, reduce:ADD:0,1,
// buffer:<id>,<size> (a BUFFER's storage is not part of the text). Parsing rebuilds the nodes with
// UOp::make, so interning makes the round trip exact; malformed text throws Error naming the line.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "uop/uop.h"

namespace kiln {

// Bumped whenever the text form changes; the REF device's compiler identity (cache keys) carries it.
inline constexpr int kProgramFormatVersion = 1;

std::string serialize_program(const std::vector<UOpPtr>& linear);
std::vector<UOpPtr> parse_program(const std::string& text);

// dtype_from_name for every DType name() prints: "float32", "int32x4", "float32*", "float32x4*local".
std::optional<DType> parse_dtype(std::string_view name);

}  // namespace kiln
