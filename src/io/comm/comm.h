// Making a communicator: the one entry point DistOpt, the tools and the Python
// bindings call. The implementations: mpi.h (OpenMPI, host buffers) and inproc.h (ranks as
// threads, for tests) in this folder; NCCL on a CUDA device, bootstrapped over MPI here, in the
// CUDA backend (device/cuda/nccl.cc, made through core/communicator.h).
//
// Note [Communicators are made in the same order on every rank]
// Making an MPI or NCCL communicator is itself collective (it duplicates MPI_COMM_WORLD, or
// hands out NCCL's unique id): every rank makes the same communicators in the same order, as it
// issues the same collectives in the same order (Note [Collectives keep issue order]).
#pragma once

#include <memory>
#include <string>

#include "core/communicator.h"
#include "core/device.h"

namespace loom {

// backend: "mpi"   MPI_COMM_WORLD's ranks, host buffers; launched by mpirun (tools/launch.sh,
//                  python3 -m loom.launch) or, started alone, a 1-rank world;
//          "nccl"  NCCL on `device` (default: the CUDA device numbered by the rank's local rank;
//                  more ranks than GPUs on a host is refused), device buffers; needs the CUDA
//                  backend and NCCL;
//          "auto"  "nccl" when `device` is a CUDA device and NCCL is built, else "mpi".
// Throws DeviceError naming what to install when the backend is not built, ValueError for an
// unknown name, CommError when the world cannot be joined.
std::shared_ptr<Communicator> MakeCommunicator(const std::string& backend = "auto",
                                               std::shared_ptr<Device> device = nullptr);

// This process's index among the ranks on its machine, as the launcher (mpirun, Slurm) set it in
// the environment (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID); 0 when started
// alone. For choosing a GPU per rank (SINGA's local_rank).
int LocalRank();

// An NCCL communicator on `device` whose ranks are those of `bootstrap`, any host communicator
// (MPI's, or in-process ranks: one thread per GPU of this machine), which hands out NCCL's id; no
// wait is longer than timeout_s. DeviceError when NCCL is not built.
std::shared_ptr<Communicator> MakeNcclOver(std::shared_ptr<Device> device, std::shared_ptr<Communicator> bootstrap,
                                           double timeout_s);

bool MpiBuilt();   // loom was configured with MPI found (LOOM_WITH_MPI)
bool NcclBuilt();  // ... and with the CUDA backend and NCCL (LOOM_WITH_NCCL)

// Note [A failing rank takes the job down]
// A rank that fails while others may wait in a collective ends the whole job at once rather
// than leaving them to time out: an uncaught C++ exception does (mpi.cc installs a terminate
// handler once MPI is up), and so does an uncaught Python exception (loom/comm.py installs an
// excepthook when a communicator is made), both through this function. It prints `message` on
// stderr prefixed with this rank ("[comm] rank 1 of 2: ...") and calls MPI_Abort, which makes
// mpirun kill every rank and exit with `code`. Returns false, doing nothing, when there is no
// multi-rank MPI world to abort (no MPI, not initialised, or a 1-rank world).
bool AbortAllRanks(const std::string& message, int code = 1);

}  // namespace loom
