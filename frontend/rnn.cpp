// Recurrent layers (nn.h): torch.nn.RNN, LSTM, GRU and their cells, as lazy tensor graphs. A sequence of
// L steps unrolls into L steps of graph; captured by a Jit, a training step replays them all at once.
#include "frontend/nn.h"

#include <cmath>

namespace kiln::nn {

namespace {

int64_t gate_count(RNNMode mode) {
  switch (mode) {
    case RNNMode::RNN_TANH:
    case RNNMode::RNN_RELU:
      return 1;
    case RNNMode::LSTM:
      return 4;
    case RNNMode::GRU:
      return 3;
  }
  return 1;
}

RNNMode rnn_mode(const std::string& nonlinearity, const char* op) {
  if (nonlinearity == "tanh") return RNNMode::RNN_TANH;
  if (nonlinearity == "relu") return RNNMode::RNN_RELU;
  throw Error(kiln::cat(op, ": nonlinearity \"", nonlinearity, "\" is not \"tanh\" or \"relu\""));
}

void check_sizes(const char* op, int64_t input_size, int64_t hidden_size) {
  if (input_size <= 0 || hidden_size <= 0)
    throw Error(kiln::cat(op, ": input_size ", input_size, " and hidden_size ", hidden_size, " must be positive"));
}

// One step from the input's projection gx = x W_ih^T + b_ih (N, G*H): h' and, for an LSTM, c'.
// PyTorch's cells: LSTM c' = f c + i g, h' = o tanh(c'); GRU n = tanh(gx_n + r (W_hn h + b_hn)),
// h' = (1 - z) n + z h; RNN h' = tanh or relu of gx + W_hh h + b_hh.
std::pair<Tensor, std::optional<Tensor>> cell(RNNMode mode, const Tensor& gx, const Tensor& h, const std::optional<Tensor>& c,
                                              const Tensor& w_hh, const std::optional<Tensor>& b_hh) {
  Tensor gh = h.matmul(w_hh.transpose(0, 1));
  if (b_hh) gh = gh + *b_hh;
  switch (mode) {
    case RNNMode::RNN_TANH:
      return {(gx + gh).tanh(), std::nullopt};
    case RNNMode::RNN_RELU:
      return {(gx + gh).relu(), std::nullopt};
    case RNNMode::LSTM: {
      std::vector<Tensor> g = (gx + gh).chunk(4, 1);
      Tensor c2 = g[1].sigmoid() * *c + g[0].sigmoid() * g[2].tanh();
      return {g[3].sigmoid() * c2.tanh(), c2};
    }
    case RNNMode::GRU: {
      std::vector<Tensor> a = gx.chunk(3, 1), b = gh.chunk(3, 1);
      Tensor r = (a[0] + b[0]).sigmoid(), z = (a[1] + b[1]).sigmoid();
      Tensor n = (a[2] + r * b[2]).tanh();
      return {(1.0 - z) * n + z * h, std::nullopt};
    }
  }
  throw InternalError("rnn: unknown mode");
}

// x W^T + b over the last axis.
Tensor project(const Tensor& x, const Tensor& w, const std::optional<Tensor>& b) {
  Tensor y = x.matmul(w.transpose(0, 1));
  return b ? y + *b : y;
}

void check_state(const char* op, const char* what, const Tensor& state, const Shape& want, const Tensor& input) {
  if (state.shape() != want)
    throw Error(kiln::cat(op, ": ", what, " has shape ", shape_str(state.shape()), ", expected ", shape_str(want), " for input ",
                          shape_str(input.shape())));
  if (state.dtype() != input.dtype() || state.device() != input.device())
    throw Error(kiln::cat(op, ": ", what, " is ", state.dtype().name(), " on ", state.device(), ", the input ", input.dtype().name(),
                          " on ", input.device(), "; they must match"));
}

// The layer's name in errors (LSTM, GRU, RNN), or its cell's (LSTMCell, ...).
std::string mode_name(RNNMode mode, bool cell = false) {
  std::string name = mode == RNNMode::LSTM ? "LSTM" : mode == RNNMode::GRU ? "GRU" : "RNN";
  return cell ? name + "Cell" : name;
}

}  // namespace

RNNResult rnn(RNNMode mode, const Tensor& input, std::optional<Tensor> h0, std::optional<Tensor> c0, const std::vector<Tensor>& params,
              bool has_biases, int64_t num_layers, double dropout, bool training, bool bidirectional, bool batch_first) {
  const std::string name = mode_name(mode);
  const char* op = name.c_str();
  const int64_t dirs = bidirectional ? 2 : 1, per = has_biases ? 4 : 2;
  if (num_layers <= 0) throw Error(kiln::cat(op, ": num_layers ", num_layers, " must be positive"));
  if (dropout < 0 || dropout > 1) throw Error(kiln::cat(op, ": dropout must be in [0, 1], got ", dropout));
  if (static_cast<int64_t>(params.size()) != num_layers * dirs * per)
    throw Error(kiln::cat(op, ": ", params.size(), " parameters given; ", num_layers, " layers x ", dirs, " directions need ",
                          num_layers * dirs * per, " (w_ih, w_hh", has_biases ? ", b_ih, b_hh" : "", " each)"));
  if (input.ndim() != 2 && input.ndim() != 3)
    throw Error(kiln::cat(op, ": expected a 3-D input (L, N, H_in)", batch_first ? " (batch_first: (N, L, H_in))" : "",
                          " or an unbatched 2-D (L, H_in), got shape ", shape_str(input.shape())));
  if (c0 && mode != RNNMode::LSTM) throw Error(kiln::cat(op, ": a cell state c0 was given; only an LSTM has one"));
  const int64_t G = gate_count(mode), H = params[1].shape().size() == 2 ? params[1].shape()[1] : 0;
  const bool unbatched = input.ndim() == 2;
  Tensor seq = unbatched ? input.unsqueeze(1) : batch_first ? input.transpose(0, 1) : input;
  const int64_t L = seq.shape()[0], N = seq.shape()[1];
  if (params[0].ndim() != 2 || params[0].shape()[1] != seq.shape()[2])
    throw Error(kiln::cat(op, ": input has ", seq.shape()[2], " features per step; the first layer's w_ih ", shape_str(params[0].shape()),
                          " expects (", G, " * hidden_size, input_size)"));
  // The states, batched: (layers * directions, N, H).
  Shape state_shape = unbatched ? Shape{num_layers * dirs, H} : Shape{num_layers * dirs, N, H};
  auto initial = [&](std::optional<Tensor>& s, const char* what) {
    if (!s) return Tensor::zeros({num_layers * dirs, N, H}, input.dtype(), input.device());
    check_state(op, what, *s, state_shape, input);
    return unbatched ? s->unsqueeze(1) : *s;
  };
  Tensor h_init = initial(h0, "h0");
  std::optional<Tensor> c_init;
  if (mode == RNNMode::LSTM) c_init = initial(c0, "c0");
  std::vector<Tensor> h_n, c_n;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    std::vector<Tensor> outputs;
    for (int64_t dir = 0; dir < dirs; ++dir) {
      const int64_t at = (layer * dirs + dir) * per, state = layer * dirs + dir;
      const Tensor &w_ih = params[static_cast<size_t>(at)], &w_hh = params[static_cast<size_t>(at + 1)];
      std::optional<Tensor> b_ih, b_hh;
      if (has_biases) b_ih = params[static_cast<size_t>(at + 2)], b_hh = params[static_cast<size_t>(at + 3)];
      if (w_ih.ndim() != 2 || w_ih.shape()[0] != G * H || w_ih.shape()[1] != seq.shape()[2] || w_hh.shape() != Shape{G * H, H})
        throw Error(kiln::cat(op, ": layer ", layer, " direction ", dir, ": w_ih ", shape_str(w_ih.shape()), " and w_hh ",
                              shape_str(w_hh.shape()), " do not fit ", G, " gates of hidden size ", H, " over ", seq.shape()[2], " inputs"));
      // The input's projection for every step at once: one (L N, H_in) x (H_in, G H) matmul.
      Tensor gx = project(seq.reshape({L * N, seq.shape()[2]}), w_ih, b_ih).reshape({L, N, G * H});
      Tensor h = h_init.shrink({{state, state + 1}, {0, N}, {0, H}}).reshape({N, H});
      std::optional<Tensor> c;
      if (c_init) c = c_init->shrink({{state, state + 1}, {0, N}, {0, H}}).reshape({N, H});
      std::vector<Tensor> steps(static_cast<size_t>(L));
      for (int64_t k = 0; k < L; ++k) {
        int64_t t = dir == 0 ? k : L - 1 - k;
        auto [h2, c2] = cell(mode, gx.shrink({{t, t + 1}, {0, N}, {0, G * H}}).reshape({N, G * H}), h, c, w_hh, b_hh);
        h = h2;
        c = c2;
        steps[static_cast<size_t>(t)] = h;
      }
      h_n.push_back(h);
      if (c) c_n.push_back(*c);
      outputs.push_back(L > 0 ? Tensor::stack(steps, 0) : Tensor::zeros({0, N, H}, input.dtype(), input.device()));
    }
    seq = dirs == 2 ? Tensor::cat(outputs, 2) : outputs[0];
    if (layer + 1 < num_layers) seq = nn::dropout(seq, dropout, training);
  }
  RNNResult r{seq, Tensor::stack(h_n, 0), std::nullopt};
  if (mode == RNNMode::LSTM) r.c_n = Tensor::stack(c_n, 0);
  if (unbatched) {
    r.output = r.output.squeeze(1);
    r.h_n = r.h_n.squeeze(1);
    if (r.c_n) r.c_n = r.c_n->squeeze(1);
  } else if (batch_first) {
    r.output = r.output.transpose(0, 1);
  }
  return r;
}

