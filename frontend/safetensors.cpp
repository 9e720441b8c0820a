#include "frontend/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

namespace kiln {
namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // real headers are kilobytes; more is a header bomb
constexpr const char* kMetadataKey = "__metadata__";

[[noreturn]] void fail(const std::string& what, const std::string& problem) {
  throw Error(cat("load_safetensors: '", what, "': ", problem,
                  "; the file is not valid safetensors (truncated, corrupt or from a buggy writer): write it again"));
}

[[noreturn]] void fail_tensor(const std::string& what, const std::string& name, const std::string& problem) {
  std::string shown = name.size() <= 80 ? name : name.substr(0, 77) + "...";
  fail(what, cat("tensor '", shown, "': ", problem));
}

// A JSON value for an error message, cut short: an untrusted header can hold megabytes in one value.
std::string brief(const json& value) {
  std::string text = value.dump();
  return text.size() <= 60 ? text : text.substr(0, 57) + "...";
}

std::optional<DType> dtype_from_safetensors(const std::string& name) {
  for (DType d : all_scalar_dtypes())
    if (safetensors_dtype_name(d) == name) return d;
  return std::nullopt;
}

// A tensor's entry in the header, checked against itself (not yet against the other tensors).
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// nlohmann keeps the last of two equal keys silently; a duplicated tensor name must be an error. The
// depth is capped too: dump() (in brief()) recurses once per level, and a header nests 3 levels.
json parse_header_json(const uint8_t* text, size_t size, const std::string& what) {
  constexpr int kMaxDepth = 8;
  std::vector<std::set<std::string>> open_objects;
  auto reject_duplicates = [&](int depth, json::parse_event_t event, json& parsed) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) && depth >= kMaxDepth)
      fail(what, cat("the header nests JSON more than ", kMaxDepth, " levels deep (a safetensors header nests 3)"));
    if (event == json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == json::parse_event_t::object_end) open_objects.pop_back();
    if (event == json::parse_event_t::key && !open_objects.back().insert(parsed.get<std::string>()).second)
      fail(what, cat("the header has the key \"", parsed.get<std::string>(), "\" twice in one object"));
    return true;
  };
  try {
    return json::parse(text, text + size, reject_duplicates);
  } catch (const json::exception& e) {
    fail(what, cat("the header is not valid JSON (", e.what(), ")"));
  }
}

std::vector<uint64_t> unsigned_array(const json& value, const std::string& what, const std::string& name, const char* field) {
  if (!value.is_array()) fail_tensor(what, name, cat("\"", field, "\" is ", brief(value), ", not an array"));
  std::vector<uint64_t> out;
  for (const json& v : value) {
    if (v.is_number_integer() && !v.is_number_unsigned())
      fail_tensor(what, name, cat("\"", field, "\" ", brief(value), " has a negative entry"));
    if (!v.is_number_unsigned())
      fail_tensor(what, name, cat("\"", field, "\" ", brief(value), " has an entry that is not a non-negative integer"));
    out.push_back(v.get<uint64_t>());
  }
  return out;
}

Entry parse_entry(const std::string& name, const json& value, uint64_t buffer_size, const std::string& what) {
  if (!value.is_object()) fail_tensor(what, name, cat("the entry is ", brief(value), ", not an object"));
  for (const auto& [key, _] : value.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail_tensor(what, name, cat("unknown key \"", key, "\" (expected dtype, shape, data_offsets)"));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!value.contains(key)) fail_tensor(what, name, cat("the entry has no \"", key, "\""));

  Entry e{name, dtypes::void_, {}, 0, 0};
  const json& dtype = value["dtype"];
  if (!dtype.is_string()) fail_tensor(what, name, cat("\"dtype\" is ", brief(dtype), ", not a string"));
  std::optional<DType> d = dtype_from_safetensors(dtype.get<std::string>());
  if (!d) fail_tensor(what, name, cat("unknown dtype ", brief(dtype), " (kiln reads BOOL, U8, I8, U16, I16, U32, I32, U64, I64, F16, BF16, F32, F64)"));
  e.dtype = *d;

  uint64_t bytes = e.dtype.itemsize();
  for (uint64_t dim : unsigned_array(value["shape"], what, name, "shape")) {
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || __builtin_mul_overflow(bytes, dim, &bytes))
      fail_tensor(what, name, cat("shape ", brief(value["shape"]), " of ", brief(dtype), " overflows 64-bit byte counts"));
    e.shape.push_back(static_cast<int64_t>(dim));
  }

  std::vector<uint64_t> offsets = unsigned_array(value["data_offsets"], what, name, "data_offsets");
  if (offsets.size() != 2) fail_tensor(what, name, cat("\"data_offsets\" ", brief(value["data_offsets"]), " needs exactly [begin, end]"));
  e.begin = offsets[0];
  e.end = offsets[1];
  if (e.end < e.begin) fail_tensor(what, name, cat("data_offsets [", e.begin, ", ", e.end, "] end before they begin"));
  if (e.end > buffer_size)
    fail_tensor(what, name, cat("data_offsets [", e.begin, ", ", e.end, "] run past the end of the ", buffer_size, "-byte data buffer"));
  if (e.end - e.begin != bytes)
    fail_tensor(what, name, cat("shape ", brief(value["shape"]), " of ", brief(dtype), " needs ", bytes, " bytes but data_offsets [",
                                e.begin, ", ", e.end, "] span ", e.end - e.begin));
  return e;
}

