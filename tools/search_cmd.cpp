// kiln search: tunes a named workload's kernels with BEAM search (search/beam.h) on a device.
//
//   kiln search matmul 1024 1024 1024 --beam 4    every kernel of the workload, searched (or from the cache)
//   kiln search conv2d 32 64 32 32 64 3           N C H W K R: a KxCxRxR convolution, stride 1, pad R/2
//   kiln search train-step mnist --beam 2         every kernel of one kiln train step (forward, backward, AdamW)
//   kiln search softmax --json                    the same figures as JSON on stdout
//   kiln search matmul 256 256 256 --exhaustive   every opt list of up to 3 actions (--depth), and BEAM's
//                                                 winner beside the best of them, timed side by side
//
// The workload runs through realize with KILN_BEAM set, so what is searched and cached is exactly what a
// program realizing the same graph with KILN_BEAM would use. While it searches, a progress line on stderr
// says the round, candidates compiled and timed, candidates per second and the best time so far. Then,
// per kernel: the default kernel's time and the tuned one's, measured side by side in this run after
// the search (the minimum of several launches on random inputs), speedup, GFLOP/s, GB/s, % of the FMA
// peak and of the triad bandwidth measured in this run, the opts, and where the search time went.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench_measure.h"
#include "bench_reference.h"
#include "frontend/nn.h"
#include "frontend/optim.h"
#include "frontend/tensor.h"
#include "search/tuned.h"
#include "train.h"
#include "uop/config.h"
#include "uop/error.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

const char* const kSearchHelp = R"(Workloads (float32; sizes optional, defaults shown):
  matmul M N K           1024 1024 1024     C = A (MxK) @ B (KxN)               vs OpenBLAS sgemm and the FMA peak
  conv2d N C H W K R     32 64 32 32 64 3   KxCxRxR filters, stride 1, pad R/2   vs the FMA peak
  reduce N               16777216           the sum of N values                  vs the triad bandwidth
  softmax R C            4096 4096          softmax of each row                  vs a C/OpenMP loop
  elementwise N          16777216           relu(a*b+c)                          vs the triad bandwidth
  train-step mnist                          one step of `kiln train mnist` (batch 128): every kernel
Inputs are made (and their kernels compiled) before search starts; only the workload's kernels are searched.
Winners go to the tuning cache (`kiln cache ls`); running the same search again finds them there and says so.
Times are measured, never asserted: with other processes on the cores they are noisy.)";

struct Workload {
  std::string title;
  std::function<void()> run;    // realizes the workload (with KILN_BEAM set: searches its new kernels)
  double flops = 0;             // of the whole workload, when known (0: from the kernels' ASTs)
};

std::vector<int64_t> sizes(const std::vector<std::string>& args, std::vector<int64_t> defaults, const char* usage) {
  if (args.size() > 1 && args.size() - 1 != defaults.size())
    throw Error(cat("kiln search ", args[0], ": expected ", defaults.size(), " sizes (", usage, ") or none, got ",
                    args.size() - 1));
  for (size_t i = 1; i < args.size(); ++i) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(args[i], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != args[i].size() || v < 1)
      throw Error(cat("kiln search ", args[0], ": size \"", args[i], "\" is not a positive integer (", usage, ")"));
    defaults[i - 1] = v;
  }
  return defaults;
}

Tensor made(Shape shape) {
  Tensor t = Tensor::rand(shape) * 2 - 1;
  t.realize();
  return t;
}

