#include "device/cpu/parallel.h"

#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "device/cpu/blas.h"

namespace loom {

namespace {
thread_local bool t_serial = false;

class Pool {
 public:
  explicit Pool(int n) : n_(n) {
    for (int i = 1; i < n_; ++i) workers_.emplace_back([this, i] { Loop(i); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return n_; }

  // Runs job(i) for i in [0, parts) with the caller doing part 0.
  void Run(int parts, const std::function<void(int)>& job) {
    std::unique_lock<std::mutex> run_lock(run_mu_);  // one fan-out at a time
    {
      std::lock_guard<std::mutex> l(mu_);
      job_ = &job;
      parts_ = parts;
      next_ = 1;
      done_ = 1;
      ++generation_;
      published_.store(generation_, std::memory_order_release);
    }
    cv_.notify_all();
    // The caller stays serial until every part is done: parts it picks up below must not fan
    // out again (it holds run_mu_, so a nested Run would deadlock).
    bool prev = t_serial;
    t_serial = true;
    job(0);
    std::unique_lock<std::mutex> l(mu_);
    TakeWork(l);
    done_cv_.wait(l, [&] { return done_ == parts_; });
    job_ = nullptr;
    t_serial = prev;
  }

 private:
  void TakeWork(std::unique_lock<std::mutex>& l) {
    while (job_ && next_ < parts_) {
      int i = next_++;
      const std::function<void(int)>* job = job_;
      l.unlock();
      (*job)(i);
      l.lock();
      if (++done_ == parts_) done_cv_.notify_all();
    }
  }
  void Loop(int) {
    t_serial = true;
    uint64_t seen = 0;
    while (true) {
      // Spin briefly before sleeping: kernels issue fan-outs microseconds apart (the GEMMs of a
      // step), and waking a sleeping thread costs tens of microseconds each time.
      auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
      for (int i = 0; published_.load(std::memory_order_acquire) == seen && !stopping_.load(); ++i) {
        if ((i & 255) == 255 && std::chrono::steady_clock::now() > spin_until) break;
        CpuRelax();
      }
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      TakeWork(l);
    }
  }
  static void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  static constexpr int kSpinMicros = 50;
  std::atomic<uint64_t> published_{0};
  std::atomic<bool> stopping_{false};

  int n_;
  std::vector<std::thread> workers_;
  std::mutex mu_, run_mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  int parts_ = 0, next_ = 0, done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

int Cores() {
  unsigned h = std::thread::hardware_concurrency();
  return h ? int(h) : 1;
}

// Note [Thread counts] in parallel.h.
void CheckThreadCount(int64_t n, const char* what) {
  LOOM_CHECK(n >= 1, ValueError, "[", what, "] ", n, " threads: at least 1 is needed");
  LOOM_CHECK(n <= MaxThreads(), ValueError, "[", what, "] ", n, " threads is more than ", MaxThreads(),
             ", 4 x the ", Cores(), " cores of this machine (more threads than that only contend)");
}

int DefaultThreads() {
  const char* s = std::getenv("LOOM_NUM_THREADS");
  if (!s || !*s) return Cores();
  char* end = nullptr;
  errno = 0;
  long long n = std::strtoll(s, &end, 10);
  LOOM_CHECK(errno == 0 && end != s && *end == '\0', ValueError, "[LOOM_NUM_THREADS] '", s,
             "' is not a thread count: give an integer from 1 to ", MaxThreads(), " (4 x the ", Cores(),
             " cores), or unset it for ", Cores());
  CheckThreadCount(n, "LOOM_NUM_THREADS");
  return int(n);
}

// The pool is shared: SetNumThreads swaps in a new one while another thread may be inside
// ParallelFor on the old one, which lives until that call returns (its last holder joins it).
std::mutex g_pool_mu;
std::shared_ptr<Pool>& PoolSlot() {
  static std::shared_ptr<Pool> p;
  return p;
}
std::shared_ptr<Pool> GetPool() {
  std::lock_guard<std::mutex> l(g_pool_mu);
  auto& p = PoolSlot();
  if (!p) {
    int n = DefaultThreads();
    p = std::make_shared<Pool>(n);
    BlasUseOneThread();  // Note [One thread pool]
  }
  return p;
}
}  // namespace

int NumThreads() { return GetPool()->size(); }

int MaxThreads() { return 4 * Cores(); }

void SetNumThreads(int64_t n) {
  CheckThreadCount(n, "set_num_threads");
  auto fresh = std::make_shared<Pool>(int(n));
  std::shared_ptr<Pool> old;  // joined outside the lock, once no ParallelFor holds it
  {
    std::lock_guard<std::mutex> l(g_pool_mu);
    old = std::exchange(PoolSlot(), std::move(fresh));
  }
}

void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (t_serial || n <= grain) {
    f(0, n);
    return;
  }
  std::shared_ptr<Pool> held = GetPool();
  Pool& pool = *held;
  int64_t parts = std::min<int64_t>(pool.size(), (n + grain - 1) / grain);
  if (parts <= 1) {
    f(0, n);
    return;
  }
  int64_t chunk = (n + parts - 1) / parts;
  pool.Run(int(parts), [&](int i) {
    int64_t b = i * chunk, e = std::min(n, b + chunk);
    if (b < e) f(b, e);
  });
}

SerialRegion::SerialRegion(bool serial) : prev_(SetSerialRegion(serial)) {}
SerialRegion::~SerialRegion() { t_serial = prev_; }

bool SetSerialRegion(bool serial) {
  const bool prev = t_serial;
  t_serial = serial;
  return prev;
}

}  // namespace loom
