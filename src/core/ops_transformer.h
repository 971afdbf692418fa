// The transformer ops: scaled-dot-product attention. Declarations are in
// src/core/ops/attention.cc, kernels in src/device/cpu/kernels/attention.cc and
// src/device/cuda/attention.cu.
#pragma once

#include "core/op.h"

namespace loom {
namespace ops {

// Note [Attention keeps no score matrix]
// attention(q, k, v) computes softmax(scale q k^T + mask) v per batch element without keeping
// the (Tq, Tk) matrix of scores or probabilities: the kernels walk the keys in blocks with an
// online softmax (running maximum and sum per query row, FlashAttention's recurrence), and the
// op's second output is each row's log-sum-exp of the scaled, masked scores. Backward keeps q,
// k, v, y and that log-sum-exp (O(T d) per row, not O(T^2)) and recomputes each block's
// probabilities from them, P = exp(scale q k^T - lse). With causal = 1, query i sees keys
// j <= i (top-left aligned, as PyTorch's is_causal). scale = 0 means 1 / sqrt(d).
//
// q: (..., Tq, D), k: (..., Tk, D), v: (..., Tk, Dv) -> y: (..., Tq, Dv); leading axes equal.
Tensor Attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale = 0);
// The same on the packed projection of a self-attention layer: qkv (B, T, 3 D), each row q | k |
// v, head h in columns [h D / heads, (h + 1) D / heads) of each third -> y (B, T, D), the heads
// side by side: what the projections before and after read and write, so no head is permuted
// or copied, in the forward pass or the backward.
Tensor AttentionQkv(const Tensor& qkv, int64_t heads, bool causal, double scale = 0);

}  // namespace ops
}  // namespace loom
