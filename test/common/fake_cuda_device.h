// A device of the CUDA type that runs nothing, for tests of graph passes without a GPU: what the
// pass frame asks of a device is its type and whether its kernels support a record (the CUDA
// backend's predicates, once core/backend_library.h's LoadCudaBackend has registered them; none
// without it).
#pragma once

#include <cstdlib>

#include "core/device.h"

namespace loom {
namespace test {

class FakeCudaDevice : public Device {
 public:
  FakeCudaDevice()
      : Device(DeviceType::kCUDA, 9, [](size_t n) { return std::malloc(n ? n : 1); }, [](void* p) { std::free(p); }) {}
  void MemcpyToHost(void*, const void*, size_t) override {}
  void MemcpyFromHost(void*, const void*, size_t) override {}
};

}  // namespace test
}  // namespace loom
