// dist::DistributedDataParallel (frontend/distributed.h): rank 0's state at construction, gradients
// averaged across ranks in buckets of host memory, rank 0's buffers after each sync.
#include <cstring>
#include <map>

#include "frontend/detail.h"
#include "frontend/distributed.h"
#include "frontend/mpi.h"

namespace kiln::dist {
namespace {

// The dtype a gradient travels in: float16 and bfloat16 as float32 (MPI has neither).
DType wire_dtype(DType d) { return detail::is_narrow_float(d) ? dtypes::float32 : d; }

void use_sync_batch_norm(nn::Module& m) {
  if (auto* bn = dynamic_cast<nn::BatchNorm*>(&m)) bn->sum_across_processes = [](const Tensor& t) { return allreduce(t, ReduceOp::Sum); };
  for (const auto& [name, child] : m.named_children()) use_sync_batch_norm(*child);
}

// Tensors' bytes end to end in the In staging buffer (they are realized first, all in one schedule).
uint8_t* pack(std::vector<Tensor> tensors) {
  realize_all(tensors);
  size_t total = 0;
  for (const Tensor& t : tensors) total += static_cast<size_t>(t.numel()) * t.dtype().itemsize();
  uint8_t* flat = mpi::staging(mpi::Slot::In, total);
  size_t at = 0;
  for (Tensor& t : tensors) {
    mpi::read_into(t, flat + at);
    at += static_cast<size_t>(t.numel()) * t.dtype().itemsize();
  }
  return flat;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, DdpOptions options)
    : module_(std::move(module)), options_(options) {
  if (!module_) throw Error("DistributedDataParallel: the module is null; pass the model to train");
  if (options_.bucket_bytes == 0) throw Error("DistributedDataParallel: bucket_bytes is 0; use a positive size (torch's default is 25 MiB)");
  nn::NamedTensors named = module_->named_parameters();
  for (const auto& [name, p] : named) params_.push_back(p);

  // Buckets in parameter order, one open bucket per (wire dtype, device) at a time.
  std::map<std::string, std::pair<size_t, size_t>> open;  // family -> (bucket, bytes so far)
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    size_t bytes = static_cast<size_t>(p.numel()) * wire_dtype(p.dtype()).itemsize();
    std::string family = cat(wire_dtype(p.dtype()).name(), "@", p.device());
    auto it = open.find(family);
    if (it == open.end() || (it->second.second > 0 && it->second.second + bytes > options_.bucket_bytes)) {
      buckets_.emplace_back();
      it = open.insert_or_assign(family, std::pair{buckets_.size() - 1, size_t{0}}).first;
    }
    buckets_[it->second.first].push_back(i);
    it->second.second += bytes;
  }

