#include "io/comm/mpi.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/backend_library.h"
#include "core/error.h"
#include "core/half.h"
#include "core/ranks_agree.h"
#include "io/comm/comm.h"

namespace loom {
namespace {

// ---- the process's MPI: initialised once, finalised (or aborted) at exit ----

struct Runtime {
  bool owns = false;  // loom called MPI_Init_thread, so loom finalises
  int world_rank = 0, world_size = 1;
  // Set when a collective failed (timed out or returned an error): at exit this rank aborts
  // the job instead of finalising, since its peers may still be blocked (Note [Bounded waits]).
  std::atomic<bool> failed{false};
  // float16 and bfloat16: 2-byte types of their own, so the user reductions below can tell them
  // apart (Note [MPI types and reductions]).
  MPI_Datatype half = MPI_DATATYPE_NULL, bfloat16 = MPI_DATATYPE_NULL;
  MPI_Op sum16 = MPI_OP_NULL, max16 = MPI_OP_NULL;
  // Note [Exit notices]: a duplicate of MPI_COMM_WORLD for them alone, and the ranks heard from.
  MPI_Comm notices = MPI_COMM_NULL;
  std::vector<int> ended;  // ranks whose program has ended, in the order heard (under MpiLock)
};

// Note [Exit notices]
// A rank whose program ends (exit, a return from main, Python's sys.exit) while another still
// waits for it in a collective cannot be told apart from a slow one by that collective alone,
// and its MPI_Finalize may itself wait for the others. So at exit each rank first sends every
// other rank a one-int notice on a communicator of their own; a rank waiting in a collective
// looks for notices between tests, and once a peer has ended it gives the collective a grace of
// at most 5 s (all a finished peer sends has been sent by then) before failing with a CommError
// that names the rank that ended. A healthy job's ranks send notices too, after their last
// collective, where nobody waits any more; the notices are received at exit if they arrived.
constexpr int kExitNoticeTag = 7001;

Runtime g_rt;
std::once_flag g_init_once;
std::terminate_handler g_prev_terminate = nullptr;

// Note [MPI thread level]: every MPI call loom makes holds this lock.
std::mutex& MpiLock() {
  static std::mutex mu;
  return mu;
}

std::string MpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return detail::Cat("MPI error ", code);
  return std::string(text, len);
}

// Note [MPI types and reductions]
// float32/float64/int32/int64/uint8 map to MPI's own types and MPI_SUM/MPI_MAX. bool is one
// byte holding 0 or 1, reduced as a logical or for both sum and max (MPI_MAX on bytes), so the
// result is still a bool. float16 and bfloat16 have no MPI type: each gets a 2-byte type of its
// own and user reductions that widen each pair to float32, add (or take the larger) and round
// back, as NCCL reduces halves; every step rounds, so a sum over N ranks carries up to N - 1
// roundings of the 16-bit format (that is the price of fp16 compression, paid knowingly).
template <bool kMax>
void Reduce16(void* in, void* inout, int* len, MPI_Datatype* type) {
  const bool bf = *type == g_rt.bfloat16;
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = bf ? BFloat16ToFloat(a[i]) : HalfToFloat(a[i]);
    const float y = bf ? BFloat16ToFloat(b[i]) : HalfToFloat(b[i]);
    const float r = kMax ? (x > y ? x : y) : x + y;
    b[i] = bf ? FloatToBFloat16(r) : FloatToHalf(r);
  }
}

struct MpiType {
  MPI_Datatype type;
  MPI_Op sum, max;
};

MpiType TypeOf(DType t) {
  switch (t) {
    case DType::kFloat32: return {MPI_FLOAT, MPI_SUM, MPI_MAX};
    case DType::kFloat64: return {MPI_DOUBLE, MPI_SUM, MPI_MAX};
    case DType::kInt32: return {MPI_INT32_T, MPI_SUM, MPI_MAX};
    case DType::kInt64: return {MPI_INT64_T, MPI_SUM, MPI_MAX};
    case DType::kUInt8: return {MPI_UINT8_T, MPI_SUM, MPI_MAX};
    case DType::kBool: return {MPI_UINT8_T, MPI_MAX, MPI_MAX};
    case DType::kFloat16: return {g_rt.half, g_rt.sum16, g_rt.max16};
    case DType::kBFloat16: return {g_rt.bfloat16, g_rt.sum16, g_rt.max16};
  }
  throw DTypeError(detail::Cat("[mpi] no MPI type for dtype ", int(t)));
}

