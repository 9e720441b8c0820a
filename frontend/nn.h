// kiln::nn: layers and losses in the shape of torch.nn.
//
//   auto model = std::make_shared<nn::Sequential>();   // or a Module subclass of your own
//   model->add("fc1", std::make_shared<nn::Linear>(784, 128));
//   Tensor loss = nn::cross_entropy(model->forward(x), labels);
//
// Modules own named parameters (leaf tensors with requires_grad) and buffers (running statistics),
// collected recursively with dotted names ("conv1.weight") like PyTorch's. Initializations are
// PyTorch's defaults, drawn from kiln's seeded RNG (Tensor::manual_seed).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frontend/tensor.h"

namespace kiln::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }

  NamedTensors named_parameters() const;
  NamedTensors named_buffers() const;
  std::vector<Tensor> parameters() const;
  std::vector<Tensor> buffers() const;
  // Parameters and buffers by name; load checks names, shapes and dtypes, and with strict also that
  // nothing is missing or unexpected. Every problem is listed in one error.
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }
  // The direct submodules, by name, in registration order (torch's named_children).
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }

 protected:
  Tensor register_parameter(const std::string& name, Tensor value);  // made a leaf with requires_grad
  Tensor register_buffer(const std::string& name, Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    children_.emplace_back(name, module);
    return module;
  }

 private:
  void collect(const std::string& prefix, bool params, NamedTensors& out) const;
  NamedTensors params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

class Sequential : public Module {
 public:
  Sequential& add(const std::string& name, std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor weight;  // (out, in)
  std::optional<Tensor> bias;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {1, 1},
         std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor weight;  // (out, in / groups, kh, kw)
  std::optional<Tensor> bias;
  std::array<int64_t, 2> stride, padding, dilation;
  int64_t groups;
};

// Batch normalization over every axis but the channels (axis 1); BatchNorm1d and BatchNorm2d pick the
// input ranks, as PyTorch's modules do.
class BatchNorm : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::optional<Tensor> weight, bias;
  Tensor running_mean, running_var, num_batches_tracked;
  double eps, momentum;
  // Synchronized batch norm (torch.nn.SyncBatchNorm), set by dist::DistributedDataParallel's
  // sync_batch_norm: a function that returns its argument summed elementwise over every process of the
  // job. When set, training normalizes with the mean and variance of the whole batch across processes
  // (and updates the running statistics with them), and the gradient sums its two statistics terms
  // across processes too, so it is the gradient of one batch of every process's samples. Unset: each
  // process normalizes with its own batch (PyTorch's default).
  std::function<Tensor(const Tensor&)> sum_across_processes;

 protected:
  BatchNorm(const char* name, std::vector<int64_t> ranks, const char* layouts, int64_t channels, double eps, double momentum, bool affine);
  const char* name_;
  std::vector<int64_t> ranks_;  // the input ranks it takes
  const char* layouts_;         // ...spelled for errors
};

class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t channels, double eps = 1e-5, double momentum = 0.1, bool affine = true)
      : BatchNorm("BatchNorm1d", {2, 3}, "(N, C) or (N, C, L)", channels, eps, momentum, affine) {}
};

class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t channels, double eps = 1e-5, double momentum = 0.1, bool affine = true)
      : BatchNorm("BatchNorm2d", {4}, "(N, C, H, W)", channels, eps, momentum, affine) {}
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::optional<Tensor> weight, bias;
  Shape normalized_shape;
  double eps;
};

class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;  // (N, C, ...)
  std::optional<Tensor> weight, bias;
  int64_t num_groups, num_channels;
  double eps;
};

// Each sample's channels normalized over their own positions (torch.nn.InstanceNorm1d/2d): (N, C, ...)
// or unbatched (C, ...). affine adds a weight and bias per channel. Running statistics
// (track_running_stats) are not implemented: asking for them is an error. An input whose channel count
// is not num_features is an error (PyTorch only warns when affine is off).
class InstanceNorm : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::optional<Tensor> weight, bias;
  int64_t num_features;
  double eps;

 protected:
  InstanceNorm(const char* name, int64_t spatial, int64_t num_features, double eps, double momentum, bool affine, bool track_running_stats);
  const char* name_;
  int64_t spatial_;  // positions' axes: 1 or 2
};

class InstanceNorm1d : public InstanceNorm {
 public:
  explicit InstanceNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = false, bool track_running_stats = false)
      : InstanceNorm("InstanceNorm1d", 1, num_features, eps, momentum, affine, track_running_stats) {}
};

class InstanceNorm2d : public InstanceNorm {
 public:
  explicit InstanceNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = false, bool track_running_stats = false)
      : InstanceNorm("InstanceNorm2d", 2, num_features, eps, momentum, affine, track_running_stats) {}
};

