// The pass bf16_attention: under the bf16 policy, attention's y and its gradient dqkv kept in
// bfloat16 for the products that read them.
//
// Note [Attention results kept in bfloat16]
// Under the bf16 policy (Note [Precision policy] in core/autocast.h) attention_qkv computes from
// a bfloat16 qkv and gives y, and its gradient gives dqkv, as float32 tensors whose every value
// is a bfloat16: cuDNN's fused attention writes O and dQKV in bfloat16, widened by the kernel
// (Note [Attention on cuDNN] in device/cuda/cudnn_attention.h), and the CPU's kernels round them
// as cuDNN does (Note [Attention from a bfloat16 qkv] in device/cpu/kernels/attention.cc). In a
// GPT each is then narrowed again: y by the cast that feeds the output projection's products
// (its forward and its weight gradient) while the gradient reads y in float32 (and cuDNN
// narrows it once more); dqkv by the cast that feeds the qkv projection's products while the
// qkv bias's gradient sums it in float32. This pass has attention_qkv write its cast's bfloat16
// tensor itself (out_dtype bfloat16; lse stays float32) and the gradient read that as y, and
// has attention_qkv_grad write its cast's bfloat16 tensor (out_dtype bfloat16), which bias_grad
// then sums (out_dtype float32: the same float values added in the same order); the two casts
// go. Every value anything reads is what it was, so every result is bitwise the same, and replay
// stays bitwise equal to eager, which keeps the float32 tensors.
// What it saves on a GPU, per layer of GPT-2 124M at batch 8 x 1,024 (n = 6.3 million values of
// y): four cast kernels and about 60 n bytes of traffic (cuDNN reads and writes y and dqkv in
// place instead of through its workspace), and in the plan the float32 y (4 n bytes), which
// lived from the forward to the backward.
// Conditions: the tensor is output 0 of a lowered attention_qkv or attention_qkv_grad (bfloat16
// qkv, float32 result), all of an intermediate block (not the user's, not state) that the op
// alone writes; exactly one of its readers is a cast to bfloat16 of all of it, of the same
// shape, into all of a block that only the cast writes; every other reader is, for y, an
// attention_qkv_grad reading all of it as its y (input 1) and nothing else of it, and for dqkv a
// float32 bias_grad of all of it; the device supports every rewritten record. The switch is on
// by default and acts only where the bf16 policy lowered attention. Order 39: after
// autocast_bf16 (5), which makes the casts, and before fuse_casts (40).
#include <functional>
#include <vector>

#include "core/device.h"
#include "graph/op_uses.h"

LOOM_OP_KIND(cast);
LOOM_OP_KIND(attention_qkv);
LOOM_OP_KIND(attention_qkv_grad);
LOOM_OP_KIND(bias_grad);

