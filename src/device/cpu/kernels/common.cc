#include "device/cpu/kernels/common.h"

namespace loom {
namespace cpu {

std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out_shape) {
  std::vector<int64_t> st(out_shape.size(), 0);
  Shape cs = ContiguousStrides(in);
  size_t off = out_shape.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) st[off + i] = in[i] == 1 ? 0 : cs[i];
  return st;
}

}  // namespace cpu
}  // namespace loom
