// CPU kernels for the shape ops that copy: concat, slice (and its gradient), broadcast_to.
// They move bytes, so one kernel serves every dtype. reshape, transpose and permute are views
// and have no kernel.
#include <algorithm>
#include <cstring>

#include "device/cpu/kernels/common.h"

namespace loom {
namespace cpu {
namespace {

// Rows per task so that a task moves about kGrain elements.
int64_t RowGrain(int64_t row) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(row, 1)); }

// xs[k]: (A..., n_k, B...) -> y: (A..., sum n_k, B...)
void ConcatCpu(const OpRecord& op, const KernelContext&) {
  const Tensor& y = op.outputs[0];
  if (y.numel() == 0) return;
  const int64_t axis = NormalizeAxis(op.attrs.Int("axis"), y.ndim(), "concat");
  const AxisSplit sy = SplitAt(y.shape(), axis, "concat");
  const int64_t es = int64_t(SizeOf(y.dtype()));
  const int64_t yrow = sy.n * sy.inner;  // elements of y per outer index
  char* d = static_cast<char*>(y.raw_data());
  ParallelFor(sy.outer, RowGrain(yrow), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      int64_t off = 0;
      for (const Tensor& x : op.inputs) {
        int64_t row = x.shape()[size_t(axis)] * sy.inner;
        if (row) std::memcpy(d + (o * yrow + off) * es, static_cast<const char*>(x.raw_data()) + o * row * es,
                             size_t(row * es));
        off += row;
      }
    }
  });
}

// x: (A..., n, B...) -> y: (A..., end - start, B...)
void SliceCpu(const OpRecord& op, const KernelContext&) {
  const Tensor& x = op.inputs[0];
  const Tensor& y = op.outputs[0];
  if (y.numel() == 0) return;
  const SliceRows b = MakeSliceRows(op.attrs, x.shape(), "slice");
  const int64_t es = int64_t(SizeOf(x.dtype()));
  const char* s = static_cast<const char*>(x.raw_data());
  char* d = static_cast<char*>(y.raw_data());
  const int64_t xrow = b.full_row, yrow = b.slice_row;
  ParallelFor(b.outer, RowGrain(yrow), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) std::memcpy(d + o * yrow * es, s + (o * xrow + b.head) * es, size_t(yrow * es));
  });
}

// dy: (A..., end - start, B...) -> dx: (A..., n, B...), zero outside [start, end)
void SliceGradCpu(const OpRecord& op, const KernelContext&) {
  const Tensor& dy = op.inputs[0];
  const Tensor& dx = op.outputs[0];
  if (dx.numel() == 0) return;
  const SliceRows b = MakeSliceRows(op.attrs, dx.shape(), "slice_grad");
  const int64_t es = int64_t(SizeOf(dx.dtype()));
  const char* s = static_cast<const char*>(dy.numel() ? dy.raw_data() : nullptr);
  char* d = static_cast<char*>(dx.raw_data());
  const int64_t xrow = b.full_row, yrow = b.slice_row, head = b.head, tail = xrow - head - yrow;
  ParallelFor(b.outer, RowGrain(xrow), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      char* row = d + o * xrow * es;
      std::memset(row, 0, size_t(head * es));  // all-zero bytes are zero in every dtype
      if (yrow) std::memcpy(row + head * es, s + o * yrow * es, size_t(yrow * es));
      std::memset(row + (head + yrow) * es, 0, size_t(tail * es));
    }
  });
}

template <typename W>  // W: an unsigned word of the element's size
void BroadcastCopy(const Tensor& x, const Tensor& y) {
  const W* s = static_cast<const W*>(x.raw_data());
  W* d = static_cast<W*>(y.raw_data());
  const Shape& os = y.shape();
  if (os.empty()) {
    d[0] = s[0];
    return;
  }
  std::vector<int64_t> st = BroadcastStrides(x.shape(), os);
  const int64_t rank = int64_t(os.size()), inner = os.back(), is = st.back();
  ParallelFor(y.numel() / inner, RowGrain(inner), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t rem = r, off = 0;
      for (int64_t k = rank - 2; k >= 0; --k) {
        off += (rem % os[size_t(k)]) * st[size_t(k)];
        rem /= os[size_t(k)];
      }
      W* yr = d + r * inner;
      for (int64_t j = 0; j < inner; ++j) yr[j] = s[off + j * is];
    }
  });
}

// x: (B...) -> y: (A..., B'...), B broadcast to B' (numpy rules)
void BroadcastToCpu(const OpRecord& op, const KernelContext&) {
  const Tensor& x = op.inputs[0];
  const Tensor& y = op.outputs[0];
  if (y.numel() == 0) return;
  WordDispatch(SizeOf(x.dtype()), "broadcast_to", [&](auto w) { BroadcastCopy<decltype(w)>(x, y); });
}

}  // namespace

LOOM_KERNEL(concat, kCPU, ConcatCpu);
LOOM_KERNEL(slice, kCPU, SliceCpu);
LOOM_KERNEL(slice_grad, kCPU, SliceGradCpu);
LOOM_KERNEL(broadcast_to, kCPU, BroadcastToCpu);

}  // namespace cpu
}  // namespace loom
