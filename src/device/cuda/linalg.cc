// CUDA matmul through cuBLASLt (float32, one GEMM) and cuBLAS (float64, strided batches,
// broadcast batches), with the semantics of src/device/cpu/kernels/linalg.cc: transposed
// operands (ta, tb), broadcast batch dimensions, and sum_batch (the product summed over the
// batch). add_bias and bias_grad are in elementwise.cu and reduce.cu. Also the fused dense layer
// (dense_bias_act) with cuBLASLt's bias and ReLU epilogues.
//
// Row-major C = op(A) op(B) is, seen column-major, C^T = op(B)^T op(A)^T: each call passes B
// first, with the transpose flags of the stored operands, and C with leading dimension N.
// alpha and beta are host constants (1 and 0 or 1), which a recorded device graph may keep.
// float32 products follow Note [Float32 math on the GPU] (core/device.h): TF32 tensor cores by
// default (cuBLASLt's CUBLAS_COMPUTE_32F_FAST_TF32, cuBLAS's CUBLAS_TF32_TENSOR_OP_MATH), plain
// float32 in full mode; cached plans are per mode.
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "device/cuda/bias_act.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/gemm.h"
#include "device/kernel_report.h"
#include "device/kernel_shapes.h"

namespace loom {
namespace cuda {
namespace {

// The largest power of two (up to 256) dividing the address: cuBLASLt picks kernels by it.
uint32_t Alignment(const void* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

// ---- cuBLASLt: one float32 GEMM; descriptors and the chosen algorithm cached per shape ----

struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo;
  bool ok = false;  // false: no algorithm for this shape, use cuBLAS
};
using LtKey =
    std::tuple<int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, uint32_t, uint32_t, uint32_t, int, bool>;

bool Tf32() { return CudaFloat32Math() == Float32Math::kTF32; }

// Col-major C'(n, m) = op(B')(n, k) op(A')(k, m), B' = stored rhs, A' = stored lhs. With an
// epilogue other than the default (the fused dense layer's bias and ReLU), the caller sets the
// bias pointer on the plan's descriptor before each call.
const LtPlan& GetLtPlan(CudaDeviceImpl& dev, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda,
                        int64_t ldb, const void* a, const void* b, void* c,
                        cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT) {
  static std::mutex mu;
  static auto* plans = new std::map<LtKey, LtPlan>();  // process lifetime, like the devices
  const bool tf32 = Tf32();
  LtKey key{dev.id(), ta, tb, m, n, k, lda, ldb, Alignment(a), Alignment(b), Alignment(c), int(epilogue), tf32};
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans->find(key);
  if (it != plans->end()) return it->second;
  LtPlan p;
  cublasOperation_t op_first = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  LOOM_CUDA_CHECK(
      cublasLtMatmulDescCreate(&p.desc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
  LOOM_CUDA_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first));
  LOOM_CUDA_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second));
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    LOOM_CUDA_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  // Stored shapes, column-major: rhs is (n, k) when not transposed, else (k, n); lhs (k, m) or (m, k).
  LOOM_CUDA_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_32F, uint64_t(tb ? k : n), uint64_t(tb ? n : k), ldb));
  LOOM_CUDA_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_32F, uint64_t(ta ? m : k), uint64_t(ta ? k : m), lda));
  LOOM_CUDA_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, uint64_t(n), uint64_t(m), n));
  cublasLtMatmulPreference_t pref;
  LOOM_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = CudaDeviceImpl::kGemmWorkspaceBytes;
  uint32_t al_a = Alignment(b), al_b = Alignment(a), al_c = Alignment(c);
  cublasStatus_t st =
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c);
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(dev.cublaslt(), p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  LOOM_CUDA_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  // No heuristic answer (CUBLAS_STATUS_NOT_SUPPORTED, or none found) is not an error: cuBLAS
  // runs the shape instead. Anything else is.
  if (st != CUBLAS_STATUS_NOT_SUPPORTED) LOOM_CUDA_CHECK(st);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    p.algo = result.algo;
    p.ok = true;
  }
  ReportKernel(epilogue == CUBLASLT_EPILOGUE_DEFAULT ? "gemm f32" : "gemm f32 + epilogue",
               std::string(p.ok ? "cuBLASLt" : "cuBLAS") + (tf32 ? ", TF32 allowed" : ", full float32"));
  return plans->emplace(key, p).first->second;
}

