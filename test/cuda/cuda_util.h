// Helpers for the CUDA tests: the skip when no GPU is visible, and moving tensors between
// devices through the host.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/ops.h"
#include "device/device.h"

// GPU tests start with this: without a visible GPU (or without the CUDA backend) they are
// reported as skipped, with the reason, rather than passing silently.
#define LOOM_REQUIRE_GPU()                                                                        \
  do {                                                                                            \
    if (!::loom::CudaAvailable())                                                                 \
      GTEST_SKIP() << "no CUDA GPU visible (or loom built without CUDA): GPU test not run";       \
  } while (0)

namespace loom {
namespace test {

// The tensor's bytes (row-major), read on the host.
inline std::vector<uint8_t> HostBytes(const Tensor& t) {
  Tensor c = t.is_contiguous() ? t : t.Contiguous();
  std::vector<uint8_t> bytes(c.nbytes());
  CheckHostReadAllowed(c, "host_bytes");
  c.device()->Synchronize();
  if (!bytes.empty()) c.device()->MemcpyToHost(bytes.data(), c.raw_data(), bytes.size());
  return bytes;
}

// A contiguous copy of `t` on `dev`, made through the host.
inline Tensor ToDevice(const Tensor& t, const std::shared_ptr<Device>& dev) {
  std::vector<uint8_t> bytes = HostBytes(t);
  Tensor out(t.shape(), t.dtype(), dev);
  out.CopyFromHost(bytes.data(), bytes.size());
  return out;
}

}  // namespace test
}  // namespace loom
