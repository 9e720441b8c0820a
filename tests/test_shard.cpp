// [shard] Sharding across devices of one process (frontend/shard.h), and device names with an index.
// Every op on a ShardedTensor is compared, after gathering with to(), with the same op on the whole
// tensor on one device; the placement of each result is checked against the rules in shard.h.
#include <cmath>
#include <numeric>

#include "devices/device.h"
#include "frontend/shard.h"
#include "helpers.h"

using namespace kiln;
using Catch::Matchers::Contains;

namespace {

const std::vector<std::string> kTwoCpus = {"CPU:0", "CPU:1"};
const std::vector<std::string> kThreeCpus = {"CPU:0", "CPU:1", "CPU:2"};

// Deterministic values in about [-1, 1], different for each seed and position.
Tensor values(const Shape& shape, int seed, const std::string& device = "CPU") {
  std::vector<float> v(static_cast<size_t>(kiln::numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i) + 1.3 * seed));
  return Tensor::from_vector(v, shape, device);
}

// What the sharded result gathers to on CPU, against the unsharded result, element by element.
void check_equal(const ShardedTensor& got, Tensor want, double tol = 1e-5) {
  INFO("sharded: " << got.str());
  Tensor gathered = got.to("CPU");
  REQUIRE(gathered.shape() == want.shape());
  REQUIRE(got.shape() == want.shape());
  std::vector<float> g = gathered.to_vector<float>(), w = want.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << " of " << shape_str(want.shape()));
    CHECK(g[i] == Approx(w[i]).margin(tol).epsilon(tol));
  }
}

void check_equal(const ShardedTensor& got, const Tensor& want, Placement placement, double tol = 1e-5) {
  CHECK(got.placement().str() == placement.str());
  check_equal(got, want, tol);
}

void check_values(Tensor got, Tensor want, double tol = 1e-5) {
  REQUIRE(got.shape() == want.shape());
  std::vector<float> g = got.to("CPU").to_vector<float>(), w = want.to("CPU").to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << " of " << shape_str(want.shape()));
    CHECK(g[i] == Approx(w[i]).margin(tol).epsilon(tol));
  }
}

// CPU and OPENCL, when OPENCL opens here (else nullopt, with the reason printed once).
std::optional<std::vector<std::string>> cpu_and_opencl() {
  for (const DeviceStatus& s : probe_devices()) {
    if (s.name != "OPENCL") continue;
    if (s.available) return std::vector<std::string>{"CPU", "OPENCL"};
    WARN("OPENCL is not available here, so the CPU + OPENCL sharding case is skipped: " << s.reason);
  }
  return std::nullopt;
}

const Placement kSplit0 = Placement::split(0), kSplit1 = Placement::split(1), kBroadcast = Placement::broadcast(),
                kSum = Placement::partial(PartialOp::Sum), kMax = Placement::partial(PartialOp::Max),
                kMin = Placement::partial(PartialOp::Min);

}  // namespace

// --- device instances ---------------------------------------------------------------------------

TEST_CASE("devices: an index names another instance of a device, and CPU:0 is CPU", "[shard]") {
  CHECK(&get_device("CPU:0") == &get_device("CPU"));
  CHECK(&get_device("cpu") == &get_device("CPU"));
  CHECK(&get_device("CPU:1") != &get_device("CPU"));
  CHECK(&get_device("CPU:1") == &get_device("cpu:1"));
  CHECK(get_device("CPU:1").spec().name == "CPU");  // one kind of device: shared caches
  CHECK(canonical_device_name("cpu:0") == "CPU");
  CHECK(canonical_device_name("CPU:01") == "CPU:1");
  CHECK(canonical_device_name("cpu:2") == "CPU:2");
  Tensor a = values({3, 4}, 1, "CPU:1");
  CHECK(a.device() == "CPU:1");
  CHECK(values({2}, 1, "CPU:0").device() == "CPU");
  check_values((a * 2 + 1).sum({1}), (values({3, 4}, 1) * 2 + 1).sum({1}));
  CHECK_THROWS_WITH(get_device("CPU:x"), Contains("CPU:x") && Contains("non-negative integer") && Contains("CPU:1"));
  CHECK_THROWS_WITH(get_device("CPU:-1"), Contains("non-negative integer"));
  CHECK_THROWS_WITH(get_device("NOPE:1"), Contains("unknown device") && Contains("CPU:1"));
  CHECK_THROWS_WITH(Tensor::zeros({2}, dtypes::float32, "CPU:"), Contains("non-negative integer"));
}

