// The NCCL communicator: collectives on a CUDA device's stream (Note [Bounded waits on the GPU]).
// Built only with NCCL and MPI (LOOM_WITH_NCCL); io/comm/comm.h's MakeCommunicator("nccl") is the
// way in: it bootstraps over MPI (rank numbers, NCCL's unique id) and calls MakeNcclCommunicator
// (core/communicator.h) here.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <functional>
#include <thread>

#include "core/communicator.h"
#include "core/error.h"
#include "core/ranks_agree.h"
#include "device/cuda/cuda_device.h"

namespace loom {
namespace {

// NCCL status codes, thrown as CommError with the call, file:line and NCCL's own words (docs/style.md,
// "Errors"): a failed NCCL call is a failed collective.
std::string NcclWhy(ncclResult_t r, ncclComm_t comm) {
  const char* last = comm ? ncclGetLastError(comm) : nullptr;
  return detail::Cat(ncclGetErrorString(r), last && *last ? detail::Cat(" (", last, ")") : std::string());
}

struct NcclType {
  ncclDataType_t type;
  ncclRedOp_t sum, max;
};

// As Note [MPI types and reductions]: bool is a byte reduced as a logical or (max); NCCL has
// float16 and bfloat16 of its own.
NcclType TypeOf(DType t) {
  switch (t) {
    case DType::kFloat32: return {ncclFloat32, ncclSum, ncclMax};
    case DType::kFloat64: return {ncclFloat64, ncclSum, ncclMax};
    case DType::kFloat16: return {ncclFloat16, ncclSum, ncclMax};
    case DType::kBFloat16: return {ncclBfloat16, ncclSum, ncclMax};
    case DType::kInt32: return {ncclInt32, ncclSum, ncclMax};
    case DType::kInt64: return {ncclInt64, ncclSum, ncclMax};
    case DType::kUInt8: return {ncclUint8, ncclSum, ncclMax};
    case DType::kBool: return {ncclUint8, ncclMax, ncclMax};
  }
  throw DTypeError(detail::Cat("[nccl] no NCCL type for dtype ", int(t)));
}

// Note [Bounded waits on the GPU]
// As on the host (Note [Bounded waits]), no wait is unbounded. The NCCL communicator is
// non-blocking (config.blocking = 0): initialisation and each enqueue return at once and are
// polled with ncclCommGetAsyncError. After enqueueing a collective on the device's stream, the
// host waits for it (an event behind it, polled with cudaEventQuery and ncclCommGetAsyncError)
// up to timeout_s; past that, or on an asynchronous NCCL error, the communicator is aborted
// (ncclCommAbort, which also ends the kernels stuck on the stream) and CommError names the
// rank and the collective. This wait costs the overlap of the host issuing the next kernels
// while the collective runs; it is what keeps a dead peer from hanging the device's stream, and
// so every later host read, for ever. While the stream is being recorded into a device graph
// nothing runs, so nothing is waited for: the collective is recorded like any kernel.
//
// With LOOM_COMM_CHECK=1 each collective is first agreed on over the bootstrap (Note [Ranks agree
// on each collective]): the ranks' call descriptions are all-gathered on the host and compared, so
// a mismatch is the same CommError on every rank before anything is enqueued. A collective
// recorded into a device graph is checked when it is recorded, not at each relaunch.
class NcclCommunicator : public Communicator {
 public:
  // `bootstrap`: a host communicator of the same ranks, which hands out NCCL's unique id.
  NcclCommunicator(std::shared_ptr<Device> device, std::shared_ptr<Communicator> bootstrap, double timeout_s,
                   std::function<void()> on_failure)
      : device_(std::move(device)), mpi_(std::move(bootstrap)), on_failure_(std::move(on_failure)) {
    dev_ = static_cast<cuda::CudaDeviceImpl*>(device_.get());  // a CUDA device: checked by the factory
    rank_ = mpi_->rank();
    size_ = mpi_->size();
    timeout_s_ = timeout_s;
    check_ = CommCheckFromEnv();
    dev_->MakeCurrent();
    ncclUniqueId id{};
    if (rank_ == 0) Check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    mpi_->Broadcast(&id, sizeof id, DType::kUInt8, 0);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress) Fail("make communicator (ncclCommInitRankConfig)", NcclWhy(r, comm_));
    WaitComm("make communicator (ncclCommInitRankConfig)");
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }

  ~NcclCommunicator() override {
    if (!comm_) return;
    dev_->MakeCurrent();
    if (!broken_) {
      try {
        // Finalise flushes what is still queued; it may take a while, but not for ever. NCCL's
        // rule: after an error, a communicator is aborted, not destroyed (Fail aborts).
        const ncclResult_t r = ncclCommFinalize(comm_);
        if (r == ncclInProgress) WaitComm("destroy communicator (ncclCommFinalize)");
        if (r != ncclSuccess && r != ncclInProgress) ncclCommAbort(comm_);
        else ncclCommDestroy(comm_);
      } catch (const CommError&) {
        // Fail already aborted the communicator; a destructor has nobody to tell.
      }
    }
    if (done_) cudaEventDestroy(done_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }
  bool on_device() const override { return true; }

  void AllReduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    CheckBuffer("all_reduce", data, count);
    const NcclType t = TypeOf(dtype);
    Enqueue(detail::Cat("all_reduce (", op == ReduceOp::kSum ? "sum" : "max", " of ", count, " ", Name(dtype), ")"),
            [&] { return ncclAllReduce(data, data, size_t(count), t.type, op == ReduceOp::kSum ? t.sum : t.max, comm_, dev_->stream()); });
  }

  void AllGather(const void* send, void* recv, int64_t count, DType dtype) override {
    CheckBuffer("all_gather", send, count);
    CheckBuffer("all_gather", recv, count);
    const NcclType t = TypeOf(dtype);
    // In place when send is this rank's slot of recv, which NCCL handles itself.
    Enqueue(detail::Cat("all_gather (", count, " ", Name(dtype), " per rank)"),
            [&] { return ncclAllGather(send, recv, size_t(count), t.type, comm_, dev_->stream()); });
  }

  void ReduceScatter(void* data, int64_t count, DType dtype, ReduceOp op) override {
    CheckBuffer("reduce_scatter", data, count);
    const NcclType t = TypeOf(dtype);
    // In place: NCCL's in-place form writes this rank's slot, recv = send + rank * count.
    char* slot = static_cast<char*>(data) + size_t(rank_) * size_t(count) * SizeOf(dtype);
    Enqueue(detail::Cat("reduce_scatter (", op == ReduceOp::kSum ? "sum" : "max", " of ", count, " ", Name(dtype),
                        " per rank)"),
            [&] {
              return ncclReduceScatter(data, slot, size_t(count), t.type, op == ReduceOp::kSum ? t.sum : t.max, comm_,
                                       dev_->stream());
            });
  }

  void Broadcast(void* data, int64_t count, DType dtype, int root) override {
    CheckBuffer("broadcast", data, count);
    LOOM_CHECK(root >= 0 && root < size_, ValueError, "[nccl] broadcast from rank ", root, ": the world has ranks 0 to ",
               size_ - 1);
    const NcclType t = TypeOf(dtype);
    Enqueue(detail::Cat("broadcast (", count, " ", Name(dtype), " from rank ", root, ")"),
            [&] { return ncclBroadcast(data, data, size_t(count), t.type, root, comm_, dev_->stream()); });
  }

  // NCCL has no barrier: this rank's queued work completes, then the ranks meet over MPI.
  void Barrier() override {
    CheckUsable("barrier");
    if (check_) AgreeOverHost(*mpi_, "nccl", "barrier");
    dev_->MakeCurrent();
    WaitStream("barrier");
    mpi_->Barrier();
  }

 private:
  std::string Where(const std::string& call) const {
    return detail::Cat("[nccl] ", call, " on rank ", rank_, " of ", size_, " (", device_->name(), ")");
  }

  void CheckBuffer(const char* call, const void* p, int64_t count) const {
    LOOM_CHECK(count >= 0, ValueError, "[nccl] ", call, ": negative element count ", count);
    LOOM_CHECK(p != nullptr || count == 0, ValueError, "[nccl] ", call, ": null buffer for ", count, " elements");
  }

  void CheckUsable(const std::string& call) const {
    if (broken_) throw CommError(Where(call) + ": the communicator is broken by an earlier failure (" + broken_by_ + ")");
  }

  [[noreturn]] void Fail(const std::string& call, const std::string& why) {
    if (comm_ && !broken_) ncclCommAbort(comm_);
    broken_ = true;
    if (on_failure_) on_failure_();
    broken_by_ = Where(call) + ": " + why;
    throw CommError(broken_by_);
  }