// max(0, x) + weight min(0, x); one weight (init) for every channel, or num_parameters of them, one
// per channel (axis 1).
class PReLU : public Module {
 public:
  explicit PReLU(int64_t num_parameters = 1, double init = 0.25);
  Tensor forward(const Tensor& x) override;
  Tensor weight;
};

class Embedding : public Module {
 public:
  // padding_idx: that row starts at zero and gets no gradient (negative counts from the end).
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt);
  Tensor forward(const Tensor& indices) override;  // integer indices of any shape -> (..., dim)
  Tensor weight;
  std::optional<int64_t> padding_idx;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  double p;
};

// Zeroes whole channels: each (sample, channel) plane with probability p, the rest scaled by 1 / (1 - p),
// when training (torch.nn.Dropout2d on (N, C, H, W)). A 3-D input is (N, C, L), as PyTorch 1.13 reads
// it (each (sample, channel) row; not an unbatched (C, H, W)).
class Dropout2d : public Module {
 public:
  explicit Dropout2d(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  double p;
};

// An activation without options as a module: forward is the Tensor method (ReLU, Sigmoid, ... below).
template <Tensor (Tensor::*F)() const>
class Activation : public Module {
 public:
  Tensor forward(const Tensor& x) override { return (x.*F)(); }
};
using ReLU = Activation<&Tensor::relu>;

// torch.nn.Flatten: axes start_dim..end_dim merged into one (by default all but the batch axis).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim, end_dim); }
  int64_t start_dim, end_dim;
};

// torch.nn.Unflatten: axis `dim` (negative counts from the end) split into `unflattened_size`, whose
// product must be that axis's size; one entry may be -1, inferred from the others. A view.
class Unflatten : public Module {
 public:
  Unflatten(int64_t dim, std::vector<int64_t> unflattened_size);
  Tensor forward(const Tensor& x) override;
  int64_t dim;
  std::vector<int64_t> unflattened_size;
};

// The activations as modules, for Sequential models written as PyTorch's are.
class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
};
using SiLU = Activation<&Tensor::silu>;
using Sigmoid = Activation<&Tensor::sigmoid>;
using Tanh = Activation<&Tensor::tanh>;
using SELU = Activation<&Tensor::selu>;
using ReLU6 = Activation<&Tensor::relu6>;
using Hardsigmoid = Activation<&Tensor::hardsigmoid>;
using Hardswish = Activation<&Tensor::hardswish>;
using Mish = Activation<&Tensor::mish>;
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none") : approximate(std::move(approximate)) {}
  Tensor forward(const Tensor& x) override { return x.gelu(approximate); }
  std::string approximate;  // "none" (erf) or "tanh"
};
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override { return x.leaky_relu(negative_slope); }
  double negative_slope;
};
class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0) : alpha(alpha) {}
  Tensor forward(const Tensor& x) override { return x.elu(alpha); }
  double alpha;
};
class Hardtanh : public Module {
 public:
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0) : min_val(min_val), max_val(max_val) {}
  Tensor forward(const Tensor& x) override { return x.hardtanh(min_val, max_val); }
  double min_val, max_val;
};
class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0) : beta(beta), threshold(threshold) {}
  Tensor forward(const Tensor& x) override { return x.softplus(beta, threshold); }
  double beta, threshold;
};
class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& x) override { return x.softmax(dim); }
  int64_t dim;
};
class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& x) override { return x.log_softmax(dim); }
  int64_t dim;
};

// torch.nn.ConvTranspose2d: weight (in, out / groups, kh, kw), initialized as PyTorch does.
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {1, 1},
                  std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> output_padding = {0, 0}, int64_t groups = 1,
                  bool bias = true, std::array<int64_t, 2> dilation = {1, 1});
  Tensor forward(const Tensor& x) override;
  Tensor weight;
  std::optional<Tensor> bias;
  std::array<int64_t, 2> stride, padding, output_padding, dilation;
  int64_t groups;
};

// torch.nn.Conv1d on (N, C, L) or (C, L): weight (out, in / groups, kernel), initialized as PyTorch does.
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1, int64_t padding = 0, int64_t dilation = 1,
         int64_t groups = 1, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor weight;
  std::optional<Tensor> bias;
  int64_t stride, padding, dilation, groups;
};

// Max or average pooling over the last two axes; MaxPool2d and AvgPool2d pick which. The options are
// PyTorch's modules' (dilation for max; count_include_pad and divisor_override for average).
class Pool2d : public Module {
 public:
  Tensor forward(const Tensor& x) override {
    return max ? x.max_pool2d(kernel, stride, padding, dilation, ceil_mode)
               : x.avg_pool2d(kernel, stride, padding, ceil_mode, count_include_pad, divisor_override);
  }
  std::array<int64_t, 2> kernel;
  std::optional<std::array<int64_t, 2>> stride;
  std::array<int64_t, 2> padding;
  bool max;
  std::array<int64_t, 2> dilation = {1, 1};      // max only
  bool ceil_mode = false;
  bool count_include_pad = true;                 // average only
  std::optional<int64_t> divisor_override;       // average only