// Builds the inputs (realized now, with search off) and the workload to search.
Workload make_workload(const std::vector<std::string>& args) {
  const std::string& name = args.at(0);
  if (name == "matmul") {
    std::vector<int64_t> s = sizes(args, {1024, 1024, 1024}, "M N K");
    Tensor a = made({s[0], s[2]}), b = made({s[2], s[1]});
    return {cat("matmul ", s[0], "x", s[2], " @ ", s[2], "x", s[1]), [a, b] { a.matmul(b).realize(); },
            2.0 * double(s[0]) * double(s[1]) * double(s[2])};
  }
  if (name == "conv2d") {
    std::vector<int64_t> s = sizes(args, {32, 64, 32, 32, 64, 3}, "N C H W K R");
    Tensor x = made({s[0], s[1], s[2], s[3]}), w = made({s[4], s[1], s[5], s[5]});
    int64_t pad = s[5] / 2;
    int64_t oh = s[2] + 2 * pad - s[5] + 1, ow = s[3] + 2 * pad - s[5] + 1;
    return {cat("conv2d batch ", s[0], ", ", s[1], "->", s[4], " channels, ", s[2], "x", s[3], ", ", s[5], "x", s[5],
                " pad ", pad),
            [x, w, pad] { x.conv2d(w, std::nullopt, {1, 1}, {pad, pad}).realize(); },
            2.0 * double(s[0]) * double(s[4]) * double(oh) * double(ow) * double(s[1]) * double(s[5] * s[5])};
  }
  if (name == "reduce") {
    std::vector<int64_t> s = sizes(args, {int64_t(16) << 20}, "N");
    Tensor a = made({s[0]});
    return {cat("sum of ", s[0]), [a] { a.sum().realize(); }, double(s[0])};
  }
  if (name == "softmax") {
    std::vector<int64_t> s = sizes(args, {4096, 4096}, "R C");
    Tensor x = made({s[0], s[1]});
    return {cat("softmax of ", s[0], " rows of ", s[1]), [x] { x.softmax(1).realize(); }, 0};
  }
  if (name == "elementwise") {
    std::vector<int64_t> s = sizes(args, {int64_t(16) << 20}, "N");
    Tensor a = made({s[0]}), b = made({s[0]}), c = made({s[0]});
    return {cat("relu(a*b+c) of ", s[0]), [a, b, c] { (a * b + c).relu().realize(); }, 3.0 * double(s[0])};
  }
  if (name == "train-step") {
    if (args.size() != 2 || args[1] != "mnist")
      throw Error("kiln search train-step: name the model: `kiln search train-step mnist` (the only one so far)");
    Tensor::manual_seed(0);
    auto model = make_mnist_cnn();
    for (Tensor& p : model->parameters()) p.realize();
    Tensor x = made({128, 1, 28, 28}), y = Tensor::randint(0, 10, {128});
    y.realize();
    auto opt = std::make_shared<optim::AdamW>(model->parameters(), 1e-3);
    return {"one training step of kiln train mnist (batch 128: forward, backward, AdamW)",
            [model, opt, x, y] {
              Tensor loss = nn::cross_entropy(model->forward(x), y);
              loss.backward();
              std::vector<Tensor> extra = model->buffers();
              extra.push_back(loss);
              opt->step(extra);
              opt->zero_grad();
            },
            3 * mnist_cnn_forward_flops() * 128};
  }
  throw Error(cat("kiln search: unknown workload \"", name,
                  "\"; choose matmul, conv2d, reduce, softmax, elementwise or train-step mnist (`kiln search --help`)"));
}

// The machine's limits and the workload's own reference, measured in this run before the search.
struct References {
  double fma_gflops = 0, triad_gbs = 0;
  std::optional<double> sgemm_gflops, softmax_seconds;
  std::string fma_note, triad_note, sgemm_note, softmax_note;
};

References measure_references(const std::vector<std::string>& args) {
  References r;
  CReference c = CReference::build();
  MachineLimits limits = measure_machine_limits(c);
  r.fma_gflops = limits.fma_gflops;
  r.triad_gbs = limits.triad_gbs;
  r.fma_note = limits.fma_note;
  r.triad_note = limits.triad_note;
  if (args[0] == "matmul") {
    std::vector<int64_t> s = sizes(args, {1024, 1024, 1024}, "M N K");
    OpenBlas blas = OpenBlas::load();
    if (blas.sgemm) {
      bench::HostArray x(s[0] * s[2]), y(s[2] * s[1]), z(s[0] * s[1]);
      bench::fill_uniform(x, 3);
      bench::fill_uniform(y, 4);
      double t = bench::min_seconds(5, [&] {
        blas.sgemm(OpenBlas::kRowMajor, OpenBlas::kNoTrans, OpenBlas::kNoTrans, int(s[0]), int(s[1]), int(s[2]), 1.0f,
                   x.data(), int(s[2]), y.data(), int(s[1]), 0.0f, z.data(), int(s[1]));
      });
      r.sgemm_gflops = 2.0 * double(s[0]) * double(s[1]) * double(s[2]) / t * 1e-9;
      r.sgemm_note = cat("OpenBLAS sgemm, core ", blas.core);
    } else {
      r.sgemm_note = cat("no OpenBLAS: ", blas.problem);
    }
  }
  if (args[0] == "softmax") {
    std::vector<int64_t> s = sizes(args, {4096, 4096}, "R C");
    bench::HostArray x(s[0] * s[1]), y(s[0] * s[1]);
    bench::fill_uniform(x, 5);
    r.softmax_seconds = bench::min_seconds(5, [&] { c.softmax_rows(x.data(), y.data(), s[0], s[1]); });
    r.softmax_note = "C/OpenMP softmax loop";
  }
  return r;
}

