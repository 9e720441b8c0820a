// kiln's modules against libtorch's torch::nn modules fed the same parameters by their PyTorch names:
// TransformerDecoderLayer (post-norm, as libtorch's C++ module; pre-norm against the same layer's
// parts composed in libtorch), values and the gradients of the target and the memory.
#include <torch/nn/modules/transformerlayer.h>

#include "check_op.h"
#include "frontend/nn.h"

namespace kiln::oracle {
namespace {

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
          batch.check(what + " tgt_is_causal", layer.forward(ktgt, kmemory, std::nullopt, kmm, true), expected.detach(),
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

}  // namespace
}  // namespace kiln::oracle
