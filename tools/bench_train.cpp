// kiln bench train: whole training steps (forward, backward, optimizer) of three models, in kiln and
// in libtorch side by side in one run: the same initial weights and batches, the steps interleaved,
// medians. Beside them the step's GFLOP/s against the same-run FMA peak, kernels per step and the
// first step's time with an empty compile cache. Measured, never asserted.
//
// libtorch is set up fairly: 2 intra-op threads (this machine's cores), warmed up, and glibc's malloc
// told to keep freed memory (rerun_with_malloc_tunables; first touching fresh pages costs ~15 us per
// 4 KiB here).
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "bench.h"
#include "bench_reference.h"
#include "devices/device.h"
#include "frontend/jit.h"
#include "frontend/nn.h"
#include "frontend/optim.h"
#include "frontend/realize.h"
#include "torch_bench/torch_bench.h"
#include "train.h"
#include "uop/config.h"
#include "uop/process.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

enum class OptimKind { SGD, Adam, AdamW };

std::unique_ptr<optim::Optimizer> make_optimizer(OptimKind kind, const std::vector<Tensor>& params) {
  switch (kind) {
    case OptimKind::SGD: return std::make_unique<optim::SGD>(params, 0.01);
    case OptimKind::Adam: return std::make_unique<optim::Adam>(params, 1e-3);
    case OptimKind::AdamW: return std::make_unique<optim::AdamW>(params, 1e-3);
  }
  throw Error("bench train: unknown optimizer");
}

// PyTorch's examples/mnist CNN: conv(1->32,3)-ReLU-conv(32->64,3)-ReLU-maxpool(2)-flatten-fc(9216->128)-ReLU-fc(128->10).
std::shared_ptr<nn::Sequential> make_torch_example_cnn() {
  using A = std::array<int64_t, 2>;
  auto m = std::make_shared<nn::Sequential>();
  m->add("conv1", std::make_shared<nn::Conv2d>(1, 32, A{3, 3})).add("relu1", std::make_shared<nn::ReLU>())
      .add("conv2", std::make_shared<nn::Conv2d>(32, 64, A{3, 3})).add("relu2", std::make_shared<nn::ReLU>())
      .add("pool", std::make_shared<nn::MaxPool2d>(A{2, 2})).add("flatten", std::make_shared<nn::Flatten>())
      .add("fc1", std::make_shared<nn::Linear>(9216, 128)).add("relu3", std::make_shared<nn::ReLU>())
      .add("fc2", std::make_shared<nn::Linear>(128, 10));
  return m;
}
double torch_example_cnn_flops() { return 2.0 * (26.0 * 26 * 32 * 9 + 24.0 * 24 * 64 * 32 * 9 + 9216.0 * 128 + 128.0 * 10); }

