// A graph pass (Note [Passes] in graph/passes.h): activation layouts planned across the graph.
//
// Note [Activation layouts]
// A device's convolutions have a layout they run on: oneDNN's nChw16c on the CPU (AVX-512:
// channels in groups of 16, each pixel's 16 values side by side), NHWC for cuDNN's tensor-core
// algorithms on CUDA (Note [NHWC convolutions on cuDNN] in device/cuda/cudnn.cc). Both are "the
// blocked layout" below: NHWC is nChw{C}c, one group of all C channels. Eager execution sees one
// op at a time, so every convolution converts its NCHW operands in and its result out around the
// call (Note [oneDNN convolution] in device/cpu/kernels/conv_dnnl.h; the CUDA kernels transpose).
// A captured step sees every reader and writer of every activation, so it keeps whole regions of
// the net in the blocked layout:
//   - ops with a blocked kernel name each (N, C, H, W) operand they can take blocked, by an
//     attribute on the record (Slots() below): the convolutions (x, y; dy, dx), batch norm (x,
//     y and its fused residual, Note [Batch norm with its ReLU] in graph/fuse_bn_relu.cc; x,
//     dy, dx), global average pooling (x; dx), max pooling (x, y, its int32 argmax; argmax, dy,
//     dx). Two operands of one op under one attribute share it: they are tied like the
//     operands of an element-wise op below;
//   - element-wise ops whose operands all have one shape (relu, relu_grad, add, cast) compute
//     the same values in any layout, as long as all their operands share it: they tie their
//     blocks together. (A cast ties a float32 activation to the bfloat16 copy a bf16
//     convolution reads; the fused casts of graph/fuse_casts.cc are relu or add records.)
// The blocks tied by element-wise ops form a region (in a ResNet, a stage's trunk: the
// shortcut adds, the ReLUs, the batch-norm outputs, and in backward their gradients, tied to
// the forward ones by relu_grad). A region is blocked as a whole or not at all, so every op
// sees each operand in one layout. What keeps a region NCHW: any other use of one of its blocks
// (flatten, a sum, a view of another shape, the loss), host reads, a block the user holds, or
// a kernel that does not support the rewritten record. An op's slots may lie in different
// regions (max pooling's x and y): each is blocked or not with its own region, and the kernels
// take any mix.
// Conditions, each needed for the rewrite to be exact:
//   - every block of the region is an intermediate: written by one op of the graph, as a whole,
//     held by nothing outside it (the user, the host) and with no memory before the capture;
//   - every op touching the block does so through a slot of Slots() or as an element-wise op
//     above, with the whole tensor (offset 0, contiguous, the block's bytes);
//   - every op with a rewritten slot has a kernel that knows the attributes and supports the
//     rewritten record (Device::Supports): the kernels say which operands they take blocked
//     (CPU: cpu/kernels/conv.cc, norm.cc, pool.cc: float32 (N, C, H, W) with C a multiple of
//     16, so that the blocked tensor has exactly the NCHW tensor's bytes and the plan is
//     unchanged, and for a convolution a oneDNN plan; CUDA: cudnn.cc, cnn.cu:
//     4-D operands, and for a convolution a plan in NHWC, which NHWC's bytes always fit). All
//     blocks of a region have one shape (the element-wise ops that tie them require it), so a
//     region every slot's kernel accepts has only blocks those kernels accept. A kernel without
//     a supports predicate does not know the attributes: nothing is rewritten there.
// A slot's attribute is 1 when its operand is blocked; the blocking itself is the kernels'.
// The arithmetic is unchanged on both devices. On the CUDA device: a convolution whose plan is
// NHWC runs on NHWC operands in eager execution too (the kernel transposes them), and the batch
// norm and pooling kernels add in an order that does not depend on the layout (Note [Batch norm
// in any layout] in device/cuda/cnn.cu). On the CPU: oneDNN computes the same
// convolution whatever the layout it is
// handed (it reordered to the same blocked layout before), the blocked batch-norm and pooling
// kernels sum each channel in the NCHW kernels' order (cpu/kernels/norm.cc, pool.cc), blocked
// max pooling picks the NCHW kernel's first maximum and adds its gradient in the same order
// (Note [Blocked max pooling] in cpu/kernels/pool.cc), and an element-wise op maps each element
// alone. Replay stays bitwise equal to eager (test/graph/layout_test.cc; on a GPU,
// test/cuda/nhwc_test.cc).
// On by default (the pass plan_layouts): on ResNet-50 b8 it removes every activation
// reorder around the convolutions (about 12% of oneDNN's time there, 4% on ResNet-18 b16), and
// the blocked batch-norm kernels are per op no slower than the NCHW ones (ONEDNN_VERBOSE=1 and
// LOOM_DEBUG=2 per-op times of both graphs; tools/ab_bench.py --b-args=--no-plan-layouts for the
// step). On CUDA it is not yet measured: tools/gpu_check.sh's part `layouts` times ResNet-50 with
// NHWC regions, with NHWC plans and no regions, and with NCHW plans.
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "core/device.h"
#include "graph/op_uses.h"
#include "graph/passes.h"