 protected:
  Pool2d(bool max, std::array<int64_t, 2> kernel, std::optional<std::array<int64_t, 2>> stride, std::array<int64_t, 2> padding)
      : kernel(kernel), stride(stride), padding(padding), max(max) {}
};

class MaxPool2d : public Pool2d {
 public:
  explicit MaxPool2d(std::array<int64_t, 2> kernel, std::optional<std::array<int64_t, 2>> stride = std::nullopt,
                     std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> dilation = {1, 1}, bool ceil_mode = false)
      : Pool2d(true, kernel, stride, padding) {
    this->dilation = dilation;
    this->ceil_mode = ceil_mode;
  }
};

class AvgPool2d : public Pool2d {
 public:
  explicit AvgPool2d(std::array<int64_t, 2> kernel, std::optional<std::array<int64_t, 2>> stride = std::nullopt,
                     std::array<int64_t, 2> padding = {0, 0}, bool ceil_mode = false, bool count_include_pad = true,
                     std::optional<int64_t> divisor_override = std::nullopt)
      : Pool2d(false, kernel, stride, padding) {
    this->ceil_mode = ceil_mode;
    this->count_include_pad = count_include_pad;
    this->divisor_override = divisor_override;
  }
};

class MaxPool1d : public Module {
 public:
  explicit MaxPool1d(int64_t kernel, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0, int64_t dilation = 1,
                     bool ceil_mode = false)
      : kernel(kernel), stride(stride), padding(padding), dilation(dilation), ceil_mode(ceil_mode) {}
  Tensor forward(const Tensor& x) override { return x.max_pool1d(kernel, stride, padding, dilation, ceil_mode); }
  int64_t kernel;
  std::optional<int64_t> stride;
  int64_t padding, dilation;
  bool ceil_mode;
};

class AvgPool1d : public Module {
 public:
  explicit AvgPool1d(int64_t kernel, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0, bool ceil_mode = false,
                     bool count_include_pad = true)
      : kernel(kernel), stride(stride), padding(padding), ceil_mode(ceil_mode), count_include_pad(count_include_pad) {}
  Tensor forward(const Tensor& x) override { return x.avg_pool1d(kernel, stride, padding, ceil_mode, count_include_pad); }
  int64_t kernel;
  std::optional<int64_t> stride;
  int64_t padding;
  bool ceil_mode, count_include_pad;
};

// Adaptive pooling to a fixed output size (Tensor::adaptive_avg_pool2d): a ResNet's head is
// AdaptiveAvgPool2d({1, 1}) then Flatten.
template <typename Size, Tensor (Tensor::*F)(Size) const>
class AdaptivePool : public Module {
 public:
  explicit AdaptivePool(Size output_size) : output_size(output_size) {}
  Tensor forward(const Tensor& x) override { return (x.*F)(output_size); }
  Size output_size;
};
using AdaptiveAvgPool2d = AdaptivePool<std::array<int64_t, 2>, &Tensor::adaptive_avg_pool2d>;
using AdaptiveMaxPool2d = AdaptivePool<std::array<int64_t, 2>, &Tensor::adaptive_max_pool2d>;
using AdaptiveAvgPool1d = AdaptivePool<int64_t, &Tensor::adaptive_avg_pool1d>;
using AdaptiveMaxPool1d = AdaptivePool<int64_t, &Tensor::adaptive_max_pool1d>;

// softmax(q k^T / sqrt(d) + mask) v over the last two axes; `mask` is added (use -inf to block), or
// a bool mask where true keeps, as in torch.nn.functional.scaled_dot_product_attention.
// `scale` replaces 1/sqrt(E). dropout_p > 0 drops attention weights (scaling the kept ones by
// 1 / (1 - p)), as torch's dropout_p; pass 0 outside training.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, std::optional<Tensor> mask = std::nullopt,
                                    bool causal = false, std::optional<double> scale = std::nullopt, double dropout_p = 0.0);

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, bool bias = true, bool batch_first = false);
  Tensor forward(const Tensor& x) override { return attend(x, x, x); }  // self-attention
  // (L, N, E) inputs, or (N, L, E) with batch_first; returns the attention output (not the weights).
  // The masks are torch.nn.MultiheadAttention's: `mask` (its attn_mask, (L, S) or (N * H, L, S)) and
  // key_padding_mask (N, S) are float, added to the scores, or bool, where true blocks (a key that query
  // may not attend to; a padding key). That is the opposite of scaled_dot_product_attention's bool mask
  // (true keeps there), as in PyTorch, so a script's masks carry over to either unchanged.
  Tensor attend(const Tensor& query, const Tensor& key, const Tensor& value, std::optional<Tensor> mask = std::nullopt,
                bool causal = false, std::optional<Tensor> key_padding_mask = std::nullopt);
  Tensor in_proj_weight;  // (3E, E)
  std::optional<Tensor> in_proj_bias;
  std::shared_ptr<Linear> out_proj;
  int64_t embed_dim, num_heads;
  bool batch_first;
  double dropout = 0.0;  // torch's `dropout`: on the attention weights, in training mode only
};

