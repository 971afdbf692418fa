// The simulated communicator: this process plays rank 0 of N ranks on a modelled network, so the
// scaling of data-parallel training can be estimated on one machine (loom-bench
// --simulate-ranks N --link-gbps G --latency-us L).
//
// Note [Simulated ranks]
// The other N - 1 ranks are assumed to run the same step on their own machine at the same speed
// with their own data, so they would arrive at every collective together with this one. A
// collective then costs only the network's time, modelled with the alpha-beta model of the usual
// algorithms (alpha: the per-message latency, beta: the link's bytes per second; Thakur,
// Rabenseifner and Gropp, "Optimization of collective communication operations in MPICH", 2005):
//   all-reduce, ring (reduce-scatter then all-gather):  2 (N-1) alpha + 2 (N-1)/N bytes / beta
//   all-gather, ring:                                     (N-1) alpha +   (N-1) bytes_each / beta
//   reduce-scatter, ring:                                 (N-1) alpha + (N-1)/N bytes / beta
//   broadcast, binomial tree:                ceil(log2 N) (alpha + bytes / beta)
//   all-reduce, tree (reduce, then broadcast):  2 ceil(log2 N) (alpha + bytes / beta) (predictions)
//   barrier, dissemination:                  ceil(log2 N) alpha
// The collective waits that long, for real: it sleeps until its modelled end on the thread that
// issued it (the replay's collective lane), so compute on other threads goes on meanwhile and the
// step time shows how much of the communication the schedule hides behind backward, and how much
// stays exposed. No bytes move, so the host's own memory bandwidth is not counted: the model is
// of a network link, not of a reduction's arithmetic.
// The values are those of N ranks holding this rank's data: a sum is N times the data (so the
// 1/N of DistOpt gives back this rank's gradient: training goes on as on one rank, bitwise for N
// a power of two), a max is the data, an all-gather N copies, a broadcast changes nothing, a
// reduce-scatter reduces this rank's slot (the first). Sharded optimizer state cannot be
// simulated so: the other ranks' shards would never be updated (DistOpt refuses it).
// stats() counts the collectives, their bytes, the modelled seconds and the seconds really
// waited (sleeping overshoots by the scheduler's wake-up latency, tens of microseconds).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/communicator.h"

