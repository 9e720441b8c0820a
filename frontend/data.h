// Data sets on the host: IDX files (MNIST, Fashion-MNIST) and a reproducible batch iterator.
//
//   HostTensor x = read_idx("train-images-idx3-ubyte.gz"), y = read_idx("train-labels-idx1-ubyte.gz");
//   BatchIterator it({x, y}, 128, /*shuffle=*/true, /*seed=*/42);
//   std::vector<Tensor> batch;
//   while (it.next(batch)) train_step(batch[0], batch[1]);   // one epoch; the next call starts another
//   BatchIterator::State s = it.state();                       // save it in a checkpoint; set_state(s) resumes
//   BatchIterator mine({x, y}, 64, true, 42, false, dist::shard());  // data parallel: this rank's part of each epoch
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

// The sample order of an epoch: 0..samples-1, shuffled by (seed, epoch) when `shuffle`.
std::vector<int64_t> epoch_order(int64_t samples, bool shuffle, uint64_t seed, int64_t epoch);

// One process's part of every epoch in data-parallel training (frontend/distributed.h: dist::shard()
// fills rank and world from the job). The rule is torch's DistributedSampler's: the epoch's order of
// N samples is first made a multiple of `world` long, then rank r takes its positions r, r + world,
// r + 2 world, ... So the ranks' parts are disjoint and, when world divides N, cover the epoch exactly
// once. Otherwise, with R = N mod world:
//   drop_remainder false (the default): the order is padded with its own first world - R samples, so
//     every rank gets ceil(N / world) samples and those world - R samples are seen twice this epoch;
//   drop_remainder true: the order's last R samples are left out this epoch (a new shuffle picks other
//     ones next epoch), so every rank gets floor(N / world) samples and none is seen twice.
struct Shard {
  int64_t rank = 0, world = 1;
  bool drop_remainder = false;
};
// The samples `shard` takes from an epoch's `order`, in the order's order.
std::vector<int64_t> shard_of(const std::vector<int64_t>& order, const Shard& shard);

// Batches over arrays that share their first dimension (samples), e.g. images and labels. Rows are
// gathered on the host and uploaded with one Tensor::from_raw per array. With a `shard`, an epoch is
// that shard's part of the epoch's order (shard_of), and positions count within it.
class BatchIterator {
 public:
  BatchIterator(std::vector<HostTensor> arrays, int64_t batch_size, bool shuffle, uint64_t seed, bool drop_last = false,
                Shard shard = {});

  // The next batch, one tensor per array. Returns false (and leaves `batch` empty) at the end of an
  // epoch; the call after that starts the next epoch.
  bool next(std::vector<Tensor>& batch, const std::string& device = "");

  int64_t batches_per_epoch() const;
  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }  // samples consumed in this epoch
  int64_t samples() const { return samples_; }     // in the arrays
  int64_t epoch_samples() const { return epoch_samples_; }  // in an epoch: samples(), or the shard's part

  struct State {
    uint64_t seed;
    int64_t epoch;
    int64_t position;
  };
  State state() const { return {seed_, epoch_, position_}; }
  void set_state(const State& state);

  // The samples of `epoch` in the order they come (identity without shuffling or shard); for tests and tools.
  std::vector<int64_t> order(int64_t epoch) const;

 private:
  std::vector<HostTensor> arrays_;
  std::vector<size_t> row_bytes_;
  int64_t samples_, batch_size_;
  bool shuffle_, drop_last_;
  Shard shard_;
  int64_t epoch_samples_ = 0;
  uint64_t seed_;
  int64_t epoch_ = 0, position_ = 0;
  int64_t order_epoch_ = -1;  // the epoch order_ belongs to
  std::vector<int64_t> order_;
  std::vector<uint8_t> scratch_;  // gathered rows, reused between batches
};

}  // namespace kiln
