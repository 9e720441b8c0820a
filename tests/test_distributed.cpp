// kiln::dist (frontend/distributed.h): collectives and data-parallel training.
//
// [distributed]: in this process, a world of one rank, where every collective is the identity.
// [.mpi] (hidden): run by tests/CMakeLists.txt as `mpirun -np 2 kiln_tests "[mpi]"`. Every rank builds
// its inputs from its rank (value()), computes on the host what the collective must return from the
// inputs every rank has, and compares; data-parallel training is compared with a single-process run on
// the whole batch that each rank computes itself.
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "devices/device.h"
#include "frontend/distributed.h"
#include "frontend/jit.h"
#include "frontend/optim.h"
#include "helpers.h"
#include "uop/config.h"

using namespace kiln;
using Catch::Matchers::Contains;
using dist::ReduceOp;

namespace {

// Rank r's element i: small integers, exact in every dtype and in the sums of a few ranks.
double value(DType d, int r, int64_t i) {
  if (is_bool(d)) return (r + i) % 3 == 0 ? 1 : 0;
  double v = static_cast<double>((r * 7 + i * 3) % 21);
  return is_unsigned(d) ? v : v - 10;
}

Tensor input(DType d, int r, const Shape& shape, const std::string& device = "") {
  std::vector<double> v(static_cast<size_t>(kiln::numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = value(d, r, static_cast<int64_t>(i));
  return Tensor::from_vector(v, shape, device).cast(d).realize();
}

std::vector<double> values(Tensor t) { return t.cast(dtypes::float64).to_vector<double>(); }

// What allreduce(op) of every rank's input() gives at element i.
double reduced(DType d, ReduceOp op, int world, int64_t i) {
  double sum = 0, max = -INFINITY;
  for (int r = 0; r < world; ++r) sum += value(d, r, i), max = std::max(max, value(d, r, i));
  if (is_bool(d)) return max;  // Sum and Max: a logical or
  switch (op) {
    case ReduceOp::Sum: return sum;
    case ReduceOp::Max: return max;
    case ReduceOp::Mean: return is_float(d) ? sum / world : std::trunc(sum / world);
  }
  return NAN;
}

// The float16/bfloat16 mean rounds to the dtype; everything else here is exact.
double tolerance(DType d) {
  if (d == dtypes::bfloat16) return 1e-2;
  if (d == dtypes::float16) return 1e-3;
  return 0;
}

// "" when got equals want (within tol, relative beyond 1), else the first difference and both vectors' sizes.
std::string first_difference(const std::vector<double>& got, const std::vector<double>& want, double tol = 0) {
  if (got.size() != want.size()) return cat("got ", got.size(), " values, want ", want.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= tol * std::max(1.0, std::abs(want[i]))))
      return cat("element ", i, ": got ", got[i], ", want ", want[i], " (of ", got.size(), ")");
  return "";
}

std::vector<ReduceOp> all_ops() { return {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max}; }

// The ops a dtype supports: bool has no mean.
std::vector<ReduceOp> ops_for(DType d) { return is_bool(d) ? std::vector<ReduceOp>{ReduceOp::Sum, ReduceOp::Max} : all_ops(); }

// --- small models, built alike on every rank from a seed ---------------------------------------------

std::shared_ptr<nn::Sequential> mlp(uint64_t seed, int64_t hidden = 8) {
  Tensor::manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>();
  net->add("fc1", std::make_shared<nn::Linear>(4, hidden)).add("relu", std::make_shared<nn::ReLU>());
  net->add("fc2", std::make_shared<nn::Linear>(hidden, 3));
  return net;
}

std::shared_ptr<nn::Sequential> convnet(uint64_t seed) {  // (N, 1, 6, 6) -> (N, 3), with batch norm
  Tensor::manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>();
  net->add("conv", std::make_shared<nn::Conv2d>(1, 2, std::array<int64_t, 2>{3, 3})).add("bn", std::make_shared<nn::BatchNorm2d>(2));
  net->add("relu", std::make_shared<nn::ReLU>()).add("flat", std::make_shared<nn::Flatten>());
  net->add("fc", std::make_shared<nn::Linear>(2 * 4 * 4, 3));
  return net;
}

// Rows of a data set every rank builds alike (host random numbers): inputs of `shape` and (rows, 3) targets.
std::pair<Tensor, Tensor> data(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(kiln::numel(shape))), y(static_cast<size_t>(shape[0] * 3));
  for (float& v : x) v = normal(rng);
  for (float& v : y) v = normal(rng);
  return {Tensor::from_vector(x, shape), Tensor::from_vector(y, {shape[0], 3})};
}

// "" when every rank's t has rank 0's bytes, else the first rank whose bytes differ.
std::string differs_across_ranks(const Tensor& t) {
  std::vector<uint8_t> mine = Tensor(t).to_bytes(), all = dist::allgather(t.reshape({1, t.numel()})).to_bytes();
  for (size_t r = 1; r < all.size() / std::max<size_t>(mine.size(), 1); ++r)
    if (std::memcmp(all.data(), all.data() + r * mine.size(), mine.size()) != 0) return cat("rank ", r, "'s bytes differ from rank 0's");
  return "";
}

std::vector<double> flat_values(const nn::Module& m) {
  std::vector<double> out;
  for (auto& [name, t] : m.state_dict()) {
    std::vector<double> v = values(t);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// An optimizer's state_dict as "key shape" names and values, in key order.
std::pair<std::vector<std::string>, std::vector<double>> flat_state(const std::map<std::string, Tensor>& state) {
  std::pair<std::vector<std::string>, std::vector<double>> out;
  for (const auto& [key, t] : state) {
    out.first.push_back(cat(key, " ", shape_str(t.shape())));
    std::vector<double> v = values(t);
    out.second.insert(out.second.end(), v.begin(), v.end());
  }
  return out;
}

// A ZeRO-1 optimizer's state_dict against a plain one's: the same keys and shapes, the same values.
void check_same_state(const optim::Optimizer& zero, const optim::Optimizer& plain) {
  auto [keys, state] = flat_state(zero.state_dict());
  auto [ref_keys, ref_state] = flat_state(plain.state_dict());
  CHECK(keys == ref_keys);
  CHECK(first_difference(state, ref_state, 1e-6) == "");
}

// `to` (another model and optimizer) takes `from`'s parameters and optimizer state.
void resume_from(nn::Module& to, optim::Optimizer& to_opt, const nn::Module& from, const optim::Optimizer& from_opt) {
  to.load_state_dict(from.state_dict(), true);
  to_opt.load_state_dict(from_opt.state_dict(), from_opt.steps());
}

}  // namespace

// --- a world of one rank --------------------------------------------------------------------------------

TEST_CASE("dist: outside mpirun the world is one rank, rank 0, which is the main rank", "[distributed]") {
  CHECK(dist::rank() == 0);
  CHECK(dist::world_size() == 1);
  CHECK_FALSE(dist::is_distributed());
  CHECK(dist::is_main());
  dist::barrier();
}

TEST_CASE("dist: in a world of one every collective is the identity, for every dtype and op", "[distributed]") {
  for (DType d : all_scalar_dtypes()) {
    INFO(d.name());
    Tensor t = input(d, 0, {3, 5});
    std::vector<double> want = values(t);
    for (ReduceOp op : ops_for(d)) {
      INFO(dist::op_name(op));
      Tensor r = dist::allreduce(t, op);
      CHECK(r.dtype() == d);
      CHECK(r.shape() == Shape{3, 5});
      CHECK(first_difference(values(r), want) == "");
      Tensor s = dist::reduce_scatter(t, op);
      CHECK(s.shape() == Shape{3, 5});
      CHECK(first_difference(values(s), want) == "");
    }
    CHECK(first_difference(values(dist::broadcast(t, 0)), want) == "");
    CHECK(first_difference(values(dist::allgather(t)), want) == "");
    CHECK(dist::allgather(t).shape() == Shape{3, 5});
  }
}

TEST_CASE("dist: zero-size tensors pass through every collective", "[distributed]") {
  for (DType d : {dtypes::float32, dtypes::float16, dtypes::int8, dtypes::bool_}) {
    INFO(d.name());
    Tensor t = Tensor::zeros({0, 4}, d);
    CHECK(dist::allreduce(t, ReduceOp::Max).shape() == Shape{0, 4});
    CHECK(dist::broadcast(t, 0).shape() == Shape{0, 4});
    CHECK(dist::allgather(t).shape() == Shape{0, 4});
    CHECK(dist::reduce_scatter(t, ReduceOp::Sum).shape() == Shape{0, 4});
    CHECK(dist::allgather(Tensor::zeros({3, 0}, d)).shape() == Shape{3, 0});
  }
}

TEST_CASE("dist: a 0-d tensor gathers to shape (world) and cannot be scattered", "[distributed]") {
  Tensor s = Tensor::full({}, 2.5);
  CHECK(dist::allgather(s).shape() == Shape{1});
  CHECK(dist::allreduce(s, ReduceOp::Mean).item<float>() == 2.5f);
  CHECK_THROWS_WITH(dist::reduce_scatter(s, ReduceOp::Sum), Contains("a 0-d tensor has no axis 0 to scatter"));
}

TEST_CASE("dist: errors name the collective, the rank and the values: bad root, mean of bool", "[distributed]") {
  Tensor t = Tensor::ones({2});
  CHECK_THROWS_WITH(dist::broadcast(t, 1), Contains("dist::broadcast on rank 0 of 1: root 1 is not a rank; use 0 <= root < 1"));
  CHECK_THROWS_WITH(dist::broadcast(t, -1), Contains("root -1 is not a rank"));
  CHECK_THROWS_WITH(dist::allreduce(Tensor::ones({2}, dtypes::bool_), ReduceOp::Mean),
                    Contains("dist::allreduce on rank 0 of 1: the mean of bool values is not defined"));
  CHECK_THROWS_WITH(dist::reduce_scatter(Tensor::ones({2}, dtypes::bool_), ReduceOp::Mean), Contains("the mean of bool values"));
}

TEST_CASE("dist: an input that fails to compute is reported by the collective, with its own error", "[distributed]") {
  Tensor w = Tensor::from_vector<float>({1, 2}, {2}).requires_grad_();
  Tensor x = Tensor::from_vector<float>({3, 4}, {2}).requires_grad_();
  w.realize();
  Tensor y = x * w;
  y.realize();
  {
    NoGradGuard no_grad;
    w.assign(w * 3.0f).realize();
  }
  y.sum().backward();  // x's gradient reads the w that was overwritten
  CHECK_THROWS_WITH(dist::allreduce(*x.grad(), ReduceOp::Sum),
                    Contains("dist::allreduce on rank 0 of 1: its input failed, so every rank stops") && Contains("modified by an inplace operation"));
}

TEST_CASE("dist: collectives keep their input's device", "[distributed]") {
  for (const DeviceStatus& status : probe_devices()) {
    if (!status.available || get_device(status.name).spec().oracle) continue;  // not the oracle (REF): by what it is, not its name
    INFO(status.name);
    Tensor h = input(dtypes::float16, 0, {4}, status.name);
    Tensor r = dist::allreduce(h, ReduceOp::Mean);
    CHECK(r.device() == h.device());
    CHECK(first_difference(values(r), values(h)) == "");
    CHECK(dist::allgather(input(dtypes::int32, 0, {2, 2}, status.name)).device() == h.device());
  }
}

TEST_CASE("dist: a collective inside a captured step is an error, not a replay that skips it, asking the rank is fine", "[distributed]") {
  Jit step([](const std::vector<Tensor>& in) { return std::vector<Tensor>{dist::allreduce(in[0] + 1.0f, ReduceOp::Sum)}; });
  CHECK_THROWS_WITH(step({Tensor::ones({3})}), Contains("dist::allreduce: collectives are host calls that a captured step (kiln::Jit) cannot replay"));
  Jit asks([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * static_cast<double>(dist::world_size() + dist::rank())}; });
  for (int call = 0; call < 5; ++call) CHECK(asks({Tensor::ones({1})})[0].item<float>() == 1.0f);  // rank and world are no collectives
}

TEST_CASE("dist: reduce_scatter splits rows as torch.tensor_split: the first n mod world ranks get one more", "[distributed]") {
  using P = std::pair<int64_t, int64_t>;
  CHECK(dist::scatter_rows(5, 0, 3) == P{0, 2});
  CHECK(dist::scatter_rows(5, 1, 3) == P{2, 2});
  CHECK(dist::scatter_rows(5, 2, 3) == P{4, 1});
  CHECK(dist::scatter_rows(2, 2, 3) == P{2, 0});
  CHECK(dist::scatter_rows(6, 1, 2) == P{3, 3});
}

TEST_CASE("dist: metrics in a world of one are the values themselves", "[distributed]") {
  CHECK(dist::reduce_metric(0.25) == 0.25);
  CHECK(dist::reduce_metric(3, ReduceOp::Max) == 3);
  CHECK(dist::weighted_mean(0.5, 10) == 0.5);
  CHECK_THROWS_WITH(dist::weighted_mean(0.5, 0), Contains("the weights sum to 0"));
}

// --- the sampler (pure: any rank and world) -------------------------------------------------------------

TEST_CASE("shard: the ranks' parts are disjoint and cover the epoch when the world divides it", "[distributed]") {
  std::vector<int64_t> order = epoch_order(12, true, 7, 3);
  std::multiset<int64_t> seen;
  for (int64_t r = 0; r < 4; ++r) {
    std::vector<int64_t> part = shard_of(order, {r, 4});
    CHECK(part.size() == 3);
    seen.insert(part.begin(), part.end());
  }
  std::vector<int64_t> all(12);
  std::iota(all.begin(), all.end(), 0);
  CHECK(std::vector<int64_t>(seen.begin(), seen.end()) == all);
}

TEST_CASE("shard: a remainder is padded from the order's start, or dropped, as torch's DistributedSampler", "[distributed]") {
  std::vector<int64_t> order = {5, 3, 8, 0, 9, 1, 2, 7, 4, 6};  // 10 samples, 4 ranks: R = 2
  CHECK(shard_of(order, {0, 4}) == std::vector<int64_t>{5, 9, 4});  // positions 0, 4, 8
  CHECK(shard_of(order, {3, 4}) == std::vector<int64_t>{0, 7, 3});  // positions 3, 7, 11 = padded with order[1]
  CHECK(shard_of(order, {3, 4, true}) == std::vector<int64_t>{0, 7});
  std::multiset<int64_t> padded, dropped;
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t i : shard_of(order, {r, 4})) padded.insert(i);
    for (int64_t i : shard_of(order, {r, 4, true})) dropped.insert(i);
  }
  CHECK(padded.size() == 12);
  CHECK(padded.count(5) == 2);
  CHECK(padded.count(3) == 2);
  CHECK(dropped.size() == 8);
  CHECK(std::set<int64_t>(dropped.begin(), dropped.end()).size() == 8);
  CHECK(dropped.count(4) == 0);
  CHECK(dropped.count(6) == 0);
  CHECK_THROWS_WITH(shard_of(order, {4, 4}), Contains("shard rank 4 of world 4 is out of range"));
}

