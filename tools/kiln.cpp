// kiln: the command line.
//
//   kiln devices                  every registered device: available or why not, and its spec
//   kiln bench --quick            times kiln beside C/OpenMP and OpenBLAS references (`kiln bench --help`)
//   kiln --device CPU devices     global flags override the KILN_* environment (see `kiln --help`)
//
// A command is one entry in commands(): its name, its help line, and a function that adds its options to
// its CLI11 subcommand and returns what to run once the command line is parsed and the global flags are
// applied. Exit status: 0 success, 1 a kiln error ("kiln: error: ..." on stderr), 2 a bad command line.
#include <CLI/CLI.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench.h"
#include "devices_check.h"
#include "train.h"
#include "devices/device.h"
#include "uop/config.h"
#include "uop/error.h"

namespace kiln {

std::function<void()> setup_search(CLI::App& command);  // tools/search_cmd.cpp
std::function<void()> setup_cache(CLI::App& command);   // tools/cache_cmd.cpp

namespace {

using Run = std::function<void()>;

struct Command {
  const char* name;
  const char* help;
  Run (*setup)(CLI::App& command);  // adds the command's options; the returned Run may read them
};

std::string dims_text(const std::array<int64_t, 3>& dims) {
  auto one = [](int64_t d) { return d == INT64_MAX ? std::string("any") : std::to_string(d); };
  return cat(one(dims[0]), " x ", one(dims[1]), " x ", one(dims[2]));
}

std::string bytes_text(int64_t bytes) {
  if (bytes == INT64_MAX) return "no limit";
  if (bytes == 0) return "none";
  if (bytes >= (int64_t(1) << 30)) return cat(bytes >> 30, " GiB");
  if (bytes >= (int64_t(1) << 10)) return cat(bytes >> 10, " KiB");
  return cat(bytes, " bytes");
}

void print_spec(const DeviceSpec& spec) {
  auto field = [](const char* name, const std::string& value) {
    std::cout << "    " << name << std::string(18 - std::string(name).size(), ' ') << value << '\n';
  };
  field("arch", spec.arch);
  field("compiler", spec.compiler);
  if (!spec.note.empty()) field("note", spec.note);
  field("language", language_name(spec.lang));
  field("threads", std::to_string(spec.threads));
  field("max global dims", dims_text(spec.max_global_dims));
  field("max local", spec.max_local == 0 ? "no local dims" : cat(spec.max_local, " (", dims_text(spec.max_local_dims), ")"));
  field("shared memory", bytes_text(spec.shared_bytes));
  field("max buffer", bytes_text(spec.max_buffer_bytes));
  field("float16 / float64", cat(spec.has_fp16 ? "yes" : "no", " / ", spec.has_fp64 ? "yes" : "no"));
}

Run setup_devices(CLI::App& command) {
  auto check = std::make_shared<bool>(false);
  command.add_flag("--check", *check, "run a quick conformance check and a roofline probe (bandwidth, arithmetic, latency) on each available device, with a verdict");
  return [check] {
    if (*check) return run_devices_check(measure_machine_limits(CReference::build()));
    for (const DeviceStatus& status : probe_devices()) {
      if (!status.available) {
        std::cout << status.name << "  not available: " << status.reason << '\n';
        continue;
      }
      std::cout << status.name << "  available\n";
      print_spec(get_device(status.name).spec());
    }
    std::string chosen = default_device_name();  // throws for an unknown KILN_DEVICE, naming the registered ones
    std::cout << "default device: " << chosen << " (KILN_DEVICE or --device to change)\n";
  };
}

Run setup_bench(CLI::App& command) {
  auto options = std::make_shared<BenchOptions>();
  command.add_flag("--quick", options->quick, "fewer runs and a smaller matmul: under 20 s instead of under 2 minutes");
  command.add_flag("--json", options->json, "print the report as JSON instead of one line per workload");
  command.add_option("--only", options->only, "only the workloads whose name contains this (kernels: \"realize\"; train: a model key mlp, torch_cnn, demo_cnn, transformer, resnet, lstm; sweep: a group and name, \"conv dx N8\")");
  command.add_option("--omp-child", options->omp_child)->group("");  // internal: kiln bench train runs each model in children
  command.add_flag("--dist-child", options->dist_child)->group("");  // internal: kiln bench dist's ranks under mpirun
  auto suite = std::make_shared<std::string>("kernels");
  command.add_option("suite", *suite,
                     "kernels (default): the workloads below; train: whole training steps beside libtorch; sweep: matmul layouts, "
                     "attention and conv2d forward/backward shapes against the FMA peak; compile: the first training step and "
                     "two searches with empty caches, in-process LLVM beside a clang process per kernel; dist: data-parallel training on 1 and 2 MPI "
                     "ranks and kiln's allreduce beside a raw MPI_Allreduce (starts mpirun -np 2 of itself)")
      ->check(CLI::IsMember({"kernels", "train", "sweep", "compile", "dist"}));
  command.footer(kBenchHelp);
  return [options, suite] {
    if (*suite == "train") run_bench_train(*options);
    else if (*suite == "sweep") run_bench_sweep(*options);
    else if (*suite == "compile") run_bench_compile(*options);
    else if (*suite == "dist") run_bench_dist(*options);
    else run_bench(*options);
  };
}

Run setup_train(CLI::App& command) {
  auto o = std::make_shared<TrainOptions>();
  auto what = std::make_shared<std::string>();
  command.add_option("model", *what, "what to train: mnist (a small CNN on Fashion-MNIST or MNIST)")->required()->check(CLI::IsMember({"mnist"}));
  command.add_option("--dataset", o->dataset, "fashion (default) or mnist")->check(CLI::IsMember({"fashion", "mnist"}));
  command.add_option("--data-dir", o->data_dir, "folder with the four IDX files (raw or .gz)");
  command.add_option("--epochs", o->epochs, "passes over the training set")->capture_default_str();
  command.add_option("--batch-size", o->batch_size, "samples per step")->capture_default_str();
  command.add_option("--lr", o->lr, "peak learning rate of AdamW (warmup, then cosine decay)")->capture_default_str();
  command.add_option("--seed", o->seed, "seed of the initialization, the shuffling and dropout")->capture_default_str();
  command.add_option("--steps", o->max_steps, "stop after this many steps in total (default: all epochs)");
  command.add_option("--save", o->save,
                     "write a checkpoint (model, optimizer, step, data position, RNG) at the end, atomically (temp file + rename); "
                     "under mpirun rank 0 writes it");
  command.add_option("--save-every", o->save_every, "also commit the --save checkpoint every N steps (replacing the last one)");
  command.add_option("--resume", o->resume, "continue from a checkpoint written by --save, with the same or another number of MPI ranks");
  command.add_flag("!--no-eval", o->eval, "skip the test-set evaluation");
  command.add_flag("--zero", o->zero, "partition AdamW's moments across the MPI ranks (ZeRO-1) and print the optimizer state per rank");
  command.add_flag("!--no-jit", o->jit, "run every step eagerly instead of capturing it once and replaying it (as KILN_JIT=0)");
  command.footer(kTrainHelp);
  return [o, what] { run_train(*o); };  // CLI11 writes into *what while parsing: keep it alive
}

const std::vector<Command>& commands() {
  static const std::vector<Command> list = {
      {"devices", "List every registered device: available or why not, and its spec", setup_devices},
      {"bench", "Time kiln on fixed workloads beside C/OpenMP and OpenBLAS references measured in the same run",
       setup_bench},
      {"train", "Train a model: `kiln train mnist` (a CNN on Fashion-MNIST; prints the test accuracy last)", setup_train},
      {"search", "Tune a named workload's kernels with BEAM search and print default vs best (`kiln search --help`)",
       setup_search},
      {"cache", "The tuning cache: ls | clear | export FILE | import FILE | verify", setup_cache},
  };
  return list;
}

// A global flag is a config knob: the knob's own parser reads it, so it accepts exactly what the
// environment variable does, and its errors name the flag.
struct GlobalFlag {
  const char* flag;
  const char* knob;  // KnobInfo::name
  const char* value_name;
  const char* help;
};

const GlobalFlag kGlobalFlags[] = {
    {"--debug", "debug", "N", "debug output level 0..6; overrides KILN_DEBUG"},
    {"--device", "device", "NAME", "default device, e.g. CPU; overrides KILN_DEVICE"},
};

void apply_flag(const GlobalFlag& flag, const std::string& value) {
  // The environment reads a blank variable as unset; a flag given on purpose with nothing in it is a mistake.
  if (value.find_first_not_of(" \t") == std::string::npos)
    throw Error(cat(flag.flag, " \"", value, "\": empty; give ", flag.value_name, " (", flag.help, ") or leave the flag out"));
  for (const KnobInfo& knob : Config::knobs())
    if (std::string_view(knob.name) == flag.knob) return knob.parse(config(), flag.flag, value);
  KILN_ASSERT(false, "the flag ", flag.flag, " names a config knob that exists: ", flag.knob);
}

int run(int argc, char** argv) {
  CLI::App app("kiln: a small tensor compiler and runtime", "kiln");
  app.set_version_flag("--version", "kiln " KILN_VERSION);
  app.fallthrough();  // global flags are accepted after the command too: `kiln devices --debug 1`
  app.require_subcommand(0, 1);  // one command: `kiln bench train` is bench with the argument train
  app.footer([] { return "Environment (flags override):\n" + config().describe(); });

  std::vector<std::pair<const GlobalFlag*, CLI::Option*>> flags;
  std::vector<std::string> flag_values(std::size(kGlobalFlags));
  for (size_t i = 0; i < std::size(kGlobalFlags); ++i) {
    const GlobalFlag& flag = kGlobalFlags[i];
    flags.emplace_back(&flag, app.add_option(flag.flag, flag_values[i], flag.help)->type_name(flag.value_name));
  }

  std::vector<std::pair<CLI::App*, Run>> runs;
  for (const Command& command : commands()) {
    CLI::App* sub = app.add_subcommand(command.name, command.help);
    runs.emplace_back(sub, command.setup(*sub));
  }

  try {
    app.parse(argc, argv);
    // Checked here rather than with require_subcommand(), which would answer `kiln typo` with "a
    // subcommand is required" instead of naming the word it did not expect.
    if (app.get_subcommands().empty()) throw CLI::RequiredError("A command");
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help, the version, or the error and a hint
    return code == 0 ? 0 : 2;
  }
  for (size_t i = 0; i < flags.size(); ++i)
    if (flags[i].second->count() > 0) apply_flag(*flags[i].first, flag_values[i]);
  for (auto& [sub, run_command] : runs)
    if (sub->parsed()) run_command();
  return 0;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  try {
    return kiln::run(argc, argv);
  } catch (const std::exception& e) {  // kiln::Error and anything else: a message, never a crash
    std::cerr << "kiln: error: " << e.what() << '\n';
    return 1;
  }
}