TEST_CASE("devices: tensors on two instances do not mix, and the error names both and to()", "[shard]") {
  Tensor a = values({2, 3}, 1, "CPU"), b = values({2, 3}, 2, "CPU:1"), m = values({3, 2}, 3, "CPU:1");
  CHECK_THROWS_WITH(a + b, Contains("add") && Contains("CPU") && Contains("CPU:1") && Contains("to()"));
  CHECK_THROWS_WITH(a.matmul(m), Contains("CPU:1") && Contains("to()"));
  CHECK_THROWS_WITH(Tensor::cat({a, b}, 0), Contains("CPU:1") && Contains("to()"));
  CHECK_THROWS_WITH(a.where(a, b), Contains("CPU:1") && Contains("to()"));
  check_values(a + b.to("CPU"), values({2, 3}, 1) + values({2, 3}, 2));
  check_values(a.to("CPU:1").matmul(m), values({2, 3}, 1).matmul(values({3, 2}, 3)));
}

// --- placing and gathering ----------------------------------------------------------------------

TEST_CASE("shard: split, broadcast and partial placements hold the tensor's pieces and gather back", "[shard]") {
  Tensor t = values({4, 6}, 1);
  ShardedTensor rows = t.shard(kTwoCpus, 0);
  CHECK(rows.devices() == std::vector<std::string>{"CPU", "CPU:1"});
  CHECK(rows.placement() == kSplit0);
  CHECK(rows.shape() == Shape{4, 6});
  check_values(rows.locals()[0], t.shrink({{0, 2}, {0, 6}}));
  check_values(rows.locals()[1], t.shrink({{2, 4}, {0, 6}}));
  CHECK(rows.locals()[1].device() == "CPU:1");
  check_equal(rows, t);

  ShardedTensor cols = t.shard(kTwoCpus, -1);
  CHECK(cols.placement() == kSplit1);
  check_values(cols.locals()[1], t.shrink({{0, 4}, {3, 6}}));
  check_equal(cols, t);

  ShardedTensor whole = t.shard(kTwoCpus, kBroadcast);
  for (const Tensor& l : whole.locals()) check_values(l, t);
  check_equal(whole, t);

  ShardedTensor sum = t.shard(kTwoCpus, kSum);  // the value on the first device, zeros on the other
  check_values(sum.locals()[0], t);
  check_values(sum.locals()[1], t.zeros_like());
  check_equal(sum, t);

  ShardedTensor max = t.shard(kTwoCpus, kMax);
  check_values(max.locals()[1], t);
  check_equal(max, t);
  check_equal(t.shard(kThreeCpus, kMin), t);
  check_equal(t.shard({"CPU"}, kSplit0), t);  // one device: the whole tensor
}

TEST_CASE("shard: uneven splits cut pieces as torch.tensor_split does", "[shard]") {
  CHECK(split_sizes(7, 3) == std::vector<int64_t>{3, 2, 2});
  CHECK(split_sizes(8, 3) == std::vector<int64_t>{3, 3, 2});
  CHECK(split_sizes(6, 3) == std::vector<int64_t>{2, 2, 2});
  Tensor t = values({7, 5}, 2);
  ShardedTensor s = t.shard(kThreeCpus, 0);
  std::vector<int64_t> rows;
  for (const Tensor& l : s.locals()) rows.push_back(l.shape()[0]);
  CHECK(rows == std::vector<int64_t>{3, 2, 2});
  check_values(s.locals()[2], t.shrink({{5, 7}, {0, 5}}));
  check_equal(s, t);
  // Elementwise with a Broadcast operand cut to the same pieces, and reductions over each axis.
  Tensor u = values({7, 5}, 3);
  check_equal(s * u.shard(kThreeCpus, kBroadcast), t * u, kSplit0);
  check_equal(s.sum({0}), t.sum({0}), kSum);
  check_equal(s.mean({0}), t.mean({0}), kSum);
  check_equal(s.mean(), t.mean(), kSum);
  check_equal(s.max({1}), t.max({1}), kSplit0);
}

// --- elementwise --------------------------------------------------------------------------------