TEST_CASE("shard: a BatchIterator with a shard yields that shard's samples, and its state counts within them", "[distributed]") {
  HostTensor ids{dtypes::int64, {10}, std::vector<uint8_t>(80)};
  for (int64_t i = 0; i < 10; ++i) std::memcpy(ids.data.data() + 8 * i, &i, 8);
  Shard shard{1, 4};
  BatchIterator it({ids}, 2, true, 42, false, shard);
  CHECK(it.epoch_samples() == 3);
  CHECK(it.batches_per_epoch() == 2);
  std::vector<int64_t> got;
  std::vector<Tensor> batch;
  while (it.next(batch)) {
    std::vector<int64_t> v = batch[0].to_vector<int64_t>();
    got.insert(got.end(), v.begin(), v.end());
  }
  CHECK(got == shard_of(epoch_order(10, true, 42, 0), shard));
  CHECK(it.order(1) == shard_of(epoch_order(10, true, 42, 1), shard));
  CHECK_THROWS_WITH(BatchIterator({ids}, 4, false, 0, true, Shard{0, 4}), Contains("(rank 0's part of 10) make no batch of 4"));
}

// --- data parallel in a world of one ------------------------------------------------------------------------

TEST_CASE("ddp: gradients are bucketed in parameter order, at most bucket_bytes each unless one parameter is larger", "[distributed]") {
  auto net = mlp(1);  // fc1.weight 32 floats (128 bytes), fc1.bias 8 (32), fc2.weight 24 (96), fc2.bias 3 (12)
  using Buckets = std::vector<std::vector<size_t>>;
  CHECK(dist::DistributedDataParallel(net, {.bucket_bytes = 160}).buckets() == Buckets{{0, 1}, {2, 3}});
  CHECK(dist::DistributedDataParallel(net, {.bucket_bytes = 64}).buckets() == Buckets{{0}, {1}, {2}, {3}});
  CHECK(dist::DistributedDataParallel(net).buckets() == Buckets{{0, 1, 2, 3}});
  CHECK_THROWS_WITH(dist::DistributedDataParallel(net, {.bucket_bytes = 0}), Contains("bucket_bytes is 0"));
  CHECK_THROWS_WITH(dist::DistributedDataParallel(nullptr), Contains("the module is null"));
}

