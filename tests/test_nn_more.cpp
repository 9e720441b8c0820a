// The Transformer stacks, padding, Unflatten and clip_grad_value: their structure (PyTorch's names,
// deep copies), small cases worked by hand, and their errors. Values against libtorch are in
// tests/torch/test_modules.cpp.
#include <cmath>
#include <limits>

#include "frontend/nn.h"
#include "frontend/optim.h"
#include "helpers.h"

using namespace kiln;

using kiln::test::randoms;

namespace {

std::vector<std::string> names_of(const nn::Module& m) {
  std::vector<std::string> names;
  for (const auto& [name, t] : m.named_parameters()) names.push_back(name);
  return names;
}

// A layer's parameter names under `prefix`, in registration order.
std::vector<std::string> prefixed(const std::string& prefix, const nn::Module& layer) {
  std::vector<std::string> out;
  for (const std::string& n : names_of(layer)) out.push_back(prefix + n);
  return out;
}

bool same_values(Tensor a, Tensor b) { return a.to_vector<float>() == b.to_vector<float>(); }
bool close_values(Tensor a, Tensor b) {
  std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!(std::abs(x[i] - y[i]) <= 1e-5f * (1 + std::abs(y[i])))) return false;
  return true;
}

const double kInf = std::numeric_limits<double>::infinity();

}  // namespace

TEST_CASE("nn: TransformerEncoder and TransformerDecoder hold deep copies of their layer, under PyTorch's names", "[nn]") {
  Tensor::manual_seed(3);
  nn::TransformerEncoderLayer layer(8, 2, 16, 0.2, "gelu");
  layer.eval();
  nn::TransformerEncoder encoder(layer, 3, std::make_shared<nn::LayerNorm>(Shape{8}));
  std::vector<std::string> want;
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> l = prefixed(cat("layers.", i, "."), layer);
    want.insert(want.end(), l.begin(), l.end());
  }
  want.insert(want.end(), {"norm.weight", "norm.bias"});
  CHECK(names_of(encoder) == want);
  CHECK(want.front() == "layers.0.self_attn.in_proj_weight");
  // Each copy starts with the layer's values, its options and mode, in tensors of its own.
  for (size_t i = 0; i < 3; ++i) {
    nn::TransformerEncoderLayer& copy = encoder.layer(i);
    CHECK(same_values(copy.linear1->weight, layer.linear1->weight));
    CHECK(same_values(copy.self_attn->in_proj_weight, layer.self_attn->in_proj_weight));
    CHECK(copy.activation == "gelu");
    CHECK(copy.dropout1->p == 0.2);
    CHECK(copy.self_attn->dropout == 0.2);
    CHECK(!copy.training());
  }
  {
    NoGradGuard no_grad;
    encoder.layer(0).linear1->weight.assign(Tensor::zeros({16, 8}));
  }
  CHECK(!same_values(encoder.layer(0).linear1->weight, layer.linear1->weight));
  CHECK(same_values(encoder.layer(1).linear1->weight, layer.linear1->weight));
  // Each copy's parameters get their own gradients: layer 0 and layer 1 see different inputs.
  encoder.train();
  CHECK(encoder.layer(2).training());
  encoder.eval();
  Tensor x = Tensor::from_vector(randoms(5 * 2 * 8, 21), {5, 2, 8});
  // (A weighted sum: a plain sum of a LayerNorm's output is constant.)
  (encoder.forward(x) * Tensor::from_vector(randoms(5 * 2 * 8, 22), {5, 2, 8})).sum().backward();
  REQUIRE(encoder.layer(1).linear2->weight.grad());
  REQUIRE(encoder.layer(2).linear2->weight.grad());
  CHECK(!same_values(*encoder.layer(1).linear2->weight.grad(), *encoder.layer(2).linear2->weight.grad()));
  CHECK(!layer.linear2->weight.grad());
  // The stack is its layers in turn, then the norm.
  Tensor by_hand = x;
  for (size_t i = 0; i < 3; ++i) by_hand = encoder.layer(i).forward(by_hand);
  CHECK(same_values(encoder.forward(x), encoder.norm->forward(by_hand)));

  nn::TransformerDecoderLayer dlayer(8, 2, 16);
  nn::TransformerDecoder decoder(dlayer, 2);  // no norm: no "norm.*" entries
  want = prefixed("layers.0.", dlayer);
  std::vector<std::string> second = prefixed("layers.1.", dlayer);
  want.insert(want.end(), second.begin(), second.end());
  CHECK(names_of(decoder) == want);
  CHECK(want[4] == "layers.0.multihead_attn.in_proj_weight");
  CHECK(same_values(decoder.layer(1).multihead_attn->in_proj_weight, dlayer.multihead_attn->in_proj_weight));

  CHECK_THROWS_WITH(nn::TransformerEncoder(layer, 0), Catch::Contains("TransformerEncoder: num_layers must be at least 1, got 0"));
  CHECK_THROWS_WITH(nn::TransformerDecoder(dlayer, -2), Catch::Contains("TransformerDecoder: num_layers must be at least 1, got -2"));
  CHECK_THROWS_WITH(encoder.layer(3), Catch::Contains("layer 3 is out of range for 3 layers"));
  CHECK_THROWS_WITH(encoder.forward(Tensor::zeros({5, 8})), Catch::Contains("TransformerEncoder: src (5, 8) must be (L, N, E) with E = d_model = 8"));
  CHECK_THROWS_WITH(encoder.forward(Tensor::zeros({5, 2, 6})), Catch::Contains("TransformerEncoder: src (5, 2, 6)"));
  CHECK_THROWS_WITH(decoder.forward(x), Catch::Contains("forward needs the target and the encoder's memory"));
  CHECK_THROWS_WITH(decoder.forward(x, Tensor::zeros({4, 2, 7})), Catch::Contains("TransformerDecoder: memory (4, 2, 7)"));
}

