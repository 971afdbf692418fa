// cuDNN 9 kernels: 2-D convolution (forward, input and weight gradients, bias gradient) and
// inference-mode batch normalisation, with the semantics of src/device/cpu/kernels/{conv,norm}.cc.
// Training batch norm and its gradient are loom's own (cnn.cu, Note [Batch norm in any layout]).
//
// Note [cuDNN plans]
// Descriptors and the algorithm are chosen once per (device, op, dtype, shapes, geometry,
// float32 math) and cached for the life of the process. The first choice comes from cuDNN's
// heuristics (host-side, no trial runs, no synchronisation): the first algorithm that is
// deterministic, fits the workspace limit and is allowed under the float32 math in force (Note
// [Float32 math on the GPU] in core/device.h: TF32 tensor cores by default, CUDNN_FMA_MATH and
// no tensor-op algorithm in full float32). The workspace is the device's (CudaDeviceImpl::
// Workspace), counted in its memory statistics and sized by the first run of each shape, which
// is why a device graph is recorded only after a warm-up replay (Note [Device graph replay]).
//
// Note [Measured algorithms]
// A plan that was only guessed is measured at its first run: cuDNN's find call times every
// algorithm on the op's own buffers, and the fastest deterministic one that fits the limit
// replaces the guess (the fastest of all when none is deterministic); of answers within 5% of
// the fastest, the one taking the least workspace, which sets the device's peak. It costs a few
// milliseconds per shape and a synchronisation, once per process; a captured step then replays
// the measured choice thousands of times. Eager calls and replays share the plans, so a graph
// and the eager steps of the same process run the same algorithms and stay bitwise equal
// (docs/design.md invariant 5). The find workspace is a temporary cudaMalloc outside loom's
// pool, freed at once, so it never shows in the device's peak. LOOM_CUDNN_FIND=0 keeps the
// heuristic choice. Each choice is reported (device/kernel_report.h: loom-bench's "kernels").
//
// Note [bfloat16 convolutions on cuDNN]
// The bf16 policy (Note [Precision policy] in core/autocast.h) lowers conv2d and its gradients to
// bfloat16 operands with a float32 result. cuDNN's convolutions take x, w and y of one type
// (BFLOAT16 with FLOAT compute: products and sums in float32, on tensor cores), so the pass
// writes its result in bfloat16 to the device's workspace and widens it into the float32 output
// with the cast op's kernel (cast.h). That rounds each result element to bfloat16 once (relative
// 2^-9), as PyTorch's autocast keeps them. The CPU's forward convolution rounds its result so too
// (ConvBf16 in cpu/kernels/conv.cc), so that a graph may keep it in bfloat16 (Note [Convolution
// outputs kept in bfloat16] in graph/bf16_conv_outputs.cc); its gradients stay float32 there, a
// difference the op table's bf16 tolerance covers. A forward bias is added in float32 after the
// widening; with out_dtype bfloat16 (no bias) cuDNN writes the output directly. The workspace holds, in order: the explicitly padded input (Note
// [Explicit padding], in bfloat16), the bfloat16 result, the operands in the plan's layout (Note
// [NHWC convolutions on cuDNN]), cuDNN's own workspace. Tensor-op algorithms are allowed
// whatever the float32 math (they are the point of bfloat16): a bfloat16 plan's descriptor asks
// for CUDNN_TENSOR_OP_MATH, as PyTorch's does. With CUDNN_DEFAULT_MATH (which does allow TF32
// for float32) no bfloat16 plan reported tensor ops on an H200, and ResNet-50 b32's bf16 step
// took 609 ms against 26 ms in TF32. A plan's measurement (Note [Measured algorithms]) writes
// into a temporary bfloat16 buffer.
//
// Note [NHWC convolutions on cuDNN]
// cuDNN's tensor-core convolutions (TF32 for float32, and bfloat16) run on NHWC tensors; handed
// NCHW ones, cuDNN transposes them around the call itself or picks slower algorithms. So a plan
// that may use tensor ops (bfloat16 operands, or float32 in TF32 mode) is NHWC: x, y and the
// weight (as O, KH, KW, C/g) are described and computed in NHWC. Full float32 and float64 plans,
// and explicitly padded ones (Note [Explicit padding]), stay NCHW. An NHWC plan's kernel
// transposes (cast.h's LaunchRelayout) every operand that is not already NHWC into the device
// workspace and its result back into its output, so eager execution, which hands over NCHW
// tensors, computes on NHWC with the same algorithm as a graph. A graph's layout pass (Note
// [Activation layouts] in graph/layouts.cc) keeps activations NHWC across a region, marking
// the records' operands (x_blocked, y_blocked; dy_blocked, dx_blocked), and those transposes
// vanish; the weight's remain (a weight is read by three passes a step; O C KH KW values each
// way). The transposes move values without arithmetic, so graph and eager stay bitwise equal.
// Channel counts that are not multiples of 8 (an RGB stem) keep a plan NCHW too.
// LOOM_CUDNN_LAYOUT=nchw keeps every plan NCHW and makes the CUDA kernels refuse NHWC operands
// (batch norm's and pooling's too, CudaNhwcAllowed), so the layout pass plans nothing: the
// comparison the GPU check runs. A 1x1 weight, or an activation of one pixel or one channel, has
// the same bytes in both layouts and is not copied.
//
// These are cuDNN's long-standing convolution and batch-norm entry points, which cuDNN 9 marks
// deprecated in favour of its graph API; they are present and supported in every 9.x release.
#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

#include "core/ops_cnn.h"
#include "device/cuda/bias_act.h"
#include "device/cuda/cast.h"
#include "device/cuda/cudnn_plan.h"
#include "device/cuda/cuda_device.h"
#include "device/kernel_dispatch.h"
#include "device/kernel_report.h"
#include "device/kernel_shapes.h"

