// CUDA's layer norm (src/device/cuda/layer_norm_kernels.cuh: rows by warps, Note [Layer norm rows
// by warps], or by blocks; dgamma and dbeta by chunks of rows) run on the CPU by the emulator
// (Note [CUDA kernels emulated on the CPU]), launched as transformer.cu launches them, against the
// op table's float64 references: each of the warp kernels' widths (8, 16, 24 and 32 values a
// lane, GPT-2's 768 among them), a row too long for a warp, float64, rows that end a chunk early,
// and the forward's bfloat16 output (a fused cast) bit for bit against its float32 output.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/op_refs.h"
#include "emu/emu_checks.h"
#include "core/attrs.h"
#include "core/half.h"
#include "emu/cuda_emu.h"  // before the kernels' sources: its macros name CUDA's built-ins
#include "device/cuda/device_math.cuh"

namespace loom {
namespace cuda {
namespace {
#include "device/cuda/layer_norm_kernels.cuh"
}  // namespace
}  // namespace cuda

namespace test {
namespace {

using namespace cuda;  // the kernels, as transformer.cu sees them

constexpr double kEps = 1e-5;


// transformer.cu's LayerNormCuda: y (Out), mean, invstd.
template <typename T, typename Out>
void Forward(const std::vector<T>& x, const std::vector<T>& g, const std::vector<T>& b, Out* y, std::vector<T>& mean,
             std::vector<T>& invstd, int64_t r, int64_t d, bool bf16) {
  if constexpr (std::is_same<T, float>::value) {
    if (WarpRows(DType::kFloat32, d)) {
      WithLaneValues(d, [&](auto n) {
        emu::Launch({WarpRowBlocks(r)}, {32 * kWarpRowsPerBlock}, [&] {
          LayerNormWarpKernel<decltype(n)::value, Out>(x.data(), g.data(), b.data(), y, mean.data(), invstd.data(), r,
                                                       d, kEps, bf16);
        });
      });
      return;
    }
  }
  emu::Launch({RowBlocks(r)}, {unsigned(RowThreads(d))}, [&] {
    LayerNormKernel<T, Out>(x.data(), g.data(), b.data(), y, mean.data(), invstd.data(), r, d, kEps, bf16);
  });
}

// transformer.cu's LayerNormGradCuda: dx, dgamma, dbeta.
template <typename T>
void Backward(const std::vector<T>& x, const std::vector<T>& g, const std::vector<T>& mean,
              const std::vector<T>& invstd, const std::vector<T>& dy, std::vector<T>& dx, std::vector<T>& dg,
              std::vector<T>& db, int64_t r, int64_t d) {
  bool warp = false;
  if constexpr (std::is_same<T, float>::value) {
    warp = WarpRows(DType::kFloat32, d);
    if (warp)
      WithLaneValues(d, [&](auto n) {
        emu::Launch({WarpRowBlocks(r)}, {32 * kWarpRowsPerBlock}, [&] {
          LayerNormGradRowsWarpKernel<decltype(n)::value>(x.data(), g.data(), mean.data(), invstd.data(), dy.data(),
                                                          dx.data(), r, d);
        });
      });
  }
  if (!warp)
    emu::Launch({RowBlocks(r)}, {unsigned(RowThreads(d))}, [&] {
      LayerNormGradRowsKernel<T>(x.data(), g.data(), mean.data(), invstd.data(), dy.data(), dx.data(), r, d);
    });
  const int64_t chunks = (r + kLnRowChunk - 1) / kLnRowChunk;
  std::vector<double> pg(size_t(chunks * d), NAN), pb(size_t(chunks * d), NAN);
  emu::Launch({Blocks(chunks * d)}, {kThreads}, [&] {
    LayerNormGradColPartsKernel<T>(x.data(), mean.data(), invstd.data(), dy.data(), pg.data(), pb.data(), r, d, chunks);
  });
  emu::Launch({Blocks(d)}, {kThreads},
              [&] { LayerNormGradColSumsKernel<T>(pg.data(), pb.data(), dg.data(), db.data(), d, chunks); });
}

template <typename T>
void Check(int64_t r, int64_t d, double tol) {
  SCOPED_TRACE(std::string(sizeof(T) == 4 ? "float32" : "float64") + " rows " + std::to_string(r) + " d " +
               std::to_string(d));
  const Attrs attrs{{"eps", kEps}};
  const Shape sx{r, d}, sg{d}, sr{r};
  const auto x = Uniform<T>(size_t(r * d), 1, -2, 3), g = Uniform<T>(size_t(d), 2, 0.5, 1.5),
             b = Uniform<T>(size_t(d), 3, -1, 1), dy = Uniform<T>(size_t(r * d), 4, -1, 1);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> y(x.size(), nan), mean(size_t(r), nan), invstd(size_t(r), nan);
  Forward<T, T>(x, g, b, y.data(), mean, invstd, r, d, false);
  const std::vector<HostTensor> want = ref::LayerNorm(RefArgs{{Host(sx, x), Host(sg, g), Host(sg, b)}, attrs});
  ExpectNear(y, want[0], tol, "y");
  ExpectNear(mean, want[1], tol, "mean");
  ExpectNear(invstd, want[2], tol, "invstd");
  std::vector<T> dx(x.size(), nan), dg(size_t(d), nan), db(size_t(d), nan);
  Backward<T>(x, g, mean, invstd, dy, dx, dg, db, r, d);
  const std::vector<HostTensor> gw = ref::LayerNormGrad(
      RefArgs{{Host(sx, x), Host(sg, g), Host(sr, mean), Host(sr, invstd), Host(sx, dy)}, attrs});
  ExpectNear(dx, gw[0], tol, "dx");
  ExpectNear(dg, gw[1], tol, "dgamma");
  ExpectNear(db, gw[2], tol, "dbeta");
  if constexpr (std::is_same<T, float>::value) {
    std::vector<uint16_t> y16(x.size(), 0xffff);
    std::vector<T> m2(mean.size()), i2(invstd.size());
    Forward<T, uint16_t>(x, g, b, y16.data(), m2, i2, r, d, true);
    size_t off = 0;
    for (size_t i = 0; i < y.size(); ++i) off += y16[i] != FloatToBFloat16(y[i]);
    EXPECT_EQ(off, 0u) << "bfloat16 outputs that are not the float32 output's rounding";
  }
}

TEST(LayerNormKernels, WarpRowsBlockRowsAndChunkedColumnsMatchTheReference) {
  Check<float>(70, 40, 2e-6);    // 8 values a lane; two chunks of rows, the second short
  Check<float>(9, 300, 2e-6);    // 16
  Check<float>(5, 768, 2e-6);    // 24: GPT-2's width
  Check<float>(3, 1000, 2e-6);   // 32
  Check<float>(4, 1100, 2e-6);   // longer than a warp's: a block a row
  Check<double>(70, 40, 1e-12);  // float64: the block kernels
}

}  // namespace
}  // namespace test
}  // namespace loom
