// Note [Small updates grouped] (graph/group_updates.cc): which updates the pass gathers, where
// the group runs, and that a step with it gives the bits of the step without it and of eager
// execution. (The GPT's groups: test/nn/transformer_test.cc; CUDA's grouped launch against its
// members one by one: test/cuda/cuda_ops_test.cc.)
#include <gtest/gtest.h>

#include <vector>

#include "common/graph_capture.h"
#include "common/harness.h"
#include "core/ops.h"
#include "nn/optimizer.h"

namespace loom {
namespace test {
namespace {

struct Params {
  std::vector<Tensor> p;  // a, b, c (10 values each) and a large one (5,000)
  std::vector<std::vector<float>> Values() const {
    std::vector<std::vector<float>> v;
    for (const Tensor& t : p) v.push_back(t.ToVector<float>());
    return v;
  }
};

Params MakeParams() {
  Params s;
  for (uint32_t i = 0; i < 3; ++i) s.p.push_back(RandomTensor({10}, DType::kFloat32, 20 + i));
  s.p.push_back(RandomTensor({5000}, DType::kFloat32, 30));
  return s;
}

// One step: a's update twice (the same parameter and momentum: its two updates share every block
// they write), b's, the large parameter's, c's; each gradient made in the step.
void Step(nn::SGD& opt, const Params& s) {
  auto grad = [&](size_t k) { return ops::MulScalar(ops::Mul(s.p[k], s.p[k]), 0.5); };
  opt.Apply(grad(0), s.p[0], "a");
  opt.Apply(grad(1), s.p[1], "b");
  opt.Apply(grad(0), s.p[0], "a");
  opt.Apply(grad(3), s.p[3], "big");
  opt.Apply(grad(2), s.p[2], "c");
}

std::vector<std::vector<float>> Train(bool graph, bool pass, std::vector<OpRecord>* ops = nullptr) {
  Params s = MakeParams();
  nn::SGD opt(0.1, 0.9, 1e-3);
  if (!graph) {
    for (int i = 0; i < 3; ++i) Step(opt, s);
    return s.Values();
  }
  GraphOptions o;
  o.passes.Set("group_updates", pass);
  CapturedGraph g(CpuDevice(), "updates", o);
  g.Capture([&] { Step(opt, s); });
  for (int i = 0; i < 3; ++i) g.Replay();
  if (ops) *ops = g.graph().ops().ops;
  return s.Values();
}

TEST(GroupUpdates, UpdatesSharingABlockStayApartAndTheBitsAreTheSeparateUpdates) {
  std::vector<OpRecord> ops;
  const auto grouped = Train(true, true, &ops);
  EXPECT_EQ(grouped, Train(true, false));
  EXPECT_EQ(grouped, Train(false, false));
  // a's first update stays (its second, later, writes the same blocks); b's, a's second and c's
  // run as one group where c's ran; the large parameter's stays alone, before it.
  std::vector<std::string> names;
  for (const OpRecord& op : ops)
    if (op.name() == "sgd_update" || op.name() == "update_group") names.push_back(op.name());
  EXPECT_EQ(names, (std::vector<std::string>{"sgd_update", "sgd_update", "update_group"}));
  int first = -1, group = -1;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].name() == "sgd_update" && first < 0) first = int(i);
    if (ops[i].name() == "update_group") group = int(i);
  }
  ASSERT_GE(first, 0);
  ASSERT_GE(group, 0);
  const OpRecord& g = ops[size_t(group)];
  EXPECT_EQ(g.attrs.Str("of"), "sgd_update");
  ASSERT_EQ(g.attrs.Int("members"), 3);
  ASSERT_EQ(g.outputs.size(), 6u);  // each member's parameter and momentum
  EXPECT_EQ(ops[size_t(first)].inputs[0].numel(), 10);
  EXPECT_EQ(g.outputs[2].block(), ops[size_t(first)].outputs[0].block()) << "a's second update, in the middle";
  for (int k : {0, 4}) EXPECT_NE(g.outputs[size_t(k)].block(), ops[size_t(first)].outputs[0].block());
}

}  // namespace
}  // namespace test
}  // namespace loom
