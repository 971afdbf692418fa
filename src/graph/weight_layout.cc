// Step 1b of graph.h: the pass and the guards of Note [Weights kept blocked] (weight_layout.h).
#include "graph/weight_layout.h"

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

constexpr int64_t kBlock = 16;  // OIhw16i16o

// t covers its whole block as a float32 (O, C, KH, KW) tensor with O and C multiples of 16.
bool WholeWeight(const Tensor& t, const OpList& list) {
  const int b = list.BlockIndex(t.block());
  return b >= 0 && t.offset() == 0 && t.is_contiguous() && t.nbytes() == list.facts[size_t(b)].bytes &&
         t.dtype() == DType::kFloat32 && t.ndim() == 4 && t.shape()[0] % kBlock == 0 && t.shape()[1] % kBlock == 0;
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
      if (!Qualifies(int(j), c) || !SetAttrsIfSupported(list_, device_, c.attrs, kBlock)) continue;
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
    if (!IsUpdate(up)) return false;
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

}  // namespace

PassResult KeepWeightsBlocked(OpList list, const Device& device) {
  // The conversion runs through the device's conv_weight_layout kernel: without one, nothing.
  if (!device.HasKernel(op_kind::conv_weight_layout)) return {std::move(list), 0};
  WeightPlanner p(list, device);
  std::vector<Tensor> guarded = p.Run();
  PassResult r{std::move(list), 0};
  r.blocked_weights = std::move(guarded);
  return r;
}

// ---- WeightGuard ----

WeightGuard::WeightGuard(Tensor whole) : whole_(std::move(whole)) {
  LOOM_ASSERT(!whole_.block()->guard(), "a block guarded twice: ", whole_.Describe());
  whole_.block()->set_guard(this);
}

WeightGuard::~WeightGuard() {
  std::lock_guard<std::mutex> l(mu_);
  if (blocked_) {
    try {
      Convert(false);
    } catch (...) {
      // Scratch from the device pool failed: the kernel takes host memory of this thread instead.
      std::vector<float> scratch(size_t(whole_.numel()));
      Convert(false, scratch.data(), scratch.size() * sizeof(float));
    }
  }
  whole_.block()->set_guard(nullptr);
}

void WeightGuard::Convert(bool to_blocked, void* scratch, size_t scratch_bytes) {
  OpRecord op;
  op.def = &op_kind::conv_weight_layout;
  op.attrs.Bind(*op.def).Set("blocked", int64_t(to_blocked ? 1 : 0));  // Note [Declared attributes]
  op.inputs = {whole_};
  op.outputs = {whole_};
  KernelContext ctx;
  ctx.device = whole_.device();
  ctx.scratch = scratch;  // null: the kernel takes its scratch from the device pool
  ctx.scratch_bytes = scratch_bytes;
  // The kernel's own accesses to the block pass the guard (this thread, while converting).
  converting_.store(std::this_thread::get_id(), std::memory_order_release);
  try {
    op.def->kernels[int(ctx.device->type())](op, ctx);
  } catch (...) {
    converting_.store(std::thread::id(), std::memory_order_release);
    throw;
  }
  converting_.store(std::thread::id(), std::memory_order_release);
  blocked_ = to_blocked;
}

void WeightGuard::BeginReplay() {
  std::lock_guard<std::mutex> l(mu_);
  if (!blocked_) Convert(true);
  replaying_.store(true, std::memory_order_release);
}

void WeightGuard::BeforeAccess() {
  if (replaying_.load(std::memory_order_acquire)) return;  // the owning graph's replay
  if (converting_.load(std::memory_order_acquire) == std::this_thread::get_id()) return;
  std::lock_guard<std::mutex> l(mu_);
  if (blocked_) Convert(false);
}

WeightReplayScope::WeightReplayScope(const std::vector<std::unique_ptr<WeightGuard>>& guards) : guards_(guards) {
  try {
    for (; begun_ < guards_.size(); ++begun_) guards_[begun_]->BeginReplay();
  } catch (...) {
    End();
    throw;
  }
}

WeightReplayScope::~WeightReplayScope() { End(); }

void WeightReplayScope::End() noexcept {
  for (size_t i = 0; i < begun_; ++i) guards_[i]->EndReplay();
  begun_ = 0;
}

}  // namespace loom