TEST_CASE("ddp: in a world of one, backward is loss.backward() and nothing is communicated", "[distributed]") {
  auto net = mlp(2), ref = mlp(2);
  dist::DistributedDataParallel ddp(net);
  auto [x, y] = data({6, 4}, 3);
  {
    auto scope = ddp.no_sync();
    ddp.backward(nn::mse_loss(ddp(x), y));
  }
  ddp.backward(nn::mse_loss(ddp(x), y));
  nn::mse_loss(ref->forward(x), y).backward();
  nn::mse_loss(ref->forward(x), y).backward();
  std::vector<Tensor> a = net->parameters(), b = ref->parameters();
  for (size_t i = 0; i < a.size(); ++i) CHECK(first_difference(values(*a[i].grad()), values(*b[i].grad())) == "");
  CHECK(ddp.stats().syncs == 0);
  CHECK(ddp.stats().allreduces == 0);
}

TEST_CASE("ddp: synchronized batch norm in a world of one is batch norm: outputs, gradients, running statistics", "[distributed]") {
  auto net = convnet(5), ref = convnet(5);
  dist::DistributedDataParallel ddp(net, {.sync_batch_norm = true});
  auto [x, y] = data({4, 1, 6, 6}, 9);
  Tensor out = ddp(x), want = ref->forward(x);
  CHECK(first_difference(values(out), values(want), 1e-5) == "");
  ddp.backward(nn::mse_loss(out, y));
  nn::mse_loss(want, y).backward();
  std::vector<Tensor> a = net->parameters(), b = ref->parameters();
  for (size_t i = 0; i < a.size(); ++i) CHECK(first_difference(values(*a[i].grad()), values(*b[i].grad()), 1e-5) == "");
  CHECK(first_difference(flat_values(*net), flat_values(*ref), 1e-5) == "");
}