// torch.nn.TransformerEncoderLayer: self-attention and a feed-forward block (linear1, activation
// "relu" or "gelu", dropout, linear2), each added to its input, with LayerNorm after each sum
// (post-norm, PyTorch's default) or before each block (norm_first). Submodule names are PyTorch's
// (self_attn, linear1, linear2, norm1, norm2), so state dicts carry over.
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward = 2048, double dropout = 0.1,
                          std::string activation = "relu", double layer_norm_eps = 1e-5, bool batch_first = false, bool norm_first = false);
  Tensor forward(const Tensor& src) override { return forward(src, std::nullopt); }
  // PyTorch's arguments in its order: src_mask and src_key_padding_mask as MultiheadAttention::attend's
  // (float added; bool, true blocks), is_causal: a causal mask (with or without src_mask).
  Tensor forward(const Tensor& src, std::optional<Tensor> src_mask, std::optional<Tensor> src_key_padding_mask = std::nullopt,
                 bool is_causal = false);
  // A deep copy (PyTorch's copy.deepcopy): the same options, its own parameters holding this layer's
  // values, the same dropout probabilities and training mode.
  std::shared_ptr<TransformerEncoderLayer> clone() const;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;
  std::string activation;
  bool norm_first;
};

// torch.nn.TransformerDecoderLayer: self-attention over the target (tgt_mask, or causal), attention from
// the target to `memory` (the encoder's output; memory_mask), and the feed-forward block, each added to
// its input with LayerNorm after each sum (or before each block: norm_first). PyTorch's submodule names
// (self_attn, multihead_attn, linear1, linear2, norm1..3).
class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward = 2048, double dropout = 0.1,
                          std::string activation = "relu", double layer_norm_eps = 1e-5, bool batch_first = false, bool norm_first = false);
  Tensor forward(const Tensor&) override;  // an error: a decoder layer needs the memory too
  // PyTorch's arguments in its order; every mask as MultiheadAttention::attend's (float added; bool,
  // true blocks); the key padding masks are (N, T) and (N, S). tgt_is_causal: a causal self-attention mask.
  Tensor forward(const Tensor& tgt, const Tensor& memory, std::optional<Tensor> tgt_mask = std::nullopt,
                 std::optional<Tensor> memory_mask = std::nullopt, std::optional<Tensor> tgt_key_padding_mask = std::nullopt,
                 std::optional<Tensor> memory_key_padding_mask = std::nullopt, bool tgt_is_causal = false);
  std::shared_ptr<TransformerDecoderLayer> clone() const;  // a deep copy, as TransformerEncoderLayer::clone
  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2, dropout3;
  std::string activation;
  bool norm_first;
};

// torch.nn.ModuleList: modules registered under "0", "1", ...; it has no forward of its own.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  explicit ModuleList(std::vector<std::shared_ptr<Module>> modules);
  ModuleList& push_back(std::shared_ptr<Module> m);
  size_t size() const { return modules_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;
  std::vector<std::shared_ptr<Module>>::const_iterator begin() const { return modules_.begin(); }
  std::vector<std::shared_ptr<Module>>::const_iterator end() const { return modules_.end(); }
  Tensor forward(const Tensor& x) override;  // an error that says to call its modules

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

// --- Transformer stacks (frontend/transformer.cpp) ---------------------------------------------
// torch.nn.TransformerEncoder, TransformerDecoder and Transformer, with PyTorch's state dict keys
// ("layers.0.self_attn.in_proj_weight", ..., "norm.weight"; in a Transformer "encoder.layers.0...",
// "decoder.norm.bias"), so checkpoints carry over:
//
//   nn::TransformerEncoderLayer layer(512, 8);
//   nn::TransformerEncoder encoder(layer, 6, std::make_shared<nn::LayerNorm>(Shape{512}));
//   Tensor y = encoder.forward(x, nn::Transformer::generate_square_subsequent_mask(L), padding);
//
// The stacks run their layers in turn with the same masks, then `norm` (none when null). Every mask is
// torch.nn's (MultiheadAttention::attend): float, added to the scores (generate_square_subsequent_mask's
// -inf above the diagonal); or bool, where true blocks (a key not attended to; padding). Inputs are batched: (L, N, E), or (N, L, E) with
// batch_first (PyTorch also takes an unbatched (L, E); add a batch axis of 1 here).

// num_layers (at least 1; PyTorch would build an empty stack for 0) deep copies of `layer`
// (TransformerEncoderLayer::clone, as PyTorch's _get_clones): each starts with layer's values and has
// parameters of its own.
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerEncoderLayer& layer, int64_t num_layers, std::shared_ptr<Module> norm = nullptr);
  Tensor forward(const Tensor& src) override { return forward(src, std::nullopt); }
  Tensor forward(const Tensor& src, std::optional<Tensor> mask, std::optional<Tensor> src_key_padding_mask = std::nullopt,
                 bool is_causal = false);
  TransformerEncoderLayer& layer(size_t i) const;  // the i-th copy
  std::shared_ptr<ModuleList> layers;  // registered as "layers"
  std::shared_ptr<Module> norm;        // registered as "norm" when given

 private:
  std::vector<std::shared_ptr<TransformerEncoderLayer>> stack_;
};

