// Note [Attention on cuDNN] (cudnn_attention.h).
#include "device/cuda/cudnn_attention.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "device/cuda/cast.h"
#include "device/cuda/cuda_device.h"
#include "device/kernel_report.h"
#include "device/kernel_shapes.h"

#if LOOM_WITH_CUDNN_FRONTEND
#include <cudnn_frontend.h>
#endif

namespace loom {
namespace cuda {
namespace {

// The problem of one record: qkv (b, t, 3 heads d).
struct Problem {
  int64_t b = 0, t = 0, heads = 0, d = 0;
  bool causal = false;
  float scale = 0;
  int64_t dim() const { return heads * d; }  // D
  int64_t rows() const { return b * t; }
};

Problem ProblemOf(const OpRecord& op) {
  const AttentionDims g = MakeAttentionQkvDims(op.attrs, op.inputs[0].shape());
  const Shape& s = op.inputs[0].shape();
  return Problem{s[0], s[1], g.heads, g.d, g.causal, float(g.scale)};
}

// A tensor cuDNN reads or writes in place: bfloat16, contiguous, 16-byte aligned.
bool InPlace(const Tensor& t) {
  return t.dtype() == DType::kBFloat16 && t.is_contiguous() && (t.offset() * 2) % 16 == 0;
}

// What no device needs to be asked about: the bf16 policy's record (bfloat16 qkv, float32
// results; or y and dqkv in bfloat16, Note [Attention results kept in bfloat16] in
// graph/bf16_attention.cc), a head width cuDNN takes, an aligned contiguous qkv (and bfloat16 y
// or dqkv) and, for the gradient, zeros in dlse.
bool Candidate(const OpRecord& op, bool grad) {
  if (op.inputs.size() != (grad ? 5u : 1u) || op.outputs.empty()) return false;
  const Tensor& qkv = op.inputs[0];
  if (!InPlace(qkv)) return false;
  for (const Tensor* t : {&op.outputs[0], grad ? &op.inputs[1] : &op.outputs[0]})
    if (t->dtype() != DType::kFloat32 && !InPlace(*t)) return false;
  const Problem p = ProblemOf(op);
  if (p.d % 8 != 0 || p.d > 128) return false;
  if (grad && op.attrs.Int("zero_dlse", 0) != 1) return false;
  const char* env = std::getenv("LOOM_CUDNN_ATTENTION");
  return !(env && std::strcmp(env, "0") == 0);
}

size_t Aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

#if LOOM_WITH_CUDNN_FRONTEND
namespace fe = cudnn_frontend;

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN refused the problem
  int64_t workspace = 0;
  std::string refusal;
};

std::string Key(int dev, bool grad, const Problem& p) {
  uint32_t scale_bits;
  std::memcpy(&scale_bits, &p.scale, sizeof scale_bits);
  return detail::Cat(dev, grad ? " bwd " : " fwd ", p.b, " ", p.t, " ", p.heads, " ", p.d, " ", int(p.causal), " ",
                     scale_bits);
}

// A (b, heads, t, w) tensor: packed = a third of qkv (row stride 3 D), else (b, t, D) rows.
std::shared_ptr<fe::graph::Tensor_attributes> Operand(fe::graph::Graph& g, const char* name, Uid uid,
                                                      const Problem& p, bool packed) {
  const int64_t ld = packed ? 3 * p.dim() : p.dim();
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({p.b, p.heads, p.t, p.d})
                      .set_stride({p.t * ld, p.d, ld, 1}));
}

void SetOutput(fe::graph::Tensor_attributes& t, Uid uid, const Problem& p, bool packed) {
  const int64_t ld = packed ? 3 * p.dim() : p.dim();
  t.set_output(true).set_uid(uid).set_dim({p.b, p.heads, p.t, p.d}).set_stride({p.t * ld, p.d, ld, 1});
}

// lse: (b, heads, t) float32, as cuDNN's (b, heads, t, 1) statistics.
fe::graph::Tensor_attributes& AsStats(fe::graph::Tensor_attributes& t, const Problem& p) {
  return t.set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({p.b, p.heads, p.t, 1})
      .set_stride({p.heads * p.t, p.t, 1, 1});
}

template <typename Attributes>
void SetMask(Attributes& a, const Problem& p) {
  a.set_attn_scale(p.scale);
  // Top-left alignment, key j visible to query i when j <= i (AttentionDims::KeyEnd).
  if (p.causal) a.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
}

Plan Build(cudnnHandle_t handle, bool grad, const Problem& p) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto q = Operand(*g, "q", kQ, p, true), k = Operand(*g, "k", kK, p, true), v = Operand(*g, "v", kV, p, true);
  if (!grad) {
    auto a = fe::graph::SDPA_attributes().set_name("attention_qkv").set_generate_stats(true);
    SetMask(a, p);
    auto [o, stats] = g->sdpa(q, k, v, a);
    SetOutput(*o, kO, p, false);
    AsStats(*stats, p).set_output(true);
  } else {
    auto o = Operand(*g, "o", kO, p, false), d_o = Operand(*g, "dO", kDO, p, false);
    auto stats = g->tensor(AsStats(fe::graph::Tensor_attributes().set_name("stats"), p));
    auto a = fe::graph::SDPA_backward_attributes().set_name("attention_qkv_grad").set_deterministic_algorithm(true);
    SetMask(a, p);
    auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, stats, a);
    SetOutput(*dq, kDQ, p, true);
    SetOutput(*dk, kDK, p, true);
    SetOutput(*dv, kDV, p, true);
  }
  Plan plan;
  fe::error_t e = g->validate();
  if (e.is_good()) e = g->build_operation_graph(handle);
  if (e.is_good()) e = g->create_execution_plans({fe::HeurMode_t::A});
  if (e.is_good()) e = g->check_support();
  if (e.is_good()) e = g->build_plans();
  if (e.is_good()) e = g->get_workspace_size(plan.workspace);
  if (e.is_bad()) {
    plan.refusal = e.get_message();
    ReportKernel(grad ? "attention_qkv_grad bf16" : "attention_qkv bf16",
                 "refused by cuDNN (" + plan.refusal + "): float32 attention");
    return plan;
  }
  plan.graph = std::move(g);
  ReportKernel(grad ? "attention_qkv_grad bf16" : "attention_qkv bf16",
               std::string("cuDNN fused attention (FlashAttention-2)") + (grad ? ", deterministic" : ""));
  return plan;
}

