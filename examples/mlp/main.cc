// loom-mlp: trains a 784-1024-1024-10 ReLU MLP with SGD and momentum on a synthetic data set in
// MNIST's shape, and reports the loss, the time per step and the peak device memory.
//
// The data: 10 class prototypes (sparse random 28x28 "strokes"), each sample a prototype blended
// with another class's and with Gaussian noise, generated on the host from a fixed seed. It is
// learnable, so the loss falls from ln(10) = 2.30 towards 0; it is a workload, not a benchmark
// of accuracy.
//
//   loom-mlp [--batch 64] [--steps 100] [--lr 0.01] [--momentum 0.9] [--print-every 10]
//            [--threads N] [--graph [--parallel] [--dynamic]] [--dist] [--json]
// --graph captures one training step (forward, backward, updates) and replays it for every
// batch; the default is eager, op by op. --dist trains data-parallel over the ranks that
// tools/launch.sh -n N starts, --batch being the global batch (Note [--dist in the programs]).
// Exit codes: 0 ok, 1 a loom error (printed), 2 bad flags.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "device/cpu/parallel.h"
#include "core/device.h"
#include "examples/common/dist.h"
#include "examples/common/flags.h"
#include "graph/graph.h"
#include "nn/dist_opt.h"
#include "nn/optimizer.h"

namespace {

using loom::DType;
using loom::Tensor;
namespace ops = loom::ops;

constexpr int64_t kInputs = 784, kHidden = 1024, kClasses = 10;
constexpr int64_t kWarmup = 2;  // steps left out of the timing (first allocations, BLAS start-up)

// ---- flags ----

struct Flags {
  int64_t batch = 64;
  int64_t steps = 100;
  double lr = 0.01;
  double momentum = 0.9;
  int64_t print_every = 10;
  int64_t threads = 0;  // 0: LOOM_NUM_THREADS or the core count
  bool json = false;
  bool graph = false;     // capture one step, replay it
  bool parallel = false;  // graph replay on worker threads
  bool dynamic = false;   // graph memory recycled at refcount zero instead of the arena
  bool dist = false;      // data-parallel over MPI's world (Note [--dist in the programs])
};

using loom::flags::UsageError;

const char* kUsage =
    "usage: loom-mlp [--batch N] [--steps N] [--lr X] [--momentum X] [--print-every N] [--threads N] [--graph] [--parallel] [--dynamic] [--dist] [--json]\n"
    "  --batch N        samples per step, over all ranks with --dist (default 64)\n"
    "  --steps N        training steps (default 100)\n"
    "  --lr X           learning rate (default 0.01)\n"
    "  --momentum X     SGD momentum (default 0.9)\n"
    "  --print-every N  print the loss every N steps (default 10)\n"
    "  --threads N      CPU threads (default: LOOM_NUM_THREADS or the core count)\n"
    "  --graph          capture one step as a graph and replay it (default: eager)\n"
    "  --parallel       with --graph: replay independent ops on worker threads\n"
    "  --dynamic        with --graph: recycle memory at refcount zero instead of the planned arena\n"
    "  --dist           data-parallel over the ranks of tools/launch.sh -n N: each rank trains on its\n"
    "                   share of every batch, gradients are averaged over ranks, rank 0 prints\n"
    "  --json           end with one JSON line of results; progress goes to stderr\n";


Flags ParseFlags(int argc, char** argv) {
  Flags f;
  loom::flags::Args a(argc, argv);
  while (a.Next()) {
    if (a.Is("--help") || a.Is("-h")) {
      std::cout << kUsage;
      std::exit(0);
    } else if (a.Is("--batch")) {
      f.batch = a.Int(1);
    } else if (a.Is("--steps")) {
      f.steps = a.Int(1);
    } else if (a.Is("--lr")) {
      f.lr = a.Double();
    } else if (a.Is("--momentum")) {
      f.momentum = a.Double();
    } else if (a.Is("--print-every")) {
      f.print_every = a.Int(1);
    } else if (a.Is("--threads")) {
      f.threads = a.Int(1);
    } else if (a.Switch("--graph")) {
      f.graph = true;
    } else if (a.Switch("--parallel")) {
      f.parallel = true;
    } else if (a.Switch("--dynamic")) {
      f.dynamic = true;
    } else if (a.Switch("--dist")) {
      f.dist = true;
    } else if (a.Switch("--json")) {
      f.json = true;
    } else {
      a.Unknown();
    }
  }
  if ((f.parallel || f.dynamic) && !f.graph) throw UsageError("--parallel and --dynamic need --graph");
  return f;
}

// ---- data: deterministic, generated on the host ----

struct Data {
  int64_t n = 0;
  std::vector<float> x;      // (n, 784), values in [0, 1]
  std::vector<int32_t> y;    // (n)

