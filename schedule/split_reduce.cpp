#include "schedule/split_reduce.h"

#include <set>
#include <unordered_map>

#include "uop/rewrite.h"

namespace kiln {

namespace {

std::vector<UOpPtr> ranges_in(const UOpPtr& u) {
  std::vector<UOpPtr> out;
  for (const UOpPtr& n : toposort(u))  // analysis
    if (n->op == Op::RANGE) out.push_back(n);
  return out;
}

// Every RANGE's axis id moved up by one (room for a new outermost loop).
UOpPtr shift_ranges(const UOpPtr& ast) {
  std::unordered_map<const UOp*, UOpPtr> shifted;
  for (const UOpPtr& r : ranges_in(ast)) shifted[r.get()] = range(r->axis_id() + 1, r->end());
  return substitute(ast, shifted);  // one pass: a loop renamed to another's id is not renamed again
}

}  // namespace

std::vector<ScheduleItem> split_reduce(ScheduleItem& item, const ScratchMaker& make_scratch) {
  if (item.kind != ScheduleItem::Kind::Kernel || item.ast->src.size() != 1) return {};
  const UOpPtr ast = item.ast;
  const UOpPtr& store = ast->src[0];
  if (store->op != Op::STORE || store->src.size() != 2) return {};
  // One reduction, with elementwise work after it (a scale, a cast) that the total then does.
  std::vector<UOpPtr> reduces;
  for (const UOpPtr& u : toposort(store->src[1]))  // analysis: finds the reduction
    if (u->op == Op::REDUCE) reduces.push_back(u);
  if (reduces.size() != 1) return {};
  const UOpPtr reduce = reduces[0];
  Op op = reduce->arg_as<Op>();
  if (op != Op::ADD && op != Op::MAX && op != Op::MIN) return {};
  std::set<int64_t> slots;
  for (const UOpPtr& u : toposort(reduce))  // analysis: the buffers it reads
    if (u->op == Op::DEFINE_GLOBAL) slots.insert(u->arg_as<int64_t>());
  double bytes = 0, elements = 0;
  for (int64_t slot : slots) {
    const UOpPtr& b = item.bufs[static_cast<size_t>(slot)];
    elements += static_cast<double>(b->arg_as<BufferArg>().size);
    bytes += static_cast<double>(b->arg_as<BufferArg>().size) * static_cast<double>(b->dtype.itemsize());
  }
  double multiply_adds = 1, reduced = 1;
  for (const UOpPtr& r : ranges_in(ast)) multiply_adds *= static_cast<double>(r->end()->vmax());
  for (size_t i = 1; i < reduce->src.size(); ++i) reduced *= static_cast<double>(reduce->src[i]->end()->vmax());
  int64_t outputs = item.bufs[0]->arg_as<BufferArg>().size;
  bool big_inputs = bytes > kSplitMinBytes && multiply_adds >= kSplitMinReuse * elements;
  bool few_outputs = outputs <= kSplitFewOutputs && reduced >= kSplitLongReduce && bytes >= kSplitFewOutputsMinBytes;
  if (!big_inputs && !few_outputs) return {};
  UOpPtr outer;
  for (size_t i = 1; i < reduce->src.size(); ++i)
    if (!outer || reduce->src[i]->axis_id() < outer->axis_id()) outer = reduce->src[i];
  int64_t size = outer->end()->vmax(), chunks = 0;
  // Chunks that leave the loop's factor of two (up to 64) alone, where there are such: GPU-style
  // devices share a reduction among the work-items of a group by powers of two.
  auto twos = [](int64_t n) { return std::min<int64_t>(n & -n, 64); };
  for (bool keep_twos : {true, false})
    for (int64_t c = 2; c <= size && chunks == 0; ++c)
      if (size % c == 0 && (!keep_twos || twos(size / c) == twos(size)) &&
          (c == size || (big_inputs ? bytes / static_cast<double>(c) <= kSplitChunkBytes : c >= kSplitThreadChunks)))
        chunks = c;
  if (chunks == 0 || static_cast<double>(chunks * outputs) * 4 > elements) return {};

  // The partial sums: the chunk is the new outermost loop (axis 0) and an output; the reduction runs
  // over its part of the outer loop.
  UOpPtr shifted = shift_ranges(ast);
  const UOpPtr& s_store = shifted->src[0];
  UOpPtr s_reduce;
  for (const UOpPtr& u : toposort(s_store->src[1]))  // analysis: finds the reduction
    if (u->op == Op::REDUCE) s_reduce = u;
  UOpPtr s_outer = range(outer->axis_id() + 1, outer->end());
  DType t = outer->dtype;
  UOpPtr chunk = range(0, const_int(chunks, t)), inner = range(outer->axis_id() + 1, const_int(size / chunks, t));
  std::vector<UOpPtr> src{substitute(s_reduce->src[0], {{s_outer.get(), chunk * (size / chunks) + inner}})};
  for (size_t i = 1; i < s_reduce->src.size(); ++i) src.push_back(s_reduce->src[i] == s_outer ? inner : s_reduce->src[i]);
  UOpPtr partial = UOp::make(Op::REDUCE, reduce->dtype, src, reduce->arg);
  UOpPtr scratch = make_scratch(item.bufs[0], chunks * outputs, reduce->dtype);
  const UOpPtr& out = store->src[0]->src[0];  // DEFINE_GLOBAL 0
  UOpPtr partial_store = UOp::make(Op::STORE, dtypes::void_,
                                   {UOp::make(Op::INDEX, out->dtype, {out, chunk * outputs + s_store->src[0]->src[1]}), partial});
  std::vector<UOpPtr> partial_bufs = item.bufs;
  partial_bufs[0] = scratch;
  ScheduleItem first{ScheduleItem::Kind::Kernel, UOp::make(Op::SINK, dtypes::void_, {partial_store}), partial_bufs, {}, {}};

  // The total: each output reduces its partials (and does what followed the reduction).
  int64_t top = 0;
  for (const UOpPtr& r : ranges_in(ast)) top = std::max(top, r->axis_id());
  UOpPtr part = range(top + 1, const_int(chunks, t));
  UOpPtr partials = UOp::make(Op::DEFINE_GLOBAL, reduce->dtype.ptr(), {}, static_cast<int64_t>(item.bufs.size()));
  UOpPtr read = UOp::make(Op::LOAD, reduce->dtype,
                          {UOp::make(Op::INDEX, partials->dtype, {partials, part * outputs + store->src[0]->src[1]})});
  item.ast = substitute(ast, {{reduce.get(), UOp::make(Op::REDUCE, reduce->dtype, {read, part}, reduce->arg)}});
  item.bufs.push_back(scratch);
  compact_slots(item);
  return {first};
}

}  // namespace kiln
