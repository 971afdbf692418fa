// CPU convolution through oneDNN (float32), behind the conv2d kernels in kernels/conv.cc.
//
// The conv kernels ask FindDnnlConv for a plan first and fall back to im2col + OpenBLAS when
// there is none: loom was built without oneDNN, the dtype is not float32, oneDNN has no
// implementation for the geometry, or the im2col path was chosen (SetCpuConvImpl, or
// LOOM_CPU_CONV=im2col in the environment).
//
// Note [oneDNN convolution]
// - Layouts. loom's tensors are NCHW and weights OIHW; oneDNN's fast kernels want blocked
//   layouts (nChw16c on AVX-512). A plan lets oneDNN pick (format_tag::any) and reorders the
//   operands in and the result out around each call, as PyTorch's eager mkldnn path does. The
//   reordered copies and oneDNN's own scratchpad are the op's scratch: declared up front
//   (Conv2dScratch & co.) so a planned graph packs them into its arena, and taken from the
//   device pool in eager mode, so memory statistics see every byte (invariant 2). In a captured
//   graph the activations may already be nChw16c (ConvDims::blocked, x_blocked; Note
//   [Activation layouts] in graph/layouts.cc): their reorders then vanish, since the plain and
//   the chosen layout agree.
// - Threads. oneDNN here runs on OpenMP; a second thread team beside loom's pool would fight it
//   for the cores. So every oneDNN call runs with one OpenMP thread, and loom splits the batch
//   into one part per pool thread (parts differ by at most one image; at most two primitives).
//   Inside a parallel replay worker the parts run one after another on that worker. The weight
//   gradient of each part lands in its own buffer and the parts are added in part order, so
//   results do not depend on timing.
// - Cost. Primitives are built (JIT-compiled) once per geometry and kept in a process-wide
//   cache; a call builds nothing.
//
// Note [Winograd]
// Winograd's F(4x4, 3x3) computes a 3x3 convolution with 36 multiplies per 16 outputs of a tile
// instead of 144: about 2.25x fewer, bought with transforms whose float32 rounding grows with
// the tile (measured on the op-case table: up to ~1e-4 relative against the float64 reference,
// where direct convolution stays within 1e-5) and with bigger scratch (the transformed tiles;
// +91 MiB of arena on ResNet-18 at batch 16). It is therefore opt-in, never the default: replay
// still equals eager bitwise (both run the same kernel), but results differ from direct
// convolution by that rounding. test/core/cnn_test.cc checks the passes against the float64
// references at Winograd's tolerance and that the Winograd kernels really ran.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/op.h"

namespace loom {
namespace cpu {

enum class ConvPass { kForward, kGradInput, kGradWeight };

// Everything that selects a primitive: the forward convolution's geometry, with the image
// count of the whole call.
struct ConvDims {
  int64_t n, c, h, w;  // input
  int64_t o, kh, kw;   // weight (O, C/groups, KH, KW)
  int64_t oh, ow;      // output
  int64_t sh, sw, ph, pw, dh, dw, groups;
  bool bias;  // forward only: the bias is added by oneDNN
  // Forward only: ReLU on the result (conv2d_relu, Note [Fusing bias and activation] in
  // graph/fuse_bias_act.cc), with the relu op's formula, on each part's images right after the
  // primitive stores them (while they are in cache). Not oneDNN's ReLU post-op: that one maps NaN
  // to 0 (measured here with oneDNN 2.6), where the relu op keeps it, and it was no faster on
  // the small CNN's shapes (one shared 2-core machine, noisy).
  bool relu = false;
  // The (N, O, OH, OW) operand (y of the forward pass, dy of both gradients) is stored in
  // oneDNN's nChw16c layout instead of NCHW; O is a multiple of 16 (Note [Activation layouts]
  // in graph/layouts.cc).
  bool blocked = false;
  // The same for the (N, C, H, W) operand (x of the forward pass and of the weight gradient, dx
  // of the input gradient); C is a multiple of 16.
  bool x_blocked = false;
  // The weights (w of the forward pass and of the input gradient, dw of the weight gradient)
  // are stored in oneDNN's OIhw16i16o layout instead of OIHW; groups is 1 and O and C are
  // multiples of 16 (Note [Weights kept blocked] in cpu/passes/weight_layout.cc).
  bool w_blocked = false;
  // The pass's two inputs are bfloat16 (forward: x and w; grad input: w and dy; grad weight: x
  // and dy), its result, the bias and the sums float32 (Note [Precision policy] in
  // core/autocast.h). Plain layouts only, no ReLU, no Winograd: what the policy lowers (a plain
  // conv2d and its gradients), on oneDNN's bf16 kernels (AVX512-BF16 or AMX to be fast).
  bool bf16 = false;
};

// Which implementation the CPU conv kernels use. kAuto: oneDNN's direct convolution where it
// applies, else im2col. kWinograd: as kAuto, but 3x3 stride-1 convolutions without dilation or
// groups run oneDNN's Winograd F(4x4, 3x3) kernels (all three passes) where oneDNN has them
// (AVX-512); opt-in (LOOM_CPU_CONV=winograd, loom-bench --cpu-conv winograd), see Note [Winograd].
enum class CpuConvImpl { kAuto, kIm2col, kWinograd };
void SetCpuConvImpl(CpuConvImpl impl);
CpuConvImpl GetCpuConvImpl();
bool HaveDnnl();  // built with oneDNN

class DnnlConvPlan;
// The cached plan for this pass and geometry, or null when oneDNN is not to be used (see above).
// Thread-safe.
const DnnlConvPlan* FindDnnlConv(ConvPass pass, const ConvDims& d, DType dtype);
// Scratch bytes one call of the plan needs.
size_t DnnlConvScratchBytes(const DnnlConvPlan& plan);
// Runs the plan. kForward: a = x, b = w, bias (or null), out = y. kGradInput: a = w, b = dy,
// out = dx. kGradWeight: a = x, b = dy, out = dw. a and b are float32, or bfloat16 bits in a
// ConvDims::bf16 plan. scratch holds DnnlConvScratchBytes bytes.
void RunDnnlConv(const DnnlConvPlan& plan, const void* a, const void* b, const float* bias, float* out,
                 void* scratch);

}  // namespace cpu
}  // namespace loom
