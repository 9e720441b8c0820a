// nn layers, losses and checkpoints, each against a plain host computation
// of the same formula (written out here, independent of kiln's graph code).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

#include "frontend/checkpoint.h"
#include "frontend/jit.h"
#include "frontend/nn.h"
#include "frontend/optim.h"
#include "frontend/realize.h"
#include "helpers.h"

using namespace kiln;

using kiln::test::check_close, kiln::test::randoms;

TEST_CASE("nn: parameters, names and PyTorch's default initialization", "[nn]") {
  Tensor::manual_seed(1);
  nn::Sequential model;
  model.add("conv", std::make_shared<nn::Conv2d>(2, 4, std::array<int64_t, 2>{3, 3}))
      .add("bn", std::make_shared<nn::BatchNorm2d>(4))
      .add("flat", std::make_shared<nn::Flatten>())
      .add("fc", std::make_shared<nn::Linear>(4 * 2 * 2, 3));
  std::vector<std::string> names;
  for (auto& [name, t] : model.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"conv.weight", "conv.bias", "bn.weight", "bn.bias", "fc.weight", "fc.bias"});
  names.clear();
  for (auto& [name, t] : model.named_buffers()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"});
  // kaiming_uniform(a=sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)); fan_in of conv = 2*3*3 = 18.
  auto params = model.named_parameters();
  for (auto& [name, t] : params) {
    CHECK(t.requires_grad());
    CHECK(t.is_leaf());
  }
  std::vector<float> w = params[0].second.to_vector<float>();
  float bound = 1.0f / std::sqrt(18.0f);
  CHECK(*std::max_element(w.begin(), w.end()) <= bound);
  CHECK(*std::min_element(w.begin(), w.end()) >= -bound);
  CHECK(*std::max_element(w.begin(), w.end()) > bound * 0.7f);  // 72 draws: spread over the range
  CHECK(params[2].second.to_vector<float>() == std::vector<float>(4, 1.0f));
  CHECK(params[3].second.to_vector<float>() == std::vector<float>(4, 0.0f));
}

TEST_CASE("nn: Linear and Conv2d compute what their formulas say", "[nn]") {
  nn::Linear fc(3, 2);
  std::vector<float> w = fc.weight.to_vector<float>(), b = fc.bias->to_vector<float>();
  std::vector<float> x = randoms(6, 3);
  std::vector<double> want(4);
  for (int n = 0; n < 2; ++n)
    for (int o = 0; o < 2; ++o) {
      double s = b[o];
      for (int i = 0; i < 3; ++i) s += double(x[n * 3 + i]) * w[o * 3 + i];
      want[n * 2 + o] = s;
    }
  check_close(fc(Tensor::from_vector(x, {2, 3})).to_vector<float>(), want, 1e-5);
  CHECK_THROWS_WITH(fc(Tensor::ones({2, 4})), Catch::Contains("Linear") && Catch::Contains("in_features = 3"));
}

// The modules take PyTorch's module options and pass them on (the functions are checked against libtorch).
TEST_CASE("nn: MaxPool2d and AvgPool2d take dilation, ceil_mode, count_include_pad and divisor_override", "[nn]") {
  std::vector<float> v(16);
  std::iota(v.begin(), v.end(), 1.0f);  // a 4x4 image 1..16
  Tensor x = Tensor::from_vector(v, {1, 1, 4, 4});
  // Dilation 2: the window (i, j), (i, j+2), (i+2, j), (i+2, j+2); its max is the last: 11, 12, 15, 16.
  nn::MaxPool2d dilated({2, 2}, std::array<int64_t, 2>{1, 1}, {0, 0}, {2, 2});
  CHECK(dilated(x).to_vector<float>() == std::vector<float>{11, 12, 15, 16});
  // ceil_mode: a 3x3 window with stride 2 on 4x4 gives 2x2 windows, the last ones cut short.
  nn::MaxPool2d ceiled({3, 3}, std::array<int64_t, 2>{2, 2}, {0, 0}, {1, 1}, true);
  CHECK(ceiled(x).to_vector<float>() == std::vector<float>{11, 12, 15, 16});
  // divisor_override 2: each 2x2 window's sum over 2. Top-left: (1 + 2 + 5 + 6) / 2 = 7.
  nn::AvgPool2d halves({2, 2}, std::nullopt, {0, 0}, false, true, 2);
  CHECK(halves(x).to_vector<float>() == std::vector<float>{7, 11, 23, 27});
  // Padding 1 without count_include_pad: the corner window holds only the 1 (1 / 1), not 1 / 4.
  nn::AvgPool2d unpadded({2, 2}, std::nullopt, {1, 1}, false, false);
  CHECK(unpadded(x).to_vector<float>()[0] == 1.0f);
  nn::AvgPool2d padded({2, 2}, std::nullopt, {1, 1});
  CHECK(padded(x).to_vector<float>()[0] == 0.25f);
}