std::shared_ptr<nn::Sequential> make_mlp() {
  auto m = std::make_shared<nn::Sequential>();
  m->add("fc1", std::make_shared<nn::Linear>(784, 512)).add("relu1", std::make_shared<nn::ReLU>())
      .add("fc2", std::make_shared<nn::Linear>(512, 512)).add("relu2", std::make_shared<nn::ReLU>())
      .add("fc3", std::make_shared<nn::Linear>(512, 10));
  return m;
}
double mlp_flops() { return 2.0 * (784 * 512 + 512 * 512 + 512 * 10); }
// A pre-norm transformer encoder as PyTorch users write one (nanoGPT's blocks without the causal
// mask): x + attn(ln1(x)), then x + fc2(gelu(fc1(ln2(x)))).
class TransformerBlock : public nn::Module {
 public:
  TransformerBlock(int64_t d, int64_t heads, int64_t hidden)
      : ln1(register_module("ln1", std::make_shared<nn::LayerNorm>(Shape{d}))),
        attn(register_module("attn", std::make_shared<nn::MultiheadAttention>(d, heads, true, true))),
        ln2(register_module("ln2", std::make_shared<nn::LayerNorm>(Shape{d}))),
        fc1(register_module("fc1", std::make_shared<nn::Linear>(d, hidden))),
        fc2(register_module("fc2", std::make_shared<nn::Linear>(hidden, d))) {}
  Tensor forward(const Tensor& x) override {
    Tensor h = x + attn->forward(ln1->forward(x));
    return h + fc2->forward(fc1->forward(ln2->forward(h)).gelu());
  }
  std::shared_ptr<nn::LayerNorm> ln1;
  std::shared_ptr<nn::MultiheadAttention> attn;
  std::shared_ptr<nn::LayerNorm> ln2;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

// Token ids (as floats, the bench's one input type) -> token and learned position embeddings ->
// blocks -> LayerNorm -> mean over the sequence -> Linear to 10 classes.
class TransformerClassifier : public nn::Module {
 public:
  TransformerClassifier(int64_t vocab, int64_t seq, int64_t d, int64_t heads, int64_t hidden, int n_blocks)
      : tok(register_module("tok", std::make_shared<nn::Embedding>(vocab, d))),
        pos(register_parameter("pos", Tensor::randn({seq, d}) * 0.02)) {
    for (int i = 0; i < n_blocks; ++i)
      blocks.push_back(register_module(cat("block", i), std::make_shared<TransformerBlock>(d, heads, hidden)));
    ln = register_module("ln", std::make_shared<nn::LayerNorm>(Shape{d}));
    head = register_module("head", std::make_shared<nn::Linear>(d, 10));
  }
  Tensor forward(const Tensor& tokens) override {
    Tensor x = tok->forward(tokens.cast(dtypes::int32)) + pos;
    for (auto& b : blocks) x = b->forward(x);
    return head->forward(ln->forward(x).mean({1}));
  }
  std::shared_ptr<nn::Embedding> tok;
  Tensor pos;
  std::vector<std::shared_ptr<TransformerBlock>> blocks;
  std::shared_ptr<nn::LayerNorm> ln;
  std::shared_ptr<nn::Linear> head;
};
constexpr int64_t kVocab = 1000, kSeq = 64, kDim = 128, kHeads = 4, kHidden = 512;
constexpr int kBlocks = 2;
double transformer_flops() {
  double per_token = 4.0 * kDim * kDim + 2.0 * kDim * kHidden + 2.0 * kSeq * kDim;  // projections, MLP, scores and mix
  return 2.0 * (kBlocks * per_token * kSeq + kDim * 10.0);
}

// Token ids -> Embedding -> LSTM (batch first) -> Linear on the last hidden state, as a PyTorch user
// writes a sequence classifier. The LSTM unrolls into 64 steps of graph; the Jit replays them.
class LstmClassifier : public nn::Module {
 public:
  LstmClassifier(int64_t vocab, int64_t d, int64_t hidden)
      : tok(register_module("tok", std::make_shared<nn::Embedding>(vocab, d))),
        rnn(register_module("rnn", std::make_shared<nn::LSTM>(d, hidden, 1, true, /*batch_first=*/true))),
        head(register_module("head", std::make_shared<nn::Linear>(hidden, 10))) {}
  Tensor forward(const Tensor& tokens) override {
    nn::RNNResult r = rnn->forward(tok->forward(tokens.cast(dtypes::int32)), std::nullopt);
    return head->forward(r.h_n.reshape({tokens.shape()[0], rnn->hidden_size}));
  }
  std::shared_ptr<nn::Embedding> tok;
  std::shared_ptr<nn::LSTM> rnn;
  std::shared_ptr<nn::Linear> head;
};
double lstm_flops() { return 2.0 * (kSeq * 4.0 * kDim * (kDim + kDim) + kDim * 10.0); }  // gates over x and h, head

// torchvision's ResNet BasicBlock: conv3x3-BN-ReLU-conv3x3-BN, plus the input (through a strided 1x1
// conv and BN where the shape changes), then ReLU.
class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride) {
    using A = std::array<int64_t, 2>;
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(in, out, A{3, 3}, A{stride, stride}, A{1, 1}, A{1, 1}, 1, false));
    bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(out));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(out, out, A{3, 3}, A{1, 1}, A{1, 1}, A{1, 1}, 1, false));
    bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(out));
    if (stride != 1 || in != out) {
      down_conv = register_module("down_conv", std::make_shared<nn::Conv2d>(in, out, A{1, 1}, A{stride, stride}, A{0, 0}, A{1, 1}, 1, false));
      down_bn = register_module("down_bn", std::make_shared<nn::BatchNorm2d>(out));
    }
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = bn2->forward(conv2->forward(bn1->forward(conv1->forward(x)).relu()));
    Tensor skip = down_conv ? down_bn->forward(down_conv->forward(x)) : x;
    return (h + skip).relu();
  }
  std::shared_ptr<nn::Conv2d> conv1, conv2, down_conv;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2, down_bn;
};

