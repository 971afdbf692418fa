// Note [Passes] and Note [Pass switches and counters] (graph/passes.h, options.h): the registry,
// the order, the switches, the counters and the device filter. A pass is registered here as a
// pass of loom's own would be, with one LOOM_PASS line: off by default, it counts the relus of a
// list and hands the list on.
#include <gtest/gtest.h>

#include <cstdlib>
#include <type_traits>
#include <set>
#include <string>
#include <vector>

#include "common/fake_cuda_device.h"
#include "common/harness.h"
#include "common/op_lists.h"
#include "graph/graph.h"
#include "graph/passes.h"

LOOM_OP_KIND(relu);

namespace loom {
namespace test {
namespace {

PassResult CountRelus(OpList list, const PassContext&) {
  int64_t n = 0;
  for (const OpRecord& op : list.ops) n += op.def == &op_kind::relu;
  PassResult r{std::move(list)};
  r.counters.Add("test_relus_seen", n);
  return r;
}

// Counts under a name it does not declare: the frame refuses it.
PassResult CountsUndeclared(OpList list, const PassContext&) {
  PassResult r{std::move(list)};
  r.counters.Add("test_relus_seen", 1);
  return r;
}

}  // namespace

LOOM_PASS(PassDef{"test_count_relus", 1000, kAllDevices, false, CountRelus,
                  "test only: counts the relus of the list (passes_test.cc)",
                  {{"test_relus_seen", "relus the test pass saw"}}});
LOOM_PASS(PassDef{"test_counts_undeclared", 1001, kAllDevices, false, CountsUndeclared,
                  "test only: reports a counter it does not declare (passes_test.cc)", {}});

namespace {


std::vector<std::string> Names() {
  std::vector<std::string> out;
  for (const PassDef* p : RegisteredPasses()) out.push_back(p->name);
  return out;
}

TEST(Passes, RegisteredInTheirDeclaredOrder) {
  EXPECT_EQ(Names(), (std::vector<std::string>{"autocast_bf16", "autocast_fp16", "keep_bf16_weight_copies", "bucket_gradients",
                                               "fuse_weight_grad_update", "fuse_bias_act", "bf16_relu_mask", "fuse_bn_relu", "bf16_conv_outputs", "bf16_attention",
                                               "fuse_casts",
                                               "plan_layouts", "keep_weights_blocked", "group_updates", "test_count_relus",
                                               "test_counts_undeclared"}));
  int last = -1;
  for (const PassDef* p : RegisteredPasses()) {
    EXPECT_GT(p->order, last) << p->name;
    last = p->order;
  }
}

TEST(Passes, SwitchesDefaultToTheRegistrationAndRefuseUnknownNames) {
  GraphOptions o;
  EXPECT_TRUE(o.passes.On("fuse_bias_act"));
  EXPECT_TRUE(o.passes.On("plan_layouts"));
  EXPECT_FALSE(o.passes.On("test_count_relus"));
  EXPECT_FALSE(o.passes.On("autocast_bf16"));  // Note [Precision policy]: a model's precision turns it on
  EXPECT_FALSE(o.passes.On("autocast_fp16"));
  o.passes.Set("fuse_bias_act", false);
  EXPECT_FALSE(o.passes.On("fuse_bias_act"));
  LOOM_EXPECT_THROW_MSG(o.passes.Set("fuse_bias_ac", false), ValueError,
                        "no graph pass is called 'fuse_bias_ac' (passes: autocast_bf16, autocast_fp16, "
                        "keep_bf16_weight_copies, bucket_gradients, ");
  LOOM_EXPECT_THROW_MSG(o.passes.On("layouts"), ValueError, "plan_layouts");
  GraphStats s;
  EXPECT_EQ(s.counters.Get("blocked_layouts"), 0);
  LOOM_EXPECT_THROW_MSG(s.counters.Get("blocked_layout"), ValueError, "no graph pass counts 'blocked_layout'");
}

TEST(Passes, TheVisitorsShowEverySwitchAndCounterAsAField) {
  GraphOptions o;
  o.passes.Set("test_count_relus", true);
  std::set<std::string> switches;
  VisitGraphOptions(static_cast<const GraphOptions&>(o), [&](const char* name, const auto& v, const char*) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, bool>)
      if (v) switches.insert(name);
  });
  EXPECT_TRUE(switches.count("test_count_relus"));
  EXPECT_TRUE(switches.count("plan_layouts"));
  EXPECT_FALSE(switches.count("test_counts_undeclared"));
  // Set through the visitor, as the Python module sets options from a dict.
  VisitGraphOptions(o, [](const char* name, auto& v, const char*) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, bool>)
      if (std::string(name) == "plan_layouts") v = false;
  });
  EXPECT_FALSE(o.passes.On("plan_layouts"));
  std::set<std::string> counters;
  const GraphStats stats;
  VisitGraphStats(stats, [&](const char* name, const auto&, const char*) { counters.insert(name); });
  for (const char* c : {"bucket_allreduces", "fused_weight_grad_updates", "fused_bias_act",
                        "blocked_layouts", "blocked_weights", "test_relus_seen"})
    EXPECT_TRUE(counters.count(c)) << c;
}

