// soak: does a long run keep its memory flat? Records the process's resident set size (RSS)
//   1. over N replays of one captured training step (an owned graph: Graph::Capture), a new
//      batch fed before each, the loss read after it, as a training loop does;
//   2. over M capture/reset cycles of the keyed registry (EnableGraph, RunGraph, ResetGraph),
//      as code that recaptures a step (a new input shape, an edited model) does.
// A benchmark, not a test: it prints what it measured and judges nothing.
//
//   soak [--replays 10000] [--cycles 1000] [--warmup 100] [--every 100] [--batch 32]
//        [--parallel] [--dynamic]
// stdout: JSON lines, {"phase": "replay"|"cycle", "step": i, "rss_bytes": r} every --every
// iterations (and at 0 and the last), then one summary line per phase: RSS at the start, after
// --warmup iterations and at the end, and the growth per 1,000 iterations after the warm-up.
// Exit codes: 0 ok, 1 a loom error (printed), 2 bad flags.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/device.h"
#include "examples/common/flags.h"
#include "graph/graph.h"
#include "graph/registry.h"
#include "nn/models.h"
#include "nn/optimizer.h"

namespace {

using loom::DType;
using loom::Tensor;
namespace ops = loom::ops;

constexpr int64_t kInputs = 64, kHidden = 256, kClasses = 10;

struct Flags {
  int64_t replays = 10000, cycles = 1000, warmup = 100, every = 100, batch = 32;
  bool parallel = false;  // replay independent ops on worker threads
  bool dynamic = false;   // memory recycled at refcount zero instead of the planned arena
};

const char* kUsage =
    "usage: soak [--replays N] [--cycles N] [--warmup N] [--every N] [--batch N] [--parallel] [--dynamic]\n"
    "  --replays N  replays of one captured training step (default 10000)\n"
    "  --cycles N   capture / replay / reset cycles of the keyed registry (default 1000)\n"
    "  --warmup N   iterations of each phase before the 'after warm-up' RSS (default 100)\n"
    "  --every N    one JSON line of RSS every N iterations (default 100)\n"
    "  --batch N    samples per step of the 64-256-256-10 MLP (default 32)\n"
    "  --parallel   replay independent ops on worker threads\n"
    "  --dynamic    graph memory recycled at refcount zero instead of the planned arena\n";

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  loom::flags::Args a(argc, argv);
  while (a.Next()) {
    if (a.Is("--help") || a.Is("-h")) {
      std::cout << kUsage;
      std::exit(0);
    } else if (a.Is("--replays")) {
      f.replays = a.Int(1);
    } else if (a.Is("--cycles")) {
      f.cycles = a.Int(1);
    } else if (a.Is("--warmup")) {
      f.warmup = a.Int(0);
    } else if (a.Is("--every")) {
      f.every = a.Int(1);
    } else if (a.Is("--batch")) {
      f.batch = a.Int(1);
    } else if (a.Switch("--parallel")) {
      f.parallel = true;
    } else if (a.Switch("--dynamic")) {
      f.dynamic = true;
    } else {
      a.Unknown();
    }
  }
  if (f.warmup >= f.replays || f.warmup >= f.cycles)
    throw loom::flags::UsageError("--warmup must be smaller than --replays and --cycles");
  return f;
}

// Resident set size from /proc/self/statm (its second field, in pages).
size_t RssBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  LOOM_CHECK(f, IOError, "[soak] cannot open /proc/self/statm");
  unsigned long size = 0, resident = 0;
  int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  LOOM_CHECK(n == 2, IOError, "[soak] cannot read /proc/self/statm");
  return size_t(resident) * size_t(sysconf(_SC_PAGESIZE));
}