TEST_CASE("nn: Transformer's names, xavier initialization, causal mask and errors", "[nn]") {
  Tensor::manual_seed(4);
  nn::Transformer model(8, 2, 2, 1, 16, 0.1, "relu", 1e-5, /*batch_first=*/true, /*norm_first=*/true);
  std::vector<std::string> names = names_of(model);
  CHECK(names.size() == 2 * 12 + 2 + 18 + 2);
  CHECK(names.front() == "encoder.layers.0.self_attn.in_proj_weight");
  CHECK(std::find(names.begin(), names.end(), "encoder.layers.1.norm2.bias") != names.end());
  CHECK(std::find(names.begin(), names.end(), "encoder.norm.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "decoder.layers.0.multihead_attn.out_proj.weight") != names.end());
  CHECK(names.back() == "decoder.norm.bias");
  CHECK(model.encoder->layer(1).norm_first);
  CHECK(model.decoder->layer(0).self_attn->batch_first);
  // Every matrix drawn anew from xavier_uniform: within sqrt(6 / (fan_in + fan_out)), and the copies'
  // matrices differ; vectors keep the layers' values (zero attention biases, unit norms).
  for (const auto& [name, p] : model.named_parameters()) {
    if (p.ndim() < 2) continue;
    INFO(name);
    double bound = std::sqrt(6.0 / static_cast<double>(p.shape()[0] + p.shape()[1]));
    std::vector<float> v = Tensor(p).to_vector<float>();
    float largest = 0;
    for (float e : v) largest = std::max(largest, std::abs(e));
    CHECK(largest <= bound);
    CHECK(largest > 0.8 * bound);
  }
  CHECK(!same_values(model.encoder->layer(0).linear1->weight, model.encoder->layer(1).linear1->weight));
  CHECK(model.encoder->layer(1).self_attn->in_proj_bias->to_vector<float>() == std::vector<float>(24, 0.0f));
  CHECK(same_values(model.encoder->layer(0).linear1->bias.value(), model.encoder->layer(1).linear1->bias.value()));

  std::vector<float> mask = nn::Transformer::generate_square_subsequent_mask(3).to_vector<float>();
  float inf = std::numeric_limits<float>::infinity();
  CHECK(mask == std::vector<float>{0, -inf, -inf, 0, 0, -inf, 0, 0, 0});
  CHECK(nn::Transformer::generate_square_subsequent_mask(0).shape() == Shape{0, 0});

  model.eval();
  Tensor src = Tensor::from_vector(randoms(2 * 6 * 8, 5), {2, 6, 8}), tgt = Tensor::from_vector(randoms(2 * 4 * 8, 6), {2, 4, 8});
  CHECK(model.forward(src, tgt, std::nullopt, nn::Transformer::generate_square_subsequent_mask(4)).shape() == Shape{2, 4, 8});
  CHECK_THROWS_WITH(nn::Transformer(10, 3), Catch::Contains("Transformer: d_model 10 must be divisible by nhead 3"));
  CHECK_THROWS_WITH(nn::Transformer(8, 2, 0), Catch::Contains("Transformer (num_encoder_layers): num_layers must be at least 1, got 0"));
  CHECK_THROWS_WITH(model.forward(src), Catch::Contains("Transformer: forward needs the source and the target"));
  CHECK_THROWS_WITH(model.forward(src, tgt.slice(0, 0, 1)), Catch::Contains("Transformer: src (2, 6, 8) and tgt (1, 4, 8) have different batch sizes"));
  CHECK_THROWS_WITH(model.forward(src, Tensor::zeros({2, 4, 6})), Catch::Contains("Transformer: tgt (2, 4, 6) must be (N, L, E) with E = d_model = 8"));
  CHECK_THROWS_WITH(model.forward(src.reshape({12, 8}), tgt), Catch::Contains("Transformer: src (12, 8)"));
  CHECK_THROWS_WITH(nn::Transformer::generate_square_subsequent_mask(-1), Catch::Contains("size -1 is negative"));
}

TEST_CASE("nn: a key padding mask blocks the keys marked true, as a float mask of -inf there does", "[nn]") {
  Tensor::manual_seed(5);
  nn::TransformerEncoder encoder(nn::TransformerEncoderLayer(8, 2, 16), 2);
  encoder.eval();
  Tensor x = Tensor::from_vector(randoms(5 * 2 * 8, 7), {5, 2, 8});
  Tensor padding = Tensor::from_vector<uint8_t>({0, 0, 0, 1, 1, 0, 0, 0, 0, 1}, {2, 5}).cast(dtypes::bool_);
  Tensor additive = padding.where(Tensor::full({}, -kInf), Tensor::zeros({}));
  Tensor with_bool = encoder.forward(x, std::nullopt, padding), with_float = encoder.forward(x, std::nullopt, additive);
  CHECK(same_values(with_bool, with_float));
  // A padded key changes nothing: the unpadded positions' outputs are the same whatever it holds.
  Tensor changed = Tensor::cat({x.slice(0, 0, 3), x.slice(0, 3, 5) * 3.0}, 0);
  std::vector<float> a = with_bool.slice(0, 0, 3).slice(1, 0, 1).to_vector<float>(),
                     b = encoder.forward(changed, std::nullopt, padding).slice(0, 0, 3).slice(1, 0, 1).to_vector<float>();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).margin(1e-5));
  CHECK(!same_values(with_bool, encoder.forward(x)));
  // With an attention mask too: a bool one (true blocks, as torch.nn's) and its float form agree, with
  // and without key padding.
  Tensor causal = nn::Transformer::generate_square_subsequent_mask(5), blocked = causal.ne(Tensor::zeros({}));
  // (Within float rounding: the bool mask's kernels fuse differently and round in another order.)
  CHECK(close_values(encoder.forward(x, blocked, padding), encoder.forward(x, causal, padding)));
  CHECK(close_values(encoder.forward(x, blocked), encoder.forward(x, causal)));
  CHECK(same_values(encoder.forward(x, causal, padding), encoder.forward(x, std::nullopt, padding, true)));
  CHECK_THROWS_WITH(encoder.forward(x, std::nullopt, padding.slice(1, 0, 4)),
                    Catch::Contains("MultiheadAttention: key_padding_mask (2, 4) must be (N, S) = (2, 5)"));
  CHECK_THROWS_WITH(encoder.forward(x, std::nullopt, padding.cast(dtypes::int32)), Catch::Contains("key_padding_mask is int32; give a bool mask"));
}