LOOM_OP_KIND(conv2d_grad_input);
LOOM_OP_KIND(conv2d_grad_weight);


namespace loom {
namespace cuda {
namespace {

cudnnDataType_t CudnnType(DType t, const char* op) {
  if (t == DType::kFloat32) return CUDNN_DATA_FLOAT;
  if (t == DType::kFloat64) return CUDNN_DATA_DOUBLE;
  if (t == DType::kBFloat16) return CUDNN_DATA_BFLOAT16;  // Note [bfloat16 convolutions on cuDNN]
  throw DTypeError(detail::Cat("[", op, "] no CUDA kernel for dtype ", Name(t)));
}

int Dim(int64_t v, const char* op) {
  LOOM_CHECK(v <= INT_MAX, ShapeError, "[", op, "] dimension ", v, " is too large for cuDNN");
  return int(v);
}

// alpha = 1 and beta = 0 or 1, in the precision cuDNN wants for the data type.
struct Scalars {
  float f1 = 1, f0 = 0;
  double d1 = 1, d0 = 0;
  const void* one(DType t) const { return t == DType::kFloat64 ? static_cast<const void*>(&d1) : &f1; }
  const void* zero(DType t) const { return t == DType::kFloat64 ? static_cast<const void*>(&d0) : &f0; }
};
const Scalars kScalars;

}  // namespace

// ---------------------------------------------------------------- convolution

// Note [NHWC convolutions on cuDNN]: LOOM_CUDNN_LAYOUT=nchw.
bool CudaNhwcAllowed() {
  static const bool allowed = [] {
    const char* env = std::getenv("LOOM_CUDNN_LAYOUT");
    return !(env && std::string(env) == "nchw");
  }();
  return allowed;
}

namespace {

// Note [NHWC convolutions on cuDNN]: whether a plan for operands of dtype t and a weight w
// (O, C/g, KH, KW) is NHWC: tensor-op math, no explicit padding, and channel counts that
// cuDNN's NHWC tensor-core kernels take (multiples of 8 on both sides; an RGB stem stays NCHW).
bool NhwcPlan(DType t, bool padded, const Shape& w) {
  if (padded || !CudaNhwcAllowed() || w.size() != 4 || w[0] % 8 != 0 || w[1] % 8 != 0) return false;
  return t == DType::kBFloat16 || (t == DType::kFloat32 && CudaFloat32Math() == Float32Math::kTF32);
}

const char* const kConvKindName[] = {"forward", "grad input", "grad weight"};

// cuDNN's algorithm enums, by name, for the reports.
const char* AlgoName(ConvKind kind, int a) {
  static const char* const fwd[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
                                    "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char* const data[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char* const filter[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                       "FFT_TILING"};
  if (kind == ConvKind::kForward && a >= 0 && a < 8) return fwd[a];
  if (kind == ConvKind::kBackwardData && a >= 0 && a < 6) return data[a];
  if (kind == ConvKind::kBackwardFilter && a >= 0 && a < 7) return filter[a];
  return "unknown";
}

// The math type a plan's descriptor starts with, and measures under: FMA only in full
// precision (Note [Float32 math on the GPU]), tensor ops for bfloat16 (Note [bfloat16
// convolutions on cuDNN]), else cuDNN's default (TF32 allowed for float32).
cudnnMathType_t PlanMath(DType t, bool full_fp32) {
  if (full_fp32) return t == DType::kFloat32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
  return t == DType::kBFloat16 ? CUDNN_TENSOR_OP_MATH : CUDNN_DEFAULT_MATH;
}

void ReportPlan(ConvKind kind, DType t, const ConvPlan& p) {
  cudnnMathType_t m = CUDNN_DEFAULT_MATH;
  cudnnGetConvolutionMathType(p.conv, &m);
  std::string impl = std::string("cuDNN ") + AlgoName(kind, p.algo) + (TensorOpMath(m) ? ", tensor ops" : "") +
                     (t == DType::kFloat32 ? (p.full_fp32 ? ", full float32" : ", TF32 allowed") : "") +
                     (p.measured ? ", measured" : ", heuristic") + (p.nhwc ? ", NHWC" : ", NCHW");
  ReportKernel(std::string("conv2d ") + kConvKindName[int(kind)] +
                   (t == DType::kFloat64 ? " f64" : t == DType::kBFloat16 ? " bf16" : " f32"),
               impl);
}

// x: (N, C, H, W), w: (O, C/g, KH, KW), y: (N, O, OH, OW), all of dtype t (the operands' type:
// bfloat16 for the bf16 policy's passes, whose float32 result cuDNN writes as bfloat16).
// padded: x is the explicitly padded input and cuDNN pads nothing (Note [Explicit padding]).
std::string PlanKey(int dev, ConvKind kind, DType t, const Shape& x, const Shape& w, const Shape& y, const Attrs& a,
                    bool padded, bool full_fp32, bool nhwc) {
  std::ostringstream k;
  k << dev << '|' << int(kind) << '|' << int(t) << '|' << full_fp32 << '|' << nhwc << '|' << ToString(x) << ToString(w)
    << ToString(y)
    << ToString(a.Ints("stride")) << ToString(a.Ints("padding")) << ToString(PaddingEnd(a))
    << ToString(a.Ints("dilation")) << a.Int("groups") << '|' << padded;
  return k.str();
}

// Note [Explicit padding]
// cuDNN pads both ends of an axis equally. A convolution with padding_end != padding (Note
// [Asymmetric padding] in core/ops_cnn.h) runs on a copy of x padded explicitly with zeros,
// (N, C, H + ph + ph_end, W + pw + pw_end), with no padding of cuDNN's own: the forward pass and
// the weight gradient read that copy; the input gradient is the padded copy's, cropped. The copy
// lives in the device's workspace, ahead of cuDNN's own workspace, so it is counted and a device
// graph's warm-up replay sizes it. Symmetric convolutions take none of this.
struct ExplicitPad {
  bool on = false;
  Shape padded;             // the padded x
  int64_t top = 0, left = 0;
  size_t bytes = 0;         // of the padded x, rounded up to keep cuDNN's workspace aligned
};
ExplicitPad ExplicitPadOf(const Attrs& a, const Shape& x, DType t) {
  const std::vector<int64_t>& p = a.Ints("padding");
  const std::vector<int64_t>& pe = PaddingEnd(a);
  ExplicitPad e;
  if (p == pe) return e;
  e.on = true;
  e.padded = {x[0], x[1], x[2] + p[0] + pe[0], x[3] + p[1] + pe[1]};
  e.top = p[0];
  e.left = p[1];
  e.bytes = (size_t(NumElements(e.padded)) * SizeOf(t) + 255) / 256 * 256;
  return e;
}

// x (N, C, H, W) <-> the interior of the padded xp: into = true copies x into xp (whose border
// the caller has zeroed), false copies the interior of xp out to x. One 3-D copy over N C planes.
void CopyInterior(const ExplicitPad& e, const Shape& x, size_t elem, void* xp, void* xd, bool into, cudaStream_t s) {
  cudaMemcpy3DParms c = {};
  cudaPitchedPtr small = make_cudaPitchedPtr(xd, size_t(x[3]) * elem, size_t(x[3]), size_t(x[2]));
  cudaPitchedPtr big = make_cudaPitchedPtr(xp, size_t(e.padded[3]) * elem, size_t(e.padded[3]), size_t(e.padded[2]));
  const cudaPos at = make_cudaPos(size_t(e.left) * elem, size_t(e.top), 0);
  c.srcPtr = into ? small : big;
  c.dstPtr = into ? big : small;
  if (into)
    c.dstPos = at;
  else
    c.srcPos = at;
  c.extent = make_cudaExtent(size_t(x[3]) * elem, size_t(x[2]), size_t(x[0] * x[1]));
  c.kind = cudaMemcpyDeviceToDevice;
  LOOM_CUDA_CHECK(cudaMemcpy3DAsync(&c, s));
}

// The input cuDNN reads: x itself, or its zero-padded copy made at xp (Note [Explicit padding]).
const void* ConvInput(const ExplicitPad& e, const Tensor& x, char* xp, cudaStream_t s) {
  if (!e.on) return x.raw_data();
  LOOM_CUDA_CHECK(cudaMemsetAsync(xp, 0, e.bytes, s));
  CopyInterior(e, x.shape(), SizeOf(x.dtype()), xp, x.raw_data(), true, s);
  return xp;
}

[[noreturn]] void NoAlgorithm(const char* op, int count) {
  throw DeviceError(detail::Cat("[", op, "] cuDNN offers no algorithm for this convolution (", count,
                                " candidates, none supported within ", kMaxConvWorkspace >> 20, " MiB of workspace)"));
}

// Note [Measured algorithms]: a measured algorithm within 5% of the fastest counts as fast.
constexpr double kTimeSlack = 0.05;

bool MeasuringAllowed() {
  static const bool allowed = [] {
    const char* env = std::getenv("LOOM_CUDNN_FIND");
    return !(env && std::string(env) == "0");
  }();
  return allowed;
}

// A cudaMalloc outside loom's pool, freed at scope exit (Note [Measured algorithms]); p is null
// when `bytes` is 0 or the allocation fails.
struct TempDeviceBuffer {
  void* p = nullptr;
  explicit TempDeviceBuffer(size_t bytes) {
    if (bytes && cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();  // clear the failed allocation
      p = nullptr;
    }
  }
  ~TempDeviceBuffer() {
    if (p) cudaFree(p);
  }
  TempDeviceBuffer(const TempDeviceBuffer&) = delete;
  TempDeviceBuffer& operator=(const TempDeviceBuffer&) = delete;
};

// Note [bfloat16 convolutions on cuDNN]: the bytes of a pass's bfloat16 result in the workspace
// (0 when the result is the operands' type and cuDNN writes it in place).
size_t LowResultBytes(DType operands, const Tensor& out) {
  return operands == out.dtype() ? 0 : (size_t(out.numel()) * SizeOf(operands) + 255) / 256 * 256;
}

// Measures p unless padded, measured or not allowed (Note [Measured algorithms]) on x, w and y
// as cuDNN sees them; the pass's output among them (y forward, x for the input gradient, w for
// the weight's) is replaced by a temporary buffer of `low_bytes` when cuDNN writes a bfloat16
// copy of it (Note [bfloat16 convolutions on cuDNN]).
void MeasureConvPlan(CudaDeviceImpl& dev, ConvKind kind, DType t, ConvPlan& p, const void* x, const void* w,
                     const void* y);
void MaybeMeasure(CudaDeviceImpl& dev, ConvKind kind, DType t, ConvPlan& p, bool padded, size_t low_bytes,
                  const void* x, const void* w, const void* y) {
  if (padded || p.measured || !MeasuringAllowed()) return;
  TempDeviceBuffer low(low_bytes);
  if (low_bytes && !low.p) return;  // no room for the bfloat16 result: keep the heuristic choice
  // The output's place among (x, w, y): y forward, x for the input gradient, w for the weight's.
  if (low.p) (kind == ConvKind::kForward ? y : kind == ConvKind::kBackwardData ? x : w) = low.p;
  MeasureConvPlan(dev, kind, t, p, x, w, y);
}

// Note [Measured algorithms]: times every algorithm for p on these buffers (x, w and y as cuDNN
// sees them; the output's contents are overwritten, as the op is about to do anyway) and keeps
// the best usable one. Leaves the heuristic choice when nothing measured is usable.
void MeasureConvPlan(CudaDeviceImpl& dev, ConvKind kind, DType t, ConvPlan& p, const void* x, const void* w,
                     const void* y) {
  p.measured = true;  // once, whatever the outcome
  size_t free_bytes = 0, total = 0;
  LOOM_CUDA_CHECK(cudaStreamSynchronize(dev.stream()));
  LOOM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  size_t ws_bytes = std::min(kMaxConvWorkspace, free_bytes / 2);
  TempDeviceBuffer scratch(ws_bytes);  // none if the allocation fails: measure without workspace
  void* ws = scratch.p;
  if (!ws) ws_bytes = 0;
  constexpr int kMax = 16;
  int found = 0;
  const ConvPlan before = p;  // the guess
  cudnnHandle_t hd = dev.cudnn();
  auto by_memory = [&](const auto& perf, size_t* b) {
    *b = perf.memory;
    return CUDNN_STATUS_SUCCESS;
  };
  bool chosen = false;
  float fastest_any = 0;
  // Every math type the plan allows competes; the winner's goes on the descriptor (ChooseAlgo).
  cudnnMathType_t before_math = CUDNN_DEFAULT_MATH;
  LOOM_CUDA_CHECK(cudnnGetConvolutionMathType(p.conv, &before_math));
  if (!p.full_fp32) LOOM_CUDA_CHECK(cudnnSetConvolutionMathType(p.conv, PlanMath(t, false)));
  if (kind == ConvKind::kForward) {
    cudnnConvolutionFwdAlgoPerf_t perf[kMax];
    LOOM_CUDA_CHECK(cudnnFindConvolutionForwardAlgorithmEx(hd, p.x, x, p.w, w, p.conv, p.y, const_cast<void*>(y), kMax,
                                                           &found, perf, ws, ws_bytes));
    chosen = ChooseAlgo(perf, found, by_memory, p, kTimeSlack, &fastest_any);
  } else if (kind == ConvKind::kBackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
    LOOM_CUDA_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(hd, p.w, w, p.y, y, p.conv, p.x, const_cast<void*>(x),
                                                                kMax, &found, perf, ws, ws_bytes));
    chosen = ChooseAlgo(perf, found, by_memory, p, kTimeSlack, &fastest_any);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
    LOOM_CUDA_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(hd, p.x, x, p.y, y, p.conv, p.w, const_cast<void*>(w),
                                                                  kMax, &found, perf, ws, ws_bytes));
    chosen = ChooseAlgo(perf, found, by_memory, p, kTimeSlack, &fastest_any);
  }
  if (!chosen) {  // keep the guess, with the math type it was chosen under
    p.algo = before.algo;
    p.workspace = before.workspace;
    p.ms = 0;
    if (!p.full_fp32) LOOM_CUDA_CHECK(cudnnSetConvolutionMathType(p.conv, before_math));
  } else {
    // What the measured choices cost against the fastest of any determinism (DeterministicFirst).
    const std::string what = std::string("cudnn conv ") + kConvKindName[int(kind)] + " ";
    AddKernelCounter(what + "plans measured", 1);
    AddKernelCounter(what + "chosen ms", p.ms);
    AddKernelCounter(what + "fastest ms, any determinism", fastest_any);
  }
  ReportPlan(kind, t, p);
}

// xs: the input as cuDNN sees it (the padded copy when padded; Note [Explicit padding]).
ConvPlan& GetConvPlan(CudaDeviceImpl& dev, ConvKind kind, DType t, const Shape& xs, const Shape& ws,
                            const Shape& ys, const Attrs& a, const char* op, bool padded = false) {
  static std::mutex mu;
  static auto* plans = new std::map<std::string, ConvPlan>();  // process lifetime, like the devices
  const bool full_fp32 =
      t == DType::kFloat64 || (t == DType::kFloat32 && CudaFloat32Math() == Float32Math::kFull);
  const bool nhwc = NhwcPlan(t, padded, ws);
  const std::string key = PlanKey(dev.id(), kind, t, xs, ws, ys, a, padded, full_fp32, nhwc);
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans->find(key);
  if (it != plans->end()) return it->second;

  const cudnnDataType_t dt = CudnnType(t, op);
  const std::vector<int64_t>& s = a.Ints("stride");
  const std::vector<int64_t> pd = padded ? std::vector<int64_t>{0, 0} : a.Ints("padding");
  const std::vector<int64_t>& dl = a.Ints("dilation");
  ConvPlan p;
  p.full_fp32 = full_fp32;
  p.nhwc = nhwc;
  const cudnnTensorFormat_t format = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  LOOM_CUDA_CHECK(cudnnCreateTensorDescriptor(&p.x));
  LOOM_CUDA_CHECK(cudnnCreateTensorDescriptor(&p.y));
  LOOM_CUDA_CHECK(cudnnCreateTensorDescriptor(&p.bias));
  LOOM_CUDA_CHECK(cudnnCreateFilterDescriptor(&p.w));
  LOOM_CUDA_CHECK(cudnnCreateConvolutionDescriptor(&p.conv));
  LOOM_CUDA_CHECK(cudnnSetTensor4dDescriptor(p.x, format, dt, Dim(xs[0], op), Dim(xs[1], op), Dim(xs[2], op),
                                             Dim(xs[3], op)));
  LOOM_CUDA_CHECK(cudnnSetTensor4dDescriptor(p.y, format, dt, Dim(ys[0], op), Dim(ys[1], op), Dim(ys[2], op),
                                             Dim(ys[3], op)));
  LOOM_CUDA_CHECK(cudnnSetTensor4dDescriptor(p.bias, CUDNN_TENSOR_NCHW, dt, 1, Dim(ys[1], op), 1, 1));
  LOOM_CUDA_CHECK(cudnnSetFilter4dDescriptor(p.w, dt, format, Dim(ws[0], op), Dim(ws[1], op), Dim(ws[2], op),
                                             Dim(ws[3], op)));
  LOOM_CUDA_CHECK(cudnnSetConvolution2dDescriptor(p.conv, Dim(pd[0], op), Dim(pd[1], op), Dim(s[0], op),
                                                  Dim(s[1], op), Dim(dl[0], op), Dim(dl[1], op),
                                                  CUDNN_CROSS_CORRELATION,
                                                  t == DType::kBFloat16 ? CUDNN_DATA_FLOAT : dt));
  LOOM_CUDA_CHECK(cudnnSetConvolutionGroupCount(p.conv, Dim(a.Int("groups"), op)));
  // Note [Float32 math on the GPU]: full float32 is FMA arithmetic; TF32 mode allows tensor ops.
  LOOM_CUDA_CHECK(cudnnSetConvolutionMathType(p.conv, PlanMath(t, full_fp32)));
  int n = 0, c = 0, h = 0, w = 0;
  LOOM_CUDA_CHECK(cudnnGetConvolution2dForwardOutputDim(p.conv, p.x, p.w, &n, &c, &h, &w));
  LOOM_ASSERT(n == ys[0] && c == ys[1] && h == ys[2] && w == ys[3], op, ": cuDNN computes output (", n, ", ", c,
              ", ", h, ", ", w, ") for ", ToString(ys));

  cudnnHandle_t hd = dev.cudnn();
  constexpr int kMax = 16;
  int found = 0;
  bool chosen = false;
  if (kind == ConvKind::kForward) {
    cudnnConvolutionFwdAlgoPerf_t perf[kMax];
    LOOM_CUDA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(hd, p.x, p.w, p.conv, p.y, kMax, &found, perf));
    chosen = ChooseAlgo(perf, found, [&](const cudnnConvolutionFwdAlgoPerf_t& r, size_t* b) {
      return cudnnGetConvolutionForwardWorkspaceSize(hd, p.x, p.w, p.conv, p.y, r.algo, b);
    }, p);
  } else if (kind == ConvKind::kBackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
    LOOM_CUDA_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(hd, p.w, p.y, p.conv, p.x, kMax, &found, perf));
    chosen = ChooseAlgo(perf, found, [&](const cudnnConvolutionBwdDataAlgoPerf_t& r, size_t* b) {
      return cudnnGetConvolutionBackwardDataWorkspaceSize(hd, p.w, p.y, p.conv, p.x, r.algo, b);
    }, p);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
    LOOM_CUDA_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(hd, p.x, p.y, p.conv, p.w, kMax, &found, perf));
    chosen = ChooseAlgo(perf, found, [&](const cudnnConvolutionBwdFilterAlgoPerf_t& r, size_t* b) {
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(hd, p.x, p.y, p.conv, p.w, r.algo, b);
    }, p);
  }
  if (!chosen) NoAlgorithm(op, found);
  ReportPlan(kind, t, p);
  return plans->emplace(key, p).first->second;
}

