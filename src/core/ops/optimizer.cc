// Optimizer updates as ops: one fused, in-place kernel per parameter. The learning rate is an
// input (a device scalar), not an attribute, so a schedule changes it between replays without a
// new capture (docs/design.md invariant 6).
//
// Note [Clipping folded into the update]
// Gradient clipping never writes the gradient: the update kernel transforms each gradient element
// as it reads it (device/optimizer_formulas.h). Two optional attributes say how:
//   grad_scaled = 1   the last input is a float64 scalar s and the update sees s * g. Clipping by
//                     global norm passes s = min(1, max_norm / (norm + eps)), computed by ops on
//                     the device (nn/clip.h): no branch, no host read, as torch's clip_grad_norm_.
//   clip_value = v>0  the update sees g clamped to [-v, v] (NaN stays NaN).
// At most one of the two. Weight decay is added after the transform, as torch clips the
// gradient before the optimizer adds it. Without either, the kernels run their old loops
// unchanged, so results are bitwise what they were.
//
// Note [Data parallelism folded into the update]
// Under DistOpt (nn/dist_opt.h) each rank's gradient is the sum over ranks of their gradients of
// the mean loss over their shard; the gradient of the mean over the global batch is that sum over
// N. The all-reduce only sums (it carries no scale), and the update applies 1/N as it reads the
// gradient, through a third optional attribute:
//   grad_mult = m     the update sees m * g before the clipping above: m * s * g with a scale
//                     input (s computed from the norm of m * g, nn/clip.h), clamp(m * g, -v, v)
//                     with a clip value. Weight decay is added after, to the unscaled parameter.
// So the reduced buffer is read once, by the update that needs it, instead of being rewritten
// by a scaling pass; a 1-rank run (m = 1) runs the old loops bit for bit.
//
// Note [Skipped updates]
// Dynamic loss scaling (Note [Loss scaling] in nn/loss_scale.h) skips a step whose gradients
// hold a NaN or an infinity, without a host read. One more optional attribute says how:
//   found_inf = 1     the last input (after a gradient scale) is a float32 scalar; when it is
//                     nonzero the kernel writes nothing: the parameter and every state output
//                     (momentum, Adam's moments) keep their bits. `increment` takes the same flag
//                     as an optional second input, so the step counts (Adam's, a schedule's) do
//                     not count a skipped step. Nor is a 16-bit copy (below) written.
// With the flag 0 the update runs exactly as without it.
// sgd_update and adam_update take one more, set by the pass keep_bf16_weight_copies (Note
// [bfloat16 weight copies kept by the update] in graph/weight_copies.cc):
//   copy_dtype = t    t bfloat16 or float16, the parameter float32: one more output, last, of the
//                     parameter's shape and dtype t, gets each new parameter element rounded to t
//                     by the cast op's own conversion, in the update's loop.
#include <cmath>

#include "core/ops/common.h"
#include "core/ops/update_group.h"

