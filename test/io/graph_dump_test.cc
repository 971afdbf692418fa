// Graph dumps: capture an MLP step, dump it, read it back, and compare with the live graph.
#include <gtest/gtest.h>
#include <unistd.h>

#include "common/files.h"
#include "common/graph_capture.h"
#include "common/harness.h"
#include "common/mlp.h"
#include "graph/graph.h"
#include "io/graph_dump.h"

namespace loom {
namespace test {
namespace {

class GraphDumpTest : public ::testing::Test {
 protected:
  void SetUp() override { dev_ = CpuDevice(); }
  std::shared_ptr<Device> dev_;
};

TEST_F(GraphDumpTest, AnMlpStepRoundTripsWithItsOpsBlocksAndEdges) {
  Blobs data(16, 4);
  Mlp m({16, 32, 32, 4}, 3);
  nn::SGD opt(0.1, 0.9);
  auto b = data.Batch(8, 1);
  CapturedGraph graph(dev_, "step");
  Tensor loss = graph.Capture([&] { return m.Step(b.first, b.second, opt, /*dropout=*/0.1); });
  graph.Replay();
  const Graph& g = graph.graph();

  TempDir dir;
  io::WriteGraphDump(g, dir / "step.lgd");
  EXPECT_EQ(dir.List(), std::vector<std::string>{"step.lgd"});
  GraphDump d = io::ReadGraphDump(dir / "step.lgd");

  EXPECT_EQ(d.key, "step");
  EXPECT_EQ(d.device, "cpu:0");
  ASSERT_EQ(d.ops.size(), g.ops().size());
  ASSERT_EQ(d.blocks.size(), g.ops().blocks.size());
  ASSERT_GT(d.ops.size(), 10u);
  std::map<const Block*, int> index;
  for (size_t i = 0; i < g.ops().blocks.size(); ++i) index[g.ops().blocks[i].get()] = int(i);
  for (size_t i = 0; i < d.ops.size(); ++i) {
    const OpRecord& op = g.ops().ops[i];
    EXPECT_EQ(d.ops[i].kind, op.name()) << i;
    EXPECT_EQ(d.ops[i].attrs.ToString(), op.attrs.ToString()) << i;
    ASSERT_EQ(d.ops[i].reads.size(), op.inputs.size()) << i;
    ASSERT_EQ(d.ops[i].writes.size(), op.outputs.size()) << i;
    for (size_t k = 0; k < op.inputs.size(); ++k) EXPECT_EQ(d.ops[i].reads[k], index[op.inputs[k].block()]);
    for (size_t k = 0; k < op.outputs.size(); ++k) EXPECT_EQ(d.ops[i].writes[k], index[op.outputs[k].block()]);
    EXPECT_EQ(d.ops[i].rng_offset, op.rng_offset);
  }
  size_t planned = 0;
  for (size_t i = 0; i < d.blocks.size(); ++i) {
    const GraphDump::BlockInfo& info = d.blocks[i];
    EXPECT_EQ(info.id, g.ops().blocks[i]->id());
    EXPECT_EQ(info.facts.bytes, g.ops().facts[i].bytes);
    EXPECT_EQ(info.life.persistent, g.analysis().blocks[i].persistent);
    EXPECT_EQ(info.life.first, g.analysis().blocks[i].first);
    EXPECT_EQ(info.life.last, g.analysis().blocks[i].last);
    EXPECT_EQ(info.offset, g.layout().BlockOffset(int(i)));
    planned += info.offset != SIZE_MAX;
  }
  EXPECT_EQ(planned, g.stats().num_intermediate);
  ASSERT_EQ(d.deps.size(), g.analysis().deps.size());
  for (size_t i = 0; i < d.deps.size(); ++i) {
    EXPECT_EQ(d.deps[i].from, g.analysis().deps[i].from);
    EXPECT_EQ(d.deps[i].to, g.analysis().deps[i].to);
    EXPECT_EQ(d.deps[i].kinds, g.analysis().deps[i].kinds);
  }
  // A training step has all three hazards: the optimizer's update of a weight after its
  // readers is a write-after-read.
  bool raw = false, war = false;
  for (const Dep& dep : d.deps) {
    raw |= (dep.kinds & uint8_t(DepKind::kRAW)) != 0;
    war |= (dep.kinds & uint8_t(DepKind::kWAR)) != 0;
  }
  EXPECT_TRUE(raw);
  EXPECT_TRUE(war);
  EXPECT_EQ(d.stats.num_ops, g.stats().num_ops);
  EXPECT_EQ(d.stats.arena_bytes, g.stats().arena_bytes);
  EXPECT_EQ(d.stats.lower_bound_bytes, g.stats().lower_bound_bytes);
  EXPECT_EQ(d.stats.plan_strategy, g.stats().plan_strategy);
  EXPECT_EQ(d.stats.random_draws, g.stats().random_draws);
  EXPECT_GT(d.stats.random_draws, 0u);
  EXPECT_EQ(d.live_bytes, g.analysis().live_bytes);

  // DOT: one line per read, per write and per dependency edge.
  std::string dot = d.ToDot();
  size_t edges = 0, pos = 0;
  while ((pos = dot.find(" -> ", pos)) != std::string::npos) ++edges, pos += 4;
  size_t want = d.deps.size();
  for (const auto& op : d.ops) want += op.reads.size() + op.writes.size();
  EXPECT_EQ(edges, want);
  EXPECT_NE(d.Summary().find(std::to_string(d.ops.size()) + "\n"), std::string::npos) << d.Summary();
  // Encoding is deterministic.
  EXPECT_EQ(io::EncodeGraphDump(d), io::EncodeGraphDump(MakeGraphDump(g)));
}

TEST_F(GraphDumpTest, DumpingDuringCaptureAndBrokenFilesRaise) {
  Tensor x = RandomTensor({4}, DType::kFloat32, 1);
  TempDir dir;
  CapturedGraph graph(dev_, "tiny");
  graph.Capture([&] {
    Tensor y = ops::Relu(x);
    LOOM_EXPECT_THROW_MSG(io::WriteGraphDump(graph.graph(), dir / "t.lgd"), GraphError, "no finished capture");
  });
  io::WriteGraphDump(graph.graph(), dir / "t.lgd");
  std::vector<uint8_t> good = ReadBytes(dir / "t.lgd");
  WriteBytes(dir / "cut.lgd", std::vector<uint8_t>(good.begin(), good.end() - 3));
  LOOM_EXPECT_THROW_MSG(io::ReadGraphDump(dir / "cut.lgd"), IOError, "cut.lgd");
  std::vector<uint8_t> bad = good;
  bad[1] = 'X';
  WriteBytes(dir / "bad.lgd", bad);
  LOOM_EXPECT_THROW_MSG(io::ReadGraphDump(dir / "bad.lgd"), IOError, "bad magic");
}

TEST_F(GraphDumpTest, SparseHugeFilesAreRefusedBeforeAnythingIsAllocated) {
  // A dump's magic number, then a hole: 3 GiB and 64 GiB files that take no disk. The reader
  // allocated the whole size first (std::bad_alloc ended graph_dump with an abort).
  Tensor x = RandomTensor({4}, DType::kFloat32, 1);
  TempDir dir;
  CapturedGraph graph(dev_, "tiny");
  graph.Capture([&] { ops::Relu(x); });
  io::WriteGraphDump(graph.graph(), dir / "t.lgd");
  std::vector<uint8_t> good = ReadBytes(dir / "t.lgd");
  for (int64_t gib : {3, 64}) {
    const std::string path = dir / ("sparse" + std::to_string(gib) + ".lgd");
    WriteBytes(path, std::vector<uint8_t>(good.begin(), good.begin() + 16));
    ASSERT_EQ(::truncate(path.c_str(), off_t(gib << 30)), 0);
    LOOM_EXPECT_THROW_MSG(io::ReadGraphDump(path), IOError,
                          detail::Cat("it is ", gib << 30, " bytes, more than the 2147483655 this reader takes"));
  }
}

}  // namespace
}  // namespace test
}  // namespace loom