  // Samples [step * batch, (step + 1) * batch) modulo n; with --dist, this rank's `rows` of
  // them from row `first` on.
  void Batch(int64_t step, int64_t batch, std::vector<float>& bx, std::vector<int32_t>& by, int64_t first = 0,
             int64_t rows = -1) const {
    loom::examples::CopyBatchRows(x, y, kInputs, step, batch, first, rows < 0 ? batch : rows, bx, by);
  }
};

Data MakeData(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(0, 1);
  std::normal_distribution<float> noise(0, 0.6f);
  // Prototypes: ~15% of the pixels lit, in short horizontal strokes.
  std::vector<float> proto(size_t(kClasses * kInputs), 0);
  for (int64_t c = 0; c < kClasses; ++c)
    for (int64_t p = 0; p < kInputs; ++p)
      if (u(gen) < 0.05f)
        for (int64_t k = 0; k < 3 && (p + k) % 28 != 0; ++k) proto[size_t(c * kInputs + p + k)] = 1;
  Data d;
  d.n = n;
  d.x.resize(size_t(n * kInputs));
  d.y.resize(size_t(n));
  for (int64_t s = 0; s < n; ++s) {
    int32_t c = int32_t(gen() % kClasses);
    int32_t other = int32_t(gen() % kClasses);
    float mix = 0.45f * u(gen);  // another class's strokes show through, never dominating
    d.y[size_t(s)] = c;
    for (int64_t p = 0; p < kInputs; ++p) {
      float v = (1 - mix) * proto[size_t(c * kInputs + p)] + mix * proto[size_t(other * kInputs + p)] + noise(gen);
      d.x[size_t(s * kInputs + p)] = std::min(1.0f, std::max(0.0f, v));
    }
  }
  return d;
}

// ---- the model ----

struct Mlp {
  std::vector<Tensor> w, b;  // w[i]: (in, out), b[i]: (out)
};

Mlp MakeMlp(const std::vector<int64_t>& sizes, const std::shared_ptr<loom::Device>& dev) {
  Mlp m;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    // Kaiming (He) initialisation for ReLU: N(0, 2 / fan_in).
    Tensor w = ops::Normal({sizes[i], sizes[i + 1]}, 0, std::sqrt(2.0 / double(sizes[i])), DType::kFloat32, dev);
    Tensor b = ops::Zeros({sizes[i + 1]}, DType::kFloat32, dev);
    w.set_requires_grad(true).set_name("w" + std::to_string(i + 1));
    b.set_requires_grad(true).set_name("b" + std::to_string(i + 1));
    m.w.push_back(w);
    m.b.push_back(b);
  }
  return m;
}

// x: (N, 784) -> logits: (N, 10)
Tensor Forward(const Mlp& m, const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i < m.w.size(); ++i) {
    h = ops::AddBias(ops::MatMul(h, m.w[i]), m.b[i]);
    if (i + 1 < m.w.size()) h = ops::Relu(h);
  }
  return h;
}

// ---- training ----