[[noreturn]] void OnTerminate() {
  std::string what = "std::terminate was called without an active exception";
  if (std::exception_ptr e = std::current_exception()) {
    std::string type = "an exception of unknown type";
    if (const std::type_info* ti = abi::__cxa_current_exception_type()) {
      int status = 0;
      char* name = abi::__cxa_demangle(ti->name(), nullptr, nullptr, &status);
      type = status == 0 && name ? name : ti->name();
      std::free(name);
    }
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = detail::Cat("uncaught ", type, ": ", x.what());
    } catch (...) {
      what = detail::Cat("uncaught ", type);
    }
  }
  MpiAbortAllRanks(what, 1);  // returns only in a 1-rank world or without MPI
  if (g_prev_terminate) g_prev_terminate();
  std::abort();
}

// Records the exit notices that have arrived (Note [Exit notices]); call under MpiLock.
void ReceiveExitNotices() {
  if (g_rt.notices == MPI_COMM_NULL) return;
  for (;;) {
    int arrived = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kExitNoticeTag, g_rt.notices, &arrived, &st) != MPI_SUCCESS || !arrived) return;
    int who = -1;
    MPI_Recv(&who, 1, MPI_INT, st.MPI_SOURCE, kExitNoticeTag, g_rt.notices, MPI_STATUS_IGNORE);
    g_rt.ended.push_back(st.MPI_SOURCE);
  }
}

void SendExitNotices() {
  if (g_rt.notices == MPI_COMM_NULL || g_rt.world_size < 2) return;
  std::vector<MPI_Request> reqs;
  for (int r = 0; r < g_rt.world_size; ++r) {
    if (r == g_rt.world_rank) continue;
    reqs.emplace_back();
    MPI_Isend(&g_rt.world_rank, 1, MPI_INT, r, kExitNoticeTag, g_rt.notices, &reqs.back());
  }
  // One int each goes out eagerly; these complete without the peers receiving them.
  MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
}

void AtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  std::lock_guard<std::mutex> lock(MpiLock());
  SendExitNotices();
  if (g_rt.failed.load()) {
    std::fprintf(stderr,
                 "[comm] rank %d of %d: exiting after a collective failed; aborting every rank so that none is "
                 "left waiting for this one\n",
                 g_rt.world_rank, g_rt.world_size);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  ReceiveExitNotices();
  if (g_rt.owns) MPI_Finalize();
}

// OpenMPI loads its transports as plugins that resolve symbols of libmpi: when libmpi came in
// with RTLD_LOCAL (the Python extension loads libloom, which loads libmpi, that way) the
// plugins fail to load. Promote the already-loaded libmpi to RTLD_GLOBAL first.
void MakeLibmpiGlobal() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&MPI_Init_thread), &info) && info.dli_fname)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);  // a handle we keep for ever
}

void InitRuntime() {
  int initialized = 0, finalized = 0, provided = 0;
  MPI_Finalized(&finalized);
  LOOM_CHECK(!finalized, CommError, "[mpi] MPI was already finalised in this process: no communicator can be made");
  MPI_Initialized(&initialized);
  if (!initialized) {
    MakeLibmpiGlobal();
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    LOOM_CHECK(rc == MPI_SUCCESS, CommError, "[mpi] MPI_Init_thread failed: ", MpiErrorString(rc));
    g_rt.owns = true;
    std::atexit(AtExit);
  } else {
    MPI_Query_thread(&provided);
    std::atexit(AtExit);  // finalises nothing (the program does), aborts after a failure
  }
  LOOM_CHECK(provided >= MPI_THREAD_SERIALIZED, CommError,
             "[mpi] MPI provides thread level ", provided, " but loom calls it from its replay threads, one at a "
             "time, and needs MPI_THREAD_SERIALIZED (", MPI_THREAD_SERIALIZED,
             ") or more: initialise MPI with MPI_Init_thread(..., MPI_THREAD_SERIALIZED, ...)");
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rt.world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_rt.world_size);
  MPI_Type_contiguous(2, MPI_BYTE, &g_rt.half);
  MPI_Type_commit(&g_rt.half);
  MPI_Type_contiguous(2, MPI_BYTE, &g_rt.bfloat16);
  MPI_Type_commit(&g_rt.bfloat16);
  MPI_Op_create(&Reduce16<false>, /*commute=*/1, &g_rt.sum16);
  MPI_Op_create(&Reduce16<true>, /*commute=*/1, &g_rt.max16);
  MPI_Comm_dup(MPI_COMM_WORLD, &g_rt.notices);
  MPI_Comm_set_errhandler(g_rt.notices, MPI_ERRORS_RETURN);
  g_prev_terminate = std::set_terminate(OnTerminate);
}

