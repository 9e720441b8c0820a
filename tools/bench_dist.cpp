// kiln bench dist: data-parallel training and kiln's allreduce across the processes of an Open MPI job.
// This process times training steps of the demo CNN (tools/train.cpp) in one rank, then starts
// `mpirun -np 2` of this same kiln (`bench dist --dist-child`), whose ranks time the same steps data
// parallel (the same global batch, half on each rank) and kiln's dist::allreduce beside one raw
// MPI_Allreduce of the same bytes through the same libmpi.so.40; rank 0 hands its figures back as JSON.
// Both sides run every step eagerly (a captured step cannot hold the allreduce). Measured, never asserted.
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "bench.h"
#include "bench_measure.h"
#include "bench_report.h"
#include "devices/device.h"
#include "frontend/distributed.h"
#include "frontend/mpi.h"
#include "train.h"
#include "uop/process.h"

namespace kiln {

namespace {

constexpr int64_t kGlobalBatch = 128;               // kiln train mnist's default
constexpr const char* kChildMarker = "kiln-bench-dist-json: ";  // the line the child's rank 0 reports on

struct Sizes {
  int runs, steps_per_run;
  std::vector<int64_t> allreduce_bytes;
};

Sizes sizes(bool quick) {
  if (quick) return {3, 4, {int64_t{4} << 20}};
  return {5, 10, {int64_t{1} << 20, int64_t{16} << 20}};
}

// Seconds of each run of `steps` data-parallel training steps of the demo CNN, this rank's share of the
// global batch each step (random images: the time does not depend on the values), after warm-up steps
// that compile the kernels.
std::vector<double> time_training(const Sizes& s) {
  int world = dist::world_size();
  int64_t batch = kGlobalBatch / world;
  std::mt19937 rng(static_cast<uint32_t>(1 + dist::rank()));
  std::vector<float> pixels(static_cast<size_t>(batch * 28 * 28));
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (float& p : pixels) p = std::uniform_real_distribution<float>(-1, 1)(rng);
  for (int64_t& l : labels) l = std::uniform_int_distribution<int64_t>(0, 9)(rng);
  Tensor x = Tensor::from_vector(pixels, {batch, 1, 28, 28}), y = Tensor::from_vector(labels, {batch});
  Tensor::manual_seed(0);
  auto model = make_mnist_cnn();
  dist::DistributedDataParallel ddp(model);
  optim::AdamW opt(model->parameters(), 1e-3);
  auto step = [&] {
    Tensor loss = nn::cross_entropy(ddp(x), y);
    ddp.backward(loss);
    std::vector<Tensor> extra = model->buffers();
    extra.push_back(loss);
    opt.step(extra);
    opt.zero_grad();
  };
  for (int i = 0; i < 3; ++i) step();
  std::vector<double> seconds;
  for (int run = 0; run < s.runs; ++run) {
    dist::barrier();
    auto start = bench::Clock::now();
    for (int i = 0; i < s.steps_per_run; ++i) step();
    seconds.push_back(bench::seconds_since(start));
  }
  return seconds;
}

// kiln's dist::allreduce of a float32 tensor of `bytes` beside one MPI_Allreduce of the same bytes, each
// run started together by a barrier; and whether kiln's sum is the raw one's.
nlohmann::json time_allreduce(int64_t bytes, int runs) {
  int64_t n = bytes / 4;
  std::vector<float> mine(static_cast<size_t>(n)), raw_out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) mine[static_cast<size_t>(i)] = static_cast<float>((i * 7 + dist::rank() * 3) % 101);  // exact sums
  Tensor t = Tensor::from_vector(mine, {n}).realize();
  std::vector<double> kiln_s, raw_s;
  std::vector<float> kiln_out;
  for (int run = -1; run < runs; ++run) {  // run -1 warms up both
    dist::barrier();
    auto start = bench::Clock::now();
    Tensor sum = dist::allreduce(t, dist::ReduceOp::Sum);
    double k = bench::seconds_since(start);
    dist::barrier();
    start = bench::Clock::now();
    dist::mpi::raw_allreduce(mine.data(), raw_out.data(), n, ScalarType::Float32);
    double r = bench::seconds_since(start);
    if (run < 0) {
      kiln_out = sum.to_vector<float>();
      continue;
    }
    kiln_s.push_back(k);
    raw_s.push_back(r);
  }
  bool same = kiln_out.size() == raw_out.size() && std::memcmp(kiln_out.data(), raw_out.data(), raw_out.size() * sizeof(float)) == 0;
  return {{"bytes", bytes}, {"kiln_s", kiln_s}, {"raw_s", raw_s}, {"same", same}};
}

// Under mpirun: every rank measures; rank 0 prints its figures as one JSON line.
void run_child(const BenchOptions& options) {
  Sizes s = sizes(options.quick);
  nlohmann::json out = {{"world", dist::world_size()}, {"train_s", time_training(s)}, {"allreduce", nlohmann::json::array()}};
  for (int64_t bytes : s.allreduce_bytes) out["allreduce"].push_back(time_allreduce(bytes, s.runs));
  if (dist::is_main()) std::cout << kChildMarker << out.dump() << std::endl;
}

std::string mib(int64_t bytes) { return cat(bytes >> 20, " MiB"); }

}  // namespace

