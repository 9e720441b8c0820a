// dist::ZeroRedundancyOptimizer (frontend/distributed.h): each rank steps its part of the flattened
// parameters with the wrapped optimizer, then the parts are all-gathered into every parameter.
#include <map>

#include "frontend/detail.h"
#include "frontend/distributed.h"

namespace kiln::dist {

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, const OptimizerFactory& make_optimizer)
    : Optimizer(std::move(params), 0) {
  if (!make_optimizer) throw Error("ZeroRedundancyOptimizer: the optimizer factory is empty; pass a function that builds the optimizer over its parts");
  // Families in order of their first parameter, so every rank lays them out alike.
  std::map<std::string, size_t> family_of;
  for (size_t i = 0; i < params_.size(); ++i) {
    std::string family = cat(params_[i].dtype().name(), "@", params_[i].device());
    auto it = family_of.find(family);
    if (it == family_of.end()) {
      it = family_of.emplace(family, partitions_.size()).first;
      partitions_.emplace_back();
    }
    Partition& part = partitions_[it->second];
    part.params.push_back(i);
    part.numel += params_[i].numel();
  }
  std::vector<Tensor> parts;
  {
    NoGradGuard no_grad;
    for (Partition& part : partitions_) {
      std::tie(part.first, part.count) = scatter_rows(part.numel, rank(), world_size());
      if (part.count == 0) continue;
      std::vector<Tensor> flat;
      for (size_t i : part.params) flat.push_back(params_[i].detach().flatten());
      // Its own buffer (contiguous, realized): the wrapped optimizer updates it in place.
      Tensor mine = Tensor::cat(flat).slice(0, part.first, part.first + part.count).contiguous().realize();
      mine.requires_grad_();
      part.local = static_cast<int>(parts.size());
      parts.push_back(mine);
    }
  }
  local_ = make_optimizer(parts);
  if (!local_) throw Error("ZeroRedundancyOptimizer: the optimizer factory returned null; return the optimizer built over the parts it is given");
  if (local_->params().size() != parts.size())
    throw Error(cat("ZeroRedundancyOptimizer: the factory's optimizer holds ", local_->params().size(), " parameters, not the ", parts.size(),
                    " parts it was given; build it over exactly those"));
  lr = local_->lr;
}

Tensor ZeroRedundancyOptimizer::update(size_t, const Tensor&, const Tensor&, const Tensor&) {
  throw InternalError("ZeroRedundancyOptimizer::update: its step() hands the parts to the wrapped optimizer instead");
}

void ZeroRedundancyOptimizer::step(std::vector<Tensor> also_realize) {
  // The step count, and the learning rate a schedule set on this wrapper, reach the wrapped optimizer.
  detail::host_work([this] {
    ++steps_;
    local_->lr = lr;
  });
  const std::vector<Tensor>& parts = local_->params();
  {
    NoGradGuard no_grad;
    for (const Partition& part : partitions_) {
      if (part.local < 0) continue;
      bool any = false;
      std::vector<Tensor> grads;
      for (size_t i : part.params) {
        std::optional<Tensor> g = params_[i].grad();
        any = any || g.has_value();
        grads.push_back(g ? g->detach().flatten() : params_[i].detach().flatten().zeros_like());
      }
      Tensor mine = parts[static_cast<size_t>(part.local)];
      mine.set_grad(any ? std::optional(Tensor::cat(grads).slice(0, part.first, part.first + part.count)) : std::nullopt);
    }
  }
  local_->step(std::move(also_realize));  // the parts, their state and also_realize, in one schedule
  local_->zero_grad();                     // the parts' gradients held the parameters' gradients alive

  // Every rank's parts, end to end, into the parameters. A world of one has its whole family in hand.
  std::vector<Tensor> updated;
  NoGradGuard no_grad;
  for (const Partition& part : partitions_) {
    const Tensor& first = params_[part.params[0]];
    Tensor mine = part.local >= 0 ? parts[static_cast<size_t>(part.local)].detach() : Tensor::zeros({0}, first.dtype(), first.device());
    Tensor full = world_size() == 1 ? mine : allgather(mine);
    int64_t at = 0;
    for (size_t i : part.params) {
      Tensor& p = params_[i];
      updated.push_back(p.assign(full.slice(0, at, at + p.numel()).reshape(p.shape())));
      at += p.numel();
    }
  }
  realize_all(updated);
}

void ZeroRedundancyOptimizer::load_state_dict(const std::map<std::string, Tensor>& state, int64_t steps) {
  local_->load_state_dict(state, steps);
  steps_ = steps;
}

}  // namespace kiln::dist