TEST_CASE("nn: BatchNorm2d normalizes with batch statistics and tracks running ones", "[nn]") {
  nn::BatchNorm2d bn(2, 1e-5, 0.1);
  std::vector<float> x = randoms(2 * 2 * 3, 5, -2, 3);  // (N=2, C=2, H=1, W=3)
  Tensor in = Tensor::from_vector(x, {2, 2, 1, 3});
  std::vector<float> y = bn(in).to_vector<float>();
  for (int c = 0; c < 2; ++c) {
    double mean = 0, var = 0;
    std::vector<double> v;
    for (int n = 0; n < 2; ++n)
      for (int i = 0; i < 3; ++i) v.push_back(x[(n * 2 + c) * 3 + i]);
    for (double e : v) mean += e / 6;
    for (double e : v) var += (e - mean) * (e - mean) / 6;
    for (int n = 0; n < 2; ++n)
      for (int i = 0; i < 3; ++i)
        CHECK(y[(n * 2 + c) * 3 + i] == Approx((x[(n * 2 + c) * 3 + i] - mean) / std::sqrt(var + 1e-5)).margin(1e-4));
    CHECK(bn.running_mean.to_vector<float>()[c] == Approx(0.1 * mean).margin(1e-6));
    CHECK(bn.running_var.to_vector<float>()[c] == Approx(0.9 + 0.1 * var * 6 / 5).margin(1e-6));  // unbiased
  }
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  bn.eval();
  std::vector<float> ye = bn(in).to_vector<float>();
  std::vector<float> rm = bn.running_mean.to_vector<float>(), rv = bn.running_var.to_vector<float>();
  for (int i = 0; i < 12; ++i) {
    int c = (i / 3) % 2;
    CHECK(ye[i] == Approx((x[i] - rm[c]) / std::sqrt(rv[c] + 1e-5)).margin(1e-5));
  }
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);  // eval leaves the statistics alone
}

TEST_CASE("nn: BatchNorm1d normalizes (N, C) and (N, C, L) per channel, and names the shapes it takes", "[nn]") {
  nn::BatchNorm1d bn(3, 1e-5, 0.1);
  std::vector<float> x = randoms(4 * 3, 6, -2, 3);  // (N=4, C=3)
  std::vector<float> y = bn(Tensor::from_vector(x, {4, 3})).to_vector<float>();
  for (int c = 0; c < 3; ++c) {
    double mean = 0, var = 0;
    for (int n = 0; n < 4; ++n) mean += x[n * 3 + c] / 4.0;
    for (int n = 0; n < 4; ++n) var += (x[n * 3 + c] - mean) * (x[n * 3 + c] - mean) / 4.0;
    for (int n = 0; n < 4; ++n) CHECK(y[n * 3 + c] == Approx((x[n * 3 + c] - mean) / std::sqrt(var + 1e-5)).margin(1e-4));
    CHECK(bn.running_var.to_vector<float>()[c] == Approx(0.9 + 0.1 * var * 4 / 3).margin(1e-6));  // unbiased
  }
  std::vector<float> x3 = randoms(2 * 3 * 5, 7);  // (N=2, C=3, L=5): statistics over N and L
  nn::BatchNorm1d bn3(3);
  std::vector<float> y3 = bn3(Tensor::from_vector(x3, {2, 3, 5})).to_vector<float>();
  for (int c = 0; c < 3; ++c) {
    double mean = 0, var = 0;
    for (int n = 0; n < 2; ++n)
      for (int l = 0; l < 5; ++l) mean += x3[(n * 3 + c) * 5 + l] / 10.0;
    for (int n = 0; n < 2; ++n)
      for (int l = 0; l < 5; ++l) var += std::pow(x3[(n * 3 + c) * 5 + l] - mean, 2) / 10.0;
    for (int n = 0; n < 2; ++n)
      for (int l = 0; l < 5; ++l)
        CHECK(y3[(n * 3 + c) * 5 + l] == Approx((x3[(n * 3 + c) * 5 + l] - mean) / std::sqrt(var + 1e-5)).margin(1e-4));
  }
  CHECK_THROWS_WITH(bn(Tensor::zeros({2, 3, 4, 4})), Catch::Contains("BatchNorm1d") && Catch::Contains("(N, C) or (N, C, L)"));
  CHECK_THROWS_WITH(nn::BatchNorm2d(3)(Tensor::zeros({2, 3})), Catch::Contains("BatchNorm2d") && Catch::Contains("(N, C, H, W)"));
  CHECK_THROWS_WITH(bn(Tensor::zeros({2, 4})), Catch::Contains("4 channels"));
}

TEST_CASE("nn: activation modules and ConvTranspose2d are their functions, with PyTorch's initialization", "[nn]") {
  std::vector<float> xv = randoms(2 * 6, 8, -3, 3);
  Tensor x = Tensor::from_vector(xv, {2, 6});
  auto same = [](Tensor a, Tensor b) { CHECK(a.to_vector<float>() == b.to_vector<float>()); };
  same(nn::Identity()(x), x);
  same(nn::GELU()(x), x.gelu());
  same(nn::GELU("tanh")(x), x.gelu("tanh"));
  same(nn::SiLU()(x), x.silu());
  same(nn::Sigmoid()(x), x.sigmoid());
  same(nn::Tanh()(x), x.tanh());
  same(nn::LeakyReLU(0.2)(x), x.leaky_relu(0.2));
  same(nn::Softmax(1)(x), x.softmax(1));
  same(nn::LogSoftmax(1)(x), x.log_softmax(1));
  // And the values, against the formulas.
  std::vector<float> leaky = nn::LeakyReLU(0.2)(x).to_vector<float>(), sig = nn::Sigmoid()(x).to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    CHECK(leaky[i] == Approx(xv[i] > 0 ? xv[i] : 0.2 * xv[i]).margin(1e-6));
    CHECK(sig[i] == Approx(1 / (1 + std::exp(-double(xv[i])))).margin(1e-6));
  }
  nn::ConvTranspose2d up(4, 6, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 2);
  CHECK(up.weight.shape() == Shape{4, 3, 3, 3});  // (in, out / groups, kh, kw)
  REQUIRE(up.bias);
  CHECK(up.bias->shape() == Shape{6});
  double bound = 1 / std::sqrt(3.0 * 3 * 3);  // fan-in: out / groups * kh * kw
  for (float w : up.weight.to_vector<float>()) CHECK(std::abs(w) <= bound);
  Tensor img = Tensor::from_vector(randoms(1 * 4 * 5 * 5, 9), {1, 4, 5, 5});
  Tensor y = up(img);
  CHECK(y.shape() == Shape{1, 6, 10, 10});  // (5 - 1) * 2 - 2 + 3 + 1
  same(y, img.conv_transpose2d(up.weight, up.bias, {2, 2}, {1, 1}, {1, 1}, 2));
  auto seq = std::make_shared<nn::Sequential>();
  auto layer = std::make_shared<nn::ConvTranspose2d>(4, 6, std::array<int64_t, 2>{3, 3});
  seq->add("up", layer).add("act", std::make_shared<nn::Tanh>());
  CHECK(seq->named_parameters().size() == 2);  // up.weight, up.bias
  same(seq->forward(img), img.conv_transpose2d(layer->weight, layer->bias).tanh());
  CHECK_THROWS_WITH(nn::ConvTranspose2d(4, 5, {3, 3}, {1, 1}, {0, 0}, {0, 0}, 2), Catch::Contains("divisible by groups"));
}