// --- ZeRO-1 in a world of one --------------------------------------------------------------------------------

namespace {

// Trains net with opt for `steps` steps of mse on (x, y), a StepLR halving lr every 2 steps. The gradients
// are realized before each step, so that both optimizers compared are given the same bits: lazy, they
// would fuse into the optimizer's kernels, which differ between a plain and a partitioned optimizer.
void train(nn::Module& net, optim::Optimizer& opt, const Tensor& x, const Tensor& y, int64_t steps) {
  optim::StepLR schedule(opt, 2, 0.5);
  for (int64_t step = 0; step < steps; ++step) {
    Tensor loss = nn::mse_loss(net.forward(x), y);
    loss.backward();
    std::vector<Tensor> grads;
    for (const Tensor& p : net.parameters()) grads.push_back(*p.grad());
    realize_all(grads);
    for (size_t i = 0; i < grads.size(); ++i) net.parameters()[i].set_grad(grads[i]);
    opt.step({loss});
    opt.zero_grad();
    schedule.step();
  }
}

dist::OptimizerFactory adamw(double lr) {
  return [lr](std::vector<Tensor> part) { return std::make_unique<optim::AdamW>(std::move(part), lr, 0.9, 0.999, 1e-8, 0.05); };
}

// The devices ZeRO-1 is compared on, with the tolerance each allows. REF (kiln's interpreter) computes
// every op as written, so the partitioned update must be the same bits as the plain one. The compiled CPU
// device lets LLVM contract a*b+c into one FMA (`fadd contract`), and whether it does depends on the
// kernel around the expression (one flat kernel against one per parameter), so an op per step may round
// differently: 1e-6 (relative beyond 1) bounds a few such ulps over these few steps (seen: 2e-9).
struct DeviceCase {
  std::string device;
  double tol;
};
std::vector<DeviceCase> zero_devices() { return {{"REF", 0}, {default_device_name(), 1e-6}}; }

// Runs body with `device` as the default device (config().device), restored after.
template <typename F>
void on_device(const std::string& device, F body) {
  std::string saved = config().device;
  config().device = device;
  try {
    body();
  } catch (...) {
    config().device = saved;
    throw;
  }
  config().device = saved;
}

}  // namespace

TEST_CASE("zero: in a world of one, ZeRO-1 gives the wrapped optimizer's parameters (REF: exactly) and state size: AdamW, SGD momentum",
          "[distributed]") {
  const int64_t steps = 5;
  for (const DeviceCase& c : zero_devices()) {
    INFO("device " << c.device);
    on_device(c.device, [&] {
      auto [x, y] = data({6, 4}, 11);
      auto ref = mlp(30), net = mlp(30);
      optim::AdamW ref_opt(ref->parameters(), 0.01, 0.9, 0.999, 1e-8, 0.05);
      dist::ZeroRedundancyOptimizer opt(net->parameters(), adamw(0.01));
      CHECK(opt.lr == 0.01);
      train(*ref, ref_opt, x, y, steps);
      train(*net, opt, x, y, steps);
      CHECK(first_difference(flat_values(*net), flat_values(*ref), c.tol) == "");
      CHECK(opt.steps() == steps);
      CHECK(opt.lr == ref_opt.lr);  // the schedule drove the wrapper
      CHECK(ref_opt.state_bytes() == 2 * 67 * 4);  // two moments of 67 float32 parameters (32 + 8 + 24 + 3)
      CHECK(opt.state_bytes() == ref_opt.state_bytes());

      auto sgd_ref = mlp(31), sgd_net = mlp(31);  // SGD with momentum and Nesterov
      optim::SGD sgd_ref_opt(sgd_ref->parameters(), 0.05, 0.9, 0, 1e-3, true);
      dist::ZeroRedundancyOptimizer sgd_opt(sgd_net->parameters(), [](std::vector<Tensor> part) {
        return std::make_unique<optim::SGD>(std::move(part), 0.05, 0.9, 0, 1e-3, true);
      });
      train(*sgd_ref, sgd_ref_opt, x, y, steps);
      train(*sgd_net, sgd_opt, x, y, steps);
      CHECK(first_difference(flat_values(*sgd_net), flat_values(*sgd_ref), c.tol) == "");
      CHECK(sgd_opt.state_bytes() == 67 * 4);
    });
  }
}

