#include "frontend/data.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <numeric>
#include <optional>
#include <span>

namespace kiln {
namespace {

constexpr uint64_t kMaxIdxBytes = uint64_t{4} << 30;  // Fashion-MNIST is 47 MB; more is a corrupt header or a bomb

size_t host_bytes(const HostTensor& t) { return static_cast<size_t>(numel(t.shape)) * t.dtype.itemsize(); }

// --- IDX -----------------------------------------------------------------------------------------

[[noreturn]] void fail_idx(const std::string& path, const std::string& problem) {
  throw Error(cat("read_idx: '", path, "': ", problem, "; the file is not a valid IDX file (truncated or corrupt?): fetch it again"));
}

std::string hex_byte(uint8_t b) {
  const char* digits = "0123456789abcdef";
  return cat("0x", digits[b >> 4], digits[b & 15]);
}

struct IdxHeader {
  DType dtype;
  Shape shape;
  size_t header_bytes;
  size_t total_bytes;  // header and data
};

DType idx_dtype(uint8_t code, const std::string& path) {
  switch (code) {
    case 0x08: return dtypes::uint8;
    case 0x09: return dtypes::int8;
    case 0x0B: return dtypes::int16;
    case 0x0C: return dtypes::int32;
    case 0x0D: return dtypes::float32;
    case 0x0E: return dtypes::float64;
    default: fail_idx(path, cat("unknown type code ", hex_byte(code), " (IDX has 0x08 u8, 0x09 i8, 0x0b i16, 0x0c i32, 0x0d f32, 0x0e f64)"));
  }
}

// The header at the start of `bytes`, or nullopt while `bytes` is too short to hold all of it.
std::optional<IdxHeader> parse_idx_header(std::span<const uint8_t> bytes, const std::string& path) {
  if (bytes.size() < 4) return std::nullopt;
  if (bytes[0] != 0 || bytes[1] != 0)
    fail_idx(path, cat("bad magic: the file starts ", hex_byte(bytes[0]), " ", hex_byte(bytes[1]), ", not 0x00 0x00"));
  IdxHeader h{idx_dtype(bytes[2], path), {}, 4 + 4 * size_t{bytes[3]}, 0};
  if (bytes.size() < h.header_bytes) return std::nullopt;
  uint64_t data_bytes = h.dtype.itemsize();
  for (size_t i = 0; i < bytes[3]; ++i) {
    const uint8_t* p = &bytes[4 + 4 * i];
    uint64_t dim = (uint64_t{p[0]} << 24) | (uint64_t{p[1]} << 16) | (uint64_t{p[2]} << 8) | p[3];
    h.shape.push_back(static_cast<int64_t>(dim));
    if (__builtin_mul_overflow(data_bytes, dim, &data_bytes) || data_bytes > kMaxIdxBytes)
      fail_idx(path, cat("dimensions ", shape_str(h.shape), "... describe more than ", kMaxIdxBytes, " bytes of data"));
  }
  h.total_bytes = h.header_bytes + data_bytes;
  return h;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error(cat("read_idx: cannot open '", path, "': ", std::strerror(errno), "; check the path"));
  std::streamoff size = in.tellg();
  if (size < 0) throw Error(cat("read_idx: '", path, "' is not a regular file; pass the path of an IDX file"));
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), size)) throw Error(cat("read_idx: reading '", path, "' failed: ", std::strerror(errno)));
  return bytes;
}

