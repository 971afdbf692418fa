// Step 1b of graph.h: activation layouts planned across the graph (passes.h).
//
// Note [Activation layouts]
// oneDNN's convolutions run on a blocked layout (nChw16c on AVX-512: channels in groups of 16,
// each pixel's 16 values side by side). Eager execution sees one op at a time, so every
// convolution reorders its NCHW input in and its result out around the call (Note [oneDNN
// convolution] in device/cpu/kernels/conv_dnnl.h). A captured step sees every reader of every
// activation, so where all readers of a block can take the blocked layout, the block keeps it:
//   forward:  y = conv2d(x, w) read only by batch_norm_train (as x) and batch_norm_grad (as x):
//             the convolution writes y blocked (attribute y_blocked), batch norm reads it so
//             (x_blocked), and y's reorder out is gone;
//   backward: dx = batch_norm_grad(...) read only by conv2d_grad_input and conv2d_grad_weight
//             (as dy): batch norm writes dx blocked (dx_blocked), both gradients read it so
//             (dy_blocked), and two reorders in are gone.
// Conv-bn-relu nets (the small CNN, the ResNets) have these pairs at every convolution. The
// rest stays NCHW: the boundaries are the ops without a blocked kernel (relu, pooling, add,
// flatten), host reads, and any block the user holds.
// Conditions, each needed for the rewrite to be exact:
//   - the block is an intermediate: written by one op of the graph, as a whole, held by nothing
//     outside it (the user, the host) and with no memory before the capture;
//   - every reader is one of the ops above, reading the block in that operand only;
//   - every op touching the block has a kernel that knows the attributes and supports the
//     rewritten record (Device::Supports: on the CPU, float32 with channels a multiple of 16, so
//     that the blocked tensor has exactly the NCHW tensor's bytes and the plan is unchanged;
//     oneDNN has a plan for the convolution). A kernel without a supports predicate does not
//     know the attributes (the CUDA kernels): nothing is rewritten there.
// The arithmetic is unchanged: oneDNN computes the same convolution whatever the layout it is
// handed (it reordered to the same blocked layout before), and the blocked batch-norm kernels
// sum each channel in the NCHW kernels' order (cpu/kernels/norm.cc). Replay stays bitwise equal
// to eager (test/graph/layout_test.cc).
// Off by default (GraphOptions::plan_layouts). On the small CNN (one thread, min of 20 calls)
// the convolutions gain about 1.2 ms a step without their reorders, and batch norm loses about
// as much: its dy (from relu_grad) and its y (to relu) are NCHW, so each blocked pass transposes
// 16x16 tiles. It pays once the blocked region reaches past batch norm (relu and add are
// elementwise and take any layout; pooling needs a blocked kernel), so that batch norm sees
// only blocked tensors.
#include <vector>

#include "device/device.h"
#include "graph/passes.h"

LOOM_OP_KIND(conv2d);
LOOM_OP_KIND(conv2d_grad_input);
LOOM_OP_KIND(conv2d_grad_weight);
LOOM_OP_KIND(batch_norm_train);
LOOM_OP_KIND(batch_norm_grad);

namespace loom {
namespace {

constexpr int64_t kBlock = 16;  // nChw16c

// Which ops read or write each block.
struct Access {
  explicit Access(const OpList& list) : readers(list.blocks.size()), writers(list.blocks.size()) {
    for (size_t i = 0; i < list.size(); ++i) {
      for (int b : list.access[i].reads) readers[size_t(b)].push_back(int(i));
      for (int b : list.access[i].writes) writers[size_t(b)].push_back(int(i));
    }
  }
  std::vector<std::vector<int>> readers, writers;
};

// Reader `op` reads the block of `t` through its input `slot` alone, as the same whole tensor.
bool ReadsOnlyAs(const OpRecord& op, int slot, const Tensor& t) {
  for (size_t k = 0; k < op.inputs.size(); ++k) {
    const Tensor& in = op.inputs[k];
    if (in.block() != t.block()) continue;
    if (int(k) != slot || in.offset() != 0 || in.shape() != t.shape() || !in.is_contiguous()) return false;
  }
  return size_t(slot) < op.inputs.size() && op.inputs[size_t(slot)].block() == t.block();
}

// A kernel reads the layout attributes only if it says which records it supports (Note [What a
// kernel supports] in core/op.h); one without a predicate does not know them.
bool KnowsLayout(const Device& device, const OpRecord& op) {
  return op.def->supports[int(device.type())] != nullptr && device.Supports(op);
}

class Planner {
 public:
  Planner(OpList& list, const Device& device) : list_(list), device_(device), access_(list) {}

  // Output 0 of op `w`, read only by (kind, input slot) pairs of `readers`: sets `w_attr` on the
  // writer and each reader's attribute when every rewritten record is supported.
  struct ReaderKind {
    const OpDef* def;
    int slot;
    const char* attr;
  };
  bool Block(int w, const char* w_attr, const std::vector<ReaderKind>& readers) {
    const OpRecord& op = list_.ops[size_t(w)];
    const Tensor& t = op.outputs[0];
    const int b = list_.BlockIndex(t.block());
    const BlockFacts& f = list_.facts[size_t(b)];
    if (f.marked_persistent || f.held_outside || f.has_memory || t.offset() != 0 || !t.is_contiguous() ||
        t.nbytes() != f.bytes || t.dtype() != DType::kFloat32 || t.ndim() != 4 || t.shape()[1] % kBlock != 0)
      return false;
    if (access_.writers[size_t(b)] != std::vector<int>{w} || access_.readers[size_t(b)].empty()) return false;
    std::vector<OpRecord> changed;
    std::vector<int> at;
    OpRecord wr = op;
    wr.attrs.Set(w_attr, kBlock);
    changed.push_back(std::move(wr));
    at.push_back(w);
    for (int r : access_.readers[size_t(b)]) {
      if (r == w) return false;
      const OpRecord& rd = list_.ops[size_t(r)];
      const ReaderKind* kind = nullptr;
      for (const ReaderKind& k : readers)
        if (rd.def == k.def && ReadsOnlyAs(rd, k.slot, t)) kind = &k;
      if (!kind) return false;
      OpRecord c = rd;
      c.attrs.Set(kind->attr, kBlock);
      changed.push_back(std::move(c));
      at.push_back(r);
    }
    for (const OpRecord& c : changed)
      if (!KnowsLayout(device_, c)) return false;
    for (size_t k = 0; k < changed.size(); ++k) list_.ops[size_t(at[k])] = std::move(changed[k]);
    return true;
  }

 private:
  OpList& list_;
  const Device& device_;
  Access access_;
};

}  // namespace

PassResult PlanActivationLayouts(OpList list, const Device& device) {
  Planner p(list, device);
  size_t blocked = 0;
  for (int i = 0; i < int(list.size()); ++i) {
    const OpDef* def = list.ops[size_t(i)].def;
    if (def == &op_kind::conv2d)
      blocked += p.Block(i, "y_blocked",
                         {{&op_kind::batch_norm_train, 0, "x_blocked"}, {&op_kind::batch_norm_grad, 0, "x_blocked"}});
    else if (def == &op_kind::batch_norm_grad)
      blocked += p.Block(i, "dx_blocked",
                         {{&op_kind::conv2d_grad_input, 1, "dy_blocked"}, {&op_kind::conv2d_grad_weight, 1, "dy_blocked"}});
  }
  PassResult r{std::move(list), 0};
  r.blocked_layouts = blocked;
  return r;
}

}  // namespace loom