double Percentile(std::vector<double> v, double q) {  // nearest rank
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t k = size_t(std::lround(q * double(v.size() - 1)));
  return v[k];
}

int Train(const Flags& f) {
  if (f.threads > 0) loom::SetNumThreads(int(f.threads));
  loom::examples::Dist dist = f.dist ? loom::examples::Dist::World() : loom::examples::Dist();
  const int64_t rows = dist.ShardRows(f.batch, "loom-mlp"), first_row = rows * dist.rank();
  auto dev = loom::CpuDevice();
  dev->SetRandSeed(42);
  std::ostream& out = dist.Out(f.json ? std::cerr : std::cout);

  Data data = MakeData(std::max<int64_t>(4096, f.batch), 1234);
  Mlp model = MakeMlp({kInputs, kHidden, kHidden, kClasses}, dev);
  std::shared_ptr<loom::nn::Optimizer> opt = std::make_shared<loom::nn::SGD>(f.lr, f.momentum);
  std::vector<Tensor> params = model.w;
  params.insert(params.end(), model.b.begin(), model.b.end());
  if (dist.on()) {
    auto d = std::make_shared<loom::nn::DistOpt>(opt, dist.comm());
    d->BroadcastParameters(params);
    opt = d;
  }
  // Inputs are fed, not rebuilt: one block each, written with every new batch (docs/design.md
  // invariant 6), which is what a captured graph will read.
  Tensor x = ops::Empty({rows, kInputs}, DType::kFloat32, dev);
  Tensor y = ops::Empty({rows}, DType::kInt32, dev);
  std::vector<float> bx;
  std::vector<int32_t> by;

  char line[512];
  std::snprintf(line, sizeof line,
                "loom-mlp: %lld-%lld-%lld-%lld ReLU MLP, SGD lr %g momentum %g, batch %lld, %lld steps, %d threads, "
                "%s",
                (long long)kInputs, (long long)kHidden, (long long)kHidden, (long long)kClasses, f.lr, f.momentum,
                (long long)f.batch, (long long)f.steps, loom::NumThreads(),
                f.graph ? (f.parallel ? "graph (parallel replay)" : "graph (serial replay)") : "eager");
  out << line << std::endl;
  if (dist.on())
    out << loom::detail::Cat("data-parallel: ", dist.world(), " ranks, ", rows, " samples per rank per step\n") << std::flush;

  auto train_step = [&]() {
    Tensor loss = ops::SoftmaxCrossEntropy(Forward(model, x), y);
    // Each parameter is updated as soon as its gradient is final, so gradients do not pile up.
    loom::Backward(loss, [&](const Tensor& p, const Tensor& g) { opt->Apply(g, p, p.name()); });
    return loss;
  };
  // Graph mode: the inputs get their first batch, then one step is captured (nothing runs);
  // every step below feeds x and y and replays it.
  Tensor graph_loss;
  std::unique_ptr<loom::Graph> graph;
  if (f.graph) {
    data.Batch(0, f.batch, bx, by, first_row, rows);
    x.CopyFrom(bx);
    y.CopyFrom(by);
    loom::GraphOptions options;
    options.memory = f.dynamic ? loom::MemoryMode::kDynamic : loom::MemoryMode::kPlanned;
    graph = loom::Graph::Capture(dev, "mlp", [&] { graph_loss = train_step(); }, options);
    out << graph->Summary() << std::endl;
  }
  std::vector<float> w_last_before = model.w.back().ToVector<float>();
  std::vector<double> times_ms;
  double first_loss = 0, last_loss = 0;
  for (int64_t step = 0; step < f.steps; ++step) {
    data.Batch(step, f.batch, bx, by, first_row, rows);
    if (step == std::min(kWarmup, f.steps - 1)) dev->ResetPeak();
    auto t0 = std::chrono::steady_clock::now();
    x.CopyFrom(bx);
    y.CopyFrom(by);
    Tensor loss;
    if (f.graph) {
      graph->Run(/*sequential=*/!f.parallel);
      loss = graph_loss;
    } else {
      loss = train_step();
    }
    dev->Synchronize();
    auto t1 = std::chrono::steady_clock::now();
    if (step >= kWarmup || f.steps <= kWarmup)
      times_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());

    double l = dist.Mean(loss.Item());  // the global batch's loss
    LOOM_CHECK(std::isfinite(l), ValueError, "[loom-mlp] the loss is ", l, " at step ", step + 1,
               ": training diverged (try a smaller --lr)");
    if (step == 0) first_loss = l;
    last_loss = l;
    if (step == 0 || (step + 1) % f.print_every == 0 || step + 1 == f.steps) {
      std::snprintf(line, sizeof line, "step %5lld  loss %.4f  %7.2f ms", (long long)(step + 1), l,
                    std::chrono::duration<double, std::milli>(t1 - t0).count());
      out << line << std::endl;
    }
  }
  // A run in which nothing trained is not reported (docs/design.md: the harness "refuses to report a
  // run in which the loss and the optimizer step count did not move").
  LOOM_CHECK(model.w.back().ToVector<float>() != w_last_before, ValueError,
             "[loom-mlp] the parameters did not change: refusing to report a run that did not train (--lr 0?)");

  const uint64_t param_hash = dist.CheckSameParameters(params, "loom-mlp");
  // One piece per line: stderr is unbuffered, and a line written in parts can interleave with
  // the JSON line on stdout when both go to one pipe.
  if (dist.on()) out << loom::detail::Cat("parameters: bitwise the same on all ", dist.world(), " ranks\n") << std::flush;

  size_t peak = dev->stats().peak_bytes;
  double med = Percentile(times_ms, 0.5), p10 = Percentile(times_ms, 0.1), p90 = Percentile(times_ms, 0.9);
  std::snprintf(line, sizeof line, "loss %.4f -> %.4f over %lld steps (ln 10 = 2.3026)", first_loss, last_loss,
                (long long)f.steps);
  out << line << std::endl;
  std::snprintf(line, sizeof line, "time per step: median %.2f ms (p10 %.2f, p90 %.2f) over %zu steps after %lld warm-up",
                med, p10, p90, times_ms.size(), (long long)(f.steps > kWarmup ? kWarmup : 0));
  out << line << std::endl;
  std::snprintf(line, sizeof line, "peak memory: %.1f MiB (%zu bytes) on %s", double(peak) / (1 << 20), peak,
                dev->name().c_str());
  out << line << std::endl;
  if (f.json && dist.root()) {
    std::snprintf(line, sizeof line,
                  "{\"model\": \"mlp-784-1024-1024-10\",  \"mode\": \"%s\", \"batch\": %lld, \"steps\": %lld, "
                  "\"ranks\": %d, \"batch_per_rank\": %lld, "
                  "\"ms_per_step_median\": %.4f, \"ms_per_step_p10\": %.4f, \"ms_per_step_p90\": %.4f, "
                  "\"peak_bytes\": %zu, \"first_loss\": %.8f, \"last_loss\": %.8f, \"param_hash\": \"%016llx\"}",
                  f.graph ? (f.parallel ? "graph-parallel" : f.dynamic ? "graph-dynamic" : "graph-planned") : "eager",
                  (long long)f.batch, (long long)f.steps, dist.world(), (long long)rows, med, p10, p90, peak, first_loss,
                  last_loss, (unsigned long long)param_hash);
    std::cout << line << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  try {
    flags = ParseFlags(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "loom-mlp: " << e.what() << " (loom-mlp --help lists the flags)" << std::endl;
    return 2;
  }
  try {
    return Train(flags);
  } catch (const loom::Error& e) {
    std::cerr << "loom-mlp: " << e.what() << std::endl;
    return 1;
  }
}