// A small CIFAR-shaped ResNet: stem conv3x3(3->32)-BN-ReLU, a 32->32 block, a 32->64 stride-2 block,
// global average pooling, Linear(64->10).
class SmallResNet : public nn::Module {
 public:
  SmallResNet() {
    using A = std::array<int64_t, 2>;
    stem = register_module("stem", std::make_shared<nn::Conv2d>(3, 32, A{3, 3}, A{1, 1}, A{1, 1}, A{1, 1}, 1, false));
    stem_bn = register_module("stem_bn", std::make_shared<nn::BatchNorm2d>(32));
    block1 = register_module("block1", std::make_shared<BasicBlock>(32, 32, 1));
    block2 = register_module("block2", std::make_shared<BasicBlock>(32, 64, 2));
    fc = register_module("fc", std::make_shared<nn::Linear>(64, 10));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = block2->forward(block1->forward(stem_bn->forward(stem->forward(x)).relu()));
    return fc->forward(h.mean({2, 3}));
  }
  std::shared_ptr<nn::Conv2d> stem;
  std::shared_ptr<nn::BatchNorm2d> stem_bn;
  std::shared_ptr<BasicBlock> block1, block2;
  std::shared_ptr<nn::Linear> fc;
};
double resnet_flops() {
  double stem = 32.0 * 32 * 32 * 27, b1 = 2 * 32.0 * 32 * 32 * 32 * 9;
  double b2 = 16.0 * 16 * 64 * 32 * 9 + 16.0 * 16 * 64 * 64 * 9 + 16.0 * 16 * 64 * 32;
  return 2.0 * (stem + b1 + b2 + 64 * 10);
}

// The libtorch side (torch_bench.h), loaded from beside the kiln binary when it was built.
struct TorchBench {
  KilnTorchBenchCreate create = nullptr;
  KilnTorchBenchStep step = nullptr;
  KilnTorchBenchDestroy destroy = nullptr;
  std::string problem;  // why it is not loaded

  static TorchBench load() {
    TorchBench t;
    std::error_code ec;
    std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    std::filesystem::path lib = exe.parent_path() / "libkiln_torch_bench.so";
    if (ec || !std::filesystem::exists(lib)) {
      t.problem = cat("no ", lib.string(), ": it is built where libtorch-dev is installed (make deps, then make)");
      return t;
    }
    void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept loaded: libtorch's threads may linger
    if (!handle) {
      t.problem = cat("dlopen(", lib.string(), ") failed: ", dlerror());
      return t;
    }
    t.create = reinterpret_cast<KilnTorchBenchCreate>(dlsym(handle, "kiln_torch_bench_create"));
    t.step = reinterpret_cast<KilnTorchBenchStep>(dlsym(handle, "kiln_torch_bench_step"));
    t.destroy = reinterpret_cast<KilnTorchBenchDestroy>(dlsym(handle, "kiln_torch_bench_destroy"));
    if (!t.create || !t.step || !t.destroy) {
      t.problem = cat(lib.string(), " lacks the kiln_torch_bench_* functions");
      t.create = nullptr;
    }
    return t;
  }
};

