// The transformer layers and the GPT (nn/transformer.h) through nn::Model: a captured step equal
// to the eager step bitwise, learning a learnable sequence, a memory budget met by recomputing,
// the checks on sizes, and cross-entropy's one copy of the logits in the plan.
#include <gtest/gtest.h>

#include <random>

#include "core/autocast.h"
#include "common/harness.h"
#include "graph/graph.h"
#include "nn/model.h"
#include "nn/transformer.h"

namespace loom {
namespace test {
namespace {

nn::GptConfig Tiny() {
  nn::GptConfig c;
  c.vocab = 40;
  c.context = 16;
  c.layers = 2;
  c.dim = 32;
  c.heads = 4;
  return c;
}

// Sequences where the next token is (3 t + 1) mod vocab three times in four: (tokens (B, T),
// targets (B T)).
std::pair<Tensor, Tensor> Batch(int64_t b, int64_t t, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> seq(size_t(b * (t + 1)));
  for (int64_t i = 0; i < b; ++i) {
    seq[size_t(i * (t + 1))] = int32_t(gen() % uint32_t(vocab));
    for (int64_t j = 1; j <= t; ++j) {
      const int32_t prev = seq[size_t(i * (t + 1) + j - 1)];
      seq[size_t(i * (t + 1) + j)] = gen() % 4 ? int32_t((3 * prev + 1) % vocab) : int32_t(gen() % uint32_t(vocab));
    }
  }
  std::vector<int32_t> x, y;
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < t; ++j) {
      x.push_back(seq[size_t(i * (t + 1) + j)]);
      y.push_back(seq[size_t(i * (t + 1) + j + 1)]);
    }
  return {ops::FromVector(x, {b, t}, CpuDevice()), ops::FromVector(y, {b * t}, CpuDevice())};
}

struct GptRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> params;
  std::shared_ptr<Graph> graph;
};

GptRun Train(bool graph, int steps, const GraphOptions& o = {}, int64_t micro = 1,
             Precision precision = Precision::kFloat32) {
  CpuDevice()->SetRandSeed(11);
  auto gpt = std::make_shared<nn::Gpt>(Tiny());
  auto adam = std::make_shared<nn::Adam>(3e-3, 0.9, 0.95, 1e-8, 0.1, true);
  adam->set_decay_on(nn::Adam::DecayOn::kMatrices);
  nn::Model m(gpt, adam);
  m.set_micro_batches(micro);
  m.set_precision(precision);
  auto first = Batch(4, 16, 40, 1);
  m.Compile({first.first}, true, graph, true, o);
  GptRun r;
  for (int s = 0; s < steps; ++s) {
    auto b = Batch(4, 16, 40, uint32_t(s + 1));
    r.losses.push_back(m.TrainOneBatch(b.first, b.second).loss.Item());
  }
  for (auto& p : m.Params()) r.params.push_back(p.second.ToVector<float>());
  if (graph) r.graph = m.train_graph();
  return r;
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
  std::vector<const void*> forward_qkv, grad_qkv;
  for (const OpRecord& op : graph.graph->ops().ops) {
    if (op.name() == "attention_qkv" && op.inputs[0].dtype() == DType::kBFloat16)
      forward_qkv.push_back(op.inputs[0].block());
    if (op.name() == "attention_qkv_grad" && op.inputs[0].dtype() == DType::kBFloat16)
      grad_qkv.insert(grad_qkv.begin(), op.inputs[0].block());  // backward runs the layers in reverse
  }
  EXPECT_EQ(forward_qkv.size(), 2u);  // one per layer
  // Note [bfloat16 weight copies kept by the update]: Adam writes the weights' bfloat16 copies.
  EXPECT_GT(graph.graph->stats().counters.Get("kept_weight_copies"), 0);
  // The gradient reads the forward's bfloat16 qkv (one cast per layer's qkv, not two), so the
  // float32 qkv is not kept for the backward.
  EXPECT_EQ(grad_qkv, forward_qkv);
  GptRun bf16_one = Train(true, 1, {}, 1, Precision::kBFloat16), f32_one = Train(true, 1);
  EXPECT_LT(bf16_one.graph->stats().arena_bytes, f32_one.graph->stats().arena_bytes);
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
