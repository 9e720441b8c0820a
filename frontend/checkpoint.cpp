#include "frontend/checkpoint.h"

#include <cctype>
#include <charconv>
#include <cstdint>

#include "frontend/distributed.h"
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

// Steps, epochs and positions stay far enough below INT64_MAX that the next one (+1) cannot overflow.
constexpr uint64_t kMaxCount = uint64_t{1} << 62;

// A count or seed save_checkpoint wrote: decimal digits only (std::stoll would take "-5", " 5" or
// "+5", and std::stoull would wrap "-5" to 18446744073709551611), at most `max`.
uint64_t count(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& path,
               uint64_t max = kMaxCount) {
  const std::string& text = need(meta, key, path);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])) || ec != std::errc() || end != text.data() + text.size() || v > max)
    throw Error(kiln::cat("load_checkpoint: ", path, ": metadata \"", key, "\" = \"", text.substr(0, 40), text.size() > 40 ? "..." : "",
                          "\" is not a whole number in 0..", max, "; the file was not written by kiln's save_checkpoint "
                          "(or was edited): write it again with --save"));
  return v;
}
int64_t signed_count(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& path) {
  return static_cast<int64_t>(count(meta, key, path));
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
  // Under mpirun every rank has called opt.state_dict() above (ZeRO-1 gathers it there); rank 0 writes.
  if (dist::rank() != 0) return;
  save_safetensors(path, tensors, meta);
}

TrainingState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& opt) {
  SafetensorsData file = load_safetensors(path);
  const auto& meta = file.metadata;
  if (need(meta, "kiln.format", path) != "training-checkpoint-1")
    throw Error(kiln::cat("load_checkpoint: ", path, " has format \"", meta.at("kiln.format").substr(0, 60),
                          "\"; this kiln reads training-checkpoint-1"));
  std::map<std::string, Tensor> model_state, optim_state;
  for (auto& [name, t] : file.tensors) {
    if (name.rfind(kModel, 0) == 0) model_state.emplace(name.substr(6), t);
    else if (name.rfind(kOptim, 0) == 0) optim_state.emplace(name.substr(6), t);
    else throw Error(kiln::cat("load_checkpoint: ", path, ": unexpected tensor \"", name, "\" (neither model. nor optim.)"));
  }
  // Every number is read before anything is loaded: a bad one leaves the model and optimizer untouched.
  int64_t optim_steps = signed_count(meta, "optim.steps", path);
  TrainingState st;
  st.step = signed_count(meta, "step", path);
  st.data = {count(meta, "data.seed", path, UINT64_MAX), signed_count(meta, "data.epoch", path), signed_count(meta, "data.position", path)};
  st.rng = {count(meta, "rng.seed", path, UINT64_MAX), count(meta, "rng.counter", path, UINT64_MAX)};
  st.scheduler_count = signed_count(meta, "scheduler.count", path);
  // The optimizer checks each state tensor's shape against its parameter, not its dtype.
  for (const auto& [name, t] : optim_state) {
    size_t dot = name.rfind('.');
    if (dot == std::string::npos) continue;  // a name that fits no parameter: load_state_dict names it
    uint64_t i = 0;
    const char* end = name.data() + name.size();
    if (std::from_chars(name.data() + dot + 1, end, i).ptr != end || i >= opt.params().size()) continue;
    if (t.dtype() != opt.params()[i].dtype())
      throw Error(kiln::cat("load_checkpoint: ", path, ": optimizer state \"", name.substr(0, 80), "\" is ", t.dtype().name(),
                            " but parameter ", i, " is ", opt.params()[i].dtype().name(), "; write the checkpoint again with --save"));
  }
  try {
    model.load_state_dict(model_state, true);
    opt.load_state_dict(optim_state, optim_steps);
  } catch (const Error& e) {  // which file, and what to do, beside what did not fit
    throw Error(kiln::cat("load_checkpoint: ", path, ": ", e.what(), ". The checkpoint does not fit this model and optimizer: resume with the "
                          "model and options it was saved with, or start without it"));
  }
  for (auto& [k, v] : meta) st.extra.emplace(k, v);
  Tensor::set_rng_state(st.rng);
  return st;
}

}  // namespace kiln