namespace loom {

struct SimulatedLink {
  int ranks = 2;
  double gbps = 25;        // link bandwidth, 10^9 bits per second
  double latency_us = 10;  // per message
};

// Modelled seconds of one collective (Note [Simulated ranks]); bytes: the buffer's size (for
// all-gather, one rank's part). 0 for one rank.
double RingAllReduceSeconds(double bytes, const SimulatedLink& link);
double RingAllGatherSeconds(double bytes_each, const SimulatedLink& link);
double RingReduceScatterSeconds(double bytes, const SimulatedLink& link);  // bytes: the whole buffer
double TreeBroadcastSeconds(double bytes, const SimulatedLink& link);
// All-reduce as a binomial-tree reduce then broadcast: 2 ceil(log2 N) (alpha + bytes / beta);
// fewer messages than the ring, so it wins on small buffers and many ranks.
double TreeAllReduceSeconds(double bytes, const SimulatedLink& link);
// The modelled seconds of the collective op `name` ("allreduce", "allgather", "broadcast",
// "reducescatter", "allgather_shards", "barrier") on a buffer of `bytes` on the wire (for the
// in-place collectives of sharding, the whole buffer; for "allgather", one rank's part);
// all-reduces by the ring, or by the tree when `tree`. ValueError for another name.
double CollectiveSeconds(const std::string& name, double bytes, const SimulatedLink& link, bool tree = false);
double BarrierSeconds(const SimulatedLink& link);

struct SimulatedStats {
  int64_t collectives = 0;
  double bytes = 0;            // buffer bytes handed to the collectives
  double modelled_s = 0;       // the model's total
  double waited_s = 0;         // wall time spent in the waits
};

// Note [Predicting a data-parallel step]
// The measured step time of a simulated run is honest but noisy on a shared machine, and the
// wait overshoots. So the step is also predicted from numbers: profiled replays' op times
// (measured; each op's median), with each collective's time replaced by the model's plus the wait
// for the slowest rank (Note [Waiting for the slowest rank]). As the parallel replay does, each of two
// resources runs, whenever it is free, the ready op that comes first in issue order: compute ops
// one at a time (each with the whole thread pool, as timed in a serial replay), collectives one
// at a time on their lane (Note [A lane for collectives]); an op is ready when every op it
// depends on (the schedule's edges, which point forward in issue order) has finished. The
// prediction is conservative where independent compute ops would run side by side. step_s is
// the last finish; compute_s the compute ops' sum (the step without communication);
// exposed_s = step_s - compute_s. loom-bench predicts so for its own runs: under --simulate-ranks,
// under --dist against the measured step of the same run (prediction_error), and with
// --predict-ranks at any rank counts from the one profile; the link's alpha and beta come from
// --latency-us and --link-gbps, which tools/comm_bench measures on this machine's transport
// (from cold caches: a bucket sent over and over from the caches takes half the time of one in a
// step), or with --link-table from comm_bench's measured times at each size.
struct StepPrediction {
  double step_s = 0, compute_s = 0, comm_s = 0, exposed_s = 0;
  double wait_s = 0;  // Note [Waiting for the slowest rank], within comm_s
  double shared_cores_s = 0;  // Note [Ranks sharing cores], within compute_s
};

// Note [Waiting for the slowest rank]
// A collective starts when the last rank arrives. Each rank's compute since the previous
// collective varies from step to step (a descheduled op, a cache miss, another process; with
// more ranks than cores, whole time slices), so the slowest of N ranks arrives later than the
// typical one, and the more ranks, the later. The model draws the N ranks' times independently
// from one rank's measured samples (its profiled replays' time between the previous collective
// and this one) and charges the collective with E[the largest of N draws] - E[one draw]: zero
// for one rank, zero for a rank that never varies, growing with N. From M samples the estimate
// is exact for their empirical distribution, so beyond N ~ M it saturates at the slowest sample
// seen: read large-N predictions as the wait of a machine this noisy, not worse.
// ValueError if `samples` is empty or ranks < 1.
double StragglerSeconds(const std::vector<double>& samples, int ranks);

// Note [Ranks sharing cores]
// The profile is one rank's, and a rank runs an op on its own cores as far as it can tell. A
// host that runs more ranks than it has cores (ranks x threads > cores: tools/launch.sh -n 4 on a
// 2-core machine) time-slices them, and since every rank computes the same step between the same
// collectives, the host does all of its ranks' compute of that stretch before the collective can
// start. A stretch of compute between two collectives that burnt c seconds of CPU (the process's
// CPU time in a serial replay, its pool threads included) while each of R ranks on the host burnt
// as much, on C cores, takes at least c R / C, however the scheduler placed the slices. Where the
// scheduler sliced the stretch itself (long ops), its measured wall time already says so; where
// it ran short ops whole and made the rank wait at the collective instead, the wall time does
// not, and the collective's measured time swallows the others' compute. The predicted cost of a
// stretch is therefore max(wall, c R / C), its ops' times stretched in proportion (per stretch,
// not per op: within a stretch an op the scheduler interrupted makes up for one it ran whole).
// Unchanged wherever R x threads <= C (c <= threads x wall), so it only speaks on an
// oversubscribed host. It is applied to the measured run's own configuration; predictions at
// other rank counts assume each rank has its cores to itself.
// ValueError unless wall_s >= 0, cpu_s >= 0, ranks_on_host >= 1 and cores >= 1.
double SharedCoresSeconds(double wall_s, double cpu_s, int ranks_on_host, int cores);
// succs[i]: the ops that wait for op i (all > i); on_lane[i]: op i is a collective; costs[i]:
// seconds.
StepPrediction PredictStep(const std::vector<std::vector<int>>& succs, const std::vector<bool>& on_lane,
                           const std::vector<double>& costs);

class SimulatedCommunicator final : public Communicator {
 public:
  // ValueError unless ranks >= 1, gbps > 0 and latency_us >= 0.
  explicit SimulatedCommunicator(SimulatedLink link);
  int rank() const override { return 0; }
  int size() const override { return link_.ranks; }
  const char* backend() const override { return "simulated"; }
  void AllReduce(void* data, int64_t count, DType dtype, ReduceOp op) override;
  void AllGather(const void* send, void* recv, int64_t count, DType dtype) override;
  void ReduceScatter(void* data, int64_t count, DType dtype, ReduceOp op) override;
  void Broadcast(void* data, int64_t count, DType dtype, int root) override;
  void Barrier() override;

  const SimulatedLink& link() const { return link_; }
  SimulatedStats stats() const;
  void ResetStats();

 private:
  void Wait(double seconds, double bytes);
  SimulatedLink link_;
  mutable std::mutex mu_;
  SimulatedStats stats_;
};

}  // namespace loom
