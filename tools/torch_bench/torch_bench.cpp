// libkiln_torch_bench.so: the libtorch side of `kiln bench train`, behind a C interface so that the kiln
// binary does not link libtorch (it dlopens this library when it was built; see torch_bench.h).
//
// The models are written with torch::nn modules the way PyTorch's examples write them, get kiln's
// initial weights by parameter name, and train with torch::optim: one call is one training step.
#include <ATen/Parallel.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/modules/rnn.h>
#include <torch/nn/modules/container/functional.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "torch_bench.h"

namespace nn = torch::nn;

struct KilnTorchBench {
  std::shared_ptr<nn::Module> model;
  std::function<at::Tensor(const at::Tensor&)> forward;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

namespace {

// The models of tools/bench_train.cpp, with the same parameter names. Each returns the module and its
// forward.
using Model = std::pair<std::shared_ptr<nn::Module>, std::function<at::Tensor(const at::Tensor&)>>;

Model sequential(nn::Sequential s) {
  return {s.ptr(), [s](const at::Tensor& x) mutable { return s->forward(x); }};
}

// Pre-norm encoder block: x + attn(ln1(x)), then x + fc2(gelu(fc1(ln2(x)))). libtorch's attention takes
// (L, N, E), so the batch-first input is transposed around it.
struct TransformerBlockImpl : nn::Module {
  TransformerBlockImpl(int64_t d, int64_t heads, int64_t hidden)
      : ln1(register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({d})))),
        attn(register_module("attn", nn::MultiheadAttention(nn::MultiheadAttentionOptions(d, heads)))),
        ln2(register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({d})))),
        fc1(register_module("fc1", nn::Linear(d, hidden))),
        fc2(register_module("fc2", nn::Linear(hidden, d))) {}
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor n = ln1->forward(x).transpose(0, 1);
    at::Tensor a = std::get<0>(attn->forward(n, n, n, {}, /*need_weights=*/false)).transpose(0, 1);
    at::Tensor h = x + a;
    return h + fc2->forward(torch::nn::functional::gelu(fc1->forward(ln2->forward(h))));
  }
  nn::LayerNorm ln1;
  nn::MultiheadAttention attn;
  nn::LayerNorm ln2;
  nn::Linear fc1, fc2;
};

struct TransformerClassifierImpl : nn::Module {
  TransformerClassifierImpl(int64_t vocab, int64_t seq, int64_t d, int64_t heads, int64_t hidden, int n_blocks)
      : tok(register_module("tok", nn::Embedding(vocab, d))), pos(register_parameter("pos", torch::zeros({seq, d}))) {
    for (int i = 0; i < n_blocks; ++i)
      blocks.push_back(register_module("block" + std::to_string(i), std::make_shared<TransformerBlockImpl>(d, heads, hidden)));
    ln = register_module("ln", nn::LayerNorm(nn::LayerNormOptions({d})));
    head = register_module("head", nn::Linear(d, 10));
  }
  at::Tensor forward(const at::Tensor& tokens) {
    at::Tensor x = tok->forward(tokens.to(at::kLong)) + pos;
    for (auto& b : blocks) x = b->forward(x);
    return head->forward(ln->forward(x).mean(1));
  }
  nn::Embedding tok;
  at::Tensor pos;
  std::vector<std::shared_ptr<TransformerBlockImpl>> blocks;
  nn::LayerNorm ln{nullptr};
  nn::Linear head{nullptr};
};

nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(pad).bias(false));
}

// torchvision's BasicBlock.
struct BasicBlockImpl : nn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1(register_module("conv1", conv(in, out, 3, stride, 1))),
        bn1(register_module("bn1", nn::BatchNorm2d(out))),
        conv2(register_module("conv2", conv(out, out, 3, 1, 1))),
        bn2(register_module("bn2", nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      down_conv = register_module("down_conv", conv(in, out, 1, stride, 0));
      down_bn = register_module("down_bn", nn::BatchNorm2d(out));
    }
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = bn2->forward(conv2->forward(torch::relu(bn1->forward(conv1->forward(x)))));
    at::Tensor skip = down_conv ? down_bn->forward(down_conv->forward(x)) : x;
    return torch::relu(h + skip);
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Conv2d down_conv{nullptr};
  nn::BatchNorm2d down_bn{nullptr};
};

struct SmallResNetImpl : nn::Module {
  SmallResNetImpl()
      : stem(register_module("stem", conv(3, 32, 3, 1, 1))),
        stem_bn(register_module("stem_bn", nn::BatchNorm2d(32))),
        block1(register_module("block1", std::make_shared<BasicBlockImpl>(32, 32, 1))),
        block2(register_module("block2", std::make_shared<BasicBlockImpl>(32, 64, 2))),
        fc(register_module("fc", nn::Linear(64, 10))) {}
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = block2->forward(block1->forward(torch::relu(stem_bn->forward(stem->forward(x)))));
    return fc->forward(h.mean({2, 3}));
  }
  nn::Conv2d stem;
  nn::BatchNorm2d stem_bn;
  std::shared_ptr<BasicBlockImpl> block1, block2;
  nn::Linear fc;
};

