// Split reductions: partial sums over chunks of a long reduction whose inputs do not fit in a cache.
//
//   std::vector<ScheduleItem> before = split_reduce(item, make_scratch);   // the partial sums
//   // item now adds the partials up into the original output
//
// A reduction tiled over its outputs reads all of its inputs once per tile. When they are far larger
// than a cache, every tile streams them from memory: the weight gradient of a 32->64 channel 3x3 conv
// over a batch of 128 (30 MB of inputs, 72 tiles) ran at 13 GFLOP/s, the same kernel over 32 images
// at 250. So the outermost reduce loop is split into chunks: a first kernel stores one partial result
// per chunk and output (the chunk is its outermost output loop, so threads take chunks), and a second
// kernel reduces the partials. The same split serves a long reduction with few outputs (batch norm's
// per-channel sums, a whole-tensor sum): one output loop too short to share out leaves one core
// working; the chunks give every core some. The cost function:
//  - either the kernel's inputs (the buffers its reduction loads) exceed kSplitMinBytes and each
//    element of them feeds at least kSplitMinReuse multiply-adds (many tiles reread them); chunks:
//    the fewest that divide the loop and bring the inputs per chunk under kSplitChunkBytes;
//  - or it has at most kSplitFewOutputs outputs, reduces at least kSplitLongReduce values into each and
//    reads at least kSplitFewOutputsMinBytes; chunks: the fewest, at least kSplitThreadChunks, that
//    divide the loop;
//  - either way, chunks that keep the loop's factor of two (up to 64) whole come first, for GPU-style
//    devices, which share a reduction among a workgroup's work-items by powers of two;
//  - the partials (chunks x outputs) hold at most a quarter of the inputs' elements (so a large
//    matmul, whose outputs are as big as its inputs, is never split).
// Only a kernel with one reduction (sum, max, min) is split; elementwise work after it moves to the
// second kernel. Results are the same up to float rounding (the sum is associated by chunks).
#pragma once
#include <vector>

#include "schedule/repack.h"

namespace kiln {

inline constexpr int64_t kSplitMinBytes = 8 << 20, kSplitChunkBytes = 4 << 20, kSplitMinReuse = 16;
inline constexpr int64_t kSplitFewOutputs = 64, kSplitLongReduce = 1 << 14, kSplitThreadChunks = 8, kSplitFewOutputsMinBytes = 2 << 20;

std::vector<ScheduleItem> split_reduce(ScheduleItem& item, const ScratchMaker& make_scratch);

}  // namespace kiln
