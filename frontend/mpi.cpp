// The host side of kiln::dist (frontend/mpi.h): the slice of Open MPI kiln calls, looked up with dlsym
// (function pointers and the predefined handles), collectives on host memory, and the agreement.
#include "frontend/mpi.h"

#include <dlfcn.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "frontend/distributed.h"
#include "frontend/realize.h"
#include "uop/config.h"

namespace kiln::dist::mpi {
namespace {

// --- the slice of the MPI API kiln uses (no MPI headers needed) ------------------------------------

// MPI_Comm, MPI_Datatype, MPI_Op and MPI_Errhandler are pointers in Open MPI's ABI; the predefined ones
// (MPI_COMM_WORLD is `&ompi_mpi_comm_world`) are the addresses of objects libmpi exports.
using Handle = void*;
constexpr int kMpiSuccess = 0, kMpiThreadSerialized = 2, kMpiMaxErrorString = 256;

struct Mpi {
  int (*Initialized)(int*);
  int (*Finalized)(int*);
  int (*Init_thread)(int*, char***, int, int*);
  int (*Finalize)();
  int (*Comm_rank)(Handle, int*);
  int (*Comm_size)(Handle, int*);
  int (*Comm_set_errhandler)(Handle, Handle);
  int (*Error_string)(int, char*, int*);
  int (*Allreduce)(const void*, void*, int, Handle, Handle, Handle);
  int (*Bcast)(void*, int, Handle, int, Handle);
  int (*Allgather)(const void*, int, Handle, void*, int, Handle, Handle);
  int (*Allgatherv)(const void*, int, Handle, void*, const int*, const int*, Handle, Handle);
  int (*Reduce_scatter)(const void*, void*, const int*, Handle, Handle, Handle);
  Handle comm_world, errors_return, op_sum, op_max, byte;
  Handle int8, int16, int32, int64, uint8, uint16, uint32, uint64, float32, float64;
};

const Mpi& load_mpi(int launched) {
  static const Mpi loaded = [launched] {
    // RTLD_GLOBAL: Open MPI's own plugins (mca_*.so), which libmpi dlopens, resolve symbols against it.
    void* lib = dlopen("libmpi.so.40", RTLD_NOW | RTLD_GLOBAL);
    if (!lib)
      throw Error(cat("dist: mpirun started ", launched, " processes (OMPI_COMM_WORLD_SIZE) but Open MPI's libmpi.so.40 cannot be loaded (",
                      dlerror(), "); install it (apt-get install openmpi-bin libopenmpi-dev) or run without mpirun"));
    Mpi m{};
    auto get = [&](auto& field, const char* symbol) {
      field = reinterpret_cast<std::remove_reference_t<decltype(field)>>(dlsym(lib, symbol));
      if (!field) throw Error(cat("dist: libmpi.so.40 has no ", symbol, "; kiln needs Open MPI 4 (its handles are ompi_mpi_* objects)"));
    };
    get(m.Initialized, "MPI_Initialized");
    get(m.Finalized, "MPI_Finalized");
    get(m.Init_thread, "MPI_Init_thread");
    get(m.Finalize, "MPI_Finalize");
    get(m.Comm_rank, "MPI_Comm_rank");
    get(m.Comm_size, "MPI_Comm_size");
    get(m.Comm_set_errhandler, "MPI_Comm_set_errhandler");
    get(m.Error_string, "MPI_Error_string");
    get(m.Allreduce, "MPI_Allreduce");
    get(m.Bcast, "MPI_Bcast");
    get(m.Allgather, "MPI_Allgather");
    get(m.Allgatherv, "MPI_Allgatherv");
    get(m.Reduce_scatter, "MPI_Reduce_scatter");
    get(m.comm_world, "ompi_mpi_comm_world");
    get(m.errors_return, "ompi_mpi_errors_return");
    get(m.op_sum, "ompi_mpi_op_sum");
    get(m.op_max, "ompi_mpi_op_max");
    get(m.byte, "ompi_mpi_byte");
    get(m.int8, "ompi_mpi_int8_t");
    get(m.int16, "ompi_mpi_int16_t");
    get(m.int32, "ompi_mpi_int32_t");
    get(m.int64, "ompi_mpi_int64_t");
    get(m.uint8, "ompi_mpi_uint8_t");
    get(m.uint16, "ompi_mpi_uint16_t");
    get(m.uint32, "ompi_mpi_uint32_t");
    get(m.uint64, "ompi_mpi_uint64_t");
    get(m.float32, "ompi_mpi_float");
    get(m.float64, "ompi_mpi_double");
    return m;
  }();
  return loaded;
}

// The loaded library and this process's place in the world; mpi null: a world of one, no MPI.
struct Job {
  World world;
  const Mpi* mpi = nullptr;
};

const Job& job() {
  static const Job j = [] {
    Job j;
    int launched = config().mpi_world_size;
    if (launched == 0) return j;
    const Mpi& m = load_mpi(launched);
    int initialized = 0;
    m.Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      if (m.Init_thread(nullptr, nullptr, kMpiThreadSerialized, &provided) != kMpiSuccess)
        throw Error("dist: MPI_Init_thread failed; see Open MPI's message above");
      std::atexit([] {
        int finalized = 0;
        load_mpi(0).Finalized(&finalized);
        if (!finalized) load_mpi(0).Finalize();
      });
    }
    // Errors come back as return codes (each call is checked), instead of aborting the job.
    m.Comm_set_errhandler(m.comm_world, m.errors_return);
    j.mpi = &m;
    m.Comm_rank(m.comm_world, &j.world.rank);
    m.Comm_size(m.comm_world, &j.world.size);
    return j;
  }();
  return j;
}

void check(int code, const char* call) {
  if (code == kMpiSuccess) return;
  const Job& j = job();
  char text[kMpiMaxErrorString] = {};
  int length = 0;
  if (j.mpi->Error_string(code, text, &length) != kMpiSuccess) std::snprintf(text, sizeof text, "error code %d", code);
  throw Error(cat("dist: ", call, " failed on rank ", j.world.rank, " of ", j.world.size, ": ", text));
}

}  // namespace

