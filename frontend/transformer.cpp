// The Transformer stacks of frontend/nn.h: TransformerEncoder, TransformerDecoder and Transformer, and
// the layers' deep copies they are built from.
#include <cmath>
#include <limits>

#include "frontend/nn.h"

namespace kiln::nn {

namespace {

void check_num_layers(const char* op, int64_t num_layers) {
  if (num_layers <= 0) throw Error(kiln::cat(op, ": num_layers must be at least 1, got ", num_layers));
}

// What a deep copy takes beyond the constructor's options: the values (each loaded into the copy's own
// memory, see Tensor::assign) and the training mode.
void copy_state(const Module& from, Module& to) {
  to.load_state_dict(from.state_dict());
  to.train(from.training());
}

// The stacks' inputs: 3-D with d_model features (MultiheadAttention would say so too, but in its own name).
void check_input(const char* op, const char* what, const Tensor& x, int64_t d_model, bool batch_first) {
  if (x.ndim() != 3 || x.shape()[2] != d_model)
    throw Error(kiln::cat(op, ": ", what, " ", shape_str(x.shape()), " must be ", batch_first ? "(N, L, E)" : "(L, N, E)", " with E = d_model = ",
                          d_model, " (unbatched inputs: add a batch axis of 1)"));
}

// num_layers copies of `layer` in a ModuleList (the stack's "layers"), also kept typed in `stack`.
template <typename Layer>
std::shared_ptr<ModuleList> clones(const char* op, const Layer& layer, int64_t num_layers, std::vector<std::shared_ptr<Layer>>& stack) {
  check_num_layers(op, num_layers);
  auto list = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < num_layers; ++i) {
    stack.push_back(layer.clone());
    list->push_back(stack.back());
  }
  return list;
}

template <typename Layer>
Layer& layer_at(const char* op, const std::vector<std::shared_ptr<Layer>>& stack, size_t i) {
  if (i >= stack.size()) throw Error(kiln::cat(op, ": layer ", i, " is out of range for ", stack.size(), " layers"));
  return *stack[i];
}

}  // namespace

std::shared_ptr<TransformerEncoderLayer> TransformerEncoderLayer::clone() const {
  auto copy = std::make_shared<TransformerEncoderLayer>(self_attn->embed_dim, self_attn->num_heads, linear1->weight.shape()[0], dropout->p,
                                                        activation, norm1->eps, self_attn->batch_first, norm_first);
  copy->self_attn->dropout = self_attn->dropout;
  copy->dropout1->p = dropout1->p, copy->dropout2->p = dropout2->p;
  copy->norm2->eps = norm2->eps;
  copy_state(*this, *copy);
  return copy;
}

std::shared_ptr<TransformerDecoderLayer> TransformerDecoderLayer::clone() const {
  auto copy = std::make_shared<TransformerDecoderLayer>(self_attn->embed_dim, self_attn->num_heads, linear1->weight.shape()[0], dropout->p,
                                                        activation, norm1->eps, self_attn->batch_first, norm_first);
  copy->self_attn->dropout = self_attn->dropout, copy->multihead_attn->dropout = multihead_attn->dropout;
  copy->dropout1->p = dropout1->p, copy->dropout2->p = dropout2->p, copy->dropout3->p = dropout3->p;
  copy->norm2->eps = norm2->eps, copy->norm3->eps = norm3->eps;
  copy_state(*this, *copy);
  return copy;
}

// --- TransformerEncoder ------------------------------------------------------------------------

TransformerEncoder::TransformerEncoder(const TransformerEncoderLayer& layer, int64_t num_layers, std::shared_ptr<Module> final_norm) {
  layers = register_module("layers", clones("TransformerEncoder", layer, num_layers, stack_));
  if (final_norm) norm = register_module("norm", std::move(final_norm));
}

TransformerEncoderLayer& TransformerEncoder::layer(size_t i) const { return layer_at("TransformerEncoder", stack_, i); }

Tensor TransformerEncoder::forward(const Tensor& src, std::optional<Tensor> mask, std::optional<Tensor> src_key_padding_mask, bool is_causal) {
  check_input("TransformerEncoder", "src", src, stack_[0]->self_attn->embed_dim, stack_[0]->self_attn->batch_first);
  Tensor x = src;
  for (auto& l : stack_) x = l->forward(x, mask, src_key_padding_mask, is_causal);
  return norm ? norm->forward(x) : x;
}

// --- TransformerDecoder ------------------------------------------------------------------------

TransformerDecoder::TransformerDecoder(const TransformerDecoderLayer& layer, int64_t num_layers, std::shared_ptr<Module> final_norm) {
  layers = register_module("layers", clones("TransformerDecoder", layer, num_layers, stack_));
  if (final_norm) norm = register_module("norm", std::move(final_norm));
}

