// libkiln_torch_bench.so: the libtorch side of `kiln bench train`, behind a C interface so that the kiln
// binary does not link libtorch (it dlopens this library when it was built; see torch_bench.h).
//
// The models are written with torch::nn modules the way PyTorch's examples write them, get kiln's
// initial weights by parameter name, and train with torch::optim: one call is one training step.
#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/modules/container/functional.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cstring>
#include <memory>
#include <string>

#include "torch_bench.h"

namespace nn = torch::nn;

struct KilnTorchBench {
  nn::Sequential model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

namespace {

nn::Sequential make_model(const std::string& name) {
  using nn::Conv2dOptions;
  if (name == "mlp")
    return nn::Sequential({{"fc1", nn::Linear(784, 512)}, {"relu1", nn::ReLU()}, {"fc2", nn::Linear(512, 512)},
                           {"relu2", nn::ReLU()}, {"fc3", nn::Linear(512, 10)}});
  if (name == "torch_cnn")
    return nn::Sequential({{"conv1", nn::Conv2d(Conv2dOptions(1, 32, 3))}, {"relu1", nn::ReLU()},
                           {"conv2", nn::Conv2d(Conv2dOptions(32, 64, 3))}, {"relu2", nn::ReLU()},
                           {"pool", nn::MaxPool2d(nn::MaxPool2dOptions(2))}, {"flatten", nn::Flatten()},
                           {"fc1", nn::Linear(9216, 128)}, {"relu3", nn::ReLU()}, {"fc2", nn::Linear(128, 10)}});
  if (name == "demo_cnn")
    return nn::Sequential({{"conv1", nn::Conv2d(Conv2dOptions(1, 16, 3).padding(1))}, {"bn1", nn::BatchNorm2d(16)},
                           {"relu1", nn::ReLU()}, {"pool1", nn::MaxPool2d(nn::MaxPool2dOptions(2))},
                           {"conv2", nn::Conv2d(Conv2dOptions(16, 32, 3).padding(1))}, {"bn2", nn::BatchNorm2d(32)},
                           {"relu2", nn::ReLU()}, {"pool2", nn::MaxPool2d(nn::MaxPool2dOptions(2))}, {"flatten", nn::Flatten()},
                           {"fc1", nn::Linear(32 * 7 * 7, 128)}, {"relu3", nn::ReLU()}, {"fc2", nn::Linear(128, 10)}});
  throw std::runtime_error("unknown model " + name + " (mlp, torch_cnn, demo_cnn)");
}

void say(char* error, size_t length, const std::string& what) {
  if (length == 0) return;
  std::strncpy(error, what.c_str(), length - 1);
  error[length - 1] = '\0';
}

}  // namespace

extern "C" {

KilnTorchBench* kiln_torch_bench_create(const char* model, const char* optimizer, double lr, int threads, int n_params,
                                        const char* const* names, const float* const* values, const int64_t* numels,
                                        char* error, size_t error_length) {
  try {
    at::set_num_threads(threads);
    auto b = std::make_unique<KilnTorchBench>();
    b->model = make_model(model);
    auto params = b->model->named_parameters();
    if (static_cast<int>(params.size()) != n_params)
      throw std::runtime_error("libtorch's model has " + std::to_string(params.size()) + " parameters, kiln's " + std::to_string(n_params));
    {
      at::NoGradGuard no_grad;
      for (int i = 0; i < n_params; ++i) {
        at::Tensor* p = params.find(names[i]);
        if (!p) throw std::runtime_error(std::string("libtorch's model has no parameter ") + names[i]);
        if (p->numel() != numels[i]) throw std::runtime_error(std::string("parameter ") + names[i] + " differs in size");
        p->copy_(at::from_blob(const_cast<float*>(values[i]), p->sizes(), at::kFloat));
      }
    }
    std::string opt = optimizer;
    if (opt == "SGD") b->optimizer = std::make_unique<torch::optim::SGD>(b->model->parameters(), torch::optim::SGDOptions(lr));
    else if (opt == "Adam") b->optimizer = std::make_unique<torch::optim::Adam>(b->model->parameters(), torch::optim::AdamOptions(lr));
    else if (opt == "AdamW") b->optimizer = std::make_unique<torch::optim::AdamW>(b->model->parameters(), torch::optim::AdamWOptions(lr));
    else throw std::runtime_error("unknown optimizer " + opt + " (SGD, Adam, AdamW)");
    return b.release();
  } catch (const std::exception& e) {
    say(error, error_length, e.what());
    return nullptr;
  }
}

double kiln_torch_bench_step(KilnTorchBench* b, const float* x, const int64_t* shape, int ndim, const int32_t* labels, char* error,
                             size_t error_length) {
  try {
    at::Tensor input = at::from_blob(const_cast<float*>(x), at::IntArrayRef(shape, static_cast<size_t>(ndim)), at::kFloat);
    at::Tensor target = at::from_blob(const_cast<int32_t*>(labels), {shape[0]}, at::kInt).to(at::kLong);
    b->optimizer->zero_grad();
    at::Tensor loss = torch::nn::functional::cross_entropy(b->model->forward(input), target);
    loss.backward();
    b->optimizer->step();
    return loss.item<double>();
  } catch (const std::exception& e) {
    say(error, error_length, e.what());
    return -1;
  }
}

void kiln_torch_bench_destroy(KilnTorchBench* b) { delete b; }

}  // extern "C"