TEST_CASE("nn: pad's modes by hand, negative amounts crop", "[nn]") {
  Tensor x = Tensor::arange(4, dtypes::float32).reshape({1, 1, 4});
  auto padded = [&](std::vector<int64_t> pads, const std::string& mode, double value = 0) { return nn::pad(x, pads, mode, value).to_vector<float>(); };
  CHECK(padded({2, 1}, "reflect") == std::vector<float>{2, 1, 0, 1, 2, 3, 2});
  CHECK(padded({2, 1}, "replicate") == std::vector<float>{0, 0, 0, 1, 2, 3, 3});
  CHECK(padded({2, 1}, "circular") == std::vector<float>{2, 3, 0, 1, 2, 3, 0});
  CHECK(padded({2, 1}, "constant", -1) == std::vector<float>{-1, -1, 0, 1, 2, 3, -1});
  // Reflect and replicate pad the whole axis, then crop; circular crops, then wraps what is left (as PyTorch).
  CHECK(padded({-1, 2}, "reflect") == std::vector<float>{1, 2, 3, 2, 1});
  CHECK(padded({-2, 3}, "reflect") == std::vector<float>{2, 3, 2, 1, 0});
  CHECK(padded({1, -2}, "replicate") == std::vector<float>{0, 0, 1});
  CHECK(padded({2, -1}, "circular") == std::vector<float>{1, 2, 0, 1, 2});
  CHECK(padded({-2, -2}, "constant").empty());
  // 2-D: rows then columns; the corners mirror both ways.
  Tensor img = Tensor::arange(6, dtypes::float32).reshape({1, 2, 3});
  CHECK(nn::ReflectionPad2d({1, 0, 1, 0})(img).to_vector<float>() == std::vector<float>{4, 3, 4, 5, 1, 0, 1, 2, 4, 3, 4, 5});
  CHECK(nn::ReplicationPad2d({0, 1, 0, 1})(img).to_vector<float>() == std::vector<float>{0, 1, 2, 2, 3, 4, 5, 5, 3, 4, 5, 5});
  CHECK(nn::ZeroPad2d({0, 0, 1, 0})(img).to_vector<float>() == std::vector<float>{0, 0, 0, 0, 1, 2, 3, 4, 5});
  CHECK(nn::ConstantPad1d(1, 7)(img).shape() == Shape{1, 2, 5});
  CHECK(nn::ConstantPad2d(1, 7)(x.reshape({2, 2})).shape() == Shape{4, 4});  // constant mode: any input with enough axes
  // The gradient adds every copy of an element back to it.
  Tensor leaf = Tensor::arange(4, dtypes::float32).requires_grad_();
  nn::pad(leaf.reshape({1, 4}), {2, 1}, "reflect").sum().backward();
  CHECK(leaf.grad()->to_vector<float>() == std::vector<float>{1, 2, 3, 1});  // 2 1 0 1 2 3 2
}