TransformerDecoderLayer& TransformerDecoder::layer(size_t i) const { return layer_at("TransformerDecoder", stack_, i); }

Tensor TransformerDecoder::forward(const Tensor&) {
  throw Error("TransformerDecoder: forward needs the target and the encoder's memory: call forward(tgt, memory[, tgt_mask, memory_mask, ...])");
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, std::optional<Tensor> tgt_mask, std::optional<Tensor> memory_mask,
                                   std::optional<Tensor> tgt_key_padding_mask, std::optional<Tensor> memory_key_padding_mask, bool tgt_is_causal) {
  int64_t e = stack_[0]->self_attn->embed_dim;
  bool batch_first = stack_[0]->self_attn->batch_first;
  check_input("TransformerDecoder", "tgt", tgt, e, batch_first);
  check_input("TransformerDecoder", "memory", memory, e, batch_first);
  Tensor x = tgt;
  for (auto& l : stack_) x = l->forward(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal);
  return norm ? norm->forward(x) : x;
}

// --- Transformer -------------------------------------------------------------------------------

Transformer::Transformer(int64_t d_model, int64_t nhead, int64_t num_encoder_layers, int64_t num_decoder_layers, int64_t dim_feedforward,
                         double dropout, std::string activation, double layer_norm_eps, bool batch_first, bool norm_first)
    : d_model(d_model), nhead(nhead), batch_first(batch_first) {
  if (d_model <= 0 || nhead <= 0 || d_model % nhead != 0)
    throw Error(kiln::cat("Transformer: d_model ", d_model, " must be divisible by nhead ", nhead,
                          " (each head attends over d_model / nhead features); pick an nhead that divides d_model"));
  check_num_layers("Transformer (num_encoder_layers)", num_encoder_layers);
  check_num_layers("Transformer (num_decoder_layers)", num_decoder_layers);
  TransformerEncoderLayer encoder_layer(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first);
  encoder = register_module("encoder", std::make_shared<TransformerEncoder>(encoder_layer, num_encoder_layers,
                                                                            std::make_shared<LayerNorm>(Shape{d_model}, layer_norm_eps)));
  TransformerDecoderLayer decoder_layer(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first);
  decoder = register_module("decoder", std::make_shared<TransformerDecoder>(decoder_layer, num_decoder_layers,
                                                                            std::make_shared<LayerNorm>(Shape{d_model}, layer_norm_eps)));
  // PyTorch's _reset_parameters: xavier_uniform, U(-b, b) with b = sqrt(6 / (fan_in + fan_out)), for
  // every matrix (so the copies' projections differ; their biases and norms stay equal).
  NoGradGuard no_grad;
  std::vector<Tensor> drawn;
  for (auto& [name, p] : named_parameters()) {
    if (p.ndim() < 2) continue;
    double receptive = static_cast<double>(p.numel() / (p.shape()[0] * p.shape()[1]));
    double fans = static_cast<double>(p.shape()[0] + p.shape()[1]) * receptive;
    Tensor target = p;
    target.assign(init_uniform(p.shape(), std::sqrt(6.0 / fans)));
    drawn.push_back(target);
  }
  realize_all(drawn);
}

Tensor Transformer::forward(const Tensor&) {
  throw Error("Transformer: forward needs the source and the target: call forward(src, tgt[, src_mask, tgt_mask, memory_mask, ...])");
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, std::optional<Tensor> src_mask, std::optional<Tensor> tgt_mask,
                            std::optional<Tensor> memory_mask, std::optional<Tensor> src_key_padding_mask,
                            std::optional<Tensor> tgt_key_padding_mask, std::optional<Tensor> memory_key_padding_mask) {
  check_input("Transformer", "src", src, d_model, batch_first);
  check_input("Transformer", "tgt", tgt, d_model, batch_first);
  size_t batch = batch_first ? 0 : 1;
  if (src.shape()[batch] != tgt.shape()[batch])
    throw Error(kiln::cat("Transformer: src ", shape_str(src.shape()), " and tgt ", shape_str(tgt.shape()), " have different batch sizes (axis ",
                          batch, batch_first ? ", batch_first" : "", "); they must be equal"));
  Tensor memory = encoder->forward(src, src_mask, src_key_padding_mask);
  return decoder->forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask);
}

Tensor Transformer::generate_square_subsequent_mask(int64_t sz, const std::string& device) {
  if (sz < 0) throw Error(kiln::cat("Transformer::generate_square_subsequent_mask: size ", sz, " is negative"));
  Tensor i = Tensor::arange(sz, dtypes::int32, device).reshape({sz, 1}), j = Tensor::arange(sz, dtypes::int32, device).reshape({1, sz});
  Tensor zero = Tensor::zeros({sz, sz}, dtypes::float32, device);
  return j.gt(i).where(zero.full_like(-std::numeric_limits<double>::infinity()), zero);
}

}  // namespace kiln::nn
