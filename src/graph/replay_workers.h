// Worker threads for the dependency-driven replay. Kept alive between replays (a replay of a
// small step is shorter than starting threads). Each worker asks the device that its kernels do
// not fan out again on the same cores (Device::SetKernelFanOut, Note [Replay threads]). One more thread serves the collective lane
// (Note [A lane for collectives] in schedule.h) and runs nothing else.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "graph/schedule.h"

namespace loom {

class Device;

class ReplayWorkers {
 public:
  ReplayWorkers(int n, Device& device);
  ~ReplayWorkers();
  int size() const { return int(threads_.size()); }  // compute workers: the caller works too

  // Runs every op once, op i only after all its predecessors; ops of the collective lane on the
  // lane's thread (numbered size()), the others on the compute workers (lanes may be empty: all
  // compute). run(op, thread) may throw: the first exception stops the scheduling of new ops
  // and is rethrown here.
  void Run(const std::vector<std::vector<int>>& succs, const std::vector<int>& npreds,
           const std::vector<Lane>& lanes, const std::function<void(int, int)>& run);

 private:
  void Loop(int thread);
  void Work(int thread, std::unique_lock<std::mutex>& lock);
  void Ready(int op);  // under mu_: queues op on its lane

  Device& device_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  bool stop_ = false;
  uint64_t generation_ = 0;
  // The current run.
  const std::vector<std::vector<int>>* succs_ = nullptr;
  const std::function<void(int, int)>* run_ = nullptr;
  std::vector<int> remaining_;
  std::vector<int> ready_;
  std::vector<int> lane_ready_;  // ready ops of the collective lane
  const std::vector<Lane>* lanes_ = nullptr;
  int lane_thread_ = 0;
  int lane_busy_ = 0;
  size_t finished_ = 0, total_ = 0;
  int busy_ = 0;
  std::exception_ptr error_;
};

}  // namespace loom
