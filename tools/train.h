// `kiln train mnist`: a small CNN on Fashion-MNIST (or MNIST), from one binary.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "frontend/nn.h"

namespace kiln {

struct TrainOptions {
  std::string dataset = "fashion";  // fashion | mnist
  std::string data_dir;             // default: where the Debian package / make deps put it
  int64_t epochs = 3;
  int64_t batch_size = 128;
  double lr = 3e-3;
  uint64_t seed = 0;
  int64_t max_steps = -1;           // stop after this many steps in total (for tests and quick runs)
  std::string save, resume;         // checkpoint paths
  int64_t save_every = 0;           // also commit --save every this many steps (0: only at the end)
  bool eval = true;
  bool jit = true;                  // capture the step once and replay it (kiln::Jit); --no-jit runs it eagerly
  bool zero = false;                // ZeRO-1: AdamW's state partitioned across the MPI ranks (dist::ZeroRedundancyOptimizer)
};

extern const char* const kTrainHelp;
// The demo CNN (its architecture is in kTrainHelp), with its forward FLOPs per 28x28 image.
std::shared_ptr<nn::Sequential> make_mnist_cnn();
double mnist_cnn_forward_flops();
void run_train(const TrainOptions& options);

}  // namespace kiln
