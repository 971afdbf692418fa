// A cuDNN convolution plan (descriptors and the chosen algorithm) and how its algorithm is chosen
// among cuDNN's answers: Note [cuDNN plans] and Note [Measured algorithms] in cudnn.cc.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdlib>
#include <string>

#include "device/cuda/cuda_check.h"

namespace loom {
namespace cuda {

constexpr size_t kMaxConvWorkspace = size_t(1) << 30;

enum class ConvKind { kForward, kBackwardData, kBackwardFilter };

struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;  // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  size_t workspace = 0;
  bool full_fp32 = true;  // no tensor-op algorithm: float64, or float32 in full precision (Note [Float32 math on the GPU])
  bool measured = false;  // Note [Measured algorithms]
  bool nhwc = false;      // Note [NHWC convolutions on cuDNN]
  float ms = 0;           // the measured time, when measured
};

inline bool TensorOpMath(cudnnMathType_t m) {
  return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// Note [Float32 math on the GPU]: a full-precision plan sums directly. FFT and Winograd
// algorithms transform the operands and round differently from a direct sum, so they are left
// to the TF32 and bfloat16 plans. (On an H200 a measured full-float32 plan's input gradient of
// a 3x3 convolution came out 5e-5 relative off the CPU's, over the op table's tolerance; the
// winning algorithm was not recorded.)
inline bool Transforms(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
inline bool Transforms(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
inline bool Transforms(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// Note [Measured algorithms]: LOOM_CUDNN_DETERMINISTIC=0 lets a nondeterministic algorithm win
// when it is faster (as PyTorch's cudnn.benchmark without cudnn.deterministic does). Replays of
// a captured step may then differ from each other and from eager steps in the last bits
// (atomic additions in another order), so the default keeps deterministic ones first, and the
// measurements count what that costs (kernel counters "cudnn conv ... fastest ms, any
// determinism" against "... chosen ms").
inline bool DeterministicFirst() {
  static const bool first = [] {
    const char* env = std::getenv("LOOM_CUDNN_DETERMINISTIC");
    return !(env && std::string(env) == "0");
  }();
  return first;
}

// Picks an algorithm among cuDNN's answers (best first: the heuristics' order, or the measured
// times): deterministic preferred (DeterministicFirst), allowed under the float32 math in force,
// within the workspace limit. Heuristic answers: the first usable one. Measured answers (`slack`
// > 0): among the usable ones within `slack` of the fastest, the one with the least workspace,
// since the device's workspace is as large as the largest any convolution takes and counts in
// its peak. In TF32 mode the descriptor takes the chosen answer's math type. `workspace_of` says
// the bytes an answer needs. `fastest_any`, when given, gets the fastest usable answer's time
// whatever its determinism (0 when none).
template <typename Perf, typename SizeFn>
bool ChooseAlgo(const Perf* perf, int count, SizeFn workspace_of, ConvPlan& p, double slack = 0,
                float* fastest_any = nullptr) {
  auto usable = [&](const Perf& r, size_t* bytes) {
    if (r.status != CUDNN_STATUS_SUCCESS) return false;
    if (p.full_fp32 && (TensorOpMath(r.mathType) || Transforms(r.algo))) return false;
    return workspace_of(r, bytes) == CUDNN_STATUS_SUCCESS && *bytes <= kMaxConvWorkspace;
  };
  if (fastest_any) {
    *fastest_any = 0;
    for (int i = 0; i < count; ++i) {
      size_t bytes = 0;
      if (usable(perf[i], &bytes) && (*fastest_any == 0 || perf[i].time < *fastest_any)) *fastest_any = perf[i].time;
    }
  }
  for (int pass = DeterministicFirst() ? 0 : 1; pass < 2; ++pass) {  // pass 0: deterministic only
    int pick = -1;
    size_t pick_bytes = 0;
    float fastest = 0;
    for (int i = 0; i < count; ++i) {
      if (pass == 0 && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
      size_t bytes = 0;
      if (!usable(perf[i], &bytes)) continue;
      if (pick < 0) {
        pick = i, pick_bytes = bytes, fastest = perf[i].time;
        if (slack <= 0) break;
      } else if (perf[i].time <= fastest * (1 + slack) && bytes < pick_bytes) {
        pick = i, pick_bytes = bytes;  // as fast, within the slack, in less memory
      }
    }
    if (pick < 0) continue;
    p.algo = int(perf[pick].algo);
    p.workspace = pick_bytes;
    p.ms = perf[pick].time;
    if (!p.full_fp32) LOOM_CUDA_CHECK(cudnnSetConvolutionMathType(p.conv, perf[pick].mathType));
    return true;
  }
  return false;
}

}  // namespace cuda
}  // namespace loom
