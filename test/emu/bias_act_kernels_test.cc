// CUDA's bias_act_grad (src/device/cuda/bias_act_kernels.cuh) run on the CPU by the emulator
// (Note [CUDA kernels emulated on the CPU]), launched as bias_act.cu launches it: dz is each
// activation's gradient formula (core/bias_act_formulas.h) from y or from y's bfloat16 copy, and
// db is bit for bit what bias_grad's column kernel (column_sums.cuh) sums from that dz, by one
// slab and by several: the fused dense layer's gradient equals the unfused ops'.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/bias_act_formulas.h"
#include "core/half.h"
#include "device/kernel_shapes.h"
#include "emu/cuda_emu.h"  // before the kernels' sources: its macros name CUDA's built-ins
#include "device/cuda/device_math.cuh"

namespace loom {
namespace cuda {
namespace {
#include "device/cuda/column_sums.cuh"
#include "device/cuda/bias_act_kernels.cuh"
}  // namespace
}  // namespace cuda

namespace test {
namespace {

using namespace cuda;  // the kernels, as bias_act.cu and reduce.cu see them

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// bias_act.cu's BiasActGradCuda (not per channel).
template <typename Y, BiasAct A>
void BiasActGrad(Y y, const std::vector<float>& dy, std::vector<float>& dz, std::vector<float>& db, int64_t r,
                 int64_t n) {
  const ColumnLaunch cl = ColumnLaunchOf(ReduceDims{1, r, n});
  std::vector<double> part(size_t(cl.slabs.slabs * n), NAN);
  double* p = cl.slabs.slabs > 1 ? part.data() : nullptr;
  emu::Launch({cl.cols, unsigned(cl.slabs.slabs)}, {kColX, kColY}, [&] {
    BiasActGradKernel<float, Y, A>(y, dy.data(), dz.data(), db.data(), p, r, n, cl.slabs.rows);
  });
  if (p)
    emu::Launch({Blocks(n)}, {kThreads},
                [&] { ColumnSlabsTotalKernel<double, float>(part.data(), db.data(), cl.slabs.slabs, n); });
}

// reduce.cu's Reduce for bias_grad: the column kernel over (1, r, n).
std::vector<float> BiasGrad(const std::vector<float>& dz, int64_t r, int64_t n) {
  const ReduceDims d{1, r, n};
  const ColumnLaunch cl = ColumnLaunchOf(d);
  std::vector<float> db(size_t(n), kNaN);
  std::vector<double> part(size_t(cl.slabs.slabs * n), NAN);
  double* p = cl.slabs.slabs > 1 ? part.data() : nullptr;
  emu::Launch({cl.cols, cl.outer, unsigned(cl.slabs.slabs)}, {kColX, kColY}, [&] {
    ColReduceKernel<float, false, float>(dz.data(), db.data(), p, 1, r, n, cl.slabs.rows, nullptr, false);
  });
  if (p)
    emu::Launch({Blocks(n)}, {kThreads},
                [&] { ColumnSlabsTotalKernel<double, float>(part.data(), db.data(), cl.slabs.slabs, n); });
  return db;
}

template <BiasAct A>
void Check(int64_t r, int64_t n, bool bf16_y) {
  SCOPED_TRACE("act " + std::to_string(int(A)) + " r " + std::to_string(r) + " n " + std::to_string(n) +
               (bf16_y ? ", y's bfloat16 copy" : ""));
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> z(size_t(r * n)), dy(z.size()), y(z.size());
  for (float& v : z) v = u(rng);
  for (float& v : dy) v = u(rng);
  for (size_t i = 0; i < z.size(); ++i) y[i] = ew::ApplyAct(A, z[i]);
  std::vector<uint16_t> y16(y.size());
  for (size_t i = 0; i < y.size(); ++i) y16[i] = FloatToBFloat16(y[i]);
  std::vector<float> dz(z.size(), kNaN), db(size_t(n), kNaN);
  if (bf16_y) BiasActGrad<SavedBFloat16, A>(SavedBFloat16{y16.data()}, dy, dz, db, r, n);
  else BiasActGrad<const float*, A>(y.data(), dy, dz, db, r, n);
  size_t off = 0;
  for (size_t i = 0; i < dz.size(); ++i) {
    const float want = ew::ActGradFromOutput(A, bf16_y ? BFloat16ToFloat(y16[i]) : y[i], dy[i]);
    off += std::memcmp(&dz[i], &want, sizeof want) != 0;
  }
  EXPECT_EQ(off, 0u) << "dz elements that are not the formula's";
  const std::vector<float> want = BiasGrad(dz, r, n);
  EXPECT_EQ(std::memcmp(db.data(), want.data(), db.size() * sizeof(float)), 0) << "db is not bias_grad's of dz";
  EXPECT_FALSE(std::isnan(db[0]));
}

TEST(BiasActKernels, GradientsAreTheFormulasAndDbIsBiasGradsBits) {
  EXPECT_GT(ColumnLaunchOf(ReduceDims{1, 2048, 40}).slabs.slabs, 1);
  for (const bool bf16 : {false, true}) {
    Check<BiasAct::kRelu>(2048, 40, bf16);  // several slabs
    Check<BiasAct::kTanh>(2048, 40, bf16);
    Check<BiasAct::kSigmoid>(50, 70, bf16);  // one
    Check<BiasAct::kNone>(50, 70, bf16);
  }
}

}  // namespace
}  // namespace test
}  // namespace loom