TEST_CASE("zero: in a world of one, state_dict is the wrapped optimizer's alone (whole parameters), and loading it resumes exactly",
          "[distributed]") {
  auto [x, y] = data({6, 4}, 12);
  auto ref = mlp(32), net = mlp(32), resumed = mlp(33);
  optim::AdamW ref_opt(ref->parameters(), 0.01, 0.9, 0.999, 1e-8, 0.05);
  dist::ZeroRedundancyOptimizer opt(net->parameters(), adamw(0.01)), resumed_opt(resumed->parameters(), adamw(0.01));
  CHECK(opt.state_dict().empty());  // Adam has no moments before its first step
  train(*ref, ref_opt, x, y, 3);
  train(*net, opt, x, y, 3);
  check_same_state(opt, ref_opt);
  // A model and optimizer built from another seed take the state, then step as the original does.
  resume_from(*resumed, resumed_opt, *net, opt);
  resumed_opt.lr = opt.lr;  // train()'s StepLR halved it
  train(*net, opt, x, y, 2);
  train(*resumed, resumed_opt, x, y, 2);
  CHECK(first_difference(flat_values(*resumed), flat_values(*net)) == "");
  CHECK_THROWS_WITH(resumed_opt.load_state_dict({{"exp_avg.0", Tensor::zeros({3})}}, 1),
                    Contains("entry \"exp_avg.0\" (3,) does not fit any of the 4 parameters") && Contains("same parameters"));
}

TEST_CASE("zero: parameters are partitioned per dtype and device, end to end, bad factories are errors", "[distributed]") {
  auto net = mlp(1);
  std::vector<Tensor> params = net->parameters();
  params.push_back(Tensor::zeros({5}, dtypes::float64).requires_grad_());
  dist::ZeroRedundancyOptimizer opt(params, adamw(1e-3));
  REQUIRE(opt.partitions().size() == 2);
  CHECK(opt.partitions()[0].params == std::vector<size_t>{0, 1, 2, 3});
  CHECK(opt.partitions()[0].numel == 67);
  CHECK(opt.partitions()[1].params == std::vector<size_t>{4});
  CHECK(opt.partitions()[1].count == 5);
  CHECK(opt.local().params().size() == 2);
  CHECK(opt.local().params()[1].dtype() == dtypes::float64);
  CHECK(opt.state_bytes() == 0);  // Adam's moments appear at the first step
  CHECK_THROWS_WITH(dist::ZeroRedundancyOptimizer(params, nullptr), Contains("the optimizer factory is empty"));
  CHECK_THROWS_WITH(dist::ZeroRedundancyOptimizer(params, [](std::vector<Tensor>) { return nullptr; }), Contains("returned null"));
  CHECK_THROWS_WITH(dist::ZeroRedundancyOptimizer(params, [&](std::vector<Tensor>) { return std::make_unique<optim::SGD>(params, 0.1); }),
                    Contains("holds 5 parameters, not the 2 parts"));
}

// --- several ranks (hidden: run under mpirun by tests/CMakeLists.txt) -------------------------------------------

TEST_CASE("mpi: the ranks are 0..world-1 and the world is mpirun's", "[.mpi]") {
  int world = dist::world_size();
  CHECK(world == std::max(1, config().mpi_world_size));
  std::vector<int32_t> ranks = dist::allgather(Tensor::from_vector<int32_t>({dist::rank()}, {1})).to_vector<int32_t>();
  std::vector<int32_t> want(static_cast<size_t>(world));
  std::iota(want.begin(), want.end(), 0);
  CHECK(ranks == want);
  dist::barrier();
}

TEST_CASE("mpi: allreduce sum, mean and max of every dtype equal the host's reduction of every rank's input", "[.mpi]") {
  int world = dist::world_size(), me = dist::rank();
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}}) {  // sizes that fill no vector or segment evenly
    for (DType d : all_scalar_dtypes()) {
      for (ReduceOp op : ops_for(d)) {
        INFO(d.name() << " " << dist::op_name(op) << " of " << n);
        Tensor r = dist::allreduce(input(d, me, {n}), op);
        std::vector<double> want;
        for (int64_t i = 0; i < n; ++i) want.push_back(reduced(d, op, world, i));
        CHECK(r.dtype() == d);
        CHECK(first_difference(values(r), want, tolerance(d)) == "");
      }
    }
  }
  // A large float32 buffer goes through MPI's segmented algorithms.
  int64_t big = 3 << 18;
  std::vector<double> want;
  for (int64_t i = 0; i < big; ++i) want.push_back(reduced(dtypes::float32, ReduceOp::Sum, world, i));
  CHECK(first_difference(values(dist::allreduce(input(dtypes::float32, me, {big / 3, 3}), ReduceOp::Sum)), want) == "");
}

TEST_CASE("mpi: broadcast gives every rank the root's tensor, from every root", "[.mpi]") {
  int world = dist::world_size(), me = dist::rank();
  for (int root = 0; root < world; ++root)
    for (DType d : all_scalar_dtypes()) {
      INFO(d.name() << " from " << root);
      CHECK(first_difference(values(dist::broadcast(input(d, me, {2, 3}), root)), values(input(d, root, {2, 3}))) == "");
    }
}

TEST_CASE("mpi: allgather concatenates in rank order, with a different number of rows per rank (rank 0: none)", "[.mpi]") {
  int world = dist::world_size(), me = dist::rank();
  for (DType d : all_scalar_dtypes()) {
    INFO(d.name());
    Tensor g = dist::allgather(input(d, me, {me, 2}));  // rank r gives r rows
    std::vector<double> want;
    for (int r = 0; r < world; ++r) {
      std::vector<double> v = values(input(d, r, {r, 2}));
      want.insert(want.end(), v.begin(), v.end());
    }
    CHECK(g.shape() == Shape{world * (world - 1) / 2, 2});
    CHECK(first_difference(values(g), want) == "");
  }
  CHECK(dist::allgather(Tensor::full({}, me)).to_vector<float>().size() == static_cast<size_t>(world));
}