void run_bench_dist(const BenchOptions& options) {
  if (options.dist_child) return run_child(options);
  if (dist::is_distributed())
    throw Error("bench dist: run it without mpirun: it times one rank itself, then starts `mpirun -np 2` of itself");
  Sizes s = sizes(options.quick);
  BenchReport report;
  report.quick = options.quick;
  report.runs = s.runs;
  report.device = default_device_name();
  const DeviceSpec& spec = get_device(report.device).spec();
  report.device_detail = cat(spec.arch, ", ", spec.compiler, ", ", spec.threads, " threads in one process; under mpirun the ranks share the cores");
  report.references = "training: one rank in this process, the same global batch; allreduce: one raw MPI_Allreduce of the same bytes "
                      "through the same libmpi.so.40, in the same job";
  if (options.quick) report.changes.push_back("quick: 3 runs of 4 steps instead of 5 of 10; one allreduce size (4 MiB) instead of 1 and 16 MiB");
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  report.machine = cat(cores, " cores (2 ranks on fewer than 2 cores, or with other work running, measure the sharing)");

  auto train_row = [&](int ranks) {
    BenchResult r;
    r.name = cat("train step, demo CNN, ", ranks, ranks == 1 ? " rank" : " ranks data parallel");
    r.size = cat("batch ", kGlobalBatch, ranks > 1 ? cat(" (", kGlobalBatch / ranks, " per rank)") : "");
    r.unit = "samples/s";
    r.runs = s.runs;
    return r;
  };
  BenchResult one = train_row(1);
  try {
    one.kiln = bench::rate(time_training(s), static_cast<double>(kGlobalBatch * s.steps_per_run));
  } catch (const Error& e) {
    one.failure = e.what();
  }
  report.results.push_back(one);

  // The 2-rank job: this kiln under mpirun (looked up on PATH by run_process).
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::vector<std::string> argv{"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", exe.string(), "bench", "dist", "--dist-child"};
  if (options.quick) argv.push_back("--quick");
  std::optional<ProcessResult> child;
  try {
    child = run_process(argv);
  } catch (const Error& e) {
    report.changes.push_back(cat("2 ranks: SKIPPED: mpirun could not be started (", e.what(), "); install Open MPI (apt-get install openmpi-bin)"));
  }
  if (child) {
    size_t at = child->output.find(kChildMarker);
    BenchResult two = train_row(2);
    two.reference_name = "1 rank";
    two.reference = one.kiln;
    if (child->exit_code != 0 || at == std::string::npos) {
      std::string tail = child->output.size() > 800 ? child->output.substr(child->output.size() - 800) : child->output;
      two.failure = cat("`mpirun -np 2 kiln bench dist --dist-child` exited with ", child->exit_code, ": ", tail);
      report.results.push_back(two);
    } else {
      size_t end = child->output.find('\n', at);
      nlohmann::json j = nlohmann::json::parse(child->output.substr(at + std::strlen(kChildMarker), end - at - std::strlen(kChildMarker)));
      two.kiln = bench::rate(j.at("train_s").get<std::vector<double>>(), static_cast<double>(kGlobalBatch * s.steps_per_run));
      report.results.push_back(two);
      for (const nlohmann::json& a : j.at("allreduce")) {
        int64_t bytes = a.at("bytes").get<int64_t>();
        BenchResult r;
        r.name = "dist::allreduce sum, 2 ranks";
        r.size = cat(mib(bytes), " float32");
        r.unit = "GB/s";
        r.runs = s.runs;
        r.kiln = bench::rate(a.at("kiln_s").get<std::vector<double>>(), static_cast<double>(bytes) * 1e-9);
        r.reference_name = "raw MPI_Allreduce";
        r.reference = bench::rate(a.at("raw_s").get<std::vector<double>>(), static_cast<double>(bytes) * 1e-9);
        r.check = Check{a.at("same").get<bool>(), a.at("same").get<bool>() ? "the raw sum's bits" : "kiln's sum differs from the raw one"};
        r.notes.push_back("kiln's includes the agreement exchange, copying the tensor to the host and back, and realizing the result");
        report.results.push_back(std::move(r));
      }
    }
  }
  if (options.json) std::cout << to_json(report).dump(2) << '\n';
  else print_text(report, std::cout);
  if (size_t failed = report.failures(); failed > 0) throw Error(cat("bench dist: ", failed, " of the figures failed (FAILED above)"));
}

}  // namespace kiln