  void Check(ncclResult_t r, const std::string& call) {
    if (r != ncclSuccess) Fail(call, NcclWhy(r, comm_));
  }

  template <typename Call>
  void Enqueue(const std::string& call, Call issue) {
    CheckUsable(call);
    if (check_) AgreeOverHost(*mpi_, "nccl", call);
    dev_->MakeCurrent();
    const ncclResult_t r = issue();
    if (r == ncclInProgress) WaitComm(call);
    else Check(r, call);
    WaitStream(call);
  }

  template <typename Done>
  void Poll(const std::string& call, Done done) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = WaitDeadline(Clock::now(), timeout_s_);  // Note [Timeouts without end]
    for (;;) {
      if (done()) return;
      ncclResult_t async = ncclSuccess;
      Check(ncclCommGetAsyncError(comm_, &async), call);
      if (async != ncclSuccess && async != ncclInProgress) Fail(call, NcclWhy(async, comm_));
      if (Clock::now() > deadline)
        Fail(call, detail::Cat("did not complete within ", timeout_s_,
                               " s: another rank died, exited or raised before reaching it, or is stuck elsewhere "
                               "(LOOM_COMM_TIMEOUT_S sets the limit)"));
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  // Until the non-blocking communicator has finished the last call (Note [Bounded waits on the GPU]).
  void WaitComm(const std::string& call) {
    Poll(call, [&] {
      ncclResult_t s = ncclInProgress;
      Check(ncclCommGetAsyncError(comm_, &s), call);
      if (s != ncclSuccess && s != ncclInProgress) Fail(call, NcclWhy(s, comm_));
      return s == ncclSuccess;
    });
  }

  // Until the stream has run everything queued so far, the collective included.
  void WaitStream(const std::string& call) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    LOOM_CUDA_CHECK(cudaStreamIsCapturing(dev_->stream(), &capture));
    if (capture != cudaStreamCaptureStatusNone) return;  // recorded, not run
    LOOM_CUDA_CHECK(cudaEventRecord(done_, dev_->stream()));
    Poll(call, [&] {
      const cudaError_t e = cudaEventQuery(done_);
      if (e == cudaErrorNotReady) return false;
      LOOM_CUDA_CHECK(e);
      return true;
    });
  }

  std::shared_ptr<Device> device_;
  cuda::CudaDeviceImpl* dev_ = nullptr;
  std::shared_ptr<Communicator> mpi_;  // the bootstrap
  std::function<void()> on_failure_;
  int rank_ = 0, size_ = 1;
  double timeout_s_ = 25.0;
  bool check_ = false;  // Note [Ranks agree on each collective]
  ncclComm_t comm_ = nullptr;
  cudaEvent_t done_ = nullptr;
  bool broken_ = false;
  std::string broken_by_;
};

}  // namespace

std::shared_ptr<Communicator> MakeNcclCommunicator(std::shared_ptr<Device> device,
                                                   std::shared_ptr<Communicator> bootstrap, int local_rank,
                                                   double timeout_s, std::function<void()> on_failure) {
  LOOM_CHECK(!device || device->type() == DeviceType::kCUDA, DeviceError,
             "[nccl] the NCCL communicator runs on a CUDA device, not ", device ? device->name() : "",
             " (use backend \"mpi\" for host buffers)");
  if (!device) {
    int gpus = 0;
    const cudaError_t e = cudaGetDeviceCount(&gpus);
    LOOM_CHECK(e == cudaSuccess && gpus > 0, DeviceError, "[nccl] rank ", bootstrap->rank(),
               " sees no GPU: the NCCL communicator needs one CUDA device per rank (use backend \"mpi\" on CPUs)");
    // NCCL does not support one device as two ranks of a communicator (it may hang): refused.
    LOOM_CHECK(local_rank < gpus, DeviceError, "[nccl] rank ", bootstrap->rank(), " is rank ", local_rank,
               " on its host, which has ", gpus, " visible GPU(s): the NCCL communicator needs a GPU of its own per rank "
               "(start at most ", gpus, " ranks per host, or use backend \"mpi\")");
    device = CudaDevice(local_rank);
  }
  return std::make_shared<NcclCommunicator>(std::move(device), std::move(bootstrap), timeout_s, std::move(on_failure));
}

}  // namespace loom
