#include "frontend/checkpoint.h"

#include "frontend/safetensors.h"

namespace kiln {

namespace {
constexpr const char* kModel = "model.";
constexpr const char* kOptim = "optim.";

const std::string& need(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& path) {
  auto it = meta.find(key);
  if (it == meta.end())
    throw Error(kiln::cat("load_checkpoint: ", path, " has no \"", key, "\" in its metadata; it is not a kiln training checkpoint"));
  return it->second;
}

template <typename T>
T number(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& path) {
  const std::string& text = need(meta, key, path);
  try {
    size_t used = 0;
    T v;
    if constexpr (std::is_same_v<T, uint64_t>) v = std::stoull(text, &used);
    else v = std::stoll(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error(kiln::cat("load_checkpoint: ", path, ": metadata \"", key, "\" = \"", text, "\" is not an integer"));
}
}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& opt, const TrainingState& st) {
  std::map<std::string, Tensor> tensors;
  for (auto& [name, t] : model.state_dict()) tensors.emplace(kModel + name, t);
  for (auto& [name, t] : opt.state_dict()) tensors.emplace(kOptim + name, t);
  std::map<std::string, std::string> meta = st.extra;
  meta["kiln.format"] = "training-checkpoint-1";
  meta["step"] = std::to_string(st.step);
  meta["optim.steps"] = std::to_string(opt.steps());
  meta["optim.lr"] = kiln::cat(opt.lr);
  meta["data.seed"] = std::to_string(st.data.seed);
  meta["data.epoch"] = std::to_string(st.data.epoch);
  meta["data.position"] = std::to_string(st.data.position);
  meta["rng.seed"] = std::to_string(st.rng[0]);
  meta["rng.counter"] = std::to_string(st.rng[1]);
  meta["scheduler.count"] = std::to_string(st.scheduler_count);
  save_safetensors(path, tensors, meta);
}

TrainingState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& opt) {
  SafetensorsData file = load_safetensors(path);
  const auto& meta = file.metadata;
  if (need(meta, "kiln.format", path) != "training-checkpoint-1")
    throw Error(kiln::cat("load_checkpoint: ", path, " has format \"", meta.at("kiln.format"), "\"; this kiln reads training-checkpoint-1"));
  std::map<std::string, Tensor> model_state, optim_state;
  for (auto& [name, t] : file.tensors) {
    if (name.rfind(kModel, 0) == 0) model_state.emplace(name.substr(6), t);
    else if (name.rfind(kOptim, 0) == 0) optim_state.emplace(name.substr(6), t);
    else throw Error(kiln::cat("load_checkpoint: ", path, ": unexpected tensor \"", name, "\" (neither model. nor optim.)"));
  }
  model.load_state_dict(model_state, true);
  opt.load_state_dict(optim_state, number<int64_t>(meta, "optim.steps", path));
  TrainingState st;
  st.step = number<int64_t>(meta, "step", path);
  st.data = {number<uint64_t>(meta, "data.seed", path), number<int64_t>(meta, "data.epoch", path), number<int64_t>(meta, "data.position", path)};
  st.rng = {number<uint64_t>(meta, "rng.seed", path), number<uint64_t>(meta, "rng.counter", path)};
  st.scheduler_count = number<int64_t>(meta, "scheduler.count", path);
  for (auto& [k, v] : meta) st.extra.emplace(k, v);
  Tensor::set_rng_state(st.rng);
  return st;
}

}  // namespace kiln