// ---- one (batched) GEMM in row-major terms ----

struct Gemm {
  CudaDeviceImpl& dev;
  DType dt;  // the product's
  bool ta, tb;
  int64_t m, n, k, lda, ldb;
  // bfloat16 or float16 operands (CUDA_R_16BF, CUDA_R_16F), float32 product (Note [Precision
  // policy] in core/autocast.h); CUDA_R_32F: the operands are the product's dtype.
  cudaDataType_t half = CUDA_R_32F;
};

// C_i = op(A_i) op(B_i) (+ C_i when accumulate) for i < batch, A_i = a + i * sa (elements) etc.
void Run(const Gemm& g, const void* a, int64_t sa, const void* b, int64_t sb, void* c, int64_t sc, int64_t batch,
         bool accumulate) {
  const cublasOperation_t op_first = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (g.half != CUDA_R_32F) {  // tensor cores, float32 products and sums
    if (g.half == CUDA_R_16BF) {  // reported once per operand type (a static's initialiser)
      static const bool reported =
          (ReportKernel("gemm bf16 -> f32", "cuBLAS GemmEx, tensor cores, float32 sums"), true);
      (void)reported;
    } else {
      static const bool reported = (ReportKernel("gemm f16 -> f32", "cuBLAS GemmEx, tensor cores, float32 sums"), true);
      (void)reported;
    }
    const float alpha = 1, beta = accumulate ? 1.f : 0.f;
    LOOM_CUDA_CHECK(cublasGemmStridedBatchedEx_64(g.dev.cublas(), op_first, op_second, g.n, g.m, g.k, &alpha, b,
                                                  g.half, g.ldb, sb, a, g.half, g.lda, sa, &beta, c, CUDA_R_32F, g.n,
                                                  sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  if (g.dt == DType::kFloat32) {
    const float alpha = 1, beta = accumulate ? 1.f : 0.f;
    // cuBLAS's own calls below: the handle's math mode says whether TF32 may be used.
    LOOM_CUDA_CHECK(cublasSetMathMode(g.dev.cublas(), Tf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    if (batch == 1) {
      const LtPlan& p = GetLtPlan(g.dev, g.ta, g.tb, g.m, g.n, g.k, g.lda, g.ldb, a, b, c);
      if (p.ok) {
        LOOM_CUDA_CHECK(cublasLtMatmul(g.dev.cublaslt(), p.desc, &alpha, b, p.a, a, p.b, &beta, c, p.c, c, p.c,
                                       &p.algo, g.dev.gemm_workspace(), CudaDeviceImpl::kGemmWorkspaceBytes,
                                       g.dev.stream()));
        return;
      }
      LOOM_CUDA_CHECK(cublasSgemm_64(g.dev.cublas(), op_first, op_second, g.n, g.m, g.k, &alpha,
                                     static_cast<const float*>(b), g.ldb, static_cast<const float*>(a), g.lda, &beta,
                                     static_cast<float*>(c), g.n));
      return;
    }
    LOOM_CUDA_CHECK(cublasSgemmStridedBatched_64(g.dev.cublas(), op_first, op_second, g.n, g.m, g.k, &alpha,
                                                 static_cast<const float*>(b), g.ldb, sb, static_cast<const float*>(a),
                                                 g.lda, sa, &beta, static_cast<float*>(c), g.n, sc, batch));
    return;
  }
  const double alpha = 1, beta = accumulate ? 1 : 0;
  if (batch == 1) {
    LOOM_CUDA_CHECK(cublasDgemm_64(g.dev.cublas(), op_first, op_second, g.n, g.m, g.k, &alpha,
                                   static_cast<const double*>(b), g.ldb, static_cast<const double*>(a), g.lda, &beta,
                                   static_cast<double*>(c), g.n));
    return;
  }
  LOOM_CUDA_CHECK(cublasDgemmStridedBatched_64(g.dev.cublas(), op_first, op_second, g.n, g.m, g.k, &alpha,
                                               static_cast<const double*>(b), g.ldb, sb, static_cast<const double*>(a),
                                               g.lda, sa, &beta, static_cast<double*>(c), g.n, sc, batch));
}

}  // namespace

void DeviceGemm(CudaDeviceImpl& dev, DType operands, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* a,
                int64_t lda, const void* b, int64_t ldb, void* c, bool accumulate) {
  const cudaDataType_t half = operands == DType::kBFloat16  ? CUDA_R_16BF
                              : operands == DType::kFloat16 ? CUDA_R_16F
                                                            : CUDA_R_32F;
  const DType dt = half == CUDA_R_32F ? operands : DType::kFloat32;
  Run(Gemm{dev, dt, ta, tb, m, n, k, lda, ldb, half}, a, 0, b, 0, c, 0, 1, accumulate);
}

namespace {

// a: (..., M, K) or (..., K, M) with ta, b: (..., K, N) or (..., N, K) with tb
//   -> c: (broadcast(...), M, N), or (M, N) summed over the batch with sum_batch
void MatMulCuda(const OpRecord& op, const KernelContext& ctx) {
  CudaDeviceImpl& dev = Dev(ctx);
  const Tensor& ta_t = op.inputs[0];
  const Tensor& tb_t = op.inputs[1];
  const Tensor& tc_t = op.outputs[0];
  const DType dt = tc_t.dtype();
  const cudaDataType_t half = ta_t.dtype() == DType::kBFloat16  ? CUDA_R_16BF
                             : ta_t.dtype() == DType::kFloat16 ? CUDA_R_16F
                                                                : CUDA_R_32F;
  LOOM_CHECK(dt == DType::kFloat32 || dt == DType::kFloat64, DTypeError, "[matmul] no CUDA kernel for dtype ",
             Name(dt));
  const MatMulLayout l = MakeMatMulLayout(op.attrs, ta_t.shape(), tb_t.shape());
  const size_t es = SizeOf(ta_t.dtype()), esc = SizeOf(dt);  // operands', product's
  const char* a = static_cast<const char*>(ta_t.raw_data());
  const char* b = static_cast<const char*>(tb_t.raw_data());
  char* c = static_cast<char*>(tc_t.raw_data());
  if (tc_t.numel() == 0) return;
  if (l.k == 0 || l.nb == 0) {  // an empty sum
    LOOM_CUDA_CHECK(cudaMemsetAsync(c, 0, tc_t.nbytes(), dev.stream()));
    return;
  }
  Gemm g{dev, dt, l.ta, l.tb, l.m, l.n, l.k, l.lda, l.ldb, half};
  if (l.RowsOfOneGemm()) {
    Gemm one = g;
    one.m = l.nb * l.m;
    return Run(one, a, 0, b, 0, c, 0, 1, false);
  }
  if (l.SumIsOneGemm()) {
    Gemm one = g;
    one.k = l.nb * l.k;
    return Run(one, a, 0, b, 0, c, 0, 1, false);
  }
  // Each operand is either the whole batch or one matrix for all: one strided-batched GEMM.
  if (!l.sum_batch && (l.nba == l.nb || l.nba == 1) && (l.nbb == l.nb || l.nbb == 1))
    return Run(g, a, l.nba == 1 ? 0 : l.size_a, b, l.nbb == 1 ? 0 : l.size_b, c, l.size_c, l.nb, false);
  // Anything else, one GEMM per batch entry (sum_batch: accumulated in batch order, as the CPU).
  for (int64_t i = 0; i < l.nb; ++i) {
    int64_t oa, ob;
    l.Offsets(i, oa, ob);
    const char* ai = a + oa * int64_t(es);
    const char* bi = b + ob * int64_t(es);
    if (l.sum_batch) Run(g, ai, 0, bi, 0, c, 0, 1, i > 0);
    else Run(g, ai, 0, bi, 0, c + i * l.size_c * int64_t(esc), 0, 1, false);
  }
}

// Note [Dense, bias, activation] (core/ops/dense_bias_act.cc). x: (..., K), w: (K, N), b: (N)
//   -> y: (..., N) = act(x w + b). float32 with no activation or ReLU: one cuBLASLt call whose
// epilogue adds the bias (per row of the column-major result, i.e. per feature) and applies
// ReLU. Otherwise (tanh, sigmoid, float64, or no cuBLASLt algorithm for the shape) the matmul
// op's own GEMM, then one epilogue pass (bias_act.cu) with the unfused ops' formulas.
void DenseBiasActCuda(const OpRecord& op, const KernelContext& ctx) {
  CudaDeviceImpl& dev = Dev(ctx);
  const Tensor &x = op.inputs[0], &w = op.inputs[1], &bias = op.inputs[2], &y = op.outputs[0];
  const DType dt = y.dtype();
  LOOM_CHECK(dt == DType::kFloat32 || dt == DType::kFloat64, DTypeError, "[dense_bias_act] no CUDA kernel for dtype ",
             Name(dt));
  const BiasAct act = BiasAct(op.attrs.Int("act", 0));
  const int64_t k = w.shape()[0], n = w.shape()[1];
  if (y.numel() == 0) return;
  const int64_t rows = y.numel() / n;
  const void* a = x.raw_data();
  const void* b = w.raw_data();
  const void* bp = bias.raw_data();
  void* c = y.raw_data();
  if (k == 0) {  // an empty sum: the bias alone
    LOOM_CUDA_CHECK(cudaMemsetAsync(c, 0, y.nbytes(), dev.stream()));
    return LaunchBiasActEpilogue(dt, act, bp, c, rows, n, dev.stream());
  }
  // cuBLASLt reads the bias vector with vector loads: 16-byte aligned only (every planned or
  // pooled block is; a view into one may not be).
  if (dt == DType::kFloat32 && (act == BiasAct::kNone || act == BiasAct::kRelu) && Alignment(bp) >= 16) {
    const cublasLtEpilogue_t epilogue = act == BiasAct::kRelu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    const LtPlan& p = GetLtPlan(dev, false, false, rows, n, k, k, n, a, b, c, epilogue);
    if (p.ok) {
      // The plan's descriptor is shared by every record of this shape, and parallel replay may
      // run two of them at once: the bias pointer is set and used under one lock.
      std::lock_guard<std::mutex> lock(dev.library_mutex());
      LOOM_CUDA_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp));
      const float alpha = 1, beta = 0;
      LOOM_CUDA_CHECK(cublasLtMatmul(dev.cublaslt(), p.desc, &alpha, b, p.a, a, p.b, &beta, c, p.c, c, p.c, &p.algo,
                                     dev.gemm_workspace(), CudaDeviceImpl::kGemmWorkspaceBytes, dev.stream()));
      return;
    }
  }
  Run(Gemm{dev, dt, false, false, rows, n, k, k, n}, a, 0, b, 0, c, 0, 1, false);
  LaunchBiasActEpilogue(dt, act, bp, c, rows, n, dev.stream());
}

}  // namespace

LOOM_KERNEL(matmul, kCUDA, MatMulCuda);
LOOM_KERNEL(dense_bias_act, kCUDA, DenseBiasActCuda);

}  // namespace cuda
}  // namespace loom
