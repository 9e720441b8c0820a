// Data: IDX files (raw and gzipped, hand-built and the real Fashion-MNIST) and the batch iterator's
// guarantees: every epoch a permutation, reproducible from (seed, epoch), resumable from its state.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "frontend/data.h"
#include "helpers.h"

using namespace kiln;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

using test::TempDir;

namespace {

const std::string kFashion = "/usr/share/datasets/fashion-mnist/";


void append_be(std::vector<uint8_t>& out, uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

// An IDX file: 00 00 type ndims, big-endian u32 dims, then `payload` (already big-endian).
std::vector<uint8_t> idx_file(uint8_t type, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out{0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) append_be(out, d, 4);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

std::vector<uint8_t> gzip(const std::vector<uint8_t>& raw) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::vector<uint8_t> out(deflateBound(&zs, raw.size()));
  zs.next_in = const_cast<Bytef*>(raw.data());
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

template <typename T>
std::vector<T> values_of(const HostTensor& t) {
  REQUIRE(t.data.size() % sizeof(T) == 0);
  std::vector<T> out(t.data.size() / sizeof(T));
  std::memcpy(out.data(), t.data.data(), t.data.size());
  return out;
}

template <typename T>
HostTensor host_of(const std::vector<T>& values, Shape shape) {
  HostTensor t{dtype_of<T>(), std::move(shape), std::vector<uint8_t>(values.size() * sizeof(T))};
  std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

// One epoch of an iterator over {ids (int32), rows (float32, 2 per sample)}: the ids in batch order,
// the batch sizes, and a check that each row travelled with its id.
struct Epoch {
  std::vector<int32_t> ids;
  std::vector<int64_t> sizes;
};

Epoch run_epoch(BatchIterator& it) {
  Epoch e;
  std::vector<Tensor> batch;
  while (it.next(batch)) {
    REQUIRE(batch.size() == 2);
    std::vector<int32_t> ids = batch[0].to_vector<int32_t>();
    std::vector<float> rows = batch[1].to_vector<float>();
    REQUIRE(batch[1].shape() == Shape{static_cast<int64_t>(ids.size()), 2});
    for (size_t i = 0; i < ids.size(); ++i) {
      CHECK(rows[2 * i] == static_cast<float>(ids[i]));
      CHECK(rows[2 * i + 1] == -static_cast<float>(ids[i]));
    }
    e.ids.insert(e.ids.end(), ids.begin(), ids.end());
    e.sizes.push_back(static_cast<int64_t>(ids.size()));
  }
  CHECK(batch.empty());
  return e;
}

BatchIterator ids_iterator(int32_t n, int64_t batch, bool shuffle, uint64_t seed, bool drop_last = false) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<float> rows;
  for (int32_t i : ids) rows.insert(rows.end(), {static_cast<float>(i), -static_cast<float>(i)});
  return BatchIterator({host_of(ids, {n}), host_of(rows, {n, 2})}, batch, shuffle, seed, drop_last);
}

std::vector<int32_t> iota_ids(int32_t n) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  std::iota(out.begin(), out.end(), 0);
  return out;
}

}  // namespace

// --- IDX -----------------------------------------------------------------------------------------

TEST_CASE("a raw IDX file of bytes reads with its shape", "[data]") {
  TempDir dir;
  std::string path = dir.write("u8.idx", idx_file(0x08, {2, 3}, {1, 2, 3, 4, 5, 255}));
  HostTensor t = read_idx(path);
  CHECK(t.dtype == dtypes::uint8);
  CHECK(t.shape == Shape{2, 3});
  CHECK(t.data == std::vector<uint8_t>{1, 2, 3, 4, 5, 255});
  CHECK(t.to_tensor().to_vector<uint8_t>() == std::vector<uint8_t>{1, 2, 3, 4, 5, 255});
}

TEST_CASE("IDX big-endian data of every type converts to host order", "[data]") {
  TempDir dir;
  std::vector<uint8_t> i16, i32, f32, f64;
  append_be(i16, 0xfffe, 2), append_be(i16, 300, 2);
  append_be(i32, 0xfffffff9, 4), append_be(i32, 70000, 4);
  append_be(f32, 0x3fc00000, 4), append_be(f32, 0x80000000, 4);  // 1.5, -0.0
  append_be(f64, 0xc004000000000000, 8);                           // -2.5
  CHECK(values_of<int8_t>(read_idx(dir.write("i8", idx_file(0x09, {2}, {0x80, 0x7f})))) == std::vector<int8_t>{-128, 127});
  CHECK(values_of<int16_t>(read_idx(dir.write("i16", idx_file(0x0B, {2}, i16)))) == std::vector<int16_t>{-2, 300});
  CHECK(values_of<int32_t>(read_idx(dir.write("i32", idx_file(0x0C, {1, 2}, i32)))) == std::vector<int32_t>{-7, 70000});
  HostTensor f = read_idx(dir.write("f32", idx_file(0x0D, {2}, f32)));
  CHECK(f.dtype == dtypes::float32);
  CHECK(values_of<float>(f)[0] == 1.5f);
  CHECK(std::signbit(values_of<float>(f)[1]));
  HostTensor d = read_idx(dir.write("f64", idx_file(0x0E, {1, 1, 1}, f64)));
  CHECK(d.shape == Shape{1, 1, 1});
  CHECK(values_of<double>(d) == std::vector<double>{-2.5});
}

TEST_CASE("a gzipped IDX file reads the same as the raw one, in one member or several", "[data]") {
  TempDir dir;
  std::vector<uint8_t> payload(3 * 50 * 7);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 31);
  std::vector<uint8_t> raw = idx_file(0x08, {3, 50, 7}, payload);
  HostTensor want = read_idx(dir.write("raw", raw));
  HostTensor one = read_idx(dir.write("one.gz", gzip(raw)));
  CHECK(one.shape == want.shape);
  CHECK(one.data == want.data);
  std::vector<uint8_t> first(raw.begin(), raw.begin() + 100), second(raw.begin() + 100, raw.end());
  std::vector<uint8_t> two = gzip(first), tail = gzip(second);
  two.insert(two.end(), tail.begin(), tail.end());
  CHECK(read_idx(dir.write("two.gz", two)).data == want.data);
}

