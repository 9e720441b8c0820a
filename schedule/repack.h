// Repacking: a transposed copy of an operand that a reduction would otherwise read strided.
//
//   std::vector<ScheduleItem> packs = repack_operands(item, make_buffer);   // run before item
//   // item.ast now reads each packed operand from its copy (item.bufs names the copies)
//
// A reduction kernel gets a vector register tile (lower/opts.cpp) along an output axis that its loads
// walk contiguously (or not at all). When no output axis is like that, as in x @ W.T (both operands
// contiguous along the reduced axis) or a conv's weight gradient (the output gradient contiguous along
// the image, not the channels), the kernel runs scalar, 10-20x below the tile. Then the operands that
// move along an output axis v with a stride other than 1 are copied first, by a small kernel, into a
// layout where v is innermost (each operand's other axes keep the kernel's order), and the reduction
// reads the copies. An operand is a factor of the product the kernel sums, with whatever elementwise
// work fused into it (a ReLU's gradient mask, a cast), which the copy computes once. The cost function:
//  - the copies together hold no more than kRepackMinReuse-th of the reduction's multiply-adds (each
//    copied element is reused that often, so the copy is cheap beside the kernel);
//  - each copy holds no more elements than the operand's largest input buffer (never a blow-up like
//    im2col's);
//  - v is the innermost output axis, of a size that fills vectors (a multiple of 8), where that works.
// When the tile has its vector axis but both operands walk the innermost reduce loop with a large
// stride over a span of more than kRepackMinSpanBytes (A^T.B, a Linear's weight gradient, attention's
// dv, a 1x1 conv, at sizes far beyond the caches), the operand that does not give the vector is copied
// with that loop innermost, under the same cost function.
// A copy reads exactly what the load read (its padding gate included), so results are unchanged.
#pragma once
#include <vector>

#include "schedule/schedule.h"

namespace kiln {

inline constexpr int64_t kRepackMinReuse = 16;
// Both operands of a reduction that walk its innermost loop at least this many elements apart (and so
// touch new cache lines, and soon new pages, at every step) get the smaller-vector one copied.
inline constexpr int64_t kRepackMinStride = 64;
// ... and only when one such walk spans more than this many bytes (about a core's L2 cache; below it
// the walked rows stay cached from one step of the loop to the next): A^T.B 128^3 and 256^3 ran
// 1.2-2x faster without the copy (one launch and one pass fewer); at 512^3 and 1024^3 both were
// even; with a 2 MiB span or more (2048 x 256 x 2048, 1024 x 1024 x 2048) the copy gained 8-30%
// (AMD Zen 4, 2 threads).
inline constexpr int64_t kRepackMinSpanBytes = int64_t(1) << 20;

// Makes a BUFFER on the device of the BUFFER `beside`, of `size` elements of `dtype`.
using ScratchMaker = std::function<UOpPtr(const UOpPtr& beside, int64_t size, DType dtype)>;

// The copy kernels `item` needs (to run before it, in order); rewrites item to read their outputs.
// None when item is not a reduction or already has an output axis to vectorize.
std::vector<ScheduleItem> repack_operands(ScheduleItem& item, const ScratchMaker& make_scratch);

// Renumbers the DEFINE_GLOBAL slots item.ast uses as 0..n-1, in order, and drops the buffers of the
// others (after a rewrite stopped reading them).
void compact_slots(ScheduleItem& item);

}  // namespace kiln