TEST_CASE("nn: the 1-D, adaptive and extra activation modules, ModuleList and TransformerEncoderLayer, and their errors", "[nn]") {
  // Values against libtorch are in tests/torch (test_grad.cpp); here the modules equal their functions,
  // their parameters have PyTorch's names, shapes and bounds, and bad arguments raise errors that say so.
  std::vector<float> xv = randoms(2 * 3 * 10, 11, -4, 4);
  Tensor x = Tensor::from_vector(xv, {2, 3, 10});
  auto same = [](Tensor a, Tensor b) { CHECK(a.to_vector<float>() == b.to_vector<float>()); };
  same(nn::ELU(0.5)(x), x.elu(0.5));
  same(nn::SELU()(x), x.selu());
  same(nn::Hardtanh(-2, 1)(x), x.hardtanh(-2, 1));
  same(nn::ReLU6()(x), x.relu6());
  same(nn::Hardsigmoid()(x), x.hardsigmoid());
  same(nn::Hardswish()(x), x.hardswish());
  same(nn::Mish()(x), x.mish());
  same(nn::Softplus(2, 5)(x), x.softplus(2, 5));
  // Closed forms of the piecewise ones.
  std::vector<float> r6 = x.relu6().to_vector<float>(), hs = x.hardswish().to_vector<float>(), elu = x.elu().to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    double v = xv[i];
    CHECK(r6[i] == Approx(std::min(std::max(v, 0.0), 6.0)).margin(1e-6));
    CHECK(hs[i] == Approx(v * std::min(std::max(v + 3, 0.0), 6.0) / 6).margin(1e-6));
    CHECK(elu[i] == Approx(v > 0 ? v : std::expm1(v)).margin(1e-6));
  }
  nn::Conv1d conv(3, 4, 3, 1, 1, 1, 1);
  CHECK(conv.weight.shape() == Shape{4, 3, 3});
  for (float w : conv.weight.to_vector<float>()) CHECK(std::abs(w) <= 1 / std::sqrt(9.0));
  Tensor y = conv(x);
  CHECK(y.shape() == Shape{2, 4, 10});
  same(y, x.conv1d(conv.weight, conv.bias, 1, 1));
  same(nn::MaxPool1d(2)(x), x.max_pool1d(2));
  same(nn::AvgPool1d(3, 2, 1)(x), x.avg_pool1d(3, 2, 1));
  same(nn::AdaptiveAvgPool1d(3)(x), x.adaptive_avg_pool1d(3));
  same(nn::AdaptiveMaxPool1d(4)(x), x.adaptive_max_pool1d(4));
  Tensor img = x.reshape({2, 3, 2, 5});
  std::vector<float> pooled = nn::AdaptiveAvgPool2d({1, 1})(img).to_vector<float>(), means = img.mean({2, 3}, true).to_vector<float>();
  REQUIRE(pooled.size() == means.size());
  for (size_t i = 0; i < means.size(); ++i) CHECK(pooled[i] == Approx(means[i]).margin(1e-6));
  same(nn::AdaptiveMaxPool2d({1, 1})(img), img.max({2, 3}, true));
  CHECK(nn::AdaptiveAvgPool2d({2, 3})(img).shape() == Shape{2, 3, 2, 3});
  // ModuleList: PyTorch's names, no forward of its own.
  nn::ModuleList list({std::make_shared<nn::Linear>(10, 4), std::make_shared<nn::ReLU>()});
  list.push_back(std::make_shared<nn::Linear>(4, 2));
  CHECK(list.size() == 3);
  std::vector<std::string> names;
  for (const auto& [name, t] : list.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  Tensor h = x;
  for (const auto& m : list) h = m->forward(h);
  CHECK(h.shape() == Shape{2, 3, 2});
  CHECK_THROWS_WITH(list(x), Catch::Contains("ModuleList has no forward"));
  CHECK_THROWS_WITH(list[3], Catch::Contains("index 3 is out of range for 3"));
  // TransformerEncoderLayer: PyTorch's parameter names; in eval mode a step is deterministic.
  nn::TransformerEncoderLayer enc(8, 2, 16, 0.1, "gelu", 1e-5, true);
  std::vector<std::string> enc_names;
  for (const auto& [name, t] : enc.named_parameters()) enc_names.push_back(name);
  CHECK(enc_names == std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                                              "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                                              "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"});
  Tensor seq = Tensor::from_vector(randoms(2 * 5 * 8, 12), {2, 5, 8});
  enc.eval();
  same(enc(seq), enc(seq));
  CHECK(enc.forward(seq, std::nullopt, std::nullopt, true).shape() == Shape{2, 5, 8});
  // Errors name the op, the values and the fix.
  CHECK_THROWS_WITH(x.hardtanh(1, -1), Catch::Contains("hardtanh") && Catch::Contains("above max_val"));
  CHECK_THROWS_WITH(Tensor::zeros({2, 3, 4, 5}).conv1d(conv.weight), Catch::Contains("conv1d: input must be (N, C, L) or (C, L)"));
  CHECK_THROWS_WITH(x.conv1d(Tensor::zeros({4, 3})), Catch::Contains("conv1d: weight must be (K, C/groups, R)"));
  CHECK_THROWS_WITH(x.adaptive_avg_pool1d(0), Catch::Contains("adaptive_avg_pool1d: output size 0"));
  CHECK_THROWS_WITH(img.adaptive_max_pool2d({0, 2}), Catch::Contains("adaptive_max_pool2d"));
  CHECK_THROWS_WITH(nn::TransformerEncoderLayer(8, 2, 16, 0.1, "tanh"), Catch::Contains("activation \"tanh\" is not \"relu\" or \"gelu\""));
  CHECK_THROWS_WITH(nn::TransformerEncoderLayer(8, 3), Catch::Contains("divisible by num_heads"));
  CHECK_THROWS_WITH(nn::dropout(x, 1.5), Catch::Contains("dropout: p must be in [0, 1]"));
  CHECK_THROWS_WITH(nn::smooth_l1_loss(x, x, nn::Reduction::Mean, -1), Catch::Contains("beta must be >= 0"));
  CHECK_THROWS_WITH(nn::huber_loss(x, x, nn::Reduction::Mean, 0), Catch::Contains("delta must be > 0"));
  CHECK_THROWS_WITH(nn::binary_cross_entropy(x, x.reshape({6, 10})), Catch::Contains("binary_cross_entropy"));
}

TEST_CASE("nn: LayerNorm and GroupNorm", "[nn]") {
  std::vector<float> x = randoms(2 * 4 * 3, 7, -1, 2);
  auto normalize = [&](std::vector<double> v) {
    double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()), var = 0;
    for (double e : v) var += (e - mean) * (e - mean) / double(v.size());
    for (double& e : v) e = (e - mean) / std::sqrt(var + 1e-5);
    return v;
  };
  nn::LayerNorm ln({4, 3});
  std::vector<double> want;
  for (int n = 0; n < 2; ++n) {
    auto part = normalize(std::vector<double>(x.begin() + n * 12, x.begin() + n * 12 + 12));
    want.insert(want.end(), part.begin(), part.end());
  }
  check_close(ln(Tensor::from_vector(x, {2, 4, 3})).to_vector<float>(), want, 1e-4);
  nn::GroupNorm gn(2, 4);  // groups of 2 channels x 3 values
  want.clear();
  for (int g = 0; g < 4; ++g) {
    auto part = normalize(std::vector<double>(x.begin() + g * 6, x.begin() + g * 6 + 6));
    want.insert(want.end(), part.begin(), part.end());
  }
  check_close(gn(Tensor::from_vector(x, {2, 4, 3})).to_vector<float>(), want, 1e-4);
}