TEST_CASE("shard: elementwise ops on split and broadcast placements keep the placement", "[shard]") {
  Tensor a = values({4, 6}, 1), b = values({4, 6}, 2) + 2.0;  // b is positive: a divisor
  for (Placement p : {kSplit0, kSplit1, kBroadcast}) {
    INFO("placement " << p.str());
    ShardedTensor sa = a.shard(kTwoCpus, p), sb = b.shard(kTwoCpus, p);
    check_equal(sa + sb, a + b, p);
    check_equal(sa - sb, a - b, p);
    check_equal(sa * sb, a * b, p);
    check_equal(sa / sb, a / b, p);
    check_equal(sa.maximum(sb), a.maximum(b), p);
    check_equal(sa.minimum(sb), a.minimum(b), p);
    check_equal(sa + 1.5, a + 1.5, p);
    check_equal(sa - 1.5, a - 1.5, p);
    check_equal(sa * -3.0, a * -3.0, p);
    check_equal(sa / 4.0, a / 4.0, p);
    check_equal(-sa, -a, p);
    check_equal(sa.relu(), a.relu(), p);
    check_equal(sa.gelu(), a.gelu(), p);
    check_equal(sa.exp(), a.exp(), p);
    check_equal(sa.tanh(), a.tanh(), p);
    check_equal(sa.sigmoid(), a.sigmoid(), p);
    check_equal(sa.map([](const Tensor& t) { return t.abs().sqrt(); }, "sqrt_abs"), a.abs().sqrt(), p);
    check_equal(sa.cast(dtypes::float16).cast(dtypes::float32), a.cast(dtypes::float16).cast(dtypes::float32), p);
  }
}

TEST_CASE("shard: split op broadcast slices the broadcast operand, which may itself broadcast", "[shard]") {
  Tensor a = values({4, 6}, 1), b = values({4, 6}, 2), row = values({6}, 3), col = values({4, 1}, 4);
  for (Placement p : {kSplit0, kSplit1}) {
    INFO("placement " << p.str());
    ShardedTensor sa = a.shard(kTwoCpus, p);
    check_equal(sa + b.shard(kTwoCpus, kBroadcast), a + b, p);
    check_equal(b.shard(kTwoCpus, kBroadcast) - sa, b - a, p);
    check_equal(sa * row.shard(kTwoCpus, kBroadcast), a * row, p);
    check_equal(sa + col.shard(kTwoCpus, kBroadcast), a + col, p);
  }
  // A split 1-D operand broadcast against a 2-D one: its axis 0 is the result's axis 1.
  check_equal(row.shard(kTwoCpus, 0) + a.shard(kTwoCpus, kBroadcast), row + a, kSplit1);
  check_equal(a.shard(kTwoCpus, 1) * row.shard(kTwoCpus, 0), a * row, kSplit1);
}

TEST_CASE("shard: partial values add, scale and multiply by whole values and stay partial", "[shard]") {
  Tensor a = values({3, 4}, 1), b = values({3, 4}, 2), c = values({4}, 3) + 2.0;
  // Partial(sum) with real parts on every device: each the value of a Split padded with zeros.
  ShardedTensor pa = a.shard(kTwoCpus, 0).redistribute(kSum), pb = b.shard(kTwoCpus, 1).redistribute(kSum);
  CHECK(pa.placement() == kSum);
  check_values(pa.locals()[1].shrink({{0, 1}, {0, 4}}), Tensor::zeros({1, 4}));
  check_equal(pa + pb, a + b, kSum);
  check_equal(pa - pb, a - b, kSum);
  check_equal(pa * c.shard(kTwoCpus, kBroadcast), a * c, kSum);
  check_equal(c.shard(kTwoCpus, kBroadcast) * pa, c * a, kSum);
  check_equal(pa / c.shard(kTwoCpus, kBroadcast), a / c, kSum);
  check_equal(pa * 2.5, a * 2.5, kSum);
  check_equal(pa / -2.0, a / -2.0, kSum);
  check_equal(-pa, -a, kSum);
  // max(a_i) + s = max(a_i + s); scaling by a negative turns max into min.
  ShardedTensor ma = a.shard(kTwoCpus, kMax);
  check_equal(ma + 1.0, a + 1.0, kMax);
  check_equal(ma * -2.0, a * -2.0, kMin);
  check_equal(-ma, -a, kMin);
  check_equal(ma * 3.0, a * 3.0, kMax);
}

// --- reductions ---------------------------------------------------------------------------------