// A 4-D NCHW descriptor of (N, C, S, 1), S the spatial axes flattened: batch norm and the
// bias gradient work per channel over everything else.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc() { LOOM_CUDA_CHECK(cudnnCreateTensorDescriptor(&d)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

void SetNCS(cudnnTensorDescriptor_t d, const Shape& x, DType t, const char* op) {
  const ChannelDims c = MakeChannelDims(x);
  LOOM_CUDA_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CudnnType(t, op), Dim(c.n, op), Dim(c.c, op),
                                             Dim(c.s, op), 1));
}

// The device workspace of one convolution call, carved in order into 256-byte aligned parts.
struct WorkspaceParts {
  size_t total = 0;
  size_t Take(size_t bytes) {
    const size_t at = total;
    total += (bytes + 255) / 256 * 256;
    return at;
  }
};

// Note [NHWC convolutions on cuDNN]: whether the record hands over operand `attr` in NHWC (the
// layout pass's attribute).
bool GivenNhwc(const OpRecord& op, const char* attr) { return op.attrs.Int(attr, 0) != 0; }

// An (N, C, H, W) activation, or a weight (O, C/g, KH, KW), as LaunchRelayout's (n, c, hw).
struct Planes {
  int64_t n, c, hw;
};
Planes PlanesOf(const Shape& s) { return Planes{s[0], s[1], s[2] * s[3]}; }