TEST_CASE("mpi: reduce_scatter gives each rank its rows of the reduction, uneven splits included", "[.mpi]") {
  int world = dist::world_size(), me = dist::rank();
  for (int64_t rows : {int64_t{2} * world + 1, int64_t{1}}) {  // uneven, and fewer rows than ranks
    for (DType d : all_scalar_dtypes()) {
      for (ReduceOp op : ops_for(d)) {
        INFO(d.name() << " " << dist::op_name(op) << " of " << rows << " rows");
        auto [first, count] = dist::scatter_rows(rows, me, world);
        Tensor part = dist::reduce_scatter(input(d, me, {rows, 3}), op);
        std::vector<double> want;
        for (int64_t i = first * 3; i < (first + count) * 3; ++i) want.push_back(reduced(d, op, world, i));
        CHECK(part.shape() == Shape{count, 3});
        CHECK(first_difference(values(part), want, tolerance(d)) == "");
      }
    }
  }
}

TEST_CASE("mpi: zero-size tensors pass through every collective on every rank", "[.mpi]") {
  int world = dist::world_size();
  Tensor t = Tensor::zeros({0, 3}, dtypes::float16);
  CHECK(dist::allreduce(t, ReduceOp::Sum).shape() == Shape{0, 3});
  CHECK(dist::broadcast(t, world - 1).shape() == Shape{0, 3});
  CHECK(dist::allgather(t).shape() == Shape{0, 3});
  CHECK(dist::reduce_scatter(t, ReduceOp::Mean).shape() == Shape{0, 3});
}

TEST_CASE("mpi: metrics are reduced over the ranks", "[.mpi]") {
  int world = dist::world_size(), me = dist::rank();
  CHECK(dist::reduce_metric(me + 1.0) == Approx((world + 1) / 2.0));
  CHECK(dist::reduce_metric(me + 1.0, ReduceOp::Sum) == world * (world + 1) / 2);
  CHECK(dist::reduce_metric(me + 1.0, ReduceOp::Max) == world);
  // Rank r: accuracy r / world over r + 1 samples.
  double correct = 0, samples = 0;
  for (int r = 0; r < world; ++r) correct += (r + 1.0) * r / world, samples += r + 1;
  CHECK(dist::weighted_mean(static_cast<double>(me) / world, me + 1.0) == Approx(correct / samples));
}

TEST_CASE("mpi: ranks that disagree on a call all throw, naming every rank's call, and the world still works after", "[.mpi]") {
  int world = dist::world_size(), me = dist::rank();
  if (world < 2) return;  // nothing can disagree
  auto works = [&] { CHECK(dist::allreduce(Tensor::ones({2}), ReduceOp::Sum).to_vector<float>() == std::vector<float>(2, static_cast<float>(world))); };
  CHECK_THROWS_WITH(dist::allreduce(Tensor::ones({2 + me, 3}), ReduceOp::Sum),
                    Contains(cat("dist::allreduce on rank ", me, " of ", world, ": the ranks' calls disagree")) &&
                        Contains("rank 0 called allreduce(sum) of float32 (2, 3); rank 1 called allreduce(sum) of float32 (3, 3)"));
  works();
  CHECK_THROWS_WITH(dist::allgather(Tensor::ones({2, 1 + me}, me ? dtypes::int32 : dtypes::float32)),
                    Contains("rank 0 called allgather of float32 (2, 1); rank 1 called allgather of int32 (2, 2)"));
  CHECK_THROWS_WITH(dist::allreduce(Tensor::ones({2}), me ? ReduceOp::Max : ReduceOp::Sum), Contains("rank 1 called allreduce(max)"));
  CHECK_THROWS_WITH(me ? dist::broadcast(Tensor::ones({2}), 0) : dist::allreduce(Tensor::ones({2}), ReduceOp::Sum),
                    Contains("rank 0 called allreduce(sum) of float32 (2,); rank 1 called broadcast from root 0 of float32 (2,)"));
  CHECK_THROWS_WITH(dist::broadcast(Tensor::ones({2}), me), Contains("disagree"));
  CHECK_THROWS_WITH(dist::broadcast(Tensor::ones({2}), world), Contains(cat("root ", world, " is not a rank")));
  CHECK_THROWS_WITH(dist::allreduce(Tensor::ones({2}, dtypes::bool_), ReduceOp::Mean), Contains("the mean of bool values"));
  works();
}

TEST_CASE("mpi: an input that fails to compute on one rank makes every rank throw instead of waiting", "[.mpi]") {
  int me = dist::rank();
  if (dist::world_size() < 2) return;
  Tensor w = Tensor::from_vector<float>({1, 2}, {2}).requires_grad_();
  Tensor x = Tensor::from_vector<float>({3, 4}, {2}).requires_grad_();
  w.realize();
  Tensor y = x * w;
  y.realize();
  if (me == 1) {
    NoGradGuard no_grad;
    w.assign(w * 3.0f).realize();  // rank 1's gradient of x reads the overwritten w
  }
  y.sum().backward();
  CHECK_THROWS_WITH(dist::allreduce(*x.grad(), ReduceOp::Sum),
                    me == 1 ? Contains("modified by an inplace operation") : Contains("rank 1 could not compute its input"));
  CHECK(dist::allreduce(Tensor::ones({1}), ReduceOp::Sum).item<float>() == static_cast<float>(dist::world_size()));
}

