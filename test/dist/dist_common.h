// Helpers of the data-parallel tests (issue 15).
//
// Note [Rank launchers]
// Every multi-rank test is a function of one rank, run by a launcher: alone, the in-process
// communicator (N threads, one CPU device each); under mpirun (ctest's test_dist_mpi_2ranks),
// the same function once, for this process's rank of MPI's world. The references are computed
// inside the rank function without any communicator (plain training on the global batch), so a
// test needs nothing from the other ranks but their collectives. Tests for a world size other
// than mpirun's skip there, saying so.
#pragma once

#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "common/graph_capture.h"
#include "common/harness.h"
#include "common/mlp.h"
#include "core/ops.h"
#include "core/device.h"
#include "io/comm/comm.h"
#include "io/comm/inproc.h"
#include "nn/dist_opt.h"

namespace loom {
namespace test {

using RankFn = std::function<void(int rank, const std::shared_ptr<Communicator>& comm)>;
using Launcher = std::function<void(int world, const RankFn& fn)>;

// N threads over one in-process group; rethrows the first rank's exception.
inline Launcher InProcLauncher(InProcOptions options = {}) {
  return [options](int world, const RankFn& fn) {
    for (const std::exception_ptr& e : RunInProcRanks(world, fn, options))
      if (e) std::rethrow_exception(e);
  };
}

inline bool UnderMpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

// MPI's world, made once (and finalised by io/comm at exit).
inline const std::shared_ptr<Communicator>& MpiWorld() {
  static std::shared_ptr<Communicator> comm = MakeCommunicator("mpi");
  return comm;
}

// Note [Rank launchers]: in-process threads, or this process's rank under mpirun.
inline Launcher Launch() {
  if (!UnderMpirun()) return InProcLauncher();
  return [](int world, const RankFn& fn) {
    const std::shared_ptr<Communicator>& c = MpiWorld();
    LOOM_CHECK(c->size() == world, ValueError, "[test] mpirun started ", c->size(), " ranks, the test needs ", world);
    fn(c->rank(), c);
  };
}

// The number of ranks a test can run with: mpirun's, else `in_process`.
inline int WorldSize(int in_process) { return UnderMpirun() ? MpiWorld()->size() : in_process; }

constexpr int64_t kGlobalBatch = 32, kFeatures = 16, kClasses = 16;
const std::vector<int64_t> kDims{kFeatures, 32, 32, kClasses};

// The global batch of step s: rows of Gaussian blobs, labels in [0, kClasses).
struct GlobalBatch {
  std::vector<double> x;
  std::vector<int32_t> y;
};
inline GlobalBatch MakeGlobalBatch(int step) {
  std::mt19937 gen(uint32_t(1000 + step));
  std::normal_distribution<double> n(0, 1);
  GlobalBatch b;
  for (int64_t i = 0; i < kGlobalBatch; ++i) {
    const int32_t c = int32_t(gen() % uint32_t(kClasses));
    b.y.push_back(c);
    for (int64_t j = 0; j < kFeatures; ++j) b.x.push_back(0.5 * n(gen) + (j % kClasses == c ? 2.0 : 0.0));
  }
  return b;
}

// Rank `rank`'s rows of the global batch of `step`, written into x (rows, kFeatures), y (rows).
inline void FillShard(int step, int rank, int world, Tensor x, Tensor y) {
  const GlobalBatch b = MakeGlobalBatch(step);
  const int64_t rows = kGlobalBatch / world, r0 = rows * rank;
  std::vector<double> xs(b.x.begin() + r0 * kFeatures, b.x.begin() + (r0 + rows) * kFeatures);
  std::vector<int32_t> ys(b.y.begin() + r0, b.y.begin() + r0 + rows);
  if (x.dtype() == DType::kFloat64) x.CopyFrom(xs);
  else x.CopyFrom(std::vector<float>(xs.begin(), xs.end()));
  y.CopyFrom(ys);
}

enum class Mode { kEager, kSerial, kParallel };
inline const char* Name(Mode m) { return m == Mode::kEager ? "eager" : m == Mode::kSerial ? "serial" : "parallel"; }

struct DistRun {
  std::vector<std::vector<double>> params;
  std::shared_ptr<nn::Optimizer> opt;    // keeps the communicator registered for the graph
  std::unique_ptr<CapturedGraph> graph;  // graph modes
  std::shared_ptr<Device> device;
};

// When the optimizer updates a parameter: after the whole backward (Mlp::Step), or as soon as
// its gradient is final, from Backward's callback (nn::Model, loom-mlp): then the captured list
// interleaves the updates of late layers with the backward of early ones.
// Or through Optimizer::BackwardAndUpdate (nn::Model's way: from the callback, or, clipping by
// global norm, all after backward through StepKeyed).
enum class Updates { kAfterBackward, kDuringBackward, kBackwardAndUpdate };

// `steps` steps of SGD with momentum on the MLP, on rank's shard with DistOpt over comm, or
// (comm null) on the whole global batch without one. With clipping by global norm, kAfterBackward
// is one Step over all the gradients.
// The optimizer of TrainMlp: SGD with momentum or AdamW (decay on matrices only, and a
// schedule), with or without sharded state under DistOpt (Note [Sharded optimizer state]).
struct OptSpec {
  bool adam = false;
  bool shard = false;
  size_t bucket_bytes = 25 << 20;  // DistOpt's (the sharded buckets')
  std::optional<Compression> wire;  // DistOpt's (Note [Gradients on the wire])
  std::optional<nn::LossScaling> scaling;  // on the wrapped optimizer (Note [Loss scaling])
};

inline DistRun TrainMlp(int rank, int world, const std::shared_ptr<Communicator>& comm, Mode mode, DType dtype,
                        int steps, GraphOptions options = {}, Updates updates = Updates::kAfterBackward,
                        nn::GradClip clip = {}, OptSpec spec = {}) {
  DistRun run;
  run.device = NewCpuDevice(rank);
  const auto& dev = run.device;
  Mlp m(kDims, 7, dev, dtype);
  std::shared_ptr<nn::Optimizer> inner;
  if (spec.adam) {
    auto adam = std::make_shared<nn::Adam>(0.01, 0.9, 0.999, 1e-8, 0.1, /*decoupled=*/true);
    adam->set_decay_on(nn::Adam::DecayOn::kMatrices);
    adam->SetSchedule(nn::Schedule::Cosine(0.01, steps + 1));
    inner = adam;
  } else {
    inner = std::make_shared<nn::SGD>(0.05, 0.9);
  }
  if (spec.scaling) inner->SetLossScaling(*spec.scaling);
  run.opt = inner;
  if (comm) run.opt = std::make_shared<nn::DistOpt>(inner, comm, spec.wire, spec.bucket_bytes, spec.shard);
  nn::Optimizer* opt = run.opt.get();
  opt->SetGradClip(clip);
  const int64_t rows = kGlobalBatch / world;
  Tensor x = ops::Zeros({rows, kFeatures}, dtype, dev), y = ops::Zeros({rows}, DType::kInt32, dev);
  x.block()->set_persistent(true);
  y.block()->set_persistent(true);
  auto step = [&] {
    if (updates == Updates::kAfterBackward && !opt->clips_by_norm() && !spec.shard) {
      m.Step(x, y, *opt);
      return;
    }
    Tensor loss = ops::SoftmaxCrossEntropy(m.Logits(x), y);
    if (updates == Updates::kAfterBackward) opt->Step(Backward(loss));
    else if (updates == Updates::kBackwardAndUpdate) opt->BackwardAndUpdate(loss);
    else Backward(loss, [&](const Tensor& p, const Tensor& g) { opt->Apply(g, p, p.name()); });
  };
  if (mode == Mode::kEager) {
    for (int s = 0; s < steps; ++s) {
      FillShard(s, rank, world, x, y);
      step();
    }
  } else {
    if (mode == Mode::kParallel) {
      options.parallel_fallback = false;
      options.num_workers = 2;
    }
    run.graph = std::make_unique<CapturedGraph>(dev, "dist", options);
    run.graph->Capture(step);
    for (int s = 0; s < steps; ++s) {
      FillShard(s, rank, world, x, y);
      run.graph->Replay(mode == Mode::kSerial);
    }
  }
  for (const Tensor& p : m.params) {
    if (dtype == DType::kFloat64) run.params.push_back(p.ToVector<double>());
    else {
      auto v = p.ToVector<float>();
      run.params.emplace_back(v.begin(), v.end());
    }
  }
  return run;
}

// max |a - b| / max |b| over all parameters.
inline double RelativeDiff(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i)
    for (size_t j = 0; j < b[i].size(); ++j) {
      diff = std::max(diff, std::abs(a[i][j] - b[i][j]));
      scale = std::max(scale, std::abs(b[i][j]));
    }
  return diff / scale;
}

}  // namespace test
}  // namespace loom
