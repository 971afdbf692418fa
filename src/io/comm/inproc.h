// The in-process communicator: N ranks as N threads of one process, sharing one group object
//. For unit tests of everything above the transport (collective ops, gradient
// buckets, the schedule's collective lane, DistOpt, SyncBatchNorm2d) without MPI, and for
// benchmarks of overlap with an injected latency per collective.
//
// Note [In-process rendezvous]
// A collective is a meeting: each rank puts its buffers in its slot and waits; the last to
// arrive checks that every rank called the same collective (kind, count, dtype, root, reduce)
// and computes the result once, in rank order (so sums are the same on every rank and in every
// run); every rank copies it out, and the last to leave opens the next meeting. Sums of 16-bit
// floats accumulate in float and round once.
// Failure never hangs: a rank that does not arrive within the timeout, or that fails (Fail, or
// RunInProcRanks when its function throws), makes every other rank's current and later
// collectives throw CommError naming it.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"

namespace loom {

struct InProcOptions {
  double latency_ms = 0;  // injected into every collective, after the exchange (benchmarks)
  double timeout_s = 30;  // the longest a rank waits for the others
};

struct InProcGroup;

class InProcCommunicator final : public Communicator {
 public:
  InProcCommunicator(std::shared_ptr<InProcGroup> group, int rank);
  int rank() const override { return rank_; }
  int size() const override;
  const char* backend() const override { return "inproc"; }
  void AllReduce(void* data, int64_t count, DType dtype, ReduceOp op) override;
  void AllGather(const void* send, void* recv, int64_t count, DType dtype) override;
  void ReduceScatter(void* data, int64_t count, DType dtype, ReduceOp op) override;
  void Broadcast(void* data, int64_t count, DType dtype, int root) override;
  void Barrier() override;
  // Marks this rank failed: every rank's current and later collectives throw CommError naming
  // this rank and `reason`.
  void Fail(const std::string& reason) noexcept;

 private:
  std::shared_ptr<InProcGroup> group_;
  int rank_;
};

// n communicators of one group, rank r at index r.
std::vector<std::shared_ptr<InProcCommunicator>> MakeInProcGroup(int n, InProcOptions options = {});

// Runs fn(rank, communicator) on n threads, one per rank, and joins them. A rank whose fn throws
// fails the group (the others then throw CommError instead of waiting). Returns each rank's
// exception (null where it returned).
std::vector<std::exception_ptr> RunInProcRanks(
    int n, const std::function<void(int, const std::shared_ptr<Communicator>&)>& fn, InProcOptions options = {});

}  // namespace loom