TEST_CASE("nn: Embedding and Dropout", "[nn]") {
  nn::Embedding emb(5, 3);
  std::vector<float> w = emb.weight.to_vector<float>();
  Tensor idx = Tensor::from_vector<int32_t>({4, 0, 4, 2}, {2, 2});
  Tensor out = emb(idx);
  CHECK(out.shape() == Shape{2, 2, 3});
  std::vector<float> got = out.to_vector<float>();
  int rows[] = {4, 0, 4, 2};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) CHECK(got[i * 3 + j] == w[rows[i] * 3 + j]);
  CHECK_THROWS_WITH(emb(Tensor::from_vector<int32_t>({5}, {1})), Catch::Contains("out of range"));

  nn::Dropout drop(0.25);
  Tensor ones = Tensor::ones({4000});
  std::vector<float> d = drop(ones).to_vector<float>();
  int zeros = 0;
  for (float v : d) {
    CHECK((v == 0.0f || v == Approx(1 / 0.75)));
    zeros += v == 0.0f;
  }
  CHECK(zeros > 850);  // 1000 expected; the binomial sd is 27
  CHECK(zeros < 1150);
  drop.eval();
  CHECK(drop(ones).to_vector<float>() == std::vector<float>(4000, 1.0f));
}

// Dropout2d drops whole (sample, channel) planes: every plane is all zeros or all x / (1 - p), about p
// of them zeros, and the gradient passes exactly where the value did.
TEST_CASE("nn: Dropout2d zeroes whole channels", "[nn]") {
  nn::Dropout2d drop(0.3);
  Tensor x = (Tensor::arange(0, 40 * 50 * 4 * 3, 1).reshape({40, 50, 4, 3}) + 1.0).realize().requires_grad_();
  Tensor y = drop(x);
  y.sum().backward();
  std::vector<float> xv = x.to_vector<float>(), yv = y.to_vector<float>(), gv = x.grad()->to_vector<float>();
  int dropped = 0;
  for (size_t plane = 0; plane < 40 * 50; ++plane) {
    bool zero = yv[plane * 12] == 0.0f;
    dropped += zero;
    for (size_t k = plane * 12; k < plane * 12 + 12; ++k) {
      INFO("plane " << plane << " element " << k);
      CHECK(yv[k] == Approx(zero ? 0.0f : xv[k] / 0.7f));
      CHECK(gv[k] == Approx(zero ? 0.0f : 1 / 0.7f));
    }
  }
  CHECK(dropped > 540);  // 600 expected of 2000 planes; the binomial sd is 20.5
  CHECK(dropped < 660);
  // A 3-D input is (N, C, L), as PyTorch 1.13 reads it: each row whole, rows independent.
  Tensor rows = Tensor::ones({30, 20, 4});
  std::vector<float> u = drop(rows).to_vector<float>();
  int rows_dropped = 0;
  for (size_t r = 0; r < 600; ++r) {
    rows_dropped += u[r * 4] == 0.0f;
    for (size_t k = 1; k < 4; ++k) CHECK(u[r * 4 + k] == u[r * 4]);
  }
  CHECK(rows_dropped > 135);  // 180 expected of 600 rows; the binomial sd is 11.2
  CHECK(rows_dropped < 225);
  drop.eval();
  CHECK(drop(rows).to_vector<float>() == std::vector<float>(2400, 1.0f));
  CHECK_THROWS_WITH(nn::Dropout2d(1.5), Catch::Contains("Dropout2d: p must be in [0, 1], got 1.5"));
  CHECK_THROWS_WITH(nn::Dropout2d()(Tensor::ones({4, 5})), Catch::Contains("Dropout2d: expected (N, C, H, W) (or (N, C, L)"));
}

