// kiln::dist: collectives across the processes of an MPI job, and data-parallel training on them.
//
//   // mpirun --allow-run-as-root -np 2 ./train
//   dist::DistributedDataParallel ddp(model);                 // rank 0's parameters and buffers everywhere
//   BatchIterator data({x, y}, 64, true, /*seed=*/42, false, dist::shard());   // this rank's part of each epoch
//   Tensor loss = nn::cross_entropy(ddp(batch[0]), batch[1]);
//   ddp.backward(loss);                                        // backward, then gradients averaged across ranks
//   opt.step();
//   double mean_loss = dist::reduce_metric(loss.item<float>());
//   if (dist::is_main()) std::cout << mean_loss << "\n";     // rank 0 prints and writes files
//
// The job. MPI is Open MPI's libmpi.so.40, opened with dlopen at the first call of anything here (never
// linked: one binary runs with or without it). Only a process that mpirun started (it sets
// OMPI_COMM_WORLD_SIZE, read through Config::mpi_world_size) opens MPI; it calls MPI_Init_thread
// (MPI_THREAD_SERIALIZED) unless the program initialized MPI itself, and then MPI_Finalize at exit.
// Any other process is a world of one rank, where every collective returns its input's value. Under
// mpirun without a loadable libmpi.so.40 the first call throws (training alone would be wrong silently).
//
// Collectives. Every rank calls the same collectives in the same order (MPI's rule), from one thread
// at a time. Before any data moves, the ranks exchange what each one called (the collective, its op and
// root, and its tensor's dtype and shape): when they disagree, every rank throws the same kiln::Error
// listing each rank's call, instead of hanging or mixing bytes. A rank whose input fails to compute
// (an Error while realizing it) makes every rank throw too. A rank that never calls at all leaves the
// others waiting: MPI cannot tell a slow rank from a lost one.
// Each collective realizes its input, copies it to the host, runs MPI on host memory and returns a
// new, realized tensor on the input's device that carries no gradient. Inside a step that kiln::Jit
// captures, a collective is an error: a replay would skip it.
//
// Reductions (ReduceOp) on every dtype:
//   float32, float64, and integers: in their own type. An integer Sum wraps (two's complement, as
//     MPI's C sum); an integer Mean is the exact sum, in 64 bits, divided by the world size and
//     truncated toward zero.
//   float16, bfloat16: MPI has no such type, so they are reduced in float32 and rounded once at the end.
//   bool: Sum and Max are a logical or (torch's distributed sum of bools); Mean is an error.
//   Mean of floats is the sum divided by the world size.
// With Open MPI's algorithms every rank receives the same bits for 2 ranks; for more ranks MPI does not
// promise it (reduction order may differ by rank) and kiln does not check it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "frontend/data.h"
#include "frontend/nn.h"
#include "frontend/optim.h"
#include "frontend/tensor.h"

