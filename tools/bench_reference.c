// The references `kiln bench` measures kiln against: the loops a competent engineer writes in plain C
// with OpenMP, no intrinsics. kiln embeds this file at build time and compiles it at run time with
// `gcc -O3 -march=native -fno-math-errno -fopenmp -shared -fPIC` (tools/bench_reference.cpp), so the
// kiln binary stays portable while the references get this machine's vector units, as kiln's kernels do.
// Neither side uses -ffast-math; -fno-math-errno is in kiln's CPU flags too.
#include <math.h>
#include <omp.h>
#include <stdint.h>

int ref_threads(void) { return omp_get_max_threads(); }

void ref_relu_fma(const float* a, const float* b, const float* c, float* out, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float v = a[i] * b[i] + c[i];
    out[i] = v > 0.0f ? v : 0.0f;
  }
}

// Float addition is not associative, so `omp parallel for reduction(+:s)` alone keeps one scalar
// accumulator per thread. `simd` in the same pragma permits reassociating within a thread, so gcc keeps
// a vector of partial sums instead: the way to write a fast float sum with OpenMP and nothing else.
float ref_sum(const float* a, int64_t n) {
  float s = 0.0f;
#pragma omp parallel for simd reduction(+ : s) schedule(static)
  for (int64_t i = 0; i < n; ++i) s += a[i];
  return s;
}

// Per row: max, exp and its sum, normalize. The row (16 KiB at 4096 columns) stays in L1 between the
// passes, so memory sees one read and one write per element. expf stays a scalar libm call: glibc declares
// its vector variants only under -ffast-math, and kiln's kernels call scalar exp2f the same way.
void ref_softmax_rows(const float* x, float* y, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < cols; ++j) m = xr[j] > m ? xr[j] : m;
    float s = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      yr[j] = expf(xr[j] - m);
      s += yr[j];
    }
    float inv = 1.0f / s;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) yr[j] *= inv;
  }
}

// STREAM's triad: the memory bandwidth a simple loop reaches (bytes: 3 arrays, write-allocate not counted).
void ref_triad(float* a, const float* b, const float* c, float scalar, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + scalar * c[i];
}

// The fp32 FMA peak: per thread, independent chains of one vector register each (12 covers 4 cycles
// of latency on 2 FMA pipes with room to spare). The vector is the machine's register: AVX-512 has 32
// registers of 16 floats, AVX2 16 of 8 (there, 12 chains of 16 floats would spill and measure memory,
// not the FMA units). Returns the flops done and writes a checksum, so the compiler cannot drop the work.
#if defined(__AVX512F__)
#define LANES 16
#define CHAINS 12
#else
#define LANES 8
#define CHAINS 10
#endif
typedef float floatv __attribute__((vector_size(LANES * 4)));

double ref_fma_peak(int64_t iterations, float* checksum) {
  float total = 0.0f;
  int threads = 1;
#pragma omp parallel reduction(+ : total)
  {
#pragma omp single
    threads = omp_get_num_threads();
    floatv acc[CHAINS];
    const floatv mul = (floatv){} + 0.9999999f, add = (floatv){} + 1e-7f;
    for (int k = 0; k < CHAINS; ++k) acc[k] = (floatv){} + (float)(k + omp_get_thread_num());
    for (int64_t it = 0; it < iterations; ++it)
      for (int k = 0; k < CHAINS; ++k) acc[k] = acc[k] * mul + add;
    for (int k = 0; k < CHAINS; ++k)
      for (int lane = 0; lane < LANES; ++lane) total += acc[k][lane];
  }
  *checksum = total;
  return 2.0 * LANES * CHAINS * (double)iterations * threads;
}