const World& world() { return job().world; }

std::unique_lock<std::recursive_mutex> enter(const char* name) {
  if (current_recorder())
    throw Error(cat("dist::", name, ": collectives are host calls that a captured step (kiln::Jit) cannot replay; "
                    "run the training step outside the Jit (or with KILN_JIT=0)"));
  static std::recursive_mutex mu;
  std::unique_lock<std::recursive_mutex> lock(mu);
  job();  // loads MPI, or throws why it cannot
  return lock;
}

// --- host collectives (a world of one copies) --------------------------------------------------------

namespace {

// The MPI type that moves or reduces elements of `s`. Bool moves as uint8 and float16/bfloat16 as
// uint16: they are never reduced in their own type (frontend/distributed.cpp: wire_dtype).
Handle mpi_type(ScalarType s) {
  const Mpi& m = *job().mpi;
  switch (s) {
    case ScalarType::Bool: return m.uint8;
    case ScalarType::Int8: return m.int8;
    case ScalarType::Int16: return m.int16;
    case ScalarType::Int32: return m.int32;
    case ScalarType::Int64: return m.int64;
    case ScalarType::UInt8: return m.uint8;
    case ScalarType::UInt16: return m.uint16;
    case ScalarType::UInt32: return m.uint32;
    case ScalarType::UInt64: return m.uint64;
    case ScalarType::Float16: return m.uint16;
    case ScalarType::BFloat16: return m.uint16;
    case ScalarType::Float32: return m.float32;
    case ScalarType::Float64: return m.float64;
    case ScalarType::Void: break;
  }
  throw InternalError("dist: no MPI type for void");
}

constexpr int64_t kMaxCount = int64_t{1} << 30;  // elements per MPI call (MPI counts are int)

int to_count(int64_t n, const char* op) {
  if (n > INT_MAX)
    throw Error(cat("dist::", op, ": ", n, " elements exceed MPI's int count limit (2^31 - 1) for this collective; split the tensor"));
  return static_cast<int>(n);
}

// Every rank's `bytes` bytes, rank after rank (small messages: the agreement's signatures).
std::vector<uint8_t> gather_bytes(const void* mine, size_t bytes) {
  const Job& j = job();
  std::vector<uint8_t> all(bytes * static_cast<size_t>(j.world.size));
  if (!j.mpi) {
    if (bytes > 0) std::memcpy(all.data(), mine, bytes);
    return all;
  }
  check(j.mpi->Allgather(mine, to_count(static_cast<int64_t>(bytes), "allgather"), j.mpi->byte, all.data(),
                         static_cast<int>(bytes), j.mpi->byte, j.mpi->comm_world), "MPI_Allgather");
  return all;
}

// Displacements of counts laid end to end, as MPI's int arrays.
std::pair<std::vector<int>, std::vector<int>> layout(const std::vector<int64_t>& counts, const char* op) {
  std::vector<int> n, at;
  int64_t total = 0;
  for (int64_t c : counts) {
    n.push_back(to_count(c, op));
    at.push_back(to_count(total, op));
    total += c;
  }
  to_count(total, op);
  return {n, at};
}

}  // namespace

