// Shapes of tensor-level UOps, inferred from the graph (nodes do not store them).
//
//   ShapeCache shapes;
//   const Shape& s = shapes(tensor_node);          // memoized per cache
//   Shape t = infer_shape(Op::PERMUTE, std::vector<int64_t>{1, 0}, {{2, 3}});   // {3, 2}
//
// The rules, one per op: BUFFER is flat {size}; a tensor-level CONST is a scalar {}; ALU ops, casts,
// CONTIGUOUS, COPY, DETACH and ASSIGN keep their first value source's shape; REDUCE_AXIS sets the
// reduced axes to 1; movement ops follow their arg. Movement args are validated where the frontend
// builds them, so here a bad one is an internal error.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "uop/uop.h"

namespace kiln {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "(2, 3)", "()" for a scalar
Shape contiguous_strides(const Shape& shape);

Shape infer_shape(Op op, const Arg& arg, std::span<const Shape> src_shapes);

class ShapeCache {
 public:
  const Shape& operator()(const UOpPtr& u);

 private:
  std::unordered_map<const UOp*, std::pair<UOpPtr, Shape>> memo_;  // keys kept alive
};

}  // namespace kiln
