// Lowering passes that give a kernel its loop structure, and the linearizer.
//
//   UOpPtr k = lower_reduces(ast);   // REDUCE(v, r...) -> DEFINE_REG; in the loop LOAD(acc, r...) and
//                                    // ASSIGN(acc, acc op v, r...); after it LOAD(acc, END)
//   k = close_loops(k);              // SINK(STORE) -> SINK(END(STORE, ranges...))
//   std::vector<UOpPtr> program = linearize(k);
//
// The linear program: every node after its sources; RANGE opens a loop and a linear END (src: the
// RANGE) closes it; each node sits in the innermost loop it needs (so loop-invariant work is hoisted).
// Loops nest in a tree: output ranges in axis order, and each reduction's ranges inside the deepest
// range its accumulator depends on. Graph-level END nodes only order things and are not emitted.
#pragma once
#include <vector>

#include "uop/alu.h"
#include "uop/uop.h"

namespace kiln {

UOpPtr lower_reduces(const UOpPtr& sink);
UOpPtr close_loops(const UOpPtr& sink);
std::vector<UOpPtr> linearize(const UOpPtr& sink);

// The RANGEs u runs inside (open at u), ordered by axis id.
std::vector<UOpPtr> ranges_of(const UOpPtr& u);


}  // namespace kiln
