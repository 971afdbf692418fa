// The CUDA entry points of core/device.h in libloom.so: with the CUDA backend built they open
// libloom_cuda.so on first use (Note [Backends loaded on first use] in core/backend_library.h);
// without it they say so.
#include <dlfcn.h>

#include "core/backend_library.h"
#include "core/device.h"
#include "core/error.h"

namespace loom {

#ifdef LOOM_WITH_CUDA

const CudaBackend& LoadCudaBackend() {
  return *static_cast<const CudaBackend*>(OpenBackendLibrary("libloom_cuda.so", "loom_cuda_backend", "cuda"));
}

std::shared_ptr<Device> CudaDevice(int id) { return LoadCudaBackend().device(id); }

bool CudaAvailable() {
  try {
    return LoadCudaBackend().available();
  } catch (const DeviceError&) {  // CudaSetupError says why, where it matters
    return false;
  }
}

int CudaDeviceCount() {
  try {
    return LoadCudaBackend().device_count();
  } catch (const DeviceError&) {  // as CudaAvailable
    return 0;
  }
}

std::string CudaSetupError() {
  try {
    return LoadCudaBackend().setup_error();
  } catch (const DeviceError& e) {
    // Note [No GPU, or a broken one]: with an NVIDIA driver installed, a backend that cannot load
    // (CUDA's runtime or cuDNN missing) is a setup error; without a driver the machine has no GPU.
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!driver) return "";
    dlclose(driver);
    return e.what();
  }
}

#else

const CudaBackend& LoadCudaBackend() {
  throw DeviceError("[cuda] CUDA backend not built (configure with nvcc on PATH or -DLOOM_USE_CUDA=ON)");
}

std::shared_ptr<Device> CudaDevice(int id) {
  throw DeviceError(detail::Cat("[cuda] cannot create cuda:", id,
                                ": CUDA backend not built (configure with nvcc on PATH or -DLOOM_USE_CUDA=ON)"));
}

bool CudaAvailable() { return false; }

int CudaDeviceCount() { return 0; }

std::string CudaSetupError() { return ""; }

#endif

}  // namespace loom