// The tensors must tile the buffer: no overlap, no hole, nothing left over.
void check_tiling(std::vector<Entry>& entries, uint64_t buffer_size, const std::string& what) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t cursor = 0;
  const std::string* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < cursor)
      fail_tensor(what, e.name, cat("bytes [", e.begin, ", ", e.end, ") overlap tensor '", *previous, "', which ends at ", cursor));
    if (e.begin > cursor)
      fail_tensor(what, e.name, cat("a hole of ", e.begin - cursor, " bytes before it (bytes [", cursor, ", ", e.begin,
                                    ") belong to no tensor)"));
    cursor = e.end;
    previous = &e.name;
  }
  if (cursor != buffer_size)
    fail(what, cat(buffer_size - cursor, " unused bytes after the last tensor (the data buffer is ", buffer_size, " bytes, tensors end at ", cursor, ")"));
}

// The 8-byte length, the padded JSON header, and the tensors in the order their bytes follow.
struct FilePlan {
  std::vector<uint8_t> head;
  std::vector<Tensor> tensors;
};

FilePlan plan_file(const std::map<std::string, Tensor>& tensors, const std::map<std::string, std::string>& metadata, const char* op) {
  FilePlan plan;
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {  // std::map: name order
    if (name == kMetadataKey) throw Error(cat(op, ": a tensor cannot be named \"", kMetadataKey, "\" (the format reserves it); rename it"));
    uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.dtype().itemsize();
    header[name] = {{"dtype", safetensors_dtype_name(t.dtype())}, {"shape", t.shape()}, {"data_offsets", json::array({offset, offset + bytes})}};
    offset += bytes;
    plan.tensors.push_back(t);
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    throw Error(cat(op, ": a tensor name or metadata string is not valid UTF-8 (", e.what(), "); use UTF-8 text"));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  for (int i = 0; i < 8; ++i) plan.head.push_back(static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i)));
  plan.head.insert(plan.head.end(), text.begin(), text.end());
  return plan;
}

[[noreturn]] void fail_io(const char* op, const std::string& call, const std::string& path) {
  throw Error(cat(op, ": ", call, " '", path, "' failed: ", std::strerror(errno), "; check that the path exists and is writable"));
}

// A temporary file beside the target that is removed unless commit() renamed it into place.
class TempFile {
 public:
  explicit TempFile(const std::string& target) : target_(target) {
    static std::atomic<uint64_t> counter{0};
    path_ = cat(target, ".tmp.", getpid(), ".", counter++);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) fail_io("save_safetensors", "creating", path_);
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const uint8_t* data, size_t size) {
    while (size > 0) {
      ssize_t n = ::write(fd_, data, size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail_io("save_safetensors", "writing", path_);
      data += n;
      size -= static_cast<size_t>(n);
    }
  }

  void commit() {
    if (::fsync(fd_) != 0) fail_io("save_safetensors", "fsync of", path_);
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail_io("save_safetensors", "closing", path_);
    if (std::rename(path_.c_str(), target_.c_str()) != 0) fail_io("save_safetensors", "renaming to", target_);
    committed_ = true;
    // Make the rename itself durable. Best effort on purpose: some file systems refuse fsync on a
    // folder, and the file is already complete and in place.
    size_t slash = target_.find_last_of('/');
    std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : target_.substr(0, slash));
    int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd >= 0) {
      ::fsync(dir_fd);
      ::close(dir_fd);
    }
  }

 private:
  std::string target_, path_;
  int fd_ = -1;
  bool committed_ = false;
};