// One row of the table: a kernel's tuning, and both kernels timed side by side now.
struct Row {
  TunedKernel tuned;
  double default_s = 0, best_s = 0, flops = 0, bytes = 0;
  std::optional<double> beam_s;  // --exhaustive: BEAM's winner (cached or searched), timed beside the others
  std::vector<Opt> beam_opts;
};

std::string us(double seconds) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(seconds < 1e-3 ? 1 : 0) << seconds * 1e6;
  return out.str();
}
std::string fixed(double v, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << v;
  return out.str();
}

// A kernel's name for the 28-character first column, shortened with "..." when longer.
std::string column_name(const std::string& name) { return name.size() > 27 ? name.substr(0, 24) + "..." : name; }

// The live line: one per update on a terminal (rewritten in place), one per round otherwise.
class ProgressLine {
 public:
  void update(const std::string& kernel, const SearchProgress& p) {
    auto now = Clock::now();
    bool new_round = kernel != kernel_ || p.round != round_;
    if (!tty_ && !new_round) return;
    if (tty_ && !new_round && now - last_ < std::chrono::milliseconds(100)) return;
    kernel_ = kernel;
    round_ = p.round;
    last_ = now;
    std::cerr << (tty_ ? "\r\033[K" : "") << "kiln search: " << kernel << "  round " << p.round << "  compiled " << p.compiled
              << "  timed " << p.timed << "  failed " << p.failed << "  " << fixed(p.candidates_per_s(), 1)
              << " cand/s  best " << (p.best_seconds > 0 ? us(p.best_seconds) + " us" : "-") << " "
              << (p.best_opts.empty() ? "(no opts)" : to_string(p.best_opts)) << (tty_ ? "" : "\n") << std::flush;
  }
  void finish(const TunedKernel& t) {
    if (tty_ && !kernel_.empty()) std::cerr << "\r\033[K";
    kernel_.clear();
    if (t.cache_hit) {
      std::cerr << "kiln search: " << t.name << ": cached (" << to_string(t.entry.opts) << ")\n";
      return;
    }
    const SearchResult& r = *t.search;
    if (r.too_small) {
      std::cerr << "kiln search: " << t.name << ": " << us(r.default_seconds) << " us with the default opts, under the "
                << us(SearchOptions{}.min_default_s) << " us worth searching; kept\n";
      return;
    }
    std::cerr << "kiln search: " << t.name << ": " << us(r.default_seconds) << " -> " << us(r.best_seconds)
              << " us while searching, " << r.compiled << " compiled in " << fixed(r.wall_s, 1) << " s\n";
  }

 private:
  bool tty_ = isatty(STDERR_FILENO) != 0;
  std::string kernel_;
  int round_ = -1;
  Clock::time_point last_;
};

