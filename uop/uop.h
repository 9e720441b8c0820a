// UOp: the one node type of kiln's IR. Immutable, hash-consed and reference-counted.
//
//   UOpPtr x = var("x", 0, 9), four = const_int(4, dtypes::int32);
//   UOpPtr e = (x * 4 + var("y", 0, 3)) / four;           // IDIV on ints, FDIV on floats
//   assert(e == (x * 4 + var("y", 0, 3)) / four);         // structurally equal => the same object
//   for (const UOpPtr& u : toposort(e)) std::cout << u->op << "\n";
//
// Construction goes through UOp::make, which interns the node in a thread-safe table: equality of
// nodes is pointer equality, and a node's hash is structural and deterministic across runs (it keys
// on-disk caches). vmin/vmax are the value range of integer and bool nodes, computed once at
// construction from the sources' ranges (uop/range.cpp); for other dtypes they span int64.
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "uop/dtype.h"
#include "uop/error.h"
#include "uop/ops.h"

namespace kiln {

class UOp;
using UOpPtr = std::shared_ptr<const UOp>;

// Arguments that some ops carry (see uop/ops.def for which op carries which).
struct VarArg {  // DEFINE_VAR: a named integer in [min, max]
  std::string name;
  int64_t min = 0, max = 0;
  bool operator==(const VarArg&) const = default;
};
struct ReduceArg {  // REDUCE_AXIS: the combining op (ADD, MUL, MAX, MIN) and the reduced axes
  Op op = Op::ADD;
  std::vector<int64_t> axes;
  bool operator==(const ReduceArg&) const = default;
};
struct BufferArg {  // BUFFER: a unique id, the size in elements, and the storage behind it
  int64_t id = 0, size = 0;
  // Owned by the layer that allocates (frontend/realize), opaque here; it lives as long as the
  // BUFFER node does, so device memory is released when no tensor refers to the buffer any more.
  std::shared_ptr<void> storage;
  bool operator==(const BufferArg& other) const { return id == other.id && size == other.size; }
};
using Pairs = std::vector<std::pair<int64_t, int64_t>>;
using Arg = std::variant<std::monostate, ConstValue, int64_t, Op, std::string, std::vector<int64_t>, Pairs,
                         VarArg, ReduceArg, BufferArg>;

bool arg_equal(const Arg& a, const Arg& b);  // like ==, but doubles compare by bits (NaN == NaN, 0 != -0)
bool const_equal(const ConstValue& a, const ConstValue& b);  // the same, for a CONST's value
uint64_t arg_hash(const Arg& a);
std::string arg_to_string(const Arg& a, DType dtype);

// enable_shared_from_this lets the interning table hold plain pointers and still hand out a strong
// reference to a live node (or learn that it is dying) without a separate weak_ptr per entry. Of const
// UOp, so that weak_from_this() needs no conversion: converting weak_ptr<UOp> to weak_ptr<const UOp>
// locks it, and when that transient reference was the last one (under the table's shard lock), the node
// was destroyed there and its destructor waited for that same lock forever: the search stall.
class UOp : public std::enable_shared_from_this<const UOp> {
 public:
  struct Key {  // only the interning table can make one, so only it constructs nodes
   private:
    friend struct UOpTable;
    Key() = default;
  };

  const Op op;
  const DType dtype;
  const std::vector<UOpPtr> src;
  const Arg arg;

  // The interned node for (op, dtype, src, arg): an existing one if an equal node is alive.
  static UOpPtr make(Op op, DType dtype, std::vector<UOpPtr> src = {}, Arg arg = {});

  uint64_t hash() const { return hash_; }
  int64_t vmin() const { return vmin_; }
  int64_t vmax() const { return vmax_; }

  // Named views of src and arg; each asserts that the op is the one it applies to.
  const ConstValue& const_value() const;  // CONST
  const VarArg& var() const;              // DEFINE_VAR
  const UOpPtr& end() const;              // RANGE: the loop bound
  int64_t axis_id() const;                // RANGE
  template <typename T>
  const T& arg_as() const;  // the arg as T; asserts it holds a T

