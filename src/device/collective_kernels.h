// The kernels of the collective ops (core/collective.h), one body for every backend: the wire
// work goes to the communicator (core/comm_registry.h), and the element-wise parts (the
// 16-bit casts of compression, the scale) run the device's own `cast` and `mul_scalar` kernels,
// so nothing is written twice for the CPU and CUDA. A host communicator (MPI, in-process)
// with a tensor in GPU memory stages the wire buffer through host memory; a device
// communicator (NCCL) gets device pointers.
#pragma once

#include <cstddef>

#include "core/op.h"

namespace loom {

// data: (n...) in place, token, members... -> the same. attrs: comm, reduce, scale, compress.
void AllReduceKernel(const OpRecord& op, const KernelContext& ctx);
// x: (n...), token -> y: (size, n...), token. attrs: comm, size.
void AllGatherKernel(const OpRecord& op, const KernelContext& ctx);
void ReduceScatterKernel(const OpRecord& op, const KernelContext& ctx);  // scratch: AllReduceScratchBytes
void AllGatherShardsKernel(const OpRecord& op, const KernelContext& ctx);
// x: (n...) in place, token -> the same. attrs: comm, root.
void BroadcastKernel(const OpRecord& op, const KernelContext& ctx);
// Note [Planned scratch]: the 16-bit wire copy of a compressed all-reduce.
size_t AllReduceScratchBytes(const OpRecord& op);

}  // namespace loom