struct ModelCase {
  std::string name, torch_model;
  OptimKind optim;
  double lr;
  std::function<std::shared_ptr<nn::Module>()> make;
  Shape input;
  double forward_flops;  // per sample
  int64_t vocab = 0;     // > 0: the input holds token ids in [0, vocab) (as floats)
};

struct ModelResult {
  std::string name;
  int64_t batch = 0;
  double kiln_s = 0, torch_s = 0;   // median seconds per step (torch_s 0: not measured)
  double flops = 0;                 // per step: 3x the forward's (backward computes two gradients)
  double first_step_s = 0;          // kiln's first step, compiling its kernels, empty compile cache
  size_t kernels = 0;               // kiln kernels launched per step
  double first_loss_kiln = 0, first_loss_torch = 0;
  std::string torch_problem;
  std::string torch_policy;         // the OMP_WAIT_POLICY libtorch was fastest under ("" when measured in this process)
};

const char* optim_name(OptimKind k) { return k == OptimKind::SGD ? "SGD" : k == OptimKind::Adam ? "Adam" : "AdamW"; }

ModelResult run_model(const ModelCase& m, const TorchBench& torch, int warmup, int rounds, int steps) {
  ModelResult r;
  r.name = m.name;
  r.batch = m.input[0];
  r.flops = 3 * m.forward_flops * static_cast<double>(m.input[0]);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> x(static_cast<size_t>(numel(m.input)));
  for (float& v : x) v = m.vocab > 0 ? static_cast<float>(rng() % static_cast<uint64_t>(m.vocab)) : d(rng);
  std::vector<int32_t> y(static_cast<size_t>(m.input[0]));
  for (int32_t& v : y) v = static_cast<int32_t>(rng() % 10);
  Tensor::manual_seed(0);
  std::shared_ptr<nn::Module> model = m.make();

  // libtorch's copy of the initial weights, made before kiln trains.
  KilnTorchBench* tb = nullptr;
  char error[512] = "";
  if (torch.create) {
    std::vector<std::string> names;
    std::vector<std::vector<float>> values;
    std::vector<int64_t> numels;
    for (auto& [name, p] : model->named_parameters()) {
      names.push_back(name);
      values.push_back(p.to_vector<float>());
      numels.push_back(p.numel());
    }
    std::vector<const char*> name_ptrs;
    std::vector<const float*> value_ptrs;
    for (size_t i = 0; i < names.size(); ++i) {
      name_ptrs.push_back(names[i].c_str());
      value_ptrs.push_back(values[i].data());
    }
    tb = torch.create(m.torch_model.c_str(), optim_name(m.optim), m.lr, 2, static_cast<int>(names.size()), name_ptrs.data(),
                      value_ptrs.data(), numels.data(), error, sizeof error);
    if (!tb) r.torch_problem = error;
  } else {
    r.torch_problem = torch.problem;
  }

  Tensor tx = Tensor::from_vector(x, m.input), ty = Tensor::from_vector(y, {m.input[0]});
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(m.optim, model->parameters());
  // The step as `kiln train` runs it: captured by the Jit on its first calls, replayed after
  // (KILN_JIT=0: eager every time).
  Jit jit([&](const std::vector<Tensor>& in) {
    Tensor loss = nn::cross_entropy(model->forward(in[0]), in[1]);
    loss.backward();
    std::vector<Tensor> extra = model->buffers();
    extra.push_back(loss);
    opt->step(extra);
    opt->zero_grad();
    return std::vector<Tensor>{loss};
  });
  auto kiln_step = [&] {
    auto start = Clock::now();
    float value = jit({tx, ty})[0].item<float>();
    if (!std::isfinite(value)) throw Error(cat("bench train: ", m.name, ": kiln's loss became ", value));
    return std::pair{std::chrono::duration<double>(Clock::now() - start).count(), static_cast<double>(value)};
  };
  auto torch_step = [&] {
    auto start = Clock::now();
    double loss = torch.step(tb, x.data(), m.input.data(), static_cast<int>(m.input.size()), y.data(), error, sizeof error);
    if (loss < 0) throw Error(cat("bench train: ", m.name, ": libtorch failed: ", error));
    return std::pair{std::chrono::duration<double>(Clock::now() - start).count(), loss};
  };
  std::tie(r.first_step_s, r.first_loss_kiln) = kiln_step();
  if (tb) r.first_loss_torch = torch_step().second;
  for (int i = 1; i < warmup; ++i) {
    kiln_step();
    if (tb) torch_step();
  }
  size_t launched = realize_stats().kernels_launched;
  kiln_step();
  r.kernels = jit.stats().replays > 0 ? jit.stats().kernels_per_replay : realize_stats().kernels_launched - launched;
  // Interleaved in rounds, so that both see the same machine. Each side's worker threads spin for a
  // while after their work (kiln's launch team ~1 ms, OpenMP's and OpenBLAS's longer) and would compete
  // with the other side's: a pause at each switch lets them sleep first.
  std::vector<double> kiln_times, torch_times;
  auto pause = [] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); };
  for (int round = 0; round < rounds; ++round) {
    pause();
    for (int i = 0; i < steps; ++i) kiln_times.push_back(kiln_step().first);
    if (!tb) continue;
    pause();
    for (int i = 0; i < steps; ++i) torch_times.push_back(torch_step().first);
  }
  r.kiln_s = median(kiln_times);
  if (tb) {
    r.torch_s = median(torch_times);
    torch.destroy(tb);
  }
  return r;
}


}  // namespace