class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const TransformerDecoderLayer& layer, int64_t num_layers, std::shared_ptr<Module> norm = nullptr);
  Tensor forward(const Tensor&) override;  // an error: a decoder needs the memory too
  Tensor forward(const Tensor& tgt, const Tensor& memory, std::optional<Tensor> tgt_mask = std::nullopt,
                 std::optional<Tensor> memory_mask = std::nullopt, std::optional<Tensor> tgt_key_padding_mask = std::nullopt,
                 std::optional<Tensor> memory_key_padding_mask = std::nullopt, bool tgt_is_causal = false);
  TransformerDecoderLayer& layer(size_t i) const;
  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<Module> norm;

 private:
  std::vector<std::shared_ptr<TransformerDecoderLayer>> stack_;
};

// torch.nn.Transformer: an encoder of num_encoder_layers layers and a decoder of num_decoder_layers,
// each ending in a LayerNorm; every parameter of two or more dimensions is then drawn anew from
// xavier_uniform (PyTorch's _reset_parameters). PyTorch's custom_encoder and custom_decoder are not
// taken: build a TransformerEncoder and TransformerDecoder of your own instead.
class Transformer : public Module {
 public:
  explicit Transformer(int64_t d_model = 512, int64_t nhead = 8, int64_t num_encoder_layers = 6, int64_t num_decoder_layers = 6,
                       int64_t dim_feedforward = 2048, double dropout = 0.1, std::string activation = "relu", double layer_norm_eps = 1e-5,
                       bool batch_first = false, bool norm_first = false);
  Tensor forward(const Tensor&) override;  // an error: a Transformer needs the source and the target
  // src (S, N, E), tgt (T, N, E) (batch_first: (N, S, E), (N, T, E)); the output has tgt's shape.
  Tensor forward(const Tensor& src, const Tensor& tgt, std::optional<Tensor> src_mask = std::nullopt,
                 std::optional<Tensor> tgt_mask = std::nullopt, std::optional<Tensor> memory_mask = std::nullopt,
                 std::optional<Tensor> src_key_padding_mask = std::nullopt, std::optional<Tensor> tgt_key_padding_mask = std::nullopt,
                 std::optional<Tensor> memory_key_padding_mask = std::nullopt);
  // (sz, sz) float32: -inf above the diagonal, 0 on and below it, so position i attends to 0..i.
  static Tensor generate_square_subsequent_mask(int64_t sz, const std::string& device = "");
  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;
  int64_t d_model, nhead;
  bool batch_first;
};

// --- recurrent layers (frontend/rnn.cpp) ------------------------------------------------------
// torch.nn.RNN, LSTM and GRU: num_layers stacked layers, each run forward or in both directions
// (bidirectional: the two outputs concatenated on the feature axis), dropout on each layer's output
// but the last when training. Input (L, N, H_in), (N, L, H_in) with batch_first, or unbatched
// (L, H_in); states (num_layers * directions, N, H), unbatched (num_layers * directions, H), zeros
// when not given. Parameters have PyTorch's names, shapes and initialization (weight_ih_l0 (G*H, H_in),
// weight_hh_l0 (G*H, H), bias_ih_l0, bias_hh_l0, "_reverse" for the backward direction, all
// U(-1/sqrt(H), 1/sqrt(H))), the gates stacked in its order: LSTM i, f, g, o; GRU r, z, n; so state
// dicts carry over. The input's projection x W_ih^T is one matmul over the whole sequence; each step
// is then h W_hh^T and one fused elementwise kernel.
enum class RNNMode { RNN_TANH, RNN_RELU, LSTM, GRU };
struct RNNResult {
  Tensor output;             // the last layer's h at every step: (L, N, directions * H), or as the input's layout
  Tensor h_n;                // each layer's and direction's last h
  std::optional<Tensor> c_n;  // an LSTM's last cell states
};
// The layers as one function, as ATen's at::lstm / at::gru / at::rnn_tanh: `params` per layer, per
// direction: w_ih, w_hh, then (has_biases) b_ih, b_hh. c0 is an LSTM's only.
RNNResult rnn(RNNMode mode, const Tensor& input, std::optional<Tensor> h0, std::optional<Tensor> c0,
              const std::vector<Tensor>& params, bool has_biases, int64_t num_layers, double dropout, bool training,
              bool bidirectional, bool batch_first);

