// DenseFlops (graph/flops.h) on captured steps, against counts worked out by hand.
#include <gtest/gtest.h>

#include "common/harness.h"
#include "common/mlp.h"
#include "core/ops_cnn.h"
#include "graph/flops.h"
#include "graph/graph.h"

namespace loom {
namespace test {
namespace {

TEST(Flops, MlpStepCountsEveryProductOnce) {
  Blobs data(32, 10);
  Mlp m({32, 64, 48, 10}, 5);
  nn::SGD opt(0.05, 0.9);
  auto b = data.Batch(8, 100);
  GraphOptions options;
  options.run_passes = false;
  auto g = Graph::Capture(CpuDevice(), "mlp", [&] { m.Step(b.first, b.second, opt); }, options);
  // Per layer 2 B in out for the forward, the weight gradient and the input gradient; the first
  // layer's input gradient is not computed (x needs none).
  const int64_t f0 = 2 * 8 * 32 * 64, f1 = 2 * 8 * 64 * 48, f2 = 2 * 8 * 48 * 10;
  EXPECT_EQ(DenseFlops(g->ops().ops), 3 * (f0 + f1 + f2) - f0);
}

TEST(Flops, ConvolutionForwardAndBothGradients) {
  Tensor x = RandomTensor({2, 3, 8, 8}, DType::kFloat32, 1);
  Tensor w = RandomTensor({4, 3, 3, 3}, DType::kFloat32, 2);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  auto g = Graph::Capture(CpuDevice(), "conv", [&] {
    ops::Conv2dOptions o;
    o.padding = {1, 1};
    Tensor y = ops::Conv2d(x, w, Tensor(), o);  // (2, 4, 8, 8)
    Backward(ops::Sum(y));
  });
  // 2 x 512 outputs x 27 multiply-adds, three times (forward, input and weight gradients).
  EXPECT_EQ(DenseFlops(g->ops().ops), 3 * 2 * (2 * 4 * 8 * 8) * 27);
}

TEST(Flops, OtherOpsCountNothing) {
  Tensor x = RandomTensor({4, 5}, DType::kFloat32, 3);
  auto g = Graph::Capture(CpuDevice(), "elementwise", [&] { ops::Relu(ops::Add(x, x)); });
  EXPECT_EQ(DenseFlops(g->ops().ops), 0);
}

}  // namespace
}  // namespace test
}  // namespace loom
