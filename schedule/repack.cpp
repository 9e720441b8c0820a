#include "schedule/repack.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <optional>
#include <unordered_map>

#include "uop/rewrite.h"
#include "uop/symbolic.h"

namespace kiln {

namespace {

struct LoadInfo {
  UOpPtr load;
  int64_t slot;
};

std::vector<LoadInfo> global_loads(const UOpPtr& ast) {
  std::vector<LoadInfo> out;
  for (const UOpPtr& u : toposort(ast))  // analysis: collects the loads
    if (u->op == Op::LOAD && u->src[0]->op == Op::INDEX && u->src[0]->src[0]->op == Op::DEFINE_GLOBAL)
      out.push_back({u, u->src[0]->src[0]->arg_as<int64_t>()});
  return out;
}


// How a load walks along the loop r: 0 (stays put), 1 (contiguous under one gate), or -1 (anything
// else: strided, unknown, or masked lane by lane).
int walk(const LoadInfo& l, const UOpPtr& r) {
  const UOpPtr& index = l.load->src[0];
  std::optional<int64_t> stride = index_stride(index->src[1], r);
  if (stride == 0 && (l.load->src.size() < 3 || !depends_on(l.load->src[2], r))) return 0;
  if (stride == 1 && index->src.size() == 2 && (l.load->src.size() < 3 || !depends_on(l.load->src[2], r))) return 1;
  return -1;
}

// The loops a load depends on, in the kernel's order with `last` moved innermost; empty when it also
// depends on something other than loops and constants (a variable), which a copy cannot capture.
std::vector<UOpPtr> packed_order(const UOpPtr& load, const UOpPtr& last) {
  std::vector<UOpPtr> loops;
  for (const UOpPtr& u : toposort(load)) {  // analysis: the loops a load depends on
    if (u->op == Op::DEFINE_VAR) return {};
    if (u->op == Op::RANGE && u != last) loops.push_back(u);
  }
  std::sort(loops.begin(), loops.end(), [](const UOpPtr& a, const UOpPtr& b) { return a->axis_id() < b->axis_id(); });
  loops.push_back(last);
  return loops;
}

// In double: the loops of a load can multiply past int64 before the size check rejects them.
double elements(const std::vector<UOpPtr>& loops) {
  double n = 1;
  for (const UOpPtr& r : loops) n *= static_cast<double>(r->end()->vmax());
  return n;
}

UOpPtr contiguous_index(const std::vector<UOpPtr>& loops) {
  UOpPtr out = const_int(0, loops[0]->dtype);
  int64_t stride = 1;
  for (size_t i = loops.size(); i-- > 0;) {
    out = out + loops[i] * stride;
    stride *= loops[i]->end()->vmax();
  }
  return simplify(out);
}

UOpPtr global(DType element, int64_t slot) { return UOp::make(Op::DEFINE_GLOBAL, element.ptr(), {}, slot); }

// A vector tile's output axis: long enough for vectors (a multiple of 8), walked without a stride
// other than 0 or 1 by every load.
bool fills_vectors(const UOpPtr& r) { return r->end()->vmax() % 8 == 0; }
bool walks_well(const std::vector<LoadInfo>& loads, const UOpPtr& r) {
  for (const LoadInfo& l : loads)
    if (walk(l, r) == -1) return false;
  return true;
}

// The reduce loop of `reduce` with the highest id: the innermost one.
UOpPtr innermost_reduce_loop(const UOpPtr& reduce) {
  UOpPtr inner = reduce->src[1];
  for (size_t i = 2; i < reduce->src.size(); ++i)
    if (reduce->src[i]->axis_id() > inner->axis_id()) inner = reduce->src[i];
  return inner;
}

// Which of the two operands to copy with `inner` innermost, when both walk it at least
// kRepackMinStride elements apart through unmasked loads (loads that stay put along it, a bias, do not
// count), one of them over more than kRepackMinSpanBytes: the one walking a shorter output axis
// contiguously, so the other keeps giving the vector; on a tie the smaller copy. Nothing when either operand does not qualify.
std::optional<size_t> strided_operand_to_copy(const std::array<UOpPtr, 2>& operands, const UOpPtr& inner,
                                              const std::vector<UOpPtr>& outputs) {
  std::array<int64_t, 2> vector_length{0, 0};  // the longest output axis each operand walks contiguously
  int64_t span = 0;  // the most bytes one load's walk along `inner` covers
  for (size_t o = 0; o < 2; ++o) {
    std::vector<LoadInfo> own = global_loads(operands[o]);
    if (own.empty() || !depends_on(operands[o], inner)) return std::nullopt;
    for (const LoadInfo& l : own) {
      std::optional<int64_t> stride = index_stride(l.load->src[0]->src[1], inner);
      if (stride == 0 && l.load->src.size() < 3) continue;
      if (l.load->src.size() == 3 || l.load->src[0]->src.size() != 2 || !stride || std::abs(*stride) < kRepackMinStride)
        return std::nullopt;
      span = std::max(span, std::abs(*stride) * inner->end()->vmax() * static_cast<int64_t>(l.load->dtype.itemsize()));
    }
    for (const UOpPtr& r : outputs)
      if (fills_vectors(r) && walks_well(own, r))
        for (const LoadInfo& l : own)
          if (walk(l, r) == 1) vector_length[o] = std::max(vector_length[o], r->end()->vmax());
  }
  if (span <= kRepackMinSpanBytes) return std::nullopt;
  if (vector_length[0] != vector_length[1]) return vector_length[0] < vector_length[1] ? 0 : 1;
  return elements(packed_order(operands[0], inner)) <= elements(packed_order(operands[1], inner)) ? 0 : 1;
}

}  // namespace

// Renumbers the DEFINE_GLOBAL slots the AST uses as 0..n-1 (in slot order) and drops unused buffers.
void compact_slots(ScheduleItem& item) {
  std::map<int64_t, UOpPtr> used;
  for (const UOpPtr& u : toposort(item.ast))  // analysis: collects the slots in use, rewrites nothing
    if (u->op == Op::DEFINE_GLOBAL) used[u->arg_as<int64_t>()] = u;
  std::unordered_map<const UOp*, UOpPtr> renumber;
  std::vector<UOpPtr> bufs;
  for (const auto& [slot, node] : used) {
    renumber[node.get()] = UOp::make(Op::DEFINE_GLOBAL, node->dtype, {}, static_cast<int64_t>(bufs.size()));
    bufs.push_back(item.bufs[static_cast<size_t>(slot)]);
  }
  item.ast = substitute(item.ast, renumber);  // one pass: a slot renumbered to another's is not renumbered again
  item.bufs = std::move(bufs);
}

std::vector<ScheduleItem> repack_operands(ScheduleItem& item, const ScratchMaker& make_scratch) {
  const UOpPtr& ast = item.ast;
  if (item.kind != ScheduleItem::Kind::Kernel || ast->src.size() != 1 || ast->src[0]->op != Op::STORE) return {};
  std::vector<UOpPtr> outputs, all, reduces;
  for (const UOpPtr& u : toposort(ast)) {  // analysis: the reductions and loops
    if (u->op == Op::REDUCE) reduces.push_back(u);
    if (u->op == Op::RANGE) all.push_back(u);
  }
  // One reduction of a product: its two factors are the operands (a matmul's, a conv's).
  if (reduces.size() != 1 || reduces[0]->src[0]->op != Op::MUL) return {};
  std::array<UOpPtr, 2> operands{reduces[0]->src[0]->src[0], reduces[0]->src[0]->src[1]};
  for (const UOpPtr& u : toposort(ast->src[0]->src[0]))  // analysis: the output loops
    if (u->op == Op::RANGE) outputs.push_back(u);
  std::sort(outputs.begin(), outputs.end(), [](const UOpPtr& a, const UOpPtr& b) { return a->axis_id() < b->axis_id(); });
  std::vector<LoadInfo> loads = global_loads(ast);
  double multiply_adds = 1;
  int64_t first_new_id = 0;
  for (const UOpPtr& r : all) {
    multiply_adds *= static_cast<double>(r->end()->vmax());
    first_new_id = std::max(first_new_id, r->axis_id() + 1);
  }
  using Packs = std::vector<std::pair<UOpPtr, std::vector<UOpPtr>>>;  // operand, its loops in the packed order
  // The copy of one operand in its packed order, or nothing when that would break the cost function.
  auto pack_of = [&](const UOpPtr& x, const UOpPtr& innermost, double& copied) -> std::optional<std::vector<UOpPtr>> {
    std::vector<LoadInfo> own = global_loads(x);
    std::vector<UOpPtr> order = packed_order(x, innermost);
    int64_t largest = 0;  // the operand's biggest input: a copy may not hold more
    for (const LoadInfo& l : own) largest = std::max(largest, item.bufs[static_cast<size_t>(l.slot)]->arg_as<BufferArg>().size);
    if (order.empty() || own.empty() || elements(order) > static_cast<double>(largest)) return std::nullopt;
    copied += elements(order);
    return order;
  };
  auto make_copies = [&](const Packs& packs) {
    std::vector<ScheduleItem> out;
    std::unordered_map<const UOp*, UOpPtr> replace;
    for (const auto& [x, order] : packs) {
      // The copy: new loops in the packed order, with ids after all of the kernel's, reading the
      // operand's buffers from their slots; slot 0 is the copy. compact_slots then numbers the slots it
      // uses from 0.
      std::unordered_map<const UOp*, UOpPtr> own;
      std::vector<UOpPtr> loops;
      for (size_t i = 0; i < order.size(); ++i) {
        loops.push_back(range(first_new_id + static_cast<int64_t>(i), order[i]->end()));
        own[order[i].get()] = loops.back();
      }
      UOpPtr scratch = make_scratch(item.bufs[static_cast<size_t>(global_loads(x)[0].slot)], static_cast<int64_t>(elements(order)), x->dtype);
      UOpPtr target = global(x->dtype, 0);
      UOpPtr store = UOp::make(Op::STORE, dtypes::void_, {UOp::make(Op::INDEX, target->dtype, {target, contiguous_index(loops)}), substitute(x, own)});
      ScheduleItem pack{ScheduleItem::Kind::Kernel, UOp::make(Op::SINK, dtypes::void_, {store}), item.bufs, {}, {}};
      pack.bufs[0] = scratch;
      compact_slots(pack);
      out.push_back(std::move(pack));
      // The reduction reads the copy, contiguous along the packed order's innermost loop.
      UOpPtr ptr = global(x->dtype, static_cast<int64_t>(item.bufs.size()));
      item.bufs.push_back(scratch);
      replace[x.get()] = UOp::make(Op::LOAD, x->dtype, {UOp::make(Op::INDEX, ptr->dtype, {ptr, contiguous_index(order)})});
    }
    item.ast = substitute(ast, replace);
    compact_slots(item);
    return out;
  };
  // An output axis the loads already walk well, long enough for vectors: the heuristics' tile has its
  // vector there.
  bool has_vector_axis = false;
  for (const UOpPtr& r : outputs) {
    if (!fills_vectors(r) || !walks_well(loads, r)) continue;
    for (const LoadInfo& l : loads) has_vector_axis |= walk(l, r) == 1;
  }
  if (has_vector_axis) {
    // The tile has its vector axis. When both operands walk the innermost reduce loop with a stride
    // (A^T.B: A[k][i] and B[k][j], a row apart per step; a Linear's weight gradient g^T.x; attention's
    // dv = p^T.do; a 1x1 conv, whose image and weights are both a channel apart), each step touches
    // new lines of both, 4 KiB apart at 1024 columns, and the caches and TLB thrash (A^T.B 1024^3 ran
    // at half of A.B's speed). The operand that does not give the vector axis (the one walking a
    // shorter output axis contiguously) is copied with that loop innermost: the kernel becomes A.B.
    // Only for unmasked loads with constant strides of kRepackMinStride elements or more (a padded conv's
    // image is masked along its taps; rows of 32 floats, a weight gradient over many samples of few
    // features, stay within a few lines per step and gain nothing from a copy).
    if (reduces[0]->src.size() < 2) return {};
    UOpPtr inner = innermost_reduce_loop(reduces[0]);
    std::optional<size_t> copy = strided_operand_to_copy(operands, inner, outputs);
    if (!copy) return {};
    double copied = 0;
    std::optional<std::vector<UOpPtr>> order = pack_of(operands[*copy], inner, copied);
    if (!order || copied * kRepackMinReuse > multiply_adds) return {};
    return make_copies({{operands[*copy], std::move(*order)}});
  }
  for (size_t k = outputs.size(); k-- > 0;) {
    const UOpPtr& v = outputs[k];
    if (!fills_vectors(v)) continue;
    Packs packs;
    double copied = 0;
    bool ok = true;
    for (const UOpPtr& x : operands) {
      if (!depends_on(x, v) || walks_well(global_loads(x), v)) continue;
      std::optional<std::vector<UOpPtr>> order = pack_of(x, v, copied);
      if (!order) {
        ok = false;
        break;
      }
      packs.push_back({x, std::move(*order)});
    }
    if (!ok || packs.empty() || copied * kRepackMinReuse > multiply_adds) continue;
    return make_copies(packs);
  }
  return {};
}

}  // namespace kiln
