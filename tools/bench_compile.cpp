// kiln bench compile: what a user waits for before anything runs, each with an empty cache directory,
// for the CPU device (LLVM in process) beside the CLANG device (a clang process per kernel) in the same
// run: the first step of `kiln train mnist` (the whole process, startup included), and `kiln search
// matmul` and `kiln search conv2d` with --beam 4 (the search's own wall time, as `kiln search --json`
// reports it, with candidates compiled per second). Each is a child process of this kiln, so the cache
// is empty and nothing is shared. The per-kernel compile time is `kiln bench`'s "compile a training
// step's kernels" row. Measured, never asserted.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench.h"
#include "bench_measure.h"
#include "bench_report.h"
#include "devices/device.h"
#include "uop/process.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

struct ChildRun {
  double wall_s = 0;  // the whole process
  std::string output;
};

// `kiln --device DEVICE ARGS...` with KILN_CACHE_DIR an empty directory of its own.
ChildRun run_kiln(const std::string& device, const std::vector<std::string>& args) {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error(cat("bench compile: cannot find this kiln's path (/proc/self/exe): ", ec.message()));
  bench::TempDir cache("bench-compile");
  std::vector<std::string> argv{"env", cat("KILN_CACHE_DIR=", cache.path.string()), exe.string(), "--device", device};
  argv.insert(argv.end(), args.begin(), args.end());
  auto start = Clock::now();
  ProcessResult r = run_process(argv);
  ChildRun out{bench::seconds_since(start), std::move(r.output)};
  if (r.exit_code != 0) {
    std::string cmd;
    for (size_t i = 2; i < argv.size(); ++i) cmd += (i > 2 ? " " : "") + argv[i];
    std::string tail = out.output.size() > 600 ? out.output.substr(out.output.size() - 600) : out.output;
    throw Error(cat("bench compile: `", cmd, "` exited with ", r.exit_code, ": ", tail));
  }
  return out;
}

// The JSON report at the end of `kiln search --json`'s output (the progress lines on stderr come first).
nlohmann::json search_report(const std::string& output) {
  size_t at = output.rfind("\n{\n");
  at = output.compare(0, 2, "{\n") == 0 && at == std::string::npos ? 0 : at;
  if (at == std::string::npos) throw Error(cat("bench compile: no JSON report in kiln search's output: ", output.substr(0, 300)));
  return nlohmann::json::parse(output.substr(at));
}

struct SearchFigures {
  std::vector<double> search_s;
  double candidates_per_s = 0, gflops = 0;
  std::string opts;
};

SearchFigures time_search(const std::string& device, const std::vector<std::string>& workload, int runs) {
  SearchFigures f;
  for (int i = 0; i < runs; ++i) {
    std::vector<std::string> args{"search"};
    args.insert(args.end(), workload.begin(), workload.end());
    args.insert(args.end(), {"--beam", "4", "--json", "--runs", "3"});
    nlohmann::json j = search_report(run_kiln(device, args).output);
    f.search_s.push_back(j.at("search_wall_s").get<double>());
    f.gflops = j.at("gflops").get<double>();
    double compiled = 0, wall = 0;
    f.opts.clear();
    for (const nlohmann::json& k : j.at("kernels")) {
      f.opts += (f.opts.empty() ? "" : "; ") + k.at("opts").get<std::string>();
      if (k.contains("search")) {
        compiled += k["search"].at("compiled").get<double>();
        wall += k["search"].at("wall_s").get<double>();
      }
    }
    f.candidates_per_s = wall > 0 ? compiled / wall : 0;
  }
  return f;
}

}  // namespace

