// `kiln train` and the global flags refusing what they cannot use, run as a user runs them: the kiln
// binary (KILN_BINARY, from CMake) on hand-made IDX files. Every refusal here comes before training.
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "frontend/safetensors.h"
#include "helpers.h"

namespace kiln {
namespace {

using Catch::Matchers::Contains;
using test::TempDir;

struct Result {
  int status = -1;
  std::string output;  // stdout and stderr together
};

Result run_kiln(const std::string& args) {
  Result r;
  FILE* pipe = popen(cat("'", KILN_BINARY, "' ", args, " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) r.output.append(buffer, n);
  int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::vector<uint8_t> idx_u8(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out{0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int i = 3; i >= 0; --i) out.push_back(static_cast<uint8_t>(d >> (8 * i)));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// A data folder of 2 training and 2 test images, with the given test labels.
void write_data(const TempDir& dir, const std::vector<uint8_t>& test_labels) {
  std::vector<uint8_t> images(2 * 28 * 28, 100);
  dir.write("train-images-idx3-ubyte", idx_u8({2, 28, 28}, images));
  dir.write("train-labels-idx1-ubyte", idx_u8({2}, {1, 2}));
  dir.write("t10k-images-idx3-ubyte", idx_u8({2, 28, 28}, images));
  dir.write("t10k-labels-idx1-ubyte", idx_u8({static_cast<uint32_t>(test_labels.size())}, test_labels));
}

TEST_CASE("kiln train refuses a label outside the 10 classes, naming the file and the label", "[train_cli]") {
  TempDir dir;
  write_data(dir, {3, 200});
  Result r = run_kiln(cat("train mnist --steps 1 --data-dir ", dir.path));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("t10k-labels-idx1-ubyte': label 1 is 200, outside the 10 classes 0..9"));
  CHECK_THAT(r.output, !Contains("accuracy"));
}

TEST_CASE("kiln train refuses labels that do not match the images one for one", "[train_cli]") {
  TempDir dir;
  write_data(dir, {3, 4, 5});
  Result r = run_kiln(cat("train mnist --steps 1 --data-dir ", dir.path));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("not 2 uint8 labels (one per image of"));
}

TEST_CASE("kiln train refuses images of zero bytes before making batches of them", "[train_cli]") {
  TempDir dir;
  write_data(dir, {3, 4});
  dir.write("train-images-idx3-ubyte", idx_u8({0xffffffff, 0, 28}, {}));
  Result r = run_kiln(cat("train mnist --steps 1 --data-dir ", dir.path));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("train-images-idx3-ubyte': holds uint8 of shape (4294967295, 0, 28), not uint8 images of shape (N, 28, 28)"));
}

TEST_CASE("kiln train refuses an infinite or NaN --lr and a --steps that runs nothing", "[train_cli]") {
  for (const char* lr : {"inf", "nan", "-1", "0"}) {
    Result r = run_kiln(cat("train mnist --lr ", lr));
    INFO(lr << ": " << r.output);
    CHECK(r.status == 1);
    CHECK_THAT(r.output, Contains("--lr must be positive and finite"));
  }
  for (const char* steps : {"0", "-2"}) {
    Result r = run_kiln(cat("train mnist --steps ", steps));
    INFO(steps << ": " << r.output);
    CHECK(r.status == 1);
    CHECK_THAT(r.output, Contains(cat("--steps ", steps, " runs no training step")));
    CHECK_THAT(r.output, !Contains("nan"));
  }
  Result r = run_kiln("train mnist --epochs 9223372036854775807");
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("--epochs (1..1000000)"));
}

TEST_CASE("kiln train --resume refuses a checkpoint with a negative step or a data position past the data", "[train_cli]") {
  TempDir dir;
  write_data(dir, {3, 4});
  std::string checkpoint = (dir.path / "run.safetensors").string();
  Result saved = run_kiln(cat("train mnist --steps 1 --batch-size 1 --no-eval --data-dir ", dir.path, " --save ", checkpoint));
  INFO(saved.output);
  REQUIRE(saved.status == 0);
  auto edited = [&](const std::string& key, const std::string& value) {
    SafetensorsData file = load_safetensors(checkpoint);
    file.metadata[key] = value;
    std::string path = (dir.path / (key + ".safetensors")).string();
    save_safetensors(path, file.tensors, file.metadata);
    return path;
  };
  std::string base = cat("train mnist --steps 2 --batch-size 1 --no-eval --data-dir ", dir.path, " --resume ");
  Result negative = run_kiln(base + edited("step", "-5"));  // it used to run 7 steps instead of 1
  INFO(negative.output);
  CHECK(negative.status == 1);
  CHECK_THAT(negative.output, Contains("metadata \"step\" = \"-5\" is not a whole number"));
  Result past = run_kiln(base + edited("data.position", "99"));
  INFO(past.output);
  CHECK(past.status == 1);
  CHECK_THAT(past.output, Contains("--resume '") && Contains("data.position.safetensors': its data position does not fit this data set"));
  Result done = run_kiln(base + edited("step", "2"));  // at --steps already: no nan loss
  INFO(done.output);
  CHECK(done.status == 0);
  CHECK_THAT(done.output, Contains("no training steps run: the checkpoint is at step 2 of 2") && !Contains("nan"));
}

TEST_CASE("an empty global flag is refused instead of meaning 'automatic'", "[train_cli]") {
  Result r = run_kiln("--device '' devices");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("--device \"\": empty; give NAME"));
  Result debug = run_kiln("--debug ' ' devices");
  CHECK(debug.status == 1);
  CHECK_THAT(debug.output, Contains("--debug \" \": empty"));
}

}  // namespace
}  // namespace kiln
