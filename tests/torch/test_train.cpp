// kiln's training loop against libtorch's: the same small CNN (torch::nn modules on libtorch's side),
// the same initial weights (kiln's, copied over), the same batches, cross-entropy and AdamW; the
// losses of every step, the final parameters and batchnorm's running statistics must agree.
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>

#include "frontend/nn.h"
#include "frontend/optim.h"
#include "oracle.h"

namespace kiln::oracle {
namespace {

// Conv2d(1, 4, 3, padding 1) -> BatchNorm2d(4) -> ReLU -> MaxPool2d(2) -> Flatten -> Linear(4*4*4, 3).
struct TorchNet : torch::nn::Module {
  TorchNet()
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(4))),
        fc(register_module("fc", torch::nn::Linear(4 * 4 * 4, 3))) {}
  at::Tensor forward(const at::Tensor& x) { return fc(at::max_pool2d(bn(conv(x)).relu(), {2, 2}).flatten(1)); }
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
  torch::nn::Linear fc;
};

std::shared_ptr<nn::Sequential> kiln_net() {
  auto net = std::make_shared<nn::Sequential>();
  net->add("conv", std::make_shared<nn::Conv2d>(1, 4, std::array<int64_t, 2>{3, 3}, std::array<int64_t, 2>{1, 1}, std::array<int64_t, 2>{1, 1}))
      .add("bn", std::make_shared<nn::BatchNorm2d>(4))
      .add("relu", std::make_shared<nn::ReLU>())
      .add("pool", std::make_shared<nn::MaxPool2d>(std::array<int64_t, 2>{2, 2}))
      .add("flatten", std::make_shared<nn::Flatten>())
      .add("fc", std::make_shared<nn::Linear>(4 * 4 * 4, 3));
  return net;
}