namespace loom {

using namespace opdecl;

// The gradient transform every update reads, and its skip flag (the Notes above).
const std::vector<AttrDecl> kGradTransform = {
    {"grad_scaled", kInt}, {"clip_value", kFloat}, {"grad_mult", kFloat}, {"found_inf", kInt}};
// sgd_update's, and matmul_sgd_update's (graph/fuse_weight_grad.cc copies them from the sgd_update it replaces).
const std::vector<AttrDecl> kSgdAttrs = Join(
    {{"momentum", kFloat}, {"weight_decay", kFloat}, {"nesterov", kInt}, {"dampening", kFloat}}, kGradTransform);

namespace {
void CheckFlag(const char* op, const TensorMeta& m) {
  LOOM_CHECK(m.dtype == DType::kFloat32 && NumElements(m.shape) == 1, DTypeError, "[", op, "] the found_inf flag ",
             "must be a float32 scalar, got ", Name(m.dtype), " ", ToString(m.shape), " (Note [Skipped updates])");
}

// The inputs an update takes beyond its own: 1 when a gradient scale is appended, 1 more with a
// found_inf flag after it. Checks the clipping attributes (Note [Clipping folded into the
// update]), the gradient multiplier and the flag (Note [Skipped updates]).
size_t ClipInputs(const char* op, const std::vector<TensorMeta>& in_all, const Attrs& a) {
  const int64_t flag = a.Int("found_inf", 0);
  LOOM_CHECK(flag == 0 || flag == 1, ValueError, "[", op, "] found_inf ", flag, ": 0 or 1 (Note [Skipped updates])");
  if (flag) {
    LOOM_CHECK(!in_all.empty(), ValueError, "[", op, "] found_inf = 1 but no inputs");
    CheckFlag(op, in_all.back());
  }
  const std::vector<TensorMeta> in(in_all.begin(), in_all.end() - flag);
  const bool scaled = a.Int("grad_scaled", 0) != 0;
  const double clip = a.Float("clip_value", 0);
  LOOM_CHECK(std::isfinite(clip) && clip >= 0, ValueError, "[", op, "] clip_value ", clip,
             ": must be a finite number >= 0 (0: no clipping)");
  LOOM_CHECK(!(scaled && clip > 0), ValueError, "[", op, "] takes a gradient scale or a clip value, not both");
  const double mult = a.Float("grad_mult", 1.0);
  LOOM_CHECK(std::isfinite(mult) && mult > 0, ValueError, "[", op, "] grad_mult ", mult,
             ": must be a finite number > 0 (Note [Data parallelism folded into the update])");
  if (!scaled) return size_t(flag);
  LOOM_CHECK(!in.empty() && in.back().dtype == DType::kFloat64 && NumElements(in.back().shape) == 1, DTypeError,
             "[", op, "] gradient scale (the last input", flag ? " before the found_inf flag" : "",
             ") must be a float64 scalar");
  return 1 + size_t(flag);
}

// The 16-bit copy output of an update with copy_dtype (the Notes above), appended to `out`.
void AddCopyOutput(const char* op, const TensorMeta& param, const Attrs& a, std::vector<TensorMeta>& out) {
  if (!a.Has("copy_dtype")) return;
  const int64_t t = a.Int("copy_dtype");
  static_assert(int(DType::kBFloat16) == 3 && int(DType::kFloat16) == 2, "the codes the message names");
  LOOM_CHECK(t == int64_t(DType::kBFloat16) || t == int64_t(DType::kFloat16), DTypeError, "[", op, "] copy_dtype ",
             t, ": the parameter's copy is bfloat16 (3) or float16 (2)");
  LOOM_CHECK(param.dtype == DType::kFloat32, DTypeError, "[", op, "] a ", Name(DType(t)), " copy needs a float32 ",
             "parameter, got ", Name(param.dtype), " ", ToString(param.shape));
  out.push_back({param.shape, DType(t)});
}
}  // namespace

// inputs: param, grad, lr (float64 scalar) [, momentum buffer] [, grad scale] [, found_inf] ->
// outputs: param [, buffer] [, 16-bit copy]. attrs: momentum, weight_decay, nesterov (0/1),
// dampening, and grad_scaled, clip_value (Note [Clipping folded into the update]), grad_mult
// (Note [Data parallelism folded into the update]), found_inf (Note [Skipped updates]), copy_dtype
LOOM_OP(sgd_update) {
  def.internal = "the update of nn::SGD, reached through loom.opt.SGD";
  def.attrs = Join(kSgdAttrs, {{"copy_dtype", kInt}});
  def.infer = [](const std::vector<TensorMeta>& in_all, const Attrs& a) {
    const size_t extra = ClipInputs("sgd_update", in_all, a);
    const std::vector<TensorMeta> in(in_all.begin(), in_all.end() - extra);
    LOOM_CHECK(in.size() == 3 || in.size() == 4, ValueError, "[sgd_update] takes 3 or 4 inputs",
               extra ? " and a scale or flag" : "", ", got ", in_all.size());
    CheckFloat("sgd_update", in[0], "parameter");
    CheckSameDType("sgd_update", in[0], in[1]);
    LOOM_CHECK(in[0].shape == in[1].shape, ShapeError, "[sgd_update] parameter ", ToString(in[0].shape),
               " and gradient ", ToString(in[1].shape), " differ in shape");
    LOOM_CHECK(in[2].dtype == DType::kFloat64 && NumElements(in[2].shape) == 1, DTypeError,
               "[sgd_update] learning rate must be a float64 scalar");
    std::vector<TensorMeta> out{in[0]};
    if (in.size() == 4) out.push_back(in[3]);
    AddCopyOutput("sgd_update", in[0], a, out);
    return out;
  };
}

// Note [Weight gradient into the update]: made only by the graph pass in graph/fuse_weight_grad.cc, never
// by user code. inputs: param (M, N), a (K, M), b (K, N), lr [, momentum buffer] [, grad scale]
// [, found_inf] -> outputs: param [, buffer]; attrs as sgd_update. The same update as sgd_update with
// grad = a^T b (the weight gradient of a linear layer, K = batch), computed a few rows at a time
// and applied while the rows are in cache: the gradient is never stored.
LOOM_OP(matmul_sgd_update) {
  def.internal = "made only by the graph pass in graph/fuse_weight_grad.cc";
  def.attrs = kSgdAttrs;
  def.infer = [](const std::vector<TensorMeta>& in_all, const Attrs& at) {
    const size_t extra = ClipInputs("matmul_sgd_update", in_all, at);
    const std::vector<TensorMeta> in(in_all.begin(), in_all.end() - extra);
    LOOM_CHECK(in.size() == 4 || in.size() == 5, ValueError, "[matmul_sgd_update] takes 4 or 5 inputs",
               extra ? " and a scale or flag" : "", ", got ", in_all.size());
    CheckFloat("matmul_sgd_update", in[0], "parameter");
    CheckSameDType("matmul_sgd_update", in[0], in[1]);
    CheckSameDType("matmul_sgd_update", in[0], in[2]);
    const Shape &p = in[0].shape, &a = in[1].shape, &b = in[2].shape;
    LOOM_CHECK(p.size() == 2 && a.size() == 2 && b.size() == 2 && a[0] == b[0] && a[1] == p[0] && b[1] == p[1],
               ShapeError, "[matmul_sgd_update] parameter ", ToString(p), " is not a^T b for a ", ToString(a),
               " and b ", ToString(b));
    LOOM_CHECK(in[3].dtype == DType::kFloat64 && NumElements(in[3].shape) == 1, DTypeError,
               "[matmul_sgd_update] learning rate must be a float64 scalar");
    std::vector<TensorMeta> out{in[0]};
    if (in.size() == 5) out.push_back(in[4]);
    return out;
  };
}

// inputs: param, grad, lr, m, v, step (float64 scalar, the step count after this update)
// [, grad scale] [, found_inf] -> outputs: param, m, v.  attrs: beta1, beta2, eps, weight_decay,
// decoupled (AdamW, 0/1), and grad_scaled, clip_value, grad_mult, found_inf (the Notes above)
LOOM_OP(adam_update) {
  def.internal = "the update of nn::Adam, reached through loom.opt.Adam";
  def.attrs = Join(
      {{"beta1", kFloat}, {"beta2", kFloat}, {"eps", kFloat}, {"weight_decay", kFloat}, {"decoupled", kInt},
       {"copy_dtype", kInt}},
      kGradTransform);
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("adam_update", in, 6 + ClipInputs("adam_update", in, a));
    CheckFloat("adam_update", in[0], "parameter");
    CheckSameDType("adam_update", in[0], in[1]);
    LOOM_CHECK(in[0].shape == in[1].shape, ShapeError, "[adam_update] parameter ", ToString(in[0].shape),
               " and gradient ", ToString(in[1].shape), " differ in shape");
    std::vector<TensorMeta> out{in[0], in[3], in[4]};
    AddCopyOutput("adam_update", in[0], a, out);
    return out;
  };
}