namespace {

// glibc's malloc told to keep what libtorch frees: no trimming, no mmap per large tensor. Only its
// tunables reach far enough (mallopt caps the mmap threshold at 32 MiB), and glibc reads them at start,
// so the process runs itself again with them set. GLIBC_TUNABLES is glibc's variable, not a kiln knob.
void rerun_with_malloc_tunables() {
  constexpr const char* kTunables = "glibc.malloc.mmap_threshold=1073741824:glibc.malloc.trim_threshold=68719476736";
  const char* now = std::getenv("GLIBC_TUNABLES");
  if (now && std::string(now).find("glibc.malloc.trim_threshold") != std::string::npos) return;
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string arg; std::getline(cmdline, arg, '\0');) args.push_back(arg);
  if (args.empty()) return;  // cannot rerun: measure as is
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  setenv("GLIBC_TUNABLES", now && *now ? cat(now, ":", kTunables).c_str() : kTunables, 1);
  execv("/proc/self/exe", argv.data());  // returns only on failure: then measure as is
}

// libgomp reads its wait policy once, when it is loaded, and libtorch is fastest under a different one
// per model: OpenBLAS's own threads (the MLP's and attention's matmuls) lose to OpenMP threads that spin
// (ACTIVE, the default: MLP 40-90 steps/s here, PASSIVE: ~200), while oneDNN's convolutions lose when
// they sleep (PASSIVE: demo CNN 21 steps/s, ACTIVE: 45). So each model runs in two child processes, one
// per policy, and the report keeps each side's best: libtorch as a user who tuned it would run it.
// OMP_WAIT_POLICY is libgomp's variable, set for the child only; kiln's own launch team ignores it.
constexpr const char* kOmpPolicies[] = {"ACTIVE", "PASSIVE"};

