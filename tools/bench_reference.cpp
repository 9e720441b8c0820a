#include "bench_reference.h"
#include "bench_measure.h"

#include <dlfcn.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "bench_reference_source.h"  // kBenchReferenceSource: tools/bench_reference.c, embedded by CMake
#include "uop/error.h"
#include "uop/process.h"

namespace kiln {
namespace {

// Same kind of flags as kiln's CPU kernels (devices/cpu.cpp), with -O3 because gcc 12 vectorizes only there.
const std::vector<std::string> kReferenceFlags = {"-O3", "-march=native", "-fno-math-errno", "-fopenmp"};
const char* const kInstallHint = "install gcc (apt-get install gcc; it brings OpenMP's libgomp) and put it on PATH";

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& word : words) out += (out.empty() ? "" : " ") + word;
  return out;
}

// run_process with the install hint added when gcc cannot be started at all.
ProcessResult run_gcc(const std::vector<std::string>& argv) {
  try {
    return run_process(argv);
  } catch (const Error& e) {
    throw Error(cat("kiln bench: ", e.what(), "; ", kInstallHint));
  }
}

template <typename Fn>
void bind(void* library, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(library, name));
  if (!fn)
    throw Error(cat("bench: the compiled references have no function ", name, " (bench_reference.c defines it)"));
}

}  // namespace

CReference CReference::build() {
  auto start = std::chrono::steady_clock::now();
  bench::TempDir dir("bench");
  std::filesystem::path source = dir.path / "bench_reference.c", library = dir.path / "bench_reference.so";
  std::ofstream out(source);
  out << kBenchReferenceSource;
  out.close();
  if (!out)
    throw Error(cat("bench: cannot write ", source.string(), " (disk full?); set TMPDIR to a writable directory"));

  std::string version = "gcc";
  if (ProcessResult v = run_gcc({"gcc", "-dumpfullversion"}); v.exit_code == 0)
    version = cat("gcc ", v.output.substr(0, v.output.find('\n')));
  std::vector<std::string> argv = {"gcc"};
  argv.insert(argv.end(), kReferenceFlags.begin(), kReferenceFlags.end());
  argv.insert(argv.end(), {"-shared", "-fPIC", source.string(), "-o", library.string(), "-lm"});
  if (ProcessResult c = run_gcc(argv); c.exit_code != 0)
    throw Error(cat("bench: compiling the C/OpenMP references failed:\n$ ", join(argv), "\n", c.output,
                    "(the references need gcc with OpenMP; ", kInstallHint, ")"));

  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);  // stays mapped after the directory is removed
  if (!handle) throw Error(cat("bench: loading the compiled C/OpenMP references failed: ", dlerror()));
  CReference ref;
  bind(handle, "ref_threads", ref.threads);
  bind(handle, "ref_relu_fma", ref.relu_fma);
  bind(handle, "ref_sum", ref.sum);
  bind(handle, "ref_softmax_rows", ref.softmax_rows);
  bind(handle, "ref_triad", ref.triad);
  bind(handle, "ref_fma_peak", ref.fma_peak);
  ref.compiler = cat(version, " ", join(kReferenceFlags));
  ref.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return ref;
}

OpenBlas OpenBlas::load() {
  OpenBlas blas;
  void* handle = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    blas.problem =
        cat("dlopen(\"libopenblas.so.0\") failed: ", dlerror(), "; install it with apt-get install libopenblas-dev");
    return blas;
  }
  blas.sgemm = reinterpret_cast<Sgemm>(dlsym(handle, "cblas_sgemm"));
  if (!blas.sgemm) {
    blas.problem = "libopenblas.so.0 has no cblas_sgemm";
    return blas;
  }
  // Both are OpenBLAS extensions, present in every release since 0.2; a missing one only costs the label.
  auto corename = reinterpret_cast<char* (*)()>(dlsym(handle, "openblas_get_corename"));
  auto config = reinterpret_cast<char* (*)()>(dlsym(handle, "openblas_get_config"));
  blas.core = corename ? corename() : "unknown core";
  blas.config = config ? config() : "";
  while (!blas.config.empty() && blas.config.back() == ' ') blas.config.pop_back();
  return blas;
}

double CReference::peak_gflops(int runs) const {
  float checksum = 0;
  fma_peak(5'000'000, &checksum);  // wakes the threads and the clocks
  std::vector<double> rates;
  for (int i = 0; i < runs; ++i) {
    auto start = std::chrono::steady_clock::now();
    double flops = fma_peak(20'000'000, &checksum);
    rates.push_back(flops / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * 1e-9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

MachineLimits measure_machine_limits(const CReference& c) {
  MachineLimits m;
  float checksum = 0;
  const int64_t iterations = 20'000'000;
  double flops = c.fma_peak(iterations, &checksum);
  m.fma_gflops = flops / bench::min_seconds(5, [&] { c.fma_peak(iterations, &checksum); }) * 1e-9;
  m.fma_note = cat("FMA peak loop, ", c.threads(), " threads (", c.compiler, ")");
  const int64_t n = int64_t(16) << 20;
  bench::HostArray a(n), b(n), d(n);
  bench::fill_uniform(b, 1);
  bench::fill_uniform(d, 2);
  m.triad_gbs = 12.0 * double(n) / bench::min_seconds(5, [&] { c.triad(a.data(), b.data(), d.data(), 3.0f, n); }) * 1e-9;
  m.triad_note = cat("triad loop, 16M floats x 3, ", c.threads(), " threads");
  return m;
}

}  // namespace kiln
