// SyncBatchNorm2d (sync_batch_norm.h).
#include "nn/sync_batch_norm.h"

#include "core/collective.h"
#include "core/ops.h"
#include "core/ops_cnn.h"
#include "core/device.h"

namespace loom {
namespace nn {

SyncBatchNorm2d::SyncBatchNorm2d(int64_t c, std::shared_ptr<Communicator> comm, double momentum, double eps,
                                 LayerOptions o)
    : channels_(c), momentum_(momentum), eps_(eps), comm_(std::move(comm)) {
  LOOM_CHECK(c > 0, ValueError, "[SyncBatchNorm2d] channel count must be positive, got ", c);
  LOOM_CHECK(momentum >= 0 && momentum <= 1 && eps >= 0, ValueError, "[SyncBatchNorm2d] momentum ", momentum,
             " must be in [0, 1] and eps ", eps, " >= 0");
  auto dev = o.device ? o.device : CpuDevice();
  gamma = AddParam("gamma", ops::Ones({c}, o.dtype, dev));
  beta = AddParam("beta", ops::Zeros({c}, o.dtype, dev));
  running_mean = AddState("running_mean", ops::Zeros({c}, o.dtype, dev));
  running_var = AddState("running_var", ops::Ones({c}, o.dtype, dev));
}

// x: (N, C, ...) -> y: (N, C, ...), normalised with the statistics of all ranks' batches.
Tensor SyncBatchNorm2d::Forward(const Tensor& x) {
  LOOM_CHECK(x.ndim() >= 2 && x.dim(1) == channels_, ShapeError, "[SyncBatchNorm2d] input has ",
             x.ndim() >= 2 ? x.dim(1) : 0, " channels, the layer expects ", channels_, " (input ", x.Describe(), ")");
  if (!training()) return ops::BatchNorm(x, gamma, beta, running_mean, running_var, false, momentum_, eps_);
  const int64_t c = channels_;
  std::vector<int64_t> axes{0};
  Shape per_channel{1, c};
  for (int64_t a = 2; a < x.ndim(); ++a) {
    axes.push_back(a);
    per_channel.push_back(1);
  }
  const DType f64 = DType::kFloat64;
  // Note [SyncBatchNorm]: [Σx, Σx², count] per channel, float64, one all-reduce.
  Tensor xd = ops::Cast(x, f64);
  Tensor count = ops::Full({1, c}, double(x.numel() / c), f64, x.device_ptr());
  Tensor local = ops::Concat({ops::Reshape(ops::Sum(xd, axes), {1, c}),
                              ops::Reshape(ops::Sum(ops::Mul(xd, xd), axes), {1, c}), count},
                             0);
  Tensor global = ops::AllReduced(comm_.id(), local);
  Tensor total = ops::Slice(global, 0, 2, 3);
  Tensor mean = ops::Div(ops::Slice(global, 0, 0, 1), total);
  Tensor var = ops::Sub(ops::Div(ops::Slice(global, 0, 1, 2), total), ops::Mul(mean, mean));
  Tensor invstd = ops::PowScalar(ops::AddScalar(var, eps_), -0.5);
  Tensor xhat = ops::Mul(ops::Sub(xd, ops::Reshape(mean, per_channel)), ops::Reshape(invstd, per_channel));
  Tensor y = ops::Add(ops::Mul(xhat, ops::Reshape(ops::Cast(gamma, f64), per_channel)),
                      ops::Reshape(ops::Cast(beta, f64), per_channel));
  {
    NoGradGuard no_grad;  // PyTorch's momentum and the unbiased variance over the global count
    Tensor unbiased = ops::Div(ops::Mul(var, total), ops::SubScalar(total, 1.0));
    auto update = [&](Tensor& running, const Tensor& batch) {
      Tensor next = ops::Add(ops::MulScalar(ops::Cast(running, f64), 1 - momentum_), ops::MulScalar(batch, momentum_));
      ops::CopyInto(running, ops::Cast(ops::Reshape(next, {c}), running.dtype()));
    };
    update(running_mean, mean.Detach());
    update(running_var, unbiased.Detach());
  }
  return ops::Cast(y, x.dtype());
}

}  // namespace nn
}  // namespace loom