TEST_CASE("torch train: a small CNN with batchnorm and AdamW follows libtorch for 20 steps", "[torch][train]") {
  const int steps = 20;
  const double lr = 1e-2, weight_decay = 1e-2;
  Tensor::manual_seed(7);
  auto knet = kiln_net();
  optim::AdamW kopt(knet->parameters(), lr, 0.9, 0.999, 1e-8, weight_decay);

  TorchNet tnet;
  std::map<std::string, at::Tensor> tparams;
  for (const auto& item : tnet.named_parameters()) tparams[item.key()] = item.value();
  {
    at::NoGradGuard no_grad;
    for (const auto& [name, p] : knet->named_parameters()) {
      INFO(name);
      REQUIRE(tparams.count(name) == 1);
      tparams.at(name).copy_(to_aten(p));
    }
  }
  REQUIRE(tparams.size() == knet->named_parameters().size());
  torch::optim::AdamW topt(tnet.parameters(), torch::optim::AdamWOptions(lr).betas({0.9, 0.999}).eps(1e-8).weight_decay(weight_decay));

  // Fixed random batches of 16 8x8 images and labels in 0..2, one per step.
  Source src(201);
  std::vector<at::Tensor> images, labels;
  for (int s = 0; s < steps; ++s) {
    images.push_back(src.values({16, 1, 8, 8}, at::kFloat, Values::Finite));
    labels.push_back(at::randint(0, 3, {16}, src.gen(), at::TensorOptions().dtype(at::kLong)));
  }

  // conv.bias before each step, and its gradient and the conv weight's largest, on both sides (see
  // conv.bias below).
  std::vector<at::Tensor> kbias, tbias;
  std::vector<double> klosses, tlosses, kbias_grad, tbias_grad, kweight_grad, tweight_grad;
  Tensor kconv_bias = knet->state_dict().at("conv.bias"), kconv_weight = knet->state_dict().at("conv.weight");
  auto largest = [](const at::Tensor& t) { return t.abs().max().item<double>(); };
  for (int s = 0; s < steps; ++s) {
    kbias.push_back(to_aten(kconv_bias));
    tbias.push_back(tnet.conv->bias.detach().clone());

    Tensor kloss = nn::cross_entropy(knet->forward(to_kiln(images[s])), to_kiln(labels[s]));
    kloss.backward();
    std::vector<Tensor> extra = knet->buffers();
    extra.insert(extra.end(), {kloss, *kconv_bias.grad(), *kconv_weight.grad()});  // realized with the step
    kopt.step(extra);
    kopt.zero_grad();
    klosses.push_back(kloss.item<float>());
    kbias_grad.push_back(largest(to_aten(extra[extra.size() - 2])));
    kweight_grad.push_back(largest(to_aten(extra.back())));

    topt.zero_grad();
    at::Tensor tloss = at::cross_entropy_loss(tnet.forward(images[s]), labels[s]);
    tloss.backward();
    tbias_grad.push_back(largest(tnet.conv->bias.grad()));
    tweight_grad.push_back(largest(tnet.conv->weight.grad()));
    topt.step();
    tlosses.push_back(tloss.item<double>());
  }

  // Losses. Both compute in float32 and sum in different orders (kiln's fused kernels, libtorch's
  // convolution and batchnorm kernels), so the first loss agrees to a float32 ulp or two. After that
  // each side trains its own parameters and the differences could grow, but AdamW damps them: its
  // step is lr * m / (sqrt(v) + eps), which depends on a gradient's relative error d, not on its
  // size, so 20 steps move a parameter apart by at most ~20 * lr * d = 0.2 d, and d is a few float32
  // ulps. Measured: losses within 3e-7 relative over the 20 steps, parameters within 9e-8. Allowed:
  // 1e-5 for the losses and 1e-6 for the parameters (absolute and relative), 30x and 10x the
  // measurement. A wrong optimizer is far outside: libtorch with weight_decay 0 or 0.02 instead of
  // 1e-2 moves the losses by 7e-4 and the parameters by 3e-4 to 2e-3; eps 1e-7 instead of 1e-8
  // moves fc.weight by 1.8e-6.
  for (int s = 0; s < steps; ++s) {
    INFO("step " << s << ": kiln loss " << klosses[s] << ", torch " << tlosses[s]);
    CHECK(std::abs(klosses[s] - tlosses[s]) <= 1e-5 * std::abs(tlosses[s]));
  }
  for (const auto& [name, p] : knet->named_parameters()) {
    if (name == "conv.bias") continue;  // below
    INFO(name);
    CHECK(mismatch(p, tparams.at(name).detach(), Tol{1e-6, 1e-6}) == "");
  }

  // conv.bias: batchnorm subtracts each channel's batch mean, so the loss does not depend on the
  // conv's bias and its gradient is 0 in exact arithmetic. Both libraries compute rounding noise
  // instead, which AdamW does not ignore: for noise of the size of its eps (1e-8) its step is a
  // sizeable fraction of lr. So each side's bias drifts with its own noise (measured: 0.1 apart after
  // 20 steps) and cannot be compared. What must hold is that the gradient is noise on both sides:
  // measured at most 5e-8, against at least 0.12 for the conv weight's largest gradient (5e-7 of it:
  // float32 rounding of a sum of 1024 terms). Allowed: 1e-5 of it; a bias the loss depended on would
  // get a gradient of the weight's order.
  for (int s = 0; s < steps; ++s) {
    INFO("step " << s << ": largest conv.bias gradient kiln " << kbias_grad[s] << ", torch " << tbias_grad[s] << "; conv.weight kiln "
                 << kweight_grad[s] << ", torch " << tweight_grad[s]);
    CHECK(kbias_grad[s] <= 1e-5 * kweight_grad[s]);
    CHECK(tbias_grad[s] <= 1e-5 * tweight_grad[s]);
  }

  // Running statistics (momentum 0.1, the unbiased batch variance). The variance does not see the
  // bias: measured within 3e-7, allowed 1e-5 (libtorch with a wrong weight decay: 3e-3). The running
  // mean is sum_t c_t (m_t + b_t), with c_t = 0.1 * 0.9^(T-1-t), m_t the batch mean of the conv
  // output without its bias and b_t the bias at step t: the bias's drift enters it (measured 0.06
  // apart), so compare it with that part taken out. Measured within 4e-8, allowed 1e-6 (a wrong
  // weight decay: 2e-5).
  std::map<std::string, Tensor> kbuffers;
  for (const auto& [name, b] : knet->named_buffers()) kbuffers[name] = b;
  CHECK(mismatch(kbuffers.at("bn.running_var"), tnet.bn->running_var, Tol{1e-5, 1e-5}) == "");
  CHECK(to_aten(kbuffers.at("bn.num_batches_tracked")).item<int64_t>() == tnet.bn->num_batches_tracked.item<int64_t>());
  at::Tensor kmean = to_aten(kbuffers.at("bn.running_mean")), tmean = tnet.bn->running_mean.clone();
  for (int s = 0; s < steps; ++s) {
    double c = 0.1 * std::pow(0.9, steps - 1 - s);
    kmean -= c * kbias[s];
    tmean -= c * tbias[s];
  }
  CHECK(value_mismatch(kmean, tmean, Tol{1e-6, 1e-6}) == "");
}

}  // namespace
}  // namespace kiln::oracle