// Runs `iteration` n times, printing RSS every `every` iterations; then the phase's summary.
void Soak(const char* phase, int64_t n, const Flags& f, const std::function<void()>& iteration) {
  const size_t start = RssBytes();
  size_t after_warmup = start, rss = start;
  std::printf("{\"phase\": \"%s\", \"step\": 0, \"rss_bytes\": %zu}\n", phase, start);
  for (int64_t i = 1; i <= n; ++i) {
    iteration();
    if (i == f.warmup || i % f.every == 0 || i == n) {
      rss = RssBytes();
      if (i == f.warmup) after_warmup = rss;
      if (i % f.every == 0 || i == n) std::printf("{\"phase\": \"%s\", \"step\": %lld, \"rss_bytes\": %zu}\n", phase, (long long)i, rss);
    }
  }
  const double growth = (double(rss) - double(after_warmup)) / double(n - f.warmup) * 1000.0;
  std::printf(
      "{\"phase\": \"%s\", \"summary\": true, \"iterations\": %lld, \"warmup\": %lld, \"rss_start_bytes\": %zu, "
      "\"rss_after_warmup_bytes\": %zu, \"rss_end_bytes\": %zu, \"growth_bytes_per_1000\": %.1f}\n",
      phase, (long long)n, (long long)f.warmup, start, after_warmup, rss, growth);
  std::fflush(stdout);
  std::fprintf(stderr, "soak: %s x%lld: RSS %.2f MiB at the start, %.2f MiB after %lld, %.2f MiB at the end: %+.1f KiB per 1,000\n",
               phase, (long long)n, double(start) / (1 << 20), double(after_warmup) / (1 << 20), (long long)f.warmup,
               double(rss) / (1 << 20), growth / 1024);
}

int Run(const Flags& f) {
  auto dev = loom::CpuDevice();
  dev->SetRandSeed(1);
  auto net = loom::nn::MakeMlp({kInputs, kHidden, kHidden, kClasses});
  loom::nn::SGD sgd(0.01, 0.9);
  // Inputs are fed, not rebuilt: the graph reads these blocks; each batch is written into them.
  Tensor x = ops::Empty({f.batch, kInputs}, DType::kFloat32, dev);
  Tensor y = ops::Empty({f.batch}, DType::kInt32, dev);
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0, 1);
  std::uniform_int_distribution<int32_t> label(0, int32_t(kClasses - 1));
  std::vector<float> bx(size_t(f.batch * kInputs));
  std::vector<int32_t> by(size_t(f.batch));
  auto feed = [&] {
    for (float& v : bx) v = normal(gen);
    for (int32_t& v : by) v = label(gen);
    x.CopyFrom(bx);
    y.CopyFrom(by);
  };
  Tensor loss;
  auto step = [&] {
    loss = ops::SoftmaxCrossEntropy((*net)(x), y);
    loom::Backward(loss, [&](const Tensor& p, const Tensor& g) { sgd.Apply(g, p); });
  };
  loom::GraphOptions options;
  options.memory = f.dynamic ? loom::MemoryMode::kDynamic : loom::MemoryMode::kPlanned;
  double sink = 0;  // the losses read back, so that no read is optimised away

  feed();
  std::unique_ptr<loom::Graph> graph = loom::Graph::Capture(dev, "soak", step, options);
  std::fprintf(stderr, "soak: %s\n", graph->Summary().c_str());
  Soak("replay", f.replays, f, [&] {
    feed();
    graph->Run(/*sequential=*/!f.parallel);
    sink += loss.Item();
  });
  graph.reset();

  loom::SetRegistryGraphOptions(*dev, options);
  Soak("cycle", f.cycles, f, [&] {
    feed();
    loom::EnableGraph(*dev, true, "soak");
    step();
    loom::EnableGraph(*dev, false);
    loom::RunGraph(*dev, /*sequential=*/!f.parallel, "soak");
    sink += loss.Item();
    loom::ResetGraph(*dev, "soak");
  });
  std::fprintf(stderr, "soak: mean loss read back %.4f\n", sink / double(f.replays + f.cycles));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  try {
    flags = ParseFlags(argc, argv);
  } catch (const loom::flags::UsageError& e) {
    std::cerr << "soak: " << e.what() << " (soak --help lists the flags)" << std::endl;
    return 2;
  }
  try {
    return Run(flags);
  } catch (const loom::Error& e) {
    std::cerr << "soak: " << e.what() << std::endl;
    return 1;
  }
}
