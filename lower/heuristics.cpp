// The default opts: what lower_kernel uses without search (heuristic_opts, declared in lower/opts.h).
// Each rule says what it is for and what it was measured on; the questions they ask of a kernel's
// loads are the predicates below and those shared with the applier (lower/opt_kernel.h).
#include <algorithm>

#include "lower/opt_kernel.h"
#include "lower/opts.h"
#include "uop/symbolic.h"

namespace kiln {

namespace {

using namespace detail;

// Whether some load walks r with stride 1, masked or not.
bool walks_contiguously(const UOpPtr& sink, const UOpPtr& r) {
  for (const UOpPtr& u : toposort(sink))  // analysis: a question about the loads, rewrites nothing
    if (u->op == Op::LOAD && u->src[0]->op == Op::INDEX && index_stride(u->src[0]->src[1], r) == std::optional<int64_t>(1)) return true;
  return false;
}

// Whether some load walks r with a stride of a page (4 KiB) or more: each vector lane on its own page.
bool gathers_across_pages(const UOpPtr& sink, const UOpPtr& r) {
  for (const UOpPtr& u : toposort(sink)) {  // analysis: a question about the loads, rewrites nothing
    if (u->op != Op::LOAD || u->src[0]->op != Op::INDEX) continue;
    std::optional<int64_t> stride = index_stride(u->src[0]->src[1], r);
    if (stride && std::abs(*stride) * static_cast<int64_t>(u->dtype.itemsize()) >= 4096) return true;
  }
  return false;
}

// Whether u is computed inside a reduction loop of the kernel `nodes` (it depends on a reduce range);
// with no reduction, every node is.
class InsideLoop {
 public:
  explicit InsideLoop(const std::vector<UOpPtr>& nodes) {
    for (const UOpPtr& u : nodes)
      if (u->op == Op::REDUCE) ranges_.insert(ranges_.end(), u->src.begin() + 1, u->src.end());
  }
  bool operator()(const UOpPtr& u) const {
    return ranges_.empty() || std::any_of(ranges_.begin(), ranges_.end(), [&](const UOpPtr& r) { return depends_on(u, r); });
  }

