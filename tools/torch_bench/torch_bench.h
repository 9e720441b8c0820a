// The C interface of libkiln_torch_bench.so (tools/torch_bench/torch_bench.cpp): one libtorch model
// and optimizer, trained one step per call. `kiln bench train` dlopens the library from beside the kiln
// binary, so kiln itself never links libtorch; it is built where libtorch-dev is installed.
//
//   KilnTorchBench* b = create("mlp", "SGD", 0.01, 2, n, names, values, numels, err, sizeof err);
//   double loss = step(b, x, shape, 2, labels, err, sizeof err);   // forward, backward, optimizer step
#pragma once
#include <cstddef>
#include <cstdint>

extern "C" {
struct KilnTorchBench;
// model: mlp | torch_cnn | demo_cnn (tools/bench_train.cpp builds the same in kiln); optimizer: SGD |
// Adam | AdamW with the given learning rate and torch's defaults otherwise; threads: intra-op threads.
// The parameters (float32, by kiln's names) are copied in. Null on failure, with the reason in error.
using KilnTorchBenchCreate = KilnTorchBench* (*)(const char* model, const char* optimizer, double lr, int threads, int n_params,
                                                 const char* const* names, const float* const* values, const int64_t* numels,
                                                 char* error, size_t error_length);
// One step on a float32 batch of `shape` (ndim axes) and int32 labels; returns the loss, or -1 with the
// reason in error.
using KilnTorchBenchStep = double (*)(KilnTorchBench* b, const float* x, const int64_t* shape, int ndim, const int32_t* labels,
                                      char* error, size_t error_length);
using KilnTorchBenchDestroy = void (*)(KilnTorchBench* b);
}
