// The simulated communicator (simulated.h).
#include "io/comm/simulated.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/half.h"

namespace loom {

namespace {

double Beta(const SimulatedLink& l) { return l.gbps * 1e9 / 8; }  // bytes per second
double Alpha(const SimulatedLink& l) { return l.latency_us * 1e-6; }
double Log2Ceil(int n) { return std::ceil(std::log2(double(n))); }

template <typename T>
void Scale(void* data, int64_t count, T by) {
  T* p = static_cast<T*>(data);
  for (int64_t i = 0; i < count; ++i) p[i] = T(p[i] * by);
}

// data *= n, element-wise in `dtype`: the sum over n ranks holding the same values.
void TimesRanks(void* data, int64_t count, DType dtype, int n) {
  switch (dtype) {
    case DType::kFloat32: return Scale<float>(data, count, float(n));
    case DType::kFloat64: return Scale<double>(data, count, double(n));
    case DType::kInt32: return Scale<int32_t>(data, count, int32_t(n));
    case DType::kInt64: return Scale<int64_t>(data, count, int64_t(n));
    case DType::kUInt8: return Scale<uint8_t>(data, count, uint8_t(n));
    case DType::kFloat16:
    case DType::kBFloat16: {
      uint16_t* p = static_cast<uint16_t*>(data);
      const bool half = dtype == DType::kFloat16;
      for (int64_t i = 0; i < count; ++i) {
        const float v = (half ? HalfToFloat(p[i]) : BFloat16ToFloat(p[i])) * float(n);
        p[i] = half ? FloatToHalf(v) : FloatToBFloat16(v);
      }
      return;
    }
    case DType::kBool: return;  // a sum of booleans saturates: true stays true
  }
}

}  // namespace

double RingAllReduceSeconds(double bytes, const SimulatedLink& l) {
  if (l.ranks <= 1) return 0;
  const double n = l.ranks;
  return 2 * (n - 1) * Alpha(l) + 2 * (n - 1) / n * bytes / Beta(l);
}

double RingAllGatherSeconds(double bytes_each, const SimulatedLink& l) {
  if (l.ranks <= 1) return 0;
  const double n = l.ranks;
  return (n - 1) * Alpha(l) + (n - 1) * bytes_each / Beta(l);
}

double RingReduceScatterSeconds(double bytes, const SimulatedLink& l) {
  if (l.ranks <= 1) return 0;
  const double n = l.ranks;
  return (n - 1) * Alpha(l) + (n - 1) / n * bytes / Beta(l);
}

double TreeBroadcastSeconds(double bytes, const SimulatedLink& l) {
  return l.ranks <= 1 ? 0 : Log2Ceil(l.ranks) * (Alpha(l) + bytes / Beta(l));
}

double BarrierSeconds(const SimulatedLink& l) { return l.ranks <= 1 ? 0 : Log2Ceil(l.ranks) * Alpha(l); }

double TreeAllReduceSeconds(double bytes, const SimulatedLink& l) { return 2 * TreeBroadcastSeconds(bytes, l); }

double CollectiveSeconds(const std::string& name, double bytes, const SimulatedLink& l, bool tree) {
  if (name == "allreduce") return tree ? TreeAllReduceSeconds(bytes, l) : RingAllReduceSeconds(bytes, l);
  if (name == "allgather") return RingAllGatherSeconds(bytes, l);
  if (name == "broadcast") return TreeBroadcastSeconds(bytes, l);
  if (name == "reducescatter") return RingReduceScatterSeconds(bytes, l);
  if (name == "allgather_shards") return RingAllGatherSeconds(bytes / l.ranks, l);
  if (name == "barrier") return BarrierSeconds(l);
  throw ValueError(detail::Cat("[simulated comm] no model for the collective '", name, "'"));
}

double StragglerSeconds(const std::vector<double>& samples, int ranks) {
  LOOM_CHECK(!samples.empty(), ValueError, "[predict step] no samples of the time before a collective");
  LOOM_CHECK(ranks >= 1, ValueError, "[predict step] ranks must be at least 1, got ", ranks);
  std::vector<double> x = samples;
  std::sort(x.begin(), x.end());
  const double m = double(x.size());
  double mean = 0, largest = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    mean += x[k] / m;
    // P(the largest of N draws is the k-th smallest sample) = (k/M)^N - ((k-1)/M)^N
    largest += x[k] * (std::pow(double(k + 1) / m, ranks) - std::pow(double(k) / m, ranks));
  }
  return std::max(0.0, largest - mean);
}

double SharedCoresSeconds(double wall_s, double cpu_s, int ranks_on_host, int cores) {
  LOOM_CHECK(wall_s >= 0 && cpu_s >= 0, ValueError, "[predict step] an op's wall time (", wall_s, " s) and CPU time (",
             cpu_s, " s) must be non-negative");
  LOOM_CHECK(ranks_on_host >= 1 && cores >= 1, ValueError, "[predict step] ", ranks_on_host, " ranks on ", cores,
             " cores: both must be at least 1");
  return std::max(wall_s, cpu_s * double(ranks_on_host) / double(cores));
}