// The plan of a problem on `dev` (built at the first request); the caller holds the library mutex.
const Plan& GetPlan(CudaDeviceImpl& dev, bool grad, const Problem& p) {
  static std::mutex mu;
  static auto* plans = new std::map<std::string, Plan>();  // process lifetime, like the devices
  const std::string key = Key(dev.id(), grad, p);
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans->find(key);
  if (it == plans->end()) it = plans->emplace(key, Build(dev.cudnn(), grad, p)).first;
  return it->second;
}

const Plan& RunnablePlan(CudaDeviceImpl& dev, bool grad, const Problem& p, const char* op) {
  const Plan& plan = GetPlan(dev, grad, p);
  LOOM_CHECK(plan.graph, DeviceError, "[", op, "] cuDNN refused the bfloat16 attention of qkv (", p.b, ", ", p.t, ", ",
             3 * p.dim(), ") with ", p.heads, " heads: ", plan.refusal, " (its supports predicate says no)");
  return plan;
}

void Execute(CudaDeviceImpl& dev, const Plan& plan, std::unordered_map<int64_t, void*>& pack, void* workspace,
             const char* op) {
  fe::error_t e = plan.graph->execute(dev.cudnn(), pack, workspace);
  LOOM_CHECK(e.is_good(), DeviceError, "[", op, "] cuDNN's fused attention failed: ", e.get_message());
}
#endif  // LOOM_WITH_CUDNN_FRONTEND

}  // namespace

bool CudnnAttentionSupports(const OpRecord& op, bool grad) {
  if (!Candidate(op, grad)) return false;
#if LOOM_WITH_CUDNN_FRONTEND
  Device* d = op.inputs[0].device();
  if (!d || d->type() != DeviceType::kCUDA) return false;
  auto& dev = static_cast<CudaDeviceImpl&>(*d);
  dev.MakeCurrent();
  std::lock_guard<std::mutex> lock(dev.library_mutex());
  return GetPlan(dev, grad, ProblemOf(op)).graph != nullptr;
#else
  return false;
#endif
}

