#include "bench_measure.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>

#include "uop/error.h"
#include "uop/hash.h"
#include "uop/thread_pool.h"

namespace kiln::bench {
namespace {

std::optional<double> machine_busy_seconds() {
  std::ifstream in("/proc/stat");
  std::string label;
  double ticks[8] = {0};  // user nice system idle iowait irq softirq steal
  if (!(in >> label) || label != "cpu") return std::nullopt;
  for (double& t : ticks) in >> t;
  if (!in) return std::nullopt;
  double busy = ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6] + ticks[7];
  return busy / double(sysconf(_SC_CLK_TCK));
}

double own_seconds() {
  auto seconds = [](int who) {
    rusage usage{};
    getrusage(who, &usage);
    return double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
           1e-6 * double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
  };
  return seconds(RUSAGE_SELF) + seconds(RUSAGE_CHILDREN);  // children: the C compilers, once waited for
}

}  // namespace

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double min_seconds(int runs, const std::function<void()>& f) {
  f();
  double best = INFINITY;
  for (int i = 0; i < runs; ++i) {
    auto start = Clock::now();
    f();
    best = std::min(best, seconds_since(start));
  }
  return best;
}

HostArray::HostArray(int64_t n) : n_(n), bytes_(size_t(n) * sizeof(float)) {
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw Error(cat("bench: cannot map ", bytes_, " bytes of host memory: ", std::strerror(errno)));
  madvise(p, bytes_, MADV_HUGEPAGE);  // only a hint: without transparent huge pages it is slower, not wrong
  data_ = static_cast<float*>(p);
}

HostArray::~HostArray() { munmap(data_, bytes_); }

void fill_uniform(HostArray& array, uint64_t seed) {
  float* data = array.data();
  int64_t n = array.size(), grain = std::max<int64_t>(1, n / int64_t(default_pool().size() + 1));
  auto fill = [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) data[i] = float(hash_combine(seed, uint64_t(i)) >> 40) * 0x1p-23f - 1.0f;
  };
  default_pool().parallel_for(0, n, fill, grain);
}

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t m = values.size() / 2;
  return values.size() % 2 ? values[m] : (values[m - 1] + values[m]) / 2;
}

Figure rate(const std::vector<double>& seconds, double amount) {
  auto [fastest, slowest] = std::minmax_element(seconds.begin(), seconds.end());
  return {amount / median_of(seconds), amount / *slowest, amount / *fastest};
}

Figure duration(const std::vector<double>& seconds, double scale) {
  auto [fastest, slowest] = std::minmax_element(seconds.begin(), seconds.end());
  return {median_of(seconds) * scale, *fastest * scale, *slowest * scale};
}

Check compare(const float* got, const float* want, int64_t n, double atol, double rtol) {
  int64_t bad = 0, worst = 0;
  double max_diff = 0, worst_excess = -1;
  for (int64_t i = 0; i < n; ++i) {
    double diff = std::fabs(double(got[i]) - double(want[i])), allowed = atol + rtol * std::fabs(double(want[i]));
    if (diff <= allowed) {
      max_diff = std::max(max_diff, diff);
      continue;
    }
    ++bad;
    double excess = std::isnan(diff) ? INFINITY : diff - allowed;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (bad == 0) return {true, cat("max |diff| ", short_number(max_diff))};
  return {false, cat(bad, " of ", n, " values differ by more than ", atol, " + ", rtol, " x |reference|; worst at [",
                     worst, "]: kiln ", std::setprecision(9), got[worst], ", reference ", want[worst])};
}

std::string short_number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", v);
  return text;
}

OtherLoad::OtherLoad() : start_(Clock::now()), busy_(machine_busy_seconds()), own_(own_seconds()) {}

std::optional<double> OtherLoad::cores() const {
  std::optional<double> busy = machine_busy_seconds();
  if (!busy || !busy_) return std::nullopt;
  return std::max(0.0, *busy - *busy_ - (own_seconds() - own_)) / seconds_since(start_);
}

TempDir::TempDir(const std::string& what) {
  std::string pattern = (std::filesystem::temp_directory_path() / ("kiln-" + what + "-XXXXXX")).string();
  if (!mkdtemp(pattern.data()))
    throw Error(cat("bench: cannot create a temporary directory ", pattern, ": ", std::strerror(errno),
                    "; set TMPDIR to a writable directory"));
  path = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;  // leftovers in $TMPDIR are harmless; a failed cleanup must not hide a real error
  std::filesystem::remove_all(path, ignored);
}

}  // namespace kiln::bench