// An operand as plan p reads it: t itself when it is held in the plan's layout (NHWC when
// `nhwc`; a weight is always held O C KH KW), else its copy in the plan's layout written at
// `at`, which the caller reserved (t.nbytes()).
const void* InPlanLayout(const Tensor& t, bool nhwc, const ConvPlan& p, char* at, cudaStream_t s) {
  const Planes d = PlanesOf(t.shape());
  if (nhwc == p.nhwc || d.c == 1 || d.hw == 1) return t.raw_data();  // the layouts' bytes agree
  LaunchRelayout(t.dtype(), t.raw_data(), nhwc, t.dtype(), at, p.nhwc, d.n, d.c, d.hw, s);
  return at;
}

// Where cuDNN writes a result held in layout `nhwc`: the output itself when it is in the
// plan's layout and of the operands' dtype, else a buffer in the workspace (`bytes` of it,
// reserved by the caller) that FinishResult converts into the output.
size_t ResultBufferBytes(const Tensor& out, DType operands, bool nhwc, const ConvPlan& p) {
  const Planes d = PlanesOf(out.shape());
  if ((nhwc == p.nhwc || d.c == 1 || d.hw == 1) && out.dtype() == operands) return 0;
  return size_t(out.numel()) * SizeOf(operands);
}
void FinishResult(const void* buf, DType operands, const ConvPlan& p, const Tensor& out, bool nhwc, cudaStream_t s) {
  const Planes d = PlanesOf(out.shape());
  LaunchRelayout(operands, buf, p.nhwc, out.dtype(), out.raw_data(), nhwc, d.n, d.c, d.hw, s);
}

