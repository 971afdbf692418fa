// Helpers shared by the CPU kernels: dtype dispatch, parallel element loops, broadcasting.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/op.h"
#include "device/cpu/kernels/cast.h"
#include "device/cpu/parallel.h"
#include "device/kernel_dispatch.h"
#include "device/kernel_shapes.h"

namespace loom {
namespace cpu {

// Elements per task below which splitting across threads costs more than it saves.
constexpr int64_t kGrain = 32768;

// Calls f(T{}) with T = float or double for the tensor's dtype.
template <typename F>
void FloatDispatch(DType t, const char* op, F&& f) {
  DispatchFloat(t, op, "CPU", f);
}

// out[i] = f(x[i]) for contiguous tensors (y's element type Y is T's, or bool's for comparisons).
template <typename T, typename Y, typename F>
void UnaryLoop(const T* x, Y* y, int64_t n, F f) {
  ParallelFor(n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = f(x[i]);
  });
}

// The element-wise loops with a fused cast (Note [Casts fused into their producers] in
// graph/fuse_casts.cc) compute a tile of float32 results, then round it with the cast op's own
// conversion (CastFloat32To16, cast.h), so the 16-bit results hold the cast's bits.
constexpr int64_t kStoreTile = 256;

// out[i] = f(x[i]) rounded to t (bfloat16 or float16), for contiguous tensors.
template <typename F>
void UnaryLoopTo16(const float* x, uint16_t* y, DType t, int64_t n, F f) {
  ParallelFor(n, kGrain, [&](int64_t b, int64_t e) {
    float tile[kStoreTile];
    for (int64_t i = b; i < e; i += kStoreTile) {
      const int64_t m = std::min(kStoreTile, e - i);
      for (int64_t k = 0; k < m; ++k) tile[k] = f(x[i + k]);
      CastFloat32To16(tile, y + i, m, t);
    }
  });
}

// Note [What a kernel supports] for the producers that take a fused cast (elementwise.cc).
bool FusedCastSupportedCpu(const OpRecord& op);

// out[i] = f(a[i], b[i]) for contiguous tensors of the same shape.
template <typename T, typename Y, typename F>
void BinaryLoop(const T* a, const T* b, Y* y, int64_t n, F f) {
  ParallelFor(n, kGrain, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) y[i] = f(a[i], b[i]);
  });
}

// y = f(a, b) with numpy broadcasting: a, b contiguous, y contiguous of the broadcast shape.
// a and b hold T; y holds Y (T, or uint8_t for a comparison's bool: Note [Comparisons]).
template <typename T, typename Y = T, typename F>
void BroadcastBinary(const Tensor& ta, const Tensor& tb, const Tensor& ty, F f) {
  const T* a = ta.data<T>();
  const T* b = tb.data<T>();
  Y* y = ty.data<Y>();
  int64_t n = ty.numel();
  // An empty output, (3, 0) from (3, 0) and (1, 0): nothing to write, and its last dimension of 0
  // must not divide the row count below (SIGFPE).
  if (n == 0) return;
  if (ta.shape() == ty.shape() && tb.shape() == ty.shape()) return BinaryLoop(a, b, y, n, f);
  if (tb.numel() == 1 && ta.shape() == ty.shape()) {
    T s = b[0];
    return UnaryLoop(a, y, n, [&](T v) { return f(v, s); });
  }
  if (ta.numel() == 1 && tb.shape() == ty.shape()) {
    T s = a[0];
    return UnaryLoop(b, y, n, [&](T v) { return f(s, v); });
  }
  // Row broadcast: a is (..., N) full, b is (N) (bias-like), or the reverse.
  const Shape& os = ty.shape();
  int64_t inner = os.empty() ? 1 : os.back();
  if (ta.shape() == os && tb.numel() == inner && (tb.ndim() == 0 || tb.shape().back() == inner)) {
    ParallelFor(n / inner, std::max<int64_t>(1, kGrain / inner), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t j = 0; j < inner; ++j) y[r * inner + j] = f(a[r * inner + j], b[j]);
    });
    return;
  }
  // General case: walk the output with an odometer over the leading dimensions.
  std::vector<int64_t> sa = BroadcastStrides(ta.shape(), os), sb = BroadcastStrides(tb.shape(), os);
  int64_t rank = int64_t(os.size());
  int64_t rows = n / inner;
  int64_t ia_in = sa.back(), ib_in = sb.back();
  ParallelFor(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t oa, ob;
      BroadcastOffsets(os, rank - 1, sa, sb, r, oa, ob);
      Y* yr = y + r * inner;
      for (int64_t j = 0; j < inner; ++j) yr[j] = f(a[oa + j * ia_in], b[ob + j * ib_in]);
    }
  });
}

// 16 vectors of 16 32-bit lanes (float or int32, GCC vector extensions) transposed in registers:
// afterwards lane j of r[i] holds what lane i of r[j] held. Four rounds of interleaving r[i] with
// r[i + 8] (r[2i] takes the low halves, r[2i + 1] the high ones). The blocked-layout kernels use
// it to move a [pixel][channel] tile of nChw16c values to and from 16 NCHW runs.
template <typename V>
inline void Transpose16x16(V* r) {
  typedef int32_t I __attribute__((vector_size(64)));
  static_assert(sizeof(V) == sizeof(I), "16 lanes of 32 bits");
  const I lo = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};
  const I hi = {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  for (int round = 0; round < 4; ++round) {
    V t[16];
    for (int i = 0; i < 16; ++i) t[i] = __builtin_shuffle(r[i / 2], r[i / 2 + 8], i % 2 ? hi : lo);
    for (int i = 0; i < 16; ++i) r[i] = t[i];
  }
}

// Memory for the duration of one kernel call: the arena bytes a planned graph reserved for it
// (Note [Planned scratch]), or device memory given back even when the kernel throws.
class Scratch {
 public:
  Scratch(const KernelContext& ctx, size_t bytes)
      : d_(ctx.device),
        owned_(bytes && !(ctx.scratch && ctx.scratch_bytes >= bytes)),
        p_(!bytes ? nullptr : owned_ ? d_->Malloc(bytes) : ctx.scratch) {}
  ~Scratch() {
    if (owned_) d_->Free(p_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T> T* as() const { return static_cast<T*>(p_); }

 private:
  Device* d_;
  bool owned_;
  void* p_;
};

}  // namespace cpu
}  // namespace loom
