// Tensor::assign in place (versions, live readers, shared memory) and kiln::Jit (capture and replay).
// References: the same steps run eagerly (bit for bit), closed forms, and PyTorch's in-place rules.
#include <cstring>
#include <random>

#include "frontend/detail.h"
#include "frontend/jit.h"
#include "frontend/nn.h"
#include "frontend/optim.h"
#include "frontend/realize.h"
#include "helpers.h"
#include "uop/config.h"

using namespace kiln;

namespace {

std::vector<float> uniform(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

const DeviceBuffer& memory_of(const Tensor& t) { return storage_of(detail::realized_buffer(t.uop())).memory(); }

// Restores a knob at scope exit.
template <typename T>
struct KnobOverride {
  T& knob;
  T saved;
  KnobOverride(T& k, T value) : knob(k), saved(k) { knob = value; }
  ~KnobOverride() { knob = saved; }
};

// A model with every kind of step state: parameters, batch norm's running statistics, dropout's RNG,
// the optimizer's moments and step count, and targets checked on the host.
struct Model {
  std::shared_ptr<nn::Sequential> net = std::make_shared<nn::Sequential>();
  std::unique_ptr<optim::Optimizer> opt;
  Model(uint64_t seed, bool adam) {
    Tensor::manual_seed(seed);
    net->add("conv", std::make_shared<nn::Conv2d>(1, 4, std::array<int64_t, 2>{3, 3}))
        .add("bn", std::make_shared<nn::BatchNorm2d>(4))
        .add("relu", std::make_shared<nn::ReLU>())
        .add("flat", std::make_shared<nn::Flatten>())
        .add("drop", std::make_shared<nn::Dropout>(0.25))
        .add("fc", std::make_shared<nn::Linear>(4 * 4 * 4, 3));
    if (adam) opt = std::make_unique<optim::Adam>(net->parameters(), 0.01);
    else opt = std::make_unique<optim::SGD>(net->parameters(), 0.05, 0.9);
  }
  std::vector<Tensor> step(const std::vector<Tensor>& in) {
    Tensor loss = nn::cross_entropy(net->forward(in[0]), in[1]);
    loss.backward();
    opt->step({loss});
    opt->zero_grad();
    return {loss};
  }
  std::map<std::string, std::vector<float>> state() {
    std::map<std::string, std::vector<float>> out;
    for (auto& [name, t] : net->state_dict()) out[name] = t.cast(dtypes::float32).to_vector<float>();
    return out;
  }
};

std::vector<Tensor> batch(int i, int64_t n = 8) {
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) labels[static_cast<size_t>(k)] = static_cast<int32_t>((k * 5 + i) % 3);
  return {Tensor::from_vector(uniform(static_cast<size_t>(n) * 36, 100 + i), {n, 1, 6, 6}), Tensor::from_vector(labels, {n})};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

// --- assign in place ---------------------------------------------------------------------------------

TEST_CASE("assign: a realized tensor is updated in its own memory, and readers built before see the old value", "[realize]") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {4});
  a.realize();
  const DeviceBuffer* before = &memory_of(a);
  Tensor b = a * 10.0f;  // lazy: reads a's value before the assign, as PyTorch would have computed it
  auto twice_plus_one = [](const Tensor& t) { return t * 2.0f + 1.0f; };  // no temporary outlives the call
  size_t allocations = realize_stats().allocations;
  a.assign(twice_plus_one(a)).realize();
  CHECK(&memory_of(a) == before);
  CHECK(a.to_vector<float>() == std::vector<float>{3, 5, 7, 9});
  CHECK(b.to_vector<float>() == std::vector<float>{10, 20, 30, 40});
  CHECK(realize_stats().allocations - allocations <= 1);  // b's buffer; a's value needed none

  // Many in-place updates in a row, each reading the last.
  for (int i = 0; i < 5; ++i) a.assign(a - 1.0f).realize();
  CHECK(a.to_vector<float>() == std::vector<float>{-2, 0, 2, 4});
  CHECK(&memory_of(a) == before);
}

