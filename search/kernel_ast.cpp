#include "search/kernel_ast.h"

#include <map>
#include <optional>
#include <string>

namespace kiln {

namespace {

constexpr int64_t kMaxIndex = int64_t{1} << 48;  // far past any buffer; index math cannot overflow int64

bool is_value(DType t) { return !t.is_ptr && t.count == 1 && t.scalar != ScalarType::Void; }
bool is_index(const UOpPtr& u) { return is_value(u->dtype) && is_int(u->dtype); }
bool is_gate(const UOpPtr& u) { return u->dtype == dtypes::bool_; }

// What is wrong with one node, given that its sources passed; nullopt when nothing is.
std::optional<std::string> node_problem(const UOp& u, bool is_root) {
  auto src_dtypes_are = [&](DType want) {
    for (const UOpPtr& s : u.src)
      if (s->dtype != want) return false;
    return true;
  };
  if (u.op == Op::SINK) {
    if (!is_root) return "a SINK below the root (a kernel AST has one, at its root)";
    if (u.src.empty()) return "the SINK stores nothing";
    for (const UOpPtr& s : u.src)
      if (s->op != Op::STORE) return cat("the SINK's sources must be STOREs, not ", op_name(s->op));
    return std::nullopt;
  }
  if (is_root) return cat("the root is ", op_name(u.op), ", not SINK");
  size_t arity = is_unary(u.op) ? 1 : is_binary(u.op) ? 2 : is_ternary(u.op) ? 3 : u.src.size();
  if (u.src.size() != arity) return cat(op_name(u.op), " takes ", arity, " sources, not ", u.src.size());
  if (u.op != Op::STORE && u.op != Op::DEFINE_GLOBAL && u.op != Op::INDEX && !is_value(u.dtype))
    return cat("dtype ", u.dtype.name(), " (kernel ASTs compute on scalars)");
  switch (u.op) {
    case Op::STORE:
      if (u.dtype != dtypes::void_ || u.src.size() != 2) return "a STORE is void and has 2 sources (INDEX, value)";
      if (u.src[0]->op != Op::INDEX) return cat("a STORE writes to an INDEX, not to ", op_name(u.src[0]->op));
      if (u.src[1]->dtype != u.src[0]->dtype.deref())
        return cat("the value stored is ", u.src[1]->dtype.name(), " into a buffer of ", u.src[0]->dtype.deref().name());
      return std::nullopt;
    case Op::DEFINE_GLOBAL:
      if (!u.dtype.is_ptr || u.dtype.addr != AddrSpace::Global || u.dtype.count != 1 || u.dtype.scalar == ScalarType::Void)
        return cat("a DEFINE_GLOBAL of ", u.dtype.name(), " (needs a global pointer to a scalar)");
      if (!std::holds_alternative<int64_t>(u.arg)) return "a DEFINE_GLOBAL's arg is its slot (int:N)";
      return std::nullopt;
    case Op::INDEX:
      if (u.src.size() != 2 || u.src[0]->op != Op::DEFINE_GLOBAL || u.dtype != u.src[0]->dtype)
        return "an INDEX is (DEFINE_GLOBAL, index) with the buffer's dtype";
      if (!is_index(u.src[1])) return cat("an index of ", u.src[1]->dtype.name(), " (needs an integer)");
      if (u.src[1]->vmax() > kMaxIndex) return cat("an index as high as ", u.src[1]->vmax(), " (more than ", kMaxIndex, ")");
      return std::nullopt;
    case Op::LOAD:
      if (u.src.size() != 1 && u.src.size() != 3) return "a LOAD has 1 source (INDEX) or 3 (INDEX, alternative, gate)";
      if (u.src[0]->op != Op::INDEX || u.dtype != u.src[0]->dtype.deref()) return "a LOAD reads an INDEX and has its element dtype";
      if (u.src.size() == 3 && (u.src[1]->dtype != u.dtype || !is_gate(u.src[2])))
        return "a gated LOAD's alternative has its dtype and its gate is bool";
      return std::nullopt;
    case Op::CONST: return std::nullopt;  // parse_program checked the value against the dtype
    case Op::DEFINE_VAR:
      if (!is_int(u.dtype) || !std::holds_alternative<VarArg>(u.arg) || u.var().min > u.var().max || u.var().min < 0)
        return "a DEFINE_VAR is an integer with 0 <= min <= max";
      return std::nullopt;
    case Op::RANGE:
      if (!is_int(u.dtype) || u.src.size() != 1 || u.src[0]->dtype != u.dtype || !std::holds_alternative<int64_t>(u.arg))
        return "a RANGE is an integer loop (end of its dtype, arg its axis id)";
      if (u.axis_id() < 0 || u.src[0]->vmin() < 0 || u.src[0]->vmax() > kMaxIndex)
        return cat("a RANGE has an axis id >= 0 and an end in 0..", kMaxIndex);
      // The scheduler makes loops only for axes of size > 1; lowering a loop of 0 iterations makes the
      // symbolic rules rewrite it in a cycle (an InternalError from graph_rewrite).
      if (u.src[0]->vmax() < 1) return "a RANGE whose end is 0 (a loop that never runs)";
      return std::nullopt;
    case Op::REDUCE: {
      const Op* op = std::get_if<Op>(&u.arg);
      if (op == nullptr || (*op != Op::ADD && *op != Op::MUL && *op != Op::MAX && *op != Op::MIN))
        return "a REDUCE's arg is op:ADD, op:MUL, op:MAX or op:MIN";
      if (u.src.size() < 2 || u.src[0]->dtype != u.dtype) return "a REDUCE is (value of its dtype, RANGE...)";
      for (size_t i = 1; i < u.src.size(); ++i)
        if (u.src[i]->op != Op::RANGE) return cat("a REDUCE runs over RANGEs, not over ", op_name(u.src[i]->op));
      return std::nullopt;
    }
    case Op::CAST:
      if (u.src.size() != 1 || !is_value(u.src[0]->dtype)) return "a CAST converts one scalar";
      return std::nullopt;
    case Op::BITCAST:
      if (u.src.size() != 1 || !is_value(u.src[0]->dtype) || u.src[0]->dtype.itemsize() != u.dtype.itemsize())
        return "a BITCAST reinterprets one scalar of the same size";
      return std::nullopt;
    case Op::CMPLT: case Op::CMPNE: case Op::CMPEQ:
      if (u.dtype != dtypes::bool_ || u.src[0]->dtype != u.src[1]->dtype || !is_value(u.src[0]->dtype))
        return "a comparison is bool, of two scalars of one dtype";
      return std::nullopt;
    case Op::WHERE:
      if (!is_gate(u.src[0]) || u.src[1]->dtype != u.dtype || u.src[2]->dtype != u.dtype)
        return "a WHERE is (bool, a, b) with a and b of its dtype";
      return std::nullopt;
    case Op::IDIV: case Op::MOD: case Op::SHL: case Op::SHR:
      if (!is_int(u.dtype) || !src_dtypes_are(u.dtype)) return cat(op_name(u.op), " works on integers of its dtype");
      return std::nullopt;
    case Op::AND: case Op::OR: case Op::XOR:
      if (is_float(u.dtype) || !src_dtypes_are(u.dtype)) return cat(op_name(u.op), " works on integers or bools of its dtype");
      return std::nullopt;
    case Op::RECIP: case Op::SQRT: case Op::EXP2: case Op::LOG2: case Op::SIN: case Op::TRUNC: case Op::FDIV: case Op::POW:
      if (!is_float(u.dtype) || !src_dtypes_are(u.dtype)) return cat(op_name(u.op), " works on floats of its dtype");
      return std::nullopt;
    case Op::NEG: case Op::ADD: case Op::SUB: case Op::MUL: case Op::MAX: case Op::MIN: case Op::MULACC:
      if (is_bool(u.dtype) || !src_dtypes_are(u.dtype)) return cat(op_name(u.op), " works on numbers of its dtype");
      return std::nullopt;
    case Op::SINK: case Op::NOOP: case Op::DEVICE: case Op::BUFFER: case Op::CONTIGUOUS: case Op::COPY: case Op::ASSIGN:
    case Op::DETACH: case Op::REDUCE_AXIS: case Op::IOTA: case Op::GATHER: case Op::SCATTER_ADD: case Op::RESHAPE: case Op::PERMUTE: case Op::EXPAND: case Op::PAD:
    case Op::SHRINK: case Op::FLIP: case Op::DEFINE_LOCAL: case Op::DEFINE_REG: case Op::END: case Op::SPECIAL:
    case Op::BARRIER: case Op::IF: case Op::ENDIF: case Op::VECTORIZE: case Op::GEP:
      break;
  }
  return cat(op_name(u.op), " does not appear in kernel ASTs (tensor-level and lowering-only ops)");
}

// Which loops each node runs in and which it has summed over, as bit masks over the kernel's RANGEs: a
// loop is either the store's (in its index) or one REDUCE's (closed inside it), never both.
class LoopScopes {
 public:
  std::optional<std::string> add(const UOp& u) {
    uint64_t free = 0, reduced = 0;
    for (const UOpPtr& s : u.src) {
      free |= free_.at(s.get());
      reduced |= reduced_.at(s.get());
    }
    if (u.op == Op::RANGE) {
      if (bits_.size() == kMaxLoops) return cat("more than ", kMaxLoops, " RANGEs in one kernel");
      free |= bits_[&u] = uint64_t{1} << bits_.size();
    }
    if (u.op == Op::REDUCE) {
      uint64_t over = 0;
      for (size_t i = 1; i < u.src.size(); ++i) over |= bits_.at(u.src[i].get());
      if (over & all_reduced_) return cat("a loop reduced by two REDUCEs (", names(over & all_reduced_), ")");
      all_reduced_ |= over;
      free = free_.at(u.src[0].get()) & ~over;
      reduced = reduced_.at(u.src[0].get()) | over;
    }
    if (u.op == Op::STORE && (free_.at(u.src[1].get()) & ~free_.at(u.src[0]->src[1].get())))
      return cat("the value stored runs over ", names(free_.at(u.src[1].get()) & ~free_.at(u.src[0]->src[1].get())),
                 ", which its index does not (every iteration would store to one address)");
    if (free & reduced) return cat(names(free & reduced), " is both reduced by a REDUCE and used outside it");
    free_[&u] = free;
    reduced_[&u] = reduced;
    return std::nullopt;
  }