namespace loom {
namespace {

bool Lowered(const OpRecord& op, const OpDef& def) {
  return op.def == &def && !op.inputs.empty() && op.inputs[0].dtype() == DType::kBFloat16 && !op.outputs.empty() &&
         op.outputs[0].dtype() == DType::kFloat32;
}

// Output 0 of op i, when it is an intermediate that op i alone writes, read by exactly one cast
// to bfloat16 (the Note's conditions) and otherwise only by records `other` accepts: that cast
// and those readers; cast -1 otherwise.
struct Narrowed {
  int cast = -1;
  std::vector<int> others;
};
Narrowed FindNarrowing(const OpList& list, const OpUses& u, int i,
                       const std::function<bool(const OpRecord&, const Tensor&)>& other) {
  const Tensor& y = list.ops[size_t(i)].outputs[0];
  const int b = u.Block(y);
  if (!u.Intermediate(b) || !u.Whole(y) || u.Writers(b) != std::vector<int>{i}) return {};
  Narrowed n;
  for (int r : u.Readers(b)) {
    const OpRecord& op = list.ops[size_t(r)];
    const bool cast = op.def == &op_kind::cast && op.inputs[0].block() == y.block() && u.Whole(op.inputs[0]) &&
                      op.inputs[0].shape() == y.shape() && op.outputs[0].dtype() == DType::kBFloat16 &&
                      u.Whole(op.outputs[0]) && op.outputs[0].shape() == y.shape() &&
                      u.Writers(u.Block(op.outputs[0])) == std::vector<int>{r} &&
                      u.Intermediate(u.Block(op.outputs[0]));
    if (cast && n.cast < 0) {
      n.cast = r;
    } else if (other(op, y)) {
      n.others.push_back(r);
    } else {
      return {};
    }
  }
  if (n.cast < 0) return {};
  return n;
}

// op reads y as its input k (all of it) and nothing else of y's block.
bool ReadsOnlyAs(const OpRecord& op, const Tensor& y, size_t k) {
  for (size_t j = 0; j < op.inputs.size(); ++j)
    if (op.inputs[j].defined() && op.inputs[j].block() == y.block() &&
        (j != k || op.inputs[j].offset() != 0 || op.inputs[j].shape() != y.shape() || !op.inputs[j].is_contiguous()))
      return false;
  return k < op.inputs.size() && op.inputs[k].defined() && op.inputs[k].block() == y.block();
}

// One kind of result: for each lowered record of `def`, its output 0 written in bfloat16 in place
// of its cast, when `reader` accepts every other reader and `reread` (which makes such a reader
// read the bfloat16 tensor) leaves records the device supports.
void KeepInBf16(const OpList& list, const OpUses& u, OpRewrites& rw, const Device& device, const OpDef& def,
                const std::function<bool(const OpRecord&, const Tensor&)>& reader,
                const std::function<void(OpRecord&, const Tensor&)>& reread) {
  for (size_t i = 0; i < list.size(); ++i) {
    if (!Lowered(list.ops[i], def)) continue;
    const Narrowed n = FindNarrowing(list, u, int(i), reader);
    if (n.cast < 0) continue;
    OpRecord producer = rw.replace[i].def ? rw.replace[i] : list.ops[i];
    producer.outputs[0] = list.ops[size_t(n.cast)].outputs[0];
    producer.attrs.Set("out_dtype", int64_t(DType::kBFloat16));
    bool supported = device.Supports(producer);  // Note [What a kernel supports]
    std::vector<OpRecord> readers;
    for (int r : n.others) {
      readers.push_back(rw.replace[size_t(r)].def ? rw.replace[size_t(r)] : list.ops[size_t(r)]);
      reread(readers.back(), producer.outputs[0]);
      supported = supported && device.Supports(readers.back());
    }
    if (!supported) continue;
    rw.Replace(int(i), std::move(producer));
    for (size_t k = 0; k < readers.size(); ++k) rw.replace[size_t(n.others[k])] = std::move(readers[k]);  // not counted
    rw.drop[size_t(n.cast)] = true;
  }
}

PassResult KeepAttentionResultsInBf16(OpList list, const PassContext& ctx) {
  const OpUses u(list);
  OpRewrites rw(list.size());
  // dqkv, summed by the qkv bias's gradient; then y, which the same gradient records read.
  KeepInBf16(
      list, u, rw, ctx.device, op_kind::attention_qkv_grad,
      [](const OpRecord& op, const Tensor& d) {
        return op.def == &op_kind::bias_grad && op.outputs[0].dtype() == DType::kFloat32 && ReadsOnlyAs(op, d, 0);
      },
      [](OpRecord& sum, const Tensor& d) {
        sum.inputs[0] = d;
        sum.attrs.Set("out_dtype", int64_t(DType::kFloat32));
      });
  KeepInBf16(
      list, u, rw, ctx.device, op_kind::attention_qkv,
      [](const OpRecord& op, const Tensor& y) {
        return op.def == &op_kind::attention_qkv_grad && op.inputs[0].dtype() == DType::kBFloat16 && ReadsOnlyAs(op, y, 1);
      },
      [](OpRecord& grad, const Tensor& y) { grad.inputs[1] = y; });
  return rw.Result(std::move(list), "bf16_attention_results");
}

}  // namespace

LOOM_PASS(PassDef{"bf16_attention", 39, kAllDevices, true, KeepAttentionResultsInBf16,
                  "under the bf16 policy, attention's y and dqkv (bfloat16 values in float32) are written in "
                  "bfloat16 for the casts that read them, which go; the gradient reads that y, the qkv bias's "
                  "gradient that dqkv; bitwise the same (Note [Attention results kept in bfloat16])",
                  {{"bf16_attention_results", "attention results (y, dqkv) kept in bfloat16"}}});

}  // namespace loom