LOOM_OP_KIND(conv2d);
LOOM_OP_KIND(conv2d_grad_input);
LOOM_OP_KIND(conv2d_grad_weight);
LOOM_OP_KIND(batch_norm_train);
LOOM_OP_KIND(batch_norm_grad);
LOOM_OP_KIND(global_avg_pool);
LOOM_OP_KIND(global_avg_pool_grad);
LOOM_OP_KIND(max_pool2d);
LOOM_OP_KIND(max_pool2d_grad);
LOOM_OP_KIND(relu);
LOOM_OP_KIND(relu_grad);
LOOM_OP_KIND(add);
LOOM_OP_KIND(cast);

namespace loom {
namespace {

// An operand a kernel can take blocked, and the attribute that says so.
struct Slot {
  const OpDef* def;
  bool output;
  int index;
  const char* attr;
};
// The slots, built at first use: op_kind's definitions are other files' globals, and a static
// array of their addresses here would read them before they are initialised (the language
// leaves the order of initialisation across files open; AddressSanitizer's init-order check
// catches it).
const std::vector<Slot>& Slots() {
  static const std::vector<Slot> slots = {
    {&op_kind::conv2d, false, 0, "x_blocked"},
    {&op_kind::conv2d, true, 0, "y_blocked"},
    {&op_kind::conv2d_grad_input, false, 1, "dy_blocked"},
    {&op_kind::conv2d_grad_input, true, 0, "dx_blocked"},
    {&op_kind::conv2d_grad_weight, false, 0, "x_blocked"},
    {&op_kind::conv2d_grad_weight, false, 1, "dy_blocked"},
    {&op_kind::batch_norm_train, false, 0, "x_blocked"},
    {&op_kind::batch_norm_train, true, 0, "y_blocked"},
    {&op_kind::batch_norm_train, false, 5, "y_blocked"},  // the residual (fuse_bn_relu)
    {&op_kind::batch_norm_grad, false, 0, "x_blocked"},
    {&op_kind::batch_norm_grad, false, 4, "dy_blocked"},
    {&op_kind::batch_norm_grad, true, 0, "dx_blocked"},
    {&op_kind::global_avg_pool, false, 0, "x_blocked"},
    {&op_kind::global_avg_pool_grad, true, 0, "dx_blocked"},
    {&op_kind::max_pool2d, false, 0, "x_blocked"},
    {&op_kind::max_pool2d, true, 0, "y_blocked"},
    {&op_kind::max_pool2d, true, 1, "argmax_blocked"},
    {&op_kind::max_pool2d_grad, false, 0, "argmax_blocked"},
    {&op_kind::max_pool2d_grad, false, 1, "dy_blocked"},
    {&op_kind::max_pool2d_grad, true, 0, "dx_blocked"},
  };
  return slots;
}
const Slot* FindSlot(const OpDef* def, bool output, int index) {
  for (const Slot& s : Slots())
    if (s.def == def && s.output == output && s.index == index) return &s;
  return nullptr;
}

// An element-wise op whose operands all have one shape: any layout, if they all share it.
bool LayoutFree(const OpRecord& op) {
  if (op.def != &op_kind::relu && op.def != &op_kind::relu_grad && op.def != &op_kind::add && op.def != &op_kind::cast)
    return false;
  const Shape& s = op.outputs.at(0).shape();
  for (const auto* ts : {&op.inputs, &op.outputs})
    for (const Tensor& t : *ts)
      if (t.shape() != s) return false;
  return true;
}

class Planner {
 public:
  Planner(OpList& list, const Device& device)
      : list_(list), device_(device), parent_(list.blocks.size()), ok_(list.blocks.size(), 1),
        shape_(list.blocks.size()), writers_(list.blocks.size(), 0) {
    std::iota(parent_.begin(), parent_.end(), 0);
    for (size_t i = 0; i < list.size(); ++i) {
      const OpRecord& op = list.ops[i];
      for (int b : list.access[i].writes) ++writers_[size_t(b)];
      const bool free = LayoutFree(op);
      int first = -1;
      std::vector<std::pair<const char*, int>> slot_blocks;  // this op's slots so far: attribute, block
      for (bool output : {false, true}) {
        const std::vector<Tensor>& ts = output ? op.outputs : op.inputs;
        for (size_t k = 0; k < ts.size(); ++k) {
          const Tensor& t = ts[k];
          if (!t.defined()) continue;
          const int b = list.BlockIndex(t.block());
          if (b < 0) continue;
          Use(b, t);
          const Slot* slot = FindSlot(op.def, output, int(k));
          if (slot) {
            uses_.push_back({int(i), b, slot});
            for (const auto& [attr, other] : slot_blocks)  // one attribute, one layout: tied
              if (std::string(attr) == slot->attr) Union(other, b);
            slot_blocks.emplace_back(slot->attr, b);
          }
          if (free) {
            if (first >= 0) Union(first, b);
            first = b;
          } else if (!slot) {
            ok_[size_t(b)] = 0;
          }
        }
      }
    }
    for (size_t b = 0; b < list.blocks.size(); ++b) {
      const BlockFacts& f = list.facts[b];
      if (f.marked_persistent || f.held_outside || f.has_memory || writers_[b] != 1) ok_[b] = 0;
    }
  }