void print_table(const std::string& title, int beam, int depth, const DeviceSpec& spec, const References& refs,
                 const std::vector<Row>& rows, double workload_flops, double search_wall) {
  std::cout << "kiln search: " << title << " on " << spec.name << " (" << spec.arch << ", " << spec.threads
            << " threads), " << (depth > 0 ? cat("every opt list of up to ", depth, " actions") : cat("beam ", beam)) << "\n";
  std::cout << "references measured in this run: " << fixed(refs.fma_gflops, 0) << " GFLOP/s " << refs.fma_note << "; "
            << fixed(refs.triad_gbs, 1) << " GB/s " << refs.triad_note << "\n";
  std::cout << std::left << std::setw(28) << "kernel" << std::right << std::setw(11) << "default us" << std::setw(10)
            << "best us" << std::setw(8) << "speedup" << std::setw(9) << "GFLOP/s" << std::setw(8) << "GB/s"
            << std::setw(7) << "%FMA" << std::setw(7) << "%BW" << std::setw(26) << "search s (build+timing)"
            << "  opts\n";
  double sum_default = 0, sum_best = 0, sum_flops = 0;
  int hits = 0;
  for (const Row& r : rows) {
    sum_default += r.default_s;
    sum_best += r.best_s;
    sum_flops += r.flops;
    double gflops = r.flops / r.best_s * 1e-9, gbs = r.bytes / r.best_s * 1e-9;
    std::string search = "cached";
    if (r.tuned.search) {
      const SearchResult& s = *r.tuned.search;
      search = cat(fixed(s.wall_s, 1), " (", fixed(s.build_s, 1), "+", fixed(s.timing_s + s.check_s, 1), ")");
    } else {
      ++hits;
    }
    std::cout << std::left << std::setw(28) << column_name(r.tuned.name) << std::right << std::setw(11) << us(r.default_s) << std::setw(10)
              << us(r.best_s) << std::setw(8) << fixed(r.default_s / r.best_s, 2) << std::setw(9) << fixed(gflops, 1)
              << std::setw(8) << fixed(gbs, 1) << std::setw(7) << fixed(100 * gflops / refs.fma_gflops, 1)
              << std::setw(7) << fixed(100 * gbs / refs.triad_gbs, 1) << std::setw(26) << search << "  "
              << (r.tuned.entry.opts.empty() ? "(none)" : to_string(r.tuned.entry.opts)) << "\n";
  }
  double flops = workload_flops > 0 ? workload_flops : sum_flops;
  double gflops = flops / sum_best * 1e-9;
  std::cout << "workload: " << us(sum_default) << " us default -> " << us(sum_best) << " us tuned ("
            << fixed(sum_default / sum_best, 2) << "x), " << fixed(gflops, 1) << " GFLOP/s = "
            << fixed(100 * gflops / refs.fma_gflops, 1) << "% of the FMA peak";
  if (refs.sgemm_gflops)
    std::cout << ", " << fixed(100 * gflops / *refs.sgemm_gflops, 1) << "% of " << refs.sgemm_note << " ("
              << fixed(*refs.sgemm_gflops, 0) << " GFLOP/s)";
  else if (!refs.sgemm_note.empty())
    std::cout << " (" << refs.sgemm_note << ")";
  if (refs.softmax_seconds)
    std::cout << ", " << fixed(100 * *refs.softmax_seconds / sum_best, 1) << "% of the " << refs.softmax_note << " ("
              << us(*refs.softmax_seconds) << " us)";
  std::cout << "\n";
  // Where the search time went, over the kernels searched in this run.
  SearchResult sum;
  for (const Row& r : rows)
    if (r.tuned.search) {
      const SearchResult& s = *r.tuned.search;
      sum.compiled += s.compiled, sum.timed += s.timed, sum.failed += s.failed, sum.duplicates += s.duplicates;
      sum.mismatched += s.mismatched, sum.wall_s += s.wall_s, sum.build_s += s.build_s, sum.timing_s += s.timing_s;
      sum.kernel_s += s.kernel_s, sum.check_s += s.check_s, sum.lower_cpu_s += s.lower_cpu_s;
      sum.compile_cpu_s += s.compile_cpu_s;
    }
  if (sum.wall_s > 0)
    std::cout << "search: " << sum.compiled << " candidates compiled (" << fixed(sum.compiled / sum.wall_s, 1)
              << "/s; " << sum.duplicates << " duplicates, " << sum.failed << " failed, " << sum.mismatched
              << " wrong), " << sum.timed << " timed; " << fixed(sum.wall_s, 1) << " s = building "
              << fixed(sum.build_s, 1) << " s (CPU over threads: lowering " << fixed(sum.lower_cpu_s, 1)
              << " s, compiling and loading " << fixed(sum.compile_cpu_s, 1) << " s) + timing " << fixed(sum.timing_s, 1)
              << " s (" << fixed(sum.kernel_s, 2) << " s inside kernels, the rest launching) + output checks "
              << fixed(sum.check_s, 1) << " s\n";
  bool beside = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.beam_s.has_value(); });
  if (beside) {
    std::cout << "BEAM (beam " << beam << ") beside the exhaustive best, timed side by side now:\n"
              << std::left << std::setw(28) << "kernel" << std::right << std::setw(15) << "exhaustive us" << std::setw(10)
              << "beam us" << std::setw(18) << "beam/exhaustive" << "  beam opts\n";
    for (const Row& r : rows)
      if (r.beam_s) {
        std::cout << std::left << std::setw(28) << column_name(r.tuned.name) << std::right << std::setw(15) << us(r.best_s) << std::setw(10)
                  << us(*r.beam_s) << std::setw(18) << fixed(*r.beam_s / r.best_s, 3) << "  "
                  << (r.beam_opts.empty() ? "(none)" : to_string(r.beam_opts))
                  << (r.beam_opts == r.tuned.entry.opts ? "  (the same opts)" : "") << "\n";
      }
  }
  for (const Row& r : rows)
    if (r.tuned.search)
      for (size_t i = 0; i < r.tuned.search->failures.size() && i < 3; ++i)
        std::cout << "  " << r.tuned.name << ": " << r.tuned.search->failures[i] << "\n";
  if (hits == int(rows.size()) && !rows.empty())
    std::cout << "every kernel came from the tuning cache (searched in an earlier run): search took "
              << fixed(search_wall, 3) << " s\n";
  else
    std::cout << rows.size() - size_t(hits) << " kernels searched, " << hits << " from the tuning cache; search took "
              << fixed(search_wall, 1) << " s in all\n";
}

