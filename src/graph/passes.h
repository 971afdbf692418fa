// Step 1b of graph.h: the pass frame. Passes rewrite a captured op list, at the end of the
// capture and before the analysis, into what a captured step allows and eager execution cannot
// (eager runs each op before the next one is known).
//
// Note [Passes]
// A pass is a registered pure function
//     (op list, the device's answers, the options) -> (op list, effects, counters)
// declared once, in its own file, by LOOM_PASS: its name (the switch in GraphOptions::passes,
// with its default), its place in the pipeline (lower order runs first), the device types it
// runs for (a backend's passes live in its folder: src/device/cpu/passes), the counters it
// reports (GraphStats::counters), and the function. RunPasses runs the passes switched on, in
// order; each one receives the list the one before returned, with its per-block uses
// (OpList::uses) indexed once, when that list was built.
// Rules for a pass:
//  - it matches ops by kind (Note [Op kinds] in core/op.h), never by name;
//  - before it creates or changes a record it asks the device whether a kernel supports that
//    record (Device::Supports, Note [What a kernel supports]); it never copies a kernel's limits
//    (block sizes, dtypes, shapes);
//  - it changes nothing but the list it returns: no block is allocated, bound, written or
//    marked. What must happen to memory or to blocks the user can reach is asked as an effect,
//    and applied by the effect's owner:
//      BufferRequest  a persistent buffer that blocks of the list share (gradient buckets):
//                     Binding allocates it before the first replay, binds the blocks into it
//                     and unbinds them when the graph goes (bind.h);
//      GuardRequest   a block the graph keeps in a kernel's own layout between its replays:
//                     Graph::Run converts it before each replay, any access from outside
//                     converts it back; or a copy of a block the graph's ops keep up to date
//                     (a 16-bit weight copy): Graph::Run converts the block into the copy
//                     before a replay when an access from outside may have changed the block
//                     since (layout_guard.h);
//  - it leaves every block held outside the graph (BlockFacts::held_outside: the user still has
//    a handle) as the user would see it after eager execution, or says in its Note why it may
//    change it;
//  - it keeps replay bitwise equal to eager (DESIGN invariant 5, docs/design.md) or says that
//    it changes arithmetic; its test checks which.
// Adding a pass touches its own file, its test, and nothing else: LOOM_PASS in that file is
// the registration, and its switch and counters reach GraphOptions, GraphStats, Python and
// loom-bench's JSON through the visitors of graph/options.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/op.h"
#include "graph/capture.h"
#include "graph/options.h"

namespace loom {

class Device;

// Note [Passes]: blocks that share one new persistent buffer. `buffer` is a Block the pass
// made (no memory yet; the list declares it as state, OpList::DeclareState); each member block
// of the list lives at its byte offset in it. The buffer's bytes start as zeros.
struct BufferRequest {
  std::shared_ptr<Block> buffer;
  std::vector<std::pair<std::shared_ptr<Block>, size_t>> members;
};

// Note [Passes]: a block the graph keeps in a kernel's layout between its replays, or whose copy
// it keeps (Note [Layout guards]). `whole` covers the block. A layout guard (`copy` undefined):
// `convert` is the op whose kernel changes the layout in place, with `to_kernel` (before a replay)
// or `to_own` (before any other access) as its attributes. A copy guard: `convert` with
// `to_kernel` writes `copy` from `whole` before a replay that finds the copy stale.
struct GuardRequest {
  Tensor whole;
  const OpDef* convert = nullptr;
  Attrs to_kernel, to_own;
  Tensor copy;
};

// What a pass returns, and what the frame returns for all of them.
struct PassResult {
  OpList ops;
  std::vector<BufferRequest> buffers;
  std::vector<GuardRequest> guards;
  PassCounters counters;
};

struct PassContext {
  const Device& device;
  const GraphOptions& options;
};

using PassFn = PassResult (*)(OpList ops, const PassContext& ctx);

struct PassCounterDef {
  const char* name;  // unique among every pass's counters: the GraphStats name
  const char* doc;
};

constexpr unsigned kAllDevices = ~0u;
constexpr unsigned DeviceBit(DeviceType t) { return 1u << unsigned(t); }

struct PassDef {
  const char* name;      // the switch: GraphOptions::passes, Python's options, loom-bench --pass
  int order;             // pipeline position: lower runs first; unique
  unsigned devices;      // DeviceBit(...) of the device types it runs for, or kAllDevices
  bool on;               // the switch's default
  PassFn run;
  const char* doc;       // what it does, for the switch's documentation
  std::vector<PassCounterDef> counters;
};

// LOOM_PASS(PassDef{...}); at namespace scope in the pass's file (Note [Passes]).
bool RegisterPass(PassDef def);
#define LOOM_PASS(...) \
  static const bool LOOM_CONCAT(loom_pass_registered_, __LINE__) = ::loom::RegisterPass(__VA_ARGS__)

// The registered passes, in pipeline order.
std::vector<const PassDef*> RegisteredPasses();

// Every registered pass that runs for `device`'s type and is switched on in `options`
// (GraphOptions::run_passes off: none), in pipeline order; the effects and counters of all.
PassResult RunPasses(OpList ops, const Device& device, const GraphOptions& options);

}  // namespace loom
