#include "io/comm/comm.h"

#include <cstdlib>

#include "core/error.h"
#ifdef LOOM_WITH_MPI
#include "io/comm/mpi.h"
#endif
#ifdef LOOM_WITH_NCCL
#include "core/communicator.h"
#endif

namespace loom {

int LocalRank() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    const char* s = std::getenv(var);
    if (!s || !*s) continue;
    char* end = nullptr;
    const long v = std::strtol(s, &end, 10);
    LOOM_CHECK(*end == '\0' && v >= 0 && v < (1 << 20), ValueError, "[", var, "] '", s,
               "' is not a local rank (a whole number from 0)");
    return int(v);
  }
  return 0;
}

bool MpiBuilt() {
#ifdef LOOM_WITH_MPI
  return true;
#else
  return false;
#endif
}

bool NcclBuilt() {
#ifdef LOOM_WITH_NCCL
  return true;
#else
  return false;
#endif
}

std::shared_ptr<Communicator> MakeNcclOver(std::shared_ptr<Device> device, std::shared_ptr<Communicator> bootstrap,
                                           double timeout_s) {
  LOOM_CHECK(bootstrap && !bootstrap->on_device(), ValueError, "[comm] NCCL bootstraps over a host communicator");
#ifdef LOOM_WITH_NCCL
  const int rank = bootstrap->rank();
  return MakeNcclCommunicator(std::move(device), std::move(bootstrap), rank, timeout_s, [] {});
#else
  (void)device;
  (void)timeout_s;
  throw DeviceError("[comm] the NCCL communicator is not built (the CUDA backend, NCCL and MPI are needed)");
#endif
}

std::shared_ptr<Communicator> MakeCommunicator(const std::string& backend, std::shared_ptr<Device> device) {
  LOOM_CHECK(backend == "mpi" || backend == "nccl" || backend == "auto", ValueError, "[comm] unknown backend '", backend,
             "': expected \"mpi\", \"nccl\" or \"auto\"");
  std::string b = backend;
  if (b == "auto") b = device && device->type() == DeviceType::kCUDA && NcclBuilt() ? "nccl" : "mpi";
  if (b == "nccl") {
#ifdef LOOM_WITH_NCCL
    auto mpi = std::make_shared<MpiCommunicator>();
    const int local = mpi->LocalRank();  // collective: every rank calls it, GPU or not
    return MakeNcclCommunicator(std::move(device), mpi, local, mpi->timeout_s(), MarkCollectiveFailed);
#else
    throw DeviceError(
        "[comm] the NCCL communicator is not built: it needs the CUDA backend (nvcc), NCCL (nccl.h and libnccl, "
        "next to the CUDA toolkit or under NCCL_ROOT) and MPI (apt-get install libopenmpi-dev openmpi-bin, or "
        "tools/setup.sh), then a fresh CMake configure");
#endif
  }
#ifdef LOOM_WITH_MPI
  return std::make_shared<MpiCommunicator>();
#else
  throw DeviceError(
      "[comm] the MPI communicator is not built: install OpenMPI (apt-get install libopenmpi-dev openmpi-bin, or "
      "run tools/setup.sh), then configure loom again so that CMake finds MPI");
#endif
}

bool AbortAllRanks(const std::string& message, int code) {
#ifdef LOOM_WITH_MPI
  return MpiAbortAllRanks(message, code);
#else
  return false;
#endif
}

}  // namespace loom