// A read-only mapping of a whole file, unmapped on scope exit.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(cat("load_safetensors: cannot open '", path, "': ", std::strerror(errno), "; check the path"));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw Error(cat("load_safetensors: '", path, "' is not a regular file; pass the path of a .safetensors file"));
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        throw Error(cat("load_safetensors: cannot map '", path, "' (", size_, " bytes): ", std::strerror(errno)));
      }
      data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

std::string safetensors_dtype_name(DType dtype) {
  if (dtype.count != 1 || dtype.is_ptr) throw Error(cat("safetensors: dtype ", dtype.name(), " is not a scalar dtype"));
  switch (dtype.scalar) {
    case ScalarType::Bool: return "BOOL";
    case ScalarType::Int8: return "I8";
    case ScalarType::Int16: return "I16";
    case ScalarType::Int32: return "I32";
    case ScalarType::Int64: return "I64";
    case ScalarType::UInt8: return "U8";
    case ScalarType::UInt16: return "U16";
    case ScalarType::UInt32: return "U32";
    case ScalarType::UInt64: return "U64";
    case ScalarType::Float16: return "F16";
    case ScalarType::BFloat16: return "BF16";
    case ScalarType::Float32: return "F32";
    case ScalarType::Float64: return "F64";
    case ScalarType::Void: break;
  }
  throw Error("safetensors: a void tensor cannot be stored; give it a real dtype");
}

SafetensorsData parse_safetensors(const uint8_t* data, size_t size, const std::string& what, const std::string& device) {
  if (size < 8) fail(what, cat("the file is ", size, " bytes, too short for the 8-byte header length"));
  uint64_t header_size = read_u64_le(data);
  if (header_size > kMaxHeaderBytes)
    fail(what, cat("the header length ", header_size, " is over the limit of ", kMaxHeaderBytes, " bytes (a header bomb?)"));
  if (header_size > size - 8)
    fail(what, cat("the header length ", header_size, " runs past the end of the ", size, "-byte file"));
  const uint8_t* buffer = data + 8 + header_size;
  uint64_t buffer_size = size - 8 - header_size;

  json header = parse_header_json(data + 8, header_size, what);
  if (!header.is_object()) fail(what, cat("the header is a JSON ", header.type_name(), ", not an object"));
  SafetensorsData out;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name != kMetadataKey) {
      entries.push_back(parse_entry(name, value, buffer_size, what));
      continue;
    }
    if (!value.is_object()) fail(what, cat("\"__metadata__\" is ", brief(value), ", not an object of strings"));
    for (const auto& [key, text] : value.items()) {
      if (!text.is_string()) fail(what, cat("\"__metadata__\" entry \"", key, "\" is ", brief(text), ", not a string"));
      out.metadata[key] = text.get<std::string>();
    }
  }
  check_tiling(entries, buffer_size, what);
  for (const Entry& e : entries) out.tensors.emplace(e.name, Tensor::from_raw(buffer + e.begin, e.dtype, e.shape, device));
  return out;
}

SafetensorsData load_safetensors(const std::string& path, const std::string& device) {
  MappedFile file(path);
  return parse_safetensors(file.data(), file.size(), path, device);
}

std::vector<uint8_t> safetensors_bytes(const std::map<std::string, Tensor>& tensors, const std::map<std::string, std::string>& metadata) {
  FilePlan plan = plan_file(tensors, metadata, "safetensors_bytes");
  std::vector<uint8_t> out = std::move(plan.head);
  for (Tensor& t : plan.tensors) {
    std::vector<uint8_t> bytes = t.to_bytes();
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  return out;
}

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors, const std::map<std::string, std::string>& metadata) {
  FilePlan plan = plan_file(tensors, metadata, "save_safetensors");
  realize_all(plan.tensors);  // one schedule for all of them, before the file exists
  TempFile file(path);
  file.write(plan.head.data(), plan.head.size());
  for (Tensor& t : plan.tensors) {
    std::vector<uint8_t> bytes = t.to_bytes();
    file.write(bytes.data(), bytes.size());
  }
  file.commit();
}

}  // namespace kiln
