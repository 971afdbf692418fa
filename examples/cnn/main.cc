// loom-cnn: trains the small CNN or ResNet-18 (CIFAR stem) on real images (MNIST idx files or
// CIFAR-10 binary batches) or on synthetic CIFAR-10-shaped data, eagerly or as a replayed graph.
//
//   loom-cnn [--model cnn|resnet18] [--graph|--eager] [--batch 32] [--steps 100] [--lr 0.05]
//            [--data DIR [--epochs N] [--lr-drop N] [--eval-batch 200] [--csv FILE]] [--seed 7]
//            [--print-every 10] [--dist] [--json]
//            with --epochs: [--checkpoint-dir DIR [--checkpoint-every N] [--keep K] [--resume]]
//            [--eval-every N] [--log-every N] [--augment]
// --data DIR reads MNIST (DIR/train-images-idx3-ubyte[.gz] and the labels; the digits that
// tools/setup.sh installs in data/digits are such a folder) or else CIFAR-10
// (DIR/data_batch_{1..5}.bin) through io::DataLoader (shuffled, normalised, prepared on a
// background thread). MNIST's 28x28 digits are centred in 32x32 with background pixels, as LeNet-5
// did, because the small CNN's classifier expects 32x32 inputs. Without --data a deterministic
// synthetic set of CIFAR's shape is used (class-dependent colour blobs, learnable).
// --epochs N trains N whole epochs (instead of --steps). When DIR also holds the held-out set
// (t10k-* or test_batch.bin), the network is evaluated on it before training and after each epoch
// in eval mode (nn::Evaluate: BatchNorm running statistics, no gradients, its own graph with
// --graph); each row shows the mean training loss, the held-out loss and top-1 accuracy, and the
// time. --lr-drop N divides the learning rate by 10 after epoch N (0: never). --csv FILE writes the rows
// (tools/plot_training.py draws them); --json ends with one JSON line of results. --seed N seeds
// the initial weights and the shuffling order.
// --epochs runs nn::Trainer (a progress bar on a terminal; nn/trainer.h): --checkpoint-dir DIR
// keeps the newest --keep K checkpoints (every --checkpoint-every N steps, else at each epoch's
// end) and best.ckpt; --resume continues from the newest one, bitwise as if never interrupted.
// --eval-every N evaluates every N steps instead of after each epoch, --log-every N reads the loss
// every N steps (default: once per epoch). --augment: random crops of the image padded by 4
// pixels, and horizontal flips for CIFAR-10 (not for digits), drawn from --seed.
// --dist trains data-parallel over the ranks tools/launch.sh -n N starts (Note [--dist in the
// programs]): --batch is the global batch, each rank reads its shard of the data (the loader's
// shard option, or its rows of each synthetic batch) and of the held-out set (the held-out figures
// are summed over ranks), rank 0 prints and writes. BatchNorm normalises with each rank's own
// batch statistics, as data-parallel training without SyncBatchNorm does; before an evaluation
// rank 0's running statistics are broadcast, so every rank evaluates the same network.
// --dist with --epochs: each rank evaluates the whole held-out set with its own BatchNorm
// statistics and rank 0 prints and logs; --checkpoint-dir works as on one rank (Note [Checkpoints
// across ranks] in nn/trainer.h: rank 0 writes the checkpoint, every other rank a file of its
// own statistics beside it; the folder must be one all ranks see; --resume with as many ranks).
// --shard (with --dist): each rank keeps the momentum of 1/N of the parameters (Note [Sharded
// optimizer state] in nn/dist_opt.h); its checkpoint file holds its own.
// Exit codes: 0 ok, 1 a loom error (printed), 2 bad flags.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/device.h"
#include "examples/common/dist.h"
#include "examples/common/flags.h"
#include "graph/graph.h"
#include "io/dataset.h"
#include "nn/dist_opt.h"
#include "nn/evaluate.h"
#include "nn/model.h"
#include "nn/models.h"
#include "nn/trainer.h"

