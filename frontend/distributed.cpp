// The collectives on Tensors (frontend/distributed.h): each makes the ranks agree on the call
// (mpi::agree), moves the tensor's bytes through the host (frontend/mpi.h) and makes a new tensor on the
// input's device.
#include "frontend/distributed.h"

#include <algorithm>
#include <array>

#include "devices/device.h"
#include "frontend/mpi.h"
#include "frontend/realize.h"

namespace kiln::dist::mpi {

// Tensor::to_bytes's path (realize, then the device copies out), into memory the caller reuses.
void read_into(Tensor& t, void* dst) {
  t.realize();
  if (t.numel() == 0) return;
  DeviceBuffer& storage = storage_of(t.uop()->src[0]);
  if (storage.stale())
    throw Error(cat("dist: this ", shape_str(t.shape()), " ", t.dtype().name(), " tensor's value was overwritten by an inplace operation "
                    "(Tensor::assign into the memory it shares); pass it to the collective before the assign"));
  storage.ensure_allocated();
  storage.device->copy_out(dst, storage.raw, static_cast<size_t>(t.numel()) * t.dtype().itemsize());
}

}  // namespace kiln::dist::mpi

namespace kiln::dist {
namespace {

using mpi::Call;
using mpi::Kind;
using mpi::agree;
using mpi::where;
using mpi::world;

// --- tensors through the host -------------------------------------------------------------------------

// The dtype a reduction runs in (distributed.h lists the rules).
DType wire_dtype(DType d, ReduceOp op) {
  switch (d.scalar) {
    case ScalarType::Bool: return dtypes::uint8;
    case ScalarType::Float16:
    case ScalarType::BFloat16: return dtypes::float32;
    case ScalarType::Int8:
    case ScalarType::Int16:
    case ScalarType::Int32: return op == ReduceOp::Mean ? dtypes::int64 : d;
    case ScalarType::UInt8:
    case ScalarType::UInt16:
    case ScalarType::UInt32: return op == ReduceOp::Mean ? dtypes::uint64 : d;
    case ScalarType::Int64:
    case ScalarType::UInt64:
    case ScalarType::Float32:
    case ScalarType::Float64:
    case ScalarType::Void: return d;
  }
  return d;
}

// t's bytes as `as`, computed on t's device, into the In staging buffer; a failure is recorded in
// call.failure (agree reports it) and leaves the buffer's contents undefined.
uint8_t* host_bytes(const Tensor& t, DType as, Call& call) {
  uint8_t* out = mpi::staging(mpi::Slot::In, static_cast<size_t>(t.numel()) * as.itemsize());
  try {
    Tensor x = as == t.dtype() ? t : t.cast(as);
    mpi::read_into(x, out);
  } catch (const std::exception& e) {  // reported to every rank by agree, so that none waits for this one
    call.failure = e.what();
  }
  return out;
}

// A reduction under way: the call every rank agreed on, and t's bytes in the dtype it is reduced in.
struct Reduction {
  Call call;
  DType wire;
  uint8_t* bytes;  // the In staging buffer
  bool max;  // MPI_MAX (Max, and Sum of bools: a logical or), else MPI_SUM
};

Reduction start_reduction(Kind kind, const Tensor& t, ReduceOp op) {
  Reduction r{Call(kind, static_cast<int64_t>(op), -1, t.dtype(), t.shape()), wire_dtype(t.dtype(), op), nullptr,
              op == ReduceOp::Max || is_bool(t.dtype())};
  r.bytes = host_bytes(t, r.wire, r.call);
  agree(r.call);
  if (is_bool(t.dtype()) && op == ReduceOp::Mean)
    throw Error(cat(where(r.call), ": the mean of bool values is not defined; use ReduceOp::Max or ReduceOp::Sum (a logical or), "
                    "or cast to a float first"));
  return r;
}

// A reduced wire buffer back to a tensor of the input's dtype on its device: Mean divides by the
// world size (integers truncate toward zero), bool takes any non-zero as true.
Tensor finish_reduction(const uint8_t* bytes, DType wire, Shape shape, const Tensor& like, ReduceOp op) {
  Tensor out = Tensor::from_raw(bytes, wire, std::move(shape), like.device());
  if (op == ReduceOp::Mean) {
    double n = world().size;
    out = is_float(wire) ? out / n : out.div(Tensor::full({}, n, wire, like.device()), "trunc").cast(wire);
  }
  if (out.dtype() != like.dtype()) out = out.cast(like.dtype());
  return out.realize();
}

int64_t row_elements(const Shape& s) { return kiln::numel(Shape(s.begin() + 1, s.end())); }

Shape rows_of(const Shape& s, int64_t rows) {
  Shape out = s;
  out[0] = rows;
  return out;
}

}  // namespace

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

// These communicate nothing, so a captured step may ask them (mpi::enter would refuse).
int rank() { return world().rank; }
int world_size() { return world().size; }

bool is_distributed() { return world_size() > 1; }

void barrier() {
  auto lock = mpi::enter("barrier");
  agree(Call{Kind::Barrier});  // an allgather: no rank leaves it before every rank has entered it
}

Tensor allreduce(const Tensor& t, ReduceOp op) {
  auto lock = mpi::enter("allreduce");
  Reduction r = start_reduction(Kind::Allreduce, t, op);
  mpi::allreduce(r.bytes, t.numel(), r.wire.scalar, r.max);
  return finish_reduction(r.bytes, r.wire, t.shape(), t, op);
}

Tensor broadcast(const Tensor& t, int root) {
  auto lock = mpi::enter("broadcast");
  Call call{Kind::Broadcast, -1, root, t.dtype(), t.shape()};
  uint8_t* bytes = root == world().rank ? host_bytes(t, t.dtype(), call)
                                        : mpi::staging(mpi::Slot::In, static_cast<size_t>(t.numel()) * t.dtype().itemsize());
  agree(call);
  if (root < 0 || root >= world().size)
    throw Error(cat(where(call), ": root ", root, " is not a rank; use 0 <= root < ", world().size));
  mpi::broadcast(bytes, t.numel(), t.dtype().scalar, root);
  return Tensor::from_raw(bytes, t.dtype(), t.shape(), t.device());
}

Tensor allgather(const Tensor& t) {
  auto lock = mpi::enter("allgather");
  Shape mine = t.ndim() == 0 ? Shape{1} : t.shape();
  Call call{Kind::Allgather, -1, -1, t.dtype(), mine};
  uint8_t* bytes = host_bytes(t, t.dtype(), call);
  std::vector<Shape> shapes = agree(call, true);
  int64_t row = row_elements(mine), rows = 0;
  std::vector<int64_t> counts;
  for (const Shape& s : shapes) {
    counts.push_back(s[0] * row);
    rows += s[0];
  }
  uint8_t* out = mpi::staging(mpi::Slot::Out, static_cast<size_t>(rows * row) * t.dtype().itemsize());
  mpi::allgather(bytes, counts, t.dtype().scalar, out);
  return Tensor::from_raw(out, t.dtype(), rows_of(mine, rows), t.device());
}

std::pair<int64_t, int64_t> scatter_rows(int64_t rows, int rank, int world) {
  int64_t base = rows / world, extra = rows % world;
  return {rank * base + std::min<int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

Tensor reduce_scatter(const Tensor& t, ReduceOp op) {
  auto lock = mpi::enter("reduce_scatter");
  Reduction r = start_reduction(Kind::ReduceScatter, t, op);
  if (t.ndim() == 0) throw Error(cat(where(r.call), ": a 0-d tensor has no axis 0 to scatter; reshape it to (1) or use allreduce"));
  const mpi::World& w = world();
  int64_t rows = t.shape()[0], row = row_elements(t.shape());
  std::vector<int64_t> counts;
  for (int rank = 0; rank < w.size; ++rank) counts.push_back(scatter_rows(rows, rank, w.size).second * row);
  int64_t mine = scatter_rows(rows, w.rank, w.size).second;
  uint8_t* out = mpi::staging(mpi::Slot::Out, static_cast<size_t>(mine * row) * r.wire.itemsize());
  mpi::reduce_scatter(r.bytes, out, counts, r.wire.scalar, r.max);
  return finish_reduction(out, r.wire, rows_of(t.shape(), mine), t, op);
}

double reduce_metric(double value, ReduceOp op) {
  auto lock = mpi::enter("reduce_metric");
  agree(Call{Kind::Metric, static_cast<int64_t>(op), -1, dtypes::float64, {}});
  mpi::allreduce(&value, 1, ScalarType::Float64, op == ReduceOp::Max);
  return op == ReduceOp::Mean ? value / world().size : value;
}

double weighted_mean(double value, double weight) {
  auto lock = mpi::enter("weighted_mean");
  std::array<double, 2> sums = {value * weight, weight};
  agree(Call{Kind::Metric, static_cast<int64_t>(ReduceOp::Sum), -1, dtypes::float64, {2}});
  mpi::allreduce(sums.data(), 2, ScalarType::Float64, false);
  if (sums[1] == 0) throw Error("dist::weighted_mean: the weights sum to 0 over the ranks; give each rank's sample count as its weight");
  return sums[0] / sums[1];
}

Shard shard(bool drop_remainder) { return Shard{rank(), world_size(), drop_remainder}; }

}  // namespace kiln::dist
