// The host side of kiln::dist (frontend/distributed.h), for the files that implement it; not public API.
//
//   auto lock = mpi::enter("allreduce");                    // loads MPI once; one caller at a time
//   mpi::agree(mpi::Call{mpi::Kind::Allreduce, op, -1, t.dtype(), t.shape()});   // throws on every rank if the ranks differ
//   mpi::allreduce(bytes.data(), n, ScalarType::Float32, /*max=*/false);
//
// Open MPI's libmpi.so.40 is opened with dlopen when mpirun started this process (Config::mpi_world_size);
// otherwise the world is one rank and every host collective below is a copy (or nothing).
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "schedule/shape.h"
#include "uop/dtype.h"

namespace kiln {
class Tensor;
}

namespace kiln::dist::mpi {

struct World {
  int rank = 0, size = 1;
};
const World& world();  // loads MPI on first use; throws Error when mpirun started us and MPI cannot be loaded

// Every entry point of kiln::dist takes this first: it refuses inside a step kiln::Jit captures (a
// replay would skip the collective), loads MPI, and serializes this process's calls
// (MPI_THREAD_SERIALIZED). Reentrant: DDP's entries call the collectives' entries.
std::unique_lock<std::recursive_mutex> enter(const char* name);

// Host memory for the collectives' data, reused from call to call: on these machines the first touch
// of fresh memory costs ~15 us per 4 KiB page (NOTES.md), ~10 ms for 4 MiB, far more than the
// collective itself. Two buffers (a call's input and its output), each grown to the largest call so far
// and kept for the life of the process; `bytes` of it stay valid until the next call asking for the same
// slot. Callers hold enter()'s lock.
enum class Slot { In, Out };
uint8_t* staging(Slot slot, size_t bytes);
// A realized tensor's bytes written to `dst` (Tensor::to_bytes without its fresh vector); distributed.cpp.
void read_into(Tensor& t, void* dst);

// Collectives on host memory: `count` elements of scalar type s (bool moves as uint8 and float16/bfloat16
// as uint16, so only integers and float32/64 may be reduced). max: MPI_MAX, else MPI_SUM. Element
// counts beyond MPI's int are split into several calls where the collective allows (allreduce,
// broadcast), else an Error.
void allreduce(void* data, int64_t count, ScalarType s, bool max);  // in place (MPI_IN_PLACE: no copy)
void broadcast(void* data, int64_t count, ScalarType s, int root);
// Every rank's `counts[rank]` elements at `mine`, laid end to end in rank order at `out`.
void allgather(const void* mine, const std::vector<int64_t>& counts, ScalarType s, void* out);
// The reduction of every rank's `in` (sum of counts elements); rank r receives part r (counts[r] elements).
void reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts, ScalarType s, bool max);
// One MPI_Allreduce (sum) of `count` elements from `in` into `out`, as is: no agreement, no copies; the
// reference `kiln bench dist` times kiln's allreduce against. A world of one copies in to out.
void raw_allreduce(const void* in, void* out, int64_t count, ScalarType s);

// What a rank called, exchanged before any data moves.
enum class Kind : int64_t { Barrier, Allreduce, Broadcast, Allgather, ReduceScatter, Metric, Gradients, Buffers };
struct Call {
  explicit Call(Kind kind, int64_t op = -1, int64_t root = -1, DType dtype = dtypes::void_, Shape shape = {})
      : kind(kind), op(op), root(root), dtype(dtype), shape(std::move(shape)) {}
  Kind kind;
  int64_t op, root;  // dist::ReduceOp, or -1; the root rank, or -1
  DType dtype;
  Shape shape;
  std::string failure;  // set when this rank could not compute its input: why
};
// "dist::allreduce on rank 1 of 2": how errors start.
std::string where(const Call& call);
// Exchanges every rank's call and throws the same Error on every rank when they disagree, or when a
// rank could not compute its input. Returns every rank's shape. axis0_may_differ: allgather's rule.
std::vector<Shape> agree(const Call& mine, bool axis0_may_differ = false);

}  // namespace kiln::dist::mpi