// Note [Explicit padding]: the padded copy is made from an NCHW x (an explicitly padded plan is
// NCHW, and the kernels' predicate refuses NHWC operands for it).
void CheckPaddedNchw(const ExplicitPad& e, bool nhwc, const char* op) {
  LOOM_CHECK(!e.on || !nhwc, ValueError, "[", op, "] an explicitly padded convolution takes NCHW operands only");
}

// x: (N, C, H, W), w: (O, C/g, KH, KW) [, bias: (O)] -> y: (N, O, OH, OW)
void Conv2dCuda(const OpRecord& op, const KernelContext& ctx) {
  const char* name = op.def->name.c_str();  // conv2d, or conv2d_relu below
  CudaDeviceImpl& dev = Dev(ctx);
  const Tensor& x = op.inputs[0];
  const Tensor& w = op.inputs[1];
  const Tensor& y = op.outputs[0];
  const DType t = y.dtype(), ti = x.dtype();  // ti: bfloat16 for the bf16 policy's records
  const bool x_nhwc = GivenNhwc(op, "x_blocked"), y_nhwc = GivenNhwc(op, "y_blocked");
  if (y.numel() == 0) return;
  std::lock_guard<std::mutex> lock(dev.library_mutex());
  if (x.numel() == 0) {  // no input channels: only the bias (if any) remains
    LOOM_CUDA_CHECK(cudaMemsetAsync(y.raw_data(), 0, y.nbytes(), dev.stream()));
  } else {
    const ExplicitPad e = ExplicitPadOf(op.attrs, x.shape(), ti);
    CheckPaddedNchw(e, x_nhwc, name);
    ConvPlan& p = GetConvPlan(dev, ConvKind::kForward, ti, e.on ? e.padded : x.shape(), w.shape(), y.shape(),
                              op.attrs, name, e.on);
    const size_t low = LowResultBytes(ti, y);  // Note [bfloat16 convolutions on cuDNN]
    MaybeMeasure(dev, ConvKind::kForward, ti, p, e.on, low, x.raw_data(), w.raw_data(), y.raw_data());
    // The workspace: the padded x (Note [Explicit padding]), the result in the plan's layout and
    // dtype, x and w in the plan's layout (Note [NHWC convolutions on cuDNN]), cuDNN's own.
    WorkspaceParts parts;
    const size_t pad_at = parts.Take(e.bytes);
    const size_t out_bytes = ResultBufferBytes(y, ti, y_nhwc, p), out_at = parts.Take(out_bytes);
    const size_t x_at = parts.Take(x_nhwc != p.nhwc ? x.nbytes() : 0);
    const size_t w_at = parts.Take(p.nhwc ? w.nbytes() : 0);
    const size_t ws_at = parts.Take(p.workspace);
    char* base = parts.total ? static_cast<char*>(dev.Workspace(parts.total)) : nullptr;
    const void* xin = e.on ? ConvInput(e, x, base + pad_at, dev.stream())
                           : InPlanLayout(x, x_nhwc, p, base + x_at, dev.stream());
    const void* win = InPlanLayout(w, false, p, base + w_at, dev.stream());
    void* out = out_bytes ? base + out_at : y.raw_data();
    LOOM_CUDA_CHECK(cudnnConvolutionForward(dev.cudnn(), kScalars.one(ti), p.x, xin, p.w, win, p.conv,
                                            cudnnConvolutionFwdAlgo_t(p.algo), p.workspace ? base + ws_at : nullptr,
                                            p.workspace, kScalars.zero(ti), p.y, out));
    if (out_bytes) FinishResult(out, ti, p, y, y_nhwc, dev.stream());
  }
  if (op.inputs.size() == 3) {  // y += bias, broadcast over N, OH, OW
    TensorDesc yd, bd;
    if (y_nhwc)
      LOOM_CUDA_CHECK(cudnnSetTensor4dDescriptor(yd.d, CUDNN_TENSOR_NHWC, CudnnType(t, name), Dim(y.dim(0), name),
                                                 Dim(y.dim(1), name), Dim(y.dim(2), name), Dim(y.dim(3), name)));
    else
      SetNCS(yd.d, y.shape(), t, name);
    LOOM_CUDA_CHECK(
        cudnnSetTensor4dDescriptor(bd.d, CUDNN_TENSOR_NCHW, CudnnType(t, name), 1, Dim(y.dim(1), name), 1, 1));
    LOOM_CUDA_CHECK(cudnnAddTensor(dev.cudnn(), kScalars.one(t), bd.d, op.inputs[2].raw_data(), kScalars.one(t), yd.d,
                                   y.raw_data()));
  }
}

