// The tiled float32 attention kernels (Note [Attention in tiles on CUDA]), run on the CPU by the
// emulator (Note [CUDA kernels emulated on the CPU]) against the op table's float64 references:
// forward, dq and dk/dv, plain operands and the packed qkv, causal and not, Tq != Tk, heads of
// 2 to 64 columns, rows that end inside a tile. Every output element is checked, so one the
// kernels leave unwritten (NaN beforehand) fails. The GPU runs the same source (test_cuda's op
// table); this is what CPU CI can check of it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/op_refs.h"
#include "emu/emu_checks.h"
#include "core/attrs.h"
#include "device/kernel_shapes.h"
#include "emu/cuda_emu.h"  // before the kernels' sources: its macros name CUDA's built-ins
#include "device/cuda/device_math.cuh"

namespace loom {
namespace cuda {
namespace {
#include "device/cuda/attention_tiles.cuh"
}  // namespace
}  // namespace cuda

namespace test {
namespace {

using namespace cuda;  // the kernels, as attention.cu sees them

void Forward(const AttentionDims& g, const float* q, const float* k, const float* v, std::vector<float>& y,
             std::vector<float>& lse) {
  emu::Launch({TileGrid(g.bh, g.tq)}, {32 * kWarps}, [&] { AttentionTiledKernel(g, q, k, v, y.data(), lse.data()); });
}
void Backward(const AttentionDims& g, const float* q, const float* k, const float* v, const std::vector<float>& y,
              const std::vector<float>& lse, const std::vector<float>& dy, const std::vector<float>& dlse, float* dq,
              float* dk, float* dv) {
  std::vector<float> drow(size_t(g.bh * g.tq));
  emu::Launch({TileGrid(g.bh, g.tq)}, {32 * kWarps}, [&] {
    AttentionTiledDqKernel(g, q, k, v, y.data(), lse.data(), dy.data(), dlse.data(), dq, drow.data());
  });
  emu::Launch({TileGrid(g.bh, g.tk)}, {32 * kWarps},
              [&] { AttentionTiledDkvKernel(g, q, k, v, lse.data(), dy.data(), drow.data(), dk, dv); });
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// q (bh, tq, d), k (bh, tk, d), v (bh, tk, dv)
void CheckPlain(int64_t bh, int64_t tq, int64_t tk, int64_t d, int64_t dv, int64_t causal, double scale) {
  const std::string name = "bh " + std::to_string(bh) + " tq " + std::to_string(tq) + " tk " + std::to_string(tk) +
                           " d " + std::to_string(d) + " dv " + std::to_string(dv) + " causal " +
                           std::to_string(causal);
  SCOPED_TRACE(name);
  const Attrs attrs{{"causal", causal}, {"scale", scale}};
  const Shape sq{bh, tq, d}, sk{bh, tk, d}, sv{bh, tk, dv}, sy{bh, tq, dv}, sl{bh, tq};
  const AttentionDims g = MakeAttentionDims(attrs, sq, sv);
  ASSERT_TRUE(TiledAttentionTakes(g));
  const auto q = Uniform<float>(size_t(NumElements(sq)), 1, -2, 2), k = Uniform<float>(size_t(NumElements(sk)), 2, -2, 2),
             v = Uniform<float>(size_t(NumElements(sv)), 3, -1, 1), dy = Uniform<float>(size_t(NumElements(sy)), 4, -1, 1),
             dlse = Uniform<float>(size_t(NumElements(sl)), 5, -0.5, 0.5);
  std::vector<float> y(size_t(NumElements(sy)), kNaN), lse(size_t(NumElements(sl)), kNaN);
  Forward(g, q.data(), k.data(), v.data(), y, lse);
  const std::vector<HostTensor> in = {Host(sq, q), Host(sk, k), Host(sv, v)};
  const std::vector<HostTensor> want = ref::Attention(RefArgs{in, attrs});
  ExpectNear(y, want[0], 1e-5, "y");
  ExpectNear(lse, want[1], 1e-5, "lse");
  std::vector<float> dq(q.size(), kNaN), dk(k.size(), kNaN), dv(v.size(), kNaN);
  Backward(g, q.data(), k.data(), v.data(), y, lse, dy, dlse, dq.data(), dk.data(), dv.data());
  const std::vector<HostTensor> gin = {in[0], in[1], in[2], Host(sy, y), Host(sl, lse), Host(sy, dy), Host(sl, dlse)};
  const std::vector<HostTensor> gwant = ref::AttentionGrad(RefArgs{gin, attrs});
  ExpectNear(dq, gwant[0], 1e-5, "dq");
  ExpectNear(dk, gwant[1], 1e-5, "dk");
  ExpectNear(dv, gwant[2], 1e-5, "dv");
}

// qkv (b, t, 3 dim) with heads: q, k and v are the thirds of each row, as attention_qkv runs them.
void CheckPacked(int64_t b, int64_t t, int64_t dim, int64_t heads, int64_t causal) {
  SCOPED_TRACE("packed b " + std::to_string(b) + " t " + std::to_string(t) + " dim " + std::to_string(dim) +
               " heads " + std::to_string(heads) + " causal " + std::to_string(causal));
  const Attrs attrs{{"heads", heads}, {"causal", causal}, {"scale", 0.0}};
  const Shape sqkv{b, t, 3 * dim}, sy{b, t, dim}, sl{b * heads, t};
  const AttentionDims g = MakeAttentionQkvDims(attrs, sqkv);
  ASSERT_TRUE(TiledAttentionTakes(g));
  const auto qkv = Uniform<float>(size_t(NumElements(sqkv)), 6, -2, 2), dy = Uniform<float>(size_t(NumElements(sy)), 7, -1, 1),
             dlse = Uniform<float>(size_t(NumElements(sl)), 8, -0.5, 0.5);
  std::vector<float> y(size_t(NumElements(sy)), kNaN), lse(size_t(NumElements(sl)), kNaN);
  const float* p = qkv.data();
  Forward(g, p, p + dim, p + 2 * dim, y, lse);
  const std::vector<HostTensor> in = {Host(sqkv, qkv)};
  const std::vector<HostTensor> want = ref::AttentionQkv(RefArgs{in, attrs});
  ExpectNear(y, want[0], 1e-5, "y");
  ExpectNear(lse, want[1], 1e-5, "lse");
  std::vector<float> d(qkv.size(), kNaN);
  Backward(g, p, p + dim, p + 2 * dim, y, lse, dy, dlse, d.data(), d.data() + dim, d.data() + 2 * dim);
  const std::vector<HostTensor> gin = {in[0], Host(sy, y), Host(sl, lse), Host(sy, dy), Host(sl, dlse)};
  ExpectNear(d, ref::AttentionQkvGrad(RefArgs{gin, attrs})[0], 1e-5, "dqkv");
}

TEST(AttentionTiles, PlainOperandsMatchTheReference) {
  CheckPlain(2, 70, 70, 3, 2, 1, 0);     // three tiles of rows, the last of 6; narrow heads
  CheckPlain(1, 40, 75, 40, 24, 0, 0.3);  // more keys than queries, Dv != D, an explicit scale
  CheckPlain(1, 40, 75, 40, 24, 1, 0);
  CheckPlain(1, 75, 40, 33, 64, 1, 0);  // more queries than keys, causal: some key rows unseen
  CheckPlain(3, 1, 1, 64, 1, 0, 0);     // one query and one key a problem
}

TEST(AttentionTiles, PackedQkvMatchesTheReference) {
  CheckPacked(1, 70, 128, 2, 1);  // GPT-2's head width, 64
  CheckPacked(2, 33, 12, 4, 0);
}

// The emulator itself: a warp's shuffles, and a divergent barrier reported, not hung.
TEST(CudaEmulator, WarpSumsAndBlockBarriers) {
  std::vector<float> out(64, kNaN);
  __shared__ float staged[64];
  emu::Launch({2}, {64}, [&] {
    staged[threadIdx.x] = float(blockIdx.x * 64 + threadIdx.x);
    __syncthreads();
    const float mine = staged[63 - threadIdx.x];  // another warp's value: needs the barrier
    const float sum = WarpAllSum(mine);
    if (blockIdx.x == 1) out[threadIdx.x] = sum;
  });
  // block 1, threads 0-31 read 127..96 (sum 3568), threads 32-63 read 95..64 (sum 2544)
  for (int t = 0; t < 64; ++t) EXPECT_EQ(out[size_t(t)], t < 32 ? 3568.f : 2544.f) << t;
  try {
    emu::Launch({1}, {64}, [&] {
      if (threadIdx.x < 40)
        __syncthreads();
      else
        __syncwarp();  // lanes 40-63 at their warp's barrier, 32-39 of the same warp at the block's
    });
    ADD_FAILURE() << "threads waiting at different barriers were not reported";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("wait at different barriers"), std::string::npos) << e.what();
  }
  EXPECT_THROW(emu::Launch({0}, {32}, [] {}), std::runtime_error);
  EXPECT_THROW(emu::Launch({1}, {2048}, [] {}), std::runtime_error);
  EXPECT_THROW(emu::Launch({1}, {32}, [] {}, size_t(300) << 10), std::runtime_error);  // over 227 KB
}

// Lanes by the linear thread index; NaN bits from a lane that returned, and in fresh dynamic
// shared memory; a read that needs a barrier it lacks gives another answer in reverse order.
TEST(CudaEmulator, LanesPoisonAndOrder) {
  std::vector<float> got(32, 0.f);
  emu::Launch({1}, {16, 2}, [&] {  // lanes 0-15 at y = 0, 16-31 at y = 1
    const int linear = int(threadIdx.y * 16 + threadIdx.x);
    got[size_t(linear)] = __shfl_xor_sync(0xffffffffu, float(linear), 16);
  });
  for (int l = 0; l < 32; ++l) EXPECT_EQ(got[size_t(l)], float(l ^ 16)) << l;
  float from_gone = 0, fresh = 0;
  emu::Launch({1}, {32}, [&] {
    if (threadIdx.x >= 16) return;
    const float v = __shfl_down_sync(0x0000ffffu, 1.f, 16);  // lanes 16-31 have returned
    if (threadIdx.x == 0) from_gone = v;
  });
  EXPECT_TRUE(std::isnan(from_gone));
  emu::Launch(
      {1}, {32},
      [&] {
        LOOM_DYNAMIC_SHARED(bytes);
        if (threadIdx.x == 0) fresh = reinterpret_cast<float*>(bytes)[3];
      },
      64);
  EXPECT_TRUE(std::isnan(fresh));
  auto racy = [] {  // thread 40 reads what thread 8 writes, with no barrier between them
    float seen = -1;
    emu::Launch({1}, {64}, [&] {
      __shared__ float s[64];
      if (threadIdx.x == 8) s[8] = 8.f;
      if (threadIdx.x == 40) seen = s[8];
      __syncthreads();
      s[threadIdx.x] = 0.f;
    });
    return seen;
  };
  const bool was = emu::SetReverseOrder(false);
  const float forward = racy();
  emu::SetReverseOrder(true);
  const float reverse = racy();
  emu::SetReverseOrder(was);
  EXPECT_EQ(forward, 8.f);
  EXPECT_EQ(reverse, 0.f) << "the race is not visible in reverse order";
}

}  // namespace
}  // namespace test
}  // namespace loom