TEST_CASE("nn: an Embedding's gradient over a large vocabulary is a scatter-add, eager and replayed", "[nn]") {
  // 1024 tokens x 128 features x 20000 rows is 2.6e9 one-hot pairs: above kScatterMinPairs, so the
  // gradient is a SCATTER_ADD, summed on the host. Each row's gradient is the sum of the output gradient's rows whose
  // token is that row, in double here; repeated tokens, and rows no token uses (zero), included.
  const int64_t V = 20000, D = 128, T = 1024;
  nn::Embedding emb(V, D);
  std::vector<int32_t> tokens(T);
  for (int64_t t = 0; t < T; ++t) tokens[static_cast<size_t>(t)] = static_cast<int32_t>((t * 7919) % 300 + (t % 3) * 9000);
  std::vector<float> gv = randoms(T * D, 21, -1, 1);
  Tensor g = Tensor::from_vector(gv, {T, D});
  auto check_grad = [&](const std::vector<int32_t>& tok, Tensor grad) {
    std::vector<double> want(static_cast<size_t>(V * D), 0.0);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) want[static_cast<size_t>(tok[static_cast<size_t>(t)] * D + d)] += gv[static_cast<size_t>(t * D + d)];
    std::vector<float> got = grad.to_vector<float>();
    REQUIRE(got.size() == want.size());
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += std::abs(got[i] - want[i]) > 1e-5 * (1 + std::abs(want[i]));
    CHECK(bad == 0);
  };
  (emb(Tensor::from_vector(tokens, {T})) * g).sum().backward();
  REQUIRE(emb.weight.grad());
  check_grad(tokens, *emb.weight.grad());
  // Replayed by a Jit with other tokens each call: the host work reads the new tokens every time.
  Jit step([&](const std::vector<Tensor>& in) {
    emb.weight.set_grad(std::nullopt);
    (emb(in[0]) * g).sum().backward();
    return std::vector<Tensor>{*emb.weight.grad()};
  });
  for (int call = 0; call < 5; ++call) {
    std::vector<int32_t> tok = tokens;
    for (int32_t& v : tok) v = (v + call * 611) % static_cast<int32_t>(V);
    check_grad(tok, step({Tensor::from_vector(tok, {T})})[0]);
  }
  CHECK(step.stats().replays >= 2);
}

TEST_CASE("nn: scaled dot-product attention and MultiheadAttention", "[nn]") {
  const int L = 3, S = 4, E = 2;
  std::vector<float> q = randoms(L * E, 11), k = randoms(S * E, 12), v = randoms(S * E, 13);
  auto attention = [&](bool causal) {
    std::vector<double> out(L * E, 0.0);
    for (int i = 0; i < L; ++i) {
      std::vector<double> s(S);
      double mx = -INFINITY, sum = 0;
      for (int j = 0; j < S; ++j) {
        s[j] = 0;
        for (int e = 0; e < E; ++e) s[j] += double(q[i * E + e]) * k[j * E + e] / std::sqrt(double(E));
        if (causal && j > i) s[j] = -INFINITY;
        mx = std::max(mx, s[j]);
      }
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int j = 0; j < S; ++j)
        for (int e = 0; e < E; ++e) out[i * E + e] += s[j] / sum * v[j * E + e];
    }
    return out;
  };
  Tensor tq = Tensor::from_vector(q, {L, E}), tk = Tensor::from_vector(k, {S, E}), tv = Tensor::from_vector(v, {S, E});
  check_close(nn::scaled_dot_product_attention(tq, tk, tv).to_vector<float>(), attention(false), 1e-5);
  check_close(nn::scaled_dot_product_attention(tq, tk, tv, std::nullopt, true).to_vector<float>(), attention(true), 1e-5);

  // MultiheadAttention with 2 heads of size 1 (E=2): project, attend per head, merge, project.
  nn::MultiheadAttention mha(2, 2, true, true);
  std::vector<float> W = mha.in_proj_weight.to_vector<float>(), Wo = mha.out_proj->weight.to_vector<float>();
  std::vector<float> x = randoms(L * E, 14);
  auto proj = [&](int part, int row, int out) {
    double s = 0;
    for (int e = 0; e < E; ++e) s += double(x[row * E + e]) * W[(part * E + out) * E + e];
    return s;
  };
  std::vector<double> heads(L * E);
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < L; ++i) {
      std::vector<double> s(L);
      double mx = -INFINITY, sum = 0;
      for (int j = 0; j < L; ++j) mx = std::max(mx, s[j] = proj(0, i, h) * proj(1, j, h));
      for (double& e : s) sum += (e = std::exp(e - mx));
      heads[i * E + h] = 0;
      for (int j = 0; j < L; ++j) heads[i * E + h] += s[j] / sum * proj(2, j, h);
    }
  std::vector<double> want(L * E);
  for (int i = 0; i < L; ++i)
    for (int o = 0; o < E; ++o) {
      want[i * E + o] = 0;
      for (int e = 0; e < E; ++e) want[i * E + o] += heads[i * E + e] * Wo[o * E + e];
    }
  check_close(mha(Tensor::from_vector(x, {1, L, E})).to_vector<float>(), want, 1e-5);
}

