// libFuzzer target: a safetensors file (frontend/safetensors.h), parsed from memory.
#include "frontend/safetensors.h"
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kiln::fuzz::expect_errors([&] { kiln::parse_safetensors(data, size, "fuzz input", "CPU"); });
}