// Inflates a gzip file (one or more members). Output stops at what the IDX header promises, so a
// decompression bomb or trailing garbage is caught without inflating it all.
std::vector<uint8_t> gunzip(const std::vector<uint8_t>& in, const std::string& path) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw Error(cat("read_idx: '", path, "': zlib inflateInit2 failed (out of memory?)"));
  struct End {
    z_stream* zs;
    ~End() { inflateEnd(zs); }
  } end{&zs};
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(std::min<size_t>(in.size(), UINT32_MAX));  // IDX files are far below 4 GiB compressed
  std::vector<uint8_t> out(1024);  // room for any IDX header (4 + 4 * 255 bytes)
  size_t produced = 0;
  std::optional<IdxHeader> header;
  for (;;) {
    if (produced == out.size()) {
      // Grow straight to what the header promises (+1 to notice trailing data), but never past what
      // gzip can expand the input to (1032:1 at most): a lying header cannot allocate gigabytes.
      size_t promised = header ? header->total_bytes + 1 : out.size() * 2;
      out.resize(std::max(out.size() * 2, std::min(promised, in.size() * 1032)));
    }
    zs.next_out = out.data() + produced;
    zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - produced, UINT32_MAX));
    int rc = inflate(&zs, Z_NO_FLUSH);
    produced = static_cast<size_t>(zs.next_out - out.data());
    if (rc == Z_BUF_ERROR || (rc == Z_OK && zs.avail_in == 0 && zs.avail_out != 0))
      fail_idx(path, cat("the gzip stream is truncated after ", zs.total_in, " compressed bytes"));
    if (rc != Z_OK && rc != Z_STREAM_END)
      fail_idx(path, cat("corrupt gzip data (zlib: ", zs.msg ? zs.msg : "error code " + std::to_string(rc), ")"));
    if (!header) header = parse_idx_header({out.data(), produced}, path);
    if (header && produced > header->total_bytes)
      fail_idx(path, cat("trailing garbage: more than the ", header->total_bytes, " bytes that shape ", shape_str(header->shape),
                         " of ", header->dtype.name(), " needs"));
    if (rc != Z_STREAM_END) continue;
    if (zs.avail_in == 0) {
      out.resize(produced);
      return out;
    }
    if (zs.avail_in < 2 || zs.next_in[0] != 0x1f || zs.next_in[1] != 0x8b)
      fail_idx(path, cat("trailing garbage: ", zs.avail_in, " bytes after the end of the gzip stream"));
    inflateReset(&zs);  // gzip allows several members back to back
  }
}

void swap_to_host(HostTensor& t) {
  size_t item = t.dtype.itemsize();
  if (std::endian::native == std::endian::big || item == 1) return;
  for (size_t i = 0; i < t.data.size(); i += item) std::reverse(t.data.begin() + i, t.data.begin() + i + item);
}

// --- shuffling: splitmix64 + Fisher-Yates, the same on every platform --------------------------

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) without modulo bias: reject the few draws below 2^64 mod bound.
uint64_t uniform_below(uint64_t& state, uint64_t bound) {
  uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    uint64_t x = splitmix64(state);
    if (x >= threshold) return x % bound;
  }
}

}  // namespace

Tensor HostTensor::to_tensor(const std::string& device) const {
  if (data.size() != host_bytes(*this))
    throw Error(cat("HostTensor::to_tensor: ", data.size(), " bytes do not fill shape ", shape_str(shape), " of ", dtype.name(), " (",
                    host_bytes(*this), " bytes)"));
  return Tensor::from_raw(data.data(), dtype, shape, device);
}

HostTensor read_idx(const std::string& path) { return parse_idx(read_file(path), path); }

HostTensor parse_idx(std::vector<uint8_t> bytes, const std::string& path) {
  if (bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) bytes = gunzip(bytes, path);
  std::optional<IdxHeader> header = parse_idx_header(bytes, path);
  if (!header) fail_idx(path, cat("truncated header: only ", bytes.size(), " bytes"));
  if (bytes.size() < header->total_bytes)
    fail_idx(path, cat("truncated data: shape ", shape_str(header->shape), " of ", header->dtype.name(), " needs ",
                       header->total_bytes - header->header_bytes, " bytes, the file has ", bytes.size() - header->header_bytes));
  if (bytes.size() > header->total_bytes)
    fail_idx(path, cat("trailing garbage: ", bytes.size() - header->total_bytes, " bytes after the data of shape ", shape_str(header->shape)));
  HostTensor t{header->dtype, header->shape, {}};
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(header->header_bytes));
  t.data = std::move(bytes);
  swap_to_host(t);
  return t;
}

// --- BatchIterator -------------------------------------------------------------------------------

std::vector<int64_t> epoch_order(int64_t samples, bool shuffle, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> out(static_cast<size_t>(samples));
  std::iota(out.begin(), out.end(), int64_t{0});
  if (!shuffle) return out;
  uint64_t state = seed;
  state = splitmix64(state) ^ static_cast<uint64_t>(epoch);  // one stream per (seed, epoch)
  for (size_t i = out.size(); i > 1; --i) std::swap(out[i - 1], out[uniform_below(state, i)]);
  return out;
}

namespace {
void check_shard(const Shard& s, const char* op) {
  if (s.world < 1 || s.rank < 0 || s.rank >= s.world)
    throw Error(cat(op, ": shard rank ", s.rank, " of world ", s.world, " is out of range; need world >= 1 and 0 <= rank < world"));
}
int64_t shard_size(int64_t samples, const Shard& s) {
  return s.drop_remainder ? samples / s.world : (samples + s.world - 1) / s.world;
}
}  // namespace

std::vector<int64_t> shard_of(const std::vector<int64_t>& order, const Shard& shard) {
  check_shard(shard, "shard_of");
  int64_t n = static_cast<int64_t>(order.size()), count = shard_size(n, shard);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count));
  // Position p of the padded order is order[p mod n]: padding repeats the order from its start.
  for (int64_t i = 0; i < count; ++i) out.push_back(order[static_cast<size_t>((shard.rank + i * shard.world) % n)]);
  return out;
}