TEST_CASE("nn: pad's errors name the module, the amounts and the shape", "[nn]") {
  Tensor x = Tensor::zeros({2, 3, 4});
  CHECK_THROWS_WITH(nn::ReflectionPad1d(4)(x), Catch::Contains("ReflectionPad1d: reflect padding (4, 4) of axis 2 (size 4) of input (2, 3, 4)") &&
                                                   Catch::Contains("must be less than the size"));
  CHECK_THROWS_WITH(nn::ReflectionPad2d({0, 0, 3, 0})(x), Catch::Contains("padding (3, 0) of axis 1 (size 3)"));
  CHECK_THROWS_WITH(nn::ReplicationPad1d({-2, -2})(x), Catch::Contains("ReplicationPad1d: padding (-2, -2) of axis 2 (size 4) of input (2, 3, 4) leaves 0"));
  CHECK_THROWS_WITH(nn::ConstantPad1d({-3, -2}, 0)(x), Catch::Contains("ConstantPad1d: padding (-3, -2) of axis 2 (size 4)") &&
                                                          Catch::Contains("crops more than the axis holds"));
  CHECK_THROWS_WITH(nn::pad(x, {5, 0}, "circular"), Catch::Contains("pad: circular padding (5, 0) of axis 2 (size 4)") &&
                                                      Catch::Contains("wraps around more than once"));
  CHECK_THROWS_WITH(nn::pad(x, {-3, 2}, "circular"), Catch::Contains("at most the size 1 left after the crop"));
  CHECK_THROWS_WITH(nn::ReflectionPad2d(1)(Tensor::zeros({3, 3})), Catch::Contains("ReflectionPad2d: mode \"reflect\"") &&
                                                                     Catch::Contains("need a 3-D or 4-D input (C, H, W) or (N, C, H, W), got shape (3, 3)"));
  CHECK_THROWS_WITH(nn::ReplicationPad1d(1)(Tensor::zeros({1, 2, 3, 4})), Catch::Contains("need a 2-D or 3-D input (C, W) or (N, C, W)"));
  CHECK_THROWS_WITH(nn::pad(x, {1, 1, 1, 1, 1, 1, 1, 1}, "replicate"), Catch::Contains("pad: 4 pairs of padding amounts for input (2, 3, 4) of 3 axes"));
  CHECK_THROWS_WITH(nn::pad(x, {1, 1, 1}), Catch::Contains("pad: 3 padding amounts; give them in (before, after) pairs"));
  CHECK_THROWS_WITH(nn::pad(x, {1, 1}, "reflect", 2.0), Catch::Contains("mode \"reflect\" takes no value (got 2)"));
  CHECK_THROWS_WITH(nn::pad(x, {1, 1}, "edge"), Catch::Contains("padding mode \"edge\" is not \"constant\", \"reflect\", \"replicate\" or \"circular\""));
  CHECK_THROWS_WITH(nn::ZeroPad2d(1)(Tensor::zeros({4})), Catch::Contains("ZeroPad2d: 2 pairs of padding amounts for input (4,) of 1 axes"));
}