 private:
  std::vector<UOpPtr> ranges_;
};

// Whether some load does not move along r (stride 0): its value is reused by every copy of r's
// body, so unrolling r into a register tile saves loads. In a reduction only loads inside its loop
// count: one outside it (a pooling kernel's per-channel scale) is loaded once per output anyway, and a
// tile for it only multiplied the code (a max pool's 8x32 tile compiled for 0.66 s).
bool reused_along(const UOpPtr& sink, const UOpPtr& r) {
  std::vector<UOpPtr> nodes = toposort(sink);  // analysis: a question about the loads, rewrites nothing
  InsideLoop in_loop(nodes);
  for (const UOpPtr& u : nodes)
    if (u->op == Op::LOAD && u->src[0]->op == Op::INDEX && index_stride(u->src[0]->src[1], r) == 0 && in_loop(u->src[0]->src[1]))
      return true;
  return false;
}

// Whether the reduction combines a value that moves along r with one that does not, inside its loop,
// by a product or a selection (a matmul's A times B, a conv's image times its weights, an embedding's
// gradient selecting the output gradient where the token matches): rows along r then share each load
// of the second. A sum of squares or of a sum ((x - mean)^2 in a layer norm) has neither, and its 8-row
// tile only multiplied the code (r_32_64_128 of a transformer: 0.9 s to compile).
bool multiplies_across(const UOpPtr& sink, const UOpPtr& r) {
  std::vector<UOpPtr> nodes = toposort(sink);  // analysis: a question about the products, rewrites nothing
  InsideLoop in_loop(nodes);
  auto across = [&](const UOpPtr& moves, const UOpPtr& stays) { return depends_on(moves, r) && !depends_on(stays, r) && in_loop(stays); };
  for (const UOpPtr& u : nodes) {
    if ((u->op == Op::MUL || u->op == Op::MULACC) && (across(u->src[0], u->src[1]) || across(u->src[1], u->src[0]))) return true;
    if (u->op == Op::WHERE && (across(u->src[0], u->src[1]) || across(u->src[0], u->src[2]))) return true;
  }
  return false;
}

// Below this many loop iterations in total, handing work to other cores costs more than it saves.
constexpr int64_t kMinThreadedWork = 1 << 15;

int64_t total_iterations(const UOpPtr& sink) {
  int64_t total = 1;
  for (const UOpPtr& u : toposort(sink))  // analysis: multiplies the loop sizes, rewrites nothing
    if (u->op == Op::RANGE) total = total > INT64_MAX / 65536 ? total : total * std::max<int64_t>(1, u->end()->vmax());
  return total;
}

// A math function that a vector computes lane by lane, a call per lane: sin, exp2 and log2 (float32's
// are ALU ops on the CPU by now), and sqrt except in LLVM IR, where llvm.sqrt of a vector is one
// instruction (vsqrtps).
bool lane_by_lane(const UOpPtr& u, const DeviceSpec& spec) {
  return u->op == Op::EXP2 || u->op == Op::LOG2 || u->op == Op::SIN || (u->op == Op::SQRT && spec.lang != Language::LLVM);
}

bool has_transcendental(const UOpPtr& sink, const DeviceSpec& spec) {
  for (const UOpPtr& u : toposort(sink))  // analysis: a question about the ops, rewrites nothing
    if (lane_by_lane(u, spec)) return true;
  return false;
}

// A lane-by-lane math function computed anew at each step of the loop r (one that does not depend on r,
// such as batch norm's per-channel 1/sqrt(var+eps) inside a loop over NCHW pixels, is computed outside
// it; in an NHWC loop it is computed per channel vector).
bool has_transcendental_along(const UOpPtr& sink, const UOpPtr& r, const DeviceSpec& spec) {
  for (const UOpPtr& u : toposort(sink))  // analysis: a question about the ops, rewrites nothing
    if (lane_by_lane(u, spec) && depends_on(u, r)) return true;
  return false;
}


// A transpose's other axis: the axis of `outputs` (not r; the reduce axes for a reduction's gathered
// copies) along which the first load that gathers r's lanes walks contiguously; none when no load
// gathers them or that one walks none of them so.
std::optional<int> transpose_partner(const UOpPtr& sink, const std::vector<Axis>& axes, const std::vector<int>& outputs, int r) {
  for (const UOpPtr& u : toposort(sink)) {  // analysis: a question about the loads, rewrites nothing
    if (u->op != Op::LOAD || u->src[0]->op != Op::INDEX) continue;
    const UOpPtr& index = u->src[0]->src[1];
    std::optional<int64_t> along = index_stride(index, axes[static_cast<size_t>(r)].range);
    if (!along || *along == 0 || *along == 1) continue;
    for (size_t j = outputs.size(); j-- > 0;)
      if (outputs[j] != r && index_stride(index, axes[static_cast<size_t>(outputs[j])].range) == 1) return outputs[j];
    return std::nullopt;
  }
  return std::nullopt;
}
// The values each output of a kernel sums: the product of its reduce loops' sizes.
int64_t reduce_iterations(const std::vector<Axis>& axes) {
  int64_t n = 1;
  for (const Axis& a : axes)
    if (a.kind == AxisKind::Reduce) n = n > INT64_MAX / 65536 ? n : n * std::max<int64_t>(1, a.range->end()->vmax());
  return n;
}
constexpr int64_t kMinPaddedReduce = 4096;

// A register tile's rows along an axis of `rows`: the most of 8 down to 4 that divide it at least twice,
// else 0. 7, 6 and 5 for images 14 or 28 wide: the stride-2 input gradient of N8 16->32 28x28, whose 14-wide
// phases had no rows and so one accumulator, 0.18-0.25 -> 0.15 ms (interleaved, two runs each).
int64_t row_amount(int64_t rows) {
  for (int64_t d : {8, 7, 6, 5, 4})
    if (rows % d == 0 && rows >= 2 * d) return d;
  return 0;
}

// The largest power of two <= cap that divides n (1 if none).
int64_t pow2_divisor(int64_t n, int64_t cap) {
  int64_t d = 1;
  while (d * 2 <= cap && n % (d * 2) == 0) d *= 2;
  return d;
}

}  // namespace

namespace {

// What the heuristics decide on, what they have decided so far, and the three stages that decide it.
struct Plan {
  const DeviceSpec& spec;
  UOpPtr sink;
  std::vector<Axis> axes;
  std::vector<int> outputs;          // the output axes, in order
  std::vector<int64_t> remaining;    // each axis's size left after the opts so far
  std::vector<Opt> opts;
  bool reduces = false;
  int last_reduce = 0;               // the last axis (a reduce axis when the kernel reduces)
  std::optional<int> tile_vector;    // a register tile's vector axis
  std::optional<int> gather_vector;  // an elementwise kernel's vector axis whose loads gather across pages