TEST_CASE("assign: a value read elsewhere than where it is written, or memory another tensor shares, gets new memory", "[realize]") {
  // Transposing in place would read elements already overwritten: the result goes to new memory.
  Tensor m = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  m.realize();
  m.assign(m.permute({1, 0}).contiguous()).realize();
  CHECK(m.to_vector<float>() == std::vector<float>{1, 3, 2, 4});

  // Equal graphs share one realized buffer; assigning into one of them leaves the other alone.
  Tensor x = Tensor::ones({3}), y = Tensor::ones({3});
  x.realize();
  y.realize();
  x.assign(x * 5.0f).realize();
  CHECK(x.to_vector<float>() == std::vector<float>{5, 5, 5});
  CHECK(y.to_vector<float>() == std::vector<float>{1, 1, 1});
  y.assign(y + 1.0f).realize();
  CHECK(y.to_vector<float>() == std::vector<float>{2, 2, 2});
  CHECK(x.to_vector<float>() == std::vector<float>{5, 5, 5});
}

TEST_CASE("assign: several assigns in one realize each read the old values, in any order", "[realize]") {
  for (bool a_first : {true, false}) {
    CAPTURE(a_first);
    Tensor a = Tensor::from_vector<float>({1, 2}, {2}), c = Tensor::from_vector<float>({0, 0}, {2});
    a.realize();
    c.realize();
    c.assign(a * 3.0f);  // the old a
    a.assign(a + 1.0f);
    std::vector<Tensor> both = a_first ? std::vector<Tensor>{a, c} : std::vector<Tensor>{c, a};
    realize_all(both);
    CHECK(a.to_vector<float>() == std::vector<float>{2, 3});
    CHECK(c.to_vector<float>() == std::vector<float>{3, 6});
  }
  // Two tensors that share one buffer (equal graphs), both assigned in one realize.
  Tensor x = Tensor::ones({2}), y = Tensor::ones({2});
  std::vector<Tensor> pair{x, y};
  realize_all(pair);
  x.assign(x + y);
  y.assign(y * 4.0f);
  realize_all(pair);
  CHECK(x.to_vector<float>() == std::vector<float>{2, 2});
  CHECK(y.to_vector<float>() == std::vector<float>{4, 4});
}

TEST_CASE("assign: the loss read after the optimizer's step is the loss before it, and gradients survive the step", "[realize]") {
  // PyTorch-style loop: loss.item() and p.grad after opt.step(), which updates p in place.
  Tensor w = Tensor::from_vector<float>({1, -2}, {2}).requires_grad_();
  Tensor x = Tensor::from_vector<float>({3, 4}, {2});
  optim::SGD opt({w}, 0.5);
  w.realize();
  const DeviceBuffer* memory = &memory_of(w);
  Tensor loss = (w * x).sum() * (w * x).sum();  // (3 - 8)^2 = 25, gradient 2 * (-5) * x = (-30, -40)
  loss.backward();
  opt.step();
  CHECK(loss.item<float>() == 25.0f);
  CHECK(w.grad()->to_vector<float>() == std::vector<float>{-30, -40});
  CHECK(w.to_vector<float>() == std::vector<float>{16, 18});
  CHECK(&memory_of(w) == memory);
}

TEST_CASE("assign: backward through a value computed from a tensor later modified in place is an error, as in PyTorch", "[realize]") {
  Tensor w = Tensor::from_vector<float>({1, 2}, {2}).requires_grad_();
  Tensor x = Tensor::from_vector<float>({3, 4}, {2}).requires_grad_();
  w.realize();
  Tensor y = x * w;
  y.realize();  // autograd keeps y's graph, which reads w's value
  {
    NoGradGuard no_grad;
    w.assign(w * 3.0f).realize();
  }
  (y * 2.0f).sum().backward();  // x.grad = 2 w, of the w that y read: gone
  CHECK_THROWS_WITH(x.grad()->to_vector<float>(), Catch::Contains("modified by an inplace operation"));
}

// --- Jit ---------------------------------------------------------------------------------------------