// Embedding -> LSTM (batch first) -> Linear on the last hidden state (bench_train.cpp's LstmClassifier).
struct LstmClassifierImpl : nn::Module {
  LstmClassifierImpl(int64_t vocab, int64_t d, int64_t hidden)
      : tok(register_module("tok", nn::Embedding(vocab, d))),
        rnn(register_module("rnn", nn::LSTM(nn::LSTMOptions(d, hidden).batch_first(true)))),
        head(register_module("head", nn::Linear(hidden, 10))) {}
  at::Tensor forward(const at::Tensor& tokens) {
    auto [out, state] = rnn->forward(tok->forward(tokens.to(at::kLong)));
    return head->forward(std::get<0>(state).squeeze(0));
  }
  nn::Embedding tok;
  nn::LSTM rnn;
  nn::Linear head;
};

template <typename M>
Model custom(std::shared_ptr<M> m) {
  return {m, [m](const at::Tensor& x) { return m->forward(x); }};
}

Model make_model(const std::string& name) {
  using nn::Conv2dOptions;
  if (name == "mlp")
    return sequential(nn::Sequential({{"fc1", nn::Linear(784, 512)}, {"relu1", nn::ReLU()}, {"fc2", nn::Linear(512, 512)},
                                      {"relu2", nn::ReLU()}, {"fc3", nn::Linear(512, 10)}}));
  if (name == "torch_cnn")
    return sequential(nn::Sequential({{"conv1", nn::Conv2d(Conv2dOptions(1, 32, 3))}, {"relu1", nn::ReLU()},
                                      {"conv2", nn::Conv2d(Conv2dOptions(32, 64, 3))}, {"relu2", nn::ReLU()},
                                      {"pool", nn::MaxPool2d(nn::MaxPool2dOptions(2))}, {"flatten", nn::Flatten()},
                                      {"fc1", nn::Linear(9216, 128)}, {"relu3", nn::ReLU()}, {"fc2", nn::Linear(128, 10)}}));
  if (name == "demo_cnn")
    return sequential(nn::Sequential({{"conv1", nn::Conv2d(Conv2dOptions(1, 16, 3).padding(1))}, {"bn1", nn::BatchNorm2d(16)},
                                      {"relu1", nn::ReLU()}, {"pool1", nn::MaxPool2d(nn::MaxPool2dOptions(2))},
                                      {"conv2", nn::Conv2d(Conv2dOptions(16, 32, 3).padding(1))}, {"bn2", nn::BatchNorm2d(32)},
                                      {"relu2", nn::ReLU()}, {"pool2", nn::MaxPool2d(nn::MaxPool2dOptions(2))}, {"flatten", nn::Flatten()},
                                      {"fc1", nn::Linear(32 * 7 * 7, 128)}, {"relu3", nn::ReLU()}, {"fc2", nn::Linear(128, 10)}}));
  if (name == "transformer") return custom(std::make_shared<TransformerClassifierImpl>(1000, 64, 128, 4, 512, 2));
  if (name == "resnet") return custom(std::make_shared<SmallResNetImpl>());
  if (name == "lstm") return custom(std::make_shared<LstmClassifierImpl>(1000, 128, 128));
  throw std::runtime_error("unknown model " + name + " (mlp, torch_cnn, demo_cnn, transformer, resnet, lstm)");
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
    auto [module, forward] = make_model(model);
    b->model = module;
    b->forward = forward;
    // libtorch's MultiheadAttention registers its separate q/k/v projections as undefined tensors when they are packed.
    std::vector<at::Tensor> defined;
    for (const auto& p : b->model->parameters())
      if (p.defined()) defined.push_back(p);
    auto params = b->model->named_parameters();
    if (static_cast<int>(defined.size()) != n_params)
      throw std::runtime_error("libtorch's model has " + std::to_string(defined.size()) + " parameters, kiln's " + std::to_string(n_params));
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
    if (opt == "SGD") b->optimizer = std::make_unique<torch::optim::SGD>(defined, torch::optim::SGDOptions(lr));
    else if (opt == "Adam") b->optimizer = std::make_unique<torch::optim::Adam>(defined, torch::optim::AdamOptions(lr));
    else if (opt == "AdamW") b->optimizer = std::make_unique<torch::optim::AdamW>(defined, torch::optim::AdamWOptions(lr));
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
    at::Tensor loss = torch::nn::functional::cross_entropy(b->forward(input), target);
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