// Runs one model in a child process under `policy` and returns its JSON report. The child's output
// mixes stderr (KILN_DEBUG lines) with the report, which is the last thing printed: an array opening a
// line and running to the end.
nlohmann::json run_child(const BenchOptions& options, const std::string& key, const std::string& policy) {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error(cat("kiln bench train: cannot find its own binary to run a model in a child process (", ec.message(), ")"));
  std::vector<std::string> argv{"env", cat("OMP_WAIT_POLICY=", policy), exe.string(), "--device", default_device_name(), "bench", "train",
                                "--json", "--only", key, "--omp-child", policy};
  if (options.quick) argv.push_back("--quick");
  ProcessResult child = run_process(argv);
  if (child.exit_code != 0)
    throw Error(cat("kiln bench train: the child measuring ", key, " under OMP_WAIT_POLICY=", policy, " failed (exit ", child.exit_code,
                    "); it printed:\n", child.output));
  size_t at = child.output.rfind("\n[");
  nlohmann::json j = nlohmann::json::parse(child.output.substr(at == std::string::npos ? 0 : at + 1), nullptr, /*allow_exceptions=*/false);
  if (!j.is_array() || j.size() != 1)
    throw Error(cat("kiln bench train: the child measuring ", key, " printed no single-model JSON report:\n", child.output));
  return j[0];
}

// The best of the children's measurements of one model.
ModelResult best_of_children(const BenchOptions& options, const ModelCase& m) {
  ModelResult r;
  r.name = m.name;
  r.batch = m.input[0];
  r.flops = 3 * m.forward_flops * static_cast<double>(m.input[0]);
  for (const char* policy : kOmpPolicies) {
    nlohmann::json j = run_child(options, m.torch_model, policy);
    double kiln_s = 1 / j.at("kiln_steps_per_s").get<double>(), torch_rate = j.at("libtorch_steps_per_s").get<double>();
    if (r.kiln_s == 0 || kiln_s < r.kiln_s) r.kiln_s = kiln_s;
    if (torch_rate > 0 && (r.torch_s == 0 || 1 / torch_rate < r.torch_s)) {
      r.torch_s = 1 / torch_rate;
      r.torch_policy = policy;
    }
    r.first_step_s = r.first_step_s == 0 ? j.at("first_step_s").get<double>() : std::min(r.first_step_s, j.at("first_step_s").get<double>());
    r.kernels = j.at("kernels_per_step").get<size_t>();
    r.first_loss_kiln = j.at("first_loss_kiln").get<double>();
    r.first_loss_torch = j.at("first_loss_libtorch").get<double>();
    r.torch_problem = j.at("libtorch_problem").get<std::string>();
  }
  return r;
}

}  // namespace

