// CUDA registration of the collective kernels (device/collective_kernels.h: one body for all
// backends). A device communicator (NCCL) gets device pointers; a host one
// (MPI, in-process) gets a host copy of the buffer.
#include "device/collective_kernels.h"

namespace loom {

LOOM_KERNEL(allreduce, kCUDA, AllReduceKernel);
LOOM_KERNEL_SCRATCH(allreduce, kCUDA, AllReduceScratchBytes);
LOOM_KERNEL(allgather, kCUDA, AllGatherKernel);
LOOM_KERNEL(reducescatter, kCUDA, ReduceScatterKernel);
LOOM_KERNEL_SCRATCH(reducescatter, kCUDA, AllReduceScratchBytes);
LOOM_KERNEL(allgather_shards, kCUDA, AllGatherShardsKernel);
LOOM_KERNEL(broadcast, kCUDA, BroadcastKernel);

}  // namespace loom
