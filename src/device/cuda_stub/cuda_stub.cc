// Linked when loom is built without CUDA: the CUDA entry points exist and say why they fail.
#include "core/error.h"
#include "core/device.h"

namespace loom {

std::shared_ptr<Device> CudaDevice(int id) {
  throw DeviceError(detail::Cat("[cuda] cannot create cuda:", id,
                                ": CUDA backend not built (configure with nvcc on PATH or -DLOOM_USE_CUDA=ON)"));
}

bool CudaAvailable() { return false; }
int CudaDeviceCount() { return 0; }

std::string CudaSetupError() { return ""; }

}  // namespace loom