// Note [Small updates grouped] (graph/group_updates.cc): the records of `members` sgd_update or
// adam_update ops (`of`) with the same attributes, side by side: the inputs are each member's
// inputs in turn, the outputs each member's outputs in turn, and the other attributes are the
// members'. Made only by the graph pass group_updates; each member's values are what its own
// record computes.
LOOM_OP(update_group) {
  def.internal = "made only by the graph pass in graph/group_updates.cc";
  def.attrs = Join(Join(kSgdAttrs, {{"copy_dtype", kInt}, {"beta1", kFloat}, {"beta2", kFloat}, {"eps", kFloat},
                                    {"decoupled", kInt}}),
                   {{"of", kStr}, {"members", kInt}});
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    const std::string& of = a.Str("of");
    LOOM_CHECK(of == "sgd_update" || of == "adam_update", ValueError, "[update_group] of '", of,
               "': groups sgd_update or adam_update records");
    const int64_t n = a.Int("members");
    LOOM_CHECK(n > 0 && !in.empty() && in.size() % size_t(n) == 0, ValueError, "[update_group] ", in.size(),
               " inputs are not ", n, " members' alike");
    const OpDef& member = GetOp(of);
    const Attrs ma = UpdateGroupMemberAttrs(a);
    const size_t k = in.size() / size_t(n);
    std::vector<TensorMeta> out;
    for (size_t i = 0; i < size_t(n); ++i) {
      const std::vector<TensorMeta> o =
          member.infer(std::vector<TensorMeta>(in.begin() + ptrdiff_t(i * k), in.begin() + ptrdiff_t((i + 1) * k)), ma);
      out.insert(out.end(), o.begin(), o.end());
    }
    return out;
  };
}


// inputs: counter (float64 scalar) [, found_inf (float32 scalar)] -> outputs: counter + 1, in
// place; with the flag, counter unchanged when it is nonzero (Note [Skipped updates]). Keeps the
// optimizer's step count on the device so that replays advance it.
LOOM_OP(increment) {
  def.internal = "nn::Adam's step count, reached through loom.opt.Adam";
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    LOOM_CHECK(in.size() == 1 || in.size() == 2, ValueError, "[increment] takes a counter and an optional found_inf ",
               "flag, got ", in.size(), " inputs");
    if (in.size() == 2) CheckFlag("increment", in[1]);
    return std::vector<TensorMeta>{in[0]};
  };
}

}  // namespace loom