class RNNBase : public Module {
 public:
  Tensor forward(const Tensor& x) override { return forward(x, std::nullopt).output; }
  RNNResult forward(const Tensor& x, const std::optional<Tensor>& h0, const std::optional<Tensor>& c0 = std::nullopt);
  void flatten_parameters() {}  // PyTorch's cuDNN layout call: nothing to do here
  const std::vector<Tensor>& all_weights() const { return params_; }  // in rnn()'s order
  const RNNMode mode;
  const int64_t input_size, hidden_size, num_layers;
  const bool bias, batch_first, bidirectional;
  const double dropout;

 protected:
  RNNBase(RNNMode mode, const char* name, int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first,
          double dropout, bool bidirectional);

 private:
  std::vector<Tensor> params_;
};
class RNN : public RNNBase {
 public:
  // nonlinearity "tanh" or "relu"
  RNN(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, const std::string& nonlinearity = "tanh", bool bias = true,
      bool batch_first = false, double dropout = 0.0, bool bidirectional = false);
};
class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, bool bias = true, bool batch_first = false,
       double dropout = 0.0, bool bidirectional = false);
};
class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, bool bias = true, bool batch_first = false,
      double dropout = 0.0, bool bidirectional = false);
};

// torch.nn.RNNCell, LSTMCell, GRUCell: one step. x (N, H_in) or unbatched (H_in); h and c (N, H) or (H),
// zeros when not given. Parameters weight_ih (G*H, H_in), weight_hh (G*H, H), bias_ih, bias_hh.
class RNNCellBase : public Module {
 public:
  Tensor forward(const Tensor& x) override { return step(x, std::nullopt, std::nullopt).first; }
  // h' and, for an LSTMCell, c'.
  std::pair<Tensor, std::optional<Tensor>> step(const Tensor& x, std::optional<Tensor> h, std::optional<Tensor> c);
  Tensor weight_ih, weight_hh;
  std::optional<Tensor> bias_ih, bias_hh;
  const RNNMode mode;
  const int64_t input_size, hidden_size;

 protected:
  RNNCellBase(RNNMode mode, const char* name, int64_t input_size, int64_t hidden_size, bool bias);
};
class RNNCell : public RNNCellBase {
 public:
  RNNCell(int64_t input_size, int64_t hidden_size, bool bias = true, const std::string& nonlinearity = "tanh");
  using RNNCellBase::forward;
  Tensor forward(const Tensor& x, const Tensor& h) { return step(x, h, std::nullopt).first; }
};
class GRUCell : public RNNCellBase {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  using RNNCellBase::forward;
  Tensor forward(const Tensor& x, const Tensor& h) { return step(x, h, std::nullopt).first; }
};
class LSTMCell : public RNNCellBase {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  using RNNCellBase::forward;
  std::pair<Tensor, Tensor> forward(const Tensor& x, const std::pair<Tensor, Tensor>& hc) {
    auto [h, c] = step(x, hc.first, hc.second);
    return {h, *c};
  }
};

// U(-bound, bound) from kiln's seeded RNG: PyTorch's default initializations draw from it.
Tensor init_uniform(const Shape& shape, double bound);

// --- losses (mean over the batch unless said otherwise) --------------------------------------
// BatchMean (PyTorch's "batchmean"): the sum divided by the batch size (the first axis), kl_div's only.
enum class Reduction { Mean, Sum, None, BatchMean };
// logits (N, C) or (N, C, d1, ...) and integer class targets (N) or (N, d1, ...); targets equal to
// ignore_index count for nothing. A float target of the logits' shape holds class probabilities.
// weight (C): a weight per class; the mean is then over the weights of the targets, as in PyTorch.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing = 0.0, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::Mean, std::optional<Tensor> weight = std::nullopt);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index = -100, Reduction reduction = Reduction::Mean,
                std::optional<Tensor> weight = std::nullopt);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// weight broadcasts to the loss; pos_weight (broadcast along the last axis, one per class) weighs the
// positive term.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                                        std::optional<Tensor> weight = std::nullopt, std::optional<Tensor> pos_weight = std::nullopt);

// Probabilities in [0, 1] (not logits) against targets of the same shape; each log is clamped at
// -100, as PyTorch does, so a probability of exactly 0 or 1 gives a finite loss.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                            std::optional<Tensor> weight = std::nullopt);
// 0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere (beta 0: l1_loss).
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean, double beta = 1.0);
// 0.5 d^2 where |d| <= delta, delta (|d| - 0.5 delta) elsewhere.
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean, double delta = 1.0);