namespace {

using loom::Tensor;
using loom::io::ImageData;

struct Flags {
  std::string model = "cnn";
  bool graph = true;
  int64_t batch = 32, steps = 100, print_every = 10;
  int64_t epochs = 0, eval_batch = 200;  // epochs 0: train --steps steps
  int64_t lr_drop = 0;                   // after this many epochs the rate is divided by 10 (0: never)
  int64_t seed = 7;                      // the device's random seed (initial weights) and the shuffling order
  double lr = 0.05;
  std::string data, csv;
  bool json = false;
  // The trainer (--epochs): see the usage text.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0, keep = 3, eval_every = 0, log_every = 0;
  bool resume = false, augment = false;
  bool dist = false;  // data-parallel over MPI's world (Note [--dist in the programs])
  bool shard = false;  // --shard: each rank keeps 1/N of the momentum (Note [Sharded optimizer state])
};

int Usage(const std::string& why) {
  std::cerr << "loom-cnn: " << why
            << "\nusage: loom-cnn [--model cnn|resnet18] [--graph|--eager] [--batch N] [--steps N] [--lr X]"
               " [--data DIR [--epochs N] [--lr-drop N] [--eval-batch N] [--csv FILE]] [--seed N] [--print-every N] [--dist [--shard]] [--json]\n"
               "  with --epochs: [--checkpoint-dir DIR [--checkpoint-every N] [--keep K] [--resume]] [--eval-every N]"
               " [--log-every N] [--augment]\n";
  return 2;
}

// Synthetic CIFAR-shaped batch: the class picks a colour channel and a quadrant that is bright.
void SyntheticBatch(int64_t n, uint32_t seed, std::vector<float>& x, std::vector<int32_t>& y) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> noise(0, 1.0f);
  std::uniform_int_distribution<int32_t> cls(0, 9);
  x.assign(size_t(n * 3 * 32 * 32), 0);
  y.assign(size_t(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    int32_t c = cls(gen);
    y[size_t(i)] = c;
    for (int64_t ch = 0; ch < 3; ++ch)
      for (int64_t h = 0; h < 32; ++h)
        for (int64_t w = 0; w < 32; ++w) {
          bool hot = ch == c % 3 && (h < 16) == (c % 2 == 0) && (w < 16) == (c / 2 % 2 == 0);
          x[size_t(((i * 3 + ch) * 32 + h) * 32 + w)] = (hot ? 1.0f : 0.0f) + noise(gen);
        }
  }
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}
bool ExistsEither(const std::string& path) { return Exists(path) || Exists(path + ".gz"); }

// Each image centred in a side x side image of zero (background) pixels: LeNet-5's 32x32 MNIST.
std::shared_ptr<ImageData> PadImages(const ImageData& d, int64_t side) {
  auto out = std::make_shared<ImageData>();
  out->n = d.n;
  out->channels = d.channels;
  out->height = out->width = side;
  out->labels = d.labels;
  out->images.assign(size_t(d.n * d.channels) * size_t(side * side), 0);
  const int64_t top = (side - d.height) / 2, left = (side - d.width) / 2;
  for (int64_t p = 0; p < d.n * d.channels; ++p)  // p: one (sample, channel) plane
    for (int64_t h = 0; h < d.height; ++h)
      std::copy_n(d.images.data() + (p * d.height + h) * d.width, d.width,
                  out->images.data() + (p * side + top + h) * side + left);
  return out;
}

// A --data folder: the training set, the held-out set when the folder has one, and how to
// normalise them.
struct RealData {
  std::string name;
  std::shared_ptr<const ImageData> train, held_out;
  std::vector<float> mean, stddev;
};

RealData LoadData(const std::string& dir) {
  RealData r;
  if (ExistsEither(dir + "/train-images-idx3-ubyte")) {
    r.name = "MNIST";
    r.mean = loom::io::kMnistMean;
    r.stddev = loom::io::kMnistStd;
    auto pad = [](std::shared_ptr<ImageData> d) -> std::shared_ptr<const ImageData> {
      return d->height < 32 && d->width < 32 ? PadImages(*d, 32) : d;
    };
    r.train = pad(loom::io::LoadMnistDir(dir, true));
    if (ExistsEither(dir + "/t10k-images-idx3-ubyte")) r.held_out = pad(loom::io::LoadMnistDir(dir, false));
  } else {
    r.name = "CIFAR-10";
    r.mean = loom::io::kCifar10Mean;
    r.stddev = loom::io::kCifar10Std;
    r.train = loom::io::LoadCifar10Dir(dir, true);
    if (ExistsEither(dir + "/test_batch.bin")) r.held_out = loom::io::LoadCifar10Dir(dir, false);
  }
  return r;
}

loom::io::DataLoaderOptions LoaderOptions(const RealData& d, int64_t batch, bool train,
                                          const loom::examples::Dist& dist) {
  loom::io::DataLoaderOptions o;
  o.shard_rank = dist.rank();
  o.shard_world = dist.world();
  o.batch_size = batch;
  o.shuffle = train;
  o.drop_last = train;  // one training graph; the eval graph recaptures for a smaller last batch
  o.mean = d.mean;
  o.stddev = d.stddev;
  return o;
}

int Run(const Flags& f) {
  const loom::examples::Dist dist = f.dist ? loom::examples::Dist::World() : loom::examples::Dist();
  const int64_t rows = dist.ShardRows(f.batch, "loom-cnn");  // this rank's share of each batch
  if (!dist.root()) std::freopen("/dev/null", "w", stdout);  // rank 0 prints
  auto dev = loom::CpuDevice();
  dev->SetRandSeed(uint64_t(f.seed));
  RealData data;
  if (!f.data.empty()) data = LoadData(f.data);
  const int64_t channels = data.train ? data.train->channels : 3;
  auto net = f.model == "cnn" ? loom::nn::MakeSmallCnn(channels, 10) : loom::nn::MakeResNet18(10);
  auto sgd = std::make_shared<loom::nn::SGD>(f.lr, 0.9, 5e-4);
  std::shared_ptr<loom::nn::Optimizer> opt = sgd;
  std::vector<Tensor> params;
  for (const auto& p : net->Params()) params.push_back(p.second);
  std::shared_ptr<loom::nn::DistOpt> dist_opt;
  if (dist.on()) {
    dist_opt = std::make_shared<loom::nn::DistOpt>(sgd, dist.comm(), std::nullopt, size_t(25) << 20, f.shard);
    dist_opt->BroadcastParameters(params);
    opt = dist_opt;
  }
  loom::nn::Model model(net, opt);

  std::unique_ptr<loom::io::DataLoader> loader;
  if (data.train) {
    auto o = LoaderOptions(data, rows, true, dist);
    o.seed = uint64_t(f.seed);
    if (f.augment) {  // CIFAR's standard: 4 pixels of padding, random crops, horizontal flips
      o.crop_padding = 4;
      o.hflip = data.name != "MNIST";  // a mirrored digit is another glyph
      o.augment_seed = uint64_t(f.seed);
    }
    loader = std::make_unique<loom::io::DataLoader>(data.train, o);
  }
  std::unique_ptr<loom::io::DataLoader> held_out;
  if (data.held_out)
    held_out = std::make_unique<loom::io::DataLoader>(data.held_out,  // the trainer's: whole on every rank
                                                      LoaderOptions(data, f.eval_batch, false, loom::examples::Dist()));
  auto evaluate = [&]() -> loom::nn::EvalResult {
    if (dist_opt) {  // every rank evaluates rank 0's model: its BatchNorm running statistics too
      std::vector<Tensor> states;
      for (const auto& st : model.States()) states.push_back(st.second);
      dist_opt->BroadcastParameters(states);
    }
    loom::io::DataLoader held_out(data.held_out, LoaderOptions(data, f.eval_batch, false, dist));
    loom::nn::EvalResult r = loom::nn::Evaluate(model, held_out);
    if (dist.on()) {  // this rank's shard: sums over ranks
      const double n = double(r.samples), total = dist.Mean(n) * dist.world();
      r.loss = dist.Mean(r.loss * n) * dist.world() / total;
      r.top1 = dist.Mean(r.top1 * n) * dist.world() / total;
      r.samples = int64_t(std::llround(total));
    }
    return r;
  };
  Tensor x(loader ? loader->x_shape(rows) : loom::Shape{rows, 3, 32, 32}, loom::DType::kFloat32, dev);
  Tensor y(loom::Shape{rows}, loom::DType::kInt32, dev);
  std::vector<float> hx;
  std::vector<int32_t> hy;
  // The next batch into x, y; false at the end of an epoch of real data (the next call starts
  // the following epoch).
  auto next_batch = [&](int64_t step) {
    if (loader) return loader->NextInto(x, y);
    SyntheticBatch(f.batch, uint32_t(1000 + step), hx, hy);
    const int64_t first = rows * dist.rank(), sample = 3 * 32 * 32;  // this rank's rows
    x.CopyFrom(std::vector<float>(hx.begin() + first * sample, hx.begin() + (first + rows) * sample));
    y.CopyFrom(std::vector<int32_t>(hy.begin() + first, hy.begin() + first + rows));
    return true;
  };
  if (f.epochs == 0 && !next_batch(0)) throw loom::ValueError("[loom-cnn] the training set is smaller than one batch");
  if (f.epochs > 0) x = loom::ops::Zeros(x.shape(), loom::DType::kFloat32, dev);  // the trainer feeds the batches
  model.Compile({x}, /*is_train=*/true, /*use_graph=*/f.graph, /*sequential=*/true);
  std::printf("loom-cnn: %s, batch %lld, %s, %s data", f.model.c_str(), (long long)f.batch,
              f.graph ? "graph replay" : "eager", loader ? data.name.c_str() : "synthetic");
  if (loader)
    std::printf(" (%lld train, %lld held out)", (long long)data.train->n,
                (long long)(data.held_out ? data.held_out->n : 0));
  std::printf("\n");
  if (dist.on())
    std::printf("data-parallel: %d ranks, %lld samples per rank per step\n", dist.world(), (long long)rows);

  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  double train_loss = 0;
  loom::nn::EvalResult eval;
  int64_t steps = 0;
  std::vector<double> ms;
  if (f.epochs > 0) {
    // Whole epochs through nn::Trainer: evaluation, checkpoints, --resume, the CSV log.
    if (dist.root())
      std::printf("%5s  %10s  %12s  %16s  %7s\n", "epoch", "train loss", "held-out loss", "held-out accuracy", "time");
    loom::nn::TrainerOptions t;
    t.epochs = f.epochs;
    t.log_every = f.log_every > 0 ? f.log_every : loader->batches_per_epoch();
    t.eval_every = f.eval_every;
    t.eval_at_start = true;  // epoch 0: the untrained network, near chance
    t.checkpoint_dir = f.checkpoint_dir;
    t.checkpoint_every = f.checkpoint_every;
    t.keep_last = int(f.keep);
    t.resume = f.resume;
    t.csv = dist.root() ? f.csv : std::string();  // rank 0 logs
    t.verbose = false;  // the table below instead
    const int64_t bpe = loader->batches_per_epoch();
    t.on_eval = [&](int64_t step, double loss, const loom::nn::EvalResult& r) {
      const std::string at =
          step % bpe == 0 ? std::to_string(step / bpe) : std::to_string(double(step) / bpe).substr(0, 5);
      const std::string train = std::isnan(loss) ? "-" : std::to_string(loss).substr(0, 6);
      if (dist.root()) std::printf("%5s  %10s  %13.4f  %16.2f%%  %6.1fs\n", at.c_str(), train.c_str(), r.loss, 100 * r.top1, seconds());
      std::fflush(stdout);
    };
    t.on_epoch_end = [&](int64_t epoch) {
      if (epoch == f.lr_drop) sgd->SetLearningRate(f.lr / 10);  // the inner SGD: a device scalar, no recapture
    };
    loom::nn::TrainResult r = loom::nn::Trainer(model, *loader, data.held_out ? &*held_out : nullptr, t).Fit();
    steps = r.steps;
    train_loss = r.train_loss;
    eval = r.eval;
  } else {
    for (int64_t step = 0; step < f.steps; ++step) {
      if (step > 0 && !next_batch(step)) next_batch(step);  // end of an epoch: start the next
      auto t0 = std::chrono::steady_clock::now();
      double loss = dist.Mean(model.TrainOneBatch(x, y).loss.Item());
      double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (step > 0) ms.push_back(t);
      if (!std::isfinite(loss)) throw loom::ValueError("[loom-cnn] the loss diverged (try a smaller --lr)");
      if (step == 0 || (step + 1) % f.print_every == 0 || step + 1 == f.steps)
        std::printf("step %5lld  loss %.4f  %8.2f ms\n", (long long)(step + 1), loss, t);
      if (step == 0 && f.graph) std::printf("%s\n", model.train_graph()->Summary().c_str());
      train_loss = loss;
    }
    steps = f.steps;
    std::sort(ms.begin(), ms.end());
    if (!ms.empty())
      std::printf("median %.2f ms per step, peak %.1f MiB on %s\n", ms[ms.size() / 2],
                  double(dev->stats().peak_bytes) / (1 << 20), dev->name().c_str());
    if (data.held_out) {
      eval = evaluate();
      std::printf("held-out: loss %.4f, top-1 accuracy %.2f%% (%lld images)\n", eval.loss, 100 * eval.top1,
                  (long long)eval.samples);
    }
  }
  const uint64_t param_hash = dist.CheckSameParameters(params, "loom-cnn");
  if (dist.on()) std::printf("parameters: bitwise the same on all %d ranks\n", dist.world());
  if (f.json) {
    std::printf("{\"model\": \"%s\", \"ranks\": %d, \"param_hash\": \"%016llx\", \"mode\": \"%s\", \"data\": \"%s\", \"batch\": %lld, \"steps\": %lld, "
                "\"epochs\": %lld, \"lr\": %g, \"seed\": %lld, \"train_loss\": %.6f, \"heldout_samples\": %lld, "
                "\"heldout_loss\": %.6f, \"heldout_top1\": %.6f, \"seconds\": %.3f}\n",
                f.model.c_str(), dist.world(), (unsigned long long)param_hash, f.graph ? "graph" : "eager", loader ? data.name.c_str() : "synthetic",
                (long long)f.batch, (long long)steps, (long long)f.epochs, f.lr, (long long)f.seed, train_loss,
                (long long)eval.samples, eval.loss, eval.top1, seconds());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  try {
    loom::flags::Args a(argc, argv);
    while (a.Next()) {
      if (a.Is("--model")) f.model = a.Value();
      else if (a.Switch("--graph")) f.graph = true;
      else if (a.Switch("--eager")) f.graph = false;
      else if (a.Is("--batch")) f.batch = a.Int(1);
      else if (a.Is("--steps")) f.steps = a.Int(1);
      else if (a.Is("--lr")) f.lr = a.Double();
      else if (a.Is("--data")) f.data = a.Value();
      else if (a.Is("--print-every")) f.print_every = a.Int(1);
      else if (a.Is("--epochs")) f.epochs = a.Int(1);
      else if (a.Is("--eval-batch")) f.eval_batch = a.Int(1);
      else if (a.Is("--lr-drop")) f.lr_drop = a.Int(0);
      else if (a.Is("--seed")) f.seed = a.Int(0);
      else if (a.Is("--csv")) f.csv = a.Value();
      else if (a.Switch("--json")) f.json = true;
      else if (a.Is("--checkpoint-dir")) f.checkpoint_dir = a.Value();
      else if (a.Is("--checkpoint-every")) f.checkpoint_every = a.Int(0);
      else if (a.Is("--keep")) f.keep = a.Int(1);
      else if (a.Switch("--resume")) f.resume = true;
      else if (a.Is("--eval-every")) f.eval_every = a.Int(0);
      else if (a.Is("--log-every")) f.log_every = a.Int(0);
      else if (a.Switch("--augment")) f.augment = true;
      else if (a.Switch("--dist")) f.dist = true;
      else if (a.Switch("--shard")) f.shard = true;
      else a.Unknown();
    }
    if (f.model != "cnn" && f.model != "resnet18") throw std::invalid_argument("--model is cnn or resnet18");
    if (f.batch < 1 || f.steps < 1 || f.print_every < 1) throw std::invalid_argument("sizes must be positive");
    if ((f.epochs > 0 || !f.csv.empty()) && f.data.empty()) throw std::invalid_argument("--epochs and --csv need --data");
    if ((!f.csv.empty() || f.lr_drop > 0) && f.epochs == 0) throw std::invalid_argument("--csv and --lr-drop need --epochs");
    if ((!f.checkpoint_dir.empty() || f.resume || f.augment || f.eval_every > 0 || f.log_every > 0) && f.epochs == 0)
      throw std::invalid_argument("--checkpoint-dir, --resume, --augment, --eval-every and --log-every need --epochs");
    if (f.resume && f.checkpoint_dir.empty()) throw std::invalid_argument("--resume needs --checkpoint-dir");
    if (f.shard && !f.dist) throw std::invalid_argument("--shard needs --dist");
  } catch (const std::exception& e) {
    return Usage(e.what());
  }
  try {
    return Run(f);
  } catch (const loom::Error& e) {
    std::cerr << "loom-cnn: " << e.what() << std::endl;
    return 1;
  }
}
