// dist_overlap: does the all-reduce of late layers' gradients overlap the backward of early ones?
// N ranks as threads of this process (the in-process communicator, io/comm/inproc.h) train an
// MLP with DistOpt in a captured, parallel-replayed step; every collective carries an injected
// latency (default 2 ms, like a slow link). Two graphs of the same step (the same model and
// optimizer, captured twice) are timed, replayed in turns so that a loaded machine's drift
// falls on both alike; each figure is the median over its replays:
//   overlap  each bucket's all-reduce right after its last gradient (Note [Gradient buckets]),
//            on the collective lane (Note [A lane for collectives]);
//   after    the same buckets, all-reduced after the whole backward (overlap_collectives off).
// The target: overlap step <= after step - 0.5 x the latency injected per step.
// A benchmark, not a test: it prints what it measured (one JSON line per mode, then a summary)
// and judges nothing. On a shared machine the times are noisy, and each injected sleep overshoots
// by the scheduler's wake-up delay.
//
//   dist_overlap [--ranks 2] [--latency-ms 2] [--steps 20] [--batch 64] [--bucket-kb 256]
//                [--trace FILE]   (the Chrome trace of rank 0's last overlapped replay)
// Exit codes: 0 ok, 1 a loom error (printed), 2 bad flags.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/device.h"
#include "examples/common/flags.h"
#include "graph/graph.h"
#include "io/comm/inproc.h"
#include "nn/dist_opt.h"
#include "nn/models.h"

namespace {

using loom::Tensor;
namespace ops = loom::ops;

struct Flags {
  int64_t ranks = 2, steps = 20, batch = 64, bucket_kb = 256;
  double latency_ms = 2;
  std::string trace;
};

const char* kUsage =
    "usage: dist_overlap [--ranks N] [--latency-ms MS] [--steps N] [--batch N] [--bucket-kb KB] [--trace FILE]\n"
    "  --ranks N       ranks (threads with a CPU device each; default 2)\n"
    "  --latency-ms MS injected into every collective (default 2)\n"
    "  --steps N       timed replays per mode, after 2 untimed ones (default 20)\n"
    "  --batch N       samples per rank per step of the 256-512-512-512-512-10 MLP (default 64)\n"
    "  --bucket-kb KB  gradient bucket size (default 256)\n"
    "  --trace FILE    Chrome trace of rank 0's last replay with overlap\n";

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  loom::flags::Args a(argc, argv);
  while (a.Next()) {
    if (a.Is("--help") || a.Is("-h")) {
      std::cout << kUsage;
      std::exit(0);
    } else if (a.Is("--ranks")) {
      f.ranks = a.Int(1);
    } else if (a.Is("--latency-ms")) {
      f.latency_ms = a.Double();
    } else if (a.Is("--steps")) {
      f.steps = a.Int(1);
    } else if (a.Is("--batch")) {
      f.batch = a.Int(1);
    } else if (a.Is("--bucket-kb")) {
      f.bucket_kb = a.Int(1);
    } else if (a.Is("--trace")) {
      f.trace = a.Value();
    } else {
      a.Unknown();
    }
  }
  if (f.latency_ms < 0) throw loom::flags::UsageError("--latency-ms must not be negative");
  return f;
}

struct Result {
  double step_ms = 0;
  size_t allreduces = 0;
  bool serial = false;  // the parallel replay chose to run serially (Note [Parallel or serial])
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Both modes, in turns: {overlap, after}.
std::pair<Result, Result> RunModes(const Flags& f) {
  Result on, off;
  std::mutex mu;
  loom::InProcOptions io;
  io.latency_ms = f.latency_ms;
  io.timeout_s = 120;
  auto errors = loom::RunInProcRanks(int(f.ranks), [&](int rank, const std::shared_ptr<loom::Communicator>& comm) {
    auto dev = loom::NewCpuDevice(rank);
    dev->SetRandSeed(1);
    loom::nn::LayerOptions lo;
    lo.device = dev;
    auto mlp = loom::nn::MakeMlp({256, 512, 512, 512, 512, 10}, lo);
    loom::nn::DistOpt opt(std::make_shared<loom::nn::SGD>(0.01, 0.9), comm);
    Tensor x = ops::Normal({f.batch, 256}, 0, 1, loom::DType::kFloat32, dev);
    Tensor y = ops::Zeros({f.batch}, loom::DType::kInt32, dev);
    std::unique_ptr<loom::Graph> graphs[2];  // overlap, after
    for (int k = 0; k < 2; ++k) {
      loom::GraphOptions go;
      // The replay's own choice (Note [Parallel or serial]), as users get it; the JSON says which.
      go.num_workers = 1;  // one compute worker per rank (2 cores shared); plus the lane
      go.bucket_bytes = int(f.bucket_kb * 1024);
      go.first_bucket_bytes = 0;
      go.overlap_collectives = k == 0;
      graphs[k] = loom::Graph::Capture(dev, k == 0 ? "overlap" : "after", [&] {
        Tensor loss = ops::SoftmaxCrossEntropy(mlp->Forward(x), y);
        for (auto& pg : loom::Backward(loss)) opt.Apply(pg.second, pg.first, "");
      }, go);
      for (int i = 0; i < 2; ++i) graphs[k]->Run(false);
    }
    std::vector<double> ms[2];
    for (int64_t i = 0; i < f.steps; ++i)
      for (int k = 0; k < 2; ++k) {
        if (k == 0 && rank == 0 && !f.trace.empty() && i + 1 == f.steps) graphs[0]->set_profile(true);
        comm->Barrier();  // the ranks start each replay together
        const auto t0 = std::chrono::steady_clock::now();
        graphs[k]->Run(false);
        ms[k].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
    comm->Barrier();
    if (rank == 0 && !f.trace.empty()) graphs[0]->WriteTrace(f.trace);
    if (rank != 0) return;
    std::lock_guard<std::mutex> l(mu);
    for (int k = 0; k < 2; ++k) {
      Result& r = k == 0 ? on : off;
      r.step_ms = Median(ms[k]);
      r.serial = graphs[k]->stats().parallel_runs_serial;
      for (const auto& op : graphs[k]->ops().ops) r.allreduces += op.name() == "allreduce";
    }
  }, io);
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return {on, off};
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  try {
    f = ParseFlags(argc, argv);
  } catch (const loom::flags::UsageError& e) {
    std::cerr << "dist_overlap: " << e.what() << "\n" << kUsage;
    return 2;
  }
  try {
    const auto [on, off] = RunModes(f);
    const double injected = double(on.allreduces) * f.latency_ms;
    for (const auto& [name, r] : {std::pair<const char*, Result>{"overlap", on}, {"after_backward", off}})
      std::printf("{\"mode\": \"%s\", \"ranks\": %lld, \"step_ms\": %.3f, \"allreduces\": %zu, "
                  "\"replay\": \"%s\"}\n",
                  name, (long long)f.ranks, r.step_ms, r.allreduces, r.serial ? "serial" : "parallel");
    std::printf("{\"injected_ms_per_step\": %.3f, \"saved_ms\": %.3f, \"target_saved_ms\": %.3f, "
                "\"meets_target\": %s}\n",
                injected, off.step_ms - on.step_ms, 0.5 * injected,
                on.step_ms <= off.step_ms - 0.5 * injected ? "true" : "false");
  } catch (const loom::Error& e) {
    std::cerr << "dist_overlap: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