TEST_CASE("mpi: every rank's shard of an epoch is its own, together they cover the epoch (pad or drop the rest)", "[.mpi]") {
  int world = dist::world_size();
  for (int64_t n : {int64_t{4} * world, int64_t{4} * world + 1}) {
    for (bool drop : {false, true}) {
      INFO(n << " samples, drop_remainder " << drop);
      HostTensor ids{dtypes::int64, {n}, std::vector<uint8_t>(static_cast<size_t>(n) * 8)};
      for (int64_t i = 0; i < n; ++i) std::memcpy(ids.data.data() + 8 * i, &i, 8);
      BatchIterator it({ids}, 3, true, 11, false, dist::shard(drop));
      std::vector<int64_t> mine;
      std::vector<Tensor> batch;
      while (it.next(batch)) {
        std::vector<int64_t> v = batch[0].to_vector<int64_t>();
        mine.insert(mine.end(), v.begin(), v.end());
      }
      std::vector<int64_t> all = dist::allgather(Tensor::from_vector(mine, {static_cast<int64_t>(mine.size())})).to_vector<int64_t>();
      std::set<int64_t> distinct(all.begin(), all.end());
      int64_t remainder = n % world;
      if (remainder == 0) {
        CHECK(all.size() == static_cast<size_t>(n));
        CHECK(distinct.size() == static_cast<size_t>(n));  // each sample exactly once
      } else if (drop) {
        CHECK(all.size() == static_cast<size_t>(n - remainder));
        CHECK(distinct.size() == all.size());               // none twice
      } else {
        CHECK(all.size() == static_cast<size_t>(n - remainder + world));
        CHECK(distinct.size() == static_cast<size_t>(n));  // all, world - remainder of them twice
      }
    }
  }
}

// Data parallel against one process on the whole batch. Tolerance: the two differ only in float32
// rounding (the gradient of one mean over W*m rows against the mean of W means over m rows each, and
// MPI's summation order), a few ulps per step, kept below 1e-5 over these few SGD steps.
TEST_CASE("mpi: ddp over per-rank halves equals one process on the whole batch, and every rank holds the same bits", "[.mpi]") {
  int world = dist::world_size(), me = dist::rank();
  const int64_t m = 4, steps = 5;
  auto [x, y] = data({m * world, 4}, 21);
  Tensor mx = x.slice(0, me * m, (me + 1) * m), my = y.slice(0, me * m, (me + 1) * m);
  auto ref = mlp(100);
  optim::SGD ref_opt(ref->parameters(), 0.1, 0.9);
  auto net = mlp(100 + static_cast<uint64_t>(me));  // different on every rank: construction copies rank 0's
  dist::DistributedDataParallel ddp(net, {.bucket_bytes = 160});
  optim::SGD opt(net->parameters(), 0.1, 0.9);
  CHECK(first_difference(flat_values(*net), flat_values(*ref)) == "");
  for (int64_t step = 0; step < steps; ++step) {
    INFO("step " << step);
    Tensor ref_loss = nn::mse_loss(ref->forward(x), y);
    ref_loss.backward();
    ref_opt.step({ref_loss});
    ref_opt.zero_grad();
    Tensor loss = nn::mse_loss(ddp(mx), my);
    ddp.backward(loss);
    opt.step({loss});
    opt.zero_grad();
    CHECK(dist::reduce_metric(loss.item<float>()) == Approx(ref_loss.item<float>()).epsilon(1e-5));
    for (const Tensor& p : net->parameters()) CHECK(differs_across_ranks(p) == "");
  }
  CHECK(first_difference(flat_values(*net), flat_values(*ref), 1e-5) == "");
  CHECK(ddp.stats().syncs == (world > 1 ? steps : 0));  // a world of one communicates nothing
  CHECK(ddp.stats().allreduces == (world > 1 ? steps * 2 : 0));
}

TEST_CASE("mpi: ddp gradient accumulation with no_sync equals one big batch, with one allreduce per bucket per step", "[.mpi]") {
  int world = dist::world_size(), me = dist::rank();
  const int64_t m = 3, k = 2, steps = 3;
  auto [x, y] = data({world * k * m, 4}, 5);
  auto ref = mlp(7);
  optim::SGD ref_opt(ref->parameters(), 0.05);
  auto net = mlp(7);
  dist::DistributedDataParallel ddp(net, {.bucket_bytes = 64});
  optim::SGD opt(net->parameters(), 0.05);
  for (int64_t step = 0; step < steps; ++step) {
    nn::mse_loss(ref->forward(x), y).backward();
    ref_opt.step();
    ref_opt.zero_grad();
    for (int64_t j = 0; j < k; ++j) {
      int64_t first = (me * k + j) * m;
      Tensor loss = nn::mse_loss(ddp(x.slice(0, first, first + m)), y.slice(0, first, first + m)) * (1.0 / k);
      if (j + 1 < k) {
        auto scope = ddp.no_sync();
        ddp.backward(loss);
      } else {
        ddp.backward(loss);
      }
    }
    opt.step();
    opt.zero_grad();
  }
  CHECK(first_difference(flat_values(*net), flat_values(*ref), 1e-5) == "");
  CHECK(ddp.stats().syncs == (world > 1 ? steps : 0));  // once per optimizer step, not per micro-batch
  CHECK(ddp.stats().allreduces == (world > 1 ? steps * static_cast<int64_t>(ddp.buckets().size()) : 0));
  CHECK(ddp.buckets().size() == 4);
}

