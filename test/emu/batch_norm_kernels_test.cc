// CUDA's training batch norm (src/device/cuda/batch_norm_kernels.cuh: Note [Batch norm in any
// layout], Note [Batch norm statistics in one read], Note [Batch norm with its ReLU]) run on the
// CPU by the emulator (Note [CUDA kernels emulated on the CPU]), launched as cnn.cu launches it:
// the forward and the gradient against the op table's float64 references in NCHW; the same bits
// with any operand NHWC (the general apply kernel and the same-layout one); the fused residual
// and ReLU; a bfloat16 x giving the bits of its float32 copy.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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
#include "device/cuda/batch_norm_kernels.cuh"
}  // namespace
}  // namespace cuda

namespace test {
namespace {

using namespace cuda;  // the kernels, as cnn.cu sees them

constexpr double kEps = 1e-5, kMomentum = 0.1;
const float kNaN = std::numeric_limits<float>::quiet_NaN();


// An (n, c, s) tensor from NCHW to NHWC, or (to_nhwc false) back.
std::vector<float> Relayout(const std::vector<float>& v, int64_t n, int64_t c, int64_t s, bool to_nhwc) {
  std::vector<float> o(v.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t k = 0; k < s; ++k) {
        const size_t nchw = size_t((i * c + ch) * s + k), nhwc = size_t((i * s + k) * c + ch);
        o[to_nhwc ? nhwc : nchw] = v[to_nhwc ? nchw : nhwc];
      }
  return o;
}
std::vector<float> ToNhwc(const std::vector<float>& v, int64_t n, int64_t c, int64_t s) { return Relayout(v, n, c, s, true); }
std::vector<float> ToNchw(const std::vector<float>& v, int64_t n, int64_t c, int64_t s) { return Relayout(v, n, c, s, false); }

// cnn.cu's LaunchBnApply.
template <typename U, typename V>
void Apply(const U* u, BnLayout ul, const V* v, BnLayout vl, const float* p, const float* q, const float* r, float* out,
           BnLayout ol, const BnDims& d, const float* residual, bool relu) {
  const int64_t total = d.m * d.c;
  if (BnSameLayout(ul, v != nullptr, vl, ol, total))
    emu::Launch({Blocks(total)}, {kThreads}, [&] {
      BnApplySameLayoutKernel<float, U, V>(u, v, p, q, r, out, uint32_t(total), uint32_t(d.c), uint32_t(d.s), ol.nhwc,
                                           residual, relu);
    });
  else
    emu::Launch({Blocks(total)}, {kThreads},
                [&] { BnApplyKernel<float, U, V>(u, ul, v, vl, p, q, r, out, ol, d.n, residual, relu); });
}

struct Train {
  std::vector<float> y, mean, invstd, rmean, rvar;
};
// cnn.cu's BatchNormTrainTyped: x in xl's layout, y in yl's, the residual in y's.
template <typename X>
Train Forward(const std::vector<X>& x, bool x_nhwc, bool y_nhwc, const Shape& shape, const std::vector<float>& gamma,
              const std::vector<float>& beta, const std::vector<float>& residual, bool relu) {
  const BnDims d = MakeBnDims(shape);
  const BnLayout xl{d.c, d.s, x_nhwc}, yl{d.c, d.s, y_nhwc};
  Train t{std::vector<float>(x.size(), kNaN), std::vector<float>(size_t(d.c), kNaN),
          std::vector<float>(size_t(d.c), kNaN), std::vector<float>(size_t(d.c), 0.5f),
          std::vector<float>(size_t(d.c), 2.f)};
  std::vector<double> partial(size_t(2 * d.c * d.chunks), NAN);
  std::vector<float> scale(size_t(d.c), kNaN), shift(size_t(d.c), kNaN);
  emu::Launch({Blocks(d.c * d.chunks)}, {kThreads}, [&] { BnStatsPartialsKernel<X>(x.data(), xl, d, partial.data()); });
  emu::Launch({RowBlocks(d.c)}, {unsigned(RowThreads(d.chunks))}, [&] {
    BnFinishKernel<float>(partial.data(), gamma.data(), beta.data(), kMomentum, kEps, d, t.mean.data(),
                          t.invstd.data(), t.rmean.data(), t.rvar.data(), scale.data(), shift.data());
  });
  Apply<X, float>(x.data(), xl, nullptr, xl, scale.data(), shift.data(), nullptr, t.y.data(), yl, d,
                  residual.empty() ? nullptr : residual.data(), relu);
  return t;
}

struct Grad {
  std::vector<float> dx, dgamma, dbeta;
};
// cnn.cu's BatchNormGradTyped (training).
Grad Backward(const std::vector<float>& x, bool x_nhwc, const std::vector<float>& dy, bool dy_nhwc, bool dx_nhwc,
              const Shape& shape, const std::vector<float>& gamma, const std::vector<float>& mean,
              const std::vector<float>& invstd) {
  const BnDims d = MakeBnDims(shape);
  const BnLayout xl{d.c, d.s, x_nhwc}, gl{d.c, d.s, dy_nhwc}, dl{d.c, d.s, dx_nhwc};
  Grad g{std::vector<float>(x.size(), kNaN), std::vector<float>(size_t(d.c), kNaN),
         std::vector<float>(size_t(d.c), kNaN)};
  std::vector<double> partial(size_t(2 * d.c * d.chunks), NAN);
  std::vector<float> a(size_t(d.c), kNaN), k_x(size_t(d.c), kNaN), b(size_t(d.c), kNaN);
  emu::Launch({Blocks(d.c * d.chunks)}, {kThreads}, [&] {
    BnGradPartialsKernel<float, float>(x.data(), xl, dy.data(), gl, mean.data(), d, partial.data());
  });
  emu::Launch({RowBlocks(d.c)}, {unsigned(RowThreads(d.chunks))}, [&] {
    BnGradFinishKernel<float>(partial.data(), gamma.data(), mean.data(), invstd.data(), d, g.dgamma.data(),
                              g.dbeta.data(), a.data(), k_x.data(), b.data());
  });
  Apply<float, float>(dy.data(), gl, x.data(), xl, a.data(), b.data(), k_x.data(), g.dx.data(), dl, d, nullptr, false);
  return g;
}

void Check(const Shape& shape) {
  SCOPED_TRACE("x " + std::to_string(shape[0]) + "x" + std::to_string(shape[1]) + "x" + std::to_string(shape[2]) +
               "x" + std::to_string(shape[3]));
  const int64_t n = shape[0], c = shape[1], s = shape[2] * shape[3];
  const size_t count = size_t(n * c * s);
  const auto x = Uniform<float>(count, 1, -2, 3), dy = Uniform<float>(count, 2, -1, 1), res = Uniform<float>(count, 3, -1, 1);
  const auto gamma = Uniform<float>(size_t(c), 4, 0.5, 1.5), beta = Uniform<float>(size_t(c), 5, -1, 1);
  const Shape sc{c};
  const Attrs attrs{{"eps", kEps}, {"momentum", kMomentum}, {"relu", int64_t(1)}, {"training", int64_t(1)}};

  // NCHW against the references: the plain forward, then with the residual and ReLU.
  const Train f = Forward(x, false, false, shape, gamma, beta, {}, false);
  const std::vector<HostTensor> in = {Host(shape, x), Host(sc, gamma), Host(sc, beta),
                                      Host(sc, std::vector<float>(size_t(c), 0.5f)),
                                      Host(sc, std::vector<float>(size_t(c), 2.f))};
  const Attrs plain{{"eps", kEps}, {"momentum", kMomentum}};
  const std::vector<HostTensor> want = ref::BatchNormTrain(RefArgs{in, plain});
  ExpectNear(f.y, want[0], 2e-6, "y");
  ExpectNear(f.mean, want[1], 1e-6, "mean");
  ExpectNear(f.invstd, want[2], 1e-6, "invstd");
  ExpectNear(f.rmean, want[3], 1e-6, "running mean");
  ExpectNear(f.rvar, want[4], 1e-6, "running variance");
  const Train fr = Forward(x, false, false, shape, gamma, beta, res, true);
  std::vector<HostTensor> in_r = in;
  in_r.push_back(Host(shape, res));
  ExpectNear(fr.y, ref::BatchNormTrain(RefArgs{in_r, attrs})[0], 2e-6, "y with the residual and ReLU");

  // Any layout: the same bits.
  for (const bool xn : {false, true})
    for (const bool yn : {false, true}) {
      SCOPED_TRACE(std::string("x ") + (xn ? "NHWC" : "NCHW") + ", y " + (yn ? "NHWC" : "NCHW"));
      const Train g = Forward(xn ? ToNhwc(x, n, c, s) : x, xn, yn, shape, gamma, beta, yn ? ToNhwc(res, n, c, s) : res,
                              true);
      EXPECT_TRUE(SameBits(yn ? ToNchw(g.y, n, c, s) : g.y, fr.y)) << "y";
      EXPECT_TRUE(SameBits(g.mean, fr.mean) && SameBits(g.invstd, fr.invstd) && SameBits(g.rvar, fr.rvar))
          << "statistics";
    }

  // A bfloat16 x: the bits of its float32 copy.
  std::vector<uint16_t> x16(count);
  std::vector<float> widened(count);
  for (size_t i = 0; i < count; ++i) widened[i] = BFloat16ToFloat(x16[i] = FloatToBFloat16(x[i]));
  const Train h = Forward(x16, false, true, shape, gamma, beta, {}, false);
  const Train w = Forward(widened, false, true, shape, gamma, beta, {}, false);
  EXPECT_TRUE(SameBits(h.y, w.y) && SameBits(h.mean, w.mean) && SameBits(h.invstd, w.invstd)) << "bfloat16 x";

  // The gradient, against the reference, then in every layout with the same bits.
  const Grad gd = Backward(x, false, dy, false, false, shape, gamma, f.mean, f.invstd);
  const std::vector<HostTensor> gw = ref::BatchNormGrad(
      RefArgs{{Host(shape, x), Host(sc, gamma), Host(sc, f.mean), Host(sc, f.invstd), Host(shape, dy)}, attrs});
  ExpectNear(gd.dx, gw[0], 2e-5, "dx");
  ExpectNear(gd.dgamma, gw[1], 2e-5, "dgamma");
  ExpectNear(gd.dbeta, gw[2], 2e-5, "dbeta");
  for (const bool xn : {false, true})
    for (const bool gn : {false, true}) {
      SCOPED_TRACE(std::string("x ") + (xn ? "NHWC" : "NCHW") + ", dy and dx " + (gn ? "NHWC" : "NCHW"));
      const Grad g = Backward(xn ? ToNhwc(x, n, c, s) : x, xn, gn ? ToNhwc(dy, n, c, s) : dy, gn, gn, shape, gamma,
                              f.mean, f.invstd);
      EXPECT_TRUE(SameBits(gn ? ToNchw(g.dx, n, c, s) : g.dx, gd.dx)) << "dx";
      EXPECT_TRUE(SameBits(g.dgamma, gd.dgamma) && SameBits(g.dbeta, gd.dbeta)) << "dgamma, dbeta";
    }
}

TEST(BatchNormKernels, TrainingAndItsGradientInEitherLayoutMatchTheReference) {
  Check({2, 3, 5, 7});    // 70 values a channel: chunks of 8, the last of 6
  Check({4, 5, 16, 16});  // 1,024 values a channel in 128 chunks: a block of 128 threads adds them
}

}  // namespace
}  // namespace test
}  // namespace loom
