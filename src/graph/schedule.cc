// Step 4 of graph.h: schedule edges and the parallel-or-serial choice (schedule.h).
#include "graph/schedule.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>

#include "core/error.h"
#include "graph/ranks.h"

namespace loom {

Schedule BuildSchedule(const OpList& ops, const Analysis& analysis, const MemoryLayout& layout) {
  const size_t n = ops.size();
  std::vector<std::vector<int>> preds = analysis.preds;  // Note [Dependencies]
  // Note [Schedule edges], in-place: the op waits for every other user of the input it overwrites.
  for (const InPlace& ip : layout.inplace) {
    const std::vector<int> touching = Touching(ops.uses[size_t(ip.in)]);
    auto& p = preds[size_t(ip.op)];
    p.insert(p.end(), touching.begin(), touching.end());
  }
  // Note [Schedule edges], reuse: entries sharing bytes, the earlier dead before the later is born.
  const auto& entries = layout.entries;
  for (size_t x = 0; x < entries.size(); ++x) {
    for (size_t y = 0; y < entries.size(); ++y) {
      const Lifetime &a = entries[x], &c = entries[y];
      if (a.end >= c.begin) continue;
      const size_t a0 = layout.packing.offsets[x], a1 = a0 + a.bytes;
      const size_t c0 = layout.packing.offsets[y], c1 = c0 + c.bytes;
      if (!(a0 < c1 && c0 < a1)) continue;
      auto& p = preds[size_t(c.begin)];
      p.insert(p.end(), layout.entry_ops[x].begin(), layout.entry_ops[x].end());
    }
  }
  Schedule s;
  s.succs.assign(n, {});
  s.npreds.assign(n, 0);
  s.lane.assign(n, Lane::kCompute);
  for (size_t i = 0; i < n; ++i)
    if (IsCollective(ops.ops[i])) s.lane[i] = Lane::kCollective;  // Note [A lane for collectives]
  for (size_t i = 0; i < n; ++i) {
    std::sort(preds[i].begin(), preds[i].end());
    preds[i].erase(std::unique(preds[i].begin(), preds[i].end()), preds[i].end());
    for (int p : preds[i]) {
      if (p == int(i)) continue;
      LOOM_ASSERT(p < int(i), "schedule edge ", p, " -> ", i, " points backwards");
      s.succs[size_t(p)].push_back(int(i));
      s.npreds[i]++;
    }
  }
  return s;
}

namespace {

// Note [Parallel or serial]: the parallel replay played out with the measured costs, in the
// replay's order (replay_workers.cc); returns when its last op ends.
double PlayOutParallelReplay(const Schedule& schedule, const std::vector<double>& costs, int slots,
                             double slowdown) {
  const size_t n = costs.size();
  std::vector<int> waiting(n, 0);
  for (size_t i = 0; i < n; ++i)
    for (int s : schedule.succs[i]) waiting[size_t(s)]++;
  auto on_lane = [&](size_t i) { return !schedule.lane.empty() && schedule.lane[i] == Lane::kCollective; };
  using MinHeap = std::priority_queue<int, std::vector<int>, std::greater<int>>;  // issue order
  MinHeap ready, lane_ready;
  using Running = std::pair<double, int>;  // (end, op)
  std::priority_queue<Running, std::vector<Running>, std::greater<Running>> running;
  auto make_ready = [&](size_t i) { (on_lane(i) ? lane_ready : ready).push(int(i)); };
  for (size_t i = 0; i < n; ++i)
    if (waiting[i] == 0) make_ready(i);
  double now = 0;
  int busy = 0;
  bool lane_busy = false;
  while (true) {
    while (busy < slots && !ready.empty()) {
      const int op = ready.top();
      ready.pop();
      const bool alone = ready.empty() && busy == 0;  // Note [Alone in flight]
      running.emplace(now + costs[size_t(op)] * (alone ? 1.0 : slowdown), op);
      ++busy;
    }
    if (!lane_busy && !lane_ready.empty()) {
      const int op = lane_ready.top();
      lane_ready.pop();
      running.emplace(now + costs[size_t(op)], op);
      lane_busy = true;
    }
    if (running.empty()) break;
    now = running.top().first;
    while (!running.empty() && running.top().first <= now) {
      const int op = running.top().second;
      running.pop();
      if (on_lane(size_t(op))) lane_busy = false;
      else --busy;
      for (int s : schedule.succs[size_t(op)])
        if (--waiting[size_t(s)] == 0) make_ready(size_t(s));
    }
  }
  return now;
}

}  // namespace

ParallelChoice ChooseParallelOrSerial(const Schedule& schedule, const std::vector<double>& op_costs, int workers,
                                      int pool_threads) {
  const size_t n = schedule.succs.size();
  LOOM_ASSERT(op_costs.size() == n, "op costs for ", op_costs.size(), " ops, schedule of ", n);
  LOOM_ASSERT(schedule.lane.empty() || schedule.lane.size() == n, "lanes for ", schedule.lane.size(),
              " ops, schedule of ", n);
  const int w = std::max(1, workers), pool = pool_threads > 0 ? pool_threads : w;
  std::vector<double> costs(n);
  for (size_t i = 0; i < n; ++i) costs[i] = std::max(0.0, op_costs[i]);
  // Earliest finish of every op with unlimited workers: every edge points forward.
  std::vector<double> start(n, 0.0);
  double total = 0, longest = 0;
  for (size_t i = 0; i < n; ++i) {
    const double finish = start[i] + costs[i];
    total += costs[i];
    longest = std::max(longest, finish);
    for (int s : schedule.succs[i]) start[size_t(s)] = std::max(start[size_t(s)], finish);
  }
  ParallelChoice c;
  c.parallelism = longest > 0 ? total / longest : 1.0;
  c.serial_cost = total;
  c.parallel_cost = PlayOutParallelReplay(schedule, costs, std::min(w, pool), double(pool));
  const bool enough_work = c.parallelism >= 0.9 * w;
  const bool overlap_pays = total > 0 && c.parallel_cost <= 0.9 * total;
  c.run_serially = !enough_work && !overlap_pays;
  return c;
}

}  // namespace loom