  if (options_.sync_batch_norm) use_sync_batch_norm(*module_);
  auto lock = mpi::enter("DistributedDataParallel");
  if (mpi::world().size == 1) return;
  // Rank 0's parameters and buffers everywhere. The ranks first agree on how many there are: a rank
  // with one more would wait for its broadcast forever.
  for (const auto& [name, b] : module_->named_buffers()) named.emplace_back(name, b);
  std::vector<int64_t> count = {static_cast<int64_t>(params_.size()), static_cast<int64_t>(named.size() - params_.size())};
  std::vector<int64_t> counts = allgather(Tensor::from_vector(count, {2})).to_vector<int64_t>();
  for (size_t r = 0; r < counts.size(); r += 2)
    if (counts[r] != count[0] || counts[r + 1] != count[1])
      throw Error(cat("DistributedDataParallel on rank ", mpi::world().rank, ": rank ", r / 2, "'s model has ", counts[r], " parameters and ",
                      counts[r + 1], " buffers, this rank's ", count[0], " and ", count[1], "; build the same model on every rank"));
  NoGradGuard no_grad;
  std::vector<Tensor> assigned;
  for (auto& [name, t] : named) {
    Tensor value;
    try {
      value = broadcast(t, 0);
    } catch (const Error& e) {
      throw Error(cat("DistributedDataParallel: copying \"", name, "\" from rank 0: ", e.what(), " (build the same model on every rank)"));
    }
    assigned.push_back(t.assign(value));
  }
  realize_all(assigned);
}

void DistributedDataParallel::backward(const Tensor& loss) {
  Tensor(loss).backward();
  if (no_sync_depth_ == 0) sync_gradients();
}

void DistributedDataParallel::sync_gradients() {
  auto lock = mpi::enter("DistributedDataParallel::sync_gradients");
  const mpi::World& world = mpi::world();
  if (world.size == 1 || params_.empty()) return;
  // Which parameters have a gradient on some rank: the others' missing ones count as zeros.
  std::vector<uint8_t> has(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) has[i] = params_[i].grad() ? 1 : 0;
  mpi::agree(mpi::Call{mpi::Kind::Gradients, static_cast<int64_t>(ReduceOp::Max), -1, dtypes::uint8, {static_cast<int64_t>(has.size())}});
  mpi::allreduce(has.data(), static_cast<int64_t>(has.size()), ScalarType::UInt8, true);

  for (const std::vector<size_t>& bucket : buckets_) {
    std::vector<size_t> members;
    std::vector<Tensor> grads;
    int64_t total = 0;
    for (size_t i : bucket) {
      if (!has[i]) continue;
      const Tensor& p = params_[i];
      std::optional<Tensor> g = p.grad();
      Tensor grad = g ? g->detach() : p.detach().zeros_like();
      grads.push_back(grad.dtype() == wire_dtype(p.dtype()) ? grad : grad.cast(wire_dtype(p.dtype())));
      members.push_back(i);
      total += p.numel();
    }
    if (members.empty()) continue;
    DType wire = grads[0].dtype();
    mpi::Call call{mpi::Kind::Gradients, static_cast<int64_t>(ReduceOp::Mean), -1, wire, {total}};
    size_t bytes = static_cast<size_t>(total) * wire.itemsize();
    uint8_t* flat = mpi::staging(mpi::Slot::In, bytes);
    try {
      flat = pack(grads);
    } catch (const std::exception& e) {  // every rank learns of it in agree, instead of waiting
      call.failure = e.what();
    }
    mpi::agree(call);
    mpi::allreduce(flat, total, wire.scalar, false);
    // The mean, computed lazily: the division and the cast fuse into the optimizer's step.
    const Tensor& first = params_[members[0]];
    Tensor sum = Tensor::from_raw(flat, wire, {total}, first.device());
    int64_t at = 0;
    for (size_t i : members) {
      Tensor& p = params_[i];
      Tensor mean = sum.slice(0, at, at + p.numel()).reshape(p.shape()) / static_cast<double>(world.size);
      p.set_grad(mean.dtype() == p.dtype() ? mean : mean.cast(p.dtype()));
      at += p.numel();
    }
    ++stats_.allreduces;
    stats_.bytes += static_cast<int64_t>(bytes);
  }
  ++stats_.syncs;
  if (options_.broadcast_buffers) broadcast_buffers();
}

void DistributedDataParallel::broadcast_buffers() {
  std::vector<Tensor> buffers = module_->buffers();
  if (buffers.empty()) return;
  int64_t total = 0;
  for (const Tensor& b : buffers) total += b.numel() * static_cast<int64_t>(b.dtype().itemsize());
  mpi::Call call{mpi::Kind::Buffers, -1, 0, dtypes::uint8, {total}};
  uint8_t* flat = mpi::staging(mpi::Slot::In, static_cast<size_t>(total));
  if (mpi::world().rank == 0) {
    try {
      flat = pack(buffers);
    } catch (const std::exception& e) {
      call.failure = e.what();
    }
  }
  mpi::agree(call);
  mpi::broadcast(flat, total, ScalarType::UInt8, 0);
  if (mpi::world().rank == 0) return;  // its buffers are the source
  NoGradGuard no_grad;
  size_t at = 0;
  for (Tensor& b : buffers) {
    b.assign(Tensor::from_raw(flat + at, b.dtype(), b.shape(), b.device()));
    at += static_cast<size_t>(b.numel()) * b.dtype().itemsize();
  }
}

}  // namespace kiln::dist
