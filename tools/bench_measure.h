// How `kiln bench` measures: host memory for the references, figures from timed runs, output checks, and
// how busy other processes kept the cores meanwhile.
//
//   bench::HostArray a(n);  bench::fill_uniform(a, /*seed=*/1);
//   Figure gbs = bench::rate(seconds, 16.0 * n * 1e-9);         // median, slowest..fastest run, in GB/s
//   Check check = bench::compare(got, want, n, /*atol=*/1e-6, /*rtol=*/1e-5);
//   bench::OtherLoad load;  ...;  std::optional<double> busy = load.cores();
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench_report.h"

namespace kiln::bench {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start);

// The fastest of `runs` timed calls of f, after one untimed call (it wakes the threads and faults in the memory).
double min_seconds(int runs, const std::function<void()>& f);

// Host memory for the references' inputs and outputs, mapped once with huge pages hinted: first touch of
// 4 KiB pages costs ~15 us each here (NOTES.md). Throws Error when the memory cannot be mapped.
class HostArray {
 public:
  explicit HostArray(int64_t n);
  ~HostArray();
  HostArray(const HostArray&) = delete;
  HostArray& operator=(const HostArray&) = delete;

  float* data() const { return data_; }
  int64_t size() const { return n_; }

 private:
  int64_t n_;
  size_t bytes_;
  float* data_ = nullptr;
};

// Deterministic values in [-1, 1), filled on every core.
void fill_uniform(HostArray& array, uint64_t seed);

double median_of(std::vector<double> values);
// `amount` (bytes or flops, in the unit's scale) per second; the slowest run gives the low end.
Figure rate(const std::vector<double>& seconds, double amount);
// Seconds times `scale` (1e6 for microseconds).
Figure duration(const std::vector<double>& seconds, double scale);

// Every value within atol + rtol * |want|; NaN matches nothing. The detail names the worst value.
Check compare(const float* got, const float* want, int64_t n, double atol, double rtol);

// "0.283", "61.2": three significant digits, for notes and checks.
std::string short_number(double v);

// Other processes on the cores (a build, a test run) slow both sides, and unevenly: an OpenMP loop whose
// thread is preempted waits for it at the barrier. This measures how busy they kept the cores: all busy
// time (/proc/stat) minus this process's and its compilers' (getrusage).
class OtherLoad {
 public:
  OtherLoad();
  // Cores the other processes kept busy on average since construction; nullopt without /proc/stat.
  std::optional<double> cores() const;

 private:
  Clock::time_point start_;
  std::optional<double> busy_;
  double own_;
};

// A fresh directory under $TMPDIR ("kiln-<what>-XXXXXX") that removes itself; Error if none can be made.
struct TempDir {
  explicit TempDir(const std::string& what);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path path;
};

}  // namespace kiln::bench
