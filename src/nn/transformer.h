// Transformer layers and the GPT model (GPT-2's architecture: pre-norm blocks, learned positions,
// the output projection tied to the token embedding).
//
//   nn::GptConfig c;  // vocab 1024, context 256, 4 layers, width 256, 4 heads
//   auto gpt = std::make_shared<nn::Gpt>(c);
//   Tensor logits = gpt->Forward(tokens);  // tokens (B, T) int32 -> (B * T, vocab)
//
// Attention is one op (ops::Attention, Note [Attention keeps no score matrix]): no (T, T) matrix
// is kept for backward. Weights start as GPT-2's: normal(0, 0.02), the projections that end a
// residual branch scaled by 1 / sqrt(2 layers), biases zero, LayerNorm gains one.
#pragma once

#include <memory>
#include <vector>

#include "nn/cnn_layers.h"
#include "nn/layer.h"

namespace loom {
namespace nn {

// Causal (or not) multi-head self-attention: one (dim, 3 dim) projection to q, k and v, heads of
// width dim / heads, the attention op, and an output projection.
class MultiHeadAttention : public Layer {
 public:
  MultiHeadAttention(int64_t dim, int64_t heads, bool causal = true, double dropout = 0, LayerOptions o = {});
  Tensor Forward(const Tensor& x) override;  // x: (B, T, dim) -> (B, T, dim)
  std::string TypeName() const override { return "MultiHeadAttention"; }
  std::shared_ptr<Linear> qkv, proj;

 private:
  int64_t dim_, heads_;
  bool causal_;
  std::shared_ptr<Dropout> drop_;
};

// A pre-norm block: x + attn(ln1(x)), then x + fc2(act(fc1(ln2(x)))) with fc1 to mlp_ratio dim.
class TransformerBlock : public Layer {
 public:
  TransformerBlock(int64_t dim, int64_t heads, int64_t mlp_ratio = 4, bool causal = true, double dropout = 0,
                   Act act = Act::kGELU, LayerOptions o = {});
  Tensor Forward(const Tensor& x) override;  // x: (B, T, dim) -> (B, T, dim)
  std::string TypeName() const override { return "TransformerBlock"; }
  std::shared_ptr<LayerNorm> ln1, ln2;
  std::shared_ptr<MultiHeadAttention> attn;
  std::shared_ptr<Linear> fc1, fc2;

 private:
  std::shared_ptr<Activation> act_;
  std::shared_ptr<Dropout> drop_;
};

struct GptConfig {
  int64_t vocab = 1024, context = 256, layers = 4, dim = 256, heads = 4, mlp_ratio = 4;
  double dropout = 0;
  bool tie_weights = true;   // logits = h wte^T (GPT-2), or a separate (dim, vocab) head
  Act act = Act::kGELU;      // the tanh form, GPT-2's
};

// tokens: int32/int64 (B, T), T <= context -> logits (B * T, vocab): rows in (b, t) order, ready
// for softmax_cross_entropy against the targets flattened to (B * T).
class Gpt : public Layer {
 public:
  explicit Gpt(const GptConfig& c, LayerOptions o = {});
  Tensor Forward(const Tensor& tokens) override;
  // The loss of Forward(tokens) against labels (B * T) without the logits: the head's product
  // fused with the cross-entropy (ops::LinearCrossEntropy).
  Tensor ForwardCrossEntropy(const Tensor& tokens, const Tensor& labels) override;
  std::string TypeName() const override { return "Gpt"; }
  const GptConfig& config() const { return c_; }
  std::shared_ptr<Embedding> wte;
  Tensor wpe;  // (context, dim)
  std::vector<std::shared_ptr<TransformerBlock>> blocks;
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<Linear> head;  // null when tied

 private:
  Tensor Hidden(const Tensor& tokens);  // (B, T) -> ln_f's output (B * T, dim)
  GptConfig c_;
};

}  // namespace nn
}  // namespace loom
