// loom-cnn: trains the small CNN or ResNet-18 (CIFAR stem) on CIFAR-10-shaped data, eagerly or
// as a replayed graph.
//
//   loom-cnn [--model cnn|resnet18] [--graph|--eager] [--batch 32] [--steps 100] [--lr 0.05]
//            [--data DIR] [--print-every 10]
// --data DIR reads the real CIFAR-10 binary batches (DIR/data_batch_{1..5}.bin) through
// io::DataLoader (shuffled, normalised, prepared on a background thread); without it a
// deterministic synthetic set of the same shape is used (class-dependent colour blobs, learnable).
// Exit codes: 0 ok, 1 a loom error (printed), 2 bad flags.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/ops.h"
#include "device/device.h"
#include "examples/common/flags.h"
#include "graph/graph.h"
#include "io/dataset.h"
#include "nn/model.h"
#include "nn/models.h"

namespace {

using loom::Tensor;

struct Flags {
  std::string model = "cnn";
  bool graph = true;
  int64_t batch = 32, steps = 100, print_every = 10;
  double lr = 0.05;
  std::string data;
};

int Usage(const std::string& why) {
  std::cerr << "loom-cnn: " << why
            << "\nusage: loom-cnn [--model cnn|resnet18] [--graph|--eager] [--batch N] [--steps N] [--lr X]"
               " [--data DIR] [--print-every N]\n";
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

int Run(const Flags& f) {
  auto dev = loom::CpuDevice();
  dev->SetRandSeed(7);
  auto net = f.model == "cnn" ? loom::nn::MakeSmallCnn(3, 10) : loom::nn::MakeResNet18(10);
  loom::nn::Model model(net, std::make_shared<loom::nn::SGD>(f.lr, 0.9, 5e-4));

  std::unique_ptr<loom::io::DataLoader> loader;
  if (!f.data.empty()) {
    loom::io::DataLoaderOptions o;
    o.batch_size = f.batch;
    o.drop_last = true;  // one graph; set_recapture(true) would also replay a smaller last batch
    o.mean = loom::io::kCifar10Mean;
    o.stddev = loom::io::kCifar10Std;
    loader = std::make_unique<loom::io::DataLoader>(loom::io::LoadCifar10Dir(f.data, true), o);
  }
  Tensor x(loom::Shape{f.batch, 3, 32, 32}, loom::DType::kFloat32, dev);
  Tensor y(loom::Shape{f.batch}, loom::DType::kInt32, dev);
  std::vector<float> hx;
  std::vector<int32_t> hy;
  auto next_batch = [&](int64_t step) {
    if (loader) {
      if (!loader->NextInto(x, y)) loader->NextInto(x, y);  // end of an epoch: start the next
    } else {
      SyntheticBatch(f.batch, uint32_t(1000 + step), hx, hy);
      x.CopyFrom(hx);
      y.CopyFrom(hy);
    }
  };
  next_batch(0);
  model.Compile({x}, /*is_train=*/true, /*use_graph=*/f.graph, /*sequential=*/true);
  std::printf("loom-cnn: %s, batch %lld, %s, %s data\n", f.model.c_str(), (long long)f.batch,
              f.graph ? "graph replay" : "eager", loader ? "CIFAR-10" : "synthetic");
  std::vector<double> ms;
  for (int64_t step = 0; step < f.steps; ++step) {
    if (step > 0) next_batch(step);
    auto t0 = std::chrono::steady_clock::now();
    double loss = model.TrainOneBatch(x, y).loss.Item();
    double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (step > 0) ms.push_back(t);
    if (!std::isfinite(loss)) throw loom::ValueError("[loom-cnn] the loss diverged (try a smaller --lr)");
    if (step == 0 || (step + 1) % f.print_every == 0 || step + 1 == f.steps)
      std::printf("step %5lld  loss %.4f  %8.2f ms\n", (long long)(step + 1), loss, t);
    if (step == 0 && f.graph) std::printf("%s\n", model.train_graph()->Summary().c_str());
  }
  std::sort(ms.begin(), ms.end());
  if (!ms.empty())
    std::printf("median %.2f ms per step, peak %.1f MiB on %s\n", ms[ms.size() / 2],
                double(dev->stats().peak_bytes) / (1 << 20), dev->name().c_str());
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
      else a.Unknown();
    }
    if (f.model != "cnn" && f.model != "resnet18") throw std::invalid_argument("--model is cnn or resnet18");
    if (f.batch < 1 || f.steps < 1 || f.print_every < 1) throw std::invalid_argument("sizes must be positive");
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
