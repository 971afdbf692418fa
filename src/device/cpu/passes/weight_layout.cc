// A CPU graph pass (Note [Passes] in graph/passes.h): convolution weights kept in oneDNN's
// blocked layout between replays.
//
// Note [Weights kept blocked]
// oneDNN's convolution kernels want their weights blocked (OIhw16i16o on AVX-512) and loom's
// parameters are OIHW. Eager execution, and a graph that only plans activations (Note
// [Activation layouts] in layout.cc), reorder each weight into the blocked layout for the
// forward pass, again for the input gradient, and reorder each weight gradient out of it, every
// step: on ResNet-18 b16 about 30 ms of thread time per step (ONEDNN_VERBOSE=1). A captured
// step sees every reader and writer of a weight, so it can keep the weight itself blocked:
//   - the convolutions read w blocked (attribute w_blocked: the forward reorder is gone; the
//     input gradient's kernel wants another blocking, OIhw16o16i, and still reorders, from the
//     blocked copy), the weight gradient is written blocked (dw_blocked: its reorder is gone);
//   - the SGD and Adam updates are element-wise over w, dw and their state (SGD's momentum,
//     Adam's m and v), so they compute the same values when all of these share a layout: the
//     state is kept blocked too.
// The parameter and its state are the user's tensors, held outside the graph by definition: the
// pass asks the graph to guard their blocks (a GuardRequest, converting with conv_weight_layout;
// Note [Layout guards] in graph/layout_guard.h), so that anything else that looks at them, a
// host read, a checkpoint, an eager op, another graph, sees OIHW values. A training loop that
// never looks at its weights between steps converts once; one that reads them every step pays
// two conversions per step (ResNet-18's 11.2 M weights take about 8 ms each way on 2 cores)
// and stays correct. Destroying the graph puts its blocks back in OIHW.
// Measured alternating against the graph without it (tools/ab_bench.py, --no-blocked-weights
// on one side): ResNet-18 b16 0.96x the step time, with 9 MiB less peak (the weight
// gradients' reorder buffers), ResNet-50 b8 0.97x. What stays is the input gradient's reorder
// into its own blocking, about 4 ms of thread time per ResNet-18 step (ONEDNN_VERBOSE=1).
// Conditions, each needed for the rewrite to be exact:
//   - the parameter is an (O, C, KH, KW) tensor covering its block, read only by convolutions
//     (as their weights, whole: conv2d, conv2d_relu, conv2d_grad_input) and updated by one
//     sgd_update or adam_update, which alone touches its state buffers (of the parameter's
//     shape); all had memory before the capture;
//   - the weight gradient is written by one conv2d_grad_weight and read by that update alone,
//     and held by nothing outside the graph (a user holding it sees it in OIHW);
//   - no other graph guards the blocks, and Python never exposed them as a zero-copy numpy view
//     (Block::host_viewed: a view would show the blocked values);
//   - every rewritten record is supported (Device::Supports): the convolution kernels say which
//     weights they take blocked (conv.cc: float32, O and C multiples of 16, so that the blocked
//     tensor has exactly the OIHW tensor's bytes, and a oneDNN plan with groups 1).
// The arithmetic is unchanged: oneDNN computes the same convolutions from the same values,
// whatever layout it is handed, and the update maps each element alone. Replay stays bitwise
// equal to eager (test/graph/weight_layout_test.cc).
#include <vector>

#include "core/device.h"
#include "graph/op_uses.h"
#include "graph/passes.h"

LOOM_OP_KIND(conv2d);
LOOM_OP_KIND(conv2d_relu);
LOOM_OP_KIND(conv2d_grad_input);
LOOM_OP_KIND(conv2d_grad_weight);
LOOM_OP_KIND(sgd_update);
LOOM_OP_KIND(adam_update);
LOOM_OP_KIND(conv_weight_layout);

namespace loom {
namespace {

// t covers its whole block as an (O, C, KH, KW) tensor (which of them the kernels take blocked,
// they say: Note [What a kernel supports]).
bool WholeWeight(const Tensor& t, const OpList& list) {
  const int b = list.BlockIndex(t.block());
  return b >= 0 && t.offset() == 0 && t.is_contiguous() && t.nbytes() == list.facts[size_t(b)].bytes && t.ndim() == 4;
}

// An element-wise update: param (input 0, output 0), gradient (input 1), and its state buffers,
// each an (input, output) index pair.
std::vector<std::pair<int, int>> UpdateStates(const OpRecord& op) {
  if (op.def == &op_kind::sgd_update) return op.outputs.size() == 2 ? std::vector<std::pair<int, int>>{{3, 1}}
                                                                     : std::vector<std::pair<int, int>>{};
  if (op.def == &op_kind::adam_update) return {{3, 1}, {4, 2}};  // m, v
  return {};
}
bool IsUpdate(const OpRecord& op) { return op.def == &op_kind::sgd_update || op.def == &op_kind::adam_update; }

// The parameter, gradient and state of one update, and the records that would change.
struct Candidate {
  int w = -1, dw = -1;  // blocks
  std::vector<int> states;  // blocks: momentum (SGD), m and v (Adam)
  std::vector<std::pair<int, const char*>> attrs;  // (op, attribute) to set
};

class WeightPlanner {
 public:
  WeightPlanner(OpList& list, const Device& device) : list_(list), device_(device), uses_(list.blocks.size()) {
    for (size_t i = 0; i < list.size(); ++i) {
      const OpRecord& op = list.ops[i];
      for (bool output : {false, true}) {
        const std::vector<Tensor>& ts = output ? op.outputs : op.inputs;
        for (size_t k = 0; k < ts.size(); ++k)
          if (ts[k].defined()) uses_[size_t(list.BlockIndex(ts[k].block()))].push_back({int(i), output, int(k)});
      }
    }
  }

