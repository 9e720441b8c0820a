// Data sets on the host: IDX files (MNIST, Fashion-MNIST) and a reproducible batch iterator.
//
//   HostTensor x = read_idx("train-images-idx3-ubyte.gz"), y = read_idx("train-labels-idx1-ubyte.gz");
//   BatchIterator it({x, y}, 128, /*shuffle=*/true, /*seed=*/42);
//   std::vector<Tensor> batch;
//   while (it.next(batch)) train_step(batch[0], batch[1]);   // one epoch; the next call starts another
//   BatchIterator::State s = it.state();                       // save it in a checkpoint; set_state(s) resumes
//
// The shuffle order of an epoch is a pure function of (seed, epoch), computed with kiln's own
// Fisher-Yates and splitmix64 (not std::shuffle, whose results differ between standard libraries),
// so a resumed run sees exactly the batches an uninterrupted one would have seen.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "frontend/tensor.h"

namespace kiln {

// Row-major data in host memory, in the host's byte order.
struct HostTensor {
  DType dtype;
  Shape shape;
  std::vector<uint8_t> data;
  Tensor to_tensor(const std::string& device = "") const;
};

// An IDX file, raw or gzipped (detected by the 1f 8b magic). Types: u8, i8, i16, i32, f32, f64.
HostTensor read_idx(const std::string& path);
// The same, from bytes in memory; `what` names them in errors (read_idx passes the path).
HostTensor parse_idx(std::vector<uint8_t> bytes, const std::string& what);

// Batches over arrays that share their first dimension (samples), e.g. images and labels. Rows are
// gathered on the host and uploaded with one Tensor::from_raw per array.
class BatchIterator {
 public:
  BatchIterator(std::vector<HostTensor> arrays, int64_t batch_size, bool shuffle, uint64_t seed, bool drop_last = false);

  // The next batch, one tensor per array. Returns false (and leaves `batch` empty) at the end of an
  // epoch; the call after that starts the next epoch.
  bool next(std::vector<Tensor>& batch, const std::string& device = "");

  int64_t batches_per_epoch() const;
  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }  // samples consumed in this epoch
  int64_t samples() const { return samples_; }

  struct State {
    uint64_t seed;
    int64_t epoch;
    int64_t position;
  };
  State state() const { return {seed_, epoch_, position_}; }
  void set_state(const State& state);

  // The sample order of `epoch` (identity without shuffling); exposed for tests and tools.
  std::vector<int64_t> order(int64_t epoch) const;

 private:
  std::vector<HostTensor> arrays_;
  std::vector<size_t> row_bytes_;
  int64_t samples_, batch_size_;
  bool shuffle_, drop_last_;
  uint64_t seed_;
  int64_t epoch_ = 0, position_ = 0;
  int64_t order_epoch_ = -1;  // the epoch order_ belongs to
  std::vector<int64_t> order_;
  std::vector<uint8_t> scratch_;  // gathered rows, reused between batches
};

}  // namespace kiln