  // The same node with some fields replaced (interned like any other).
  UOpPtr with_src(std::vector<UOpPtr> new_src) const;
  UOpPtr with_dtype(DType new_dtype) const;

  UOp(Key, Op op, DType dtype, std::vector<UOpPtr> src, Arg arg, uint64_t hash);
  ~UOp();  // leaves the interning table; frees long chains of sources without recursing
  UOp(const UOp&) = delete;
  UOp& operator=(const UOp&) = delete;

 private:
  const uint64_t hash_;
  int64_t vmin_, vmax_;
};

template <typename T>
const T& UOp::arg_as() const {
  const T* value = std::get_if<T>(&arg);
  if (value == nullptr) throw_internal("arg holds the requested type", std::string(op_name(op)), __FILE__, __LINE__);
  return *value;
}

// Every node reachable from root, each once, sources before users (root last).
std::vector<UOpPtr> toposort(const UOpPtr& root);
// The same, without the nodes `known` says yes to and whatever lies only beneath them: an incremental walk
// over what a memo has not seen yet (ShapeCache: a shape per new node, not a walk of the whole graph).
std::vector<UOpPtr> toposort(const UOpPtr& root, const std::function<bool(const UOp*)>& known);

// Number of live interned nodes (for tests of the interning table).
size_t live_uop_count();

// --- constructors for common nodes -------------------------------------------------------------
UOpPtr const_of(DType dtype, ConstValue value);  // value is cast to dtype (cast_const)
UOpPtr const_int(int64_t value, DType dtype = dtypes::int32);
UOpPtr const_bool(bool value);
UOpPtr var(std::string name, int64_t min, int64_t max, DType dtype = dtypes::int32);
UOpPtr range(int64_t axis_id, const UOpPtr& end);
UOpPtr alu(Op op, std::vector<UOpPtr> src);  // dtype from the op: comparisons give bool, else src[last]'s
UOpPtr cast(const UOpPtr& x, DType dtype);
UOpPtr where(const UOpPtr& cond, const UOpPtr& a, const UOpPtr& b);

// Arithmetic that reads like the math. A plain integer operand becomes a CONST of the other side's
// dtype. `/` is IDIV on integers and FDIV on floats. Comparisons are named (lt, ne, eq) because
// operator< on shared_ptr already means pointer order.
UOpPtr operator+(const UOpPtr& a, const UOpPtr& b);
UOpPtr operator-(const UOpPtr& a, const UOpPtr& b);
UOpPtr operator*(const UOpPtr& a, const UOpPtr& b);
UOpPtr operator/(const UOpPtr& a, const UOpPtr& b);
UOpPtr operator%(const UOpPtr& a, const UOpPtr& b);
UOpPtr operator-(const UOpPtr& a);
UOpPtr operator+(const UOpPtr& a, int64_t b);
UOpPtr operator-(const UOpPtr& a, int64_t b);
UOpPtr operator*(const UOpPtr& a, int64_t b);
UOpPtr operator/(const UOpPtr& a, int64_t b);
UOpPtr operator%(const UOpPtr& a, int64_t b);
UOpPtr max(const UOpPtr& a, const UOpPtr& b);
UOpPtr min(const UOpPtr& a, const UOpPtr& b);
UOpPtr lt(const UOpPtr& a, const UOpPtr& b);
UOpPtr lt(const UOpPtr& a, int64_t b);
UOpPtr ne(const UOpPtr& a, const UOpPtr& b);
UOpPtr eq(const UOpPtr& a, const UOpPtr& b);

// --- printing (uop/print.cpp) ------------------------------------------------------------------
std::ostream& operator<<(std::ostream& os, Op op);
// One line: infix for ALU/CONST/DEFINE_VAR/RANGE ("((x*4)+y)//4"), OP(dtype, ...) for the rest.
std::string str(const UOpPtr& u);
// The whole graph, one numbered line per node in toposort order: "  3 ADD int32 [1, 2]".
std::string print_graph(const UOpPtr& root);

}  // namespace kiln