// KL(target || input) with input log-probabilities: target (log target - input) per element (0 where
// the target is 0); log_target: the target is given as log-probabilities. Use Reduction::BatchMean
// for the KL divergence per sample (PyTorch's recommendation; Mean divides by every element).
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean, bool log_target = false);
// max(d(a, p) - d(a, n) + margin, 0), d the pairwise_distance; swap: d(a, n) is min(d(a, n), d(p, n)).
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative, double margin = 1.0, double p = 2.0,
                           double eps = 1e-6, bool swap = false, Reduction reduction = Reduction::Mean);

// --- functional -----------------------------------------------------------------------------
// x1 . x2 / (max(|x1|, eps) max(|x2|, eps)) along dim, as PyTorch 1.13 computes it (the inputs
// broadcast; dim is of the broadcast shape).
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);
// x / max(|x|_p, eps) along dim (p = infinity: the largest magnitude).
Tensor normalize(const Tensor& x, double p = 2.0, int64_t dim = 1, double eps = 1e-12);
// |x1 - x2 + eps|_p along the last axis.
Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p = 2.0, double eps = 1e-6, bool keepdim = false);
// torch.nn.functional.dropout: zeroes each element with probability p and scales the rest by
// 1 / (1 - p) when training; x itself otherwise.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true);
// torch.nn.functional.unfold (im2col): (N, C, H, W) -> (N, C*KH*KW, L), L the number of windows.
Tensor unfold(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> dilation = {1, 1},
              std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> stride = {1, 1});

// torch.nn.functional.interpolate (frontend/interpolate.cpp) on (N, C, L) or (N, C, H, W):
//
//   nn::interpolate(x, nn::InterpolateOptions().size({64, 64}).mode("bilinear"));
//   nn::interpolate(x, nn::InterpolateOptions().scale_factor({2.0}).mode("nearest-exact"));
//
// Give size or scale_factor, each with one value for every spatial axis or one per axis. With
// scale_factor the output size is floor(in * scale), and source positions use 1/scale, as PyTorch does
// when recompute_scale_factor is unset (set it to use in/out instead). Modes, as PyTorch 1.13 computes
// them on the CPU (for NCHW-contiguous tensors):
//   "nearest"        input floor(i * scale) (PyTorch's legacy rule; any dtype)
//   "nearest-exact"  input floor((i + 0.5) * scale), the pixel whose center is nearest (any dtype)
//   "linear" (3-D), "bilinear" (4-D)  the two neighbours, weighted; an axis whose size is kept is copied
//   "bicubic" (4-D)  cubic convolution with a = -0.75 over 4 neighbours, clamped at the border
//   "area"           adaptive average pooling (the output size from a scale is always floor(in * scale))
// align_corners (linear, bilinear, bicubic only) maps the corner pixels' centers onto each other and
// ignores the scale for source positions. Interpolating modes need a float input; float16 and bfloat16
// compute in float32. Gradients are autograd's, the adjoint of the forward. libtorch 1.13's backward
// disagrees with its own forward when a scale_factor is given and an output size is the input's (nearest,
// bicubic) or twice it (nearest): it assumes a scale of 1 or 2 there; kiln's gradient does not.
struct InterpolateOptions {  // set with chained calls, as torch's C++ InterpolateFuncOptions
  InterpolateOptions& size(std::vector<int64_t> v) { size_ = std::move(v); return *this; }
  InterpolateOptions& scale_factor(std::vector<double> v) { scale_factor_ = std::move(v); return *this; }
  InterpolateOptions& mode(std::string m) { mode_ = std::move(m); return *this; }
  InterpolateOptions& align_corners(bool on) { align_corners_ = on; return *this; }
  InterpolateOptions& recompute_scale_factor(bool on) { recompute_scale_factor_ = on; return *this; }
  std::vector<int64_t> size_;
  std::vector<double> scale_factor_;
  std::string mode_ = "nearest";
  bool align_corners_ = false, recompute_scale_factor_ = false;
};
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);
// The (N, C, H, W) shorthand for InterpolateOptions().size({size[0], size[1]}).mode(mode).align_corners(align_corners).
Tensor interpolate(const Tensor& x, std::array<int64_t, 2> size, const std::string& mode = "nearest", bool align_corners = false);


// torch.nn.Upsample: interpolate as a module, with interpolate's options (size or scale_factor, mode,
// align_corners):
//
//   auto up = std::make_shared<nn::Upsample>(nn::InterpolateOptions().scale_factor({2.0}).mode("bilinear"));
class Upsample : public Module {
 public:
  explicit Upsample(InterpolateOptions options) : options(std::move(options)) {}
  Tensor forward(const Tensor& x) override { return interpolate(x, options); }
  InterpolateOptions options;
};

