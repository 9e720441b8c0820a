// kiln bench: times kiln on fixed workloads beside references measured in the same run.
//
//   kiln bench                  the full run (under 2 minutes here)
//   kiln bench --quick          fewer runs and a smaller matmul (under 20 s here)
//   kiln bench --json           the same figures as JSON on stdout
//   kiln bench train | sweep | compile | dist   training steps beside libtorch | kernel shapes | waiting for compiles | MPI ranks| sweep | compile   training steps beside libtorch | kernel shapes | waiting for compiles
//   kiln --device CPU bench     on a chosen device
//
// Figures are measured, never asserted: the targets are printed beside them as met or MISSED.
#pragma once

#include <string>

namespace kiln {

struct DeviceSpec;

struct BenchOptions {
  bool quick = false;
  bool json = false;
  std::string only;  // `kiln bench --only realize`, `train --only mlp`, `sweep --only "conv fwd"`: the workloads whose key or name contains this (all when empty)
  std::string omp_child;  // internal: this process measures under the OMP_WAIT_POLICY named (tools/bench_train.cpp)
  bool dist_child = false;  // internal: this process is a rank of the job `kiln bench dist` started (tools/bench_dist.cpp)
};

// What `kiln bench --help` says beyond its options.
extern const char* const kBenchHelp;

// Runs every workload and prints the report to stdout. Throws Error after printing when kiln failed a
// workload or its output did not match the reference's (MISMATCH), and when the references cannot be built.
void run_bench(const BenchOptions& options);
// `kiln bench train`: samples/s and GFLOP/s of whole training steps (tools/bench_train.cpp).
void run_bench_train(const BenchOptions& options);
// `kiln bench sweep`: matmul layouts and sizes, attention and conv2d shapes against the FMA peak (tools/bench_sweep.cpp).
void run_bench_sweep(const BenchOptions& options);
// `kiln bench compile`: the first training step and two searches with empty caches, in-process LLVM beside
// a clang process per kernel (tools/bench_compile.cpp).
void run_bench_compile(const BenchOptions& options);
// `kiln bench dist`: data-parallel training steps on 1 and 2 ranks, and kiln's allreduce beside a raw
// MPI_Allreduce (tools/bench_dist.cpp); starts `mpirun -np 2` of itself.
void run_bench_dist(const BenchOptions& options);

// The devices the bench compares, chosen by what they are, never by name (tools/bench.cpp); each throws
// Error saying what is missing. The first CPU-style device (not the oracle); the first CPU-style device
// that compiles LLVM IR in process; the first CPU-style device that takes C (a C compiler process).
bool cpu_style(const DeviceSpec& spec);  // no local dims (max_local == 0), and not the oracle
std::string host_device();
std::string in_process_device();
std::string c_process_device();

}  // namespace kiln