 private:
  static constexpr size_t kMaxLoops = 64;  // one bit each; a kernel has a handful
  std::string names(uint64_t mask) const {
    std::string out;
    for (const auto& [range, bit] : bits_)
      if (mask & bit) out += cat(out.empty() ? "" : ", ", "the RANGE with axis id ", range->axis_id());
    return out;
  }
  std::map<const UOp*, uint64_t> bits_, free_, reduced_;
  uint64_t all_reduced_ = 0;
};

}  // namespace

void check_kernel_ast(const UOpPtr& ast) {
  std::vector<UOpPtr> nodes = toposort(ast);  // analysis: validates an untrusted AST
  if (nodes.size() > kMaxKernelAstNodes)
    throw Error(cat("check_kernel_ast: ", nodes.size(), " nodes, more than the ", kMaxKernelAstNodes, " a kernel AST may have"));
  std::map<int64_t, DType> slots;
  std::map<int64_t, const UOp*> axes;
  LoopScopes scopes;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const UOp& u = *nodes[i];
    std::optional<std::string> problem = node_problem(u, i + 1 == nodes.size());
    if (!problem && u.op == Op::DEFINE_GLOBAL) {
      auto [it, added] = slots.emplace(u.arg_as<int64_t>(), u.dtype);
      if (!added) problem = cat("two DEFINE_GLOBALs of slot ", it->first, " (", it->second.name(), " and ", u.dtype.name(), ")");
    }
    if (!problem && u.op == Op::RANGE && !axes.emplace(u.axis_id(), &u).second)
      problem = cat("two RANGEs with axis id ", u.axis_id());
    if (!problem) problem = scopes.add(u);
    if (problem) throw Error(cat("check_kernel_ast: node ", i, " (", op_name(u.op), " ", u.dtype.name(), "): ", *problem));
  }
  int64_t expected = 0;
  for (const auto& [slot, dtype] : slots)
    if (slot != expected++) throw Error(cat("check_kernel_ast: DEFINE_GLOBAL slots must be 0..", slots.size() - 1, "; slot ", slot, " is out of place"));
}

}  // namespace kiln