TEST_CASE("shard: reductions over the split axis give partials, over other axes keep the split", "[shard]") {
  Tensor t = values({5, 6, 3}, 1);
  for (const auto* devices : {&kTwoCpus, &kThreeCpus}) {
    for (int64_t axis : {0, 1}) {
      INFO("split along " << axis << " over " << devices->size() << " devices");
      ShardedTensor s = t.shard(*devices, axis);
      int64_t other = 1 - axis;
      for (bool keep : {false, true}) {
        INFO("keepdim " << keep);
        check_equal(s.sum({axis}, keep), t.sum({axis}, keep), kSum);
        check_equal(s.mean({axis}, keep), t.mean({axis}, keep), kSum);
        check_equal(s.max({axis}, keep), t.max({axis}, keep), kMax);
        check_equal(s.min({axis}, keep), t.min({axis}, keep), kMin);
        check_equal(s.sum({axis, 2}, keep), t.sum({axis, 2}, keep), kSum);
        // Not over the split axis: the axis is renumbered when the reduced axes before it go.
        int64_t renumbered = keep || other > axis ? axis : axis - 1;
        check_equal(s.sum({other}, keep), t.sum({other}, keep), Placement::split(renumbered));
        check_equal(s.mean({other}, keep), t.mean({other}, keep), Placement::split(renumbered));
        check_equal(s.max({-1}, keep), t.max({-1}, keep), Placement::split(axis));
      }
      check_equal(s.sum(), t.sum(), kSum);
      check_equal(s.mean(), t.mean(), kSum);
      check_equal(s.max(), t.max(), kMax);
      check_equal(s.min(), t.min(), kMin);
    }
  }
  ShardedTensor b = t.shard(kTwoCpus, kBroadcast);
  check_equal(b.sum({1}), t.sum({1}), kBroadcast);
  check_equal(b.max(), t.max(), kBroadcast);
  // Partial(sum) by sum or mean, and Partial(max) by max, stay partial.
  ShardedTensor p = t.shard(kTwoCpus, 2).redistribute(kSum);
  check_equal(p.sum({0}), t.sum({0}), kSum);
  check_equal(p.mean({1, 2}), t.mean({1, 2}), kSum);
  check_equal(t.shard(kTwoCpus, kMax).max({0}), t.max({0}), kMax);
  check_equal(t.shard(kTwoCpus, 0).softmax(1), t.softmax(1), kSplit0);
  check_equal(t.shard(kTwoCpus, 1).log_softmax(-1), t.log_softmax(-1), kSplit1);
}

// --- matmul -------------------------------------------------------------------------------------

TEST_CASE("shard: matmul over split rows, columns and the contraction axis", "[shard]") {
  Tensor a = values({5, 8}, 1), b = values({8, 6}, 2);
  Tensor want = a.matmul(b);
  for (const auto* devices : {&kTwoCpus, &kThreeCpus}) {
    INFO(devices->size() << " devices");
    ShardedTensor whole_a = a.shard(*devices, kBroadcast), whole_b = b.shard(*devices, kBroadcast);
    check_equal(a.shard(*devices, 0).matmul(whole_b), want, kSplit0, 1e-4);
    check_equal(whole_a.matmul(b.shard(*devices, 1)), want, kSplit1, 1e-4);
    check_equal(a.shard(*devices, 1).matmul(b.shard(*devices, 0)), want, kSum, 1e-4);
    check_equal(whole_a.matmul(whole_b), want, kBroadcast, 1e-4);
    check_equal(a.shard(*devices, 1).redistribute(kSum).matmul(whole_b), want, kSum, 1e-4);
    check_equal(whole_a.matmul(b.shard(*devices, 0).redistribute(kSum)), want, kSum, 1e-4);
  }
  // Batched left operand: split along the batch or the rows.
  Tensor x = values({4, 3, 8}, 3);
  check_equal(x.shard(kTwoCpus, 0).matmul(b.shard(kTwoCpus, kBroadcast)), x.matmul(b), kSplit0, 1e-4);
  check_equal(x.shard(kTwoCpus, 1).matmul(b.shard(kTwoCpus, kBroadcast)), x.matmul(b), kSplit1, 1e-4);
  check_equal(x.shard(kTwoCpus, 2).matmul(b.shard(kTwoCpus, 0)), x.matmul(b), kSum, 1e-4);
  check_equal(x.shard(kTwoCpus, kBroadcast).matmul(b.shard(kTwoCpus, 1)), x.matmul(b), Placement::split(2), 1e-4);
}

// --- movement -----------------------------------------------------------------------------------

