// Step 1b of graph.h: graph passes — pure functions from an op list to an op list, run at the
// end of a capture, before the analysis. They rewrite what a captured step allows and eager
// execution cannot (eager runs each op before the next one is known).
//
// Rules for a pass (DESIGN.md, "Passes"):
//  - it matches ops by kind (OpDef addresses, Note [Op kinds] in core/op.h), never by name;
//  - before it creates a fused op it asks the device whether that kernel supports the record
//    (Device::Supports, Note [What a kernel supports]), never copying a kernel's limits;
//  - a pass that changes arithmetic says so; one that keeps it keeps replay bitwise equal to
//    eager (DESIGN.md invariant 5), and its test checks that.
#pragma once

#include <cstddef>
#include <vector>

#include "graph/capture.h"
#include "graph/options.h"

namespace loom {

class Device;

struct PassResult {
  OpList ops;
  size_t rewrites = 0;  // op pairs made one (GraphStats::fused_ops)
  size_t bias_act = 0;  // of these, the ops FuseBiasActivations made (GraphStats::fused_bias_act)
  size_t bn_relu = 0;   // of these, the ops FuseBatchNormRelu made (GraphStats::fused_bn_relu)
  size_t blocked_layouts = 0;  // blocks PlanActivationLayouts keeps blocked (GraphStats::blocked_layouts)
  // KeepWeightsBlocked: the parameters and optimizer state the graph must guard (weight_layout.h)
  std::vector<Tensor> blocked_weights;
};

// Note [Weight gradient into the update] (fuse.cc). Keeps arithmetic: bitwise equal to eager.
PassResult FuseWeightGradientsIntoUpdates(OpList ops, const Device& device);

// Note [Fusing bias and activation] (fuse_bias_act.cc). Keeps arithmetic on the CPU.
PassResult FuseBiasActivations(OpList ops, const Device& device);

// Note [Fusing batch norm and ReLU] (fuse_bn_relu.cc). Keeps arithmetic on the CPU.
PassResult FuseBatchNormRelu(OpList ops, const Device& device);

// Note [Activation layouts] (layout.cc). Keeps arithmetic on the CPU.
PassResult PlanActivationLayouts(OpList ops, const Device& device);

// Note [Weights kept blocked] (weight_layout.h). Keeps arithmetic on the CPU. The graph guards
// the blocks of blocked_weights from the end of its capture on.
PassResult KeepWeightsBlocked(OpList ops, const Device& device);

// Note [Gradient buckets] (buckets.cc). Keeps arithmetic. rewrites: the bucket all-reduces made.
PassResult BucketGradients(OpList ops, const GraphOptions& options);
// Note [Ranks capture the same graph] (buckets.cc): GraphError on every rank when they differ.
void CheckRanksCapturedTheSame(const OpList& ops, Device& device);
bool IsCollective(const OpRecord& op);  // allreduce, allgather, broadcast

// Every pass the options ask for, in order.
PassResult RunPasses(OpList ops, const Device& device, const GraphOptions& options);

}  // namespace loom
