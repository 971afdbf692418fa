// Step 4 of graph.h: the schedule of the parallel replay — which op must finish before which may
// start — and the choice between parallel and serial replay. Pure functions (no device, no
// clock): test/graph/schedule_test.cc drives them with synthetic graphs and injected op costs.
//
// Note [Schedule edges]
// The analysis' edges (Note [Dependencies]) order every pair of ops that touch a block in a
// conflicting way. Planned memory adds two kinds, because blocks then share bytes:
//   in-place   an op writing into its input's memory (Note [In-place reuse]) waits for every
//              other op touching that input;
//   reuse      when two plan entries share arena bytes, every op touching the earlier one
//              finishes before the first op of the later one starts.
// Every edge points forward in issue order, so issue order is always a valid schedule.
#pragma once

#include <vector>

#include "graph/analysis.h"
#include "graph/capture.h"
#include "graph/plan.h"

namespace loom {

// Note [A lane for collectives]
// A collective (allreduce, ...) mostly waits: for the other ranks and the wire. On a worker of
// the parallel replay it would hold a core doing nothing, and with few workers it would stall
// the backward it is meant to overlap. So collectives run on a lane of their own, one extra
// thread of the replay that runs nothing else; their token (Note [The collective token]) keeps
// them in issue order there, and the compute workers go on with every op that does not depend
// on them (the backward of earlier layers, Note [Gradient buckets]).
enum class Lane : uint8_t { kCompute = 0, kCollective = 1 };

struct Schedule {
  std::vector<std::vector<int>> succs;  // per op: the ops waiting for it, ascending
  std::vector<int> npreds;              // per op: how many ops it waits for
  std::vector<Lane> lane;               // per op: where the parallel replay runs it
};

// layout: empty for dynamic memory (no in-place reuse, no shared bytes).
Schedule BuildSchedule(const OpList& ops, const Analysis& analysis, const MemoryLayout& layout);

// Note [Parallel or serial]
// On a few cores, one op at a time with the whole pool inside it (serial replay) usually beats
// several ops at once with one core each, and a chain of ops (an MLP) has nothing to run side by
// side anyway. So the first parallel replay runs serially and times every op (each with the
// pool's `pool_threads` cores), and later parallel replays use the dependency-driven schedule
// when either holds:
//   parallelism  the total op time over the longest chain of dependent ops (with those times)
//                is at least 0.9 x the worker count: enough independent work for the workers;
//   overlap      the parallel replay, played out with those times, takes at most 0.9 x the
//                serial one (the sum of all times).
// Else they run serially too (GraphStats::parallel_runs_serial). The play-out follows the
// replay's rules (graph/replay_workers.cc): ready ops in issue order; collectives on their own
// lane, one at a time, holding no core (Note [A lane for collectives]); a compute op alone in
// flight gets the whole pool (Note [Alone in flight]), any other one core, so it takes
// pool_threads times as long (the pessimistic end: as if every kernel used the whole pool), on
// at most min(workers, pool_threads) compute workers. Without collectives the play-out is
// never faster than the serial sum, so the parallelism rule decides alone. With
// collectives it is what keeps a chain (an MLP with gradient buckets) on the parallel replay
// when the all-reduce waits it hides behind the backward are worth it: the parallelism rule,
// which counts each wait as work on the critical path, sees only a chain. The choice is made
// once per graph, from one measurement, and results are the same either way (a parallel replay
// agrees with a serial one to rounding).
struct ParallelChoice {
  double parallelism = 1;     // total cost / cost of the longest dependent chain
  double serial_cost = 0;     // the sum of the op costs
  double parallel_cost = 0;   // the parallel replay, played out
  bool run_serially = true;
};
// op_costs: per op, in any unit (the replay measures microseconds). pool_threads: the cores the
// measured kernels used; 0: as many as workers. A schedule without lanes is all compute.
ParallelChoice ChooseParallelOrSerial(const Schedule& schedule, const std::vector<double>& op_costs, int workers,
                                      int pool_threads = 0);

}  // namespace loom