TEST_CASE("nn: losses match their formulas", "[nn]") {
  std::vector<float> logits = randoms(3 * 4, 21, -2, 2);
  std::vector<int32_t> target = {2, -100, 0};
  Tensor lt = Tensor::from_vector(logits, {3, 4}), tt = Tensor::from_vector(target, {3});
  for (double smoothing : {0.0, 0.1}) {
    double total = 0;
    int counted = 0;
    for (int n = 0; n < 3; ++n) {
      if (target[n] == -100) continue;
      double mx = -INFINITY, sum = 0;
      for (int c = 0; c < 4; ++c) mx = std::max<double>(mx, logits[n * 4 + c]);
      for (int c = 0; c < 4; ++c) sum += std::exp(logits[n * 4 + c] - mx);
      auto logp = [&](int c) { return logits[n * 4 + c] - mx - std::log(sum); };
      double smooth = 0;
      for (int c = 0; c < 4; ++c) smooth -= logp(c) / 4;
      total += (1 - smoothing) * -logp(target[n]) + smoothing * smooth;
      ++counted;
    }
    CHECK(nn::cross_entropy(lt, tt, smoothing).item<float>() == Approx(total / counted).epsilon(1e-5));
  }
  CHECK(nn::nll_loss(lt, tt, -100, nn::Reduction::Sum).item<float>() == Approx(-(logits[2] + logits[8])).epsilon(1e-6));
  CHECK_THROWS_WITH(nn::cross_entropy(lt, Tensor::from_vector<int32_t>({0, 4, 1}, {3})), Catch::Contains("target 4 is out of range"));
  CHECK_THROWS_WITH(nn::cross_entropy(lt, Tensor::from_vector<int32_t>({0, 1}, {2})), Catch::Contains("(3, 4)"));

  std::vector<float> a = randoms(6, 22), b = randoms(6, 23);
  Tensor ta = Tensor::from_vector(a, {2, 3}), tb = Tensor::from_vector(b, {2, 3});
  double mse = 0, l1 = 0, bce = 0;
  for (int i = 0; i < 6; ++i) {
    mse += (a[i] - b[i]) * (a[i] - b[i]) / 6;
    l1 += std::abs(a[i] - b[i]) / 6;
    double y = (b[i] + 1) / 2, p = 1 / (1 + std::exp(-double(a[i])));
    bce -= (y * std::log(p) + (1 - y) * std::log(1 - p)) / 6;
  }
  CHECK(nn::mse_loss(ta, tb).item<float>() == Approx(mse).epsilon(1e-5));
  CHECK(nn::l1_loss(ta, tb).item<float>() == Approx(l1).epsilon(1e-5));
  CHECK(nn::binary_cross_entropy_with_logits(ta, (tb + 1.0f) * 0.5f).item<float>() == Approx(bce).epsilon(1e-5));
  // Large logits stay finite.
  Tensor big = Tensor::from_vector<float>({100, -100}, {2});
  CHECK(nn::binary_cross_entropy_with_logits(big, Tensor::from_vector<float>({0, 1}, {2})).item<float>() == Approx(100).epsilon(1e-5));
  CHECK_THROWS_WITH(nn::mse_loss(ta, Tensor::ones({3})), Catch::Contains("mse_loss"));
}

TEST_CASE("nn: load_state_dict names every problem", "[nn]") {
  nn::Linear fc(3, 2);
  auto state = fc.state_dict();
  state.erase("bias");
  state.emplace("extra", Tensor::ones({1}));
  state.at("weight") = Tensor::ones({2, 4});
  try {
    fc.load_state_dict(state);
    FAIL("expected an error");
  } catch (const Error& e) {
    std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("missing \"bias\"") && Catch::Contains("unexpected \"extra\"") && Catch::Contains("\"weight\" is (2, 4)"));
  }
  state.at("weight") = Tensor::full({2, 3}, 7.0);
  fc.load_state_dict(state, false);  // missing/unexpected allowed, the weight loads
  CHECK(fc.weight.to_vector<float>() == std::vector<float>(6, 7.0f));
}

