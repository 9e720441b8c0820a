// Training checkpoints: model, optimizer, step, data position and RNG state in one safetensors file.
//
//   save_checkpoint("run.safetensors", *model, opt, {step, it.state(), Tensor::rng_state(), sched.count()});
//   TrainingState st = load_checkpoint("run.safetensors", *model, opt);   // also restores the RNG
//   it.set_state(st.data); sched.set_count(st.scheduler_count);
//
// Under mpirun save_checkpoint is a collective (every rank calls it: a ZeRO-1 optimizer gathers its
// state) and rank 0 writes the file, atomically (temp file + rename). The optimizer state is whole
// parameters', so the file does not depend on the number of ranks.
//
// Resuming from a checkpoint continues bit for bit like a run that was never interrupted: every value
// that decides the next step is in the file, stored exactly.
#pragma once
#include <array>
#include <map>
#include <string>

#include "frontend/data.h"
#include "frontend/nn.h"
#include "frontend/optim.h"

namespace kiln {

struct TrainingState {
  int64_t step = 0;
  BatchIterator::State data{0, 0, 0};
  std::array<uint64_t, 2> rng{0, 0};
  int64_t scheduler_count = 0;
  std::map<std::string, std::string> extra;  // anything else the caller wants to keep (flags, ...)
};

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& opt, const TrainingState& state);
// Loads into model and opt (strict: every entry must fit) and restores the RNG; returns the rest.
TrainingState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& opt);

}  // namespace kiln
