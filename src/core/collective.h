// Collectives as ops (issue 15; docs/design.md invariant 11): `allreduce`, `allgather`,
// `broadcast`, `reducescatter` and `allgather_shards` are op records like any other, submitted to the tensor's device, so they run now
// (eager, blocking) or are captured, analysed, planned and replayed with the rest of a step.
// The communicator is named by its registry id (core/comm_registry.h); every collective
// also reads and writes the communicator's token (Note [The collective token]).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "core/communicator.h"

namespace loom {

// What goes on the wire for an all-reduce of float32/float64 data.
enum class Compression : uint8_t { kNone = 0, kFloat16 = 1, kBFloat16 = 2 };
const char* Name(Compression c);
Compression ParseCompression(const std::string& s);  // "none" or "fp32", "fp16", "bf16"; ValueError otherwise

namespace ops {

// In place: t = scale * reduce_over_ranks(t). With compression, t is rounded to 16 bits before
// it is sent and the result read back from 16 bits (float accumulation in between).
// `members`: tensors on blocks whose memory lies inside t's (gradients bound into a bucket,
// Note [Gradient buckets] in graph/buckets.cc) — recorded as read and written so that the
// analysis orders the collective after their writers and before their readers.
void AllReduce(int comm, const Tensor& t, ReduceOp op = ReduceOp::kSum, double scale = 1.0,
               Compression compression = Compression::kNone, const std::vector<Tensor>& members = {});
// Out of place and differentiable (Note [A differentiable all-reduce]): scale * the sum over
// ranks of t; its gradient is the all-reduce of the incoming gradient (same scale).
Tensor AllReduced(int comm, const Tensor& t, double scale = 1.0);
// (size, ...t.shape): row r is rank r's t.
Tensor AllGather(int comm, const Tensor& t);
// In place: every rank ends with root's t.
void Broadcast(int comm, const Tensor& t, int root);
// In place over t's N equal slots (t one-dimensional, N the communicator's size): this rank's slot
// ends as the reduction over ranks of that slot (with compression, sent in 16 bits as
// AllReduce's); the other slots are left unspecified (Communicator::ReduceScatter).
void ReduceScatter(int comm, const Tensor& t, ReduceOp op = ReduceOp::kSum,
                   Compression compression = Compression::kNone);
// In place over t's N equal slots: every rank ends with rank r's slot r. `members`: tensors on
// blocks whose memory lies inside t's, recorded as read and written (as AllReduce's).
void AllGatherShards(int comm, const Tensor& t, const std::vector<Tensor>& members = {});

}  // namespace ops
}  // namespace loom
