#include "io/comm/comm.h"

#include <cstdlib>

#include "core/backend_library.h"
#include "core/error.h"

namespace loom {

#ifdef LOOM_WITH_MPI
namespace {
// Note [Backends loaded on first use]: the MPI communicator is libloom_mpi.so's (io/comm/mpi.cc).
const char kMpiLibrary[] = "libloom_mpi.so";
const MpiBackend& Mpi() {
  return *static_cast<const MpiBackend*>(OpenBackendLibrary(kMpiLibrary, "loom_mpi_backend", "comm"));
}
}  // namespace
#endif

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
  return LoadCudaBackend().make_nccl(std::move(device), std::move(bootstrap), rank, timeout_s, [] {});
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
    const MpiBackend& m = Mpi();
    std::shared_ptr<Communicator> mpi = m.make();
    const int local = m.local_rank(*mpi);  // collective: every rank calls it, GPU or not
    return LoadCudaBackend().make_nccl(std::move(device), mpi, local, m.timeout_s(*mpi), m.mark_collective_failed);
#else
    throw DeviceError(
        "[comm] the NCCL communicator is not built: it needs the CUDA backend (nvcc), NCCL (nccl.h and libnccl, "
        "next to the CUDA toolkit or under NCCL_ROOT) and MPI (apt-get install libopenmpi-dev openmpi-bin, or "
        "tools/setup.sh), then a fresh CMake configure");
#endif
  }
#ifdef LOOM_WITH_MPI
  return Mpi().make();
#else
  throw DeviceError(
      "[comm] the MPI communicator is not built: install OpenMPI (apt-get install libopenmpi-dev openmpi-bin, or "
      "run tools/setup.sh), then configure loom again so that CMake finds MPI");
#endif
}

bool AbortAllRanks(const std::string& message, int code) {
#ifdef LOOM_WITH_MPI
  // No communicator made, no library loaded: no MPI world of loom's to abort.
  return BackendLibraryOpen(kMpiLibrary) && Mpi().abort_all_ranks(message, code);
#else
  return false;
#endif
}

}  // namespace loom
