// The worker threads of the dependency-driven replay (replay_workers.h).
#include "graph/replay_workers.h"

#include <algorithm>
#include <functional>

#include "core/device.h"

namespace loom {

namespace {
// Note [Replay threads]: whether this thread's kernels may fan out, for a scope.
class FanOut {
 public:
  FanOut(Device& device, bool allowed) : device_(device), prev_(device.SetKernelFanOut(allowed)) {}
  ~FanOut() { device_.SetKernelFanOut(prev_); }
  FanOut(const FanOut&) = delete;
  FanOut& operator=(const FanOut&) = delete;

 private:
  Device& device_;
  bool prev_;
};
}  // namespace

ReplayWorkers::ReplayWorkers(int n, Device& device) : device_(device), lane_thread_(n) {
  for (int i = 1; i < n; ++i) threads_.emplace_back([this, i] { Loop(i); });
  threads_.emplace_back([this, n] { Loop(n); });  // the collective lane
}

ReplayWorkers::~ReplayWorkers() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplayWorkers::Loop(int thread) {
  FanOut serial(device_, false);
  uint64_t seen = 0;
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    Work(thread, l);
  }
}

void ReplayWorkers::Work(int thread, std::unique_lock<std::mutex>& l) {
  const bool lane = thread == lane_thread_;
  std::vector<int>& mine = lane ? lane_ready_ : ready_;
  while (true) {
    cv_.wait(l, [&] { return !mine.empty() || finished_ == total_ || error_ || stop_; });
    if (mine.empty() || error_ || stop_) {
      if (finished_ == total_ || error_ || stop_) return;
      continue;
    }
    // Note [Ready ops in issue order]
    // The earliest issued ready op first (a min-heap). A stack
    // would run depth-first and leave side branches (a layer's bias gradient) to the end of the
    // backward, delaying every all-reduce that waits for them (Note [Gradient buckets]).
    std::pop_heap(mine.begin(), mine.end(), std::greater<int>());
    int op = mine.back();
    mine.pop_back();
    // Note [Alone in flight]
    // An op dispatched when nothing else is ready or running is the
    // only one in flight until it ends (no other op can become ready before it finishes), so
    // it gets the whole pool for its own loops. Otherwise ops run serially inside, one core
    // each: a chain of ops is then no slower than serial replay.
    // A collective in flight holds no core (it waits on the wire): it does not count.
    const bool alone = !lane && ready_.empty() && busy_ == 0;
    ++(lane ? lane_busy_ : busy_);
    l.unlock();
    std::exception_ptr err;
    try {
      FanOut region(device_, !lane && alone);
      (*run_)(op, thread);
    } catch (...) {
      err = std::current_exception();
    }
    l.lock();
    --(lane ? lane_busy_ : busy_);
    if (err && !error_) error_ = err;
    ++finished_;
    if (!err)
      for (int s : (*succs_)[size_t(op)])
        if (--remaining_[size_t(s)] == 0) Ready(s);
    if (finished_ == total_ || error_) done_cv_.notify_all();
    cv_.notify_all();
  }
}

void ReplayWorkers::Ready(int op) {
  const bool collective = !lanes_->empty() && (*lanes_)[size_t(op)] == Lane::kCollective;
  std::vector<int>& q = collective ? lane_ready_ : ready_;
  q.push_back(op);
  std::push_heap(q.begin(), q.end(), std::greater<int>());
}

void ReplayWorkers::Run(const std::vector<std::vector<int>>& succs, const std::vector<int>& npreds,
                        const std::vector<Lane>& lanes, const std::function<void(int, int)>& run) {
  std::unique_lock<std::mutex> l(mu_);
  succs_ = &succs;
  run_ = &run;
  lanes_ = &lanes;
  remaining_ = npreds;
  ready_.clear();
  lane_ready_.clear();
  for (size_t i = 0; i < npreds.size(); ++i)
    if (npreds[i] == 0) Ready(int(i));
  finished_ = 0;
  total_ = npreds.size();
  error_ = nullptr;
  ++generation_;
  cv_.notify_all();
  {
    FanOut serial(device_, false);
    Work(0, l);
  }
  done_cv_.wait(l, [&] { return busy_ == 0 && lane_busy_ == 0 && (finished_ == total_ || error_); });
  std::exception_ptr err = error_;
  succs_ = nullptr;
  run_ = nullptr;
  lanes_ = nullptr;
  total_ = 0;
  finished_ = 0;
  if (err) std::rethrow_exception(err);
}

}  // namespace loom