namespace kiln::dist {

int rank();              // 0 outside mpirun
int world_size();        // 1 outside mpirun
bool is_distributed();   // world_size() > 1
inline bool is_main() { return rank() == 0; }  // the rank that prints and writes files

enum class ReduceOp { Sum, Mean, Max };
const char* op_name(ReduceOp op);

// Returns once every rank has called it.
void barrier();
// The elementwise reduction of every rank's t (same shape and dtype on every rank).
Tensor allreduce(const Tensor& t, ReduceOp op);
// Root's t on every rank (same shape and dtype on every rank). 0 <= root < world_size().
Tensor broadcast(const Tensor& t, int root = 0);
// Every rank's t, concatenated along axis 0 in rank order. The ranks' axis-0 lengths may differ (other
// axes and the dtype may not); a 0-d t counts as shape (1), so 0-d inputs gather to shape (world).
Tensor allgather(const Tensor& t);
// The reduction of every rank's t (same shape and dtype, at least 1-D), split along axis 0 as
// torch.tensor_split(n, world) splits it: with n rows, ranks r < n mod world get ceil(n / world) rows,
// the others floor(n / world) (zero rows when n < world). Rank r receives its part, rows
// [r * floor(n / world) + min(r, n mod world), ...).
Tensor reduce_scatter(const Tensor& t, ReduceOp op);
// The rows of reduce_scatter's part for `rank`: {first row, row count}.
std::pair<int64_t, int64_t> scatter_rows(int64_t rows, int rank, int world);

// A metric (a loss, an accuracy) reduced over the ranks, on the host.
double reduce_metric(double value, ReduceOp op = ReduceOp::Mean);
// sum(value * weight) / sum(weight) over the ranks: a mean over samples when the ranks had different
// numbers of them (weight = this rank's sample count).
double weighted_mean(double value, double weight);

// This process's part of every epoch, for BatchIterator (frontend/data.h: the rule and the remainder).
Shard shard(bool drop_remainder = false);

// DistributedDataParallel: a module whose gradients are averaged across ranks, as torch's DDP.
//
//   dist::DistributedDataParallel ddp(model, {.bucket_bytes = 1 << 20, .sync_batch_norm = true});
//   for (int i = 0; i < k; ++i) {                       // gradient accumulation over k micro-batches
//     Tensor loss = nn::mse_loss(ddp(x[i]), y[i]) * (1.0 / k);
//     if (i + 1 < k) { auto scope = ddp.no_sync(); ddp.backward(loss); }   // accumulate only
//     else ddp.backward(loss);                                               // accumulate, then average
//   }
//   opt.step(); opt.zero_grad();
//
// - Construction broadcasts rank 0's parameters and buffers to every rank (assign: the module's own
//   tensors take the values), so every rank starts alike. A model that differs across ranks (how many
//   parameters and buffers, or a tensor's shape or dtype; names are not compared) is an Error on every
//   rank, naming the first tensor that differs.
// - backward(loss) runs loss.backward() and then sync_gradients(), unless a no_sync() scope is open:
//   then the gradients only accumulate, and the next backward outside the scope averages the total, so
//   the allreduce runs once per optimizer step, not once per micro-batch.
// - sync_gradients() replaces each parameter's gradient by its mean over the ranks. Gradients are
//   grouped in parameter order into buckets of at most bucket_bytes (a parameter larger than that is a
//   bucket of its own); a bucket holds one device's gradients of one dtype as they travel (float16 and
//   bfloat16 as float32, MPI having neither) and is one host buffer and one allreduce. A parameter with no gradient on any rank keeps none;
//   one with a gradient on some ranks only counts as zeros on the others.
// - broadcast_buffers (torch's default): after each sync, rank 0's buffers (running statistics) are
//   copied to every rank, so all ranks hold rank 0's; torch copies them before every forward instead.
// - sync_batch_norm: every nn::BatchNorm1d and nn::BatchNorm2d in the module normalizes with the statistics of the batch of
//   all ranks, forward and backward (torch.nn.SyncBatchNorm; see BatchNorm::sum_across_processes). Its
//   running statistics are then the same on every rank without broadcast_buffers. Off (the default):
//   each rank normalizes with its own batch's statistics, as torch's DDP does.
// In a world of one rank nothing is communicated (sync_gradients leaves the gradients as they are).
struct DdpOptions {
  size_t bucket_bytes = size_t{25} << 20;  // torch's default bucket_cap_mb = 25
  bool broadcast_buffers = true;
  bool sync_batch_norm = false;
};

class DistributedDataParallel {
 public:
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module, DdpOptions options = {});

  Tensor forward(const Tensor& x) { return module_->forward(x); }
  Tensor operator()(const Tensor& x) { return forward(x); }
  void backward(const Tensor& loss);
  void sync_gradients();