TEST_CASE("jit: replayed training steps equal eager ones bit for bit (BN, dropout, Adam, SGD with momentum)", "[jit]") {
  for (bool adam : {true, false}) {
    CAPTURE(adam);
    const int steps = 20;
    Model eager(3, adam);
    Tensor::manual_seed(77);
    std::vector<float> eager_losses;
    size_t eager_kernels = 0;
    for (int i = 0; i < steps; ++i) {
      std::vector<Tensor> in = batch(i);
      size_t launched = realize_stats().kernels_launched;
      eager_losses.push_back(eager.step(in)[0].item<float>());
      eager_kernels = realize_stats().kernels_launched - launched;
    }

    Model captured(3, adam);
    Tensor::manual_seed(77);
    Jit step([&](const std::vector<Tensor>& in) { return captured.step(in); });
    std::vector<float> losses;
    for (int i = 0; i < steps; ++i) losses.push_back(step(batch(i))[0].item<float>());
    CHECK(same_bits(losses, eager_losses));
    auto got = captured.state(), want = eager.state();
    for (auto& [name, values] : want) {
      CAPTURE(name);
      CHECK(same_bits(got.at(name), values));
    }
    CHECK(step.stats().eager_calls == 3);
    CHECK(step.stats().replays == steps - 3);
    // The capture launches what an eager step does: a realize inside the step (cross_entropy's check of
    // the targets) once also realized batch norm's pending running statistics in a schedule of its own,
    // and the step's schedule ran the forward pass again.
    CHECK(step.stats().kernels_per_replay == eager_kernels);
    CHECK(captured.opt->steps() == steps);  // host work ran on every replay
  }
}

TEST_CASE("jit: a replay allocates nothing, builds no graph and compiles nothing", "[jit]") {
  Model m(5, true);
  Jit step([&](const std::vector<Tensor>& in) { return m.step(in); });
  std::vector<std::vector<Tensor>> data;
  for (int i = 0; i < 8; ++i) data.push_back(batch(i));
  for (int i = 0; i < 3; ++i) step(data[static_cast<size_t>(i)]);
  RealizeStats before = realize_stats();
  for (int i = 3; i < 8; ++i) step(data[static_cast<size_t>(i)])[0].item<float>();
  RealizeStats after = realize_stats();
  CHECK(after.allocations == before.allocations);
  CHECK(after.kernels_lowered == before.kernels_lowered);
  CHECK(after.schedule_hits + after.schedule_misses == before.schedule_hits + before.schedule_misses);
}

TEST_CASE("jit: each input signature is captured once and replayed with its own kernels", "[jit]") {
  Model eager(8, false), captured(8, false);
  Jit step([&](const std::vector<Tensor>& in) { return captured.step(in); });
  Tensor::manual_seed(1);
  std::vector<float> want, got;
  for (int i = 0; i < 12; ++i) want.push_back(eager.step(batch(i, i % 2 ? 4 : 8))[0].item<float>());
  Tensor::manual_seed(1);
  for (int i = 0; i < 12; ++i) got.push_back(step(batch(i, i % 2 ? 4 : 8))[0].item<float>());
  CHECK(same_bits(got, want));
  CHECK(step.stats().captures == 2);
  CHECK(step.stats().replays == 6);
}