StepPrediction PredictStep(const std::vector<std::vector<int>>& succs, const std::vector<bool>& on_lane,
                           const std::vector<double>& costs) {
  const size_t n = costs.size();
  LOOM_CHECK(succs.size() == n && on_lane.size() == n, ValueError, "[predict step] ", n, " costs for ", succs.size(),
             " ops and ", on_lane.size(), " lanes");
  std::vector<int> npreds(n, 0);
  for (size_t i = 0; i < n; ++i)
    for (int s : succs[i]) {
      LOOM_CHECK(s > int(i) && size_t(s) < n, ValueError, "[predict step] edge ", i, " -> ", s,
                 " does not point forward in issue order");
      ++npreds[size_t(s)];
    }
  StepPrediction p;
  // Two resources (0: compute, 1: the collective lane), each running its ready op that comes
  // first in issue order, one at a time.
  std::set<int> ready[2];
  int running[2] = {-1, -1};
  double finish[2] = {0, 0}, now = 0;
  for (size_t i = 0; i < n; ++i) {
    (on_lane[i] ? p.comm_s : p.compute_s) += std::max(0.0, costs[i]);
    if (npreds[i] == 0) ready[on_lane[i] ? 1 : 0].insert(int(i));
  }
  for (size_t done = 0; done < n;) {
    for (int r = 0; r < 2; ++r)
      if (running[r] < 0 && !ready[r].empty()) {
        running[r] = *ready[r].begin();
        ready[r].erase(ready[r].begin());
        finish[r] = now + std::max(0.0, costs[size_t(running[r])]);
      }
    const int r = running[0] >= 0 && (running[1] < 0 || finish[0] <= finish[1]) ? 0 : 1;
    LOOM_ASSERT(running[r] >= 0, "[predict step] nothing runs with ", n - done, " ops left");
    now = finish[r];
    for (int s : succs[size_t(running[r])])
      if (--npreds[size_t(s)] == 0) ready[on_lane[size_t(s)] ? 1 : 0].insert(s);
    running[r] = -1;
    ++done;
  }
  p.step_s = now;
  p.exposed_s = p.step_s - p.compute_s;
  return p;
}

SimulatedCommunicator::SimulatedCommunicator(SimulatedLink link) : link_(link) {
  LOOM_CHECK(link.ranks >= 1, ValueError, "[simulated comm] ranks must be at least 1, got ", link.ranks);
  LOOM_CHECK(link.gbps > 0 && std::isfinite(link.gbps), ValueError,
             "[simulated comm] the link's bandwidth must be a positive number of Gbit/s, got ", link.gbps);
  LOOM_CHECK(link.latency_us >= 0 && std::isfinite(link.latency_us), ValueError,
             "[simulated comm] the latency must be >= 0 microseconds, got ", link.latency_us);
}

void SimulatedCommunicator::Wait(double seconds, double bytes) {
  const auto start = std::chrono::steady_clock::now();
  if (seconds > 0)
    std::this_thread::sleep_until(start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                              std::chrono::duration<double>(seconds)));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.collectives;
  stats_.bytes += bytes;
  stats_.modelled_s += seconds;
  stats_.waited_s += waited;
}

void SimulatedCommunicator::AllReduce(void* data, int64_t count, DType dtype, ReduceOp op) {
  LOOM_CHECK(count >= 0, ValueError, "[simulated comm] all_reduce of ", count, " elements");
  if (op == ReduceOp::kSum) TimesRanks(data, count, dtype, link_.ranks);
  const double bytes = double(count) * double(SizeOf(dtype));
  Wait(RingAllReduceSeconds(bytes, link_), bytes);
}

void SimulatedCommunicator::AllGather(const void* send, void* recv, int64_t count, DType dtype) {
  LOOM_CHECK(count >= 0, ValueError, "[simulated comm] all_gather of ", count, " elements");
  const size_t bytes = size_t(count) * SizeOf(dtype);
  // Rank r's part lies at r * bytes; this rank's is the first, and send may be it (in place).
  if (bytes > 0 && recv != send) std::memmove(recv, send, bytes);
  for (int r = 1; r < link_.ranks; ++r) std::memcpy(static_cast<char*>(recv) + size_t(r) * bytes, recv, bytes);
  Wait(RingAllGatherSeconds(double(bytes), link_), double(bytes));
}

void SimulatedCommunicator::ReduceScatter(void* data, int64_t count, DType dtype, ReduceOp op) {
  LOOM_CHECK(count >= 0, ValueError, "[simulated comm] reduce_scatter of ", count, " elements per rank");
  if (op == ReduceOp::kSum) TimesRanks(data, count, dtype, link_.ranks);  // this rank's slot is the first
  const double bytes = double(count) * double(SizeOf(dtype)) * link_.ranks;
  Wait(RingReduceScatterSeconds(bytes, link_), bytes);
}

void SimulatedCommunicator::Broadcast(void* data, int64_t count, DType dtype, int root) {
  LOOM_CHECK(root >= 0 && root < link_.ranks, ValueError, "[simulated comm] broadcast from rank ", root,
             ": the world has ranks 0 to ", link_.ranks - 1);
  const double bytes = double(count) * double(SizeOf(dtype));
  Wait(TreeBroadcastSeconds(bytes, link_), bytes);
}

void SimulatedCommunicator::Barrier() { Wait(BarrierSeconds(link_), 0); }

SimulatedStats SimulatedCommunicator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void SimulatedCommunicator::ResetStats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = {};
}

}  // namespace loom