TEST_CASE("checkpoint: 2N steps equal N steps, save, load into a fresh model, N more, bit for bit", "[nn]") {
  // A small model with every kind of state: conv, batchnorm (running statistics), linear, dropout
  // (the RNG), AdamW (moments and step count), a schedule, and a shuffling data iterator.
  HostTensor images{dtypes::float32, {64, 1, 6, 6}, {}}, labels{dtypes::int32, {64}, {}};
  std::vector<float> px = randoms(64 * 36, 41);
  images.data.resize(px.size() * 4);
  std::memcpy(images.data.data(), px.data(), images.data.size());
  std::vector<int32_t> ly(64);
  for (int i = 0; i < 64; ++i) ly[i] = (i * 7) % 3;
  labels.data.resize(64 * 4);
  std::memcpy(labels.data.data(), ly.data(), labels.data.size());

  struct Run {
    std::shared_ptr<nn::Sequential> model = std::make_shared<nn::Sequential>();
    std::unique_ptr<optim::AdamW> opt;
    std::unique_ptr<optim::WarmupCosineLR> sched;
    std::unique_ptr<BatchIterator> data;
    int64_t step = 0;
  };
  auto make = [&](uint64_t seed) {
    Tensor::manual_seed(seed);
    auto r = std::make_unique<Run>();
    r->model->add("conv", std::make_shared<nn::Conv2d>(1, 2, std::array<int64_t, 2>{3, 3}))
        .add("bn", std::make_shared<nn::BatchNorm2d>(2))
        .add("flat", std::make_shared<nn::Flatten>())
        .add("drop", std::make_shared<nn::Dropout>(0.2))
        .add("fc", std::make_shared<nn::Linear>(2 * 4 * 4, 3));
    r->opt = std::make_unique<optim::AdamW>(r->model->parameters(), 0.01);
    r->sched = std::make_unique<optim::WarmupCosineLR>(*r->opt, 2, 20);
    r->data = std::make_unique<BatchIterator>(std::vector<HostTensor>{images, labels}, 16, true, seed, true);
    return r;
  };
  auto train = [](Run& r, int steps) {
    std::vector<Tensor> batch;
    for (int done = 0; done < steps;) {
      if (!r.data->next(batch)) continue;
      Tensor loss = nn::cross_entropy(r.model->forward(batch[0]), batch[1]);
      loss.backward();
      r.opt->step(r.model->buffers());
      r.opt->zero_grad();
      r.sched->step();
      ++r.step;
      ++done;
    }
  };
  const int N = 5;  // 64 samples / 16 = 4 steps an epoch: resuming crosses an epoch boundary
  auto straight = make(9);
  train(*straight, 2 * N);

  auto first = make(9);
  train(*first, N);
  std::string path = (std::filesystem::temp_directory_path() / "kiln_test_checkpoint.safetensors").string();
  save_checkpoint(path, *first->model, *first->opt, {first->step, first->data->state(), Tensor::rng_state(), first->sched->count(), {}});
  Tensor::manual_seed(12345);  // disturb the RNG: the checkpoint must restore it
  auto resumed = make(77);     // different initial weights and data seed: all of it must come from the file
  TrainingState st = load_checkpoint(path, *resumed->model, *resumed->opt);
  resumed->step = st.step;
  resumed->data->set_state(st.data);
  resumed->sched->set_count(st.scheduler_count);
  train(*resumed, N);
  std::filesystem::remove(path);

  auto a = straight->model->state_dict(), b = resumed->model->state_dict();
  REQUIRE(a.size() == b.size());
  for (auto& [name, t] : a) {
    INFO(name);
    CHECK(t.to_bytes() == b.at(name).to_bytes());
  }
  auto oa = straight->opt->state_dict(), ob = resumed->opt->state_dict();
  for (auto& [name, t] : oa) CHECK(t.to_bytes() == ob.at(name).to_bytes());
  CHECK(straight->opt->lr == resumed->opt->lr);
}

