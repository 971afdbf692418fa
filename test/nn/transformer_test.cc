// The transformer layers and the GPT (nn/transformer.h) through nn::Model: a captured step equal
// to the eager step bitwise, learning a learnable sequence, a memory budget met by recomputing,
// the checks on sizes, and cross-entropy's one copy of the logits in the plan.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/autocast.h"
#include "common/gpt.h"
#include "common/graph_capture.h"
#include "common/harness.h"
#include "graph/graph.h"
#include "nn/model.h"
#include "nn/transformer.h"

LOOM_OP_KIND(attention_qkv);
LOOM_OP_KIND(attention_qkv_grad);
LOOM_OP_KIND(linear_cross_entropy);
LOOM_OP_KIND(softmax_cross_entropy);

namespace loom {
namespace test {
namespace {

nn::GptConfig Tiny() { return TinyGpt(); }
std::pair<Tensor, Tensor> Batch(int64_t b, int64_t t, int64_t vocab, uint32_t seed) { return GptBatch(b, t, vocab, seed); }
GptRun Train(bool graph, int steps, const GraphOptions& o = {}, int64_t micro = 1,
             Precision precision = Precision::kFloat32) {
  return TrainTinyGpt(CpuDevice(), graph, steps, o, micro, precision);
}

TEST(Gpt, GraphStepEqualsEagerBitwiseAndLearns) {
  GptRun eager = Train(false, 25), graph = Train(true, 25);
  ASSERT_EQ(eager.losses, graph.losses);
  ASSERT_EQ(eager.params, graph.params);
  EXPECT_LT(eager.losses.back(), eager.losses.front() - 0.5) << "the chain is learnable";
}

TEST(Gpt, MeetsAMemoryBudgetByRecomputingAndStaysBitwiseEqual) {
  GptRun plain = Train(true, 3);
  const GraphStats& st = plain.graph->stats();
  GraphOptions o;
  o.memory_budget = st.persistent_bytes + st.arena_bytes * 6 / 10;
  GptRun budgeted = Train(true, 3, o);
  const GraphStats& b = budgeted.graph->stats();
  EXPECT_LE(b.persistent_bytes + b.arena_bytes, o.memory_budget);
  EXPECT_GT(b.recomputed_ops, 0u);
  EXPECT_EQ(plain.losses, budgeted.losses);
  EXPECT_EQ(plain.params, budgeted.params);
}

TEST(Gpt, CrossEntropyKeepsOneCopyOfTheLogits) {
  // Note [One copy of the logits]: between the forward and the backward, nothing (N, V) but the
  // logits lives, so the plan holds at most two (N, V) blocks at once (the logits and their
  // gradient, which may take their memory).
  GptRun r = Train(true, 1);
  const int64_t logits_bytes = 4 * 16 * 40 * 4;
  int64_t big = 0;
  for (const auto& op : r.graph->ops().ops)
    for (const Tensor& t : op.outputs)
      if (t.nbytes() == size_t(logits_bytes)) ++big;
  EXPECT_EQ(big, 2) << "the logits and their gradient (log-probabilities would make a third)";
}

TEST(Gpt, MicroBatchesGiveTheWholeBatchsUpdate) {
  // Note [Micro-batches in one step]: two halves, their gradients summed, one update: the same
  // step as the whole batch up to the order of the sums; graph and eager bitwise equal.
  GptRun whole = Train(false, 4), halves = Train(false, 4, {}, 2), graph_halves = Train(true, 4, {}, 2);
  ASSERT_EQ(halves.losses, graph_halves.losses);
  ASSERT_EQ(halves.params, graph_halves.params);
  for (size_t i = 0; i < whole.losses.size(); ++i) EXPECT_NEAR(whole.losses[i], halves.losses[i], 2e-4);
  for (size_t p = 0; p < whole.params.size(); ++p)
    for (size_t j = 0; j < whole.params[p].size(); ++j) ASSERT_NEAR(whole.params[p][j], halves.params[p][j], 2e-4);
  LOOM_EXPECT_THROW_MSG(Train(false, 1, {}, 3), ShapeError, "[Model] 3 micro-batches must divide the batch");
  // fp16 with loss scaling (Note [Loss scaling]): each micro-batch backpropagates from the scaled
  // loss, the sum is unscaled once; unscaled gradients would move nothing.
  GptRun whole16 = Train(false, 4, {}, 1, Precision::kFloat16), halves16 = Train(true, 4, {}, 2, Precision::kFloat16);
  for (size_t i = 0; i < whole16.losses.size(); ++i) EXPECT_NEAR(whole16.losses[i], halves16.losses[i], 2e-3);
  for (size_t p = 0; p < whole16.params.size(); ++p)
    for (size_t j = 0; j < whole16.params[p].size(); ++j) ASSERT_NEAR(whole16.params[p][j], halves16.params[p][j], 2e-3);
}

// Note [Attention from a bfloat16 qkv]: at bf16 the attention of every block is lowered with the
// products (forward and gradient, on the CPU), its bfloat16 qkv is the copy the backward keeps
// (the float32 qkv dies in the forward: the arena shrinks by it), the graph equals eager bitwise,
// and the run tracks float32's closely and learns.
TEST(Gpt, Bf16LowersAttentionKeepsItsBfloat16QkvAndEqualsEagerBitwise) {
  GptRun eager = Train(false, 25, {}, 1, Precision::kBFloat16), graph = Train(true, 25, {}, 1, Precision::kBFloat16);
  ASSERT_EQ(eager.losses, graph.losses);
  ASSERT_EQ(eager.params, graph.params);
  GptRun f32 = Train(true, 25);
  EXPECT_NE(graph.params, f32.params);
  for (size_t i = 0; i < f32.losses.size(); ++i) EXPECT_NEAR(graph.losses[i], f32.losses[i], 0.02 * f32.losses[i]);
  EXPECT_LT(graph.losses.back(), graph.losses.front() - 0.5);
  std::vector<const void*> forward_qkv, grad_qkv, forward_gelu, grad_gelu;
  int float32_gelu = 0;
  for (const OpRecord& op : graph.graph->ops().ops) {
    if (op.name() == "attention_qkv" && op.inputs[0].dtype() == DType::kBFloat16)
      forward_qkv.push_back(op.inputs[0].block());
    if (op.name() == "attention_qkv_grad" && op.inputs[0].dtype() == DType::kBFloat16)
      grad_qkv.insert(grad_qkv.begin(), op.inputs[0].block());  // backward runs the layers in reverse
    if (op.name() == "gelu" || op.name() == "gelu_grad") {
      if (op.inputs[0].dtype() != DType::kBFloat16) ++float32_gelu;
      else (op.name() == "gelu" ? forward_gelu : grad_gelu).push_back(op.inputs[0].block());
    }
  }
  std::reverse(grad_gelu.begin(), grad_gelu.end());
  EXPECT_EQ(forward_qkv.size(), 2u);  // one per layer
  // Note [Precision policy]: each GELU and its gradient read the same bfloat16 x, the forward's.
  EXPECT_EQ(float32_gelu, 0);
  EXPECT_EQ(forward_gelu.size(), 2u);
  EXPECT_EQ(grad_gelu, forward_gelu);
  // Note [Casts fused into their producers]: the layer norms (2 a layer and the last), the GELUs,
  // the qkv biases and the biases before the GELUs (whose float32 x nothing reads now) write their
  // bfloat16 copies themselves; the bits above are the same.
  EXPECT_EQ(graph.graph->stats().counters.Get("fused_casts"), 11);
  // ... and the casts of the gradients a bias_grad sums (each layer's GELU gradient, and the
  // residual stream's before the projection and the second product) are written by that
  // bias_grad as it reads them; the bits above are the same.
  EXPECT_EQ(graph.graph->stats().counters.Get("casts_into_bias_grads"), 6);
  int copying_bias_grads = 0;
  for (const OpRecord& op : graph.graph->ops().ops)
    copying_bias_grads += op.name() == "bias_grad" && op.outputs.size() == 2;
  EXPECT_EQ(copying_bias_grads, 6);
  // Note [bfloat16 weight copies kept by the update]: Adam writes the weights' bfloat16 copies.
  EXPECT_GT(graph.graph->stats().counters.Get("kept_weight_copies"), 0);
  // The gradient reads the forward's bfloat16 qkv (one cast per layer's qkv, not two), so the
  // float32 qkv is not kept for the backward.
  EXPECT_EQ(grad_qkv, forward_qkv);
  GptRun bf16_one = Train(true, 1, {}, 1, Precision::kBFloat16), f32_one = Train(true, 1);
  EXPECT_LT(bf16_one.graph->stats().arena_bytes, f32_one.graph->stats().arena_bytes);
}

// Note [Attention results kept in bfloat16]: attention's y and dqkv are written in bfloat16 for
// the products that read them (no cast of either is left; the gradient reads the bfloat16 y, the
// qkv bias's gradient the bfloat16 dqkv), with the same bits as with the pass off, and the plan
// no longer keeps a float32 y from the forward to the backward.
TEST(Gpt, Bf16KeepsAttentionResultsInBfloat16WithTheSameBits) {
  GraphOptions off;
  off.passes.Set("bf16_attention", false);
  GptRun on = Train(true, 6, {}, 1, Precision::kBFloat16), plain = Train(true, 6, off, 1, Precision::kBFloat16);
  ASSERT_EQ(on.losses, plain.losses);
  ASSERT_EQ(on.params, plain.params);
  EXPECT_EQ(on.graph->stats().counters.Get("bf16_attention_results"), 4);  // y and dqkv of 2 layers
  EXPECT_EQ(plain.graph->stats().counters.Get("bf16_attention_results"), 0);
  std::vector<const void*> ys, dqkvs;
  int bias_grads_of_bf16 = 0, y_read_in_bf16 = 0;
  for (const OpRecord& op : on.graph->ops().ops) {
    if (op.def == &op_kind::attention_qkv) {
      EXPECT_EQ(op.outputs[0].dtype(), DType::kBFloat16);
      EXPECT_EQ(op.outputs[1].dtype(), DType::kFloat32);
      ys.push_back(op.outputs[0].block());
    }
    if (op.def == &op_kind::attention_qkv_grad) {
      EXPECT_EQ(op.outputs[0].dtype(), DType::kBFloat16);
      y_read_in_bf16 += std::count(ys.begin(), ys.end(), op.inputs[1].block()) > 0;
      dqkvs.push_back(op.outputs[0].block());
    }
    if (op.name() == "bias_grad" && op.inputs[0].dtype() == DType::kBFloat16) {
      EXPECT_EQ(op.outputs[0].dtype(), DType::kFloat32);
      bias_grads_of_bf16 += std::count(dqkvs.begin(), dqkvs.end(), op.inputs[0].block()) > 0;
    }
    if (op.name() == "cast")
      for (const auto* made : {&ys, &dqkvs})
        EXPECT_EQ(std::count(made->begin(), made->end(), op.inputs[0].block()), 0) << "a cast of an attention result";
  }
  EXPECT_EQ(y_read_in_bf16, 2);
  EXPECT_EQ(bias_grads_of_bf16, 2);
  // A float32 y (4 x 16 x 32 values) lived from each layer's forward to its backward.
  EXPECT_LT(on.graph->stats().arena_bytes, plain.graph->stats().arena_bytes);
}

// Note [Small updates grouped]: every parameter of the tiny GPT has at most 4,096 values, so its
// updates run as groups, one per set of attributes (AdamW decays the weights and embeddings
// only; in fp16 their 16-bit copies are kept, the position embedding's is not), where the last
// of each group ran. The bits are those of the pass switched off, in float32 and in fp16 (loss
// scaling: every update reads the scale and the found_inf flag), and eagerly's; the plan holds
// the moved gradients (at most 4,096 values each) a little longer.
TEST(Gpt, SmallUpdatesRunInGroupsWithTheSameBits) {
  GraphOptions off;
  off.passes.Set("group_updates", false);
  for (Precision p : {Precision::kFloat32, Precision::kFloat16}) {
    const bool fp16 = p == Precision::kFloat16;
    GptRun on = Train(true, 5, {}, 1, p), plain = Train(true, 5, off, 1, p), eager = Train(false, 5, {}, 1, p);
    ASSERT_EQ(on.losses, plain.losses) << Name(p);
    ASSERT_EQ(on.params, plain.params) << Name(p);
    ASSERT_EQ(on.params, eager.params) << Name(p);
    std::vector<int64_t> members;
    int alone = 0;
    for (const OpRecord& op : on.graph->ops().ops) {
      if (op.name() == "update_group") {
        EXPECT_EQ(op.attrs.Str("of"), "adam_update");
        members.push_back(op.attrs.Int("members"));
      }
      if (op.name() == "adam_update") {
        ++alone;
        EXPECT_EQ(op.inputs[0].shape(), (Shape{16, 32})) << "the position embedding: no 16-bit copy, no decay";
      }
    }
    // 2 layers x (2 layer norms x 2 + 4 biases) + the last layer norm's 2 undecayed; 2 x 4 weights
    // and the two embeddings decayed (the position embedding alone in fp16).
    EXPECT_EQ(members, (std::vector<int64_t>{18, fp16 ? 9 : 10})) << Name(p);
    EXPECT_EQ(alone, fp16 ? 1 : 0) << Name(p);
    EXPECT_EQ(on.graph->stats().counters.Get("grouped_updates"), fp16 ? 27 : 28) << Name(p);
    EXPECT_EQ(plain.graph->stats().counters.Get("grouped_updates"), 0) << Name(p);
    const size_t moved = 28 * 4096 * 4;
    EXPECT_LE(on.graph->stats().arena_bytes, plain.graph->stats().arena_bytes + moved) << Name(p);
  }
}

// Note [Attention on cuDNN]: attention_qkv's backward tells its gradient op when dlse holds the
// zeros it made (no gradient reached lse), which a kernel without a dlse term relies on; with a
// gradient through lse it does not, and the CPU's gradient then differs by lse's term.
TEST(Attention, TheGradientSaysWhenItsDlseIsZeros) {
  auto dev = CpuDevice();
  std::vector<std::vector<float>> grads;
  for (bool through_lse : {false, true}) {
    Tensor qkv = RandomTensor({2, 5, 48}, DType::kFloat32, 3, -1, 1, dev);
    qkv.set_requires_grad(true);
    CapturedGraph g(dev, "attention");
    Tensor dqkv = g.Capture([&] {
      std::vector<Tensor> o =
          Call(op_kind::attention_qkv, {qkv}, Attrs{{"heads", int64_t(2)}, {"causal", int64_t(1)}, {"scale", 0.0}});
      Tensor loss = ops::Sum(o[0]);
      if (through_lse) loss = ops::Add(loss, ops::Sum(o[1]));
      return Backward(loss).at(0).second;
    });
    g.Replay();
    int seen = 0;
    int64_t zero_dlse = -1;
    for (const OpRecord& op : g.graph().ops().ops)
      if (op.def == &op_kind::attention_qkv_grad) {
        ++seen;
        zero_dlse = op.attrs.Int("zero_dlse", 0);
      }
    EXPECT_EQ(seen, 1) << through_lse;
    EXPECT_EQ(zero_dlse, through_lse ? 0 : 1) << through_lse;
    grads.push_back(dqkv.ToVector<float>());
  }
  EXPECT_NE(grads[0], grads[1]) << "lse's gradient term changed nothing";
  Tensor qkv = RandomTensor({2, 5, 48}, DType::kFloat32, 3, -1, 1, dev);
  std::vector<Tensor> o = Call(op_kind::attention_qkv, {qkv}, Attrs{{"heads", int64_t(2)}});
  LOOM_EXPECT_THROW_MSG(Call(op_kind::attention_qkv_grad, {qkv, o[0], o[1], o[0], o[1]},
                             Attrs{{"heads", int64_t(2)}, {"zero_dlse", int64_t(2)}}),
                        ValueError, "[attention_qkv_grad] zero_dlse must be 0 or 1, got 2");
}

// Note [A step that keeps no output]: the same training without handing the logits back; in a
// graph they are then an intermediate of the plan instead of persistent (the user held them).
TEST(Gpt, AStepThatKeepsNoOutputLeavesTheLogitsToThePlan) {
  std::vector<float> losses[2];
  std::vector<std::vector<float>> params[2];
  size_t persistent[2];
  for (bool keep : {true, false}) {
    CpuDevice()->SetRandSeed(11);
    nn::Model m(std::make_shared<nn::Gpt>(Tiny()), std::make_shared<nn::Adam>(3e-3));
    m.set_keep_output(keep);
    m.set_fused_loss(false);  // the plain product and loss, whose logits the plan then holds
    auto first = Batch(4, 16, 40, 1);
    m.Compile({first.first}, true, true);
    for (int s = 0; s < 4; ++s) {
      auto b = Batch(4, 16, 40, uint32_t(s + 1));
      nn::Model::StepResult r = m.TrainOneBatch(b.first, b.second);
      EXPECT_EQ(r.output.defined(), keep);
      if (keep) EXPECT_EQ(r.output.shape(), (Shape{64, 40}));
      losses[keep].push_back(r.loss.Item());
    }
    for (auto& p : m.Params()) params[keep].push_back(p.second.ToVector<float>());
    persistent[keep] = m.train_graph()->stats().persistent_bytes;
    LOOM_EXPECT_THROW_MSG(m.set_keep_output(!keep), GraphError, "after the first graph step");
    m.set_keep_output(keep);  // unchanged: allowed
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(params[0], params[1]);
  EXPECT_EQ(persistent[1] - persistent[0], size_t(64 * 40 * 4)) << "the (B T, V) float32 logits";
}

// Note [Cross-entropy fused with the head's product]: a step that keeps no output runs the GPT's
// head and loss as one linear_cross_entropy, which makes no logits at all. It trains as the plain
// product and loss do (the same sums in another order: close, not bitwise), the graph equals
// eager bitwise, and no tensor of the logits' shape is made (what that saves at GPT-2's size is in
// docs/benchmarks.md: the chunk here is all 64 rows).
TEST(Gpt, AStepThatKeepsNoOutputFusesTheHeadWithTheLoss) {
  // Trains m, which keeps no output, `steps` steps on batches of 4 x 16 tokens: their losses.
  auto train = [](nn::Model& m, int64_t vocab, int steps, bool graph, const GraphOptions& o = {}) {
    m.set_keep_output(false);
    m.Compile({Batch(4, 16, vocab, 1).first}, true, graph, true, o);
    std::vector<float> losses;
    for (int s = 0; s < steps; ++s) {
      auto b = Batch(4, 16, vocab, uint32_t(s + 1));
      losses.push_back(m.TrainOneBatch(b.first, b.second).loss.Item());
    }
    return losses;
  };
  std::vector<float> losses[2];
  std::vector<std::vector<float>> params[2];
  for (bool fused : {false, true}) {
    CpuDevice()->SetRandSeed(11);
    nn::GptConfig c = Tiny();
    c.vocab = 300;  // a vocabulary large against the width, as a language model's
    nn::Model m(std::make_shared<nn::Gpt>(c), std::make_shared<nn::Adam>(3e-3));
    m.set_fused_loss(fused);
    losses[fused] = train(m, 300, 4, true);
    for (auto& p : m.Params()) params[fused].push_back(p.second.ToVector<float>());
    int lce = 0, sce = 0, logits = 0;  // logits: tensors of the (B T, V) logits' shape
    for (const OpRecord& op : m.train_graph()->ops().ops) {
      lce += op.def == &op_kind::linear_cross_entropy;
      sce += op.def == &op_kind::softmax_cross_entropy;
      for (const Tensor& t : op.outputs) logits += t.shape() == Shape{64, 300};
    }
    EXPECT_EQ(lce, fused ? 1 : 0);
    EXPECT_EQ(sce, fused ? 0 : 1);
    // The plain step writes the logits and their gradient; the fused one neither (its chunk of
    // logits is the kernel's scratch).
    EXPECT_EQ(logits, fused ? 0 : 2);
    LOOM_EXPECT_THROW_MSG(m.set_fused_loss(!fused), GraphError, "after the first graph step");
  }
  ASSERT_EQ(losses[0].size(), losses[1].size());
  for (size_t i = 0; i < losses[0].size(); ++i) EXPECT_NEAR(losses[1][i], losses[0][i], 1e-4) << "step " << i;
  for (size_t p = 0; p < params[0].size(); ++p)
    for (size_t i = 0; i < params[0][p].size(); ++i)
      ASSERT_NEAR(params[1][p][i], params[0][p][i], 1e-4) << "parameter " << p << " element " << i;

  // In a graph as eagerly, bit for bit; and under a memory budget that recomputes (Note
  // [Planned scratch]: the op's chunk is scratch the plan packs like any block).
  std::vector<float> run[3];
  size_t budget = 0;
  for (int mode : {0, 1, 2}) {  // eager, graph, graph with a budget of 60% of the graph's arena
    CpuDevice()->SetRandSeed(5);
    nn::Model m(std::make_shared<nn::Gpt>(Tiny()), std::make_shared<nn::Adam>(3e-3));
    GraphOptions o;
    if (mode == 2) o.memory_budget = budget;
    run[mode] = train(m, 40, 3, mode > 0, o);
    for (auto& p : m.Params()) {
      std::vector<float> v = p.second.ToVector<float>();
      run[mode].insert(run[mode].end(), v.begin(), v.end());
    }
    if (mode == 0) continue;
    const GraphStats& st = m.train_graph()->stats();
    if (mode == 1) budget = st.persistent_bytes + st.arena_bytes * 6 / 10;
    if (mode == 2) {
      EXPECT_LE(st.persistent_bytes + st.arena_bytes, budget);
      EXPECT_GT(st.recomputed_ops, 0u);
    }
  }
  EXPECT_EQ(run[0], run[1]);
  EXPECT_EQ(run[0], run[2]);
}

TEST(Gpt, RejectsBadSizes) {
  nn::GptConfig c = Tiny();
  c.heads = 5;
  LOOM_EXPECT_THROW_MSG(nn::Gpt bad(c), ValueError,
                        "[MultiHeadAttention] width 32 must be a positive multiple of the number of heads 5");
  nn::Gpt g(Tiny());
  auto b = Batch(2, 17, 40, 1);
  LOOM_EXPECT_THROW_MSG(g.Forward(b.first), ShapeError, "[Gpt] sequence length 17 must be in [1, 16]");
}

}  // namespace
}  // namespace test
}  // namespace loom
