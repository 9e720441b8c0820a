// kiln::Jit: capture a step's kernels once, replay them (tinygrad's TinyJit, tf.function).
//
//   Jit train_step([&](const std::vector<Tensor>& in) {
//     Tensor loss = nn::cross_entropy(model->forward(in[0]), in[1]);
//     loss.backward();
//     opt.step({loss});                  // state is updated in place (Tensor::assign)
//     opt.zero_grad();
//     return std::vector<Tensor>{loss};
//   });
//   float l = train_step({x, y})[0].item<float>();   // same shapes each call: replayed from call 4 on
//
// Per input signature (each input's shape, dtype and device), the first three calls run the function
// as written: call 1 warms up (an optimizer creates its state), calls 2 and 3 are recorded and must
// agree: the same kernels in the same order, reading and writing the same state, uploading the same host
// data. Every later call replays call 3's launches with the new inputs' memory in place of the old:
// no graph is built, differentiated or scheduled and no cache is looked up. A new signature captures
// anew; a signature seen before replays its own capture.
//
// What a replay does and does not do:
// - State (parameters, optimizer moments, running statistics) must be updated in place, with assign():
//   a replay writes the same memory again. A step that replaces a tensor (`w = w - g`) is caught when the
//   recorded calls are compared (call 3 reads what call 2 created), and a tensor the capture updates
//   that nothing else holds any more (replaced since) stops the replay with an error.
// - Host values computed in the step must be host work (detail::host_work / host_tensor: the optimizer's
//   step count and learning rate, the RNG's counter), which a replay runs again. A C++ number baked
//   into the graph as a constant differs between the recorded calls when it changes there, which is an
//   error; one that changes only later cannot be seen by a replay: KILN_JIT_CHECK=1 runs the function on
//   every call and compares what it builds with the capture. Host checks that read data (class targets
//   in range) are host work too, so they still run on replay.
// - The returned tensors are the captured outputs' memory: a replay overwrites the previous call's
//   outputs, so reading an output of an earlier call is an error (read it before the next call).
// - Objects the step function uses (model, optimizer) must outlive the Jit.
// - KILN_JIT=0 runs every call eagerly; KILN_STRICT=1 makes compiling a kernel after the first replay
//   an error (deploy mode).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "frontend/tensor.h"

namespace kiln {

class Jit {
 public:
  using Step = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
  explicit Jit(Step step);
  ~Jit();
  Jit(const Jit&) = delete;
  Jit& operator=(const Jit&) = delete;

  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs);

  struct Stats {
    size_t eager_calls = 0, replays = 0, captures = 0;  // captures: signatures replayed so far
    size_t kernels_per_replay = 0;                       // kernel launches, of the last signature replayed
  };
  Stats stats() const { return stats_; }

  struct Capture;  // jit.cpp

 private:
  Step step_;
  std::map<std::string, std::unique_ptr<Capture>> captures_;  // by input signature
  Stats stats_;
};

}  // namespace kiln