TEST_CASE("nn: RNN, LSTM and GRU modules: PyTorch's parameters, a host reference, Jit training and errors", "[nn]") {
  // Values and gradients against libtorch's at::lstm / at::gru / at::rnn_* are in tests/torch (test_grad.cpp).
  nn::LSTM lstm(5, 8, 2, true, /*batch_first=*/true, 0.0, /*bidirectional=*/true);
  std::vector<std::string> names;
  for (const auto& [name, t] : lstm.named_parameters()) names.push_back(name);
  std::vector<std::string> want;
  for (std::string layer : {"_l0", "_l0_reverse", "_l1", "_l1_reverse"})
    for (std::string p : {"weight_ih", "weight_hh", "bias_ih", "bias_hh"}) want.push_back(p + layer);
  CHECK(names == want);
  CHECK(lstm.state_dict().at("weight_ih_l0").shape() == Shape{32, 5});
  CHECK(lstm.state_dict().at("weight_ih_l1").shape() == Shape{32, 16});  // both directions of layer 0 feed it
  CHECK(lstm.state_dict().at("weight_hh_l1_reverse").shape() == Shape{32, 8});
  for (float w : lstm.state_dict().at("weight_hh_l0").to_vector<float>()) CHECK(std::abs(w) <= 1 / std::sqrt(8.0));
  Tensor x = Tensor::from_vector(randoms(3 * 4 * 5, 21), {3, 4, 5});  // (N, L, H_in): batch_first
  nn::RNNResult r = lstm.forward(x, std::nullopt);
  CHECK(r.output.shape() == Shape{3, 4, 16});
  CHECK(r.h_n.shape() == Shape{4, 3, 8});
  REQUIRE(r.c_n);
  CHECK(r.c_n->shape() == Shape{4, 3, 8});
  CHECK(lstm(x).to_vector<float>() == r.output.to_vector<float>());
  // The last step of the forward direction of the last layer is its h_n.
  std::vector<float> out = r.output.to_vector<float>(), h_n = r.h_n.to_vector<float>();
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t j = 0; j < 8; ++j) CHECK(out[static_cast<size_t>((n * 4 + 3) * 16 + j)] == h_n[static_cast<size_t>((2 * 3 + n) * 8 + j)]);

  // A one-layer tanh RNN against a double-precision loop over its own parameters.
  nn::RNN rnn(3, 2);
  const int64_t L = 4, N = 2;
  std::vector<float> xv = randoms(L * N * 3, 22);
  std::map<std::string, Tensor> p = rnn.state_dict();
  std::vector<float> wi = p.at("weight_ih_l0").to_vector<float>(), wh = p.at("weight_hh_l0").to_vector<float>();
  std::vector<float> bi = p.at("bias_ih_l0").to_vector<float>(), bh = p.at("bias_hh_l0").to_vector<float>();
  std::vector<double> h(N * 2, 0.0), expected;
  for (int64_t t = 0; t < L; ++t) {
    std::vector<double> next(N * 2);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < 2; ++j) {
        double a = bi[j] + bh[j];
        for (int64_t i = 0; i < 3; ++i) a += wi[j * 3 + i] * xv[(t * N + n) * 3 + i];
        for (int64_t k = 0; k < 2; ++k) a += wh[j * 2 + k] * h[n * 2 + k];
        next[n * 2 + j] = std::tanh(a);
      }
    h = next;
    expected.insert(expected.end(), h.begin(), h.end());
  }
  std::vector<float> got = rnn(Tensor::from_vector(xv, {L, N, 3})).to_vector<float>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(expected[i]).margin(1e-6));

  // Dropout between layers only when training.
  nn::GRU gru(5, 6, 2, true, false, 0.5);
  Tensor seq = Tensor::from_vector(randoms(4 * 2 * 5, 23), {4, 2, 5});
  gru.eval();
  CHECK(gru(seq).to_vector<float>() == gru(seq).to_vector<float>());
  gru.train();
  CHECK(gru(seq).to_vector<float>() != gru(seq).to_vector<float>());

  // A GRU regression step captured by a Jit gives the eager steps' losses.
  auto losses = [&](bool captured) {
    Tensor::manual_seed(5);
    nn::GRU model(5, 6, 1, true, true);
    nn::Linear head(6, 1);
    std::vector<Tensor> params = model.parameters();
    for (const Tensor& t : head.parameters()) params.push_back(t);
    optim::Adam opt(params, 0.01);
    auto step = [&](const std::vector<Tensor>& in) {
      Tensor y = head(model(in[0]).shrink({{0, 2}, {3, 4}, {0, 6}}).reshape({2, 6}));
      Tensor loss = nn::mse_loss(y, in[1]);
      opt.zero_grad();
      loss.backward();
      opt.step();
      return std::vector<Tensor>{loss};
    };
    Jit jit(step);
    std::vector<float> out;
    for (int i = 0; i < 5; ++i) {
      std::vector<Tensor> in = {Tensor::from_vector(randoms(2 * 4 * 5, 30 + i), {2, 4, 5}), Tensor::from_vector(randoms(2, 40 + i), {2, 1})};
      out.push_back((captured ? jit(in) : step(in))[0].item<float>());
    }
    return out;
  };
  std::vector<float> eager = losses(false), replayed = losses(true);
  for (size_t i = 0; i < eager.size(); ++i) CHECK(replayed[i] == Approx(eager[i]).epsilon(1e-5));

  // Cells: the one-step forms agree with a one-step sequence of the same parameters.
  nn::LSTMCell cell(5, 8);
  auto [h1, c1] = cell.forward(x.shrink({{0, 3}, {0, 1}, {0, 5}}).reshape({3, 5}), {Tensor::zeros({3, 8}), Tensor::zeros({3, 8})});
  std::vector<Tensor> weights = {cell.weight_ih, cell.weight_hh, *cell.bias_ih, *cell.bias_hh};
  nn::RNNResult one = nn::rnn(nn::RNNMode::LSTM, x.shrink({{0, 3}, {0, 1}, {0, 5}}), std::nullopt, std::nullopt, weights, true, 1, 0.0,
                              false, false, true);
  std::vector<float> a = h1.to_vector<float>(), b = one.h_n.to_vector<float>();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).margin(1e-6));
  CHECK(c1.shape() == Shape{3, 8});

  // Errors name the layer, the shapes and the fix.
  CHECK_THROWS_WITH(lstm(Tensor::zeros({3, 4, 6})), Catch::Contains("LSTM: input has 6 features per step"));
  CHECK_THROWS_WITH(lstm(Tensor::zeros({3, 4, 5, 1})), Catch::Contains("LSTM: expected a 3-D input"));
  CHECK_THROWS_WITH(lstm.forward(x, Tensor::zeros({2, 3, 8})), Catch::Contains("h0 has shape (2, 3, 8), expected (4, 3, 8)"));
  CHECK_THROWS_WITH(gru.forward(seq, std::nullopt, Tensor::zeros({2, 2, 6})), Catch::Contains("only an LSTM has one"));
  CHECK_THROWS_WITH(nn::RNN(3, 2, 1, "sigmoid"), Catch::Contains("nonlinearity \"sigmoid\" is not \"tanh\" or \"relu\""));
  CHECK_THROWS_WITH(nn::LSTM(3, 0), Catch::Contains("hidden_size 0 must be positive"));
  CHECK_THROWS_WITH(nn::GRU(3, 2, 0), Catch::Contains("num_layers 0 must be positive"));
  CHECK_THROWS_WITH(cell.forward(Tensor::zeros({3, 4}), {Tensor::zeros({3, 8}), Tensor::zeros({3, 8})}),
                    Catch::Contains("LSTMCell: expected an input (N, 5)"));
}