// conv2d's operands -> y = relu(conv2d(x, w[, bias])): the convolution, then ReLU in place with
// the relu op's formula (bias_act.cu). Note [Fusing bias and activation] in graph/fuse_bias_act.cc.
void Conv2dReluCuda(const OpRecord& op, const KernelContext& ctx) {
  Conv2dCuda(op, ctx);
  const Tensor& y = op.outputs[0];
  LaunchBiasActEpilogue(y.dtype(), BiasAct::kRelu, nullptr, y.raw_data(), y.numel(), 1, Dev(ctx).stream());
}

// w: (O, C/g, KH, KW), dy: (N, O, OH, OW) -> dx: (N, C, H, W)
void Conv2dGradInputCuda(const OpRecord& op, const KernelContext& ctx) {
  const char* name = "conv2d_grad_input";
  CudaDeviceImpl& dev = Dev(ctx);
  const Tensor& w = op.inputs[0];
  const Tensor& dy = op.inputs[1];
  const Tensor& dx = op.outputs[0];
  const DType ti = w.dtype();  // bfloat16 for the bf16 policy's records
  const bool dy_nhwc = GivenNhwc(op, "dy_blocked"), dx_nhwc = GivenNhwc(op, "dx_blocked");
  if (dx.numel() == 0) return;
  if (dy.numel() == 0 || w.numel() == 0) {
    LOOM_CUDA_CHECK(cudaMemsetAsync(dx.raw_data(), 0, dx.nbytes(), dev.stream()));
    return;
  }
  std::lock_guard<std::mutex> lock(dev.library_mutex());
  const ExplicitPad e = ExplicitPadOf(op.attrs, dx.shape(), ti);
  CheckPaddedNchw(e, dx_nhwc, name);
  ConvPlan& p = GetConvPlan(dev, ConvKind::kBackwardData, ti, e.on ? e.padded : dx.shape(), w.shape(), dy.shape(),
                            op.attrs, name, e.on);
  const size_t low = LowResultBytes(ti, dx);  // Note [bfloat16 convolutions on cuDNN]
  MaybeMeasure(dev, ConvKind::kBackwardData, ti, p, e.on, low, dx.raw_data(), w.raw_data(), dy.raw_data());
  // The workspace: the padded dx (Note [Explicit padding]), the result in the plan's layout and
  // dtype, w and dy in the plan's layout (Note [NHWC convolutions on cuDNN]), cuDNN's own.
  WorkspaceParts parts;
  const size_t pad_at = parts.Take(e.bytes);
  const size_t out_bytes = ResultBufferBytes(dx, ti, dx_nhwc, p), out_at = parts.Take(out_bytes);
  const size_t w_at = parts.Take(p.nhwc ? w.nbytes() : 0);
  const size_t dy_at = parts.Take(dy_nhwc != p.nhwc ? dy.nbytes() : 0);
  const size_t ws_at = parts.Take(p.workspace);
  char* base = parts.total ? static_cast<char*>(dev.Workspace(parts.total)) : nullptr;
  const void* win = InPlanLayout(w, false, p, base + w_at, dev.stream());
  const void* dyin = InPlanLayout(dy, dy_nhwc, p, base + dy_at, dev.stream());
  void* out = out_bytes ? base + out_at : dx.raw_data();
  LOOM_CUDA_CHECK(cudnnConvolutionBackwardData(dev.cudnn(), kScalars.one(ti), p.w, win, p.y, dyin, p.conv,
                                               cudnnConvolutionBwdDataAlgo_t(p.algo),
                                               p.workspace ? base + ws_at : nullptr, p.workspace, kScalars.zero(ti),
                                               p.x, e.on ? base + pad_at : out));
  if (e.on)  // Note [Explicit padding]: the padded input's gradient (an NCHW plan), its interior
    CopyInterior(e, dx.shape(), SizeOf(ti), base + pad_at, out, false, dev.stream());
  if (out_bytes) FinishResult(out, ti, p, dx, dx_nhwc, dev.stream());
}

