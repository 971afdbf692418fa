// cuDNN's fused attention for the bf16 policy's attention records (attention.cu dispatches here).
//
// Note [Attention on cuDNN]
// The bf16 policy (Note [Precision policy] in core/autocast.h) lowers attention_qkv and its
// gradient to a bfloat16 qkv with float32 results. On CUDA these records run on cuDNN's fused
// scaled-dot-product attention (FlashAttention-2 on tensor cores: the T x T scores are never
// stored), built through cuDNN's graph API with NVIDIA's header-only cudnn-frontend (a pinned
// copy fetched by tools/setup.sh; a build without it leaves these records refused, and the
// policy keeps attention float32 on CUDA). The float32 records keep loom's own kernels.
//   - q, k and v are strided (B, heads, T, d) views of the packed qkv (row stride 3 D, head
//     stride d, k and v at D and 2 D elements): nothing is copied in.
//   - Forward: cuDNN's O is written in bfloat16 to the device's workspace and widened into the
//     float32 y with the cast op's kernel (cast.h), or straight into a bfloat16 y (Note
//     [Attention results kept in bfloat16] in graph/bf16_attention.cc); cuDNN's statistics (max
//     + ln sum exp of the scaled scores) are lse, written in place as (B, heads, T) float32.
//   - Backward: cuDNN recomputes the probabilities from q, k and the statistics and forms
//     rowsum(dO o O) itself; it has no term for a gradient of lse, so it serves only records
//     whose dlse is known to be zeros (attention_qkv_grad's zero_dlse, set by attention_qkv's
//     backward when no gradient reached lse: in a transformer lse feeds only the backward).
//     O = bfloat16(y) (exact: y is a widened bfloat16; a bfloat16 y is read in place), dO =
//     bfloat16(dy) (rounded, as FlashAttention's bf16 backward does), dq, dk and dv in bfloat16
//     laid out as qkv in the workspace, widened into the float32 dqkv (or written straight into
//     a bfloat16 dqkv). cuDNN's deterministic backward is asked for, so
//     eager steps and replays give the same bits (docs/design.md invariant 5).
//   - What runs: a head width d that is a multiple of 8 and at most 128, a contiguous qkv whose
//     start is 16-byte aligned, and whatever cuDNN itself accepts (its check_support, asked once
//     per shape on the record's device: Ampere or newer). A refused record keeps the policy's
//     float32 attention. LOOM_CUDNN_ATTENTION=0 refuses every record (to compare the two paths).
//   - Plans are built once per (device, direction, B, T, heads, d, causal, scale) and kept for
//     the process; they run under the device's library mutex like every cuDNN call.
// Rounding against the CPU's bf16 kernel (Note [Attention from a bfloat16 qkv] in
// device/cpu/kernels/attention.cc): both round y and dqkv to bfloat16 (relative 2^-9) from
// float32 sums taken in other orders, within the op table's bf16 tolerances of each other.
#pragma once

#include "core/device.h"
#include "core/op.h"

namespace loom {
namespace cuda {

// Note [What a kernel supports]: whether cuDNN runs this bfloat16-qkv record (grad: an
// attention_qkv_grad record). Builds and caches the plan on the record's CUDA device; false on
// any other device and in a build without cudnn-frontend.
bool CudnnAttentionSupports(const OpRecord& op, bool grad);
// qkv: (B, T, 3 D) bfloat16 -> y: (B, T, D), lse: (B, heads, T) float32
void CudnnAttentionQkv(const OpRecord& op, const KernelContext& ctx);
// (qkv bfloat16, y, lse, dy, dlse zeros) -> dqkv: (B, T, 3 D) float32
void CudnnAttentionQkvGrad(const OpRecord& op, const KernelContext& ctx);

}  // namespace cuda
}  // namespace loom
