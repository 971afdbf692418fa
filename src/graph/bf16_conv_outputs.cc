// The pass bf16_conv_outputs: a bf16 convolution's result kept in bfloat16 for the batch norm
// that reads it.
//
// Note [Convolution outputs kept in bfloat16]
// Under the bf16 policy (Note [Precision policy] in core/autocast.h) a conv2d computes from
// bfloat16 x and w and gives a float32 result that both devices round to bfloat16 first and
// widen (Note [bfloat16 convolutions on cuDNN] in device/cuda/cudnn.cc; ConvBf16 in
// device/cpu/kernels/conv.cc): every value of it is a bfloat16. In a ResNet that result is
// read by batch norm only, in the forward (batch_norm_train's x) and in the backward
// (batch_norm_grad's x), so 4 bytes an element lived from one to the other, the largest part
// of a bf16 ResNet's planned arena. This pass has the convolution keep its result in bfloat16
// (out_dtype bfloat16) and both batch-norm records read that: their kernels take a bfloat16 x
// with float32 for the rest (cpu/kernels/norm.cc, cuda/cnn.cu) and compute from the same float
// values in the same order, so every result is bitwise what it was, and replay stays bitwise
// equal to eager, which keeps the float32 tensor. 2 bytes an element are planned where there
// were 4 (PyTorch's autocast keeps a convolution's output in bfloat16 too).
// Conditions: the conv2d has bfloat16 x and w, no bias and a float32 result (out_dtype), all of
// an intermediate block (not the user's, not state) that it alone writes; every reader of that
// block is a batch_norm_train or batch_norm_grad reading it, whole, as x (input 0) and nothing
// else; the device supports each rewritten record. The switch is on by default; it acts only
// where the bf16 policy lowered convolutions. Order 38: after autocast_bf16 (5), which makes the
// lowered convolutions, and before fuse_casts (40) and the layout pass (50), which then see the
// bfloat16 tensor (on CUDA an NHWC region may hold it).
#include <vector>

#include "core/device.h"
#include "graph/op_uses.h"

LOOM_OP_KIND(conv2d);
LOOM_OP_KIND(batch_norm_train);
LOOM_OP_KIND(batch_norm_grad);

namespace loom {
namespace {

bool LoweredBiasFreeConv(const OpRecord& op) {
  return op.def == &op_kind::conv2d && op.inputs.size() == 2 && op.inputs[0].dtype() == DType::kBFloat16 &&
         op.inputs[1].dtype() == DType::kBFloat16 && op.outputs[0].dtype() == DType::kFloat32;
}

PassResult KeepConvOutputsInBf16(OpList list, const PassContext& ctx) {
  const OpUses u(list);
  OpRewrites rw(list.size());
  std::vector<OpRecord> readers_rewritten(list.size());  // batch-norm records that read a kept result
  for (size_t i = 0; i < list.size(); ++i) {
    const OpRecord& conv = list.ops[i];
    if (!LoweredBiasFreeConv(conv)) continue;
    const Tensor& y = conv.outputs[0];
    const int b = u.Block(y);
    if (!u.Intermediate(b) || !u.Whole(y)) continue;
    if (u.Writers(b) != std::vector<int>{int(i)} || u.Readers(b).empty()) continue;
    bool ok = true;
    for (int r : u.Readers(b)) {
      const OpRecord& bn = list.ops[size_t(r)];
      if (bn.def != &op_kind::batch_norm_train && bn.def != &op_kind::batch_norm_grad) ok = false;
      for (size_t k = 0; ok && k < bn.inputs.size(); ++k)
        if (bn.inputs[k].defined() && bn.inputs[k].block() == y.block() && (k != 0 || !u.Whole(bn.inputs[k])))
          ok = false;
      if (!ok) break;
    }
    if (!ok) continue;
    // The rewritten records: the convolution writing a bfloat16 y, its readers reading it.
    OpRecord low = conv;
    low.attrs.Set("out_dtype", int64_t(DType::kBFloat16));
    low.outputs[0] = Tensor(y.shape(), DType::kBFloat16, y.device_ptr());
    std::vector<std::pair<int, OpRecord>> readers;
    for (int r : u.Readers(b)) {
      OpRecord bn = readers_rewritten[size_t(r)].def ? readers_rewritten[size_t(r)] : list.ops[size_t(r)];
      bn.inputs[0] = low.outputs[0];
      readers.emplace_back(r, std::move(bn));
    }
    bool supported = ctx.device.Supports(low);  // Note [What a kernel supports]
    for (const auto& [r, bn] : readers) supported = supported && ctx.device.Supports(bn);
    if (!supported) continue;
    rw.Replace(int(i), std::move(low));
    for (auto& [r, bn] : readers) readers_rewritten[size_t(r)] = std::move(bn);
  }
  for (size_t r = 0; r < list.size(); ++r)
    if (readers_rewritten[r].def) {
      rw.replace[r] = std::move(readers_rewritten[r]);  // not a fused record: not counted
    }
  return rw.Result(std::move(list), "bf16_conv_outputs");
}

}  // namespace

LOOM_PASS(PassDef{"bf16_conv_outputs", 38, kAllDevices, true, KeepConvOutputsInBf16,
                  "a bf16 convolution read only by batch norm keeps its (bfloat16-rounded) result in bfloat16, "
                  "which batch norm reads in the forward and the backward: 2 bytes an element planned instead of 4 "
                  "(Note [Convolution outputs kept in bfloat16])",
                  {{"bf16_conv_outputs", "convolution results kept in bfloat16 for batch norm"}}});

}  // namespace loom
