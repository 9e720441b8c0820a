// kiln::ShardedTensor: one tensor placed across several devices of this process, as PyTorch's DTensor
// and OneFlow's SBP place it, and Megatron's tensor-parallel Linear pair built on it.
//
//   std::vector<std::string> devices = {"CPU:0", "CPU:1"};        // two instances of the CPU device
//   ShardedTensor w = Tensor::randn({6, 4}).shard(devices, 0);     // Split(0): rows 0-2 on CPU, 3-5 on CPU:1
//   ShardedTensor x = Tensor::randn({8, 4}).shard(devices, Placement::broadcast());
//   ShardedTensor y = x.matmul(w.transpose(0, 1)).relu();          // Split(1): each device its columns
//   ShardedTensor s = y.sum({1});                                  // Partial(sum): each device's part
//   Tensor total = s.allreduce().to("CPU");                        // the full sums, on one device
//
// Placements (one per tensor, over one list of distinct devices, in order):
//   Split(axis)  device i holds the i-th contiguous piece along axis. shard() and redistribute() cut
//                pieces as torch.tensor_split does: with n elements over d devices, the first n % d
//                devices get one more. Every device gets at least one element (n >= d), else Error.
//   Broadcast    every device holds the whole tensor (SBP's B, DTensor's Replicate).
//   Partial(op)  every device holds a tensor of the full shape, and the value is op (sum, max or min)
//                over the devices' tensors. shard() puts a Partial(sum) value on the first device and
//                zeros on the others, a Partial(max/min) value on every device.
//
// Design: a ShardedTensor is a list of ordinary lazy Tensors, one per device (locals()), with the global
// shape and the placement; Tensor itself knows nothing of placements. Each local is scheduled, fused and
// realized like any tensor on its device; the ops here decide what each device computes and the result's
// placement. Data moves between devices only where a call says so (shard, allreduce, redistribute, to),
// always through Tensor::to. An op whose result would need another device's data (relu of a Partial value,
// a reduction of a Partial(sum) with max, a softmax along the split axis, operands split along different
// axes) throws a kiln::Error naming the op, the placements and shapes, and the call that fixes it.
//
// Ops and the placement of their result:
//   elementwise, a op b    Split(k) op Split(k) -> Split(k) (same pieces); Split op Broadcast -> Split
//                          (the Broadcast operand sliced locally; it may broadcast along the split axis);
//                          Broadcast op Broadcast -> Broadcast; Partial(sum) +- Partial(sum) ->
//                          Partial(sum); Partial(sum) * Broadcast, Broadcast * Partial(sum) and
//                          Partial(sum) / Broadcast -> Partial(sum). Operands broadcast as in Tensor.
//   with a scalar          keeps the placement; a Partial(sum) takes * and / but not + and -; a
//                          Partial(max/min) takes + and -, and * and / (by a negative: max <-> min).
//   unary (relu, exp, map) keeps Split and Broadcast; -x turns Partial(sum) to Partial(sum), max to min.
//   sum, mean, max, min    over the split axis -> Partial(sum) (mean: sum / global count), Partial(max),
//                          Partial(min); over other axes -> Split with the axis renumbered; Broadcast ->
//                          Broadcast; Partial(sum) by sum/mean and Partial(max) by max stay Partial.
//   matmul (b 2-D)         Split(last) @ Split(0) -> Partial(sum) (same pieces of k); Split(row or batch)
//                          @ Broadcast -> Split; Broadcast @ Split(1) -> Split(last); Partial(sum) with
//                          Broadcast either side -> Partial(sum); Broadcast @ Broadcast -> Broadcast.
//   reshape                when the split axis keeps its size and the sizes before it keep their product.
//   transpose, permute     the split axis moves with its data.
//   softmax, log_softmax   along an axis other than the split axis.
//
// Autograd: the locals are made from their sources by shrink, Tensor::to and the ops above, all of which
// differentiate, so backward() on a gathered result (y.to("CPU").sum().backward()) reaches the gradient of
// the tensor that was sharded, or of each local when the locals are leaves (the parallel Linear layers).
// There is no backward() on a ShardedTensor itself: gather it with to() first.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "frontend/nn.h"
#include "frontend/tensor.h"

namespace kiln {

enum class PartialOp { Sum, Max, Min };
const char* partial_op_name(PartialOp op);  // "sum", "max", "min"

struct Placement {
  enum class Kind { Split, Broadcast, Partial };
  Kind kind = Kind::Broadcast;
  int64_t axis = 0;               // Split only (0 otherwise, so == compares placements)
  PartialOp op = PartialOp::Sum;  // Partial only (Sum otherwise)
  static Placement split(int64_t axis) { return {Kind::Split, axis, PartialOp::Sum}; }
  static Placement broadcast() { return {Kind::Broadcast, 0, PartialOp::Sum}; }
  static Placement partial(PartialOp op = PartialOp::Sum) { return {Kind::Partial, 0, op}; }
  bool is_split() const { return kind == Kind::Split; }
  bool is_broadcast() const { return kind == Kind::Broadcast; }
  bool is_partial() const { return kind == Kind::Partial; }
  bool operator==(const Placement&) const = default;
  std::string str() const;  // "Split(1)", "Broadcast", "Partial(sum)"
};

// torch.tensor_split's piece sizes of n elements over `parts` devices (the first n % parts one larger).
std::vector<int64_t> split_sizes(int64_t n, int64_t parts);

class ShardedTensor {
 public:
  // locals[i] is device i's tensor (the devices are the locals' devices, distinct). The global shape
  // follows: for Split(axis), the locals' shapes agree outside axis and their sizes along it add up
  // (any sizes of at least 1); otherwise every local has the global shape. Throws Error when not.
  ShardedTensor(std::vector<Tensor> locals, Placement placement);