TEST_CASE("shard: reshape, transpose and permute move the split axis with its data", "[shard]") {
  Tensor t = values({4, 6, 2}, 1);
  ShardedTensor s = t.shard(kTwoCpus, 1);
  check_equal(s.transpose(0, 1), t.transpose(0, 1), kSplit0);
  check_equal(s.transpose(-1, -2), t.transpose(-1, -2), Placement::split(2));
  check_equal(s.permute({2, 0, 1}), t.permute({2, 0, 1}), Placement::split(2));
  check_equal(s.reshape({2, 2, 6, 2}), t.reshape({2, 2, 6, 2}), Placement::split(2));  // split the axis before
  check_equal(s.reshape({4, 6, 1, 2}), t.reshape({4, 6, 1, 2}), kSplit1);
  check_equal(s.reshape({-1, 6, 2}), t.reshape({-1, 6, 2}), kSplit1);
  check_equal(t.shard(kTwoCpus, 0).reshape({4, 12}), t.reshape({4, 12}), kSplit0);  // merge the axes after
  for (Placement p : {kBroadcast, kSum}) check_equal(t.shard(kTwoCpus, p).reshape({8, 6}).transpose(0, 1), t.reshape({8, 6}).transpose(0, 1), p);
}

// --- communication ------------------------------------------------------------------------------

TEST_CASE("shard: allreduce completes partials, redistribute moves between every pair of placements", "[shard]") {
  Tensor t = values({6, 4}, 1).abs() + 0.5;
  ShardedTensor partial = (t.shard(kTwoCpus, 0).sum({0}) * 1.0);  // Partial(sum) of each device's rows
  ShardedTensor full = partial.allreduce();
  CHECK(full.placement() == kBroadcast);
  for (const Tensor& l : full.realize().locals()) check_values(l, t.sum({0}));
  CHECK(full.locals()[1].device() == "CPU:1");
  ShardedTensor mx = t.shard(kThreeCpus, 1).max({1}).allreduce();
  for (const Tensor& l : mx.locals()) check_values(l, t.max({1}));
  for (const auto* devices : {&kTwoCpus, &kThreeCpus})
    for (Placement from : {kSplit0, kSplit1, kBroadcast, kSum, kMax, kMin})
      for (Placement to : {kSplit0, kSplit1, kBroadcast, kSum, kMax, kMin}) {
        INFO(from.str() << " -> " << to.str() << " over " << devices->size() << " devices");
        ShardedTensor s = t.shard(*devices, from);
        if (from == kSum) s = t.shard(*devices, 1).redistribute(kSum);  // parts on every device
        check_equal(s.redistribute(to), t, to);
      }
  check_equal(t.shard(kTwoCpus, kSum).redistribute(Placement::split(-1)), t, kSplit1);
}

TEST_CASE("shard: gradients flow through shard, sharded ops and the gather", "[shard]") {
  Tensor w = values({4, 6}, 1).requires_grad_();
  Tensor v = values({4, 6}, 1).requires_grad_();
  Tensor x = values({3, 4}, 2);
  Tensor g = values({3, 6}, 3);
  // Sharded: x Broadcast @ w Split(1), then tanh, gathered. Unsharded: the same on CPU.
  ShardedTensor y = x.shard(kTwoCpus, kBroadcast).matmul(w.shard(kTwoCpus, 1)).tanh();
  (y.to("CPU") * g).sum().backward();
  (x.matmul(v).tanh() * g).sum().backward();
  REQUIRE(w.grad());
  check_values(*w.grad(), *v.grad(), 1e-5);
  // Through a partial and its allreduce.
  Tensor a = values({5, 4}, 4).requires_grad_(), b = values({5, 4}, 4).requires_grad_();
  ShardedTensor s = (a.shard(kTwoCpus, 0).sum({0}).allreduce() * 2.0).exp();
  (s.to("CPU:1").sum()).backward();
  ((b.sum({0}) * 2.0).exp()).sum().backward();
  check_values(*a.grad(), *b.grad(), 1e-4);
}

// --- the tensor-parallel Linear pair ------------------------------------------------------------

