// Mixed precision: which ops compute in a lower precision, and the records that do it.
//
// Note [Precision policy]
// bfloat16 and float16 training (issue 31): matrix products computed from 16-bit operands
// (bfloat16 for bf16, float16 for fp16), with float32 products, sums and results. The policy
// lowers a float32 `matmul` record (the forward products and the backward ones alike) to `cast`
// records of its operands to the 16-bit type and a matmul of those with out_dtype float32; at
// bf16 also a plain float32 `conv2d` (x and w cast, the bias and the result float32) and its
// gradients `conv2d_grad_input` (w and dy cast) and `conv2d_grad_weight` (x and dy cast, dw
// float32) where the device has a kernel for them (Device::Supports: on the CPU, oneDNN's bf16
// convolutions; on CUDA, cuDNN's, Note [bfloat16 convolutions on cuDNN]; not at fp16); and at bf16
// attention over a packed qkv, forward and gradient (`attention_qkv`, `attention_qkv_grad`: qkv
// cast, everything else float32; the CPU's kernels, Note [Attention from a bfloat16 qkv] in
// device/cpu/kernels/attention.cc; CUDA's, cuDNN's fused attention where cuDNN takes the shape,
// Note [Attention on cuDNN] in device/cuda/cudnn_attention.h). In a graph the gradient reads the
// forward's bfloat16 qkv, so the float32 qkv dies in the forward. At bf16 a GELU (gelu, gelu_erf)
// and its gradient read their input x in bfloat16 (cast, everything else float32: the GELU is
// computed in float32 from the rounded x, as PyTorch's autocast computes it from its bfloat16
// product), so what the backward keeps of x is 2 bytes an element, and the float32 x, read by
// nothing else, is not written at all (fuse_casts has add_bias write the bfloat16 x). Everything
// else stays float32: the other element-wise ops, reductions, softmax, the loss, normalisation
// statistics, the optimizer update and the weights themselves (the master copy; eagerly their
// 16-bit copy is cast for each product, in a graph their update writes it and the graph keeps it,
// cast again only after the weight was touched from outside: Note [bfloat16 weight copies kept by
// the update] in graph/weight_copies.cc). Where it applies:
//  - eager, and while capturing: inside an AutocastScope on the submitting thread, Device::Submit
//    lowers each such record as it arrives, so a graph captured in the scope replays exactly the
//    records eager execution ran (graph == eager, bitwise);
//  - a graph captured without the scope: the passes autocast_bf16 and autocast_fp16
//    (graph/autocast_pass.cc; off by default, a model's precision switches one on) lower the
//    captured list the same way, and cast each operand block once while it is unwritten (a
//    weight's 16-bit copy serves the forward product and the input gradient).
// Products and activations keep float32 storage; what a graph's backward reads across the
// forward-backward gap is the 16-bit copy where that is bitwise the same: a ReLU gradient reads
// the bfloat16 copy its activation's product already made, so the float32 activation dies in the
// forward and the planned arena shrinks by it (the pass bf16_relu_mask, Note [ReLU masks from the
// bfloat16 copy] in graph/bf16_relu_mask.cc; bf16 only). A GELU keeps its bfloat16 x (above);
// attention's y and dqkv, bfloat16 values, are written in bfloat16 for the products that read
// them (the pass bf16_attention, Note [Attention results kept in bfloat16] in
// graph/bf16_attention.cc); other saved activations stay float32.
// A float32 result read only by its cast is not stored: the element-wise op that computes it
// writes the 16-bit copy (the pass fuse_casts, Note [Casts fused into their producers] in
// graph/fuse_casts.cc); a gradient that a bias_grad sums as well has its copy written by that
// bias_grad as it reads it (the same pass).
// Lowering needs a kernel for 16-bit operands (the CPU: oneDNN's bf16 matmul, fast with
// AVX512-BF16 or AMX, and its f16 matmul where the CPU has AVX512-FP16, else float16 operands
// widened exactly to float32 for the float32 GEMM; CUDA: cuBLAS on tensor cores); a device
// without one keeps float32. fp16's narrow range (largest finite 65504, smallest normal 2^-14)
// is why fp16 training also scales its loss.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/op.h"

namespace loom {

enum class Precision : uint8_t { kFloat32, kBFloat16, kFloat16 };
const char* Name(Precision p);  // "fp32", "bf16", "fp16"
// "fp32" / "float32", "bf16" / "bfloat16", "fp16" / "float16"; ValueError naming the choices for
// anything else.
Precision PrecisionFromName(const std::string& name);
// The operands' dtype of a product lowered at `p` (bfloat16 or float16; float32 for kFloat32).
DType OperandType(Precision p);

// The precision this thread's ops compute in (AutocastScope; float32 outside any).
Precision AutocastPrecision();
void SetAutocastPrecision(Precision p);  // what AutocastScope does, without the scope (Python's loom.autocast)
class AutocastScope {
 public:
  explicit AutocastScope(Precision p);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  Precision previous_;
};

// Whether the policy lowers `op` at precision `p` (on a device with the lowered kernel).
bool Lowers(const OpRecord& op, Precision p);
// The records computing `op` at precision `p`: casts of its operands (inputs 0 and 1), then the op
// on them writing op's own outputs. `reuse(src)` may return an existing lowered copy of src to
// read instead of a new cast (undefined: cast it).
std::vector<OpRecord> Lower(const OpRecord& op, Precision p,
                            const std::function<Tensor(const Tensor&)>& reuse = nullptr);

}  // namespace loom