  void tile_opts();
  void gpu_launch_opts();
  void cpu_launch_opts();
};

// The register tile, vector lanes and unrolls (for both styles of device; the rules only for CPUs, whose
// compiler vectorizes inner loops, say so).
void Plan::tile_opts() {
  // UNROLL of a reduce axis by the first amount that leaves it at least two steps.
  auto unroll_by_first = [&](int axis, std::initializer_list<int64_t> amounts) {
    for (int64_t amount : amounts)
      if (remaining[axis] % amount == 0 && remaining[axis] >= 2 * amount) {
        opts.push_back({OptOp::UNROLL, axis, amount});
        remaining[axis] /= amount;
        return;
      }
  };
  if (sink->src.size() == 1 && (reduces || !has_transcendental_along(sink, axes[outputs.back()].range, spec))) {
    const UOpPtr& store = sink->src[0];
    auto lanes_for = [&](int axis, bool strict) {
      int64_t lanes = register_lanes(store->src[1]->dtype, spec);
      while (lanes >= 2 && remaining[axis] % lanes != 0) lanes /= 2;
      bool fits = lanes >= 2 && vector_eligible(sink, axes[axis].range, lanes, spec) &&
                  (!strict || !reduces || loads_contiguously(sink, axes[axis].range));
      return fits ? lanes : 0;
    };
    // A sum whose innermost reduce loop every moving load walks contiguously: with no output axis whose
    // loads are all contiguous, the compiler vectorizes that loop (one reassociated accumulator), so no
    // vector axis whose lanes gather, and no scalar tile, whose copies would be strided chains it cannot
    // vectorize (a layer norm's backward sum over 128 features of (32, 64): 25 us bare, 461 us with 16 x 8
    // scalar copies, whose 128 accumulators took 1 s to compile; with a vector along the tokens, which
    // only the mean and the inverse deviation are contiguous in, 256 gathered loads per step: 1.1 s).
    bool sums_only = true;
    for (const UOpPtr& u : toposort(sink))  // analysis: which reductions there are, rewrites nothing
      sums_only &= u->op != Op::REDUCE || u->arg_as<Op>() == Op::ADD;
    bool reduce_contiguous = reduces && sums_only && !is_gpu(spec) && axes[last_reduce].kind == AxisKind::Reduce &&
                             loads_contiguously(sink, axes[last_reduce].range);
    // The vector axis: the innermost output loop, else (in a reduction) the innermost one the loads
    // walk contiguously, unmasked: a padded conv's output channels rather than its masked width.
    // In a reduction, an outer axis that fills more of the register wins over a narrower innermost
    // one: a 1x1 conv's 14-wide rows give 2 lanes, its 128 output channels 16 (N16 128->128 14x14:
    // 12% of the FMA peak with the 2 lanes). Only when no axis has every moving load contiguous, one
    // where some are (the others gathered lane by lane).
    int last = outputs.back();
    int64_t lanes = 0;
    for (bool strict : {true, false}) {
      if (!strict && reduce_contiguous) break;
      last = outputs.back();
      lanes = lanes_for(last, strict);
      for (size_t j = outputs.size() - 1; reduces && j-- > 0;)
        if (int64_t l = lanes_for(outputs[j], strict); l > lanes) {
          last = outputs[j];
          lanes = l;
        }
      if (lanes != 0 || !reduces) break;
    }
    // Elementwise with an innermost output loop that gives fewer than 4 lanes (the (k, c, 3, 3) weight
    // gradient put back in order from (k, 3, 3, c); a 14x14 conv's NHWC output put back in NCHW order):
    // the vector goes along an output loop every moving load walks contiguously and that gives more, its
    // lanes stored scattered (E_256_256_3_3: 621 -> 98 us; E_16_128_14_14 with 2 lanes along the width:
    // 200 -> 75 us, the 1x1 stride-2 conv it follows 0.44 -> 0.30 ms).
    if (!reduces && lanes < 4)
      for (size_t j = outputs.size() - 1; j-- > 0;)
        if (int64_t l = lanes_for(outputs[j], true); l > lanes) {
          last = outputs[j];
          lanes = l;
          break;
        }
    // No vector in a reduction: the copies of a scalar tile go along the innermost output loop of 16 or
    // more that some load walks contiguously, masked or not (a 3-channel input gradient: its image's
    // width, 16 copies x its 3 channels as rows; r_4_32_32_3_16_4_4 422 -> 111 us), not along a short one.
    if (lanes == 0 && reduces)
      for (size_t j = outputs.size(); j-- > 0;) {
        const UOpPtr& rj = axes[outputs[j]].range;
        if (remaining[outputs[j]] % 8 != 0 || remaining[outputs[j]] < 16 || !walks_contiguously(sink, rj)) continue;
        last = outputs[j];
        break;
      }
    const UOpPtr& r = axes[last].range;
    int64_t size = r->end()->vmax();
    bool vector = lanes != 0;
    // A reduction's vector axis that the register's lanes do not divide (a hidden size of 200 with 16
    // lanes: 8-lane vectors, half of each FMA idle) is padded up to a multiple of two registers (else of
    // one) when that adds at most an eighth and each output sums at least kMinPaddedReduce values: the
    // extra lanes' loads and stores are masked, which pays over a long reduction only. The vector goes
    // before the rows then (rows first measured 3x slower). An LSTM LM's decoder input gradient, (700,
    // 10000) x (10000, 200): 52-77 -> 27-34 ms, alternating binaries (its weight gradient, a 700-long sum,
    // was 15% slower padded: not padded); the same product alone 57 -> 101 GFLOP/s.
    bool padded_vector = false;
    int64_t full = register_lanes(store->src[1]->dtype, spec), size_now = remaining[last];
    if (vector && reduces && !is_gpu(spec) && lanes < full && size_now >= 4 * full && reduce_iterations(axes) >= kMinPaddedReduce &&
        vector_eligible(sink, r, full, spec))
      for (int64_t multiple : {2 * full, full}) {
        int64_t padded = (size_now + multiple - 1) / multiple * multiple;
        if ((padded - size_now) * 8 > size_now) continue;
        opts.push_back({OptOp::PADTO, last, multiple});
        remaining[last] = padded;
        lanes = full;
        padded_vector = true;
        break;
      }
    bool inner_vectorizes = !vector && reduce_contiguous;
    int64_t tile_rows = 0;  // the register tile's rows, when it has some
    // The first UPCAST that can be vector lanes becomes them: rows that could (a valid conv's image is
    // contiguous along its rows too) are pushed after the vector's UPCAST, or their 8 lanes take the
    // vector and the output channels become 32 scalar copies (62 GFLOP/s).
    std::optional<Opt> row_opt;
    if (reduces && outputs.size() >= 2 && !inner_vectorizes) {
      // Best: rows along which every load that walks the vector axis stays put (B of a matmul along
      // its rows, the image of a conv along its output channels), so each such load feeds a whole
      // column of the tile; else any row axis some load stays put along.
      // Else (whole) a short axis of 2-8 outputs taken whole: a 3-channel input gradient's channels, whose
      // vector runs along the image (r_4_32_32_3_16_4_4: 422 -> 111 us).
      auto rows_of = [&](bool strict, bool whole) -> std::optional<int> {
        for (size_t j = outputs.size(); j-- > 0;) {
          if (outputs[j] == last) continue;
          int64_t rows = remaining[outputs[j]];
          if (whole ? !(rows >= 2 && rows <= 8) : row_amount(rows) == 0) continue;
          const UOpPtr& rj = axes[outputs[j]].range;
          if (!reused_along(sink, rj) || !multiplies_across(sink, rj)) continue;
          bool feeds = true;
          for (const UOpPtr& u : toposort(sink))  // analysis: a question about the loads, rewrites nothing
            if (strict && u->op == Op::LOAD && u->src[0]->op == Op::INDEX && index_stride(u->src[0]->src[1], r) != 0 &&
                index_stride(u->src[0]->src[1], rj) != 0)
              feeds = false;
          if (feeds) return outputs[j];
        }
        return std::nullopt;
      };
      std::optional<int> row;
      for (bool strict : {true, false})  // rows that feed whole columns first, then 8 or 4 of them before a whole short axis
        for (bool whole : {false, true})
          if (!row) row = rows_of(strict, whole);
      if (row) {
        int64_t rows = remaining[*row], amount = row_amount(rows) != 0 ? row_amount(rows) : rows;
        // A CPU with few vector registers (AVX2's 16: 8 accumulators in half of them) gets a squarer
        // tile of as many accumulators, rows x 2 vectors (below): each step loads rows + vectors values
        // for rows x vectors FMAs, 6 loads per 8 FMAs at 4 x 2 rather than 9 at 8 x 1. Matmul 512^3 on
        // Zen 3 (AVX2, 2 cores), alternating: 87-109 -> 128-130 GFLOP/s; 8 x 2 (16 accumulators, all the
        // registers) spilled: 66-70.
        int64_t fit = spec.vector_registers / 4;  // rows that leave room for two vectors per row
        if (vector && !is_gpu(spec) && amount > fit && fit >= 2 && rows % fit == 0 && (remaining[last] / lanes) % 2 == 0) amount = fit;
        row_opt = Opt{OptOp::UPCAST, *row, amount};
        remaining[*row] /= amount;
        tile_rows = amount;
      }
    }
    // Scalar copies of r only pay when some load stays put along r (each copy reuses it); when every
    // load moves (the bias gradient's sum over a conv's pixels), they are just as many strided
    // accumulator chains, and one accumulator over the contiguous inner loop vectorizes instead.
    bool reuses = reduces && outputs.size() >= 2 && reused_along(sink, r);
    int64_t tile = vector             ? lanes
                   : inner_vectorizes ? 0
                   : reuses && size % 16 == 0 && size >= 32 ? 16
                   : reuses && size % 8 == 0 && size >= 16 ? 8
                                                           : 0;
    // The rows come first (the order the tile's code was measured in: matmul A.B 256^3 ~8% faster
    // than after the vector), unless they could be vector lanes themselves and would take the vector.
    // A scalar tile (no vector) puts its copies first: a 3-channel input gradient ran 118 us with 16
    // copies then 3 rows, 665 us the other way round.
    bool rows_first = row_opt && vector && !padded_vector && !vector_eligible(sink, axes[row_opt->axis].range, row_opt->amount, spec);
    if (rows_first) opts.push_back(*row_opt);
    if (tile != 0) {
      opts.push_back({OptOp::UPCAST, last, tile});
      remaining[last] /= tile;
    }
    if (row_opt && !rows_first) opts.push_back(*row_opt);
    // A second vector per row when the accumulators still fit in half the vector registers
    // (DeviceSpec::vector_registers: AVX-512 has 32, AVX2 16): twice the FMAs per broadcast load. Measured on matmul 1024^3 and a 64->64
    // channel conv (AVX-512, 2 cores): ~1.7x over one vector. Also when the two vectors take the whole
    // axis (32 channels): conv dx N128 32->64 26x26 20% -> 34% of the FMA peak, its dW 44% -> 52%
    // (`kiln bench sweep --quick`, AVX-512, two runs each).
    if (vector && tile_rows > 0 && remaining[last] % 2 == 0 && tile_rows * 2 <= spec.vector_registers / 2) {
      opts.push_back({OptOp::UPCAST, last, 2});
      remaining[last] /= 2;
    }
    // No axis for rows (a conv of batch 1 over a 7x7 image): more vectors along the vector axis
    // instead, each its own accumulator fed by the same broadcast loads, so eight chains of FMAs run
    // at once rather than one (N1 256->256 7x7 3x3: 28 -> 50 GFLOP/s, N2 128->128 14x14: 50 -> 158).
    if (vector && reduces && tile_rows == 0 && outputs.size() >= 2 && reused_along(sink, r) && remaining[last] % 8 == 0) {
      opts.push_back({OptOp::UPCAST, last, 8});
      remaining[last] /= 8;
      tile_rows = 1;
    }
    if (vector && tile_rows > 0) tile_vector = last;
    if (vector && !reduces && gathers_across_pages(sink, r)) gather_vector = last;
    // A transpose: some load gathers the vector's lanes, but walks another output axis contiguously.
    // Eight copies of the vector along that axis read each gathered line from L1 (16 lanes from 16
    // lines, then the next 7 vectors from the same lines) instead of one float per line per pass:
    // NHWC->NCHW 32x32x32x32 24 -> 65 GB/s, (4096, 256) 9 -> 33-44 GB/s; sixteen copies measured
    // slower (41 GB/s) and compiled twice as long.
    if (vector && !reduces)
      if (std::optional<int> a = transpose_partner(sink, axes, outputs, last))
        if (int64_t copies = pow2_divisor(remaining[*a], std::min<int64_t>(lanes, 8)); copies >= 4) {
          opts.push_back({OptOp::UPCAST, *a, copies});
          remaining[*a] /= copies;
        }
    // Scalar copies in a reduction whose loads gather across them (no output axis had every moving load
    // contiguous: a first conv's weight gradient, its output gradient 1024 floats apart from one output
    // channel to the next): 4 steps of the reduce loop that load walks contiguously in each iteration make
    // each copy's 4 loads one vector load (combine_accesses), each gathered line read once, not 4 times
    // (r_3_3_32_16_32_32 of a UNet: 1.3-1.5 -> 0.6-0.8 ms, alternating binaries; BEAM had found this
    // unroll; a transformer's sums with 16 copies, r_16_128_192 and r_32_64_128, changed within the noise).
    // With a vector tile it changed transformers' matmuls for no gain, so not there.
    if (!vector && tile != 0 && reduces && !is_gpu(spec) && !loads_contiguously(sink, r)) {
      std::vector<int> reduce_axes;
      for (size_t j = 0; j < axes.size(); ++j)
        if (axes[j].kind == AxisKind::Reduce) reduce_axes.push_back(static_cast<int>(j));
      if (std::optional<int> a = transpose_partner(sink, axes, reduce_axes, last)) unroll_by_first(*a, {4});
    }
    // A vector with no rows is one accumulator: each step's FMA waits for the last one (4 cycles).
    // Folding 4 steps of the innermost reduce loop into each update leaves one dependent add per 4
    // products (a weight gradient of 16 output channels, 6 input channels and 5x5 taps:
    // r_16_6_5_5_64_8_8, where BEAM's unrolls ran 14x faster).
    if (vector && reduces && tile_rows == 0 && !is_gpu(spec) && axes[last_reduce].kind == AxisKind::Reduce && reused_along(sink, r))
      unroll_by_first(last_reduce, {4, 2});
    // A max (or min) along contiguous rows without a tile is one long dependency chain per row: 4
    // rows at once and 4 values folded per step give the CPU independent work (the max of each row of
    // 4096x4096, 2 cores: 13.2 -> 2.9 ms). Not for sums: the C renderer lets clang reassociate a lone
    // accumulator's additions, which vectorizes the loop better (sum of 16M floats: 2.2 vs 3.7 ms).
    // Not with transcendentals, whose calls dominate.
    bool chained = false;  // a reduction the compiler cannot reassociate
    for (const UOpPtr& u : toposort(sink))  // analysis: which reductions there are, rewrites nothing
      chained |= u->op == Op::REDUCE && u->arg_as<Op>() != Op::ADD;
    if (chained && !is_gpu(spec) && opts.empty() && !has_transcendental(sink, spec) && axes[last_reduce].kind == AxisKind::Reduce &&
        loads_contiguously(sink, axes[last_reduce].range)) {
      if (remaining[last] % 4 == 0 && remaining[last] >= 8) {
        opts.push_back({OptOp::UPCAST, last, 4});
        remaining[last] /= 4;
      }
      if (remaining[last_reduce] % 4 == 0 && remaining[last_reduce] >= 16) {
        opts.push_back({OptOp::UNROLL, last_reduce, 4});
        remaining[last_reduce] /= 4;
      }
    }
    // A sum with no tile keeps one accumulator, which the compiler may vectorize along the innermost
    // reduce loop; when that loop is short (a conv's 24-wide rows in a weight gradient of few output
    // channels) the vector's horizontal sum closes every few steps. Folding 8 steps of the next reduce
    // loop into each iteration gives the vector loop 8 times the work per close.
    int inner_reduce = last_reduce - 1;
    if (!chained && !is_gpu(spec) && opts.empty() && inner_reduce >= 0 && axes[last_reduce].kind == AxisKind::Reduce &&
        axes[inner_reduce].kind == AxisKind::Reduce && remaining[last_reduce] < 64 && loads_contiguously(sink, axes[last_reduce].range))
      unroll_by_first(inner_reduce, {8, 4, 2});
  }
}

// GPU-style launch: work-items per workgroup along the innermost output loops, and a reduction shared by
// a group of them when there are few outputs.
void Plan::gpu_launch_opts() {
  int64_t budget = std::min<int64_t>(spec.max_local, 256);
  // Few outputs and a long reduction: work-items share each reduction (GROUPTOP below, interleaved
  // so neighbouring work-items read neighbouring elements), leaving fewer for the outputs.
  int64_t outs = 1;
  for (int j : outputs) outs *= axes[j].range->end()->vmax();
  bool group = reduces && sink->src.size() == 1 && axes[last_reduce].kind == AxisKind::Reduce && outs <= 16384 &&
               remaining[last_reduce] >= 64;
  const int64_t total = budget;
  if (group) budget = std::min<int64_t>(budget, 16);
  for (size_t j = outputs.size(); j-- > 0 && budget > 1;) {
    int64_t n = pow2_divisor(remaining[outputs[j]], std::min<int64_t>({budget, j + 1 == outputs.size() ? 64 : budget,
                                                                         spec.max_local_dims[0]}));
    if (n < 2) continue;
    opts.push_back({OptOp::LOCAL, outputs[j], n});
    remaining[outputs[j]] /= n;
    budget /= n;
    if (opts.back().axis != outputs.back()) break;  // two local axes at most
  }
  if (group) {
    int64_t used = 1;  // work-items the LOCALs above took
    for (const Opt& o : opts)
      if (o.op == OptOp::LOCAL) used *= o.amount;
    int64_t copies = 1;  // reductions the UPCASTs made, each with its own shared array
    for (const Opt& o : opts)
      if (o.op == OptOp::UPCAST) copies *= o.amount;
    int64_t n = pow2_divisor(remaining[last_reduce], std::min<int64_t>({total / used, spec.max_local_dims[0]}));
    // At most 32 KiB of shared arrays (8 bytes: the widest element), whatever the device offers: PoCL
    // offers 512 KiB, and a 8x16 register tile x 8 work-items x 32-way group (256 KiB) took its
    // compiler over 20 minutes for one kernel (a cache-split weight gradient, AVX2 host).
    int64_t shared = std::min<int64_t>(spec.shared_bytes, 32 * 1024);
    while (n >= 8 && copies * used * n * 8 > shared) n /= 2;
    if (n >= 8 && n * 4 <= remaining[last_reduce]) opts.push_back({OptOp::GROUPTOP, last_reduce, n});
  }
}

// CPU-style launch: one output axis split over the device's threads, when the kernel is big enough.
void Plan::cpu_launch_opts() {
  if (spec.threads <= 1 || total_iterations(sink) < kMinThreadedWork) return;
  // Threads split their axis into outermost blocks. A register tile's vector axis, split that way,
  // keeps each thread's panel of vector loads (B of a matmul: K x 32 floats) in its own cache while
  // it walks the rows (matmul 1024^3, 2 cores: 206 -> 284 GFLOP/s); given enough blocks per thread.
  // A transpose whose vector lanes gather each from another page (repack's copy of a Linear's
  // weight, a permute made contiguous) is split along its vector axis, so each thread walks only its
  // own rows of the source, fewer pages than the TLB holds: split along the outer axis, every thread
  // gathered from all rows at each step (a 128x9216 weight transposed, 2 cores: 1.44 -> 0.24 ms, the
  // split BEAM picks). Not for gathers within a page (a strided conv's phases: 40% slower split so).
  int axis = outputs.front();
  if (tile_vector && remaining[*tile_vector] >= 4 * spec.threads) axis = *tile_vector;
  if (gather_vector && remaining[*gather_vector] >= 2 * spec.threads) axis = *gather_vector;
  opts.push_back({OptOp::THREAD, axis, 0});
}

}  // namespace

// The default heuristics, for kernels of one store (multi-store kernels get threads only):
// - elementwise: the innermost output loop, contiguous in the output, becomes vector lanes (not when
//   the kernel calls a math function inside that loop, which a vector would call lane by lane: sin,
//   sqrt outside LLVM IR, float64 exp2/log2; the CPU's float32 exp2 and log2 are ALU ops by then,
//   lower/transcendental.h);
// - reductions with two or more output loops (matmul, conv): a register tile of 8 (or 4) rows x one
//   or two vectors of outputs per iteration. The vector is the innermost output loop that the loads
//   walk contiguously and unmasked (a conv's output channels, not its padded width; else 16 or 8
//   scalar copies of the innermost loop); the rows are the output loop, nearest the inside, that
//   some load does not move along (so each load feeds a row of the tile);
//   a short output axis (2-8) may be the rows whole; with no vector, 16 or 8 scalar copies along an
//   output loop some load walks contiguously, then the rows; when another load gathers across those
//   copies, the reduce loop it walks contiguously unrolled by 4; a vector axis the lanes do not divide,
//   in a reduction of 4096 or more values per output, padded to whole vectors;
// - sums whose innermost reduce loop every moving load walks contiguously, with no output loop that all
//   do: no tile, so the compiler vectorizes that loop (a layer norm's sums);
// - reductions with one output loop that the loads walk contiguously (a column sum): vector lanes;
// - elementwise with an innermost output loop under 4: the vector along a loop the loads walk
//   contiguously, stored scattered;
// - CPU: the outermost output loop is split over the threads when the kernel is big enough;
// - GPU-style: the innermost output loop gets up to 64 work-items per workgroup, the next one the
//   rest of a 256 budget.
std::vector<Opt> heuristic_opts(const UOpPtr& ast, const DeviceSpec& spec) {
  KernelAxes k = kernel_axes(ast, spec);
  Plan p{spec, k.sink, k.axes, {}, {}, {}, has_reduce(k.sink), static_cast<int>(k.axes.size()) - 1, {}, {}};
  for (size_t i = 0; i < p.axes.size(); ++i) {
    if (p.axes[i].kind == AxisKind::Output) p.outputs.push_back(static_cast<int>(i));
    p.remaining.push_back(p.axes[i].range->end()->vmax());
  }
  if (p.outputs.empty()) return {};
  p.tile_opts();
  if (is_gpu(spec)) p.gpu_launch_opts();
  else p.cpu_launch_opts();
  return p.opts;
}

}  // namespace kiln