TEST_CASE("nn: Unflatten splits one axis, Flatten merges a range", "[nn]") {
  Tensor x = Tensor::from_vector(randoms(2 * 12 * 3, 9), {2, 12, 3});
  CHECK(nn::Unflatten(1, {3, -1})(x).shape() == Shape{2, 3, 4, 3});
  CHECK(nn::Unflatten(-1, {1, 3, 1})(x).shape() == Shape{2, 12, 1, 3, 1});
  CHECK(same_values(nn::Unflatten(1, {2, 2, 3})(x), x.reshape({2, 2, 2, 3, 3})));
  CHECK(nn::Flatten()(x).shape() == Shape{2, 36});
  CHECK(nn::Flatten(0, 1)(x).shape() == Shape{24, 3});
  CHECK(same_values(nn::Flatten(1, 2)(nn::Unflatten(1, {4, 3})(x)), x.reshape({2, 12, 3}).flatten(1, 1)));
  CHECK_THROWS_WITH(nn::Unflatten(1, {5, -1})(x), Catch::Contains("Unflatten: unflattened_size (5, -1) does not multiply to the size 12 of axis 1 of input (2, 12, 3)"));
  CHECK_THROWS_WITH(nn::Unflatten(1, {5, 2})(x), Catch::Contains("does not multiply to the size 12"));
  CHECK_THROWS_WITH(nn::Unflatten(3, {1, 3})(x), Catch::Contains("Unflatten: dim 3 is out of range for input (2, 12, 3)"));
  CHECK_THROWS_WITH(nn::Unflatten(1, {-1, -1}), Catch::Contains("at most one -1"));
  CHECK_THROWS_WITH(nn::Unflatten(1, {}), Catch::Contains("Unflatten: unflattened_size is empty"));
}

TEST_CASE("optim: clip_grad_value clamps each gradient and skips parameters without one", "[nn][optim]") {
  Tensor a = Tensor::from_vector<float>({3, -0.5, 2}, {3}).requires_grad_(), b = Tensor::ones({2}).requires_grad_();
  (a * a * 0.5f).sum().backward();  // grad a = (3, -0.5, 2); b has none
  optim::clip_grad_value({a, b}, 1.0);
  CHECK(a.grad()->to_vector<float>() == std::vector<float>{1, -0.5, 1});
  CHECK(!b.grad());
  float inf = std::numeric_limits<float>::infinity();
  a.set_grad(Tensor::from_vector<float>({-inf, inf, std::nanf("")}, {3}));
  optim::clip_grad_value({a}, 0.25);
  std::vector<float> g = a.grad()->to_vector<float>();
  CHECK(g[0] == -0.25f);
  CHECK(g[1] == 0.25f);
  CHECK(std::isnan(g[2]));
  CHECK_THROWS_WITH(optim::clip_grad_value({a}, -1), Catch::Contains("clip_grad_value: clip_value must be >= 0"));
  CHECK_THROWS_WITH(optim::clip_grad_value({a}, std::nan("")), Catch::Contains("clip_grad_value: clip_value must be >= 0"));
}
