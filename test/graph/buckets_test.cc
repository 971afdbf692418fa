// Note [Gradient buckets] (graph/buckets.cc) on hand-built op lists: which all-reduces join a
// bucket, where its slices go, what the pass asks Binding for, and that it allocates, binds
// and marks nothing itself; then a captured graph with a gradient the user holds, destroyed
// while the gradient is still held.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/harness.h"
#include "common/op_lists.h"
#include "core/collective.h"
#include "core/comm_registry.h"
#include "graph/graph.h"
#include "graph/passes.h"
#include "io/comm/inproc.h"

namespace loom {
namespace test {
namespace {

constexpr int64_t kComm = 7;  // a communicator id: nothing runs, so none needs to exist

// An in-place all-reduce of g, as DistOpt captures it (core/collective.h).
OpRecord AllReduceOf(const Tensor& g, const Tensor& token) {
  return Record("allreduce", {g, token}, {g, token},
                Attrs{{"comm", kComm}, {"reduce", int64_t(0)}, {"scale", 1.0}, {"compress", int64_t(0)}});
}

PassResult RunBuckets(OpList list, const GraphOptions& options = {}) {
  for (const PassDef* p : RegisteredPasses())
    if (std::string(p->name) == "bucket_gradients") return p->run(std::move(list), PassContext{*CpuDevice(), options});
  ADD_FAILURE() << "no bucket_gradients pass";
  return PassResult{std::move(list)};
}

// The names of the ops, in order, with each all-reduce's buffer as "allreduce[offset:count]".
std::vector<std::string> Ops(const OpList& l) {
  std::vector<std::string> out;
  for (const OpRecord& op : l.ops) {
    std::string s = op.name();
    if (s == "allreduce") s += "[" + std::to_string(op.inputs[0].offset()) + ":" + std::to_string(op.inputs[0].numel()) + "]";
    out.push_back(s);
  }
  return out;
}

// Two gradients g0 (24 floats) and g1 (40 floats) of one backward, each all-reduced, then read
// by one op each; every result is held, like a parameter update's.
struct TwoGradients {
  Tensor x = ops::Zeros({24}, DType::kFloat32, CpuDevice());
  Tensor y = ops::Zeros({40}, DType::kFloat32, CpuDevice());
  Tensor token = ops::Zeros({1}, DType::kInt64, CpuDevice());
  Tensor out0 = Lazy(24), out1 = Lazy(40);
  std::weak_ptr<Block> g0, g1;
  Tensor held;  // set to hold g1 outside the list
  OpList list{"buckets"};

