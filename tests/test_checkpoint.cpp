// Training checkpoints (frontend/checkpoint.h) read as untrusted files: every number in the metadata is
// checked before anything is loaded, and a bad one names the file, the field, the value and the fix.
#include <filesystem>

#include "frontend/checkpoint.h"
#include "frontend/safetensors.h"
#include "helpers.h"

namespace kiln {
namespace {

using Catch::Matchers::Contains;
using test::TempDir;

struct Small {
  std::shared_ptr<nn::Linear> model = std::make_shared<nn::Linear>(2, 2);
  optim::SGD opt{model->parameters(), 0.1};
};

// A checkpoint of a fresh Small with one metadata value replaced by `value`.
std::string edited_checkpoint(const TempDir& dir, const std::string& key, const std::string& value) {
  Small s;
  std::string path = (dir.path / "run.safetensors").string();
  save_checkpoint(path, *s.model, s.opt, {3, {7, 0, 2}, {1, 2}, 3, {}});
  SafetensorsData file = load_safetensors(path);
  REQUIRE(file.metadata.count(key) == 1);
  file.metadata[key] = value;
  save_safetensors(path, file.tensors, file.metadata);
  return path;
}

TEST_CASE("a checkpoint reads back its step, data position, RNG and schedule", "[checkpoint]") {
  TempDir dir;
  std::string path = edited_checkpoint(dir, "step", "3");
  Small s;
  TrainingState st = load_checkpoint(path, *s.model, s.opt);
  CHECK(st.step == 3);
  CHECK(st.data.seed == 7);
  CHECK(st.data.position == 2);
  CHECK(st.rng == std::array<uint64_t, 2>{1, 2});
  CHECK(st.scheduler_count == 3);
}

TEST_CASE("a checkpoint with a negative or malformed count is refused, naming the field and the fix", "[checkpoint]") {
  TempDir dir;
  for (const char* key : {"step", "optim.steps", "scheduler.count", "data.seed", "data.epoch", "data.position", "rng.seed", "rng.counter"}) {
    for (const char* value : {"-5", " 5", "+5", "5x", "", "99999999999999999999"}) {
      INFO(key << " = \"" << value << "\"");
      std::string path = edited_checkpoint(dir, key, value);
      Small s;
      CHECK_THROWS_WITH(load_checkpoint(path, *s.model, s.opt),
                        Contains(path) && Contains(cat("metadata \"", key, "\" = \"", value, "\" is not a whole number")) &&
                            Contains("write it again with --save"));
    }
  }
  // Counts stay far enough below INT64_MAX that the next step cannot overflow.
  std::string path = edited_checkpoint(dir, "data.epoch", "9223372036854775807");
  Small s;
  CHECK_THROWS_WITH(load_checkpoint(path, *s.model, s.opt), Contains("not a whole number in 0..4611686018427387904"));
}

TEST_CASE("a checkpoint whose optimizer state has another dtype than its parameter is refused", "[checkpoint]") {
  TempDir dir;
  std::string path = (dir.path / "run.safetensors").string();
  auto model = std::make_shared<nn::Linear>(2, 2);
  optim::AdamW opt(model->parameters(), 1e-3);
  save_checkpoint(path, *model, opt, {0, {0, 0, 0}, {1, 2}, 0, {}});
  SafetensorsData file = load_safetensors(path);
  file.tensors["optim.exp_avg.0"] = Tensor::zeros({2, 2}, dtypes::int8);
  file.tensors["optim.exp_avg_sq.0"] = Tensor::zeros({2, 2}, dtypes::float32);
  save_safetensors(path, file.tensors, file.metadata);
  CHECK_THROWS_WITH(load_checkpoint(path, *model, opt),
                    Contains(path) && Contains("optimizer state \"exp_avg.0\" is int8 but parameter 0 is float32"));
  // A state name without a parameter number (found by fuzz/fuzz_checkpoint: UBSan saw the index
  // pointer wrap around) is named by the optimizer.
  file.tensors.erase("optim.exp_avg.0");
  file.tensors["optim.nodot"] = Tensor::zeros({2, 2}, dtypes::float32);
  save_safetensors(path, file.tensors, file.metadata);
  CHECK_THROWS_WITH(load_checkpoint(path, *model, opt), Contains("entry \"nodot\"") && Contains("does not fit any of the 2 parameters"));
}

}  // namespace
}  // namespace kiln
