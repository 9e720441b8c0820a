// The references `kiln bench` measures kiln against, loaded at run time so the kiln binary stays portable.
//
//   CReference ref = CReference::build();     // gcc -O3 -march=native -fopenmp on bench_reference.c; throws Error
//   ref.relu_fma(a, b, c, out, n);
//   OpenBlas blas = OpenBlas::load();         // never throws: without OpenBLAS, sgemm is null and `problem` says why
//   if (blas.sgemm) blas.sgemm(kRowMajor, kNoTrans, kNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
//
// Both libraries stay loaded until the process exits: their worker threads (libgomp's, OpenBLAS's) may
// still be parked in their code after the last call, so they are never dlclose'd.
#pragma once
#include <cstdint>
#include <string>

namespace kiln {

// The C/OpenMP loops of tools/bench_reference.c, compiled for this machine.
struct CReference {
  int (*threads)() = nullptr;  // OpenMP's thread count
  void (*relu_fma)(const float* a, const float* b, const float* c, float* out, int64_t n) = nullptr;
  float (*sum)(const float* a, int64_t n) = nullptr;
  void (*softmax_rows)(const float* x, float* y, int64_t rows, int64_t cols) = nullptr;
  void (*triad)(float* a, const float* b, const float* c, float scalar, int64_t n) = nullptr;
  double (*fma_peak)(int64_t iterations, float* checksum) = nullptr;  // returns the flops done
  // The median GFLOP/s of `runs` timed fma_peak loops after a warm-up (the same-run peak).
  double peak_gflops(int runs) const;

  std::string compiler;         // e.g. "gcc 12.2.0 -O3 -march=native -fno-math-errno -fopenmp"
  double compile_seconds = 0;

  // Compiles the embedded source with gcc in a temporary directory and loads it. Throws Error naming
  // what failed (no gcc, no OpenMP, a compile error with gcc's output) and how to fix it.
  static CReference build();
};

// The machine's limits, measured in this run by the references: the best of 5 FMA peak loops and of 5
// triad loops over 16M floats x 3 (12 bytes moved per element), after a warm-up of each.
struct MachineLimits {
  double fma_gflops = 0, triad_gbs = 0;
  std::string fma_note, triad_note;  // what was measured, e.g. "triad loop, 16M floats x 3, 2 threads"
};
MachineLimits measure_machine_limits(const CReference& c);

// OpenBLAS's cblas_sgemm, from libopenblas.so.0. The core it picked depends on OPENBLAS_CORETYPE, which
// this environment sets (NOTES.md), so `core` is printed beside every ratio against it.
struct OpenBlas {
  static constexpr int kRowMajor = 101, kNoTrans = 111;  // CBLAS_ORDER and CBLAS_TRANSPOSE values
  using Sgemm = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                         const float* b, int ldb, float beta, float* c, int ldc);
  Sgemm sgemm = nullptr;
  std::string core;     // openblas_get_corename(), e.g. "Haswell"
  std::string config;   // openblas_get_config(), e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64"
  std::string problem;  // why sgemm is null

  static OpenBlas load();
};

}  // namespace kiln
