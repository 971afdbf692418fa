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
#include <map>
#include <string>
#include <type_traits>
#include <vector>

namespace loom {

enum class MemoryMode { kPlanned, kDynamic };

// Note [Pass switches and counters]
// Each registered graph pass (Note [Passes] in graph/passes.h) has a switch named as the pass
// and reports counters under names it declares. GraphOptions::passes holds the switches set
// explicitly (the others keep their pass's default); GraphStats::counters the counts of the
// capture. Both check names against the registered passes: a misspelt switch or counter is a
// ValueError that lists the names there are, never a silent default. The visitors below expand
// them into one field per pass or counter, so the Python module, loom-bench's JSON and the
// dumps see them as they see any other field, with the doc the pass registered.

// A switch or counter as the visitors show it.
struct PassFieldInfo {
  const char* name;
  const char* doc;
};

class PassSwitches {
 public:
  bool On(const std::string& pass) const;  // as set, else the pass's default
  void Set(const std::string& pass, bool on);
  // For the visitors: the switch (Get), and a reference to it, set to its default if unset (Ref).
  bool Get(const std::string& pass) const { return On(pass); }
  bool& Ref(const std::string& pass);
  static std::vector<PassFieldInfo> Fields();  // every registered pass

 private:
  std::map<std::string, bool> set_;
};

class PassCounters {
 public:
  int64_t Get(const std::string& counter) const;  // 0 when nothing counted it
  void Add(const std::string& counter, int64_t n);
  int64_t& Ref(const std::string& counter);  // for the visitors
  const std::map<std::string, int64_t>& counts() const { return counts_; }
  static std::vector<PassFieldInfo> Fields();  // every counter a registered pass declares

 private:
  std::map<std::string, int64_t> counts_;
};

const char* Name(MemoryMode m);
// "planned" or "dynamic"; throws ValueError for anything else.
MemoryMode ParseMemoryMode(const std::string& s);

// X(type, name, default, what it does)
#define LOOM_GRAPH_OPTIONS(X)                                                                          \
  X(MemoryMode, memory, MemoryMode::kPlanned,                                                          \
    "planned: one arena packed once (replay allocates nothing); dynamic: the device pool at first "    \
    "use, returned at the last reader")                                                                \
  X(int, num_workers, 0, "threads of the parallel replay, at most 1024; 0: the device's (Note [Replay threads])")      \
  X(bool, profile, false, "time every op of every replay (LOOM_DEBUG >= 2 sets it)")                   \
  X(bool, device_graph, false,                                                                         \
    "record sequential replays once as a device graph (CUDA graph) and relaunch it; needs planned "    \
    "memory (Note [Device graph replay])")                                                             \
  X(bool, parallel_fallback, true,                                                                     \
    "a parallel replay first runs serially, timing each op, and stays serial when the schedule has "   \
    "too little independent work (Note [Parallel or serial]); false: always the parallel schedule")   \
  X(bool, run_passes, true, "run the graph passes switched on below at the end of the capture (Note [Passes])") \
  X(PassSwitches, passes, {},                                                                          \
    "one switch per registered graph pass, named as the pass (Note [Pass switches and counters])")    \
  X(int, bucket_bytes, 25 << 20, "gradient bucket size of data-parallel training, > 0 (Note [Gradient buckets])") \
  X(int, first_bucket_bytes, 1 << 20, "size of the first gradient bucket, all-reduced first; 0: bucket_bytes") \
  X(bool, overlap_collectives, true,                                                                   \
    "each bucket's all-reduce right after its last gradient (overlaps backward); false: after backward") \
  X(size_t, memory_budget, 0,                                                                          \
    "bytes the planned arena plus persistent blocks must fit, met by recomputing dropped activations " \
    "before their backward readers; 0: none (Note [Recomputing for a memory budget])")            \
  X(int, max_step_graphs, 8,                                                                           \
    "graphs a captured step keeps, one per input signature; capturing one more drops the least "       \
    "recently used, with a warning the first time (Note [Bounded recapture]); 0: no bound")

#define LOOM_GRAPH_STATS(X)                                                                            \
  X(size_t, num_ops, 0, "ops replayed, after the passes")                                              \
  X(size_t, num_blocks, 0, "blocks the ops touch")                                                     \
  X(size_t, num_intermediate, 0, "non-persistent blocks: what the plan packs")                        \
  X(size_t, persistent_bytes, 0, "parameters, state, inputs, held outputs")                           \
  X(size_t, lower_bound_bytes, 0,                                                                      \
    "liveness lower bound of the intermediates (with in-place reuse in planned mode)")                \
  X(size_t, lower_bound_no_inplace_bytes, 0, "the same without in-place reuse (dynamic mode's)")      \
  X(size_t, inplace_ops, 0, "ops whose output took over an input's memory")                           \
  X(PassCounters, counters, {},                                                                        \
    "what the graph passes did, one counter per name a pass declares (Note [Pass switches and counters])") \
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
  X(bool, parallel_runs_serial, false, "later parallel replays run serially: parallelism too small")   \
  X(uint64_t, parallel_replays, 0, "replays that ran by dependency on the worker threads")

#define LOOM_DECLARE_FIELD(type, name, init, doc) type name = init;
struct GraphOptions {
  LOOM_GRAPH_OPTIONS(LOOM_DECLARE_FIELD)
};
struct GraphStats {
  LOOM_GRAPH_STATS(LOOM_DECLARE_FIELD)
};
#undef LOOM_DECLARE_FIELD

// The most replay workers a graph may ask for: far above any core count, far below the thread
// count at which creating them takes minutes (100,000 hung a replay).
constexpr int kMaxReplayWorkers = 1024;
// Throws ValueError naming the first field out of range: num_workers outside [0,
// kMaxReplayWorkers], bucket_bytes not positive, first_bucket_bytes negative. Every place that
// takes options (Graph, CapturedStep, Model::Compile, the registry, StepMonitor, the Python
// module's dicts) checks them there, before anything is captured.
void CheckGraphOptions(const GraphOptions& o);

namespace detail {
// One field to a visitor; the pass switches and counters as one field each (Note [Pass switches
// and counters]).
template <typename Field, typename Visit>
void VisitField(const char* name, Field& field, const char* doc, Visit& visit) {
  if constexpr (std::is_same_v<std::remove_const_t<Field>, PassSwitches> ||
                std::is_same_v<std::remove_const_t<Field>, PassCounters>) {
    for (const PassFieldInfo& f : Field::Fields()) {
      if constexpr (std::is_const_v<Field>) {
        const auto value = field.Get(f.name);
        visit(f.name, value, f.doc);
      } else {
        visit(f.name, field.Ref(f.name), f.doc);
      }
    }
  } else {
    visit(name, field, doc);
  }
}
}  // namespace detail

// visit(name, field, doc) for every field, in list order (const and mutable).
template <typename S, typename Visit>
void VisitGraphOptions(S& o, Visit&& visit) {
#define LOOM_VISIT_FIELD(type, name, init, doc) detail::VisitField(#name, o.name, doc, visit);
  LOOM_GRAPH_OPTIONS(LOOM_VISIT_FIELD)
#undef LOOM_VISIT_FIELD
}
template <typename S, typename Visit>
void VisitGraphStats(S& s, Visit&& visit) {
#define LOOM_VISIT_FIELD(type, name, init, doc) detail::VisitField(#name, s.name, doc, visit);
  LOOM_GRAPH_STATS(LOOM_VISIT_FIELD)
#undef LOOM_VISIT_FIELD
}

}  // namespace loom
