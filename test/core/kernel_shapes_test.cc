// The shape logic and dtype dispatch that the CPU and CUDA kernels share
// (device/kernel_shapes.h, device/kernel_dispatch.h), checked against brute-force host
// arithmetic, so that a mistake cannot hide behind two backends agreeing with each other.
#include <cmath>
#include <limits>
#include <string>

#include "common/harness.h"
#include "device/kernel_dispatch.h"
#include "device/kernel_shapes.h"

namespace loom {
namespace test {
namespace {

TEST(KernelShapes, BroadcastStridesRepeatBroadcastDimensions) {
  EXPECT_EQ(BroadcastStrides({3, 1, 5}, {2, 3, 4, 5}), (std::vector<int64_t>{0, 5, 0, 1}));
  EXPECT_EQ(BroadcastStrides({}, {2, 3}), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(BroadcastStrides({2, 3}, {2, 3}), (std::vector<int64_t>{3, 1}));
}

TEST(KernelShapes, BroadcastOffsetsWalkTheLeadingDimensions) {
  const Shape out{2, 3, 4};
  const Shape a{2, 1, 4}, b{3, 1};
  const std::vector<int64_t> sa = BroadcastStrides(a, out), sb = BroadcastStrides(b, out);
  for (int64_t i = 0; i < 2 * 3; ++i) {  // rows over the first two dimensions
    int64_t oa, ob;
    BroadcastOffsets(out, 2, sa, sb, i, oa, ob);
    const int64_t i0 = i / 3, i1 = i % 3;
    EXPECT_EQ(oa, i0 * 4) << i;  // a is (2, 1, 4): row i0, its one middle row
    EXPECT_EQ(ob, i1 * 1) << i;  // b is (3, 1): row i1
  }
}

TEST(KernelShapes, MatMulLayoutReadsTransposesAndBroadcastsBatches) {
  Attrs plain{{"ta", int64_t(0)}, {"tb", int64_t(0)}, {"sum_batch", int64_t(0)}};
  MatMulLayout l = MakeMatMulLayout(plain, {4, 1, 5, 7}, {3, 7, 2});
  EXPECT_EQ(l.m, 5);
  EXPECT_EQ(l.k, 7);
  EXPECT_EQ(l.n, 2);
  EXPECT_EQ(l.lda, 7);
  EXPECT_EQ(l.ldb, 2);
  EXPECT_EQ(l.batch, (Shape{4, 3}));
  EXPECT_EQ(l.nb, 12);
  EXPECT_EQ(l.nba, 4);
  EXPECT_EQ(l.nbb, 3);
  EXPECT_FALSE(l.RowsOfOneGemm());
  EXPECT_FALSE(l.SumIsOneGemm());
  for (int64_t i = 0; i < l.nb; ++i) {
    int64_t oa, ob;
    l.Offsets(i, oa, ob);
    EXPECT_EQ(oa, (i / 3) * 5 * 7) << i;
    EXPECT_EQ(ob, (i % 3) * 7 * 2) << i;
  }

  Attrs t{{"ta", int64_t(1)}, {"tb", int64_t(1)}};
  l = MakeMatMulLayout(t, {7, 5}, {2, 7});  // a stored (K, M), b stored (N, K)
  EXPECT_EQ(l.m, 5);
  EXPECT_EQ(l.k, 7);
  EXPECT_EQ(l.n, 2);
  EXPECT_EQ(l.lda, 5);
  EXPECT_EQ(l.ldb, 7);

  EXPECT_TRUE(MakeMatMulLayout(plain, {6, 5, 7}, {7, 2}).RowsOfOneGemm());
  EXPECT_FALSE(MakeMatMulLayout(Attrs{{"ta", int64_t(1)}}, {6, 7, 5}, {7, 2}).RowsOfOneGemm());
  EXPECT_FALSE(MakeMatMulLayout(Attrs{{"sum_batch", int64_t(1)}}, {6, 5, 7}, {7, 2}).RowsOfOneGemm());
  Attrs sum{{"ta", int64_t(1)}, {"sum_batch", int64_t(1)}};
  EXPECT_TRUE(MakeMatMulLayout(sum, {6, 7, 5}, {6, 7, 2}).SumIsOneGemm());
  EXPECT_FALSE(MakeMatMulLayout(sum, {6, 7, 5}, {1, 7, 2}).SumIsOneGemm());
  LOOM_EXPECT_THROW_MSG(MakeMatMulLayout(plain, {2, 5, 7}, {3, 7, 2}), ShapeError, "matmul");
}

TEST(KernelShapes, SliceRowsNormaliseNegativeBounds) {
  // (4, 9, 5) sliced along axis -2 to [2, -3): rows of 9 * 5, keeping 4 * 5 from element 2 * 5.
  SliceRows r = MakeSliceRows(Attrs{{"axis", int64_t(-2)}, {"start", int64_t(2)}, {"end", int64_t(-3)}}, {4, 9, 5},
                              "slice");
  EXPECT_EQ(r.outer, 4);
  EXPECT_EQ(r.full_row, 45);
  EXPECT_EQ(r.slice_row, 20);
  EXPECT_EQ(r.head, 10);
  LOOM_EXPECT_THROW_MSG(
      MakeSliceRows(Attrs{{"axis", int64_t(3)}, {"start", int64_t(0)}, {"end", int64_t(1)}}, {4, 9, 5}, "slice"),
      ValueError, "[slice] axis 3");
}

TEST(KernelShapes, NormalisationViews) {
  ChannelDims c = MakeChannelDims({2, 3, 4, 5});
  EXPECT_EQ(c.n, 2);
  EXPECT_EQ(c.c, 3);
  EXPECT_EQ(c.s, 20);
  EXPECT_EQ(MakeChannelDims({2, 3}).s, 1);
  RowDims r = MakeRowDims({6, 4, 5}, {4, 5});
  EXPECT_EQ(r.r, 6);
  EXPECT_EQ(r.d, 20);
  EXPECT_EQ(MakeRowDims({6, 0}, {0}).r, 0);
}

// Brute force: the input pixels of window (oi, oj) that lie inside the image.
std::vector<std::pair<int64_t, int64_t>> WindowPixels(const PoolDims& d, int64_t oi, int64_t oj) {
  std::vector<std::pair<int64_t, int64_t>> px;
  for (int64_t a = 0; a < d.kh; ++a)
    for (int64_t b = 0; b < d.kw; ++b) {
      int64_t i = oi * d.sh - d.ph + a, j = oj * d.sw - d.pw + b;
      if (i >= 0 && i < d.h && j >= 0 && j < d.w) px.push_back({i, j});
    }
  return px;
}

TEST(KernelShapes, PoolWindowsMatchBruteForce) {
  // x (1, 2, 7, 6), kernel (3, 2), stride (2, 1), padding (1, 1) -> (4, 7)
  Attrs a{{"kernel", std::vector<int64_t>{3, 2}}, {"stride", std::vector<int64_t>{2, 1}},
          {"padding", std::vector<int64_t>{1, 1}}};
  const PoolDims d = MakePoolDims(a, {1, 2, 7, 6}, {1, 2, 4, 7});
  EXPECT_EQ(d.planes, 2);
  for (int64_t oi = 0; oi < d.oh; ++oi)
    for (int64_t oj = 0; oj < d.ow; ++oj) {
      const auto px = WindowPixels(d, oi, oj);
      const Span r = RowSpan(d, oi), c = ColSpan(d, oj);
      ASSERT_EQ(int64_t(px.size()), (r.hi - r.lo) * (c.hi - c.lo)) << oi << "," << oj;
      for (const auto& p : px) {
        EXPECT_TRUE(p.first >= r.lo && p.first < r.hi && p.second >= c.lo && p.second < c.hi);
      }
      EXPECT_EQ(AvgCount(d, false, oi, oj), int64_t(px.size()));
      EXPECT_EQ(AvgCount(d, true, oi, oj), 6);
    }
}

TEST(KernelShapes, WindowArgMaxTakesTheFirstMaximumAndNaN) {
  // A 3x4 plane; the window rows [0, 2), columns [1, 4).
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> x{9, 1, 5, 2,  //
                        0, 5, 3, 9,  //
                        7, 7, 7, 7};
  double m = 0;
  EXPECT_EQ(WindowArgMax(x.data(), 4, Span{0, 2}, Span{1, 4}, m), 7);  // 9 at (1, 3); the 9 at (0, 0) is outside
  EXPECT_EQ(m, 9);
  EXPECT_EQ(WindowArgMax(x.data(), 4, Span{2, 3}, Span{0, 4}, m), 8);  // ties: the first
  EXPECT_EQ(m, 7);
  x[5] = nan;
  EXPECT_EQ(WindowArgMax(x.data(), 4, Span{0, 2}, Span{1, 4}, m), 5);  // NaN wins
  EXPECT_TRUE(std::isnan(m));
}

// Note [Column sums by slabs]: slabs cover the rows exactly, each a multiple of 64 rows of at
// least 256 (the last may be shorter), enough of them to give a GPU about 512 blocks; a short or
// wide sum stays one slab, the rows whole.
TEST(KernelShapes, ColumnSlabsCoverTheRowsAndFillAGpu) {
  const ColumnSlabs gpt2_bias = ColumnSlabsOf(8192, 24);  // GPT-2's (8192, 768): 24 blocks of 32 columns
  EXPECT_EQ(gpt2_bias.slabs, 22);
  EXPECT_EQ(gpt2_bias.rows, 384);
  for (int64_t r : {int64_t(0), int64_t(1), int64_t(255), int64_t(256), int64_t(1000), int64_t(8192), int64_t(100003)})
    for (int64_t blocks : {int64_t(1), int64_t(3), int64_t(24), int64_t(96), int64_t(600)}) {
      const ColumnSlabs c = ColumnSlabsOf(r, blocks);
      const std::string what = "r " + std::to_string(r) + ", blocks " + std::to_string(blocks);
      ASSERT_GE(c.slabs, 1) << what;
      if (c.slabs == 1) {
        EXPECT_EQ(c.rows, r) << what;
        continue;
      }
      EXPECT_EQ(c.rows % 64, 0) << what;
      EXPECT_GE(c.rows, 256) << what;
      EXPECT_GE(c.slabs * c.rows, r) << what;        // every row in a slab
      EXPECT_LT((c.slabs - 1) * c.rows, r) << what;  // and no empty slab
      EXPECT_LE(c.slabs * blocks, 512 + blocks) << what;
    }
  EXPECT_EQ(ColumnSlabsOf(8192, 600).slabs, 1);  // enough blocks already
  EXPECT_EQ(ColumnSlabsOf(300, 1).slabs, 1);     // too few rows to cut
}

TEST(KernelDispatch, PicksTheTypeOrNamesTheOp) {
  std::string got;
  DispatchFloat(DType::kFloat64, "relu", "CPU", [&](auto t) { got = sizeof(t) == 8 ? "double" : "float"; });
  EXPECT_EQ(got, "double");
  IndexDispatch(DType::kInt32, "embedding", [&](auto t) { got = sizeof(t) == 4 ? "int32" : "int64"; });
  EXPECT_EQ(got, "int32");
  WordDispatch(2, "copy", [&](auto t) { got = std::to_string(sizeof(t)); });
  EXPECT_EQ(got, "2");
  LOOM_EXPECT_THROW_MSG(DispatchFloat(DType::kInt32, "relu", "CUDA", [](auto) {}), DTypeError,
                        "[relu] no CUDA kernel for dtype int32");
  LOOM_EXPECT_THROW_MSG(IndexDispatch(DType::kFloat32, "embedding", [](auto) {}), DTypeError,
                        "[embedding] indices must be int32 or int64, got float32");
}

}  // namespace
}  // namespace test
}  // namespace loom
