// The NCCL communicator: collectives on a CUDA device's stream (issue 15). Compiled only with
// the CUDA backend, NCCL and MPI (LOOM_WITH_NCCL): MPI hands out NCCL's unique id and numbers
// the ranks. comm.h's MakeCommunicator is the way in.
#pragma once

#include <memory>

#include "device/communicator.h"
#include "device/device.h"

namespace loom {

// `device`: a CUDA device, or null for the one numbered by the rank's local rank (DeviceError
// when the host has fewer visible GPUs than ranks: NCCL does not support one device as two ranks
// of a communicator). Collective: Note [Communicators are made in the same order on every rank].
std::shared_ptr<Communicator> MakeNcclCommunicator(std::shared_ptr<Device> device);

}  // namespace loom
