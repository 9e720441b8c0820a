// dist::ZeroRedundancyOptimizer (frontend/distributed.h): each rank steps its part of the flattened
// parameters with the wrapped optimizer, then the parts are all-gathered into every parameter.
#include <cstdlib>
#include <map>
#include <set>

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

// The wrapped optimizer's state, one entry per (name, part); names are the same for every part once
// the optimizer has stepped (Adam: exp_avg, exp_avg_sq), none before.
namespace {
std::set<std::string> state_names(const std::map<std::string, Tensor>& local) {
  std::set<std::string> names;
  for (const auto& [key, t] : local) names.insert(key.substr(0, key.rfind('.')));
  return names;
}
}  // namespace

std::map<std::string, Tensor> ZeroRedundancyOptimizer::state_dict() const {
  std::map<std::string, Tensor> local = local_->state_dict(), out;
  std::set<std::string> names = state_names(local);
  // Every rank must gather the same names; a rank without any part (more ranks than elements) has none.
  int64_t mine = static_cast<int64_t>(names.size());
  std::vector<int64_t> counts{mine};
  if (world_size() > 1) counts = allgather(Tensor::from_vector(counts, {1})).to_vector<int64_t>();
  for (size_t r = 0; r < counts.size(); ++r)
    if (counts[r] != mine)
      throw Error(cat("ZeroRedundancyOptimizer::state_dict: rank ", r, " holds ", counts[r], " kinds of optimizer state, rank ", rank(), " ", mine,
                      " (a rank holds no part of the parameters when there are more ranks than elements); use fewer ranks"));
  NoGradGuard no_grad;
  for (const Partition& part : partitions_) {
    const Tensor& first = params_[part.params[0]];
    for (const std::string& name : names) {
      Tensor piece = Tensor::zeros({0}, first.dtype(), first.device());
      if (part.local >= 0) {
        auto it = local.find(cat(name, ".", part.local));
        if (it == local.end()) throw InternalError(cat("ZeroRedundancyOptimizer::state_dict: part ", part.local, " has no \"", name, "\""));
        piece = it->second.detach().flatten();
      }
      Tensor full = world_size() == 1 ? piece : allgather(piece);
      int64_t at = 0;
      for (size_t i : part.params) {
        out.emplace(cat(name, ".", i), full.slice(0, at, at + params_[i].numel()).reshape(params_[i].shape()).contiguous().realize());
        at += params_[i].numel();
      }
    }
  }
  return out;
}

void ZeroRedundancyOptimizer::load_state_dict(const std::map<std::string, Tensor>& state, int64_t steps) {
  // The state of whole parameters (state_dict's form, the plain optimizer's too): each rank keeps the
  // slice of every family that is its part.
  std::map<std::string, std::map<size_t, Tensor>> by_name;
  for (const auto& [key, t] : state) {
    size_t dot = key.rfind('.');
    char* end = nullptr;
    size_t i = dot == std::string::npos ? params_.size() : static_cast<size_t>(std::strtoull(key.c_str() + dot + 1, &end, 10));
    if (i >= params_.size() || *end != '\0' || t.shape() != params_[i].shape())
      throw Error(cat("ZeroRedundancyOptimizer::load_state_dict: entry \"", key.substr(0, 80), "\" ", shape_str(t.shape()), " does not fit any of the ",
                      params_.size(), " parameters; load a state_dict() of an optimizer over the same parameters"));
    by_name[key.substr(0, dot)].emplace(i, t);
  }
  std::map<std::string, Tensor> local;
  NoGradGuard no_grad;
  for (const auto& [name, entries] : by_name)
    for (const Partition& part : partitions_) {
      std::vector<Tensor> flat;
      for (size_t i : part.params) {
        auto it = entries.find(i);
        if (it == entries.end())
          throw Error(cat("ZeroRedundancyOptimizer::load_state_dict: \"", name, "\" is given for some parameters but not parameter ", i,
                          "; load a complete state_dict()"));
        flat.push_back(it->second.to(params_[i].device()).cast(params_[i].dtype()).flatten());
      }
      if (part.local >= 0) local.emplace(cat(name, ".", part.local), Tensor::cat(flat).slice(0, part.first, part.first + part.count));
    }
  local_->load_state_dict(local, steps);
  steps_ = steps;
  // The parts are copies of the parameters made at construction: take the values loaded since (a
  // checkpoint loads the model first), or the next step would start from the old ones.
  std::vector<Tensor> parts = local_->params(), assigned;
  for (const Partition& part : partitions_) {
    if (part.local < 0) continue;
    std::vector<Tensor> flat;
    for (size_t i : part.params) flat.push_back(params_[i].detach().flatten());
    Tensor& mine = parts[static_cast<size_t>(part.local)];
    assigned.push_back(mine.assign(Tensor::cat(flat).slice(0, part.first, part.first + part.count)));
  }
  realize_all(assigned);
}

}  // namespace kiln::dist