// x: (N, C, H, W), dy: (N, O, OH, OW) -> dw: (O, C/g, KH, KW)
void Conv2dGradWeightCuda(const OpRecord& op, const KernelContext& ctx) {
  const char* name = "conv2d_grad_weight";
  CudaDeviceImpl& dev = Dev(ctx);
  const Tensor& x = op.inputs[0];
  const Tensor& dy = op.inputs[1];
  const Tensor& dw = op.outputs[0];
  const DType ti = x.dtype();  // bfloat16 for the bf16 policy's records
  const bool x_nhwc = GivenNhwc(op, "x_blocked"), dy_nhwc = GivenNhwc(op, "dy_blocked");
  if (dw.numel() == 0) return;
  if (x.numel() == 0 || dy.numel() == 0) {
    LOOM_CUDA_CHECK(cudaMemsetAsync(dw.raw_data(), 0, dw.nbytes(), dev.stream()));
    return;
  }
  std::lock_guard<std::mutex> lock(dev.library_mutex());
  const ExplicitPad e = ExplicitPadOf(op.attrs, x.shape(), ti);
  CheckPaddedNchw(e, x_nhwc, name);
  ConvPlan& p = GetConvPlan(dev, ConvKind::kBackwardFilter, ti, e.on ? e.padded : x.shape(), dw.shape(), dy.shape(),
                            op.attrs, name, e.on);
  const size_t low = LowResultBytes(ti, dw);  // Note [bfloat16 convolutions on cuDNN]
  MaybeMeasure(dev, ConvKind::kBackwardFilter, ti, p, e.on, low, x.raw_data(), dw.raw_data(), dy.raw_data());
  // The workspace: the padded x (Note [Explicit padding]), dw in the plan's layout and dtype, x
  // and dy in the plan's layout (Note [NHWC convolutions on cuDNN]), cuDNN's own.
  WorkspaceParts parts;
  const size_t pad_at = parts.Take(e.bytes);
  const size_t out_bytes = ResultBufferBytes(dw, ti, false, p), out_at = parts.Take(out_bytes);
  const size_t x_at = parts.Take(x_nhwc != p.nhwc ? x.nbytes() : 0);
  const size_t dy_at = parts.Take(dy_nhwc != p.nhwc ? dy.nbytes() : 0);
  const size_t ws_at = parts.Take(p.workspace);
  char* base = parts.total ? static_cast<char*>(dev.Workspace(parts.total)) : nullptr;
  const void* xin = e.on ? ConvInput(e, x, base + pad_at, dev.stream())
                         : InPlanLayout(x, x_nhwc, p, base + x_at, dev.stream());
  const void* dyin = InPlanLayout(dy, dy_nhwc, p, base + dy_at, dev.stream());
  void* out = out_bytes ? base + out_at : dw.raw_data();
  LOOM_CUDA_CHECK(cudnnConvolutionBackwardFilter(dev.cudnn(), kScalars.one(ti), p.x, xin, p.y, dyin, p.conv,
                                                 cudnnConvolutionBwdFilterAlgo_t(p.algo),
                                                 p.workspace ? base + ws_at : nullptr, p.workspace, kScalars.zero(ti),
                                                 p.w, out));
  if (out_bytes) FinishResult(out, ti, p, dw, false, dev.stream());
}

