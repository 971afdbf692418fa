// The convolutional-network ops: convolution, pooling, normalisation and embedding lookup.
// Declarations (shape inference, backward, saved tensors) are in src/core/ops/{conv,pool,norm,
// embedding}.cc, CPU kernels in src/device/cpu/kernels/ of the same names. Images are NCHW.
#pragma once

#include <cstdint>
#include <vector>

#include "core/op.h"

namespace loom {

// Note [Asymmetric padding]
// Convolution and pooling pad each spatial axis at its beginning (top, left: the attribute
// "padding", (ph, pw)) and at its end (bottom, right: "padding_end", (ph_end, pw_end)). A record
// without "padding_end" pads both ends equally, so symmetric records, and everything keyed on
// them, are as before. ONNX's pads, SINGA's odd_padding and pad_mode SAME_UPPER/SAME_LOWER with
// an odd total need the two to differ. Kernels index the input from the beginning padding only;
// the end padding enters through the output size (OH = (H + ph + ph_end - ...) / sh + 1), so a
// kernel that clips windows to the image needs nothing more. cuDNN pads symmetrically only: the
// CUDA convolution pads such an input explicitly (device/cuda/cudnn.cc).
inline const std::vector<int64_t>& PaddingEnd(const Attrs& a) {
  return a.Has("padding_end") ? a.Ints("padding_end") : a.Ints("padding");
}

namespace ops {

// ---- convolution (src/core/ops/conv.cc) ----
struct Conv2dOptions {
  std::vector<int64_t> stride{1, 1};    // (sh, sw)
  std::vector<int64_t> padding{0, 0};   // (ph, pw), zeros before each axis (top, left)
  std::vector<int64_t> dilation{1, 1};  // (dh, dw)
  int64_t groups = 1;
  std::vector<int64_t> padding_end{};   // (ph_end, pw_end) after (bottom, right); empty: = padding
};
// x: (N, C, H, W), w: (O, C/groups, KH, KW), bias: (O) or undefined -> (N, O, OH, OW) with
// OH = (H + ph + ph_end - dh (KH - 1) - 1) / sh + 1, and OW likewise (Note [Asymmetric padding]).
Tensor Conv2d(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor(),
              const Conv2dOptions& opt = Conv2dOptions());

// ---- pooling (src/core/ops/pool.cc) ----
struct Pool2dOptions {
  std::vector<int64_t> kernel{2, 2};   // (kh, kw)
  std::vector<int64_t> stride{};       // (sh, sw); empty: the kernel size
  std::vector<int64_t> padding{0, 0};  // (ph, pw) before each axis, at most half the kernel
  bool count_include_pad = true;       // avg_pool2d only: divide by kh * kw even at borders
  std::vector<int64_t> padding_end{};  // (ph_end, pw_end) after, at most half the kernel; empty: = padding
};
// x: (N, C, H, W) -> (N, C, OH, OW), OH = (H + ph + ph_end - kh) / sh + 1 (floor; Note
// [Asymmetric padding]). Padding never wins the max; the gradient goes to the first maximum of
// each window.
Tensor MaxPool2d(const Tensor& x, const Pool2dOptions& opt = Pool2dOptions());
Tensor AvgPool2d(const Tensor& x, const Pool2dOptions& opt = Pool2dOptions());
// x: (N, C, H, W) -> (N, C), the mean over H and W.
Tensor GlobalAvgPool(const Tensor& x);

// ---- normalisation (src/core/ops/norm.cc) ----
// x: (N, C, ...) with gamma, beta, running_mean, running_var: (C). Training: normalises with
// the batch statistics over every axis but C, and updates the running statistics in place
// (PyTorch's convention: running = (1 - momentum) running + momentum batch, the unbiased batch
// variance for running_var). Not training: normalises with the running statistics.
Tensor BatchNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                 const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);
// x: (..., D1, ..., Dk), gamma and beta: (D1, ..., Dk): normalises over the last k axes.
Tensor LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps = 1e-5);

// ---- embedding (src/core/ops/embedding.cc) ----
// table: (V, D), indices: int32/int64 (...) -> (..., D); an index outside [0, V) is a ValueError.
Tensor Embedding(const Tensor& table, const Tensor& indices);

}  // namespace ops
}  // namespace loom