void run_bench_compile(const BenchOptions& options) {
  const std::string in_process = in_process_device(), c_process = c_process_device();  // or an Error saying why not
  BenchReport report;
  report.quick = options.quick;
  report.device = in_process;
  const DeviceSpec& spec = get_device(in_process).spec();
  report.device_detail = cat(spec.arch, ", ", spec.compiler, ", ", spec.threads, " threads");
  report.references = cat("the ", c_process, " device (the same kernels as C, a compiler process each), in this run");
  int runs = options.quick ? 1 : 3;
  report.runs = runs;
  std::vector<std::string> matmul = {"matmul", "1024", "1024", "1024"}, conv = {"conv2d", "32", "64", "32", "32", "64", "3"};
  if (options.quick) {
    matmul = {"matmul", "256", "256", "256"};
    conv = {"conv2d", "8", "32", "16", "16", "32", "3"};
    report.changes.push_back("quick: one run of each instead of three; matmul 256^3 instead of 1024^3, conv2d batch 8, "
                             "32->32 channels, 16x16 instead of batch 32, 64->64, 32x32");
  }
  // The children's CPU time would count as other processes' load: say how busy the machine was before.
  std::string load_before;
  if (std::ifstream loadavg("/proc/loadavg"); loadavg) loadavg >> load_before;
  auto add = [&](BenchResult r, const std::function<void(BenchResult&)>& body) {
    try {
      body(r);
    } catch (const std::exception& e) {  // an Error, or a JSON report that does not parse
      r.failure = e.what();
    }
    report.results.push_back(std::move(r));
  };
  auto row = [&](std::string name, std::string size, double target_s) {
    BenchResult r;
    r.name = std::move(name);
    r.size = std::move(size);
    r.unit = "s";
    r.higher_is_better = false;
    r.reference_name = cat("C compiler process (", c_process, ")");
    r.target_value = target_s;
    return r;
  };

  add(row("first step of kiln train mnist", "empty cache, startup included", 3), [&](BenchResult& r) {
    std::vector<double> cpu, clang;
    std::vector<std::string> args{"train", "mnist", "--steps", "1", "--no-eval"};
    for (int i = 0; i < runs; ++i) {
      cpu.push_back(run_kiln(in_process, args).wall_s);
      clang.push_back(run_kiln(c_process, args).wall_s);
    }
    r.runs = runs;
    r.kiln = bench::duration(cpu, 1);
    r.reference = bench::duration(clang, 1);
  });
  auto search_row = [&](const std::vector<std::string>& workload, double target_s) {
    std::string size;
    for (size_t i = 1; i < workload.size(); ++i) size += (i > 1 ? " " : "") + workload[i];
    add(row(cat("kiln search ", workload[0], " --beam 4"), cat(size, ", empty cache"), target_s), [&](BenchResult& r) {
      SearchFigures cpu = time_search(in_process, workload, runs), clang = time_search(c_process, workload, runs);
      r.runs = runs;
      r.kiln = bench::duration(cpu.search_s, 1);
      r.reference = bench::duration(clang.search_s, 1);
      r.notes.push_back(cat("candidates compiled per second: ", bench::short_number(cpu.candidates_per_s), " in process, ",
                            bench::short_number(clang.candidates_per_s), " with clang"));
      r.notes.push_back(cat("winner in process: ", bench::short_number(cpu.gflops), " GFLOP/s (", cpu.opts, "); with clang: ",
                            bench::short_number(clang.gflops), " GFLOP/s (", clang.opts, ")"));
    });
  };
  search_row(matmul, options.quick ? 0 : 4);
  search_row(conv, options.quick ? 0 : 20);
  for (BenchResult& r : report.results)
    if (r.target_value && *r.target_value == 0) r.target_value.reset();  // quick sizes have no targets

  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  report.machine = cat(cores, " cores", load_before.empty() ? "" : cat("; load average before the run ", load_before),
                       " (the figures mean something only on an otherwise idle machine)");
  if (options.json) std::cout << to_json(report).dump(2) << '\n';
  else print_text(report, std::cout);
  if (size_t failed = report.failures(); failed > 0)
    throw Error(cat("bench compile: ", failed, " of the figures failed (FAILED above)"));
}

}  // namespace kiln