TEST_CASE("jit: misuse is an error that says what to do", "[jit]") {
  Tensor x = Tensor::from_vector<float>({1, 2, 3}, {3});

  SECTION("state replaced instead of assigned") {
    Tensor w = Tensor::ones({3});
    Jit f([&](const std::vector<Tensor>& in) {
      w = (w + in[0]).realize();
      return std::vector<Tensor>{w};
    });
    f({x});
    f({x});
    CHECK_THROWS_WITH(f({x}), Catch::Contains("assign()"));
  }
  SECTION("a C++ number that changes between calls") {
    int calls = 0;
    Jit f([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * static_cast<float>(++calls)}; });
    f({x});
    f({x});
    CHECK_THROWS_WITH(f({x}), Catch::Contains("constant"));
  }
  SECTION("host data uploaded inside the step") {
    int calls = 0;
    Jit f([&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{in[0] + Tensor::from_vector<float>({static_cast<float>(++calls)}, {1}).expand({3})};
    });
    f({x});
    f({x});
    CHECK_THROWS_WITH(f({x}), Catch::Contains("pass that data as an input"));
  }
  SECTION("an output of an earlier call read after the next call") {
    Jit f([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * 2.0f + 1.0f}; });
    for (int i = 0; i < 3; ++i) f({x});
    Tensor first = f({x})[0];
    CHECK(first.to_vector<float>() == std::vector<float>{3, 5, 7});
    Tensor second = f({x * 2.0f})[0];
    CHECK(second.to_vector<float>() == std::vector<float>{5, 9, 13});
    CHECK_THROWS_WITH(first.to_vector<float>(), Catch::Contains("overwritten"));
  }
  SECTION("state destroyed after the capture") {
    auto w = std::make_unique<Tensor>(Tensor::zeros({3}));
    w->realize();
    Jit f([&](const std::vector<Tensor>& in) {
      w->assign(*w + in[0]);
      w->realize();
      return std::vector<Tensor>{*w};
    });
    for (int i = 0; i < 4; ++i) f({x});
    CHECK(w->to_vector<float>() == std::vector<float>{4, 8, 12});
    w = std::make_unique<Tensor>(Tensor::zeros({3}));
    CHECK_THROWS_WITH(f({x}), Catch::Contains("no tensor holds"));
  }
}

TEST_CASE("jit: indices are range-checked on every replay (Embedding, gather, index_select, scatter, cross_entropy)", "[jit]") {
  // Each check reads the indices' smallest and largest value as host work, which a replay runs again:
  // an index out of range raises on the replay that sees it, instead of reading 0 (the kernel's gate).
  Tensor::manual_seed(3);
  nn::Embedding emb(10, 4);
  Tensor table = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor base = Tensor::zeros({2, 3});
  Jit f([&](const std::vector<Tensor>& in) {
    Tensor looked_up = emb(in[0]).sum();
    Tensor picked = table.gather(0, in[1]).sum() + table.index_select(0, in[2]).sum();
    Tensor scattered = base.scatter_add(1, in[3], Tensor::ones({2, 2})).sum();
    return std::vector<Tensor>{looked_up + picked + scattered};
  });
  Tensor ok_emb = Tensor::from_vector<int64_t>({1, 9, 0}, {3}), ok_gather = Tensor::from_vector<int64_t>({0, 2, 1, 0}, {2, 2});
  Tensor ok_select = Tensor::from_vector<int64_t>({2, 0}, {2}), ok_scatter = Tensor::from_vector<int64_t>({0, 2, 1, 1}, {2, 2});
  float want = 0;
  for (int i = 0; i < 5; ++i) {
    float got = f({ok_emb, ok_gather, ok_select, ok_scatter})[0].item<float>();
    if (i == 0) want = got;
    CHECK(got == want);
  }
  CHECK(f.stats().replays >= 2);
  CHECK_THROWS_WITH(f({Tensor::from_vector<int64_t>({1, 10, 0}, {3}), ok_gather, ok_select, ok_scatter}),
                    Catch::Contains("index 10 is out of range for axis 0 of size 10"));
  CHECK_THROWS_WITH(f({ok_emb, Tensor::from_vector<int64_t>({0, 3, 1, 0}, {2, 2}), ok_select, ok_scatter}),
                    Catch::Contains("gather: index 3 is out of range for axis 0 of size 3"));
  CHECK_THROWS_WITH(f({ok_emb, ok_gather, Tensor::from_vector<int64_t>({-1, 0}, {2}), ok_scatter}),
                    Catch::Contains("index_select: index -1 is out of range"));
  CHECK_THROWS_WITH(f({ok_emb, ok_gather, ok_select, Tensor::from_vector<int64_t>({0, 3, 1, 1}, {2, 2})}),
                    Catch::Contains("scatter_add: index 3 is out of range for axis 1 of size 3"));
  CHECK(f({ok_emb, ok_gather, ok_select, ok_scatter})[0].item<float>() == want);  // still replays after an error
  Tensor logits = Tensor::zeros({2, 4});
  Jit loss([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{nn::cross_entropy(logits, in[0])}; });
  for (int i = 0; i < 4; ++i) loss({Tensor::from_vector<int64_t>({3, 0}, {2})});
  CHECK_THROWS_WITH(loss({Tensor::from_vector<int64_t>({4, 0}, {2})}), Catch::Contains("target 4 is out of range for 4 classes"));
}

