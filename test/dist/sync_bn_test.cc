// SyncBatchNorm2d (Note [SyncBatchNorm]) on N ranks against BatchNorm2d on the full batch:
// outputs, running statistics, every gradient; gamma/beta gradients reduced once, not twice.
#include <gtest/gtest.h>

#include "dist_common.h"
#include "nn/cnn_layers.h"
#include "nn/sync_batch_norm.h"

namespace loom {
namespace test {
namespace {

constexpr int64_t kN = 16, kC = 3, kH = 4, kW = 5;

std::vector<double> Random(size_t n, uint32_t seed, double mean = 0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> d(mean, 1.5);
  std::vector<double> v(n);
  for (double& x : v) x = d(gen);
  return v;
}

// Rows [r0, r0 + rows) of an (kN, ...) array.
std::vector<double> Rows(const std::vector<double>& v, int64_t r0, int64_t rows) {
  const int64_t per = int64_t(v.size()) / kN;
  return std::vector<double>(v.begin() + r0 * per, v.begin() + (r0 + rows) * per);
}

double MaxRel(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0, s = 1e-300;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::abs(a[i] - b[i]));
    s = std::max(s, std::abs(b[i]));
  }
  return d / s;
}

struct BnResult {
  std::vector<double> y, dx, dgamma, dbeta, running_mean, running_var;
};

// One forward and backward of `bn` on x (rows of the global input), loss = Σ y * w.
template <typename Bn>
BnResult RunBn(Bn& bn, const std::vector<double>& x, const std::vector<double>& w, int64_t rows,
               const std::shared_ptr<Device>& dev) {
  const size_t c = size_t(kC);
  bn.gamma.CopyFrom(std::vector<double>{0.5, 1.5, -2.0});
  bn.beta.CopyFrom(std::vector<double>{0.1, -0.3, 2.0});
  bn.running_var.CopyFrom(std::vector<double>(c, 2.0));
  Tensor xt = ops::FromVector(x, {rows, kC, kH, kW}, dev);
  xt.set_requires_grad(true);
  Tensor y = bn.Forward(xt);
  Tensor loss = ops::Sum(ops::Mul(y, ops::FromVector(w, {rows, kC, kH, kW}, dev)));
  BnResult r;
  for (auto& pg : Backward(loss)) {
    if (pg.first.block() == xt.block()) r.dx = pg.second.ToVector<double>();
    if (pg.first.block() == bn.gamma.block()) r.dgamma = pg.second.ToVector<double>();
    if (pg.first.block() == bn.beta.block()) r.dbeta = pg.second.ToVector<double>();
  }
  r.y = y.ToVector<double>();
  r.running_mean = bn.running_mean.template ToVector<double>();
  r.running_var = bn.running_var.template ToVector<double>();
  return r;
}

TEST(SyncBatchNorm, MatchesBatchNormOnTheFullBatchAndReducesGammaBetaGradientsOnce) {
  const std::vector<double> x = Random(size_t(kN * kC * kH * kW), 11, 0.7), w = Random(x.size(), 12);
  for (int world : UnderMpirun() ? std::vector<int>{WorldSize(2)} : std::vector<int>{2, 4}) {
    Launch()(world, [&](int rank, const std::shared_ptr<Communicator>& comm) {
      auto dev = NewCpuDevice(rank);
      nn::LayerOptions o;
      o.device = dev;
      o.dtype = DType::kFloat64;
      nn::BatchNorm2d full_bn(kC, 0.1, 1e-5, o);
      const BnResult full = RunBn(full_bn, x, w, kN, dev);
      const int64_t rows = kN / world, r0 = rows * rank;
      nn::SyncBatchNorm2d sync_bn(kC, comm, 0.1, 1e-5, o);
      const BnResult mine = RunBn(sync_bn, Rows(x, r0, rows), Rows(w, r0, rows), rows, dev);
      EXPECT_LE(MaxRel(mine.y, Rows(full.y, r0, rows)), 1e-10);
      EXPECT_LE(MaxRel(mine.dx, Rows(full.dx, r0, rows)), 1e-10);
      EXPECT_LE(MaxRel(mine.running_mean, full.running_mean), 1e-10);
      EXPECT_LE(MaxRel(mine.running_var, full.running_var), 1e-10);
      // Gamma and beta gradients stay this rank's share: the sum over ranks (what the gradient
      // all-reduce makes) is the full batch's, not world times it.
      std::vector<double> dgamma = mine.dgamma, dbeta = mine.dbeta;
      comm->AllReduce(dgamma.data(), kC, DType::kFloat64, ReduceOp::kSum);
      comm->AllReduce(dbeta.data(), kC, DType::kFloat64, ReduceOp::kSum);
      EXPECT_LE(MaxRel(dgamma, full.dgamma), 1e-10) << world << " ranks";
      EXPECT_LE(MaxRel(dbeta, full.dbeta), 1e-10) << world << " ranks";
    });
  }
}

// End to end through DistOpt (and the graph's buckets): SyncBN -> flatten -> linear, mean loss,
// SGD with momentum: N ranks give the parameters and running statistics of one rank with plain
// BatchNorm on the full batch.
struct BnNet {
  std::shared_ptr<nn::Layer> bn;
  Tensor w, b;
  BnNet(std::shared_ptr<nn::Layer> layer, const std::shared_ptr<Device>& dev) : bn(std::move(layer)) {
    std::vector<double> wv = Random(size_t(kC * kH * kW * 4), 21);
    for (double& v : wv) v *= 0.1;
    w = ops::FromVector(wv, {kC * kH * kW, 4}, dev);
    b = ops::Zeros({4}, DType::kFloat64, dev);
    for (Tensor* t : {&w, &b}) {
      t->set_requires_grad(true);
      t->block()->set_persistent(true);
    }
  }
  std::vector<Tensor> Params() {
    std::vector<Tensor> p{w, b};
    for (auto& kv : bn->Params()) p.push_back(kv.second);
    return p;
  }
  Tensor Step(const Tensor& x, const Tensor& y, nn::Optimizer& opt) {
    Tensor h = ops::Flatten(bn->Forward(x));
    Tensor loss = ops::SoftmaxCrossEntropy(ops::AddBias(ops::MatMul(h, w), b), y);
    for (auto& pg : Backward(loss)) opt.Apply(pg.second, pg.first, "");
    return loss;
  }
};

std::vector<double> Flat(const std::vector<Tensor>& ts) {
  std::vector<double> v;
  for (const Tensor& t : ts) {
    auto x = t.ToVector<double>();
    v.insert(v.end(), x.begin(), x.end());
  }
  return v;
}

TEST(SyncBatchNorm, TrainsLikeBatchNormOnTheFullBatchThroughDistOpt) {
  const int world = WorldSize(2), steps = 4;
  auto batch = [&](int s, int64_t r0, int64_t rows, const std::shared_ptr<Device>& dev, Tensor* x, Tensor* y) {
    std::vector<double> xs = Rows(Random(size_t(kN * kC * kH * kW), uint32_t(100 + s), 0.3), r0, rows);
    std::vector<int32_t> ys;
    for (int64_t i = r0; i < r0 + rows; ++i) ys.push_back(int32_t((i * 7 + s) % 4));
    if (!x->defined()) {
      *x = ops::FromVector(xs, {rows, kC, kH, kW}, dev);
      *y = ops::FromVector(ys, {rows}, dev);
      x->block()->set_persistent(true);
      y->block()->set_persistent(true);
    } else {
      x->CopyFrom(xs);
      y->CopyFrom(ys);
    }
  };
  for (Mode mode : {Mode::kEager, Mode::kSerial}) {
    Launch()(world, [&](int rank, const std::shared_ptr<Communicator>& comm) {
      auto dev = NewCpuDevice(rank);
      nn::LayerOptions o;
      o.device = dev;
      o.dtype = DType::kFloat64;
      std::vector<double> want, got, want_stats, got_stats;
      {  // one rank, plain BatchNorm, the full batch, eager
        BnNet net(std::make_shared<nn::BatchNorm2d>(kC, 0.1, 1e-5, o), dev);
        nn::SGD sgd(0.1, 0.9);
        Tensor x, y;
        for (int s = 0; s < steps; ++s) {
          batch(s, 0, kN, dev, &x, &y);
          net.Step(x, y, sgd);
        }
        want = Flat(net.Params());
        for (auto& kv : net.bn->States()) want_stats.push_back(kv.second.ToVector<double>()[0]);
      }
      {
        BnNet net(std::make_shared<nn::SyncBatchNorm2d>(kC, comm, 0.1, 1e-5, o), dev);
        nn::DistOpt opt(std::make_shared<nn::SGD>(0.1, 0.9), comm);
        const int64_t rows = kN / world;
        Tensor x, y;
        batch(0, rows * rank, rows, dev, &x, &y);
        std::unique_ptr<CapturedGraph> g;
        if (mode == Mode::kSerial) {
          g = std::make_unique<CapturedGraph>(dev, "syncbn");
          g->Capture([&] { net.Step(x, y, opt); });
        }
        for (int s = 0; s < steps; ++s) {
          batch(s, rows * rank, rows, dev, &x, &y);
          if (g) g->Replay();
          else net.Step(x, y, opt);
        }
        got = Flat(net.Params());
        for (auto& kv : net.bn->States()) got_stats.push_back(kv.second.ToVector<double>()[0]);
      }
      EXPECT_LE(MaxRel(got, want), 1e-10) << Name(mode) << ", rank " << rank;
      EXPECT_LE(MaxRel(got_stats, want_stats), 1e-10) << Name(mode) << ", rank " << rank;
    });
  }
}

}  // namespace
}  // namespace test
}  // namespace loom
