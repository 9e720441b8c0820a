// kiln bench train: samples/s of whole training steps (forward, backward, AdamW), with the step's
// achieved GFLOP/s beside OpenBLAS sgemm measured in the same run. Measured, never asserted.
#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "bench.h"
#include "bench_reference.h"
#include "frontend/nn.h"
#include "frontend/optim.h"
#include "train.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct StepResult {
  std::string name;
  int64_t batch;
  double seconds;  // median per step
  double flops;    // per step
};

enum class OptimKind { SGD, Adam, AdamW };

std::unique_ptr<optim::Optimizer> make_optimizer(OptimKind kind, const std::vector<Tensor>& params) {
  switch (kind) {
    case OptimKind::SGD: return std::make_unique<optim::SGD>(params, 0.01);
    case OptimKind::Adam: return std::make_unique<optim::Adam>(params, 1e-3);
    case OptimKind::AdamW: return std::make_unique<optim::AdamW>(params, 1e-3);
  }
  throw Error("bench train: unknown optimizer");
}

// Times `steps` training steps after `warmup` ones (which compile every kernel).
StepResult time_steps(const std::string& name, nn::Module& model, OptimKind optim_kind, const Tensor& x, const Tensor& y,
                      double flops_per_sample, int warmup, int steps) {
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(optim_kind, model.parameters());
  std::vector<double> times;
  for (int i = 0; i < warmup + steps; ++i) {
    auto start = Clock::now();
    Tensor loss = nn::cross_entropy(model.forward(x), y);
    loss.backward();
    std::vector<Tensor> extra = model.buffers();
    extra.push_back(loss);
    opt->step(extra);
    opt->zero_grad();
    float value = loss.item<float>();
    if (!std::isfinite(value)) throw Error(cat("bench train: ", name, ": the loss became ", value));
    if (i >= warmup) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  int64_t batch = x.shape()[0];
  // forward + backward (twice the forward: gradients of inputs and of weights) = 3x the forward.
  return {name, batch, median(times), 3 * flops_per_sample * static_cast<double>(batch)};
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

double sgemm_gflops(const OpenBlas& blas, int runs) {
  const int n = 1024;
  std::vector<float> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1, 1);
  for (float& v : a) v = d(rng);
  for (float& v : b) v = d(rng);
  std::vector<double> times;
  for (int i = 0; i < runs + 1; ++i) {
    auto start = Clock::now();
    blas.sgemm(OpenBlas::kRowMajor, OpenBlas::kNoTrans, OpenBlas::kNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    if (i > 0) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return 2.0 * n * n * n / median(times) * 1e-9;
}

}  // namespace

void run_bench_train(const BenchOptions& options) {
  int warmup = 2, steps = options.quick ? 3 : 7;
  OpenBlas blas = OpenBlas::load();
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-1, 1);
  auto random_tensor = [&](Shape shape) {
    std::vector<float> v(static_cast<size_t>(numel(shape)));
    for (float& e : v) e = d(rng);
    return Tensor::from_vector(v, shape);
  };
  auto labels = [&](int64_t n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int32_t& e : v) e = static_cast<int32_t>(rng() % 10);
    return Tensor::from_vector(v, {n});
  };
  Tensor::manual_seed(0);
  std::vector<StepResult> results;
  auto demo = make_mnist_cnn();
  results.push_back(time_steps("demo CNN (kiln train mnist), AdamW", *demo, OptimKind::AdamW, random_tensor({128, 1, 28, 28}), labels(128),
                               mnist_cnn_forward_flops(), warmup, steps));
  auto mlp = make_mlp();
  results.push_back(time_steps("MLP 784-512-512-10, SGD", *mlp, OptimKind::SGD, random_tensor({256, 784}), labels(256), mlp_flops(), warmup, steps));
  auto cnn = make_torch_example_cnn();
  results.push_back(time_steps("CNN of PyTorch's mnist example, Adam", *cnn, OptimKind::Adam, random_tensor({128, 1, 28, 28}), labels(128),
                               torch_example_cnn_flops(), warmup, steps));
  double sgemm = blas.sgemm ? sgemm_gflops(blas, options.quick ? 3 : 7) : 0;

  if (options.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const StepResult& r : results)
      out.push_back({{"workload", r.name}, {"batch", r.batch}, {"samples_per_s", double(r.batch) / r.seconds},
                     {"gflops", r.flops / r.seconds * 1e-9}, {"sgemm_gflops", sgemm}});
    std::cout << out.dump(2) << "\n";
    return;
  }
  std::cout << "kiln bench train: one training step (forward, backward, AdamW), median of " << steps << " after " << warmup
            << " warm-up steps\n";
  std::cout << "reference: " << (blas.sgemm ? cat("OpenBLAS sgemm 1024^3 ", std::lround(sgemm), " GFLOP/s (core ", blas.core, ")")
                                           : cat("no OpenBLAS: ", blas.problem))
            << "\n";
  for (const StepResult& r : results) {
    double gflops = r.flops / r.seconds * 1e-9;
    std::cout << "  " << std::left << std::setw(26) << r.name << " batch " << std::setw(4) << r.batch << std::right << std::fixed
              << std::setprecision(0) << std::setw(8) << double(r.batch) / r.seconds << " samples/s  " << std::setprecision(1)
              << std::setw(6) << gflops << " GFLOP/s";
    if (sgemm > 0) std::cout << "  (" << std::setprecision(1) << 100 * gflops / sgemm << "% of sgemm)";
    std::cout << "   " << std::setprecision(1) << r.seconds * 1e3 << " ms/step\n";
  }
}

}  // namespace kiln