  const Shape& shape() const { return shape_; }
  DType dtype() const { return locals_.front().dtype(); }
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  const Placement& placement() const { return placement_; }
  const std::vector<Tensor>& locals() const { return locals_; }
  std::vector<std::string> devices() const;  // canonical names ("CPU:0" is "CPU")
  std::string str() const;  // "Split(0) of (6, 4) over [CPU, CPU:1]": for messages

  // --- communication (the only calls that move data between devices) -----------------------
  Tensor to(const std::string& device) const;  // the whole value on one device: cat, or op over partials
  ShardedTensor allreduce() const;              // Partial -> Broadcast (Broadcast: itself; Split: Error)
  ShardedTensor redistribute(Placement target) const;
  ShardedTensor& realize();                     // every local, in one schedule

  // --- elementwise ---------------------------------------------------------------------------
  ShardedTensor operator+(const ShardedTensor& other) const;
  ShardedTensor operator-(const ShardedTensor& other) const;
  ShardedTensor operator*(const ShardedTensor& other) const;
  ShardedTensor operator/(const ShardedTensor& other) const;
  ShardedTensor maximum(const ShardedTensor& other) const;
  ShardedTensor minimum(const ShardedTensor& other) const;
  ShardedTensor operator+(double s) const;
  ShardedTensor operator-(double s) const;
  ShardedTensor operator*(double s) const;
  ShardedTensor operator/(double s) const;
  ShardedTensor operator-() const;
  ShardedTensor relu() const;
  ShardedTensor gelu() const;
  ShardedTensor exp() const;
  ShardedTensor tanh() const;
  ShardedTensor sigmoid() const;
  ShardedTensor cast(DType dtype) const;
  // Any elementwise f (same shape out as in) on each local; `name` is for messages. Partial: Error.
  ShardedTensor map(const std::function<Tensor(const Tensor&)>& f, const std::string& name) const;

  // --- reductions ----------------------------------------------------------------------------
  ShardedTensor sum(std::vector<int64_t> axes = {}, bool keepdim = false) const;  // {} = all axes
  ShardedTensor mean(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  ShardedTensor max(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  ShardedTensor min(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  ShardedTensor softmax(int64_t axis) const;
  ShardedTensor log_softmax(int64_t axis) const;

  ShardedTensor matmul(const ShardedTensor& other) const;

  // --- movement ------------------------------------------------------------------------------
  ShardedTensor reshape(Shape shape) const;  // one -1 allowed
  ShardedTensor permute(std::vector<int64_t> order) const;
  ShardedTensor transpose(int64_t a, int64_t b) const;

 private:
  std::vector<Tensor> locals_;
  Placement placement_;
  Shape shape_;
};

namespace nn {

// Megatron-LM's tensor-parallel pair. ColumnParallelLinear holds weight rows (output features) split over
// the devices and gives its output Split along the last axis; RowParallelLinear holds weight columns (input
// features) split the same way, takes that Split activation as it is (an elementwise activation between
// keeps the placement), and gives Partial(sum) values that one allreduce completes. Each device's pieces
// are parameters of their own ("weight_shard0", ... leaves on their devices), so an optimizer steps them
// where they are. Built from an unsharded Linear, the pair computes what the two Linears compute.
class ColumnParallelLinear : public Module {
 public:
  ColumnParallelLinear(int64_t in_features, int64_t out_features, const std::vector<std::string>& devices, bool bias = true);
  ColumnParallelLinear(const Linear& full, const std::vector<std::string>& devices);  // full's values, split
  ShardedTensor forward(const ShardedTensor& x) const;  // Broadcast (..., in) -> Split(last) (..., out)
  Tensor forward(const Tensor& x) override;             // x broadcast from its device, output gathered there
  ShardedTensor weight;                // Split(0) of (out, in)
  std::optional<ShardedTensor> bias;   // Split(0) of (out)
};

class RowParallelLinear : public Module {
 public:
  RowParallelLinear(int64_t in_features, int64_t out_features, const std::vector<std::string>& devices, bool bias = true);
  RowParallelLinear(const Linear& full, const std::vector<std::string>& devices);
  // Split(last) (..., in), with the pieces of the weight's columns -> Broadcast (..., out): the partial
  // products are allreduced, then the bias (Broadcast) is added once.
  ShardedTensor forward(const ShardedTensor& x) const;
  Tensor forward(const Tensor& x) override;  // x split from its device, output gathered there
  ShardedTensor weight;  // Split(1) of (out, in)
  // One parameter ("bias") on the first device, used as Partial(sum) (zeros on the others) and added
  // before the allreduce: so it is added once, and its gradient is the whole output's.
  std::optional<ShardedTensor> bias;
};

}  // namespace nn
}  // namespace kiln