// dy: (N, O, OH, OW) -> db: (O), the sum over N, OH and OW
void Conv2dGradBiasCuda(const OpRecord& op, const KernelContext& ctx) {
  const char* name = "conv2d_grad_bias";
  CudaDeviceImpl& dev = Dev(ctx);
  const Tensor& dy = op.inputs[0];
  const Tensor& db = op.outputs[0];
  const DType t = db.dtype();
  if (db.numel() == 0) return;
  if (dy.numel() == 0) {
    LOOM_CUDA_CHECK(cudaMemsetAsync(db.raw_data(), 0, db.nbytes(), dev.stream()));
    return;
  }
  std::lock_guard<std::mutex> lock(dev.library_mutex());
  TensorDesc dyd, dbd;
  SetNCS(dyd.d, dy.shape(), t, name);
  LOOM_CUDA_CHECK(
      cudnnSetTensor4dDescriptor(dbd.d, CUDNN_TENSOR_NCHW, CudnnType(t, name), 1, Dim(db.numel(), name), 1, 1));
  LOOM_CUDA_CHECK(cudnnConvolutionBackwardBias(dev.cudnn(), kScalars.one(t), dyd.d, dy.raw_data(), kScalars.zero(t),
                                               dbd.d, db.raw_data()));
}

// ---------------------------------------------------------------- batch normalisation, inference
// cuDNN's spatial batch norm with the running statistics: per channel over N and the spatial
// axes. x of any rank >= 2 is described as (N, C, S, 1).

struct BnDescs {
  TensorDesc x, bn;
  BnDescs(const Shape& xs, DType t, const char* op) {
    SetNCS(x.d, xs, t, op);
    LOOM_CUDA_CHECK(cudnnDeriveBNTensorDescriptor(bn.d, x.d, CUDNN_BATCHNORM_SPATIAL));
  }
};

// x: (N, C, ...), gamma, beta, running_mean, running_var: (C) -> y
void BatchNormInferCuda(const OpRecord& op, const KernelContext& ctx) {
  const char* name = "batch_norm_infer";
  CudaDeviceImpl& dev = Dev(ctx);
  const DType t = op.inputs[0].dtype();
  if (op.inputs[0].numel() == 0) return;
  std::lock_guard<std::mutex> lock(dev.library_mutex());
  BnDescs d(op.inputs[0].shape(), t, name);
  LOOM_CUDA_CHECK(cudnnBatchNormalizationForwardInference(
      dev.cudnn(), CUDNN_BATCHNORM_SPATIAL, kScalars.one(t), kScalars.zero(t), d.x.d, op.inputs[0].raw_data(), d.x.d,
      op.outputs[0].raw_data(), d.bn.d, op.inputs[1].raw_data(), op.inputs[2].raw_data(), op.inputs[3].raw_data(),
      op.inputs[4].raw_data(), op.attrs.Float("eps")));
}

// Note [What a kernel supports]: a convolution pass (conv2d and its two gradients) whose operands
// and result share one dtype (cuDNN refuses the non-float ones by name), or the bf16 policy's
// records: bfloat16 operands, a float32 result (Note [bfloat16 convolutions on cuDNN]). Nothing
// else: a record mixing other dtypes would be read as the result's (the gradients once had no
// predicate, so on CUDA the policy lowered them to records their kernels read as float32). The
// fused conv2d_relu takes one dtype only, as on the CPU. Operands in NHWC (the layout pass's
// attributes, Note [Activation layouts] in graph/layouts.cc) only where the plan is NHWC (Note
// [NHWC convolutions on cuDNN]).
bool ConvSupportsCuda(const OpRecord& op) {
  const DType a = op.inputs[0].dtype(), b = op.inputs[1].dtype(), out = op.outputs[0].dtype();
  if (a != b) return false;
  if (a != out && !(a == DType::kBFloat16 && out == DType::kFloat32)) return false;
  if (!AnyBlockedOperand(op)) return true;
  const bool padded = PaddingEnd(op.attrs) != op.attrs.Ints("padding");
  const Shape& w = op.def == &op_kind::conv2d_grad_weight ? op.outputs[0].shape()
                   : op.def == &op_kind::conv2d_grad_input ? op.inputs[0].shape()
                                                           : op.inputs[1].shape();
  return op.inputs[0].ndim() == 4 && op.outputs[0].ndim() == 4 && NhwcPlan(a, padded, w);
}
bool Conv2dReluSupportsCuda(const OpRecord& op) {
  return op.inputs[0].dtype() == op.outputs[0].dtype() && op.inputs[1].dtype() == op.outputs[0].dtype();
}

}  // namespace

LOOM_KERNEL(conv2d, kCUDA, Conv2dCuda);
LOOM_KERNEL_SUPPORTS(conv2d, kCUDA, ConvSupportsCuda);
LOOM_KERNEL_SUPPORTS(conv2d_relu, kCUDA, Conv2dReluSupportsCuda);
LOOM_KERNEL_SUPPORTS(conv2d_grad_input, kCUDA, ConvSupportsCuda);
LOOM_KERNEL_SUPPORTS(conv2d_grad_weight, kCUDA, ConvSupportsCuda);
LOOM_KERNEL(conv2d_relu, kCUDA, Conv2dReluCuda);
LOOM_KERNEL(conv2d_grad_input, kCUDA, Conv2dGradInputCuda);
LOOM_KERNEL(conv2d_grad_weight, kCUDA, Conv2dGradWeightCuda);
LOOM_KERNEL(conv2d_grad_bias, kCUDA, Conv2dGradBiasCuda);
LOOM_KERNEL(batch_norm_infer, kCUDA, BatchNormInferCuda);

}  // namespace cuda
}  // namespace loom