namespace {

// A host buffer that only grows. Large ones ask for transparent huge pages: first touch then costs
// ~0.26 us per 4 KiB instead of ~15 us (NOTES.md).
struct Staging {
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data;
  size_t capacity = 0;
};

constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

uint8_t* staging(Slot slot, size_t bytes) {
  static std::array<Staging, 2> slots;
  Staging& s = slots[static_cast<size_t>(slot)];
  if (bytes > s.capacity) {
    size_t capacity = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    s.data.reset();  // the old contents need not survive
    void* p = std::aligned_alloc(kHugePage, capacity);
    if (!p) throw Error(cat("dist: cannot allocate ", capacity, " bytes of host memory to stage a collective's data; reduce the tensor's size"));
    madvise(p, capacity, MADV_HUGEPAGE);  // a hint: without huge pages it is only slower to touch first
    s.data.reset(static_cast<uint8_t*>(p));
    s.capacity = capacity;
  }
  return s.data.get();
}

void allreduce(void* data, int64_t count, ScalarType wire, bool max) {
  const Job& j = job();
  if (!j.mpi || count == 0) return;
  size_t item = DType{wire}.itemsize();
  // Open MPI's MPI_IN_PLACE is ((void *) 1) (its mpi.h): the result replaces the input, with no
  // second buffer and no copy back.
  const void* in_place = reinterpret_cast<const void*>(1);
  for (int64_t done = 0; done < count; done += kMaxCount) {
    int n = static_cast<int>(std::min(kMaxCount, count - done));
    uint8_t* at = static_cast<uint8_t*>(data) + static_cast<size_t>(done) * item;
    check(j.mpi->Allreduce(in_place, at, n, mpi_type(wire), max ? j.mpi->op_max : j.mpi->op_sum, j.mpi->comm_world), "MPI_Allreduce");
  }
}

void raw_allreduce(const void* in, void* out, int64_t count, ScalarType s) {
  const Job& j = job();
  if (!j.mpi) {
    if (count > 0) std::memcpy(out, in, static_cast<size_t>(count) * DType{s}.itemsize());
    return;
  }
  check(j.mpi->Allreduce(in, out, to_count(count, "allreduce"), mpi_type(s), j.mpi->op_sum, j.mpi->comm_world), "MPI_Allreduce");
}

void broadcast(void* data, int64_t count, ScalarType s, int root) {
  const Job& j = job();
  if (!j.mpi) return;
  size_t item = DType{s}.itemsize();
  for (int64_t done = 0; done < count; done += kMaxCount) {
    int n = static_cast<int>(std::min(kMaxCount, count - done));
    check(j.mpi->Bcast(static_cast<uint8_t*>(data) + static_cast<size_t>(done) * item, n, mpi_type(s), root, j.mpi->comm_world),
          "MPI_Bcast");
  }
}

void allgather(const void* mine, const std::vector<int64_t>& counts, ScalarType s, void* out) {
  const Job& j = job();
  if (!j.mpi) {
    if (counts[0] > 0) std::memcpy(out, mine, static_cast<size_t>(counts[0]) * DType{s}.itemsize());
    return;
  }
  auto [n, at] = layout(counts, "allgather");
  check(j.mpi->Allgatherv(mine, n[static_cast<size_t>(j.world.rank)], mpi_type(s), out, n.data(), at.data(), mpi_type(s), j.mpi->comm_world),
        "MPI_Allgatherv");
}

void reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts, ScalarType wire, bool max) {
  const Job& j = job();
  if (!j.mpi) {
    if (counts[0] > 0) std::memcpy(out, in, static_cast<size_t>(counts[0]) * DType{wire}.itemsize());
    return;
  }
  auto [n, at] = layout(counts, "reduce_scatter");
  check(j.mpi->Reduce_scatter(in, out, n.data(), mpi_type(wire), max ? j.mpi->op_max : j.mpi->op_sum, j.mpi->comm_world),
        "MPI_Reduce_scatter");
}

