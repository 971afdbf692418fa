#include "nn/transformer.h"

#include <cmath>
#include <string>

#include "core/device.h"
#include "core/ops.h"
#include "core/ops_transformer.h"

LOOM_OP_KIND(matmul);

namespace loom {
namespace nn {

namespace {
std::shared_ptr<Device> Dev(const LayerOptions& o) { return o.device ? o.device : CpuDevice(); }

// GPT-2's initialisation of a Linear: weight normal(0, stddev), bias zero (as constructed).
void InitLinear(Linear& l, double stddev) { ops::NormalInto(l.weight, 0, stddev); }

constexpr double kInitStd = 0.02;
}  // namespace

MultiHeadAttention::MultiHeadAttention(int64_t dim, int64_t heads, bool causal, double dropout, LayerOptions o)
    : dim_(dim), heads_(heads), causal_(causal) {
  LOOM_CHECK(dim > 0 && heads > 0 && dim % heads == 0, ValueError, "[MultiHeadAttention] width ", dim,
             " must be a positive multiple of the number of heads ", heads);
  qkv = AddChild("qkv", std::make_shared<Linear>(dim, 3 * dim, true, o));
  proj = AddChild("proj", std::make_shared<Linear>(dim, dim, true, o));
  InitLinear(*qkv, kInitStd);
  InitLinear(*proj, kInitStd);
  if (dropout > 0) drop_ = AddChild("drop", std::make_shared<Dropout>(dropout));
}

Tensor MultiHeadAttention::Forward(const Tensor& x) {
  LOOM_CHECK(x.ndim() == 3 && x.dim(2) == dim_, ShapeError, "[MultiHeadAttention] expects (B, T, ", dim_,
             "), got ", x.Describe());
  Tensor y = proj->Forward(ops::AttentionQkv(qkv->Forward(x), heads_, causal_));
  return drop_ ? drop_->Forward(y) : y;
}

TransformerBlock::TransformerBlock(int64_t dim, int64_t heads, int64_t mlp_ratio, bool causal, double dropout, Act act,
                                   LayerOptions o) {
  LOOM_CHECK(mlp_ratio > 0, ValueError, "[TransformerBlock] mlp_ratio must be positive, got ", mlp_ratio);
  ln1 = AddChild("ln1", std::make_shared<LayerNorm>(Shape{dim}, 1e-5, o));
  attn = AddChild("attn", std::make_shared<MultiHeadAttention>(dim, heads, causal, dropout, o));
  ln2 = AddChild("ln2", std::make_shared<LayerNorm>(Shape{dim}, 1e-5, o));
  fc1 = AddChild("fc1", std::make_shared<Linear>(dim, mlp_ratio * dim, true, o));
  fc2 = AddChild("fc2", std::make_shared<Linear>(mlp_ratio * dim, dim, true, o));
  InitLinear(*fc1, kInitStd);
  InitLinear(*fc2, kInitStd);
  act_ = std::make_shared<Activation>(act);
  if (dropout > 0) drop_ = AddChild("drop", std::make_shared<Dropout>(dropout));
}

Tensor TransformerBlock::Forward(const Tensor& x) {
  Tensor h = ops::Add(x, attn->Forward(ln1->Forward(x)));
  Tensor m = fc2->Forward(act_->Forward(fc1->Forward(ln2->Forward(h))));
  return ops::Add(h, drop_ ? drop_->Forward(m) : m);
}

Gpt::Gpt(const GptConfig& c, LayerOptions o) : c_(c) {
  LOOM_CHECK(c.vocab > 0 && c.context > 0 && c.layers > 0, ValueError, "[Gpt] vocab ", c.vocab, ", context ",
             c.context, " and layers ", c.layers, " must be positive");
  wte = AddChild("wte", std::make_shared<Embedding>(c.vocab, c.dim, o));
  ops::NormalInto(wte->table, 0, kInitStd);
  wpe = AddParam("wpe", ops::Normal({c.context, c.dim}, 0, 0.01, o.dtype, Dev(o)));
  const double residual_std = kInitStd / std::sqrt(2.0 * double(c.layers));
  for (int64_t i = 0; i < c.layers; ++i) {
    auto blk = std::make_shared<TransformerBlock>(c.dim, c.heads, c.mlp_ratio, true, c.dropout, c.act, o);
    InitLinear(*blk->attn->proj, residual_std);
    InitLinear(*blk->fc2, residual_std);
    blocks.push_back(AddChild("h." + std::to_string(i), blk));
  }
  ln_f = AddChild("ln_f", std::make_shared<LayerNorm>(Shape{c.dim}, 1e-5, o));
  if (!c.tie_weights) {
    head = AddChild("head", std::make_shared<Linear>(c.dim, c.vocab, false, o));
    InitLinear(*head, kInitStd);
  }
}

Tensor Gpt::Hidden(const Tensor& tokens) {
  LOOM_CHECK(tokens.ndim() == 2, ShapeError, "[Gpt] expects tokens (B, T), got ", tokens.Describe());
  const int64_t b = tokens.dim(0), t = tokens.dim(1);
  LOOM_CHECK(t > 0 && t <= c_.context, ShapeError, "[Gpt] sequence length ", t, " must be in [1, ", c_.context,
             "] (the model's context), tokens ", tokens.Describe());
  Tensor h = ops::Add(wte->Forward(tokens), ops::Slice(wpe, 0, 0, t));
  for (const auto& blk : blocks) h = blk->Forward(h);
  return ops::Reshape(ln_f->Forward(h), {b * t, c_.dim});
}

Tensor Gpt::Forward(const Tensor& tokens) {
  Tensor h = Hidden(tokens);
  if (head) return head->Forward(h);
  // tied: h wte^T, the table read transposed by the GEMM (no copy)
  return Call1(op_kind::matmul, {h, wte->table}, Attrs{{"ta", int64_t(0)}, {"tb", int64_t(1)}, {"sum_batch", int64_t(0)}});
}

Tensor Gpt::ForwardCrossEntropy(const Tensor& tokens, const Tensor& labels) {
  Tensor h = Hidden(tokens);
  if (head) return ops::LinearCrossEntropy(h, head->weight, labels, /*w_is_table=*/false);  // no bias
  return ops::LinearCrossEntropy(h, wte->table, labels, /*w_is_table=*/true);
}

}  // namespace nn
}  // namespace loom
