// libFuzzer target: a training checkpoint (frontend/checkpoint.h) loaded into a small model, as
// `kiln train --resume` loads one: the safetensors container, the tensors against the model, and
// every number in the metadata.
#include "frontend/checkpoint.h"
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  std::string path = fuzz::write_scratch("run.safetensors", data, size);
  return fuzz::expect_errors([&] {
    auto model = std::make_shared<nn::Linear>(2, 2);
    optim::AdamW opt(model->parameters(), 1e-3);
    TrainingState st = load_checkpoint(path, *model, opt);
    HostTensor x{dtypes::float32, {4, 2}, std::vector<uint8_t>(32)};
    BatchIterator it({x}, 2, true, 0);
    it.set_state(st.data);
  });
}