const char* OpName(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "max"; }

double TimeoutFromEnv() {
  const char* s = std::getenv("LOOM_COMM_TIMEOUT_S");
  if (!s || !*s) return 25.0;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s, &end);
  // inf, and values too large for a double (1e400), mean no timeout (Note [Timeouts without end]).
  const bool overflow = errno == ERANGE && v == HUGE_VAL;
  LOOM_CHECK((errno == 0 || overflow) && end != s && *end == '\0' && v > 0, ValueError, "[LOOM_COMM_TIMEOUT_S] '", s,
             "' is not a positive number of seconds");
  return v;
}

}  // namespace

// ---- the communicator ----

// Note [Bounded waits]
// A blocking MPI collective waits for ever for a rank that died, exited or raised before
// reaching it. loom starts each collective non-blocking (MPI_Iallreduce, ...) and tests it until
// it completes or timeout_s passes (LOOM_COMM_TIMEOUT_S, default 25 s, so that a stuck job ends
// within 30 s). Then it throws CommError naming this rank and the
// collective, marks the communicator broken (every later call throws at once: its pending
// request can never be cancelled) and marks the process, so that at exit it calls MPI_Abort
// instead of MPI_Finalize and mpirun takes every rank down. A rank that dies or aborts is
// faster still: mpirun kills the job at once (tools/launch.sh asks it to). Waiting polls
// MPI_Test (which also drives OpenMPI's progress for non-blocking collectives): busily for the
// first millisecond (Note [Waiting without taking a core]), then yielding, then sleeping 50 us
// between tests.
//
// Note [Waiting without taking a core]
// Busy polling answers a collective soonest when every rank has a core of its own. On a host
// that runs more ranks than it has cores (tools/launch.sh -n 4 on 2 cores: a test machine, a
// laptop), a rank spinning in a wait takes the core from a rank that shares it and still has
// work before the collective, and every collective waits longer for it. There the wait polls
// without the busy first millisecond. Ranks on the host: OpenMPI's OMPI_COMM_WORLD_LOCAL_SIZE;
// cores: this process's CPU affinity. LOOM_COMM_SPIN_US sets the busy window (microseconds).
// Measured (4 ranks on 2 cores, the MLP at global batch 64, docs/benchmarks.md): the all-reduce
// step 11.9 and 11.7 -> 11.2 and 11.2 ms, the sharded one unchanged (12.4, 12.2 -> 12.3, 12.4).
struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  double timeout_s = 25.0;
  int64_t spin_us = 1000;  // Note [Waiting without taking a core]
  bool broken = false;
  bool check = false;  // Note [Ranks agree on each collective]
  std::string broken_by;  // the message of the failure that broke it
  int local_rank = -1;

  std::string Where(const std::string& call) const {
    return detail::Cat("[mpi] ", call, " on rank ", rank, " of ", size);
  }

  [[noreturn]] void Fail(const std::string& call, const std::string& why) {
    broken = true;
    g_rt.failed = true;
    broken_by = Where(call) + ": " + why;
    throw CommError(broken_by);
  }

  void CheckUsable(const std::string& call) const {
    if (broken)
      throw CommError(Where(call) + ": the communicator is broken by an earlier failure (" + broken_by + ")");
  }

  // Starts a non-blocking MPI call under the lock (Note [MPI thread level]).
  template <typename Start>
  void Run(const std::string& call, Start start) {
    CheckUsable(call);
    MPI_Request req = MPI_REQUEST_NULL;
    int rc;
    {
      std::lock_guard<std::mutex> lock(MpiLock());
      rc = start(&req);
    }
    if (rc != MPI_SUCCESS) Fail(call, MpiErrorString(rc));
    Wait(&req, call);
  }

  void Wait(MPI_Request* req, const std::string& call) {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    const auto deadline = WaitDeadline(start, timeout_s);  // Note [Timeouts without end]
    std::vector<int> ended;  // peers whose program ended while this collective waited
    auto grace_end = deadline;
    for (int64_t polls = 0;; ++polls) {
      int done = 0, rc;
      {
        std::lock_guard<std::mutex> lock(MpiLock());
        rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (!done && polls % 256 == 255) {
          ReceiveExitNotices();
          ended = g_rt.ended;
        }
      }
      if (rc != MPI_SUCCESS) Fail(call, MpiErrorString(rc));
      if (done) return;
      const auto now = Clock::now();
      if (!ended.empty() && grace_end == deadline)
        grace_end = std::min(deadline, now + std::chrono::seconds(5));  // Note [Exit notices]
      if (!ended.empty() && now > grace_end) {
        std::string who;
        for (int r : ended) who += detail::Cat(who.empty() ? "" : ", ", "rank ", r, " of ", size);
        Fail(call, detail::Cat(who, ended.size() > 1 ? " have" : " has",
                               " ended its program while this rank waits for it in this collective (it exited, "
                               "returned from main or raised before reaching it)"));
      }
      if (now > deadline)
        Fail(call, detail::Cat("did not complete within ", timeout_s,
                               " s: another rank died, exited or raised before reaching it, or is stuck elsewhere "
                               "(every rank must issue the same collectives in the same order; "
                               "LOOM_COMM_TIMEOUT_S sets the limit)"));
      if (now - start < std::chrono::microseconds(spin_us)) continue;  // Note [Waiting without taking a core]
      if (polls % 64 != 0) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
};

MpiCommunicator::MpiCommunicator() : impl_(std::make_unique<Impl>()) {
  std::call_once(g_init_once, InitRuntime);
  impl_->timeout_s = TimeoutFromEnv();
  impl_->check = CommCheckFromEnv();
  cpu_set_t cpus;
  const int cores = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  impl_->spin_us = WaitSpinMicros(std::getenv("LOOM_COMM_SPIN_US"), local ? std::atoi(local) : 1, cores);
  MPI_Comm dup = MPI_COMM_NULL;
  impl_->rank = g_rt.world_rank;
  impl_->size = g_rt.world_size;
  impl_->Run("make communicator (MPI_Comm_idup)",
             [&](MPI_Request* r) { return MPI_Comm_idup(MPI_COMM_WORLD, &dup, r); });
  impl_->comm = dup;
  // Errors come back as codes (thrown as CommError), never as MPI's default abort.
  MPI_Comm_set_errhandler(impl_->comm, MPI_ERRORS_RETURN);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // A broken communicator still has a pending request: freeing it would wait for that request.
  if (!finalized && !impl_->broken && impl_->comm != MPI_COMM_NULL) {
    std::lock_guard<std::mutex> lock(MpiLock());
    MPI_Comm_free(&impl_->comm);
  }
}

int MpiCommunicator::rank() const { return impl_->rank; }
int MpiCommunicator::size() const { return impl_->size; }
double MpiCommunicator::timeout_s() const { return impl_->timeout_s; }

void MpiCommunicator::set_timeout_s(double seconds) {
  LOOM_CHECK(seconds > 0, ValueError, "[mpi] timeout must be a positive number of seconds, not ", seconds);
  impl_->timeout_s = seconds;
}

namespace {
// MPI counts are ints: larger buffers go in pieces of at most kMaxPiece elements.
constexpr int64_t kMaxPiece = int64_t(1) << 30;

// Note [Ranks agree on each collective]
// MPI matches collectives by order alone: ranks that issue different ones (another count,
// dtype, reduction, root, or another collective) get OpenMPI's own error, a hang or silently
// wrong values. With the check on (LOOM_COMM_CHECK=1, or set_check; the test suites turn it
// on), each collective is preceded by an all-gather of its description (kind, dtype, count,
// reduction or root), and when the descriptions differ every rank throws the same CommError,
// naming each rank's call, before the collective itself is issued (so the communicator stays
// usable). It costs one small all-gather per collective, which is why it is off by default.
enum class CollectiveKind : int64_t { kAllReduce, kAllGather, kBroadcast, kBarrier, kReduceScatter };

std::string DescribeCollective(const int64_t* d) {
  const DType t = DType(d[1]);
  switch (CollectiveKind(d[0])) {
    case CollectiveKind::kAllReduce:
      return detail::Cat("all_reduce (", d[3] ? "max" : "sum", " of ", d[2], " ", Name(t), ")");
    case CollectiveKind::kAllGather: return detail::Cat("all_gather (", d[2], " ", Name(t), " per rank)");
    case CollectiveKind::kBroadcast: return detail::Cat("broadcast (", d[2], " ", Name(t), " from rank ", d[3], ")");
    case CollectiveKind::kBarrier: return "barrier";
    case CollectiveKind::kReduceScatter:
      return detail::Cat("reduce_scatter (", d[3] ? "max" : "sum", " of ", d[2], " ", Name(t), " per rank)");
  }
  return "an unknown collective";
}

void CheckBuffer(const char* call, const void* p, int64_t count) {
  LOOM_CHECK(count >= 0, ValueError, "[mpi] ", call, ": negative element count ", count);
  LOOM_CHECK(p != nullptr || count == 0, ValueError, "[mpi] ", call, ": null buffer for ", count, " elements");
}
}  // namespace

void MpiCommunicator::Agree(int64_t kind, DType dtype, int64_t count, int64_t extra) {
  if (!impl_->check) return;
  const int64_t mine[4] = {kind, int64_t(dtype), count, extra};
  std::vector<int64_t> all(size_t(impl_->size) * 4);
  const std::string call = DescribeCollective(mine);
  impl_->Run(call, [&](MPI_Request* q) {  // named as the collective: a rank that never comes says so
    return MPI_Iallgather(mine, 4, MPI_INT64_T, all.data(), 4, MPI_INT64_T, impl_->comm, q);
  });
  std::vector<std::string> calls;
  for (int r = 0; r < impl_->size; ++r) calls.push_back(DescribeCollective(&all[size_t(4 * r)]));
  CheckRanksAgree("mpi", calls);
}

void MpiCommunicator::set_check(bool on) { impl_->check = on; }

void MpiCommunicator::AllReduce(void* data, int64_t count, DType dtype, ReduceOp op) {
  CheckBuffer("all_reduce", data, count);
  Agree(int64_t(CollectiveKind::kAllReduce), dtype, count, op == ReduceOp::kMax);
  const MpiType t = TypeOf(dtype);
  const MPI_Op mop = op == ReduceOp::kSum ? t.sum : t.max;
  const std::string call = detail::Cat("all_reduce (", OpName(op), " of ", count, " ", Name(dtype), ")");
  int64_t done = 0;
  do {  // at least once: a collective of 0 elements is still issued, as on every other rank
    const int n = int(std::min(count - done, kMaxPiece));
    char* p = static_cast<char*>(data) + done * int64_t(SizeOf(dtype));
    impl_->Run(call, [&](MPI_Request* r) { return MPI_Iallreduce(MPI_IN_PLACE, p, n, t.type, mop, impl_->comm, r); });
    done += n;
  } while (done < count);
}

void MpiCommunicator::AllGather(const void* send, void* recv, int64_t count, DType dtype) {
  CheckBuffer("all_gather", send, count);
  CheckBuffer("all_gather", recv, count);
  LOOM_CHECK(count <= INT_MAX, ValueError, "[mpi] all_gather of ", count, " elements per rank: at most ", INT_MAX,
             " (MPI counts are ints)");
  Agree(int64_t(CollectiveKind::kAllGather), dtype, count, 0);
  const MpiType t = TypeOf(dtype);
  const int64_t bytes = count * int64_t(SizeOf(dtype));
  const char* s = static_cast<const char*>(send);
  char* r = static_cast<char*>(recv);
  // In place when send is this rank's own slot of recv; any other overlap would be read while
  // it is written.
  const bool in_place = s == r + impl_->rank * bytes;
  LOOM_CHECK(in_place || bytes == 0 || s + bytes <= r || r + impl_->size * bytes <= s, ValueError,
             "[mpi] all_gather: send overlaps recv but is not this rank's slot of it (rank ", impl_->rank, ")");
  const std::string call = detail::Cat("all_gather (", count, " ", Name(dtype), " per rank)");
  impl_->Run(call, [&](MPI_Request* q) {
    return MPI_Iallgather(in_place ? MPI_IN_PLACE : s, int(count), t.type, r, int(count), t.type, impl_->comm, q);
  });
}

void MpiCommunicator::ReduceScatter(void* data, int64_t count, DType dtype, ReduceOp op) {
  CheckBuffer("reduce_scatter", data, count);
  LOOM_CHECK(count <= INT_MAX, ValueError, "[mpi] reduce_scatter of ", count, " elements per rank: at most ", INT_MAX,
             " (MPI counts are ints)");
  Agree(int64_t(CollectiveKind::kReduceScatter), dtype, count, op == ReduceOp::kMax);
  const MpiType t = TypeOf(dtype);
  const MPI_Op mop = op == ReduceOp::kSum ? t.sum : t.max;
  const std::string call = detail::Cat("reduce_scatter (", OpName(op), " of ", count, " ", Name(dtype), " per rank)");
  // In place, MPI leaves this rank's reduced slot at the start of the buffer; it moves to the
  // rank's own slot (Communicator::ReduceScatter).
  impl_->Run(call, [&](MPI_Request* r) {
    return MPI_Ireduce_scatter_block(MPI_IN_PLACE, data, int(count), t.type, mop, impl_->comm, r);
  });
  const size_t bytes = size_t(count) * SizeOf(dtype);
  if (impl_->rank > 0 && bytes > 0) std::memmove(static_cast<char*>(data) + size_t(impl_->rank) * bytes, data, bytes);
}

void MpiCommunicator::Broadcast(void* data, int64_t count, DType dtype, int root) {
  CheckBuffer("broadcast", data, count);
  LOOM_CHECK(root >= 0 && root < impl_->size, ValueError, "[mpi] broadcast from rank ", root, ": the world has ranks 0 to ",
             impl_->size - 1);
  Agree(int64_t(CollectiveKind::kBroadcast), dtype, count, root);
  const MpiType t = TypeOf(dtype);
  const std::string call = detail::Cat("broadcast (", count, " ", Name(dtype), " from rank ", root, ")");
  int64_t done = 0;
  do {
    const int n = int(std::min(count - done, kMaxPiece));
    char* p = static_cast<char*>(data) + done * int64_t(SizeOf(dtype));
    impl_->Run(call, [&](MPI_Request* r) { return MPI_Ibcast(p, n, t.type, root, impl_->comm, r); });
    done += n;
  } while (done < count);
}

void MpiCommunicator::Barrier() {
  Agree(int64_t(CollectiveKind::kBarrier), DType::kUInt8, 0, 0);
  impl_->Run("barrier", [&](MPI_Request* r) { return MPI_Ibarrier(impl_->comm, r); });
}

int64_t WaitSpinMicros(const char* env, int ranks_on_host, int cores) {
  if (!env || !*env) return ranks_on_host > cores ? 0 : 1000;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(env, &end, 10);
  LOOM_CHECK(errno == 0 && end != env && *end == '\0' && v >= 0 && v <= 1000000, ValueError, "[LOOM_COMM_SPIN_US] '",
             env, "' is not a whole number of microseconds from 0 to 1000000");
  return int64_t(v);
}

int64_t MpiCommunicator::spin_us() const { return impl_->spin_us; }

int MpiCommunicator::LocalRank() {
  if (impl_->local_rank >= 0) return impl_->local_rank;
  // Every rank's host name, gathered with the bounded all_gather: the local rank is the number
  // of lower ranks on the same host.
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  {
    std::lock_guard<std::mutex> lock(MpiLock());
    MPI_Get_processor_name(name, &len);
  }
  std::vector<char> names(size_t(impl_->size) * MPI_MAX_PROCESSOR_NAME);
  AllGather(name, names.data(), MPI_MAX_PROCESSOR_NAME, DType::kUInt8);
  int local = 0;
  for (int r = 0; r < impl_->rank; ++r)
    local += std::strncmp(&names[size_t(r) * MPI_MAX_PROCESSOR_NAME], name, MPI_MAX_PROCESSOR_NAME) == 0;
  impl_->local_rank = local;
  return local;
}

void MarkCollectiveFailed() { g_rt.failed = true; }

bool MpiAbortAllRanks(const std::string& message, int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return false;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) return false;
  std::fprintf(stderr, "[comm] rank %d of %d: %s; aborting every rank\n", rank, size, message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  return true;  // not reached: MPI_Abort does not return
}

}  // namespace loom

// Note [Backends loaded on first use]: comm.cc in libloom.so reaches this library through this table.
extern "C" const void* loom_mpi_backend() {
  static const loom::MpiBackend backend{
      [] { return std::shared_ptr<loom::Communicator>(std::make_shared<loom::MpiCommunicator>()); },
      [](loom::Communicator& c) { return static_cast<loom::MpiCommunicator&>(c).LocalRank(); },
      [](const loom::Communicator& c) { return static_cast<const loom::MpiCommunicator&>(c).timeout_s(); },
      loom::MpiAbortAllRanks, loom::MarkCollectiveFailed};
  return &backend;
}
