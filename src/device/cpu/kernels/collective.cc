// CPU registration of the collective kernels (device/collective_kernels.h: one body for all
// backends).
#include "device/collective_kernels.h"

namespace loom {

LOOM_KERNEL(allreduce, kCPU, AllReduceKernel);
LOOM_KERNEL_SCRATCH(allreduce, kCPU, AllReduceScratchBytes);
LOOM_KERNEL(allgather, kCPU, AllGatherKernel);
LOOM_KERNEL(reducescatter, kCPU, ReduceScatterKernel);
LOOM_KERNEL_SCRATCH(reducescatter, kCPU, AllReduceScratchBytes);
LOOM_KERNEL(allgather_shards, kCPU, AllGatherShardsKernel);
LOOM_KERNEL(broadcast, kCPU, BroadcastKernel);

}  // namespace loom