TEST_CASE("malformed IDX files are errors naming the file and the problem", "[data]") {
  TempDir dir;
  auto rejects = [&](const std::vector<uint8_t>& bytes, const std::string& problem) {
    INFO("problem " << problem);
    std::string path = dir.write("bad.idx", bytes);
    CHECK_THROWS_WITH(read_idx(path), Contains(path) && Contains(problem));
  };
  rejects({0x01, 0x00, 0x08, 0x01, 0, 0, 0, 0}, "bad magic");
  rejects(idx_file(0x0A, {1}, {0}), "unknown type code 0x0a");
  rejects({0, 0, 0x08}, "truncated header");
  rejects({0, 0, 0x08, 2, 0, 0, 0, 2}, "truncated header");
  rejects(idx_file(0x08, {2, 3}, {1, 2, 3, 4, 5}), "truncated data: shape (2, 3) of uint8 needs 6 bytes, the file has 5");
  rejects(idx_file(0x0C, {2}, {0, 0, 0, 1, 0, 0, 0}), "truncated data");
  rejects(idx_file(0x08, {2}, {1, 2, 3}), "trailing garbage: 1 bytes");
  rejects(idx_file(0x0E, {0xffffffff, 0xffffffff, 0xffffffff}, {}), "describe more than");
  rejects(idx_file(0x08, {0x10000, 0x10000, 2}, {}), "describe more than");

  std::vector<uint8_t> good = gzip(idx_file(0x08, {4, 4}, std::vector<uint8_t>(16, 9)));
  std::vector<uint8_t> truncated(good.begin(), good.end() - 12);
  rejects(truncated, "gzip stream is truncated");
  std::vector<uint8_t> corrupt = good;
  for (size_t i = 10; i < corrupt.size() - 8; ++i) corrupt[i] ^= 0x5a;
  rejects(corrupt, "corrupt gzip data");
  std::vector<uint8_t> after = good;
  after.insert(after.end(), {1, 2, 3});
  rejects(after, "trailing garbage: 3 bytes after the end of the gzip stream");
  rejects(gzip(idx_file(0x08, {2}, {1, 2, 3})), "trailing garbage");
  rejects(gzip(idx_file(0x08, {2}, {1})), "truncated data");
  CHECK_THROWS_WITH(read_idx((dir.path / "missing.idx").string()), Contains("cannot open") && Contains("missing.idx"));
}

