#include "frontend/jit.h"

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <unordered_map>

#include "frontend/detail.h"
#include "frontend/realize.h"
#include "uop/config.h"
#include "uop/hash.h"
#include "uop/uop.h"

namespace kiln {

// --- host work (frontend/detail.h) ---------------------------------------------------------------

void detail::host_work(std::function<void()> work) {
  work();
  if (Recorder* r = current_recorder()) r->host_work(std::move(work));
}

void detail::check_on_host(const Tensor& values, std::function<void(const std::vector<int64_t>&)> check) {
  Tensor v = values.cast(dtypes::int64).reshape({-1}).contiguous().realize();
  auto found = storage_ptr(realized_buffer(v.uop()));
  auto n = static_cast<size_t>(v.numel());
  host_work([found, n, check = std::move(check)] {
    std::vector<int64_t> read(n);
    found->device->copy_out(read.data(), found->memory().raw, n * sizeof(int64_t));
    check(read);
  });
}

Tensor detail::host_tensor(Shape shape, DType dtype, const std::string& device, std::function<void(void* dst)> fill) {
  int64_t n = kiln::numel(shape);
  UOpPtr buffer = new_buffer(device_node(device), std::max<int64_t>(n, 1), dtype);
  std::shared_ptr<DeviceBuffer> storage = storage_ptr(buffer);
  size_t bytes = static_cast<size_t>(n) * dtype.itemsize();
  // One staging area per host tensor, kept across replays: fresh memory is slow to touch here
  // (NOTES.md), and a large one (an embedding table's gradient) would be fresh on every call.
  auto data = std::make_shared<std::vector<uint8_t>>(bytes);
  host_work([storage, bytes, data, fill = std::move(fill)] {
    fill(data->data());
    storage->ensure_allocated();
    if (bytes > 0) storage->device->copy_in(storage->raw, data->data(), bytes);
  });
  return Tensor(movement(Op::RESHAPE, buffer, shape), shape);
}

namespace {

using detail::movement;


// One call of the step, as it ran.
struct Recording final : Recorder {
  struct Event {
    CapturedLaunch launch;
    std::function<void()> work;  // set: host work, not a launch
  };
  std::vector<Event> events;
  std::vector<std::pair<size_t, uint64_t>> uploads;  // bytes and their hash
  void launch(CapturedLaunch l) override { events.push_back({std::move(l), {}}); }
  void upload(const std::shared_ptr<DeviceBuffer>&, const void* data, size_t bytes) override {
    uploads.emplace_back(bytes, hash_bytes(data, bytes));
  }
  void host_work(std::function<void()> work) override { events.push_back({{}, std::move(work)}); }
};

// Where the memory of a launch's argument comes from.
struct Role {
  enum class Kind { Input, State, Internal } kind = Kind::Internal;
  size_t index = 0;                     // Input: which input; Internal: numbered by first appearance
  const DeviceBuffer* state = nullptr;  // State: memory that existed before the call (parameters, moments)
  bool operator==(const Role&) const = default;
};

struct Resolved {
  std::vector<std::vector<Role>> roles;                    // per event (none for host work)
  std::vector<std::shared_ptr<DeviceBuffer>> internal;     // by Role::index
  std::vector<std::shared_ptr<DeviceBuffer>> state;        // each once
  std::vector<Role> outputs;
};

std::string describe(const DeviceBuffer& memory) { return cat(memory.bytes, " bytes on ", memory.device ? memory.device->spec().name : "?"); }

}  // namespace

struct Jit::Capture {
  size_t calls = 0;
  // Call 2, kept to compare with call 3.
  Recording previous;
  Resolved previous_roles;
  // The replay, once ready (from call 3).
  bool ready = false;
  struct Slot {
    bool is_input = false;
    size_t input = 0;
    DeviceBuffer* memory = nullptr;
  };
  struct Step {
    Program* program = nullptr;  // null and no work: host work over the slots (`host`: a copy, a scatter-add)
    LaunchDims dims;
    std::vector<int64_t> vals;   // its launch variables
    std::string name;            // the kernel's, for KILN_DEBUG=2's timed replay
    std::vector<Slot> slots;
    std::function<void()> work;
    std::function<void(const std::vector<DeviceBuffer*>&)> host;
  };
  std::vector<Step> steps;
  Resolved roles;  // the capture's, for KILN_JIT_CHECK
  Recording recording;
  std::vector<std::shared_ptr<DeviceBuffer>> written_internal;  // outputs of launches: a replay overwrites them
  struct Output {
    Role role;
    Shape shape;
    DType dtype;
    UOpPtr device;
  };
  std::vector<Output> outputs;
};

namespace {

Role role_of(const std::shared_ptr<DeviceBuffer>& storage, const std::vector<const DeviceBuffer*>& inputs, uint64_t first_serial,
             Resolved& r, std::unordered_map<const DeviceBuffer*, size_t>& internal_index) {
  std::shared_ptr<DeviceBuffer> memory = memory_owner(storage);
  for (size_t j = 0; j < inputs.size(); ++j)
    if (inputs[j] == memory.get()) return {Role::Kind::Input, j, nullptr};
  if (memory->serial < first_serial) {
    if (std::find(r.state.begin(), r.state.end(), memory) == r.state.end()) r.state.push_back(memory);
    return {Role::Kind::State, 0, memory.get()};
  }
  auto [it, fresh] = internal_index.try_emplace(memory.get(), r.internal.size());
  if (fresh) r.internal.push_back(memory);
  return {Role::Kind::Internal, it->second, nullptr};
}

Resolved resolve(const Recording& rec, const std::vector<const DeviceBuffer*>& inputs, uint64_t first_serial,
                 const std::vector<Tensor>& outputs) {
  Resolved r;
  std::unordered_map<const DeviceBuffer*, size_t> internal_index;
  for (const Recording::Event& e : rec.events) {
    r.roles.emplace_back();
    if (e.work) continue;
    for (const std::shared_ptr<DeviceBuffer>& s : e.launch.bufs) r.roles.back().push_back(role_of(s, inputs, first_serial, r, internal_index));
  }
  for (const Tensor& t : outputs) r.outputs.push_back(role_of(storage_ptr(detail::realized_buffer(t.uop())), inputs, first_serial, r, internal_index));
  return r;
}

std::vector<const DeviceBuffer*> input_memory(const std::vector<Tensor>& inputs) {
  std::vector<const DeviceBuffer*> out;
  for (const Tensor& t : inputs) out.push_back(&storage_of(detail::realized_buffer(t.uop())).memory());
  return out;
}

std::string slot_text(const CapturedLaunch& l, size_t slot) {
  return cat("kernel ", l.name, ", argument ", slot, " (", describe(*memory_owner(l.bufs[slot])), ")");
}

// The two recorded calls (or the capture and a checked call) must have done the same thing.
void compare(const Recording& a, const Resolved& ra, const Recording& b, const Resolved& rb, const char* a_name, const char* b_name) {
  const char* fix_constant =
      "a C++ value baked into the graph as a constant changes between calls (pass it as an input tensor, or compute it "
      "as host work: detail::host_tensor), or the step takes different paths on different calls";
  if (a.events.size() != b.events.size())
    throw Error(cat("jit: ", a_name, " ran ", a.events.size(), " launches and host steps but ", b_name, " ran ", b.events.size(), ": ",
                    fix_constant));
  for (size_t i = 0; i < a.events.size(); ++i) {
    const Recording::Event &ea = a.events[i], &eb = b.events[i];
    if (bool(ea.work) != bool(eb.work) || ea.launch.ast != eb.launch.ast || ea.launch.program != eb.launch.program ||
        ea.launch.vals != eb.launch.vals || (!ea.launch.program && ea.launch.name != eb.launch.name))
      throw Error(cat("jit: launch ", i, " differs between ", a_name, " (", ea.work ? "host work" : ea.launch.name, ") and ", b_name, " (",
                      eb.work ? "host work" : eb.launch.name, "): ", fix_constant));
    for (size_t k = 0; k < ra.roles[i].size(); ++k) {
      const Role &x = ra.roles[i][k], &y = rb.roles[i][k];
      if (x == y) continue;
      if (y.kind == Role::Kind::State && x.kind != Role::Kind::State)
        throw Error(cat("jit: ", b_name, " reads memory that ", a_name, " created (", slot_text(eb.launch, k),
                        "): the step replaces a tensor (t = f(t)) instead of updating it in place (t.assign(f(t))), so a replay "
                        "would read a stale value; update state with assign()"));
      throw Error(cat("jit: ", slot_text(eb.launch, k), " is not the same tensor in ", a_name, " and ", b_name,
                      ": state must be updated in place with assign() and inputs passed as the step's inputs"));
    }
  }
  if (a.uploads != b.uploads)
    throw Error(cat("jit: the host data the step uploads (Tensor::from_vector/from_raw inside the step) differs between ", a_name, " and ",
                    b_name, "; a replay would reuse the first values: pass that data as an input of the step"));
  if (ra.outputs != rb.outputs)
    throw Error(cat("jit: the step's outputs come from different places in ", a_name, " and ", b_name, "; return the same tensors each call"));
}

std::string signature(const std::vector<Tensor>& inputs) {
  std::string s;
  for (const Tensor& t : inputs) s += cat(shape_str(t.shape()), " ", t.dtype().name(), " ", t.device(), "; ");
  return s;
}

// Call 3 becomes the replay: each launch with its arguments' memory resolved once. Internal memory
// (activations, gradients) is allocated for good, one buffer each; state is the tensors' own memory.
void finalize(Jit::Capture& c, Recording rec, Resolved r, const std::vector<Tensor>& out) {
  for (const std::shared_ptr<DeviceBuffer>& m : r.internal) m->ensure_allocated();
  for (size_t i = 0; i < rec.events.size(); ++i) {
    Recording::Event& e = rec.events[i];
    Jit::Capture::Step step;
    step.work = e.work;
    step.program = e.launch.program;
    step.host = e.launch.host;
    step.dims = e.launch.dims;
    step.vals = e.launch.vals;
    step.name = e.launch.name;
    for (size_t k = 0; k < e.launch.bufs.size(); ++k) {
      const Role& role = r.roles[i][k];
      if (role.kind == Role::Kind::Input) step.slots.push_back({true, role.index, nullptr});
      else step.slots.push_back({false, 0, memory_owner(e.launch.bufs[k]).get()});
    }
    if (!e.work && r.roles[i][0].kind == Role::Kind::Internal) {
      std::shared_ptr<DeviceBuffer> written = r.internal[r.roles[i][0].index];
      if (std::find(c.written_internal.begin(), c.written_internal.end(), written) == c.written_internal.end())
        c.written_internal.push_back(written);
    }
    e.launch.bufs.clear();  // the capture holds memory once, in r (the replaced-state check counts holders)
    c.steps.push_back(std::move(step));
  }
  for (size_t j = 0; j < out.size(); ++j) c.outputs.push_back({r.outputs[j], out[j].shape(), out[j].dtype(), device_node(out[j].device())});
  c.recording = std::move(rec);
  c.roles = std::move(r);
  c.previous = {};
  c.previous_roles = {};
  c.ready = true;
}

// KILN_DEBUG=2's profile of one replay: the launches' total, then each kernel's time (summed over its
// launches), slowest first.
void print_replay_times(const std::vector<std::pair<double, const std::string*>>& times) {
  std::map<std::string, std::pair<double, int>> by_name;  // seconds and launches
  double total = 0;
  for (const auto& [seconds, name] : times) {
    by_name[*name].first += seconds;
    ++by_name[*name].second;
    total += seconds;
  }
  std::vector<std::tuple<double, int, const std::string*>> order;
  for (const auto& [name, entry] : by_name) order.emplace_back(entry.first, entry.second, &name);
  std::sort(order.begin(), order.end(), std::greater<>());
  std::ostringstream out;
  out << std::fixed << std::setprecision(3) << "kiln: jit replay: " << times.size() << " launches, " << total * 1e3 << " ms\n";
  for (const auto& [seconds, launches, name] : order)
    out << "kiln:   " << std::setw(9) << seconds * 1e3 << " ms " << std::setw(5) << std::setprecision(1) << 100 * seconds / total
        << "%  x" << launches << "  " << *name << std::setprecision(3) << "\n";
  std::cerr << out.str();
}

std::vector<Tensor> replay(Jit::Capture& c, const std::vector<Tensor>& inputs) {
  for (const std::shared_ptr<DeviceBuffer>& m : c.roles.state)
    if (m.use_count() == 1)
      throw Error(cat("jit: the captured step updates a tensor (", describe(*m), ") that no tensor holds any more: it was replaced "
                      "(t = ...) or destroyed since the capture, so a replay would update a copy nobody reads; update it in place "
                      "with assign(), or build a new Jit"));
  std::vector<std::shared_ptr<DeviceBuffer>> in;
  for (const Tensor& t : inputs) {
    in.push_back(memory_owner(storage_ptr(detail::realized_buffer(t.uop()))));
    in.back()->ensure_allocated();
  }
  auto memory = [&](const Jit::Capture::Slot& slot) { return slot.is_input ? in[slot.input].get() : slot.memory; };
  std::vector<RawBuffer> raws;
  // KILN_DEBUG=2: each launch timed (synchronized), and the step's kernels listed slowest first.
  bool timed = config().debug >= 2;
  std::vector<std::pair<double, const std::string*>> times;
  for (Jit::Capture::Step& step : c.steps) {
    if (step.work) {
      step.work();
    } else if (!step.program) {
      std::vector<DeviceBuffer*> slots;
      for (const Jit::Capture::Slot& slot : step.slots) slots.push_back(memory(slot));
      step.host(slots);
    } else {
      raws.clear();
      for (const Jit::Capture::Slot& slot : step.slots) raws.push_back(memory(slot)->raw);
      double seconds = step.program->launch(raws, step.vals, step.dims, timed);
      if (timed) times.emplace_back(seconds, &step.name);
    }
  }
  if (timed) print_replay_times(times);
  // The previous call's activations and outputs are overwritten: tensors still holding them go stale.
  for (const std::shared_ptr<DeviceBuffer>& m : c.written_internal) ++m->latest;
  std::vector<Tensor> out;
  for (const Jit::Capture::Output& o : c.outputs) {
    std::shared_ptr<DeviceBuffer> m;
    switch (o.role.kind) {
      case Role::Kind::Input: m = in[o.role.index]; break;
      case Role::Kind::Internal: m = c.roles.internal[o.role.index]; break;
      case Role::Kind::State:
        for (const std::shared_ptr<DeviceBuffer>& s : c.roles.state)
          if (s.get() == o.role.state) m = s;
        break;
    }
    UOpPtr node = current_value(m, o.device, kiln::numel(o.shape), o.dtype);
    out.push_back(Tensor(movement(Op::RESHAPE, node, o.shape), o.shape));
  }
  return out;
}

}  // namespace

Jit::Jit(Step step) : step_(std::move(step)) {}
Jit::~Jit() = default;

std::vector<Tensor> Jit::operator()(const std::vector<Tensor>& given) {
  std::vector<Tensor> inputs = given;
  for (Tensor& t : inputs)
    if (!detail::realized_buffer(t.uop()) || storage_of(detail::realized_buffer(t.uop())).stale()) t = t.contiguous();
  realize_all(inputs);
  if (!config().jit) {
    ++stats_.eager_calls;
    return step_(inputs);
  }
  std::unique_ptr<Capture>& slot = captures_[signature(inputs)];
  if (!slot) slot = std::make_unique<Capture>();
  Capture& c = *slot;
  if (c.ready && !config().jit_check) {
    ++stats_.replays;
    stats_.kernels_per_replay = static_cast<size_t>(std::count_if(c.steps.begin(), c.steps.end(), [](const Capture::Step& s) { return s.program != nullptr; }));
    return replay(c, inputs);
  }

  Recording rec;
  uint64_t first_serial = next_buffer_serial();
  std::vector<const DeviceBuffer*> in = input_memory(inputs);
  Recorder* outer = set_recorder(&rec);
  std::vector<Tensor> out;
  try {
    out = step_(inputs);
    realize_all(out, /*with_pending_assigns=*/true);
  } catch (...) {
    set_recorder(outer);
    throw;
  }
  set_recorder(outer);
  ++stats_.eager_calls;
  ++c.calls;
  Resolved r = resolve(rec, in, first_serial, out);
  if (c.ready) {  // KILN_JIT_CHECK: this call must have built what the capture replays
    compare(c.recording, c.roles, rec, r, "the capture", "this call");
    return out;
  }
  if (c.calls == 1) return out;  // the warmup: optimizers create their state
  if (c.calls == 2) {
    c.previous = std::move(rec);
    c.previous_roles = std::move(r);
    return out;
  }
  compare(c.previous, c.previous_roles, rec, r, "call 2", "call 3");
  finalize(c, std::move(rec), std::move(r), out);
  ++stats_.captures;
  forbid_compiles_if_strict();
  return out;
}

}  // namespace kiln