namespace kiln::oracle {
namespace {

// One optimizer on both sides: the same parameters (two tensors, one of them a matrix), the same
// gradients each step (those of sum(p^2 * k) + sum(p * c), so they change as p moves), compared after
// every step. Both compute in float32; the updates are elementwise, so they agree to a few ulps.
template <typename KOpt, typename TOpt>
void follow(const std::string& what, KOpt make_kiln, TOpt make_torch, int steps = 6) {
  Source src(211);
  std::vector<at::Tensor> init = {src.values({3, 4}, at::kFloat, Values::Finite), src.values({5}, at::kFloat, Values::Finite)};
  std::vector<at::Tensor> k = {src.values({3, 4}, at::kFloat, Values::Finite), src.values({5}, at::kFloat, Values::Finite)};
  std::vector<at::Tensor> c = {src.values({3, 4}, at::kFloat, Values::Finite), src.values({5}, at::kFloat, Values::Finite)};
  std::vector<Tensor> kp;
  std::vector<at::Tensor> tp;
  for (const at::Tensor& x : init) {
    kp.push_back(to_kiln(x).contiguous().realize().requires_grad_());
    tp.push_back(x.clone().requires_grad_(true));
  }
  auto kopt = make_kiln(kp);
  auto topt = make_torch(tp);
  for (int s = 0; s < steps; ++s) {
    Tensor kloss = Tensor::zeros({});
    at::Tensor tloss = at::zeros({});
    for (size_t i = 0; i < kp.size(); ++i) {
      kloss = kloss + (kp[i] * kp[i] * to_kiln(k[i])).sum() + (kp[i] * to_kiln(c[i])).sum();
      tloss = tloss + (tp[i] * tp[i] * k[i]).sum() + (tp[i] * c[i]).sum();
    }
    kloss.backward();
    kopt->step();
    kopt->zero_grad();
    topt->zero_grad();
    tloss.backward();
    topt->step();
    for (size_t i = 0; i < kp.size(); ++i) {
      INFO(what << ", step " << s + 1 << ", parameter " << i);
      CHECK(mismatch(kp[i], tp[i].detach(), Tol{2e-5, 2e-5}) == "");
    }
  }
}

TEST_CASE("torch train: RMSprop and Adagrad follow libtorch's with every option", "[torch][train]") {
  using torch::optim::AdagradOptions, torch::optim::RMSpropOptions;
  struct Rms {
    double lr, alpha, eps, wd, momentum;
    bool centered;
  };
  for (const Rms& o : {Rms{1e-2, 0.99, 1e-8, 0, 0, false}, Rms{5e-3, 0.9, 1e-6, 0.1, 0, false}, Rms{1e-2, 0.95, 1e-8, 0, 0.9, false},
                       Rms{1e-2, 0.99, 1e-8, 0.01, 0.5, true}, Rms{2e-2, 0.8, 1e-5, 0, 0, true}})
    follow(
        cat("RMSprop lr ", o.lr, " alpha ", o.alpha, " eps ", o.eps, " weight_decay ", o.wd, " momentum ", o.momentum, " centered ", o.centered),
        [&](std::vector<Tensor> p) { return std::make_unique<optim::RMSprop>(p, o.lr, o.alpha, o.eps, o.wd, o.momentum, o.centered); },
        [&](std::vector<at::Tensor> p) {
          return std::make_unique<torch::optim::RMSprop>(
              p, RMSpropOptions(o.lr).alpha(o.alpha).eps(o.eps).weight_decay(o.wd).momentum(o.momentum).centered(o.centered));
        });
  struct Ada {
    double lr, lr_decay, wd, init, eps;
  };
  for (const Ada& o : {Ada{1e-2, 0, 0, 0, 1e-10}, Ada{5e-2, 0.1, 0.01, 0.1, 1e-10}, Ada{1e-1, 0, 0.5, 0, 1e-6}})
    follow(
        cat("Adagrad lr ", o.lr, " lr_decay ", o.lr_decay, " weight_decay ", o.wd, " initial ", o.init, " eps ", o.eps),
        [&](std::vector<Tensor> p) { return std::make_unique<optim::Adagrad>(p, o.lr, o.lr_decay, o.wd, o.init, o.eps); },
        [&](std::vector<at::Tensor> p) {
          return std::make_unique<torch::optim::Adagrad>(
              p, AdagradOptions(o.lr).lr_decay(o.lr_decay).weight_decay(o.wd).initial_accumulator_value(o.init).eps(o.eps));
        });
}

// amsgrad: both take the running maximum of the raw second moment (PyTorch 1.13's Python code does too;
// its docs' algorithm box takes that of the bias-corrected one). With beta2 0.9 the second moment falls
// within these steps, so the maximum binds; 10 steps.
TEST_CASE("torch train: Adam and AdamW with amsgrad follow libtorch's", "[torch][train]") {
  using torch::optim::AdamOptions, torch::optim::AdamWOptions;
  struct Ams {
    double lr, beta1, beta2, eps, wd;
  };
  for (const Ams& o : {Ams{1e-2, 0.9, 0.999, 1e-8, 0}, Ams{5e-2, 0.9, 0.9, 1e-8, 0.1}, Ams{2e-2, 0.8, 0.9, 1e-6, 0}}) {
    follow(
        cat("Adam amsgrad lr ", o.lr, " betas ", o.beta1, ", ", o.beta2, " eps ", o.eps, " weight_decay ", o.wd),
        [&](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(p, o.lr, o.beta1, o.beta2, o.eps, o.wd, false, true); },
        [&](std::vector<at::Tensor> p) {
          return std::make_unique<torch::optim::Adam>(
              p, AdamOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.wd).amsgrad(true));
        },
        10);
    follow(
        cat("AdamW amsgrad lr ", o.lr, " betas ", o.beta1, ", ", o.beta2, " eps ", o.eps, " weight_decay ", o.wd + 0.01),
        [&](std::vector<Tensor> p) { return std::make_unique<optim::AdamW>(p, o.lr, o.beta1, o.beta2, o.eps, o.wd + 0.01, true); },
        [&](std::vector<at::Tensor> p) {
          return std::make_unique<torch::optim::AdamW>(
              p, AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.wd + 0.01).amsgrad(true));
        },
        10);
  }
}

}  // namespace
}  // namespace kiln::oracle