TEST_CASE("jit: a value that changes only after the capture is replayed stale unless KILN_JIT_CHECK compares every call", "[jit]") {
  Tensor x = Tensor::from_vector<float>({1, 2}, {2});
  float scale = 2;
  Jit f([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * scale}; });
  for (int i = 0; i < 4; ++i) CHECK(f({x})[0].to_vector<float>() == std::vector<float>{2, 4});
  scale = 3;
  CHECK(f({x})[0].to_vector<float>() == std::vector<float>{2, 4});  // the documented limit of a replay
  KnobOverride<bool> check(config().jit_check, true);
  CHECK_THROWS_WITH(f({x}), Catch::Contains("differs between the capture"));
  scale = 2;
  CHECK(f({x})[0].to_vector<float>() == std::vector<float>{2, 4});
}

TEST_CASE("jit: KILN_JIT=0 runs every call eagerly, KILN_STRICT forbids compiling after a replay", "[jit]") {
  Tensor x = Tensor::from_vector<float>({1, 2}, {2});
  {
    KnobOverride<bool> off(config().jit, false);
    int calls = 0;
    Jit f([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * static_cast<float>(++calls)}; });
    for (int i = 1; i <= 5; ++i) CHECK(f({x})[0].to_vector<float>() == std::vector<float>{1.0f * i, 2.0f * i});
    CHECK(f.stats().replays == 0);
  }
  KnobOverride<bool> strict(config().strict, true);
  Jit f([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] - 0.25f}; });
  for (int i = 0; i < 4; ++i) f({x});
  CHECK_THROWS_WITH((x * 1234.5f).exp2().realize(), Catch::Contains("KILN_STRICT"));
}

TEST_CASE("assign: a value realized before, in other memory, is copied into the target, not shared", "[realize]") {
  // One state dict loaded into two models: the second load's value (the same graph as the first's) was
  // found realized in the first model's weight, and the second model took that memory: one weight for
  // both, whose gradients were then summed.
  nn::Linear source(4, 3), first(4, 3), second(4, 3);
  std::map<std::string, Tensor> state = source.state_dict();
  first.load_state_dict(state);
  second.load_state_dict(state);
  CHECK(&memory_of(first.weight) != &memory_of(second.weight));
  CHECK(&memory_of(*first.bias) != &memory_of(*second.bias));
  CHECK(first.weight.to_vector<float>() == source.weight.to_vector<float>());
  CHECK(second.weight.to_vector<float>() == source.weight.to_vector<float>());
  // Each model's gradient is its own: the first's loss is 3 * sum(W x), the second's 5 * sum(W x).
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {1, 4});
  Tensor loss = (first.forward(x) * 3.0f).sum() + (second.forward(x) * 5.0f).sum();
  loss.backward();
  std::vector<float> g1 = first.weight.grad()->to_vector<float>(), g2 = second.weight.grad()->to_vector<float>();
  for (size_t i = 0; i < g1.size(); ++i) {
    CHECK(g1[i] == 3.0f * float(i % 4 + 1));
    CHECK(g2[i] == 5.0f * float(i % 4 + 1));
  }

  // A plain assign of a value another tensor realized.
  Tensor a = Tensor::from_vector<float>({1, 2, 3}, {3}), b = Tensor::from_vector<float>({0, 0, 0}, {3});
  Tensor doubled = a * 2.0f;
  doubled.realize();
  b.realize();
  const DeviceBuffer* own = &memory_of(b);
  b.assign(a * 2.0f).realize();
  CHECK(&memory_of(b) == own);
  CHECK(&memory_of(b) != &memory_of(doubled));
  b.assign(b + 1.0f).realize();
  CHECK(b.to_vector<float>() == std::vector<float>{3, 5, 7});
  CHECK(doubled.to_vector<float>() == std::vector<float>{2, 4, 6});
}