nlohmann::json to_json(const std::string& title, int beam, const DeviceSpec& spec, const References& refs,
                       const std::vector<Row>& rows, double workload_flops, double search_wall) {
  nlohmann::json kernels = nlohmann::json::array();
  double sum_best = 0, sum_default = 0, sum_flops = 0;
  for (const Row& r : rows) {
    sum_best += r.best_s;
    sum_default += r.default_s;
    sum_flops += r.flops;
    double gflops = r.flops / r.best_s * 1e-9, gbs = r.bytes / r.best_s * 1e-9;
    nlohmann::json k = {{"kernel", r.tuned.name}, {"cached", r.tuned.cache_hit}, {"default_s", r.default_s},
                        {"best_s", r.best_s}, {"speedup", r.default_s / r.best_s}, {"gflops", gflops}, {"gbs", gbs},
                        {"pct_fma_peak", 100 * gflops / refs.fma_gflops}, {"pct_triad", 100 * gbs / refs.triad_gbs},
                        {"opts", to_string(r.tuned.entry.opts)}};
    if (r.beam_s) {
      k["beam_s"] = *r.beam_s;
      k["beam_opts"] = to_string(r.beam_opts);
    }
    if (r.tuned.search) {
      const SearchResult& s = *r.tuned.search;
      k["search"] = {{"wall_s", s.wall_s}, {"build_s", s.build_s}, {"timing_s", s.timing_s}, {"kernel_s", s.kernel_s},
                     {"check_s", s.check_s}, {"lower_cpu_s", s.lower_cpu_s}, {"compile_cpu_s", s.compile_cpu_s},
                     {"rounds", s.rounds}, {"candidates", s.candidates}, {"rejected", s.rejected},
                     {"compiled", s.compiled}, {"duplicates", s.duplicates}, {"timed", s.timed}, {"failed", s.failed},
                     {"mismatched", s.mismatched}, {"candidates_per_s", s.wall_s > 0 ? s.compiled / s.wall_s : 0},
                     {"search_default_s", s.default_seconds}, {"search_best_s", s.best_seconds}, {"failures", s.failures}};
    }
    kernels.push_back(k);
  }
  double flops = workload_flops > 0 ? workload_flops : sum_flops;
  nlohmann::json out = {{"workload", title}, {"device", spec.name}, {"arch", spec.arch}, {"threads", spec.threads},
                        {"beam", beam}, {"kernels", kernels}, {"search_wall_s", search_wall},
                        {"default_s", sum_default}, {"best_s", sum_best}, {"gflops", flops / sum_best * 1e-9},
                        {"references", {{"fma_peak_gflops", refs.fma_gflops}, {"triad_gbs", refs.triad_gbs}}}};
  if (refs.sgemm_gflops) out["references"]["sgemm_gflops"] = *refs.sgemm_gflops;
  if (refs.softmax_seconds) out["references"]["softmax_loop_s"] = *refs.softmax_seconds;
  return out;
}

struct SearchCommand {
  std::vector<std::string> workload;
  int beam = 0;
  bool json = false;
  int runs = 7;
  bool exhaustive = false;
  int depth = 3;

