// What a graph is asked to do (GraphOptions) and what it reports (GraphStats).
//
// Note [One list of fields]
// Each struct is generated from one field list (an X-macro), and the same list generates the
// visitors below, which the Python module walks (swig/device.i): a field added to a list is
// reachable from Python, from loom-bench's JSON and from the dumps with no second list to keep
// in step. test/graph/options_test.cc fails if a field is added outside its list.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace loom {

enum class MemoryMode { kPlanned, kDynamic };
const char* Name(MemoryMode m);
// "planned" or "dynamic"; throws ValueError for anything else.
MemoryMode ParseMemoryMode(const std::string& s);

// X(type, name, default, what it does)
#define LOOM_GRAPH_OPTIONS(X)                                                                          \
  X(MemoryMode, memory, MemoryMode::kPlanned,                                                          \
    "planned: one arena packed once (replay allocates nothing); dynamic: the device pool at first "    \
    "use, returned at the last reader")                                                                \
  X(int, num_workers, 0, "threads of the parallel replay; 0: the CPU pool's size")                     \
  X(bool, profile, false, "time every op of every replay (LOOM_DEBUG >= 2 sets it)")                   \
  X(bool, device_graph, false,                                                                         \
    "record sequential replays once as a device graph (CUDA graph) and relaunch it; needs planned "    \
    "memory (Note [Device graph replay])")                                                             \
  X(bool, parallel_fallback, true,                                                                     \
    "a parallel replay first runs serially, timing each op, and stays serial when the schedule has "   \
    "too little independent work (Note [Parallel or serial]); false: always the parallel schedule")   \
  X(bool, fuse, true, "run the graph passes at the end of the capture (graph/passes.h)")            \
  X(bool, fuse_bias_act, true,                                                                         \
    "with fuse: matmul + add_bias [+ relu/tanh/sigmoid] -> dense_bias_act, conv2d + relu -> "           \
    "conv2d_relu, an activation's gradient + the bias gradient -> bias_act_grad (Note [Fusing bias "    \
    "and activation])")                                                                                 \
  X(bool, fuse_bn_relu, false,                                                                         \
    "with fuse: training batch norm + relu -> batch_norm_train with relu = 1, relu_grad + "            \
    "batch_norm_grad -> batch_norm_grad with relu = 1 (Note [Fusing batch norm and ReLU]); off by "    \
    "default: measured no faster than the unfused ops on the small CNN and ResNet-18")                \
  X(bool, plan_layouts, true,                                                                          \
    "with fuse: activations and their gradients between convolutions, batch norm, relu, add and "     \
    "global pooling stay in oneDNN's blocked layout, without reorders around the convolutions "      \
    "(Note [Activation layouts])")                                                                   \
  X(bool, keep_weights_blocked, true,                                                                  \
    "with fuse: convolution weights updated by SGD or Adam, their gradients and optimizer state "     \
    "stay in oneDNN's blocked layout between replays, converted back when anything else reads them " \
    "(Note [Weights kept blocked])")                                                                  \
  X(int, bucket_bytes, 25 << 20, "gradient bucket size of data-parallel training (Note [Gradient buckets])") \
  X(int, first_bucket_bytes, 1 << 20, "size of the first gradient bucket, all-reduced first; 0: bucket_bytes") \
  X(bool, overlap_collectives, true,                                                                   \
    "each bucket's all-reduce right after its last gradient (overlaps backward); false: after backward") \
  X(size_t, memory_budget, 0,                                                                          \
    "bytes the planned arena plus persistent blocks must fit, met by recomputing dropped activations " \
    "before their backward readers; 0: none (Note [Recomputing for a memory budget])")

#define LOOM_GRAPH_STATS(X)                                                                            \
  X(size_t, num_ops, 0, "ops replayed, after the passes")                                              \
  X(size_t, num_blocks, 0, "blocks the ops touch")                                                     \
  X(size_t, num_intermediate, 0, "non-persistent blocks: what the plan packs")                        \
  X(size_t, persistent_bytes, 0, "parameters, state, inputs, held outputs")                           \
  X(size_t, lower_bound_bytes, 0,                                                                      \
    "liveness lower bound of the intermediates (with in-place reuse in planned mode)")                \
  X(size_t, lower_bound_no_inplace_bytes, 0, "the same without in-place reuse (dynamic mode's)")      \
  X(size_t, inplace_ops, 0, "ops whose output took over an input's memory")                           \
  X(size_t, fused_ops, 0, "op pairs the passes made one")                                              \
  X(size_t, fused_bias_act, 0, "of these, the dense_bias_act, conv2d_relu and bias_act_grad ops made") \
  X(size_t, fused_bn_relu, 0, "of these, the batch norms that took their ReLU (forward and backward)") \
  X(size_t, blocked_layouts, 0, "activation blocks kept in oneDNN's blocked layout (Note [Activation layouts])") \
  X(size_t, blocked_weights, 0, "parameters and optimizer state buffers kept blocked between replays (Note [Weights kept blocked])") \
  X(size_t, recomputed_ops, 0, "ops the memory budget added to compute dropped activations again")    \
  X(int64_t, recompute_flops, 0, "dense FLOPs of these ops (graph/flops.h)")                            \
  X(size_t, arena_bytes, 0, "planned arena (0 in dynamic mode)")                                       \
  X(size_t, dynamic_peak_bytes, 0, "most intermediate bytes a dynamic replay held at once")           \
  X(std::string, plan_strategy, "", "the packing that won (greedy-by-size, op-order, ...)")           \
  X(MemoryMode, memory, MemoryMode::kPlanned, "the memory mode")                                       \
  X(uint64_t, replays, 0, "replays so far")                                                            \
  X(uint64_t, random_draws, 0, "Philox counters one replay consumes")                                  \
  X(double, parallelism, 0,                                                                            \
    "parallel replays: total op time / longest dependency chain, from the first one (0 until then)")   \
  X(bool, parallel_runs_serial, false, "later parallel replays run serially: parallelism too small")

#define LOOM_DECLARE_FIELD(type, name, init, doc) type name = init;
struct GraphOptions {
  LOOM_GRAPH_OPTIONS(LOOM_DECLARE_FIELD)
};
struct GraphStats {
  LOOM_GRAPH_STATS(LOOM_DECLARE_FIELD)
};
#undef LOOM_DECLARE_FIELD

// visit(name, field, doc) for every field, in list order (const and mutable).
template <typename S, typename Visit>
void VisitGraphOptions(S& o, Visit&& visit) {
#define LOOM_VISIT_FIELD(type, name, init, doc) visit(#name, o.name, doc);
  LOOM_GRAPH_OPTIONS(LOOM_VISIT_FIELD)
#undef LOOM_VISIT_FIELD
}
template <typename S, typename Visit>
void VisitGraphStats(S& s, Visit&& visit) {
#define LOOM_VISIT_FIELD(type, name, init, doc) visit(#name, s.name, doc);
  LOOM_GRAPH_STATS(LOOM_VISIT_FIELD)
#undef LOOM_VISIT_FIELD
}

}  // namespace loom
