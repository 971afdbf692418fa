// What a collective kernel calls: a group of `size()` ranks that reduce, gather and broadcast
// buffers together. The interface lives in core because the collective ops and their kernels
// call it; the implementations live in src/io/comm/ (MPI, in-process threads for tests) and in
// the CUDA backend (NCCL), the same way a device knows only the CaptureSink interface and
// src/graph implements it.
//
// Note [Collectives keep issue order]
// Every rank must issue the same collectives in the same order, or ranks wait on each other for
// ever. Callers (the collective ops, DistOpt) guarantee the order; an implementation may assume it
// and never reorders. A failure (a peer that died, raised or timed out) throws CommError naming the
// rank and the collective on every rank that can still run, within the communicator's timeout.
//
// Buffers are host memory for host communicators and device memory for device ones
// (`on_device()`); collectives are in place or from `send` into `recv`, `count` elements each.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/dtype.h"

namespace loom {

class Device;

enum class ReduceOp : uint8_t { kSum, kMax };

// Note [Timeouts without end]
// A communicator's timeout (LOOM_COMM_TIMEOUT_S, InProcOptions::timeout_s) may be as large as the
// user likes, inf included: anything from kLongestWaitS up (31 years) waits kLongestWaitS, in
// effect for ever. Added to the clock as is, 1e10 s overflowed its int64 nanoseconds and inf was
// undefined: the deadline fell in the past and a healthy job failed its first collective at once.
constexpr double kLongestWaitS = 1e9;
// The moment a wait of timeout_s (> 0) that began at `from` gives up.
inline std::chrono::steady_clock::time_point WaitDeadline(std::chrono::steady_clock::time_point from,
                                                          double timeout_s) {
  const double s = timeout_s < kLongestWaitS ? timeout_s : kLongestWaitS;
  return from + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "mpi", "nccl", "inproc"
  virtual bool on_device() const { return false; }  // buffers live in GPU memory (NCCL)

  // In place: every rank ends with the element-wise reduction over ranks of `data[0, count)`.
  virtual void AllReduce(void* data, int64_t count, DType dtype, ReduceOp op) = 0;
  // recv[r * count, (r + 1) * count) = rank r's send[0, count); recv holds size() * count.
  virtual void AllGather(const void* send, void* recv, int64_t count, DType dtype) = 0;
  // In place, over size() slots of `count` elements: data holds size() * count elements, and this
  // rank ends with the element-wise reduction over ranks of its own slot, data[rank() * count,
  // (rank() + 1) * count); the other slots are left unspecified (Note [Sharded optimizer state]).
  virtual void ReduceScatter(void* data, int64_t count, DType dtype, ReduceOp op) = 0;
  // Every rank ends with root's data[0, count).
  virtual void Broadcast(void* data, int64_t count, DType dtype, int root) = 0;
  virtual void Barrier() = 0;
};

// The NCCL communicator of the CUDA backend (device/cuda/nccl.cc, in a build with NCCL:
// LOOM_WITH_NCCL): collectives on `device`'s stream (null: the CUDA device numbered `local_rank`,
// the rank's number on its host), with the ranks of `bootstrap`, a host communicator that hands
// out NCCL's id; no wait is longer than timeout_s (Note [Bounded waits on the GPU]), and a failed
// collective calls on_failure (the MPI runtime then takes the job down at exit). Collective:
// Note [Communicators are made in the same order on every rank]. io/comm/comm.h makes it.
std::shared_ptr<Communicator> MakeNcclCommunicator(std::shared_ptr<Device> device,
                                                   std::shared_ptr<Communicator> bootstrap, int local_rank,
                                                   double timeout_s, std::function<void()> on_failure);

}  // namespace loom
