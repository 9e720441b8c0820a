// safetensors: bit-exact round trips of every dtype, the byte layout checked against a hand-built
// file, atomic saves, and every malformed header rejected with an error that names the problem.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "frontend/safetensors.h"
#include "helpers.h"

using namespace kiln;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

using test::TempDir;

namespace {


std::vector<uint8_t> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
void append(std::vector<uint8_t>& out, T value) {
  uint8_t raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));
  out.insert(out.end(), raw, raw + sizeof(T));
}

// A file assembled by hand: the length as 8 little-endian bytes, the header text, the data buffer.
std::vector<uint8_t> file_of(const std::string& header, const std::vector<uint8_t>& buffer) {
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), buffer.begin(), buffer.end());
  return out;
}

SafetensorsData parse(const std::vector<uint8_t>& bytes) { return parse_safetensors(bytes.data(), bytes.size(), "bad.safetensors"); }

// Bytes that stress each dtype: special float encodings first (NaN payloads, -0.0, infinities,
// subnormals), then a deterministic byte pattern. Bools are stored as 0 or 1 only.
std::vector<uint8_t> interesting_bytes(DType d, size_t count) {
  std::vector<uint8_t> out;
  if (d == dtypes::float32)
    for (uint32_t bits : {0x7fc12345u, 0xffa00001u, 0x80000000u, 0x7f800000u, 0x00000001u}) append(out, bits);
  if (d == dtypes::float64)
    for (uint64_t bits : {0x7ff8000000abcdefull, 0xfff0000000000001ull, 0x8000000000000000ull, 0x0000000000000001ull}) append(out, bits);
  if (d == dtypes::float16 || d == dtypes::bfloat16)
    for (uint16_t bits : {uint16_t{0x7e01}, uint16_t{0xfd01}, uint16_t{0x8000}, uint16_t{0x0001}, uint16_t{0xfc00}}) append(out, bits);
  uint32_t state = 12345;
  while (out.size() < count * d.itemsize()) {
    state = state * 1664525u + 1013904223u;
    out.push_back(d == dtypes::bool_ ? (state >> 31) : static_cast<uint8_t>(state >> 24));
  }
  return out;
}

}  // namespace

TEST_CASE("every dtype round-trips through a file bit-exactly", "[safetensors]") {
  TempDir dir;
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::vector<uint8_t>> want;
  for (DType d : all_scalar_dtypes()) {
    std::string name = "t_" + d.name();
    want[name] = interesting_bytes(d, 24);
    tensors.emplace(name, Tensor::from_raw(want[name].data(), d, {2, 3, 4}));
  }
  save_safetensors((dir.path / "all.safetensors").string(), tensors);
  SafetensorsData got = load_safetensors((dir.path / "all.safetensors").string());
  REQUIRE(got.tensors.size() == all_scalar_dtypes().size());
  for (DType d : all_scalar_dtypes()) {
    INFO("dtype " << d.name());
    Tensor t = got.tensors.at("t_" + d.name());
    CHECK(t.dtype() == d);
    CHECK(t.shape() == Shape{2, 3, 4});
    CHECK(t.to_bytes() == want.at("t_" + d.name()));
  }
  CHECK(got.metadata.empty());
}

TEST_CASE("scalars and empty tensors round-trip in memory", "[safetensors]") {
  float pi = 3.25f;
  std::map<std::string, Tensor> tensors{{"scalar", Tensor::from_raw(&pi, dtypes::float32, {})},
                                        {"empty", Tensor::from_raw(nullptr, dtypes::int64, {0, 5})}};
  std::vector<uint8_t> bytes = safetensors_bytes(tensors);
  CHECK(bytes.size() % 8 == 4);  // 8-byte length + padded header + 4 data bytes
  SafetensorsData got = parse(bytes);
  CHECK(got.tensors.at("scalar").shape() == Shape{});
  CHECK(got.tensors.at("scalar").item<float>() == 3.25f);
  CHECK(got.tensors.at("empty").shape() == Shape{0, 5});
  CHECK(got.tensors.at("empty").to_bytes().empty());
}

TEST_CASE("metadata round-trips", "[safetensors]") {
  TempDir dir;
  std::string path = (dir.path / "m.safetensors").string();
  std::map<std::string, std::string> metadata{{"format", "pt"}, {"epoch", "7"}, {"note", "quotes \" and \u00e9 survive"}};
  save_safetensors(path, {{"w", Tensor::ones({3})}}, metadata);
  SafetensorsData got = load_safetensors(path);
  CHECK(got.metadata == metadata);
  CHECK(got.tensors.at("w").to_vector<float>() == std::vector<float>{1, 1, 1});
}