  // While one exists, backward() does not synchronize.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(&ddp) { ++ddp_->no_sync_depth_; }
    ~NoSync() { if (ddp_) --ddp_->no_sync_depth_; }
    NoSync(NoSync&& other) noexcept : ddp_(other.ddp_) { other.ddp_ = nullptr; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync& operator=(NoSync&&) = delete;

   private:
    DistributedDataParallel* ddp_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  nn::Module& module() { return *module_; }
  // Parameter indices (into module().parameters()) of each bucket, in sync order.
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }
  struct Stats {
    int64_t syncs = 0;       // sync_gradients calls that communicated
    int64_t allreduces = 0;  // bucket allreduces
    int64_t bytes = 0;       // bytes of gradients allreduced (each rank's share)
  };
  Stats stats() const { return stats_; }

 private:
  std::shared_ptr<nn::Module> module_;
  DdpOptions options_;
  std::vector<Tensor> params_;
  std::vector<std::vector<size_t>> buckets_;
  int no_sync_depth_ = 0;
  Stats stats_;
  void broadcast_buffers();
};

// ZeroRedundancyOptimizer: optimizer state partitioned across the ranks (ZeRO stage 1, as DeepSpeed;
// the role of torch.distributed.optim.ZeroRedundancyOptimizer), wrapped around any kiln optimizer.
//
//   dist::DistributedDataParallel ddp(model);
//   dist::ZeroRedundancyOptimizer opt(model->parameters(), [](std::vector<Tensor> part) {
//     return std::make_unique<optim::AdamW>(std::move(part), 1e-3); });
//   ddp.backward(loss); opt.step(); opt.zero_grad();     // as any optimizer; LR schedules drive it too
//   std::cout << opt.state_bytes() << " bytes of Adam moments on this rank\n";
//
// The parameters of one dtype and device are laid end to end (parameter order, each flattened), and
// that flat vector is split over the ranks as reduce_scatter splits rows (scatter_rows: the first
// n mod world ranks get one element more). Each rank keeps its part as a tensor of its own and builds
// the wrapped optimizer over its parts alone, so that optimizer's state (Adam's moments, SGD's momentum)
// is about 1/world of what it would be. step(): each rank gives the wrapped optimizer its part of the
// gradients (already averaged across ranks, by DistributedDataParallel), which updates that part; the
// ranks' parts are then all-gathered and every parameter takes its updated value, so every rank holds
// the same full parameters. Every rank calls step() (it is a collective).
// - A parameter without a gradient while others of its dtype and device have one steps with a zero
//   gradient (its elements share the part with the rest); the wrapped optimizer alone would skip it.
// - The parts are a copy of 1/world of the parameters (DeepSpeed's stage 1 keeps such a partition too).
// - In a world of one the part is the whole flat vector and nothing is communicated: the parameters
//   take exactly the values the wrapped optimizer alone gives them (its update is elementwise).
// - state_dict() gathers the whole state, keyed by parameter as the wrapped optimizer alone keys it (a
//   collective: every rank calls it), so a checkpoint does not depend on the number of ranks;
//   load_state_dict() takes that form and keeps this rank's part.
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor> parts)>;

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  ZeroRedundancyOptimizer(std::vector<Tensor> params, const OptimizerFactory& make_optimizer);

  void step(std::vector<Tensor> also_realize = {}) override;
  std::map<std::string, Tensor> state_dict() const override;  // a collective: every rank calls it
  void load_state_dict(const std::map<std::string, Tensor>& state, int64_t steps) override;
  size_t state_bytes() const override { return local_->state_bytes(); }  // this rank's
  // The wrapped optimizer over this rank's parts (one per dtype and device family this rank holds
  // elements of).
  optim::Optimizer& local() { return *local_; }

  // One dtype-and-device family of parameters, laid end to end.
  struct Partition {
    std::vector<size_t> params;  // indices into params(), in order
    int64_t numel = 0;           // elements of the family
    int64_t first = 0, count = 0;  // this rank's part: [first, first + count)
    int local = -1;              // index of the part in local().params(); -1 when count is 0
  };
  const std::vector<Partition>& partitions() const { return partitions_; }

 protected:
  Tensor update(size_t i, const Tensor& p, const Tensor& g, const Tensor& hyper) override;

 private:
  std::vector<Partition> partitions_;
  std::unique_ptr<optim::Optimizer> local_;
};

}  // namespace kiln::dist
