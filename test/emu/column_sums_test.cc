// CUDA's column reductions (src/device/cuda/column_sums.cuh: sum, max and bias_grad over R of
// (outer, R, inner); Note [Column sums by slabs]) run on the CPU by the emulator (Note [CUDA
// kernels emulated on the CPU]), launched as reduce.cu launches them: one slab and several,
// columns that end inside a block, outer rows beyond one, a bfloat16 input (bias_grad of a
// bfloat16 dy) and the 16-bit copy a bias_grad writes as it reads (Note [Casts fused into their
// producers]). Sums are checked against float64 sums of the same values, the copy bit for bit
// against the cast's rounding, and every output must be written.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/half.h"
#include "device/kernel_shapes.h"
#include "emu/emu_checks.h"
#include "emu/cuda_emu.h"  // before the kernels' sources: its macros name CUDA's built-ins
#include "device/cuda/device_math.cuh"

namespace loom {
namespace cuda {
namespace {
#include "device/cuda/column_sums.cuh"
}  // namespace
}  // namespace cuda

namespace test {
namespace {

using namespace cuda;  // the kernels, as reduce.cu sees them

// reduce.cu's Reduce for the column kernel: x (outer, R, inner) -> y (outer, inner).
template <typename T, bool kMax, typename In>
void ColumnReduce(const std::vector<In>& x, std::vector<T>& y, const ReduceDims& d, uint16_t* copy = nullptr,
                  bool copy_bf16 = false) {
  using Acc = typename std::conditional<kMax, T, double>::type;
  const ColumnLaunch cl = ColumnLaunchOf(d);
  const emu::Dim3 grid{cl.cols, cl.outer, unsigned(cl.slabs.slabs)}, block{kColX, kColY};
  if (cl.slabs.slabs == 1) {
    emu::Launch(grid, block, [&] {
      ColReduceKernel<T, kMax, In>(x.data(), y.data(), nullptr, d.outer, d.r, d.inner, cl.slabs.rows, copy, copy_bf16);
    });
    return;
  }
  const int64_t count = d.outer * d.inner;
  std::vector<Acc> part(size_t(cl.slabs.slabs * count), std::numeric_limits<Acc>::quiet_NaN());
  emu::Launch(grid, block, [&] {
    ColReduceKernel<T, kMax, In>(x.data(), y.data(), part.data(), d.outer, d.r, d.inner, cl.slabs.rows, copy,
                                 copy_bf16);
  });
  emu::Launch({unsigned((count + 255) / 256)}, {256},
              [&] { ColumnSlabsTotalKernel<Acc, T, kMax>(part.data(), y.data(), cl.slabs.slabs, count); });
}


// Each column's float64 sum (or maximum) of the values as the kernel reads them.
std::vector<double> Want(const std::vector<double>& x, const ReduceDims& d, bool max) {
  std::vector<double> y(size_t(d.outer * d.inner));
  for (int64_t o = 0; o < d.outer; ++o)
    for (int64_t i = 0; i < d.inner; ++i) {
      double a = max ? -INFINITY : 0;
      for (int64_t k = 0; k < d.r; ++k) {
        const double v = x[size_t((o * d.r + k) * d.inner + i)];
        a = max ? std::max(a, v) : a + v;
      }
      y[size_t(o * d.inner + i)] = a;
    }
  return y;
}


TEST(ColumnSums, SumsAndMaximaByOneSlabAndSeveral) {
  for (const ReduceDims d : {ReduceDims{1, 2048, 40}, ReduceDims{1, 100, 70}, ReduceDims{3, 700, 33},
                             ReduceDims{2, 5000, 1}}) {
    SCOPED_TRACE("outer " + std::to_string(d.outer) + " r " + std::to_string(d.r) + " inner " + std::to_string(d.inner));
    const auto x = Uniform<float>(size_t(d.outer * d.r * d.inner), 1, -1, 1);
    const std::vector<double> xd(x.begin(), x.end());
    if (d.r >= 512) {
      EXPECT_GT(ColumnLaunchOf(d).slabs.slabs, 1) << "this shape should take several slabs";
    }
    std::vector<float> y(size_t(d.outer * d.inner), std::numeric_limits<float>::quiet_NaN());
    ColumnReduce<float, false>(x, y, d);
    ExpectNear(y, Want(xd, d, false), 1e-6, "y");  // a float64 sum rounded once to float32
    std::vector<float> m(y.size(), std::numeric_limits<float>::quiet_NaN());
    ColumnReduce<float, true>(x, m, d);
    ExpectNear(m, Want(xd, d, true), 0, "m");
    std::vector<double> y64(y.size(), std::numeric_limits<double>::quiet_NaN());
    ColumnReduce<double, false>(xd, y64, d);
    ExpectNear(y64, Want(xd, d, false), 1e-12, "y64");
  }
}

// bias_grad: a bfloat16 dy summed as its float32 copies; a float32 dy's 16-bit copy written.
TEST(ColumnSums, BiasGradOfBfloat16AndItsCopy) {
  for (const ReduceDims d : {ReduceDims{1, 2048, 40}, ReduceDims{1, 90, 3}}) {
    SCOPED_TRACE("r " + std::to_string(d.r) + " n " + std::to_string(d.inner));
    const auto x = Uniform<float>(size_t(d.r * d.inner), 2, -1, 1);
    std::vector<uint16_t> bits(x.size());
    std::vector<double> widened(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      bits[i] = FloatToBFloat16(x[i]);
      widened[i] = BFloat16ToFloat(bits[i]);
    }
    std::vector<float> y(size_t(d.inner), std::numeric_limits<float>::quiet_NaN());
    ColumnReduce<float, false>(bits, y, d);
    ExpectNear(y, Want(widened, d, false), 1e-6, "y");
    for (const bool bf16 : {true, false}) {
      std::vector<uint16_t> copy(x.size(), 0xffff);
      std::vector<float> s(size_t(d.inner), std::numeric_limits<float>::quiet_NaN());
      ColumnReduce<float, false>(x, s, d, copy.data(), bf16);
      ExpectNear(s, Want(std::vector<double>(x.begin(), x.end()), d, false), 1e-6, "s");
      size_t off = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const float f = RoundToOddFloat(double(x[i]));
        off += copy[i] != (bf16 ? FloatToBFloat16(f) : FloatToHalf(f));
      }
      EXPECT_EQ(off, 0u) << (bf16 ? "bfloat16" : "float16") << " copy: elements not the cast's rounding";
    }
  }
}

}  // namespace
}  // namespace test
}  // namespace loom