TEST_CASE("the writer's bytes match a file built by hand from the format", "[safetensors]") {
  std::map<std::string, Tensor> tensors{{"b", Tensor::from_vector<int16_t>({1, -2, 3}, {3})},
                                        {"a", Tensor::from_vector<float>({1.0f, -0.0f}, {1, 2})}};
  // nlohmann writes keys sorted and compact; data follows in name order; spaces pad to 8 bytes.
  std::string header = R"({"__metadata__":{"k":"v"},"a":{"data_offsets":[0,8],"dtype":"F32","shape":[1,2]},)"
                       R"("b":{"data_offsets":[8,14],"dtype":"I16","shape":[3]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<uint8_t> buffer;
  append(buffer, 1.0f);
  append(buffer, -0.0f);
  for (int16_t v : {1, -2, 3}) append(buffer, v);
  CHECK(safetensors_bytes(tensors, {{"k", "v"}}) == file_of(header, buffer));
}

TEST_CASE("a hand-built file with other spacing and key order reads back", "[safetensors]") {
  std::vector<uint8_t> buffer;
  for (int32_t v : {7, -8}) append(buffer, v);
  append(buffer, uint16_t{0x3c00});  // 1.0 in float16
  std::string header = R"(  { "y" : {"shape":[1], "dtype":"F16", "data_offsets":[8, 10]},)"
                       R"( "x": {"data_offsets":[0,8],"shape":[2],"dtype":"I32"}, "__metadata__": {"a": "b"} }    )";
  SafetensorsData got = parse(file_of(header, buffer));
  CHECK(got.tensors.at("x").to_vector<int32_t>() == std::vector<int32_t>{7, -8});
  CHECK(got.tensors.at("y").dtype() == dtypes::float16);
  CHECK(got.tensors.at("y").cast(dtypes::float32).item<float>() == 1.0f);
  CHECK(got.metadata == std::map<std::string, std::string>{{"a", "b"}});
}

TEST_CASE("saving is atomic: it replaces the file whole and leaves no temporary behind", "[safetensors]") {
  TempDir dir;
  std::string path = (dir.path / "model.safetensors").string();
  save_safetensors(path, {{"w", Tensor::full({4}, 1.0)}});
  save_safetensors(path, {{"w", Tensor::full({4}, 2.0)}, {"b", Tensor::zeros({2})}});
  CHECK(dir.files() == std::vector<std::string>{"model.safetensors"});
  SafetensorsData got = load_safetensors(path);
  CHECK(got.tensors.size() == 2);
  CHECK(got.tensors.at("w").to_vector<float>() == std::vector<float>{2, 2, 2, 2});

  // A failed save leaves the old file as it was, and no temporary.
  std::vector<uint8_t> before = read_all(path);
  REQUIRE_THROWS_WITH(save_safetensors(path, {{"__metadata__", Tensor::ones({1})}}), Contains("__metadata__") && Contains("rename it"));
  CHECK(read_all(path) == before);
  CHECK(dir.files() == std::vector<std::string>{"model.safetensors"});
}

TEST_CASE("saving into a missing folder is an error naming the path", "[safetensors]") {
  TempDir dir;
  std::string path = (dir.path / "no_such_folder" / "m.safetensors").string();
  REQUIRE_THROWS_WITH(save_safetensors(path, {{"w", Tensor::ones({1})}}), Contains("save_safetensors") && Contains("no_such_folder"));
}

TEST_CASE("loading a missing file is an error naming it", "[safetensors]") {
  REQUIRE_THROWS_WITH(load_safetensors("/nonexistent/x.safetensors"), Contains("cannot open") && Contains("/nonexistent/x.safetensors"));
}

TEST_CASE("a malformed file on disk is an error naming the file", "[safetensors]") {
  TempDir dir;
  fs::path path = dir.path / "short.safetensors";
  write_all(path, {1, 2, 3});
  REQUIRE_THROWS_WITH(load_safetensors(path.string()), Contains(path.string()) && Contains("too short"));
}

TEST_CASE("a malformed header length is rejected", "[safetensors]") {
  std::vector<uint8_t> huge = file_of("{}", {});
  huge[5] = 1;  // 2^40 + 2 bytes of header
  CHECK_THROWS_WITH(parse(huge), Contains("bad.safetensors") && Contains("header bomb"));
  std::vector<uint8_t> past = file_of("{}", {});
  past[0] = 3;  // 3 header bytes in a file with 2 after the length
  CHECK_THROWS_WITH(parse(past), Contains("runs past the end"));
  CHECK_THROWS_WITH(parse({1, 0, 0}), Contains("too short"));
  CHECK_THROWS_WITH(parse(file_of("", {})), Contains("not valid JSON"));
}