// torch.nn.functional.pixel_shuffle and pixel_unshuffle on (..., C, H, W), views: pixel_shuffle moves
// channel c*r*r + i*r + j to pixel (h*r + i, w*r + j) of channel c, (C*r*r, H, W) -> (C, H*r, W*r);
// pixel_unshuffle is its inverse. A factor that does not divide the channels (or the height and width)
// is an Error.
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);
class PixelShuffle : public Module {
 public:
  explicit PixelShuffle(int64_t upscale_factor) : upscale_factor(upscale_factor) {}
  Tensor forward(const Tensor& x) override { return pixel_shuffle(x, upscale_factor); }
  int64_t upscale_factor;
};
class PixelUnshuffle : public Module {
 public:
  explicit PixelUnshuffle(int64_t downscale_factor) : downscale_factor(downscale_factor) {}
  Tensor forward(const Tensor& x) override { return pixel_unshuffle(x, downscale_factor); }
  int64_t downscale_factor;
};

// --- padding (frontend/padding.cpp) ------------------------------------------------------------
// torch.nn.functional.pad. `pads` in PyTorch's order, from the last axis backwards: (left, right) pads
// the last axis, (left, right, top, bottom) the last two, and so on. Negative amounts crop. Modes:
//   "constant"   `value` (any input with at least pads.size() / 2 axes)
//   "reflect"    the input mirrored at each edge, the edge itself not repeated: each amount must be
//                less than the axis's size
//   "replicate"  the edge value repeated
//   "circular"   the input wrapped around, the other end's values: each amount at most the axis's size
//                (after any crop of the other side, which comes first)
// reflect, replicate and circular pad the last 1, 2 or 3 axes of an unbatched or batched input (2 amounts
// on a 2-D or 3-D input, 4 on 3-D or 4-D, 6 on 4-D or 5-D) and take no value; reflect and replicate
// must leave each axis at least 1 long. These rules are PyTorch 1.13's, but that 1.13 refuses an
// unbatched input in circular mode (later versions take it). Built from slices, flips and cat, so
// gradients are autograd's (each output's gradient added back to the element it copies).
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode = "constant", double value = 0.0);

// torch.nn's padding modules: pad with a fixed mode. `padding` is one amount for every side, or
// PyTorch's tuple: (left, right) for the 1d modules, (left, right, top, bottom) for the 2d ones.
class Pad : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::vector<int64_t> padding;  // PyTorch's order
  double value;                  // constant modes only

 protected:
  Pad(const char* name, const char* mode, std::vector<int64_t> padding, double value = 0.0)
      : padding(std::move(padding)), value(value), name_(name), mode_(mode) {}
  const char* name_;
  const char* mode_;
};
class ZeroPad2d : public Pad {
 public:
  explicit ZeroPad2d(int64_t p) : ZeroPad2d(std::array<int64_t, 4>{p, p, p, p}) {}
  explicit ZeroPad2d(std::array<int64_t, 4> p) : Pad("ZeroPad2d", "constant", {p.begin(), p.end()}) {}
};
class ConstantPad1d : public Pad {
 public:
  ConstantPad1d(int64_t p, double value) : ConstantPad1d(std::array<int64_t, 2>{p, p}, value) {}
  ConstantPad1d(std::array<int64_t, 2> p, double value) : Pad("ConstantPad1d", "constant", {p.begin(), p.end()}, value) {}
};
class ConstantPad2d : public Pad {
 public:
  ConstantPad2d(int64_t p, double value) : ConstantPad2d(std::array<int64_t, 4>{p, p, p, p}, value) {}
  ConstantPad2d(std::array<int64_t, 4> p, double value) : Pad("ConstantPad2d", "constant", {p.begin(), p.end()}, value) {}
};
class ReflectionPad1d : public Pad {
 public:
  explicit ReflectionPad1d(int64_t p) : ReflectionPad1d(std::array<int64_t, 2>{p, p}) {}
  explicit ReflectionPad1d(std::array<int64_t, 2> p) : Pad("ReflectionPad1d", "reflect", {p.begin(), p.end()}) {}
};
class ReflectionPad2d : public Pad {
 public:
  explicit ReflectionPad2d(int64_t p) : ReflectionPad2d(std::array<int64_t, 4>{p, p, p, p}) {}
  explicit ReflectionPad2d(std::array<int64_t, 4> p) : Pad("ReflectionPad2d", "reflect", {p.begin(), p.end()}) {}
};
class ReplicationPad1d : public Pad {
 public:
  explicit ReplicationPad1d(int64_t p) : ReplicationPad1d(std::array<int64_t, 2>{p, p}) {}
  explicit ReplicationPad1d(std::array<int64_t, 2> p) : Pad("ReplicationPad1d", "replicate", {p.begin(), p.end()}) {}
};
class ReplicationPad2d : public Pad {
 public:
  explicit ReplicationPad2d(int64_t p) : ReplicationPad2d(std::array<int64_t, 4>{p, p, p, p}) {}
  explicit ReplicationPad2d(std::array<int64_t, 4> p) : Pad("ReplicationPad2d", "replicate", {p.begin(), p.end()}) {}
};

}  // namespace kiln::nn