  // updates_early: each gradient's all-reduce and update come right after its write (an optimizer
  // run from the backward's callback); otherwise both all-reduces, then both updates.
  explicit TwoGradients(bool hold_g1 = false, bool updates_early = false) {
    Tensor a = Lazy(24), b = Lazy(40);
    g0 = a.block_ptr();
    g1 = b.block_ptr();
    list.Append(Record("relu", {x}, {a}));  // g0's last write: op 0
    if (updates_early) {
      list.Append(AllReduceOf(a, token));
      list.Append(Record("relu", {a}, {out0}));
    }
    list.Append(Record("relu", {y}, {b}));  // g1's last write
    if (!updates_early) list.Append(AllReduceOf(a, token));
    list.Append(AllReduceOf(b, token));
    if (!updates_early) list.Append(Record("relu", {a}, {out0}));
    list.Append(Record("relu", {b}, {out1}));
    if (hold_g1) held = b;
    a = b = Tensor();
    list.NoteHolders();
  }
};

TEST(BucketGradients, OneBucketHoldsEveryGradientAtAlignedOffsets) {
  TwoGradients t;
  PassResult r = RunBuckets(std::move(t.list));
  // One slice (bucket_bytes is 25 MiB), right after the last gradient's write.
  EXPECT_EQ(Ops(r.ops), (std::vector<std::string>{"relu", "relu", "allreduce[0:80]", "relu", "relu"}));
  EXPECT_EQ(r.counters.Get("bucket_allreduces"), 1);
  ASSERT_EQ(r.buffers.size(), 1u);
  const BufferRequest& b = r.buffers[0];
  EXPECT_EQ(b.buffer->bytes(), 128u + 192u);  // 24 then 40 floats, each padded to a multiple of 64 bytes
  ASSERT_EQ(b.members.size(), 2u);
  EXPECT_EQ(b.members[0].first, t.g0.lock());
  EXPECT_EQ(b.members[0].second, 0u);
  EXPECT_EQ(b.members[1].first, t.g1.lock());
  EXPECT_EQ(b.members[1].second, 128u);
  // The slice lists both gradients as members: the analysis orders it after their writers.
  const OpRecord& ar = r.ops.ops[2];
  ASSERT_EQ(ar.inputs.size(), 4u);
  EXPECT_EQ(ar.inputs[0].block(), b.buffer.get());
  EXPECT_EQ(ar.inputs[2].block(), t.g0.lock().get());
  EXPECT_EQ(ar.inputs[3].block(), t.g1.lock().get());
  // Effects are data: nothing allocated, bound or marked; the list says what will persist.
  EXPECT_FALSE(b.buffer->allocated());
  EXPECT_FALSE(t.g0.lock()->allocated());
  EXPECT_FALSE(t.g0.lock()->persistent());
  const BlockFacts& bucket = r.ops.facts[size_t(r.ops.BlockIndex(b.buffer.get()))];
  EXPECT_TRUE(bucket.marked_persistent && bucket.has_memory);
  for (const auto& m : b.members) EXPECT_TRUE(r.ops.facts[size_t(r.ops.BlockIndex(m.first.get()))].marked_persistent);
}

TEST(BucketGradients, SlicesFollowTheirLastGradientAndUpdatesWaitForTheirSlice) {
  // A small first bucket (64 bytes: 16 floats of g0), then 128 bytes each: the first slice needs
  // only g0, so it goes right after g0's write; the update of g0, which the capture placed right
  // after g0's own all-reduce, moves after the last slice holding g0.
  TwoGradients t(/*hold_g1=*/false, /*updates_early=*/true);
  GraphOptions o;
  o.bucket_bytes = 128;
  o.first_bucket_bytes = 64;
  PassResult r = RunBuckets(std::move(t.list), o);
  EXPECT_EQ(Ops(r.ops), (std::vector<std::string>{"relu", "allreduce[0:16]", "relu", "allreduce[16:32]",
                                                   "allreduce[48:32]", "relu", "relu"}));
  EXPECT_EQ(r.counters.Get("bucket_allreduces"), 3);
  // g0's update, which came right after g0's write, now follows the slice [16, 48) holding the
  // rest of g0 (and the start of g1).
  EXPECT_EQ(r.ops.ops[5].inputs[0].block(), t.g0.lock().get());
  EXPECT_EQ(r.ops.ops[5].outputs[0].block(), t.out0.block());
}

TEST(BucketGradients, WithoutOverlapEverySliceWaitsForTheLastGradient) {
  TwoGradients t;
  GraphOptions o;
  o.bucket_bytes = 128;
  o.first_bucket_bytes = 64;
  o.overlap_collectives = false;
  PassResult r = RunBuckets(std::move(t.list), o);
  EXPECT_EQ(Ops(r.ops), (std::vector<std::string>{"relu", "relu", "allreduce[0:16]", "allreduce[16:32]",
                                                   "allreduce[48:32]", "relu", "relu"}));
  for (int i : {2, 3, 4}) {  // Note [Collectives forced after backward]: g1 is a member of each
    bool lists_g1 = false;
    for (const Tensor& m : r.ops.ops[size_t(i)].inputs) lists_g1 |= m.block() == t.g1.lock().get();
    EXPECT_TRUE(lists_g1) << "slice " << i;
  }
}

TEST(BucketGradients, AGradientHeldOutsideTheGraphKeepsItsOwnAllReduce) {
  TwoGradients t(/*hold_g1=*/true);
  PassResult r = RunBuckets(std::move(t.list));
  ASSERT_EQ(r.buffers.size(), 1u);
  ASSERT_EQ(r.buffers[0].members.size(), 1u);
  EXPECT_EQ(r.buffers[0].members[0].first, t.g0.lock());
  // g1's own all-reduce stays where the capture put it, on g1 itself.
  EXPECT_EQ(Ops(r.ops), (std::vector<std::string>{"relu", "allreduce[0:32]", "relu", "allreduce[0:40]", "relu", "relu"}));
  EXPECT_EQ(r.ops.ops[3].inputs[0].block(), t.held.block());
  EXPECT_FALSE(r.ops.facts[size_t(r.ops.BlockIndex(t.held.block()))].marked_persistent);
}

TEST(BucketGradients, NothingToBucketLeavesTheListAsItIs) {
  TwoGradients t(/*hold_g1=*/false);
  OpList list{"none"};
  list.Append(Record("relu", {t.x}, {t.out0}));
  list.NoteHolders();
  PassResult r = RunBuckets(std::move(list));
  EXPECT_EQ(Ops(r.ops), (std::vector<std::string>{"relu"}));
  EXPECT_TRUE(r.buffers.empty());
  EXPECT_EQ(r.counters.Get("bucket_allreduces"), 0);
}

// A captured data-parallel step on one in-process rank: the bucket is bound at the first
// replay, not at the capture; a gradient the user holds stays outside it, keeps its values after
// the graph is gone (AddressSanitizer checks nothing reads freed memory), and the bucketed
// gradient's block goes with the graph.
TEST(BucketGradients, AGraphDestroyedWhileAGradientIsHeld) {
  auto comm = MakeInProcGroup(1)[0];
  CommunicatorId id(comm);
  auto dev = NewCpuDevice(0);
  Tensor x = FromDoubles({1, -2, 3, -4}, {4}, DType::kFloat32, dev);
  Tensor w = FromDoubles({0.5, 0.5, 0.5, 0.5}, {4}, DType::kFloat32, dev);
  Tensor held, out;
  std::weak_ptr<Block> bucketed;
  auto g = Graph::Capture(dev, "held", [&] {
    Tensor g0 = ops::Relu(x), g1 = ops::Mul(x, w);
    ops::AllReduce(id.id(), g0);
    ops::AllReduce(id.id(), g1);
    out = ops::Add(g0, g1);
    held = g1;
    bucketed = g0.block_ptr();
  });
  EXPECT_EQ(g->stats().counters.Get("bucket_allreduces"), 1);
  ASSERT_FALSE(bucketed.expired());
  EXPECT_FALSE(bucketed.lock()->allocated()) << "the capture allocated the bucket";
  g->Run();
  g->Run();
  EXPECT_TRUE(bucketed.lock()->allocated());
  EXPECT_FALSE(bucketed.lock()->owns_memory()) << "the bucketed gradient lives in the bucket";
  EXPECT_TRUE(held.block()->owns_memory());
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{1.5, -1, 4.5, -2}));
  g.reset();
  EXPECT_TRUE(bucketed.expired());
  EXPECT_EQ(ToDoubles(held), (std::vector<double>{0.5, -1, 1.5, -2}));
}

}  // namespace
}  // namespace test
}  // namespace loom