TEST_CASE("mpi: ddp with synchronized batch norm equals one process on the whole batch, running statistics too", "[.mpi]") {
  int world = dist::world_size(), me = dist::rank();
  const int64_t m = 2, steps = 4;
  auto [x, y] = data({m * world, 1, 6, 6}, 17);
  auto ref = convnet(3);
  optim::SGD ref_opt(ref->parameters(), 0.1);
  auto net = convnet(3);
  dist::DistributedDataParallel ddp(net, {.sync_batch_norm = true});
  optim::SGD opt(net->parameters(), 0.1);
  for (int64_t step = 0; step < steps; ++step) {
    nn::mse_loss(ref->forward(x), y).backward();
    ref_opt.step(ref->buffers());
    ref_opt.zero_grad();
    ddp.backward(nn::mse_loss(ddp(x.slice(0, me * m, (me + 1) * m)), y.slice(0, me * m, (me + 1) * m)));
    opt.step(net->buffers());
    opt.zero_grad();
  }
  CHECK(first_difference(flat_values(*net), flat_values(*ref), 1e-5) == "");
}

TEST_CASE("mpi: ddp with per-rank batch norm leaves rank 0's running statistics on every rank after each sync", "[.mpi]") {
  int me = dist::rank();
  auto net = convnet(3);
  dist::DistributedDataParallel ddp(net);
  optim::SGD opt(net->parameters(), 0.1);
  auto [x, y] = data({2, 1, 6, 6}, 40 + static_cast<uint32_t>(me));  // a different batch on every rank
  ddp.backward(nn::mse_loss(ddp(x), y));
  opt.step(net->buffers());
  for (const Tensor& b : net->buffers()) CHECK(differs_across_ranks(b) == "");
}

TEST_CASE("mpi: ddp over models that differ across ranks is an error on every rank", "[.mpi]") {
  int me = dist::rank();
  if (dist::world_size() < 2) return;
  CHECK_THROWS_WITH(dist::DistributedDataParallel(mlp(1, me == 1 ? 9 : 8)),
                    Contains("DistributedDataParallel: copying \"fc1.weight\" from rank 0") && Contains("disagree"));
  auto net = mlp(1);
  if (me == 1) net->add("extra", std::make_shared<nn::Linear>(3, 3));
  CHECK_THROWS_WITH(dist::DistributedDataParallel(net), Contains("rank 1's model has 6 parameters") || Contains("this rank's 6"));
}

// ZeRO-1 against plain data parallel, both under DistributedDataParallel from the same start, on the
// devices and tolerances of zero_devices(). The averaged gradients are realized host buffers, the same
// bits on every rank (2 ranks: Open MPI's allreduce gives each the same sum), so each rank's part of
// the parameters is computed from the same inputs as the plain optimizer's: on REF exactly equal.
TEST_CASE("mpi: ZeRO-1 under ddp gives plain data parallel's parameters (REF: exactly), with 1/world of the optimizer state per rank",
          "[.mpi]") {
  int world = dist::world_size(), me = dist::rank();
  const int64_t m = 3, steps = 6;
  for (const DeviceCase& c : zero_devices()) {
    INFO("device " << c.device);
    on_device(c.device, [&] {
      auto [x, y] = data({m * world, 4}, 23);
      Tensor mx = x.slice(0, me * m, (me + 1) * m), my = y.slice(0, me * m, (me + 1) * m);
      auto ref = mlp(40), net = mlp(40);
      dist::DistributedDataParallel ref_ddp(ref), ddp(net);
      optim::AdamW ref_opt(ref->parameters(), 0.01, 0.9, 0.999, 1e-8, 0.05);
      dist::ZeroRedundancyOptimizer opt(net->parameters(), adamw(0.01));
      for (int64_t step = 0; step < steps; ++step) {
        ref_ddp.backward(nn::mse_loss(ref_ddp(mx), my));
        ref_opt.step();
        ref_opt.zero_grad();
        ddp.backward(nn::mse_loss(ddp(mx), my));
        opt.step();
        opt.zero_grad();
        INFO("step " << step);
        for (const Tensor& p : net->parameters()) CHECK(differs_across_ranks(p) == "");
        CHECK(first_difference(flat_values(*net), flat_values(*ref), c.tol) == "");
      }
      // 67 parameters split 34 + 33 over 2 ranks: each rank holds the two moments of its part only.
      auto [first, count] = dist::scatter_rows(67, me, world);
      CHECK(opt.partitions()[0].first == first);
      CHECK(opt.partitions()[0].count == count);
      CHECK(opt.state_bytes() == static_cast<size_t>(2 * count * 4));
      CHECK(dist::reduce_metric(static_cast<double>(opt.state_bytes()), ReduceOp::Sum) == static_cast<double>(ref_opt.state_bytes()));
      CHECK(ref_opt.state_bytes() == 2 * 67 * 4);
    });
  }
}

TEST_CASE("mpi: ZeRO-1's state_dict gathers every rank's part into whole parameters: plain data parallel's state", "[.mpi]") {
  int world = dist::world_size(), me = dist::rank();
  const int64_t m = 3;
  auto [x, y] = data({m * world, 4}, 24);
  Tensor mx = x.slice(0, me * m, (me + 1) * m), my = y.slice(0, me * m, (me + 1) * m);
  auto ref = mlp(41), net = mlp(41), resumed = mlp(42);
  dist::DistributedDataParallel ref_ddp(ref), ddp(net), resumed_ddp(resumed);
  optim::AdamW ref_opt(ref->parameters(), 0.01, 0.9, 0.999, 1e-8, 0.05);
  dist::ZeroRedundancyOptimizer opt(net->parameters(), adamw(0.01)), resumed_opt(resumed->parameters(), adamw(0.01));
  auto steps = [&](dist::DistributedDataParallel& d, optim::Optimizer& o, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      d.backward(nn::mse_loss(d(mx), my));
      o.step();
      o.zero_grad();
    }
  };
  steps(ref_ddp, ref_opt, 3);
  steps(ddp, opt, 3);
  check_same_state(opt, ref_opt);
  // Loaded into another model's ZeRO-1 optimizer, the state continues as the original.
  resume_from(*resumed, resumed_opt, *net, opt);
  steps(ddp, opt, 2);
  steps(resumed_ddp, resumed_opt, 2);
  CHECK(first_difference(flat_values(*resumed), flat_values(*net)) == "");
}
