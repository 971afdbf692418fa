// Collectives in a captured op list: which records are collectives, and the check that every
// rank captured the same graph (run at the end of a capture, before the passes).
#pragma once

#include "graph/capture.h"

namespace loom {

class Device;

bool IsCollective(const OpRecord& op);  // allreduce, allgather, broadcast, reducescatter, allgather_shards

// Note [Ranks capture the same graph] (ranks.cc): GraphError on every rank when they differ.
void CheckRanksCapturedTheSame(const OpList& ops, Device& device);

}  // namespace loom
