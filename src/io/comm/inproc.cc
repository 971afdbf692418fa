// The in-process communicator (inproc.h).
#include "io/comm/inproc.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/half.h"

namespace loom {

namespace {

enum class Kind : uint8_t { kAllReduce, kAllGather, kBroadcast, kBarrier, kReduceScatter };
const char* Name(Kind k) {
  static const char* names[] = {"allreduce", "allgather", "broadcast", "barrier", "reducescatter"};
  return names[int(k)];
}

struct Call {
  Kind kind = Kind::kBarrier;
  const void* send = nullptr;
  void* recv = nullptr;
  int64_t count = 0;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  bool operator==(const Call& o) const {
    return kind == o.kind && count == o.count && dtype == o.dtype && op == o.op && root == o.root;
  }
  std::string Describe() const {
    return detail::Cat(Name(kind), "(", count, " x ", loom::Name(dtype), kind == Kind::kAllReduce || kind == Kind::kReduceScatter ?
                       (op == ReduceOp::kSum ? ", sum" : ", max") : "",
                       kind == Kind::kBroadcast ? detail::Cat(", root ", root) : "", ")");
  }
};

float LoadSixteen(const void* p, int64_t i, DType t) {
  const uint16_t v = static_cast<const uint16_t*>(p)[i];
  return t == DType::kFloat16 ? HalfToFloat(v) : BFloat16ToFloat(v);
}

}  // namespace

struct InProcGroup {
  InProcGroup(int n, InProcOptions o) : size(n), options(o), calls(size_t(n)), arrived(size_t(n), 0) {}
  const int size;
  const InProcOptions options;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Call> calls;
  std::vector<char> arrived;
  int num_arrived = 0, num_left = 0;
  bool leaving = false;     // the result is ready; ranks copy it out
  std::string failure;      // non-empty: the group is broken, every collective throws this
  std::vector<char> result;

  // The element-wise reduction over ranks, in rank order (Note [In-process rendezvous]).
  template <typename T>
  void Reduce(int64_t n, ReduceOp op) {
    result.assign(size_t(n) * sizeof(T), 0);
    T* out = reinterpret_cast<T*>(result.data());
    std::memcpy(out, calls[0].send, size_t(n) * sizeof(T));
    for (int r = 1; r < size; ++r) {
      const T* in = static_cast<const T*>(calls[size_t(r)].send);
      for (int64_t i = 0; i < n; ++i) out[i] = op == ReduceOp::kSum ? T(out[i] + in[i]) : std::max(out[i], in[i]);
    }
  }
  void ReduceSixteen(int64_t n, DType t, ReduceOp op) {
    std::vector<float> acc(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) acc[size_t(i)] = LoadSixteen(calls[0].send, i, t);
    for (int r = 1; r < size; ++r)
      for (int64_t i = 0; i < n; ++i) {
        const float v = LoadSixteen(calls[size_t(r)].send, i, t);
        acc[size_t(i)] = op == ReduceOp::kSum ? acc[size_t(i)] + v : std::max(acc[size_t(i)], v);
      }
    result.resize(size_t(n) * 2);
    uint16_t* out = reinterpret_cast<uint16_t*>(result.data());
    for (int64_t i = 0; i < n; ++i)
      out[i] = t == DType::kFloat16 ? FloatToHalf(acc[size_t(i)]) : FloatToBFloat16(acc[size_t(i)]);
  }

  // Run by the last rank to arrive, under the lock.
  void Compute() {
    const Call& c = calls[0];
    for (int r = 1; r < size; ++r)
      if (!(calls[size_t(r)] == c)) {
        failure = detail::Cat("ranks called different collectives: rank 0 ", c.Describe(), ", rank ", r, " ",
                              calls[size_t(r)].Describe(), " (Note [Collectives keep issue order])");
        return;
      }
    const size_t bytes = size_t(c.count) * SizeOf(c.dtype);
    switch (c.kind) {
      case Kind::kAllReduce:
      case Kind::kReduceScatter: {  // a reduce-scatter reduces every slot; each rank copies out its own
        const int64_t n = c.kind == Kind::kAllReduce ? c.count : c.count * size;
        switch (c.dtype) {
          case DType::kFloat32: Reduce<float>(n, c.op); break;
          case DType::kFloat64: Reduce<double>(n, c.op); break;
          case DType::kInt32: Reduce<int32_t>(n, c.op); break;
          case DType::kInt64: Reduce<int64_t>(n, c.op); break;
          case DType::kFloat16:
          case DType::kBFloat16: ReduceSixteen(n, c.dtype, c.op); break;
          default: failure = detail::Cat(Name(c.kind), " of ", loom::Name(c.dtype), " is not supported"); return;
        }
        break;
      }
      case Kind::kAllGather:
        result.resize(bytes * size_t(size));
        for (int r = 0; r < size; ++r)
          if (bytes) std::memcpy(result.data() + bytes * size_t(r), calls[size_t(r)].send, bytes);
        break;
      case Kind::kBroadcast:
        if (c.root < 0 || c.root >= size) {
          failure = detail::Cat("broadcast from root ", c.root, " in a group of ", size);
          return;
        }
        result.assign(static_cast<const char*>(calls[size_t(c.root)].send),
                      static_cast<const char*>(calls[size_t(c.root)].send) + bytes);
        break;
      case Kind::kBarrier: result.clear(); break;
    }
  }