// x -> relu -> relu -> out, captured.
OpList TwoRelus() {
  Tensor x = ops::Zeros({8}, DType::kFloat32, CpuDevice()), a = Lazy(8), out = Lazy(8);
  OpList list{"relus"};
  list.Append(Record("relu", {x}, {a}));
  list.Append(Record("relu", {a}, {out}));
  list.NoteHolders();
  return list;
}

TEST(Passes, APassRunsWhenSwitchedOnAndItsCountersReachTheStats) {
  GraphOptions o;
  EXPECT_EQ(RunPasses(TwoRelus(), *CpuDevice(), o).counters.Get("test_relus_seen"), 0);
  o.passes.Set("test_count_relus", true);
  EXPECT_EQ(RunPasses(TwoRelus(), *CpuDevice(), o).counters.Get("test_relus_seen"), 2);
  o.run_passes = false;
  EXPECT_EQ(RunPasses(TwoRelus(), *CpuDevice(), o).counters.Get("test_relus_seen"), 0);
  // In a graph: the counter is a GraphStats counter like any pass's.
  GraphOptions g;
  g.passes.Set("test_count_relus", true);
  Tensor x = ops::Zeros({8}, DType::kFloat32, CpuDevice()), y;
  auto graph = Graph::Capture(CpuDevice(), "relus", [&] { y = ops::Relu(ops::Relu(x)); }, g);
  EXPECT_EQ(graph->stats().counters.Get("test_relus_seen"), 2);
  EXPECT_NE(graph->Summary().find("test_relus_seen 2"), std::string::npos) << graph->Summary();
}

TEST(Passes, ACounterThePassDoesNotDeclareIsABug) {
  GraphOptions o;
  o.passes.Set("test_counts_undeclared", true);
  LOOM_EXPECT_THROW_MSG(RunPasses(TwoRelus(), *CpuDevice(), o), InternalError,
                        "graph pass 'test_counts_undeclared' counts 'test_relus_seen', which it does not declare");
}

TEST(Passes, ABackendsPassesRunOnItsDevicesOnly) {
  // The CPU's weight-layout pass on a CUDA-typed device: not run at all (its counter is absent,
  // not 0). The activation-layout pass runs on both.
  FakeCudaDevice cuda;
  GraphOptions o;
  o.passes.Set("test_count_relus", true);
  PassResult on_cuda = RunPasses(TwoRelus(), cuda, o);
  EXPECT_EQ(on_cuda.counters.counts().count("blocked_weights"), 0u);
  EXPECT_EQ(on_cuda.counters.counts().count("blocked_layouts"), 1u);
  EXPECT_EQ(on_cuda.counters.Get("test_relus_seen"), 2);  // registered for every device
  PassResult on_cpu = RunPasses(TwoRelus(), *CpuDevice(), o);
  EXPECT_EQ(on_cpu.counters.counts().count("blocked_layouts"), 1u);
  EXPECT_EQ(on_cpu.counters.counts().count("blocked_weights"), 1u);
}

}  // namespace
}  // namespace test
}  // namespace loom