namespace {

// Megatron's pair against two unsharded Linears (GELU between): forward values and every gradient.
void check_megatron(const std::vector<std::string>& devices) {
  Tensor::manual_seed(7);
  nn::Linear l1(8, 12), l2(12, 6);
  nn::ColumnParallelLinear column(l1, devices);
  nn::RowParallelLinear row(l2, devices);
  CHECK(column.named_parameters().size() == 2 * devices.size());
  CHECK(row.named_parameters().size() == devices.size() + 1);  // weight pieces, and one bias
  Tensor x = values({5, 8}, 1).requires_grad_(), xs = values({5, 8}, 1).requires_grad_();
  Tensor want = l2(l1(x).gelu());
  ShardedTensor hidden = column.forward(xs.shard(devices, kBroadcast));
  CHECK(hidden.placement() == kSplit1);
  ShardedTensor y = row.forward(hidden.gelu());
  CHECK(y.placement() == kBroadcast);
  check_equal(y, want, 1e-5);
  for (const Tensor& l : y.locals()) check_values(l, want, 1e-5);

  Tensor g = values({5, 6}, 2);
  (want * g).sum().backward();
  (y.to("CPU") * g).sum().backward();
  auto gathered = [](const ShardedTensor& params, int64_t axis) {
    std::vector<Tensor> grads;
    for (const Tensor& p : params.locals()) {
      REQUIRE(p.grad());
      grads.push_back(p.grad()->to("CPU"));
    }
    return Tensor::cat(grads, axis);
  };
  check_values(gathered(column.weight, 0), *l1.weight.grad(), 1e-4);
  check_values(gathered(*column.bias, 0), *l1.bias->grad(), 1e-4);
  check_values(gathered(row.weight, 1), *l2.weight.grad(), 1e-4);
  REQUIRE(row.bias->locals()[0].grad());
  check_values(*row.bias->locals()[0].grad(), *l2.bias->grad(), 1e-4);
  check_values(*xs.grad(), *x.grad(), 1e-4);
  // The Tensor forms: broadcast in, gathered out.
  check_values(row(column(values({5, 8}, 1)).gelu()), want, 1e-5);
}

}  // namespace

TEST_CASE("shard: the tensor-parallel Linear pair equals the unsharded Linears, forward and backward", "[shard]") {
  check_megatron(kTwoCpus);
  check_megatron(kThreeCpus);  // 12 hidden features: 4 each
}

TEST_CASE("shard: CPU and OPENCL hold pieces of one tensor", "[shard]") {
  std::optional<std::vector<std::string>> devices = cpu_and_opencl();
  if (!devices) return;
  Tensor a = values({6, 4}, 1), b = values({4, 5}, 2);
  ShardedTensor sa = a.shard(*devices, 0);
  CHECK(sa.locals()[1].device() == "OPENCL");
  check_equal((sa * 2.0 + a.shard(*devices, kBroadcast)).relu(), (a * 2.0 + a).relu(), kSplit0);
  check_equal(sa.sum({0}), a.sum({0}), kSum);
  check_equal(sa.sum({0}).allreduce(), a.sum({0}), kBroadcast);
  check_equal(a.shard(*devices, 1).matmul(b.shard(*devices, 0)), a.matmul(b), kSum, 1e-4);
  check_equal(sa.redistribute(kSplit1), a, kSplit1);
  check_megatron(*devices);
}

// --- errors -------------------------------------------------------------------------------------

