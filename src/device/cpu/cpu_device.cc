// The CPU device: 64-byte aligned memory from the caching pool, kernels from
// src/device/cpu/kernels, work split by ParallelFor.
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/device.h"
#include "device/cpu/parallel.h"

namespace loom {

namespace {
class CpuDeviceImpl : public Device {
 public:
  explicit CpuDeviceImpl(int id)
      : Device(DeviceType::kCPU, id, [](size_t bytes) { return std::aligned_alloc(64, (bytes + 63) & ~size_t(63)); },
               [](void* p) { std::free(p); }) {}
  void MemcpyToHost(void* dst, const void* src, size_t bytes) override { if (bytes) std::memcpy(dst, src, bytes); }
  void MemcpyFromHost(void* dst, const void* src, size_t bytes) override { if (bytes) std::memcpy(dst, src, bytes); }
  // Note [Replay threads]: the pool's threads; a worker's kernels run inline (SerialRegion).
  int HostThreads() const override { return NumThreads(); }
  bool SetKernelFanOut(bool fan_out) override { return !SetSerialRegion(!fan_out); }
};
}  // namespace

std::shared_ptr<Device> CpuDevice() {
  static std::shared_ptr<Device> dev = std::make_shared<CpuDeviceImpl>(0);
  return dev;
}

std::shared_ptr<Device> NewCpuDevice(int id) { return std::make_shared<CpuDeviceImpl>(id); }

}  // namespace loom
