// CUDA's linear_cross_entropy kernel over a chunk of logits (src/device/cuda/linear_ce_kernels.cuh:
// Note [Cross-entropy fused with the head's product], Note [A row of logits staged in shared
// memory]) run on the CPU by the emulator (Note [CUDA kernels emulated on the CPU]), staged in
// dynamic shared memory and not, as loss.cu launches it: each row's loss term and its logits'
// gradient (in place, or as bfloat16 bits) against float64, a chunk that starts past row 0, and
// a label outside the vocabulary recorded as the first error with the row's term and gradient NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "emu/cuda_emu.h"  // before the kernels' sources: its macros name CUDA's built-ins
#include "device/cuda/device_math.cuh"

namespace loom {
namespace cuda {
namespace {
#include "device/cuda/linear_ce_kernels.cuh"
}  // namespace
}  // namespace cuda

namespace test {
namespace {

using namespace cuda;  // the kernels, as loss.cu sees them

constexpr int64_t kV = 9000;  // past kMinStagedRow: GPT-2's rows are staged too
constexpr int64_t kRows = 5, kR0 = 2, kN = 12;

// loss.cu's LaunchLinearCeChunk, with the staging chosen here.
template <typename T, bool kStaged>
void Chunk(std::vector<T>& x, uint16_t* g16, const std::vector<int64_t>& lab, std::vector<double>& terms,
           KernelError& err) {
  const unsigned threads = kStaged ? unsigned(kStagedThreads) : unsigned(RowThreads(kV));
  emu::Launch(
      {RowBlocks(kRows)}, {threads},
      [&] {
        LinearCeChunkKernel<T, int64_t, kStaged>(x.data(), g16, kRows, kV, lab.data(), kR0, kN, true, terms.data(),
                                                 &err);
      },
      kStaged ? size_t(kV) * sizeof(T) : 0);
}

template <typename T, bool kStaged>
void Check(bool to_bf16) {
  SCOPED_TRACE(std::string(sizeof(T) == 4 ? "float32" : "float64") + (kStaged ? ", staged" : ", in place") +
               (to_bf16 ? ", bfloat16 gradient" : ""));
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-4, 4);
  std::vector<T> x(size_t(kRows * kV));
  for (T& v : x) v = T(u(rng));
  const std::vector<T> logits = x;
  // Chunk rows r0 + i; row 3's label is outside [0, V).
  const std::vector<int64_t> lab = {7, 7, 0, kV - 1, 17, kV, 4500};
  std::vector<double> terms(size_t(kN), 123.0);
  KernelError err{};
  std::vector<uint16_t> g16(to_bf16 ? x.size() : 0, 0xffff);
  Chunk<T, kStaged>(x, to_bf16 ? g16.data() : nullptr, lab, terms, err);
  EXPECT_EQ(err.code, kLabelOutOfRange);
  EXPECT_EQ(err.op, kOpLinearCrossEntropy);
  EXPECT_EQ(err.a, kR0 + 3);
  EXPECT_EQ(err.b, kV);
  EXPECT_EQ(terms[0], 123.0) << "a term before the chunk's rows was written";
  for (int64_t i = 0; i < kRows; ++i) {
    const T* row = logits.data() + i * kV;
    double mx = -INFINITY, sum = 0;
    for (int64_t c = 0; c < kV; ++c) mx = std::max(mx, double(row[c]));
    for (int64_t c = 0; c < kV; ++c) sum += std::exp(double(row[c]) - mx);
    const double lse = mx + std::log(sum);
    const int64_t l = lab[size_t(kR0 + i)];
    const bool bad = l == kV;
    const double term = terms[size_t(kR0 + i)];
    if (bad) {
      EXPECT_TRUE(std::isnan(term)) << "row " << i;
    } else {
      EXPECT_NEAR(term, -(double(row[l]) - lse), 1e-5) << "row " << i;
    }
    int reported = 0;
    for (int64_t c = 0; c < kV && reported < 3; ++c) {
      const double want = (std::exp(double(row[c]) - lse) - (c == l ? 1.0 : 0.0)) / double(kN);
      const size_t at = size_t(i * kV + c);
      const double got = to_bf16 ? double(BFloat16ToFloat(g16[at])) : double(x[at]);
      const bool ok = bad ? std::isnan(got) : std::abs(got - want) <= (to_bf16 ? 4e-3 : 1e-5) * std::abs(want) + 1e-9;
      if (!ok) ++reported, ADD_FAILURE() << "row " << i << " [" << c << "]: " << got << " against " << want;
    }
    if (to_bf16) {
      EXPECT_EQ(x[size_t(i * kV)], logits[size_t(i * kV)]) << "the logits were overwritten";
    }
  }
}

TEST(LinearCeKernels, StagedAndInPlaceRowsGiveTermsAndGradients) {
  Check<float, true>(false);
  Check<float, true>(true);
  Check<float, false>(false);
  Check<float, false>(true);
  Check<double, false>(false);
}

}  // namespace
}  // namespace test
}  // namespace loom
