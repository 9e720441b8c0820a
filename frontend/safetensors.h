// safetensors: the Hugging Face tensor file format, read and written (every kiln dtype).
//
//   save_safetensors("model.safetensors", {{"w", w}, {"b", b}}, {{"epoch", "3"}});   // atomic
//   SafetensorsData d = load_safetensors("model.safetensors");
//   Tensor w2 = d.tensors.at("w");   std::string e = d.metadata.at("epoch");
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data buffer; offsets are relative to its start. Tensors are written in name order, the
// header padded with spaces to a multiple of 8.
//
// A file is untrusted input: everything is bounds-checked, and any malformed header or offset is a
// kiln::Error naming the file, the tensor and the problem. Policy (like the reference reader): the
// tensors must tile the data buffer exactly, so overlaps, holes between tensors and unused trailing
// bytes are all rejected; so are unknown keys in a tensor entry and two entries with the same name.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "frontend/tensor.h"

namespace kiln {

struct SafetensorsData {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;  // the "__metadata__" object (string to string)
};

// Writes a temporary file beside `path`, fsyncs it and renames it over `path`: readers see the old
// file or the new one, never half of one.
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
SafetensorsData load_safetensors(const std::string& path, const std::string& device = "");

// The same, in memory. `what` names the source in error messages (usually the file name).
std::vector<uint8_t> safetensors_bytes(const std::map<std::string, Tensor>& tensors,
                                       const std::map<std::string, std::string>& metadata = {});
SafetensorsData parse_safetensors(const uint8_t* data, size_t size, const std::string& what,
                                  const std::string& device = "");

// The format's dtype names ("F32", "BF16", "BOOL", ...).
std::string safetensors_dtype_name(DType dtype);

}  // namespace kiln