RNNBase::RNNBase(RNNMode mode, const char* name, int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first,
                 double dropout, bool bidirectional)
    : mode(mode), input_size(input_size), hidden_size(hidden_size), num_layers(num_layers), bias(bias), batch_first(batch_first),
      bidirectional(bidirectional), dropout(dropout) {
  check_sizes(name, input_size, hidden_size);
  if (num_layers <= 0) throw Error(kiln::cat(name, ": num_layers ", num_layers, " must be positive"));
  if (dropout < 0 || dropout > 1) throw Error(kiln::cat(name, ": dropout must be in [0, 1], got ", dropout));
  const int64_t G = gate_count(mode), dirs = bidirectional ? 2 : 1;
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (int64_t layer = 0; layer < num_layers; ++layer)
    for (int64_t dir = 0; dir < dirs; ++dir) {
      std::string suffix = kiln::cat("_l", layer, dir == 1 ? "_reverse" : "");
      int64_t in = layer == 0 ? input_size : hidden_size * dirs;
      params_.push_back(register_parameter("weight_ih" + suffix, init_uniform({G * hidden_size, in}, bound)));
      params_.push_back(register_parameter("weight_hh" + suffix, init_uniform({G * hidden_size, hidden_size}, bound)));
      if (bias) {
        params_.push_back(register_parameter("bias_ih" + suffix, init_uniform({G * hidden_size}, bound)));
        params_.push_back(register_parameter("bias_hh" + suffix, init_uniform({G * hidden_size}, bound)));
      }
    }
}

