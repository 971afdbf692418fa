// Collectives in a captured op list (ranks.h).
#include "graph/ranks.h"

#include <map>
#include <string>
#include <vector>

#include "core/collective.h"
#include "core/comm_registry.h"
#include "core/device.h"
#include "core/ops.h"

LOOM_OP_KIND(allreduce);
LOOM_OP_KIND(allgather);
LOOM_OP_KIND(broadcast);
LOOM_OP_KIND(reducescatter);
LOOM_OP_KIND(allgather_shards);

namespace loom {

bool IsCollective(const OpRecord& op) {
  return op.def == &op_kind::allreduce || op.def == &op_kind::allgather || op.def == &op_kind::broadcast ||
         op.def == &op_kind::reducescatter || op.def == &op_kind::allgather_shards;
}

// Note [Ranks capture the same graph]
// Replays on different ranks meet only in their collectives; if the ranks captured different
// steps (a data-dependent branch, another model), the first mismatched collective would hang or
// reduce unrelated buffers. So at the end of a capture with collectives, the ranks all-gather
// one hash of the collectives (kind, shape, dtype and attributes, in issue order), per
// communicator, and every rank throws the same GraphError when they differ. Only the
// collectives must agree: with sharded optimizer state (Note [Sharded optimizer state] in
// nn/dist_opt.h) each rank updates its own pieces, so the other ops differ between ranks. It runs before the passes, which are deterministic: equal
// captures give equal buckets (Note [Gradient buckets]).
void CheckRanksCapturedTheSame(const OpList& list, Device& device) {
  std::map<int64_t, uint64_t> hashes;  // communicator -> hash
  for (const OpRecord& op : list.ops)
    if (IsCollective(op)) hashes.emplace(op.attrs.Int("comm"), 1469598103934665603ull);
  if (hashes.empty()) return;
  auto mix = [](uint64_t& h, const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  };
  for (auto& kv : hashes) {
    uint64_t& h = kv.second;
    for (const OpRecord& op : list.ops) {
      if (IsCollective(op) && op.attrs.Int("comm") == kv.first) {
        mix(h, op.name());
        mix(h, ToString(op.inputs[0].shape()));
        mix(h, Name(op.inputs[0].dtype()));
        Attrs a = op.attrs;
        a.Set("comm", int64_t(0));  // a registry id: a process's own numbering
        mix(h, a.ToString());
      }
    }
  }
  for (const auto& kv : hashes) {
    const std::shared_ptr<Communicator> comm = FindCommunicator(int(kv.first));
    auto dev = device.shared_from_this();
    Tensor mine = ops::FromVector(std::vector<int64_t>{int64_t(kv.second)}, {1}, dev);
    std::vector<int64_t> all = ops::AllGather(int(kv.first), mine).ToVector<int64_t>();
    std::string diff;
    for (size_t r = 0; r < all.size(); ++r) diff += detail::Cat(r ? ", " : "", "rank ", r, ": ", uint64_t(all[r]));
    for (size_t r = 1; r < all.size(); ++r)
      LOOM_CHECK(all[r] == all[0], GraphError, "[graph '", list.graph_name(), "'] the ", comm->size(),
                 " ranks captured different graphs (hashes of their collectives: ", diff,
                 "); every rank must capture the same step (Note [Ranks capture the same graph])");
  }
}

}  // namespace loom
