// Note [External ops] in external.h.
#include "core/ops/external.h"

#include <mutex>

#include "core/ops/common.h"

namespace loom {

using namespace opdecl;

namespace {
std::mutex g_external_mu;
ExternalBackwardFn& Dispatcher() {
  static ExternalBackwardFn fn;
  return fn;
}
}  // namespace

void SetExternalBackward(ExternalBackwardFn fn) {
  std::lock_guard<std::mutex> lock(g_external_mu);
  Dispatcher() = std::move(fn);
}

// (y, x0, x1, ...) -> y; attrs: id
LOOM_OP(external) {
  def.internal = "made by loom.autograd.Operator (ops::External)";
  def.attrs = {{"id", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    LOOM_CHECK(in.size() >= 2, ValueError, "[external] takes the result and at least one input, got ", in.size(),
               " tensors");
    a.Int("id");
    return std::vector<TensorMeta>{in[0]};
  };
  def.view = [](const Tensor& y, const Attrs&) { return y; };
  def.backward = [](const BackwardArgs& a) {
    const int64_t id = a.attrs.Int("id");
    ExternalBackwardFn fn;
    {
      std::lock_guard<std::mutex> lock(g_external_mu);
      fn = Dispatcher();
    }
    LOOM_CHECK(bool(fn), GraphError, "[external] operator ", id, " needs its backward, but no host function is set");
    std::vector<bool> needs(a.needs_input_grad.begin() + 1, a.needs_input_grad.end());
    std::vector<Tensor> dx = fn(id, a.grad_outputs[0], needs);
    const size_t n = a.input_metas.size() - 1;
    LOOM_CHECK(dx.size() == n, ValueError, "[external] operator ", id, "'s backward returned ", dx.size(),
               " gradients for ", n, " inputs");
    std::vector<Tensor> out{Tensor()};  // none into y
    for (size_t i = 0; i < n; ++i) {
      const TensorMeta& m = a.input_metas[i + 1];
      LOOM_CHECK(!dx[i].defined() || (dx[i].shape() == m.shape && dx[i].dtype() == m.dtype), ShapeError,
                 "[external] operator ", id, "'s gradient ", i, " is ", dx[i].Describe(), " but input ", i, " is ",
                 Name(m.dtype), " ", ToString(m.shape));
      out.push_back(dx[i]);
    }
    return out;
  };
}

namespace ops {
Tensor External(const Tensor& y, const std::vector<Tensor>& xs, int64_t id) {
  LOOM_CHECK(!xs.empty(), ValueError, "[external] needs at least one input");
  std::vector<Tensor> in{y};
  in.insert(in.end(), xs.begin(), xs.end());
  return Call1(op_kind::external, in, Attrs{{"id", id}});
}
}  // namespace ops

}  // namespace loom