  // Blocks every region that may be blocked and whose rewritten records are all supported, in
  // the order of their first slot; returns the number of blocks made blocked.
  size_t Run() {
    std::vector<char> bad(parent_.size(), 0), done(parent_.size(), 0);
    for (size_t b = 0; b < parent_.size(); ++b)
      if (!ok_[b]) bad[size_t(Find(int(b)))] = 1;
    size_t blocked = 0;
    for (const SlotUse& u : uses_) {
      const int root = Find(u.block);
      if (bad[size_t(root)] || done[size_t(root)]) continue;
      done[size_t(root)] = 1;
      blocked += Try(root);
    }
    return blocked;
  }

 private:
  struct SlotUse {
    int op, block;
    const Slot* slot;
  };

  // The block is read or written as t: whole, with the same shape at every use.
  void Use(int b, const Tensor& t) {
    const BlockFacts& f = list_.facts[size_t(b)];
    if (t.offset() != 0 || !t.is_contiguous() || t.nbytes() != f.bytes) ok_[size_t(b)] = 0;
    if (shape_[size_t(b)].empty()) shape_[size_t(b)] = t.shape();
    if (shape_[size_t(b)] != t.shape()) ok_[size_t(b)] = 0;
  }

  // Sets the attributes of every slot on the region `root`; undoes them and returns 0 unless
  // every rewritten record is supported.
  size_t Try(int root) {
    std::vector<std::pair<int, const char*>> attrs;
    for (const SlotUse& u : uses_)
      if (Find(u.block) == root) attrs.push_back({u.op, u.slot->attr});
    if (!SetAttrsIfSupported(list_, device_, attrs, 1)) return 0;
    size_t n = 0;
    for (size_t b = 0; b < parent_.size(); ++b) n += Find(int(b)) == root;
    return n;
  }

  int Find(int b) {
    while (parent_[size_t(b)] != b) b = parent_[size_t(b)] = parent_[size_t(parent_[size_t(b)])];
    return b;
  }
  void Union(int a, int b) {
    a = Find(a);
    b = Find(b);
    if (a != b) parent_[size_t(std::max(a, b))] = std::min(a, b);
  }

  OpList& list_;
  const Device& device_;
  std::vector<int> parent_;  // union-find over blocks: the regions
  std::vector<char> ok_;     // the block may be blocked as far as its own uses go
  std::vector<Shape> shape_;
  std::vector<int> writers_;
  std::vector<SlotUse> uses_;  // in op order
};

PassResult PlanActivationLayouts(OpList list, const PassContext& ctx) {
  const size_t blocked = Planner(list, ctx.device).Run();
  PassResult r{std::move(list)};
  r.counters.Add("blocked_layouts", int64_t(blocked));
  return r;
}

}  // namespace

LOOM_PASS(PassDef{"plan_layouts", 50, DeviceBit(DeviceType::kCPU) | DeviceBit(DeviceType::kCUDA), true,
                  PlanActivationLayouts,
                  "activations and their gradients between convolutions, batch norm, relu, add and pooling stay "
                  "in the convolutions' layout (oneDNN's blocked one on the CPU, NHWC on CUDA), without "
                  "conversions around the convolutions (Note [Activation layouts])",
                  {{"blocked_layouts", "activation blocks kept in the convolutions' layout"}}});

}  // namespace loom
