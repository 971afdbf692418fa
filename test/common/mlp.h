// A small MLP for graph and end-to-end tests: Linear -> ReLU -> ... -> Linear, softmax
// cross-entropy on integer labels, a synthetic classification data set, and training runs of
// the two, eager or replayed, to compare with each other.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "common/graph_capture.h"
#include "core/device.h"
#include "nn/optimizer.h"

namespace loom {
namespace test {

struct Mlp {
  std::vector<Tensor> params;  // w0, b0, w1, b1, ...

  Mlp(const std::vector<int64_t>& dims, uint64_t seed, std::shared_ptr<Device> dev = CpuDevice(),
      DType dtype = DType::kFloat32) {
    dev->SetRandSeed(seed);
    for (size_t i = 0; i + 1 < dims.size(); ++i) {
      Tensor w = ops::Normal({dims[i], dims[i + 1]}, 0, std::sqrt(2.0 / double(dims[i])), dtype, dev);
      Tensor b = ops::Zeros({dims[i + 1]}, dtype, dev);
      w.set_requires_grad(true).set_name("w" + std::to_string(i));
      b.set_requires_grad(true).set_name("b" + std::to_string(i));
      w.block()->set_persistent(true);
      b.block()->set_persistent(true);
      params.push_back(w);
      params.push_back(b);
    }
  }

  Tensor Logits(const Tensor& x, double dropout = 0) const {
    Tensor h = x;
    for (size_t i = 0; i < params.size(); i += 2) {
      h = ops::AddBias(ops::MatMul(h, params[i]), params[i + 1]);
      if (i + 2 < params.size()) {
        h = ops::Relu(h);
        if (dropout > 0) h = ops::Dropout(h, dropout, true);
      }
    }
    return h;
  }

  // One training step: forward, backward, an optimizer update per parameter. Returns the loss.
  Tensor Step(const Tensor& x, const Tensor& y, nn::Optimizer& opt, double dropout = 0) const {
    Tensor loss = ops::SoftmaxCrossEntropy(Logits(x, dropout), y);
    for (auto& pg : Backward(loss)) opt.Apply(pg.second, pg.first, pg.first.name());
    return loss;
  }

  std::vector<std::vector<float>> Values() const {
    std::vector<std::vector<float>> v;
    for (const Tensor& p : params) v.push_back(p.ToVector<float>());
    return v;
  }
};

// Classes are Gaussian blobs around fixed prototypes: learnable, deterministic per seed.
struct Blobs {
  int64_t features, classes;
  std::vector<std::vector<float>> protos;
  Blobs(int64_t f, int64_t c, uint32_t seed = 99) : features(f), classes(c) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> n(0, 1);
    protos.assign(size_t(c), std::vector<float>(size_t(f)));
    for (auto& p : protos)
      for (float& v : p) v = n(gen);
  }
  // (x: (batch, features) float32, y: (batch) int32)
  std::pair<Tensor, Tensor> Batch(int64_t batch, uint32_t seed, std::shared_ptr<Device> dev = CpuDevice()) const {
    std::mt19937 gen(seed);
    std::normal_distribution<float> n(0, 1);
    std::uniform_int_distribution<int32_t> cls(0, int32_t(classes - 1));
    std::vector<float> x(static_cast<size_t>(batch * features));
    std::vector<int32_t> y(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) {
      y[size_t(i)] = cls(gen);
      for (int64_t j = 0; j < features; ++j)
        x[size_t(i * features + j)] = protos[size_t(y[size_t(i)])][size_t(j)] + 0.5f * n(gen);
    }
    return {ops::FromVector(x, {batch, features}, dev), ops::FromVector(y, {batch}, dev)};
  }
};

// The losses and final parameters of a training run.
struct TrainRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> params;
};

// Losses and parameters of two runs bit for bit (graph replay against eager); `what` names the run.
void ExpectBitwiseRuns(const TrainRun& a, const TrainRun& b, const std::string& what);

// Where a run's batches come from: step s trains on data.Batch(batch, seed + s).
struct BatchPlan {
  int64_t batch = 16;
  uint32_t seed = 100;
};

// Eager steps [from, to) of `m` with `opt`; appends the losses and records the parameters.
void TrainEager(const Mlp& m, nn::Optimizer& opt, const Blobs& data, int from, int to, TrainRun* run,
                BatchPlan plan = BatchPlan(), double dropout = 0);
// One step captured into `graph` on the batch of step 0, then replayed for steps [0, steps)
// with each step's batch copied into the captured inputs.
TrainRun TrainReplayed(CapturedGraph& graph, const Mlp& m, nn::Optimizer& opt, const Blobs& data, int steps,
                       BatchPlan plan = BatchPlan(), double dropout = 0, bool sequential = true);

}  // namespace test
}  // namespace loom
