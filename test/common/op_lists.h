// Hand-built op lists for the graph's unit tests (capture, plan, passes): records that are only
// listed, never run, on lazy blocks that nothing allocates.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/op.h"

namespace loom {
namespace test {

inline OpRecord Record(const char* op, std::vector<Tensor> in, std::vector<Tensor> out, Attrs attrs = {}) {
  OpRecord r;
  r.def = &GetOp(op);
  r.inputs = std::move(in);
  r.outputs = std::move(out);
  r.attrs = std::move(attrs);
  return r;
}

// n float32 values on the CPU, not allocated.
inline Tensor Lazy(int64_t n) { return Tensor(Shape{n}, DType::kFloat32, CpuDevice()); }

}  // namespace test
}  // namespace loom