  // Rewrites every update that qualifies; returns the tensors whose blocks the graph must guard.
  std::vector<Tensor> Run() {
    std::vector<Tensor> guarded;
    for (size_t j = 0; j < list_.size(); ++j) {
      Candidate c;
      if (!Qualifies(int(j), c) || !SetAttrsIfSupported(list_, device_, c.attrs, 1)) continue;
      const OpRecord& up = list_.ops[j];
      guarded.push_back(up.outputs[0]);
      for (const auto& st : UpdateStates(up)) guarded.push_back(up.outputs[size_t(st.second)]);
    }
    return guarded;
  }

 private:
  struct Use {
    int op;
    bool output;
    int index;
  };

  // A parameter or momentum block the graph may keep blocked between replays.
  bool Keepable(int b) const {
    const BlockFacts& f = list_.facts[size_t(b)];
    const Block& block = *list_.blocks[size_t(b)];
    return f.has_memory && !block.guard() && !block.host_viewed();
  }

  bool Qualifies(int j, Candidate& c) {
    const OpRecord& up = list_.ops[size_t(j)];
    // An update writing a 16-bit copy (Note [bfloat16 weight copies kept by the update]) keeps its
    // parameter plain: its copy guard owns the block.
    if (!IsUpdate(up) || up.attrs.Has("copy_dtype")) return false;
    const Tensor &w = up.inputs[0], &dw = up.inputs[1];
    if (!WholeWeight(w, list_) || !WholeWeight(dw, list_) || dw.shape() != w.shape()) return false;
    if (up.outputs[0].block() != w.block()) return false;
    c.w = list_.BlockIndex(w.block());
    c.dw = list_.BlockIndex(dw.block());
    if (!Keepable(c.w) || c.w == c.dw) return false;
    // Each state buffer: the update's alone, read and written whole by it.
    for (const auto& [in, out] : UpdateStates(up)) {
      const Tensor& m = up.outputs[size_t(out)];
      if (!WholeWeight(m, list_) || m.shape() != w.shape() || up.inputs[size_t(in)].block() != m.block()) return false;
      const int b = list_.BlockIndex(m.block());
      if (!Keepable(b) || b == c.w || b == c.dw) return false;
      for (int other : c.states)
        if (other == b) return false;
      for (const Use& u : uses_[size_t(b)])
        if (u.op != j || u.index != (u.output ? out : in)) return false;
      c.states.push_back(b);
    }
    // The parameter: read by convolutions as their weights, whole, and updated here.
    bool conv = false;
    for (const Use& u : uses_[size_t(c.w)]) {
      const OpRecord& op = list_.ops[size_t(u.op)];
      if (u.op == j && u.index == 0) continue;  // the update's parameter, in and out
      const Tensor& t = (u.output ? op.outputs : op.inputs)[size_t(u.index)];
      if (u.output || t.shape() != w.shape() || t.offset() != 0) return false;
      if ((op.def == &op_kind::conv2d || op.def == &op_kind::conv2d_relu) && u.index == 1)
        c.attrs.push_back({u.op, "w_blocked"});
      else if (op.def == &op_kind::conv2d_grad_input && u.index == 0)
        c.attrs.push_back({u.op, "w_blocked"});
      else
        return false;
      conv = true;
    }
    // The gradient: written whole by one conv2d_grad_weight, read by the update alone.
    const BlockFacts& g = list_.facts[size_t(c.dw)];
    if (!conv || g.marked_persistent || g.held_outside || g.has_memory) return false;
    int writer = -1;
    for (const Use& u : uses_[size_t(c.dw)]) {
      const OpRecord& op = list_.ops[size_t(u.op)];
      if (!u.output) {
        if (u.op != j || u.index != 1) return false;
        continue;
      }
      if (writer >= 0 || op.def != &op_kind::conv2d_grad_weight || u.index != 0 || u.op > j) return false;
      writer = u.op;
    }
    if (writer < 0) return false;
    c.attrs.push_back({writer, "dw_blocked"});
    return true;
  }

  OpList& list_;
  const Device& device_;
  std::vector<std::vector<Use>> uses_;  // per block, in op order
};

PassResult KeepWeightsBlocked(OpList list, const PassContext& ctx) {
  // The guards convert with the device's conv_weight_layout kernel: without one, nothing.
  if (!ctx.device.HasKernel(op_kind::conv_weight_layout)) return PassResult{std::move(list)};
  std::vector<Tensor> guarded = WeightPlanner(list, ctx.device).Run();
  PassResult r{std::move(list)};
  for (Tensor& t : guarded)
    r.guards.push_back({std::move(t), &op_kind::conv_weight_layout, Attrs{{"blocked", int64_t(1)}},
                        Attrs{{"blocked", int64_t(0)}}, Tensor()});
  r.counters.Add("blocked_weights", int64_t(r.guards.size()));
  return r;
}

}  // namespace

LOOM_PASS(PassDef{"keep_weights_blocked", 60, DeviceBit(DeviceType::kCPU), true, KeepWeightsBlocked,
                  "convolution weights updated by SGD or Adam, their gradients and optimizer state stay in "
                  "oneDNN's blocked layout between replays, converted back when anything else reads them "
                  "(Note [Weights kept blocked])",
                  {{"blocked_weights", "parameters and optimizer state buffers kept blocked between replays"}}});

}  // namespace loom