#if LOOM_WITH_CUDNN_FRONTEND
void CudnnAttentionQkv(const OpRecord& op, const KernelContext& ctx) {
  const char* name = "attention_qkv";
  CudaDeviceImpl& dev = Dev(ctx);
  const Problem p = ProblemOf(op);
  std::lock_guard<std::mutex> lock(dev.library_mutex());
  const Plan& plan = RunnablePlan(dev, false, p, name);
  const bool widen = op.outputs[0].dtype() == DType::kFloat32;  // else O is y itself
  const size_t o_bytes = widen ? Aligned(size_t(p.rows() * p.dim()) * 2) : 0;
  char* base = static_cast<char*>(dev.Workspace(o_bytes + size_t(plan.workspace)));
  auto* qkv = static_cast<char*>(op.inputs[0].raw_data());
  const size_t third = size_t(p.dim()) * 2;  // bytes from q to k, k to v
  void* o = widen ? base : op.outputs[0].raw_data();
  std::unordered_map<int64_t, void*> pack{{kQ, qkv}, {kK, qkv + third}, {kV, qkv + 2 * third}, {kO, o},
                                          {kStats, op.outputs[1].raw_data()}};
  Execute(dev, plan, pack, plan.workspace ? base + o_bytes : nullptr, name);
  if (widen) LaunchCast(DType::kBFloat16, o, DType::kFloat32, op.outputs[0].raw_data(), p.rows() * p.dim(), dev.stream());
}

void CudnnAttentionQkvGrad(const OpRecord& op, const KernelContext& ctx) {
  const char* name = "attention_qkv_grad";
  CudaDeviceImpl& dev = Dev(ctx);
  const Problem p = ProblemOf(op);
  std::lock_guard<std::mutex> lock(dev.library_mutex());
  const Plan& plan = RunnablePlan(dev, true, p, name);
  const int64_t n = p.rows() * p.dim();  // elements of y and dy
  // Workspace for what is not bfloat16 already: O (y), dO (dy), dqkv; then cuDNN's own.
  const bool narrow_y = op.inputs[1].dtype() == DType::kFloat32, widen_d = op.outputs[0].dtype() == DType::kFloat32;
  const size_t half = Aligned(size_t(n) * 2), o_bytes = narrow_y ? half : 0,
               dqkv_bytes = widen_d ? Aligned(size_t(3 * n) * 2) : 0;
  char* base = static_cast<char*>(dev.Workspace(o_bytes + half + dqkv_bytes + size_t(plan.workspace)));
  char* o = narrow_y ? base : static_cast<char*>(op.inputs[1].raw_data());
  char* d_o = base + o_bytes;
  char* dqkv = widen_d ? base + o_bytes + half : static_cast<char*>(op.outputs[0].raw_data());
  if (narrow_y) LaunchCast(DType::kFloat32, op.inputs[1].raw_data(), DType::kBFloat16, o, n, dev.stream());
  LaunchCast(DType::kFloat32, op.inputs[3].raw_data(), DType::kBFloat16, d_o, n, dev.stream());
  auto* qkv = static_cast<char*>(op.inputs[0].raw_data());
  const size_t third = size_t(p.dim()) * 2;
  std::unordered_map<int64_t, void*> pack{
      {kQ, qkv},  {kK, qkv + third},  {kV, qkv + 2 * third},           {kO, o},
      {kDO, d_o}, {kStats, op.inputs[2].raw_data()}, {kDQ, dqkv}, {kDK, dqkv + third}, {kDV, dqkv + 2 * third}};
  Execute(dev, plan, pack, plan.workspace ? base + o_bytes + half + dqkv_bytes : nullptr, name);
  if (widen_d) LaunchCast(DType::kBFloat16, dqkv, DType::kFloat32, op.outputs[0].raw_data(), 3 * n, dev.stream());
}
#else
namespace {
[[noreturn]] void NoFrontend(const char* op) {
  throw DeviceError(detail::Cat("[", op, "] a bfloat16 qkv needs cuDNN's fused attention, and this build has no "
                                "cudnn-frontend (tools/setup.sh fetches it; Note [Attention on cuDNN])"));
}
}  // namespace
void CudnnAttentionQkv(const OpRecord&, const KernelContext&) { NoFrontend("attention_qkv"); }
void CudnnAttentionQkvGrad(const OpRecord&, const KernelContext&) { NoFrontend("attention_qkv_grad"); }
#endif

}  // namespace cuda
}  // namespace loom