TEST_CASE("shard: mistakes are errors naming the op, the placements or shapes, and the fix", "[shard]") {
  Tensor t = values({4, 6}, 1);
  ShardedTensor rows = t.shard(kTwoCpus, 0), cols = t.shard(kTwoCpus, 1), sum = t.shard(kTwoCpus, kSum);
  // Placements that would need another device's data.
  CHECK_THROWS_WITH(rows + cols, Contains("add") && Contains("Split(0)") && Contains("Split(1)") && Contains("redistribute"));
  CHECK_THROWS_WITH(sum.relu(), Contains("relu") && Contains("Partial(sum)") && Contains("allreduce()"));
  CHECK_THROWS_WITH(sum + 1.0, Contains("add") && Contains("allreduce()"));
  CHECK_THROWS_WITH(sum * sum, Contains("mul") && Contains("Partial(sum)") && Contains("allreduce()"));
  CHECK_THROWS_WITH(sum * rows, Contains("mul") && Contains("allreduce()"));
  CHECK_THROWS_WITH(t.shard(kTwoCpus, kBroadcast) / sum, Contains("div") && Contains("allreduce()"));
  CHECK_THROWS_WITH(sum.max({0}), Contains("max") && Contains("Partial(sum)") && Contains("allreduce()"));
  CHECK_THROWS_WITH(rows.softmax(0), Contains("softmax") && Contains("axis 0") && Contains("redistribute()"));
  CHECK_THROWS_WITH(rows.matmul(t.transpose(0, 1).shard(kTwoCpus, 0)), Contains("matmul") && Contains("Split(0) of (4, 6)") &&
                                                                            Contains("redistribute()"));
  CHECK_THROWS_WITH(rows.matmul(t.shard(kTwoCpus, kBroadcast)), Contains("matmul: inner sizes differ") && Contains("(4, 6)"));
  CHECK_THROWS_WITH(cols.reshape({24}), Contains("reshape") && Contains("(24,)") && Contains("redistribute"));
  CHECK_THROWS_WITH(rows.reshape({5, 5}), Contains("reshape") && Contains("(5, 5)"));
  CHECK_THROWS_WITH(rows.allreduce(), Contains("allreduce") && Contains("Split(0)") && Contains("redistribute(Placement::broadcast())"));
  CHECK_THROWS_WITH(values({1, 6}, 2).shard({"CPU"}, 0) + t.shard({"CPU"}, kBroadcast),
                    Contains("add") && Contains("Split(0) of (1, 6)") && Contains("broadcast along its split axis"));
  CHECK_THROWS_WITH(rows.map([](const Tensor& x) { return x.sum({0}); }, "colsum"), Contains("colsum") && Contains("elementwise"));
  // Devices.
  CHECK_THROWS_WITH(t.shard({}, 0), Contains("shard: no devices") && Contains("CPU:1"));
  CHECK_THROWS_WITH(t.shard({"CPU", "CPU:0"}, 0), Contains("CPU is listed twice") && Contains("CPU:1"));
  CHECK_THROWS_WITH(t.shard({"CPU", "NOPE"}, 0), Contains("unknown device") && Contains("NOPE"));
  CHECK_THROWS_WITH(rows + t.shard(kThreeCpus, 0), Contains("add") && Contains("different devices") && Contains("[CPU, CPU:1]") &&
                                                       Contains("[CPU, CPU:1, CPU:2]"));
  CHECK_THROWS_WITH(rows.matmul(values({6, 2}, 1).shard({"CPU:1", "CPU"}, kBroadcast)), Contains("matmul") && Contains("different devices"));
  // Axes and sizes.
  CHECK_THROWS_WITH(t.shard(kTwoCpus, 2), Contains("shard: axis 2 is out of range"));
  CHECK_THROWS_WITH(t.shard(kTwoCpus, -3), Contains("shard: axis -3 is out of range"));
  CHECK_THROWS_WITH(values({2, 6}, 1).shard(kThreeCpus, 0), Contains("shard") && Contains("(2, 6)") && Contains("fewer than the 3 devices"));
  CHECK_THROWS_WITH(Tensor::full({}, 1.0).shard(kTwoCpus, 0), Contains("0-d") && Contains("Placement::broadcast()"));
  CHECK_THROWS_WITH(rows.redistribute(Placement::split(5)), Contains("redistribute: axis 5 is out of range"));
  CHECK_THROWS_WITH(rows.sum({3}), Contains("sum: axis 3 is out of range"));
  // Locals that do not make one tensor.
  CHECK_THROWS_WITH(ShardedTensor({values({2, 3}, 1, "CPU"), values({2, 4}, 1, "CPU:1")}, kSplit0),
                    Contains("(2, 3)") && Contains("(2, 4)") && Contains("split axis"));
  CHECK_THROWS_WITH(ShardedTensor({values({2, 3}, 1, "CPU"), values({2, 3}, 1, "CPU")}, kBroadcast), Contains("listed twice"));
  CHECK_THROWS_WITH(ShardedTensor({}, kBroadcast), Contains("no local tensors"));
  // The parallel layers' inputs.
  nn::ColumnParallelLinear column(6, 4, kTwoCpus);
  nn::RowParallelLinear row(4, 3, kTwoCpus);
  CHECK_THROWS_WITH(column.forward(rows), Contains("ColumnParallelLinear") && Contains("Broadcast"));
  CHECK_THROWS_WITH(row.forward(t.shard(kTwoCpus, kBroadcast)), Contains("RowParallelLinear") && Contains("in_features = 4"));
  CHECK_THROWS_WITH(row.forward(values({4, 4}, 1).shard(kTwoCpus, 0)), Contains("RowParallelLinear") && Contains("Split along its last axis"));
}
