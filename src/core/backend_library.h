// Backends loaded on first use: the CUDA backend (libloom_cuda.so: the CUDA kernels and device,
// cudart, cuBLAS, cuDNN, and the NCCL communicator with NCCL) and the MPI communicator
// (libloom_mpi.so: OpenMPI) are shared libraries of their own beside libloom.so.
//
// Note [Backends loaded on first use]
// A CPU-only program never maps CUDA's or MPI's libraries: libloom.so does not link them, and
// opens libloom_cuda.so the first time a CUDA device is asked for (CudaDevice, CudaAvailable,
// CudaDeviceCount, CudaSetupError: core/device.h; the NCCL communicator), libloom_mpi.so the first time an MPI or
// NCCL communicator is made (io/comm/comm.h). Each is looked for in libloom.so's own folder (the
// build folder, an install's lib/, a wheel's loom/), then by the dynamic loader's search path. A
// library that is missing or cannot load (a CUDA runtime or cuDNN that is not installed, say) is
// a DeviceError naming the file and the loader's own reason. Opening one runs its static
// initialisers, which register its kernels (LOOM_KERNEL) into the slots of ops libloom.so has
// already declared: a lookup and a store into that device's slot, which no code reads until a
// device of that kind exists. Libraries stay open for the life of the process.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace loom {

class Communicator;
class Device;

// The file `file` (say "libloom_cuda.so") beside libloom.so, or else by the loader's search path,
// opened once per process; DeviceError "[what] ..." naming it and the loader's reason when it
// cannot be opened or lacks the symbol `entry`, whose address (the library's table) is returned.
const void* OpenBackendLibrary(const std::string& file, const char* entry, const char* what);
// Whether `file` has been opened by OpenBackendLibrary in this process.
bool BackendLibraryOpen(const std::string& file);
// The folder libloom.so was loaded from ("" when the loader does not say).
std::string LibraryFolder();

// libloom_cuda.so's table (its extern "C" loom_cuda_backend()).
struct CudaBackend {
  std::shared_ptr<Device> (*device)(int id);
  bool (*available)();
  int (*device_count)();
  std::string (*setup_error)();
  // Null without NCCL: communicator.h's MakeNcclCommunicator.
  std::shared_ptr<Communicator> (*make_nccl)(std::shared_ptr<Device> device, std::shared_ptr<Communicator> bootstrap,
                                             int local_rank, double timeout_s, std::function<void()> on_failure);
};
// Opens libloom_cuda.so (Note [Backends loaded on first use]); DeviceError when the CUDA backend
// is not built or cannot load. Defined in device/cuda_entry.cc.
const CudaBackend& LoadCudaBackend();

// libloom_mpi.so's table (its extern "C" loom_mpi_backend()).
struct MpiBackend {
  std::shared_ptr<Communicator> (*make)();  // an MpiCommunicator (io/comm/mpi.h)
  int (*local_rank)(Communicator& mpi);     // collective
  double (*timeout_s)(const Communicator& mpi);
  bool (*abort_all_ranks)(const std::string& message, int code);
  void (*mark_collective_failed)();
};

}  // namespace loom