  void Throw(int rank, const Call& c) const {
    throw CommError(detail::Cat("[inproc ", Name(c.kind), "] on rank ", rank, " of ", size, ": ", failure));
  }

  void Run(int rank, const Call& c) {
    const auto deadline = WaitDeadline(std::chrono::steady_clock::now(), options.timeout_s);
    std::unique_lock<std::mutex> l(mu);
    auto missing = [&] {
      std::string who;
      for (int r = 0; r < size; ++r)
        if (!arrived[size_t(r)]) who += (who.empty() ? "" : ", ") + std::to_string(r);
      return who;
    };
    // Wait for the previous meeting to empty.
    if (!cv.wait_until(l, deadline, [&] { return !leaving || !failure.empty(); }) && failure.empty())
      failure = detail::Cat("ranks ", missing(), " did not leave the previous collective within ", options.timeout_s,
                            " s");
    if (!failure.empty()) {
      cv.notify_all();
      Throw(rank, c);
    }
    calls[size_t(rank)] = c;
    arrived[size_t(rank)] = 1;
    if (++num_arrived == size) {
      Compute();
      leaving = true;
      cv.notify_all();
    } else if (!cv.wait_until(l, deadline, [&] { return leaving || !failure.empty(); }) && failure.empty()) {
      failure = detail::Cat("rank(s) ", missing(), " did not reach ", c.Describe(), " within ", options.timeout_s,
                            " s");
    }
    if (!failure.empty()) {
      cv.notify_all();
      Throw(rank, c);
    }
    // Copy the result out.
    const size_t bytes = size_t(c.count) * SizeOf(c.dtype);
    if (c.kind == Kind::kAllGather) {
      if (!result.empty()) std::memcpy(c.recv, result.data(), result.size());
    } else if (c.kind == Kind::kReduceScatter) {
      if (bytes) std::memcpy(static_cast<char*>(c.recv) + bytes * size_t(rank), result.data() + bytes * size_t(rank), bytes);
    } else if (c.kind != Kind::kBarrier && bytes) {
      std::memcpy(c.recv, result.data(), bytes);
    }
    if (++num_left == size) {
      num_arrived = num_left = 0;
      std::fill(arrived.begin(), arrived.end(), 0);
      leaving = false;
      cv.notify_all();
    }
    l.unlock();
    if (options.latency_ms > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(options.latency_ms));
  }

  void Fail(int rank, const std::string& reason) {
    std::lock_guard<std::mutex> l(mu);
    if (failure.empty()) failure = detail::Cat("rank ", rank, " failed: ", reason);
    cv.notify_all();
  }
};

InProcCommunicator::InProcCommunicator(std::shared_ptr<InProcGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {}

int InProcCommunicator::size() const { return group_->size; }

void InProcCommunicator::AllReduce(void* data, int64_t count, DType dtype, ReduceOp op) {
  group_->Run(rank_, Call{Kind::kAllReduce, data, data, count, dtype, op, 0});
}

void InProcCommunicator::ReduceScatter(void* data, int64_t count, DType dtype, ReduceOp op) {
  group_->Run(rank_, Call{Kind::kReduceScatter, data, data, count, dtype, op, 0});
}

void InProcCommunicator::AllGather(const void* send, void* recv, int64_t count, DType dtype) {
  group_->Run(rank_, Call{Kind::kAllGather, send, recv, count, dtype, ReduceOp::kSum, 0});
}

void InProcCommunicator::Broadcast(void* data, int64_t count, DType dtype, int root) {
  group_->Run(rank_, Call{Kind::kBroadcast, data, data, count, dtype, ReduceOp::kSum, root});
}

void InProcCommunicator::Barrier() { group_->Run(rank_, Call{}); }

void InProcCommunicator::Fail(const std::string& reason) noexcept {
  try {
    group_->Fail(rank_, reason);
  } catch (...) {
  }
}

std::vector<std::shared_ptr<InProcCommunicator>> MakeInProcGroup(int n, InProcOptions options) {
  LOOM_CHECK(n >= 1, ValueError, "[inproc] a group needs at least one rank, got ", n);
  LOOM_CHECK(options.timeout_s > 0 && options.latency_ms >= 0, ValueError, "[inproc] timeout ", options.timeout_s,
             " s and latency ", options.latency_ms, " ms must be positive");
  auto group = std::make_shared<InProcGroup>(n, options);
  std::vector<std::shared_ptr<InProcCommunicator>> comms;
  for (int r = 0; r < n; ++r) comms.push_back(std::make_shared<InProcCommunicator>(group, r));
  return comms;
}

std::vector<std::exception_ptr> RunInProcRanks(
    int n, const std::function<void(int, const std::shared_ptr<Communicator>&)>& fn, InProcOptions options) {
  auto comms = MakeInProcGroup(n, options);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r, comms[size_t(r)]);
      } catch (const std::exception& e) {
        errors[size_t(r)] = std::current_exception();
        comms[size_t(r)]->Fail(e.what());
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
        comms[size_t(r)]->Fail("unknown exception");
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace loom