TEST_CASE("Fashion-MNIST train labels: 60000, each class 6000 times", "[data]") {
  INFO("the data set comes from the Debian package dataset-fashion-mnist (make deps)");
  REQUIRE(fs::exists(kFashion + "train-labels-idx1-ubyte.gz"));
  HostTensor labels = read_idx(kFashion + "train-labels-idx1-ubyte.gz");
  CHECK(labels.dtype == dtypes::uint8);
  REQUIRE(labels.shape == Shape{60000});
  std::vector<int64_t> count(10, 0);
  for (uint8_t y : labels.data) {
    REQUIRE(y < 10);
    ++count[y];
  }
  CHECK(count == std::vector<int64_t>(10, 6000));
  HostTensor test_labels = read_idx(kFashion + "t10k-labels-idx1-ubyte.gz");
  CHECK(test_labels.shape == Shape{10000});
}

TEST_CASE("Fashion-MNIST train images: 60000 of 28x28 bytes", "[data]") {
  REQUIRE(fs::exists(kFashion + "train-images-idx3-ubyte.gz"));
  HostTensor images = read_idx(kFashion + "train-images-idx3-ubyte.gz");
  CHECK(images.dtype == dtypes::uint8);
  CHECK(images.shape == Shape{60000, 28, 28});
  CHECK(images.data.size() == size_t{60000} * 28 * 28);
  CHECK(*std::max_element(images.data.begin(), images.data.end()) == 255);
}

// --- BatchIterator -------------------------------------------------------------------------------

TEST_CASE("each epoch visits every sample once, rows staying with their ids", "[data]") {
  BatchIterator it = ids_iterator(10, 3, true, 42);
  CHECK(it.batches_per_epoch() == 4);
  for (int epoch = 0; epoch < 3; ++epoch) {
    CHECK(it.epoch() == epoch);
    Epoch e = run_epoch(it);
    CHECK(e.sizes == std::vector<int64_t>{3, 3, 3, 1});
    std::sort(e.ids.begin(), e.ids.end());
    CHECK(e.ids == iota_ids(10));
  }
}

TEST_CASE("without shuffling the order is the sample order", "[data]") {
  BatchIterator it = ids_iterator(7, 4, false, 42);
  CHECK(run_epoch(it).ids == iota_ids(7));
  CHECK(run_epoch(it).ids == iota_ids(7));
}

TEST_CASE("the shuffle depends on seed and epoch, and only on them", "[data]") {
  BatchIterator a = ids_iterator(100, 16, true, 1), b = ids_iterator(100, 16, true, 1), c = ids_iterator(100, 16, true, 2);
  Epoch a0 = run_epoch(a), a1 = run_epoch(a);
  CHECK(a0.ids != a1.ids);
  CHECK(a0.ids != iota_ids(100));
  CHECK(run_epoch(b).ids == a0.ids);
  CHECK(run_epoch(b).ids == a1.ids);
  CHECK(run_epoch(c).ids != a0.ids);
}

TEST_CASE("the shuffle order is pinned, so old checkpoints resume the same way", "[data]") {
  // splitmix64 + Fisher-Yates as written in data.cpp (these values were checked against a separate
  // Python implementation of the same algorithm): a change here breaks resumed training runs.
  BatchIterator it = ids_iterator(10, 10, true, 42);
  CHECK(it.order(0) == std::vector<int64_t>{4, 6, 7, 0, 9, 5, 1, 2, 3, 8});
  CHECK(it.order(1) == std::vector<int64_t>{8, 7, 9, 0, 1, 2, 5, 6, 4, 3});
}

TEST_CASE("set_state resumes with the identical batch sequence", "[data]") {
  for (int64_t stop_after : {0, 5, 7, 9, 14}) {  // inside an epoch, at its end, across epochs
    INFO("stopped after " << stop_after << " calls to next");
    BatchIterator first = ids_iterator(23, 5, true, 9);
    std::vector<Tensor> batch;
    for (int64_t i = 0; i < stop_after; ++i) first.next(batch);
    BatchIterator::State saved = first.state();
    BatchIterator resumed = ids_iterator(23, 5, true, 0);  // the seed comes from the state
    resumed.set_state(saved);
    CHECK(resumed.epoch() == first.epoch());
    CHECK(resumed.position() == first.position());
    for (int i = 0; i < 12; ++i) {
      std::vector<Tensor> want, got;
      bool more = first.next(want);
      REQUIRE(resumed.next(got) == more);
      REQUIRE(got.size() == want.size());
      for (size_t k = 0; k < got.size(); ++k) CHECK(got[k].to_bytes() == want[k].to_bytes());
    }
  }
}