BatchIterator::BatchIterator(std::vector<HostTensor> arrays, int64_t batch_size, bool shuffle, uint64_t seed, bool drop_last, Shard shard)
    : arrays_(std::move(arrays)), samples_(0), batch_size_(batch_size), shuffle_(shuffle), drop_last_(drop_last), shard_(shard), seed_(seed) {
  check_shard(shard, "BatchIterator");
  if (arrays_.empty()) throw Error("BatchIterator: no arrays; pass at least one HostTensor (e.g. images and labels)");
  if (batch_size <= 0) throw Error(cat("BatchIterator: batch size ", batch_size, " must be positive"));
  samples_ = arrays_[0].shape.empty() ? 0 : arrays_[0].shape[0];
  for (size_t i = 0; i < arrays_.size(); ++i) {
    const HostTensor& a = arrays_[i];
    if (a.shape.empty()) throw Error(cat("BatchIterator: array ", i, " is a scalar; every array needs a first (sample) dimension"));
    if (a.data.size() != host_bytes(a))
      throw Error(cat("BatchIterator: array ", i, " holds ", a.data.size(), " bytes but shape ", shape_str(a.shape), " of ",
                      a.dtype.name(), " needs ", host_bytes(a)));
    if (a.shape[0] != samples_)
      throw Error(cat("BatchIterator: array ", i, " has ", a.shape[0], " samples (shape ", shape_str(a.shape), ") but array 0 has ",
                      samples_, "; every array needs the same first dimension"));
    row_bytes_.push_back(samples_ == 0 ? 0 : host_bytes(a) / static_cast<size_t>(samples_));
    if (samples_ > 0 && row_bytes_.back() == 0)
      throw Error(cat("BatchIterator: array ", i, " has shape ", shape_str(a.shape), ": each of its ", samples_,
                      " samples is 0 bytes; every array needs data per sample (a corrupt file?)"));
  }
  epoch_samples_ = shard_size(samples_, shard_);
  if (batches_per_epoch() == 0)
    throw Error(cat("BatchIterator: ", epoch_samples_, " samples", shard_.world > 1 ? cat(" (rank ", shard_.rank, "'s part of ", samples_, ")") : "",
                    " make no batch of ", batch_size, drop_last ? " with drop_last" : "", "; use a smaller batch size",
                    drop_last ? " or drop_last = false" : ""));
}

int64_t BatchIterator::batches_per_epoch() const {
  return drop_last_ ? epoch_samples_ / batch_size_ : (epoch_samples_ + batch_size_ - 1) / batch_size_;
}

std::vector<int64_t> BatchIterator::order(int64_t epoch) const {
  std::vector<int64_t> all = epoch_order(samples_, shuffle_, seed_, epoch);
  return shard_.world == 1 ? all : shard_of(all, shard_);
}

bool BatchIterator::next(std::vector<Tensor>& batch, const std::string& device) {
  batch.clear();
  int64_t end = drop_last_ ? batches_per_epoch() * batch_size_ : epoch_samples_;
  if (position_ >= end) {
    ++epoch_;
    position_ = 0;
    return false;
  }
  if (order_epoch_ != epoch_) {
    order_ = order(epoch_);
    order_epoch_ = epoch_;
  }
  int64_t count = std::min(batch_size_, epoch_samples_ - position_);
  for (size_t a = 0; a < arrays_.size(); ++a) {
    size_t row = row_bytes_[a];
    scratch_.resize(static_cast<size_t>(count) * row);
    const uint8_t* src = arrays_[a].data.data();
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(scratch_.data() + static_cast<size_t>(i) * row, src + static_cast<size_t>(order_[position_ + i]) * row, row);
    Shape shape = arrays_[a].shape;
    shape[0] = count;
    batch.push_back(Tensor::from_raw(scratch_.data(), arrays_[a].dtype, shape, device));
  }
  position_ += count;
  return true;
}

void BatchIterator::set_state(const State& state) {
  if (state.epoch < 0 || state.position < 0 || state.position > epoch_samples_)
    throw Error(cat("BatchIterator::set_state: epoch ", state.epoch, ", position ", state.position, " is out of range (epoch >= 0, 0 <= position <= ",
                    epoch_samples_, "); pass a State saved from an iterator over the same data"));
  if (state.seed != seed_) order_epoch_ = -1;
  seed_ = state.seed;
  epoch_ = state.epoch;
  position_ = state.position;
}

}  // namespace kiln
