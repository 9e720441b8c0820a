// UPCAST: an output loop runs `amount` times fewer iterations, each computing `amount` neighbouring
// outputs (r = r'*amount + i for lanes i = 0..amount-1).
//
//   sink = upcast(sink, r, 8);                  // 8 copies of the stores: a register tile
//   sink = upcast_vector(sink, r, 16);          // lanes become vector values where they line up
//   bool v = is_contiguous(load_index, r);      // index(r+1) - index(r) == 1, for every r
//
// upcast_vector builds the lanes' scalar graphs, simplifies each, then walks them side by side. Where
// every lane has the same node it stays scalar (shared work); where the lanes differ only in the data
// they flow through, one node of a vector dtype replaces them (ALU ops, reduces); a LOAD or STORE
// becomes a vector access when the lanes' indices are consecutive (base + i) and their gate is
// shared, and otherwise stays per lane, its lanes taken apart with GEP and put together with
// VECTORIZE. Index math never becomes vector: it has no vector source. So strided, broadcast and
// padded accesses stay correct scalar code, and contiguous ones become SIMD loads and stores.
#pragma once
#include <optional>

#include "uop/symbolic.h"  // index_stride, is_contiguous
#include "uop/uop.h"

namespace kiln {

UOpPtr upcast(const UOpPtr& sink, const UOpPtr& r, int64_t amount);
UOpPtr upcast_vector(const UOpPtr& sink, const UOpPtr& r, int64_t lanes);

// Plain scalar loads or stores of one buffer at base + c for consecutive constants c become one vector
// access of 4..16 lanes (at most vector_bytes): loads taken apart with GEP (the copies of a register
// tile along an axis the source is contiguous in: a transpose tile), stores of the lanes put together
// with VECTORIZE (a tile whose vector runs along an axis the output is strided in, its copies along the
// one it is contiguous in). Loads broadcast into a vector stay scalar (x86 broadcasts from memory).
// Unaligned: only for languages whose vector accesses need no alignment (the host renderers).
UOpPtr combine_accesses(const UOpPtr& sink, int64_t vector_bytes);

}  // namespace kiln