TEST_CASE("next returns false at the end of an epoch, then starts the next", "[data]") {
  BatchIterator it = ids_iterator(4, 2, true, 3);
  std::vector<Tensor> batch;
  CHECK(it.next(batch));
  CHECK(it.position() == 2);
  CHECK(it.next(batch));
  CHECK(it.position() == 4);
  CHECK(it.epoch() == 0);
  CHECK_FALSE(it.next(batch));
  CHECK(batch.empty());
  CHECK(it.epoch() == 1);
  CHECK(it.position() == 0);
  CHECK(it.next(batch));
  CHECK(it.state().epoch == 1);
}

TEST_CASE("drop_last drops the partial batch", "[data]") {
  BatchIterator it = ids_iterator(10, 3, true, 5, /*drop_last=*/true);
  CHECK(it.batches_per_epoch() == 3);
  Epoch e = run_epoch(it);
  CHECK(e.sizes == std::vector<int64_t>{3, 3, 3});
  std::set<int32_t> distinct(e.ids.begin(), e.ids.end());
  CHECK(distinct.size() == 9);
  CHECK(it.epoch() == 1);
}

TEST_CASE("bad iterator arguments are errors", "[data]") {
  HostTensor x = host_of(std::vector<int32_t>{1, 2, 3}, {3});
  HostTensor y = host_of(std::vector<int32_t>{1, 2}, {2});
  CHECK_THROWS_WITH(BatchIterator({x, y}, 2, true, 0), Contains("array 1 has 2 samples") && Contains("array 0 has 3"));
  CHECK_THROWS_WITH(BatchIterator({x}, 0, true, 0), Contains("batch size 0"));
  CHECK_THROWS_WITH(BatchIterator({}, 2, true, 0), Contains("no arrays"));
  CHECK_THROWS_WITH(BatchIterator({x}, 4, true, 0, true), Contains("no batch of 4 with drop_last"));
  HostTensor short_data = x;
  short_data.data.pop_back();
  CHECK_THROWS_WITH(BatchIterator({short_data}, 2, true, 0), Contains("holds 11 bytes"));
  BatchIterator it({x}, 2, true, 0);
  CHECK_THROWS_WITH(it.set_state({0, 0, 4}), Contains("out of range"));
  CHECK_THROWS_WITH(it.set_state({0, -1, 0}), Contains("out of range"));
}

TEST_CASE("samples of zero bytes are an error, not a null memcpy or a 4-billion-sample allocation", "[data]") {
  HostTensor empty_rows{dtypes::uint8, {5, 0}, {}};
  HostTensor ids = host_of(std::vector<int32_t>{0, 1, 2, 3, 4}, {5});
  CHECK_THROWS_WITH(BatchIterator({ids, empty_rows}, 2, false, 0),
                    Contains("array 1 has shape (5, 0): each of its 5 samples is 0 bytes"));
  // A valid IDX header for 4294967295 samples of nothing: read, but no iterator over it.
  TempDir dir;
  HostTensor huge = read_idx(dir.write("empty.idx", idx_file(0x08, {0xffffffff, 0}, {})));
  CHECK(huge.shape == Shape{0xffffffff, 0});
  CHECK_THROWS_WITH(BatchIterator({huge}, 128, true, 0), Contains("4294967295 samples is 0 bytes"));
}

TEST_CASE("one epoch of Fashion-MNIST through the iterator sees every label count", "[data]") {
  HostTensor images = read_idx(kFashion + "train-images-idx3-ubyte.gz");
  HostTensor labels = read_idx(kFashion + "train-labels-idx1-ubyte.gz");
  BatchIterator it({images, labels}, 512, true, 1);
  CHECK(it.batches_per_epoch() == 118);
  std::vector<int64_t> count(10, 0);
  std::vector<Tensor> batch;
  int64_t batches = 0;
  while (it.next(batch)) {
    ++batches;
    CHECK(batch[0].shape()[1] == 28);
    for (uint8_t y : batch[1].to_vector<uint8_t>()) ++count[y];
  }
  CHECK(batches == 118);
  CHECK(count == std::vector<int64_t>(10, 6000));
}
