// kiln's modules against libtorch's torch::nn modules fed the same parameters by their PyTorch names:
// TransformerDecoderLayer (post-norm, as libtorch's C++ module; pre-norm against the same layer's
// parts composed in libtorch), values and the gradients of the target and the memory; the
// TransformerEncoder, TransformerDecoder and Transformer stacks, values and the gradients of the inputs
// and every parameter; the padding modes and modules, Unflatten and clip_grad_value.
#include <ATen/ATen.h>  // before padding.h, whose ATen/PadNd.h uses c10 without including it
#include <torch/nn/functional/padding.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/modules/padding.h>
#include <torch/nn/modules/transformer.h>
#include <torch/nn/modules/transformercoder.h>
#include <torch/nn/modules/transformerlayer.h>
#include <torch/nn/utils/clip_grad.h>

#include "check_op.h"
#include "frontend/nn.h"
#include "frontend/optim.h"

namespace kiln::oracle {
namespace {

// Random values for every entry of k's state dict, copied into t's parameter of the same name: each
// key must name one of t's parameters, of the same shape, and both must have as many. Returns t's.
std::map<std::string, at::Tensor> share_parameters(Source& src, nn::Module& k, torch::nn::Module& t) {
  std::map<std::string, at::Tensor> tparams;
  for (const auto& item : t.named_parameters()) tparams[item.key()] = item.value();
  std::map<std::string, Tensor> state;
  {
    at::NoGradGuard no_grad;
    for (const auto& [key, value] : k.state_dict()) {
      INFO(key);
      REQUIRE(tparams.count(key) == 1);
      REQUIRE(tparams.at(key).sizes().vec() == sizes_of(value.shape()));
      at::Tensor v = src.values(sizes_of(value.shape()), at::kFloat, Values::Finite) * 0.3;
      tparams.at(key).copy_(v);
      state[key] = to_kiln(v);
    }
  }
  REQUIRE(tparams.size() == state.size());
  k.load_state_dict(state);
  return tparams;
}

struct Leaf {
  std::string name;
  Tensor k;
  at::Tensor t;
};

// out against expected (torch's, from the same inputs), then the gradients of sum(out * w) for a random
// w: kiln's with respect to `inputs` and every parameter of k, torch's with respect to the same inputs
// and t's parameters of the same names. Tolerance: `n` float32 units, normwise.
void check_module(Batch& batch, Source& src, const std::string& what, const Tensor& out, const at::Tensor& expected, const std::vector<Leaf>& inputs,
                  const nn::Module& k, const std::map<std::string, at::Tensor>& tparams, double n) {
  batch.check(what + " (values)", out, expected.detach(), normwise(expected.detach(), n, at::kFloat));
  at::Tensor w = src.values(expected.sizes().vec(), at::kFloat, Values::Finite);
  std::vector<Leaf> leaves = inputs;
  for (const auto& [name, p] : k.named_parameters()) leaves.push_back({name, p, tparams.at(name)});
  std::vector<Tensor> kwanted;
  std::vector<at::Tensor> twanted;
  for (const Leaf& l : leaves) kwanted.push_back(l.k), twanted.push_back(l.t);
  std::vector<at::Tensor> grads = torch::autograd::grad({(expected * w).sum()}, twanted, {}, false, false, true);
  std::vector<Tensor> kgrads = gradients((out * to_kiln(w)).sum(), kwanted);
  for (size_t i = 0; i < leaves.size(); ++i) {
    at::Tensor e = grads[i].defined() ? grads[i] : at::zeros_like(twanted[i]);
    batch.check(cat(what, " d/d ", leaves[i].name), kgrads[i], e, normwise(e, n, at::kFloat));
  }
}

// A float input for both libraries: torch's a leaf that requires grad, kiln's too.
Leaf input(Source& src, const std::string& name, std::vector<int64_t> shape) {
  at::Tensor t = src.values(std::move(shape), at::kFloat, Values::Finite);
  return {name, to_kiln(t).requires_grad_(), t.requires_grad_(true)};
}

std::optional<Tensor> kiln_mask(const at::Tensor& t) { return t.defined() ? std::optional<Tensor>(to_kiln(t)) : std::nullopt; }

// Key padding masks for lengths S of N sequences: true at the padding, which is at the end, so that
// every query keeps key 0 under a causal mask too.
at::Tensor padding_mask(std::vector<int64_t> lengths, int64_t S) {
  at::Tensor m = at::zeros({static_cast<int64_t>(lengths.size()), S}, at::kBool);
  for (size_t i = 0; i < lengths.size(); ++i) m[static_cast<int64_t>(i)].slice(0, lengths[i]).fill_(true);
  return m;
}

// torch.nn's bool attention masks block where true. libtorch's C++ MultiheadAttention adds its attn_mask
// (2-D, float only), so the reference is the equal float mask (-inf where blocked); the 3-D per-head form
// (N * H, L, S), row n * H + h, against each batch element alone with its own 2-D mask.
TEST_CASE("torch: MultiheadAttention's bool masks block where true and 3-D masks go per batch and head, as torch.nn's", "[torch][nn]") {
  Source src(167);
  Batch batch;
  const int64_t L = 4, S = 5, N = 3, E = 8, H = 2;
  Tensor::manual_seed(11);
  nn::MultiheadAttention mha(E, H);
  torch::nn::MultiheadAttention ref(torch::nn::MultiheadAttentionOptions(E, H));
  std::map<std::string, at::Tensor> tparams = share_parameters(src, mha, *ref);
  // Blocked where (i + j + shift) % 3 == 1, never key 0: every query keeps a key.
  auto blocked = [&](int64_t shift) {
    at::Tensor m = at::zeros({L, S}, at::kBool);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 1; j < S; ++j) m[i][j] = (i + j + shift) % 3 == 1;
    return m;
  };
  auto additive = [](const at::Tensor& b) { return at::zeros(b.sizes(), at::kFloat).masked_fill(b, -INFINITY); };
  auto attend = [&](const at::Tensor& q, const at::Tensor& kv, const at::Tensor& mask, const at::Tensor& padding) {
    return std::get<0>(ref->forward(q, kv, kv, padding, false, mask));
  };
  at::Tensor padding = padding_mask({S, S - 2, S - 1}, S);
  for (bool padded : {false, true}) {
    Leaf q = input(src, "query", {L, N, E}), kv = input(src, "key", {S, N, E});
    at::Tensor p = padded ? padding : at::Tensor();
    at::Tensor expected = attend(q.t, kv.t, additive(blocked(0)), p);
    Tensor out = mha.attend(q.k, kv.k, kv.k, to_kiln(blocked(0)), false, kiln_mask(p));
    check_module(batch, src, padded ? "MultiheadAttention bool mask, key padding" : "MultiheadAttention bool mask", out, expected, {q, kv}, mha,
                 tparams, 32);
  }
  Leaf q = input(src, "query", {L, N, E}), kv = input(src, "key", {S, N, E});
  std::vector<at::Tensor> per_batch, rows;
  for (int64_t n = 0; n < N; ++n) {
    per_batch.push_back(attend(q.t.slice(1, n, n + 1), kv.t.slice(1, n, n + 1), additive(blocked(n)), at::Tensor()));
    for (int64_t h = 0; h < H; ++h) rows.push_back(blocked(n));
  }
  at::Tensor expected = at::cat(per_batch, 1), mask3 = at::stack(rows);  // (N * H, L, S)
  check_module(batch, src, "MultiheadAttention 3-D bool mask", mha.attend(q.k, kv.k, kv.k, to_kiln(mask3)), expected, {q, kv}, mha, tparams, 32);
  batch.check("MultiheadAttention 3-D float mask", mha.attend(q.k, kv.k, kv.k, to_kiln(additive(mask3))), expected.detach(),
              normwise(expected.detach(), 32, at::kFloat));
  batch.run();
  CHECK_THROWS_WITH(mha.attend(q.k, kv.k, kv.k, Tensor::zeros({N, L, S}, dtypes::bool_)),
                    Catch::Contains("MultiheadAttention: a 3-D mask (3, 4, 5) must be (N * num_heads, L, S) = (6, 4, 5)"));
}

TEST_CASE("torch: TransformerDecoderLayer equals torch::nn::TransformerDecoderLayer, with masks, pre-norm, batch first", "[torch][nn]") {
  // Sums of up to 32 terms through three LayerNorms and two softmaxes: 128 float32 units, values and
  // gradients (measured within a few units).
  Source src(151);
  Batch batch;
  const int64_t T = 5, S = 6, N = 2, E = 16, H = 4, F = 32;
  for (std::string act : {"relu", "gelu"})
    for (bool norm_first : {false, true}) {
      Tensor::manual_seed(11);
      nn::TransformerDecoderLayer layer(E, H, F, 0.1, act, 1e-5, /*batch_first=*/false, norm_first);
      layer.eval();
      auto options = torch::nn::TransformerDecoderLayerOptions(E, H).dim_feedforward(F).dropout(0.0);
      if (act == "gelu") options.activation(torch::kGELU);
      torch::nn::TransformerDecoderLayer ref(options);
      ref->eval();
      std::map<std::string, at::Tensor> tparams;
      for (const auto& item : ref->named_parameters()) tparams[item.key()] = item.value();
      std::map<std::string, Tensor> state;
      {
        at::NoGradGuard no_grad;
        for (const auto& [key, value] : layer.state_dict()) {
          INFO(key);
          REQUIRE(tparams.count(key) == 1);
          at::Tensor v = src.values(sizes_of(value.shape()), at::kFloat, Values::Finite) * 0.3;
          tparams.at(key).copy_(v);
          state[key] = to_kiln(v);
        }
      }
      REQUIRE(tparams.size() == state.size());
      layer.load_state_dict(state);
      at::Tensor tgt = src.values({T, N, E}, at::kFloat, Values::Finite).requires_grad_(true);
      at::Tensor memory = src.values({S, N, E}, at::kFloat, Values::Finite).requires_grad_(true);
      at::Tensor causal = at::triu(at::full({T, T}, -std::numeric_limits<float>::infinity()), 1);
      at::Tensor memory_mask = src.values({T, S}, at::kFloat, Values::Finite);
      for (bool masked : {false, true}) {
        std::string what = cat("TransformerDecoderLayer ", act, norm_first ? " norm_first" : "", masked ? " masked" : "");
        at::Tensor tm = masked ? causal : at::Tensor(), mm = masked ? memory_mask : at::Tensor();
        at::Tensor expected;
        if (!norm_first) {
          expected = ref->forward(tgt, memory, tm, mm);
        } else {  // the pre-norm arrangement from the reference layer's own parts
          auto attend = [](torch::nn::MultiheadAttention& a, const at::Tensor& q, const at::Tensor& kv, const at::Tensor& mask) {
            return std::get<0>(a->forward(q, kv, kv, {}, true, mask));
          };
          at::Tensor x = tgt + attend(ref->self_attn, ref->norm1(tgt), ref->norm1(tgt), tm);
          x = x + attend(ref->multihead_attn, ref->norm2(x), memory, mm);
          at::Tensor h = ref->linear1(ref->norm3(x));
          expected = x + ref->linear2(act == "gelu" ? at::gelu(h) : at::relu(h));
        }
        at::Tensor w = src.values(expected.sizes().vec(), at::kFloat, Values::Finite);
        std::vector<at::Tensor> grads = torch::autograd::grad({(expected * w).sum()}, {tgt, memory});
        Tensor ktgt = to_kiln(tgt.detach()).requires_grad_(), kmemory = to_kiln(memory.detach()).requires_grad_();
        std::optional<Tensor> ktm, kmm;
        if (masked) ktm = to_kiln(causal), kmm = to_kiln(memory_mask);
        Tensor out = layer.forward(ktgt, kmemory, ktm, kmm);
        std::vector<Tensor> kgrads = gradients((out * to_kiln(w)).sum(), {ktgt, kmemory});
        batch.check(what + " (values)", out, expected.detach(), normwise(expected.detach(), 128, at::kFloat));
        batch.check(what + " d/d tgt", kgrads[0], grads[0], normwise(grads[0], 128, at::kFloat));
        batch.check(what + " d/d memory", kgrads[1], grads[1], normwise(grads[1], 128, at::kFloat));
        if (masked && !norm_first) {  // the causal flag is the same mask
          batch.check(what + " tgt_is_causal", layer.forward(ktgt, kmemory, std::nullopt, kmm, std::nullopt, std::nullopt, true), expected.detach(),
                      normwise(expected.detach(), 128, at::kFloat));
          // batch_first: the same layer on (N, L, E) gives the transposed output.
          nn::TransformerDecoderLayer bf(E, H, F, 0.1, act, 1e-5, /*batch_first=*/true, norm_first);
          bf.eval();
          bf.load_state_dict(state);
          batch.check(what + " batch_first", bf.forward(ktgt.transpose(0, 1), kmemory.transpose(0, 1), ktm, kmm).transpose(0, 1),
                      expected.detach(), normwise(expected.detach(), 128, at::kFloat));
        }
      }
    }
  batch.run();
  nn::TransformerDecoderLayer layer(E, H, F);
  CHECK_THROWS_WITH(layer.forward(Tensor::ones({T, N, E})), Catch::Contains("forward needs the target and the encoder's memory"));
  CHECK_THROWS_WITH(nn::TransformerDecoderLayer(E, H, F, 0.1, "tanh"), Catch::Contains("activation \"tanh\" is not \"relu\" or \"gelu\""));
}


// Tolerance of the stacks: two layers of sums of up to 32 terms through LayerNorms and softmaxes, and
// parameter gradients summed over every position: 128 float32 units, normwise (measured: within 64,
// not within 32).
constexpr double kStackTol = 128;

TEST_CASE("torch: TransformerEncoder equals torch::nn::TransformerEncoder, 2 layers and a final norm, causal and key padding masks", "[torch][nn]") {
  Source src(171);
  Batch batch;
  const int64_t S = 6, N = 3, E = 16, H = 4, F = 32;
  Tensor::manual_seed(12);
  nn::TransformerEncoderLayer layer(E, H, F, 0.1, "relu");
  nn::TransformerEncoder encoder(layer, 2, std::make_shared<nn::LayerNorm>(Shape{E}));
  encoder.eval();
  torch::nn::TransformerEncoder ref(
      torch::nn::TransformerEncoderOptions(torch::nn::TransformerEncoderLayerOptions(E, H).dim_feedforward(F).dropout(0.0), 2)
          .norm(torch::nn::AnyModule(torch::nn::LayerNorm(torch::nn::LayerNormOptions({E})))));
  ref->eval();
  std::map<std::string, at::Tensor> tparams = share_parameters(src, encoder, *ref);
  at::Tensor causal = torch::nn::TransformerImpl::generate_square_subsequent_mask(S), padding = padding_mask({S - 2, S, S - 1}, S);
  batch.check("generate_square_subsequent_mask", nn::Transformer::generate_square_subsequent_mask(S), causal);
  // torch.nn's bool form of the causal mask: true above the diagonal, where a query may not look.
  at::Tensor causal_bool = at::ones({S, S}, at::kBool).triu(1);
  struct Case {
    const char* what;
    bool mask, is_causal, padding, bool_mask = false;
  };
  for (Case c : {Case{"no masks", false, false, false}, Case{"causal mask, key padding", true, false, true},
                 Case{"is_causal, key padding", false, true, true}, Case{"key padding", false, false, true},
                 Case{"bool causal mask, key padding", true, false, true, true}}) {
    Leaf x = input(src, "src", {S, N, E});
    at::Tensor expected = ref->forward(x.t, c.mask || c.is_causal ? causal : at::Tensor(), c.padding ? padding : at::Tensor());
    std::optional<Tensor> mask = !c.mask ? std::nullopt : kiln_mask(c.bool_mask ? causal_bool : causal);
    Tensor out = encoder.forward(x.k, mask, c.padding ? kiln_mask(padding) : std::nullopt, c.is_causal);
    check_module(batch, src, cat("TransformerEncoder ", c.what), out, expected, {x}, encoder, tparams, kStackTol);
    if (c.mask) {  // batch_first: the same stack on (N, S, E) gives the transposed output
      nn::TransformerEncoder bf(nn::TransformerEncoderLayer(E, H, F, 0.1, "relu", 1e-5, /*batch_first=*/true), 2,
                                std::make_shared<nn::LayerNorm>(Shape{E}));
      bf.eval();
      bf.load_state_dict(encoder.state_dict());
      batch.check("TransformerEncoder batch_first", bf.forward(x.k.transpose(0, 1), to_kiln(causal), to_kiln(padding)).transpose(0, 1),
                  expected.detach(), normwise(expected.detach(), kStackTol, at::kFloat));
    }
  }
  batch.run();
}

TEST_CASE("torch: TransformerDecoder equals torch::nn::TransformerDecoder, 2 layers and a final norm, every mask", "[torch][nn]") {
  Source src(173);
  Batch batch;
  const int64_t T = 5, S = 6, N = 3, E = 16, H = 4, F = 32;
  Tensor::manual_seed(13);
  nn::TransformerDecoder decoder(nn::TransformerDecoderLayer(E, H, F, 0.1, "gelu"), 2, std::make_shared<nn::LayerNorm>(Shape{E}));
  decoder.eval();
  torch::nn::TransformerDecoder ref(
      torch::nn::TransformerDecoderOptions(
          torch::nn::TransformerDecoderLayerOptions(E, H).dim_feedforward(F).dropout(0.0).activation(torch::kGELU), 2)
          .norm(torch::nn::AnyModule(torch::nn::LayerNorm(torch::nn::LayerNormOptions({E})))));
  ref->eval();
  std::map<std::string, at::Tensor> tparams = share_parameters(src, decoder, *ref);
  at::Tensor causal = torch::nn::TransformerImpl::generate_square_subsequent_mask(T), memory_mask = src.values({T, S}, at::kFloat, Values::Finite);
  at::Tensor tgt_padding = padding_mask({T, T - 2, T - 1}, T), memory_padding = padding_mask({S - 1, S, S - 3}, S);
  for (bool masked : {false, true}) {
    std::string what = masked ? "TransformerDecoder masked" : "TransformerDecoder";
    Leaf tgt = input(src, "tgt", {T, N, E}), memory = input(src, "memory", {S, N, E});
    at::Tensor tm = masked ? causal : at::Tensor(), mm = masked ? memory_mask : at::Tensor();
    at::Tensor tp = masked ? tgt_padding : at::Tensor(), mp = masked ? memory_padding : at::Tensor();
    at::Tensor expected = ref->forward(tgt.t, memory.t, tm, mm, tp, mp);
    Tensor out = decoder.forward(tgt.k, memory.k, kiln_mask(tm), kiln_mask(mm), kiln_mask(tp), kiln_mask(mp));
    check_module(batch, src, what, out, expected, {tgt, memory}, decoder, tparams, kStackTol);
    if (!masked) continue;
    batch.check(what + " tgt_is_causal", decoder.forward(tgt.k, memory.k, std::nullopt, kiln_mask(mm), kiln_mask(tp), kiln_mask(mp), true),
                expected.detach(), normwise(expected.detach(), kStackTol, at::kFloat));
    nn::TransformerDecoder bf(nn::TransformerDecoderLayer(E, H, F, 0.1, "gelu", 1e-5, /*batch_first=*/true), 2,
                              std::make_shared<nn::LayerNorm>(Shape{E}));
    bf.eval();
    bf.load_state_dict(decoder.state_dict());
    batch.check(what + " batch_first",
                bf.forward(tgt.k.transpose(0, 1), memory.k.transpose(0, 1), kiln_mask(tm), kiln_mask(mm), kiln_mask(tp), kiln_mask(mp)).transpose(0, 1),
                expected.detach(), normwise(expected.detach(), kStackTol, at::kFloat));
  }
  batch.run();
}

TEST_CASE("torch: Transformer equals torch::nn::Transformer, with source, target and memory masks", "[torch][nn]") {
  Source src(179);
  Batch batch;
  const int64_t S = 6, T = 5, N = 2, E = 16, H = 4, F = 32;
  Tensor::manual_seed(14);
  nn::Transformer model(E, H, 2, 2, F);
  model.eval();
  torch::nn::Transformer ref(torch::nn::TransformerOptions(E, H).num_encoder_layers(2).num_decoder_layers(2).dim_feedforward(F).dropout(0.0));
  ref->eval();
  std::map<std::string, at::Tensor> tparams = share_parameters(src, model, *ref);
  at::Tensor src_mask = src.values({S, S}, at::kFloat, Values::Finite), tgt_mask = torch::nn::TransformerImpl::generate_square_subsequent_mask(T);
  at::Tensor src_padding = padding_mask({S - 2, S}, S), tgt_padding = padding_mask({T, T - 1}, T);
  for (bool masked : {false, true}) {
    Leaf s = input(src, "src", {S, N, E}), t = input(src, "tgt", {T, N, E});
    at::Tensor expected = masked ? ref->forward(s.t, t.t, src_mask, tgt_mask, {}, src_padding, tgt_padding, src_padding) : ref->forward(s.t, t.t);
    Tensor out = masked ? model.forward(s.k, t.k, to_kiln(src_mask), to_kiln(tgt_mask), std::nullopt, to_kiln(src_padding), to_kiln(tgt_padding),
                                        to_kiln(src_padding))
                        : model.forward(s.k, t.k);
    check_module(batch, src, masked ? "Transformer masked" : "Transformer", out, expected, {s, t}, model, tparams, kStackTol);
  }
  batch.run();
}

TEST_CASE("torch: pad's four modes and the padding modules equal torch::nn::functional::pad, values and input gradients", "[torch][nn]") {
  // Copies of the input: values exact; each gradient element a sum of up to a few w.
  Source src(181);
  Batch batch;
  namespace F = torch::nn::functional;
  struct Case {
    std::string mode;
    std::vector<int64_t> shape, pads;
  };
  std::vector<Case> cases = {
      {"constant", {2, 3, 5}, {2, 1}},           {"constant", {2, 3, 4, 5}, {1, 2, -1, 3}},   {"constant", {3, 5}, {-2, 3, 1, 0}},
      {"reflect", {2, 3, 5}, {2, 4}},            {"reflect", {3, 5}, {4, 0}},                 {"reflect", {2, 3, 4, 5}, {3, 1, 2, 3}},
      {"reflect", {3, 4, 5}, {0, 2, 3, 1}},      {"reflect", {2, 3, 5}, {-1, 3}},             {"reflect", {2, 3, 4, 5}, {2, -3, -1, 2}},
      {"reflect", {1, 2, 3, 4, 5}, {1, 1, 2, 0, 1, 2}},
      {"replicate", {2, 3, 5}, {3, 7}},          {"replicate", {3, 5}, {2, 1}},               {"replicate", {2, 3, 4, 5}, {1, 6, 2, 0}},
      {"replicate", {3, 4, 5}, {2, 2, 5, 1}},    {"replicate", {2, 3, 5}, {2, -3}},           {"replicate", {2, 3, 4, 5}, {-2, 1, 3, -1}},
      {"circular", {2, 3, 5}, {5, 2}},           {"circular", {2, 3, 4, 5}, {1, 3, 4, 2}},    {"circular", {2, 3, 5}, {2, -1}},
      {"circular", {2, 3, 4, 5}, {-2, 3, 1, -1}}, {"circular", {1, 2, 3, 4, 5}, {1, 2, 0, 3, 2, 1}},
  };
  for (at::ScalarType dt : kFloats)
    for (const Case& c : cases) {
      double value = c.mode == "constant" ? 1.5 : 0.0;
      F::PadFuncOptions::mode_t mode = torch::kConstant;
      if (c.mode == "reflect") mode = torch::kReflect;
      if (c.mode == "replicate") mode = torch::kReplicate;
      if (c.mode == "circular") mode = torch::kCircular;
      check_op(batch, src, cat("pad ", c.mode, " ", shape_str(c.shape), " by ", shape_str(c.pads), " ", name(dt)), {src.values(c.shape, dt, Values::Finite)},
               [&](auto& v) { return nn::pad(v[0], c.pads, c.mode, value); },
               [&](auto& v) { return F::pad(v[0], F::PadFuncOptions(c.pads).mode(mode).value(value)); }, 0);
    }
  // The modules: an int for every side or PyTorch's tuple, unbatched and batched.
  using KFn = std::function<Tensor(const Tensor&)>;
  using TFn = std::function<at::Tensor(const at::Tensor&)>;
  struct ModuleCase {
    std::string what;
    std::vector<int64_t> shape;
    KFn k;
    TFn t;
  };
  std::vector<ModuleCase> modules = {
      {"ZeroPad2d({1, 2, -1, 3})", {2, 3, 4, 5}, nn::ZeroPad2d({1, 2, -1, 3}), torch::nn::ZeroPad2d(torch::nn::ZeroPad2dOptions({1, 2, -1, 3}))},
      {"ZeroPad2d(2)", {3, 4, 5}, nn::ZeroPad2d(2), torch::nn::ZeroPad2d(2)},
      {"ConstantPad1d(3, -2.5)", {3, 5}, nn::ConstantPad1d(3, -2.5), torch::nn::ConstantPad1d(torch::nn::ConstantPad1dOptions(3, -2.5))},
      {"ConstantPad2d({0, 1, 2, 3}, 0.75)", {3, 4, 5}, nn::ConstantPad2d({0, 1, 2, 3}, 0.75),
       torch::nn::ConstantPad2d(torch::nn::ConstantPad2dOptions({0, 1, 2, 3}, 0.75))},
      {"ReflectionPad1d({3, 1})", {2, 3, 5}, nn::ReflectionPad1d({3, 1}), torch::nn::ReflectionPad1d(torch::nn::ReflectionPad1dOptions({3, 1}))},
      {"ReflectionPad2d(2)", {3, 4, 5}, nn::ReflectionPad2d(2), torch::nn::ReflectionPad2d(2)},
      {"ReplicationPad1d(4)", {3, 5}, nn::ReplicationPad1d(4), torch::nn::ReplicationPad1d(4)},
      {"ReplicationPad2d({1, 0, 3, 2})", {2, 3, 4, 5}, nn::ReplicationPad2d({1, 0, 3, 2}),
       torch::nn::ReplicationPad2d(torch::nn::ReplicationPad2dOptions({1, 0, 3, 2}))},
  };
  for (const ModuleCase& m : modules)
    check_op(batch, src, m.what, {src.values(m.shape, at::kFloat, Values::Finite)}, [&](auto& v) { return m.k(v[0]); },
             [&](auto& v) { return m.t(v[0]); }, 0);
  batch.run();
}

TEST_CASE("torch: Unflatten equals unflatten, and clip_grad_value equals clip_grad_value_", "[torch][nn]") {
  Source src(191);
  Batch batch;
  at::Tensor x = src.values({2, 12, 3}, at::kFloat, Values::Finite);
  check_op(batch, src, "Unflatten(1, {3, -1, 2})", {x}, [](auto& v) { return nn::Unflatten(1, {3, -1, 2})(v[0]); },
           [](auto& v) { return v[0].unflatten(1, {3, -1, 2}); }, 0);
  check_op(batch, src, "Unflatten(-1, {3, 1})", {x}, [](auto& v) { return nn::Unflatten(-1, {3, 1})(v[0]); },
           [](auto& v) { return v[0].unflatten(-1, {3, 1}); }, 0);
  check_op(batch, src, "Unflatten(0, {1, -1})", {x}, [](auto& v) { return nn::Unflatten(0, {1, -1})(v[0]); },
           [](auto& v) { return v[0].unflatten(0, {1, -1}); }, 0);
  // Gradients with NaN and infinities (Values::Normal mixes them in); a parameter without a gradient is skipped.
  std::vector<at::Tensor> tparams;
  std::vector<Tensor> kparams;
  for (std::vector<int64_t> shape : {std::vector<int64_t>{4, 5}, std::vector<int64_t>{7}, std::vector<int64_t>{3}}) {
    tparams.push_back(at::zeros(shape).requires_grad_(true));
    kparams.push_back(to_kiln(tparams.back().detach()).requires_grad_());
    if (tparams.size() == 3) continue;
    at::Tensor g = src.values(shape, at::kFloat, Values::Normal);
    tparams.back().mutable_grad() = g.clone();
    kparams.back().set_grad(to_kiln(g));
  }
  torch::nn::utils::clip_grad_value_(tparams, 0.75);
  optim::clip_grad_value(kparams, 0.75);
  for (size_t i = 0; i < 2; ++i) batch.check(cat("clip_grad_value parameter ", i), *kparams[i].grad(), tparams[i].grad());
  CHECK(!kparams[2].grad());
  batch.run();
}

}  // namespace
}  // namespace kiln::oracle