TEST_CASE("a header that is not the expected JSON is rejected", "[safetensors]") {
  auto rejects = [](const std::string& header, const std::string& problem, const std::vector<uint8_t>& buffer = {}) {
    INFO("header " << header);
    CHECK_THROWS_WITH(parse(file_of(header, buffer)), Contains("bad.safetensors") && Contains(problem));
  };
  rejects(R"({"w": {"dtype": "F32", )", "not valid JSON");
  rejects(R"([1, 2])", "not an object");
  rejects(R"({"w": 5})", "tensor 'w': the entry is 5, not an object");
  rejects(R"({"w": {"dtype": "F32", "shape": [1]}})", "tensor 'w': the entry has no \"data_offsets\"");
  rejects(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "extra": 1}})", "unknown key \"extra\"", {0, 0, 0, 0});
  rejects(R"({"w": {"dtype": 7, "shape": [1], "data_offsets": [0, 4]}})", "tensor 'w': \"dtype\" is 7, not a string");
  rejects(R"({"w": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}})", "tensor 'w': unknown dtype \"F8_E4M3\"", {0});
  rejects(R"({"w": {"dtype": "F32", "shape": 4, "data_offsets": [0, 16]}})", "\"shape\" is 4, not an array");
  rejects(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", "tensor 'w': \"shape\" [-1] has a negative entry");
  rejects(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", "not a non-negative integer");
  rejects(R"({"w": {"dtype": "F32", "shape": ["1"], "data_offsets": [0, 4]}})", "not a non-negative integer");
  rejects(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", "needs exactly [begin, end]");
  rejects(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", "has a negative entry");
  rejects(R"({"__metadata__": ["a"]})", "\"__metadata__\" is [\"a\"], not an object of strings");
  rejects(R"({"__metadata__": {"epoch": 3}})", "\"__metadata__\" entry \"epoch\" is 3, not a string");
  rejects(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, "w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})",
          "the key \"w\" twice", {0});
}

TEST_CASE("a header nested 100,000 levels deep is rejected without recursing", "[safetensors]") {
  // The message quotes a bad entry with dump(), which recursed once per level and overflowed the stack.
  std::string header = "{\"w\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  CHECK_THROWS_WITH(parse(file_of(header, {})), Contains("bad.safetensors") && Contains("the header nests JSON more than 8 levels deep"));
  CHECK_THROWS_WITH(parse(file_of(R"({"w": {"dtype": "F32", "shape": [[[[[[[[1]]]]]]]], "data_offsets": [0, 4]}})", {0, 0, 0, 0})),
                    Contains("nests JSON more than 8 levels"));
}

TEST_CASE("shapes and offsets that do not fit the buffer are rejected", "[safetensors]") {
  auto rejects = [](const std::string& header, size_t buffer_bytes, const std::string& problem) {
    INFO("header " << header);
    CHECK_THROWS_WITH(parse(file_of(header, std::vector<uint8_t>(buffer_bytes))), Contains("bad.safetensors") && Contains(problem));
  };
  rejects(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", 0, "tensor 'w': shape [4294967296,4294967296] of \"F32\" overflows");
  rejects(R"({"w": {"dtype": "U8", "shape": [18446744073709551615], "data_offsets": [0, 0]}})", 0, "overflows");
  rejects(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 4, "tensor 'w': shape [2] of \"F32\" needs 8 bytes but data_offsets [0, 4] span 4");
  rejects(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 4, "tensor 'w': data_offsets [4, 8] run past the end of the 4-byte data buffer");
  rejects(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 8, "tensor 'w': data_offsets [8, 4] end before they begin");
  rejects(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12,
          "tensor 'b': bytes [4, 12) overlap tensor 'a', which ends at 8");
  rejects(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 8, "overlap");
  rejects(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})", 12,
          "tensor 'b': a hole of 4 bytes before it");
  rejects(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 6, "2 unused bytes after the last tensor");
}

TEST_CASE("no truncation or corrupted byte of a valid file crashes the reader", "[safetensors]") {
  std::vector<uint8_t> good = safetensors_bytes({{"a", Tensor::arange(6)}, {"b", Tensor::ones({2, 2}, dtypes::float16)}}, {{"k", "v"}});
  for (size_t n = 0; n < good.size(); ++n) {
    INFO("truncated to " << n << " of " << good.size() << " bytes");
    CHECK_THROWS_AS(parse_safetensors(good.data(), n, "cut.safetensors"), Error);
  }
  uint32_t state = 7;
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<uint8_t> bad = good;
    for (int flips = 0; flips < 3; ++flips) {
      state = state * 1664525u + 1013904223u;
      bad[(state >> 8) % bad.size()] ^= static_cast<uint8_t>(1u << (state % 8));
    }
    try {
      parse(bad);  // a flip in the data buffer still parses
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Contains("bad.safetensors"));
    }
  }
}

TEST_CASE("a file with no tensors holds just the header", "[safetensors]") {
  TempDir dir;
  std::string path = (dir.path / "empty.safetensors").string();
  save_safetensors(path, {}, {{"only", "metadata"}});
  SafetensorsData got = load_safetensors(path);
  CHECK(got.tensors.empty());
  CHECK(got.metadata.at("only") == "metadata");
  CHECK(safetensors_bytes({}) == file_of("{}      ", {}));
}

TEST_CASE("tensors load onto the device asked for", "[safetensors]") {
  std::vector<uint8_t> bytes = safetensors_bytes({{"w", Tensor::arange(4)}});
  SafetensorsData got = parse_safetensors(bytes.data(), bytes.size(), "w.safetensors", "REF");
  CHECK(got.tensors.at("w").device() == "REF");
  CHECK(got.tensors.at("w").to_vector<int32_t>() == std::vector<int32_t>{0, 1, 2, 3});
}