RNNResult RNNBase::forward(const Tensor& x, const std::optional<Tensor>& h0, const std::optional<Tensor>& c0) {
  return rnn(mode, x, h0, c0, params_, bias, num_layers, dropout, training(), bidirectional, batch_first);
}

RNN::RNN(int64_t input_size, int64_t hidden_size, int64_t num_layers, const std::string& nonlinearity, bool bias, bool batch_first,
         double dropout, bool bidirectional)
    : RNNBase(rnn_mode(nonlinearity, "RNN"), "RNN", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional) {}
LSTM::LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first, double dropout, bool bidirectional)
    : RNNBase(RNNMode::LSTM, "LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional) {}
GRU::GRU(int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first, double dropout, bool bidirectional)
    : RNNBase(RNNMode::GRU, "GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional) {}

RNNCellBase::RNNCellBase(RNNMode mode, const char* name, int64_t input_size, int64_t hidden_size, bool bias)
    : mode(mode), input_size(input_size), hidden_size(hidden_size) {
  check_sizes(name, input_size, hidden_size);
  const int64_t G = gate_count(mode);
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  weight_ih = register_parameter("weight_ih", init_uniform({G * hidden_size, input_size}, bound));
  weight_hh = register_parameter("weight_hh", init_uniform({G * hidden_size, hidden_size}, bound));
  if (bias) {
    bias_ih = register_parameter("bias_ih", init_uniform({G * hidden_size}, bound));
    bias_hh = register_parameter("bias_hh", init_uniform({G * hidden_size}, bound));
  }
}

std::pair<Tensor, std::optional<Tensor>> RNNCellBase::step(const Tensor& x, std::optional<Tensor> h, std::optional<Tensor> c) {
  const std::string name = mode_name(mode, true);
  const char* op = name.c_str();
  if ((x.ndim() != 1 && x.ndim() != 2) || x.shape().back() != input_size)
    throw Error(kiln::cat(op, ": expected an input (N, ", input_size, ") or (", input_size, "), got shape ", shape_str(x.shape())));
  if (c && mode != RNNMode::LSTM) throw Error(kiln::cat(op, ": a cell state was given; only an LSTMCell has one"));
  const bool unbatched = x.ndim() == 1;
  Tensor xb = unbatched ? x.unsqueeze(0) : x;
  const int64_t N = xb.shape()[0];
  Shape want = unbatched ? Shape{hidden_size} : Shape{N, hidden_size};
  auto state = [&](std::optional<Tensor>& s, const char* what) {
    if (!s) return Tensor::zeros({N, hidden_size}, x.dtype(), x.device());
    check_state(op, what, *s, want, x);
    return unbatched ? s->unsqueeze(0) : *s;
  };
  Tensor hb = state(h, "h");
  std::optional<Tensor> cb;
  if (mode == RNNMode::LSTM) cb = state(c, "c");
  auto [h2, c2] = cell(mode, project(xb, weight_ih, bias_ih), hb, cb, weight_hh, bias_hh);
  if (unbatched) {
    h2 = h2.squeeze(0);
    if (c2) c2 = c2->squeeze(0);
  }
  return {h2, c2};
}

RNNCell::RNNCell(int64_t input_size, int64_t hidden_size, bool bias, const std::string& nonlinearity)
    : RNNCellBase(rnn_mode(nonlinearity, "RNNCell"), "RNNCell", input_size, hidden_size, bias) {}
GRUCell::GRUCell(int64_t input_size, int64_t hidden_size, bool bias) : RNNCellBase(RNNMode::GRU, "GRUCell", input_size, hidden_size, bias) {}
LSTMCell::LSTMCell(int64_t input_size, int64_t hidden_size, bool bias)
    : RNNCellBase(RNNMode::LSTM, "LSTMCell", input_size, hidden_size, bias) {}

}  // namespace kiln::nn
