// libFuzzer target: an IDX file (frontend/data.h), raw or gzipped as the input's magic says, then a
// batch iterator over it, as kiln train makes one.
#include "frontend/data.h"
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kiln::fuzz::expect_errors([&] {
    kiln::HostTensor t = kiln::parse_idx({data, data + size}, "fuzz input");
    kiln::BatchIterator it({t}, 4, true, 1);
    std::vector<kiln::Tensor> batch;
    it.next(batch, "CPU");
  });
}