  void run() {
    int width = beam > 0 ? beam : config().beam > 0 ? config().beam : 4;
    if (workload.empty()) throw Error("kiln search: name a workload (`kiln search --help` lists them)");
    Device& device = get_device(default_device_name());
    int old_beam = config().beam;
    config().beam = 0;  // the inputs' kernels are not the workload's
    Workload w = make_workload(workload);
    References refs = measure_references(workload);

    std::vector<TunedKernel> tuned;
    std::vector<LoweredKernel> beam_kernels;
    ProgressLine line;
    watch_tuning({.progress = [&](const std::string& k, const SearchProgress& p) { line.update(k, p); },
                  .done = [&](const TunedKernel& t) {
                    line.finish(t);
                    tuned.push_back(t);
                  },
                  .exhaustive_depth = exhaustive ? depth : 0});
    config().beam = width;
    auto start = Clock::now();
    try {
      w.run();
    } catch (...) {
      watch_tuning({});
      config().beam = old_beam;
      throw;
    }
    double search_wall = bench::seconds_since(start);
    watch_tuning({});
    if (exhaustive) {
      // BEAM's winner for each kernel, as realize with KILN_BEAM would get it (cache or search).
      for (const TunedKernel& t : tuned) beam_kernels.push_back(tuned_kernel(device, t.ast, t.buffers, width));
      search_wall = bench::seconds_since(start);
    }
    config().beam = old_beam;
    if (tuned.empty())
      throw Error(cat("kiln search: ", w.title, " compiled no new kernel: was it realized before in this process?"));

    // Both kernels of each, timed side by side now that no compiler shares the cores.
    std::vector<Row> rows;
    for (size_t i = 0; i < tuned.size(); ++i) {
      const TunedKernel& t = tuned[i];
      Row r;
      r.tuned = t;
      LoweredKernel plain = lower_kernel(t.ast, device.spec());
      Lowering l = lower_with_opts(t.ast, device.spec(), t.entry.opts);
      KILN_ASSERT(l.kernel.has_value(), "the tuned opts lower: ", l.rejected);
      // Alternately, in batches, for at least `runs` launches each and about a second: right after a
      // search the machine is still settling (the first launches of a kernel here ran ~1.5x slower),
      // and alternating spreads whatever it does over both. The same kernel is timed once.
      bool same = l.kernel->source == plain.source;
      r.default_s = r.best_s = INFINITY;
      if (exhaustive) r.beam_s = INFINITY;
      auto start = std::chrono::steady_clock::now();
      for (int done = 0; done < runs || std::chrono::steady_clock::now() - start < std::chrono::seconds(1); done += 3) {
        r.default_s = std::min(r.default_s, time_kernel(device, plain, t.buffers, 3));
        if (!same) r.best_s = std::min(r.best_s, time_kernel(device, *l.kernel, t.buffers, 3));
        if (exhaustive) r.beam_s = std::min(*r.beam_s, time_kernel(device, beam_kernels[i], t.buffers, 3));
        if (done > 3000) break;  // tiny kernels: enough
      }
      if (same) r.best_s = r.default_s;
      if (exhaustive) r.beam_opts = beam_kernels[i].opts;
      r.flops = kernel_flops(t.ast);
      for (const KernelBuffer& b : t.buffers) r.bytes += double(b.size) * double(b.dtype.itemsize());
      rows.push_back(std::move(r));
    }
    if (json) {
      std::cout << to_json(w.title, width, device.spec(), refs, rows, w.flops, search_wall).dump(2) << "\n";
      return;
    }
    // GFLOP/s of the workload: its own FLOP count when known (useful work), else the kernels' estimate.
    print_table(w.title, width, exhaustive ? depth : 0, device.spec(), refs, rows, w.flops, search_wall);
  }
};

}  // namespace

std::function<void()> setup_search(CLI::App& command) {
  auto cmd = std::make_shared<SearchCommand>();
  command.add_option("workload", cmd->workload, "matmul | conv2d | reduce | softmax | elementwise | train-step mnist, then sizes")
      ->required();
  command.add_option("--beam", cmd->beam, "beam width (default: KILN_BEAM if set, else 4)")->check(CLI::Range(1, 64));
  command.add_option("--runs", cmd->runs, "timed launches per kernel for the table, at least (the minimum is shown; timing goes on for about a second)")->check(CLI::Range(1, 1000));
  command.add_flag("--json", cmd->json, "print the report as JSON on stdout");
  command.add_flag("--exhaustive", cmd->exhaustive,
                   "search every opt list of up to --depth actions instead of a beam (cached under their own keys), then "
                   "time BEAM's winner (--beam; cached or searched now) beside the best of them");
  command.add_option("--depth", cmd->depth, "actions per opt list for --exhaustive (default 3)")
      ->check(CLI::Range(1, 4))
      ->needs("--exhaustive");
  command.footer(kSearchHelp);
  return [cmd] { cmd->run(); };
}

}  // namespace kiln