void run_bench_train(const BenchOptions& options) {
  bool child = !options.omp_child.empty();
  if (child) rerun_with_malloc_tunables();
  // The first step's compile time is measured against an empty compile cache.
  std::filesystem::path cache = std::filesystem::temp_directory_path() / cat("kiln-bench-train-", getpid());
  config().cache_dir = cache.string();
  struct RemoveCache {
    std::filesystem::path path;
    ~RemoveCache() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } remove_cache{cache};

  int warmup = 4, rounds = options.quick ? 2 : 3, steps = options.quick ? 3 : 5;
  CReference ref = CReference::build();
  TorchBench torch = TorchBench::load();
  std::vector<ModelCase> cases{
      {"MLP 784-512-512-10, SGD", "mlp", OptimKind::SGD, 0.01, [] { return make_mlp(); }, {256, 784}, mlp_flops()},
      {"CNN of PyTorch's mnist example, Adam", "torch_cnn", OptimKind::Adam, 1e-3, [] { return make_torch_example_cnn(); },
       {128, 1, 28, 28}, torch_example_cnn_flops()},
      {"demo CNN (kiln train mnist), AdamW", "demo_cnn", OptimKind::AdamW, 1e-3, [] { return make_mnist_cnn(); },
       {128, 1, 28, 28}, mnist_cnn_forward_flops()},
      {"transformer encoder (2 blocks, d 128, 4 heads, seq 64), Adam", "transformer", OptimKind::Adam, 1e-3,
       [] { return std::make_shared<TransformerClassifier>(kVocab, kSeq, kDim, kHeads, kHidden, kBlocks); }, {32, kSeq},
       transformer_flops(), kVocab},
      {"ResNet (stem + 2 BasicBlocks, CIFAR-shaped), Adam", "resnet", OptimKind::Adam, 1e-3, [] { return std::make_shared<SmallResNet>(); },
       {32, 3, 32, 32}, resnet_flops()},
      {"LSTM classifier (Embedding 1000 x 128, LSTM 128, seq 64), Adam", "lstm", OptimKind::Adam, 1e-3,
       [] { return std::make_shared<LstmClassifier>(kVocab, kDim, kDim); }, {32, kSeq}, lstm_flops(), kVocab},
  };
  std::vector<ModelResult> results;
  for (const ModelCase& m : cases)
    if (options.only.empty() || m.name.find(options.only) != std::string::npos || m.torch_model.find(options.only) != std::string::npos)
      results.push_back(child || !torch.create ? run_model(m, torch, warmup, rounds, steps) : best_of_children(options, m));
  if (results.empty()) throw Error(cat("kiln bench train --only ", options.only, ": no model matches (mlp, torch_cnn, demo_cnn, transformer, resnet, lstm)"));
  double peak = ref.peak_gflops(options.quick ? 3 : 5);

  if (options.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const ModelResult& r : results)
      out.push_back({{"workload", r.name}, {"batch", r.batch}, {"kiln_steps_per_s", 1 / r.kiln_s},
                     {"libtorch_steps_per_s", r.torch_s > 0 ? 1 / r.torch_s : 0.0}, {"gflops", r.flops / r.kiln_s * 1e-9},
                     {"fma_peak_gflops", peak}, {"kernels_per_step", r.kernels}, {"first_step_s", r.first_step_s},
                     {"libtorch_problem", r.torch_problem}, {"first_loss_kiln", r.first_loss_kiln},
                     {"first_loss_libtorch", r.first_loss_torch}, {"libtorch_omp_wait_policy", r.torch_policy}});
    std::cout << out.dump(2) << "\n";
    return;
  }
  std::cout << "kiln bench train: one training step (forward, backward, optimizer), median of " << rounds * steps << " after "
            << warmup << " warm-up steps, kiln and libtorch alternating in " << rounds << " rounds of " << steps << "\n";
  if (!child && torch.create)
    std::cout << "each model runs in two processes, libgomp's OMP_WAIT_POLICY ACTIVE and PASSIVE (libtorch's best differs per model); "
                 "the faster of each side is shown\n";
  std::cout << "reference: FMA peak " << std::lround(peak) << " GFLOP/s (" << ref.threads() << " threads, " << ref.compiler << ")\n";
  for (const ModelResult& r : results) {
    double gflops = r.flops / r.kiln_s * 1e-9;
    std::cout << "  " << r.name << ", batch " << r.batch << "\n" << std::fixed << std::setprecision(1) << "    kiln " << std::setw(7)
              << 1 / r.kiln_s << " steps/s";
    if (r.torch_s > 0)
      std::cout << "   libtorch " << std::setw(7) << 1 / r.torch_s << " steps/s   kiln/libtorch " << std::setprecision(2)
                << r.torch_s / r.kiln_s << std::setprecision(1);
    if (!r.torch_policy.empty()) std::cout << "   (libtorch best under " << r.torch_policy << ")";
    else
      std::cout << "   libtorch: " << r.torch_problem;
    std::cout << "\n    " << gflops << " GFLOP/s (" << 100 * gflops / peak << "% of the FMA peak), " << r.kernels
              << " kernels per step, first step " << std::setprecision(2) << r.first_step_s << " s (empty compile cache)";
    if (r.torch_s > 0) std::cout << ", first loss " << std::setprecision(5) << r.first_loss_kiln << " vs libtorch " << r.first_loss_torch;
    std::cout << "\n";
  }
}

}  // namespace kiln