// --- agreement: what every rank called ---------------------------------------------------------------

namespace {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Barrier: return "barrier";
    case Kind::Allreduce: return "allreduce";
    case Kind::Broadcast: return "broadcast";
    case Kind::Allgather: return "allgather";
    case Kind::ReduceScatter: return "reduce_scatter";
    case Kind::Metric: return "reduce_metric";
    case Kind::Gradients: return "DistributedDataParallel gradient sync";
    case Kind::Buffers: return "DistributedDataParallel buffer broadcast";
  }
  return "a collective kiln does not know";  // a peer running another kiln version
}

std::string describe(const Call& c) {
  std::string s = kind_name(c.kind);
  if (c.op >= 0) s += cat("(", op_name(static_cast<ReduceOp>(c.op)), ")");
  if (c.root >= 0) s += cat(" from root ", c.root);
  if (c.kind != Kind::Barrier) s += cat(" of ", c.dtype.name(), " ", shape_str(c.shape));
  return s;
}

}  // namespace

std::string where(const Call& c) { return cat("dist::", kind_name(c.kind), " on rank ", world().rank, " of ", world().size); }

std::vector<Shape> agree(const Call& mine, bool axis0_may_differ) {
  const World& w = world();
  constexpr size_t kHeader = 6;
  std::array<int64_t, kHeader> header = {static_cast<int64_t>(mine.kind), mine.op, mine.root, static_cast<int64_t>(mine.dtype.scalar),
                                         static_cast<int64_t>(mine.shape.size()), mine.failure.empty() ? 0 : 1};
  std::vector<uint8_t> headers = gather_bytes(header.data(), sizeof header);
  auto field = [&](int r, size_t i) {
    int64_t v;
    std::memcpy(&v, headers.data() + (static_cast<size_t>(r) * kHeader + i) * sizeof v, sizeof v);
    return v;
  };
  // Shapes padded to the longest, so that every rank can describe every call.
  size_t longest = 0;
  for (int r = 0; r < w.size; ++r) longest = std::max(longest, static_cast<size_t>(field(r, 4)));
  std::vector<int64_t> dims(longest, -1);
  std::copy(mine.shape.begin(), mine.shape.end(), dims.begin());
  std::vector<uint8_t> all_dims = longest ? gather_bytes(dims.data(), longest * sizeof(int64_t)) : std::vector<uint8_t>{};
  std::vector<Call> calls;
  for (int r = 0; r < w.size; ++r) {
    Call c(static_cast<Kind>(field(r, 0)), field(r, 1), field(r, 2), DType{static_cast<ScalarType>(field(r, 3))});
    for (int64_t i = 0; i < field(r, 4); ++i) {
      int64_t d;
      std::memcpy(&d, all_dims.data() + (static_cast<size_t>(r) * longest + static_cast<size_t>(i)) * sizeof d, sizeof d);
      c.shape.push_back(d);
    }
    calls.push_back(std::move(c));
  }
  std::vector<int> failed;
  for (int r = 0; r < w.size; ++r)
    if (field(r, 5)) failed.push_back(r);
  if (!failed.empty()) {
    if (!mine.failure.empty()) throw Error(cat(where(mine), ": its input failed, so every rank stops: ", mine.failure));
    throw Error(cat(where(mine), ": rank ", failed[0], " could not compute its input (its own error says why), so every rank stops"));
  }
  bool same = true;
  for (const Call& c : calls) {
    Shape a = c.shape, b = mine.shape;
    if (axis0_may_differ && !a.empty() && !b.empty()) a[0] = b[0] = 0;
    same = same && c.kind == mine.kind && c.op == mine.op && c.root == mine.root && c.dtype == mine.dtype && a == b;
  }
  if (same) {
    std::vector<Shape> shapes;
    for (Call& c : calls) shapes.push_back(std::move(c.shape));
    return shapes;
  }
  std::string list;
  for (int r = 0; r < w.size; ++r) list += cat(r ? "; " : "", "rank ", r, " called ", describe(calls[static_cast<size_t>(r)]));
  throw Error(cat(where(mine), ": the ranks' calls disagree: ", list, ". Every rank must call the same collective with the same op, root, dtype and shape",
                  axis0_may_differ ? " (allgather: all but axis 0)" : "", ", in the same order"));
}

}  // namespace kiln::dist::mpi
