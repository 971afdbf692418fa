// Note [bfloat16 weight copies kept by the update] (graph/weight_copies.cc): the updates write
// their parameter's 16-bit copy with the cast's own rounding; a captured bf16 or fp16 step keeps
// each weight's copy between replays instead of casting it, casts it again after any access from
// outside (Note [Layout guards]), and replays bitwise as eager execution and as the graph
// without the pass, through skipped fp16 steps too.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "common/files.h"
#include "common/harness.h"
#include "common/mlp.h"
#include "core/autocast.h"
#include "core/half.h"
#include "graph/graph.h"
#include "graph/layout_guard.h"
#include "io/checkpoint.h"
#include "nn/layer.h"
#include "nn/model.h"

LOOM_OP_KIND(cast);

namespace loom {
namespace test {
namespace {

using Bytes = std::vector<uint8_t>;

// ---------------------------------------------------------------- the updates' copy output

struct UpdateCase {
  const char* op;
  double momentum;      // SGD
  int64_t nesterov;     // SGD
  int flag;             // -1: no found_inf input, else its value
};

// Runs the update on a fresh parameter with a copy of dtype `to` pre-filled with ones; returns
// (the parameter after, the copy after), and the parameter before in *before.
std::pair<Tensor, Tensor> RunUpdate(const UpdateCase& k, DType to, Tensor* before) {
  const int64_t n = 5000;  // more than one of the CPU kernel's blocks
  Tensor p = RandomTensor({n}, DType::kFloat32, 1, -3, 3), g = RandomTensor({n}, DType::kFloat32, 2, -2, 2);
  *before = ops::FromVector(p.ToVector<float>(), {n}, CpuDevice());
  Tensor lr = ops::Full({}, 0.05, DType::kFloat64, CpuDevice());
  Tensor copy = ops::Full({n}, 1.0, to, CpuDevice());
  Attrs a{{"copy_dtype", int64_t(to)}};
  std::vector<Tensor> in{p, g, lr}, out{p};
  if (std::string(k.op) == "adam_update") {
    Tensor m = RandomTensor({n}, DType::kFloat32, 3, -0.1, 0.1), v = RandomTensor({n}, DType::kFloat32, 4, 0, 0.1);
    in.insert(in.end(), {m, v, ops::Full({}, 3, DType::kFloat64, CpuDevice())});
    out.insert(out.end(), {m, v});
    a.Set("beta1", 0.9).Set("beta2", 0.999).Set("eps", 1e-8).Set("weight_decay", 0.01);
  } else {
    a.Set("momentum", k.momentum).Set("nesterov", k.nesterov).Set("weight_decay", 1e-3);
    if (k.momentum > 0) {
      Tensor buf = RandomTensor({n}, DType::kFloat32, 5);
      in.push_back(buf);
      out.push_back(buf);
    }
  }
  if (k.flag >= 0) {
    in.push_back(ops::Full({}, k.flag, DType::kFloat32, CpuDevice()));
    a.Set("found_inf", int64_t(1));
  }
  out.push_back(copy);
  CallInto(k.op, in, out, a);
  return {p, copy};
}

TEST(UpdateCopy, TheCopyIsTheCastOfTheNewParameterBitwise) {
  const std::vector<UpdateCase> cases = {{"sgd_update", 0, 0, -1},  {"sgd_update", 0.9, 0, -1},
                                         {"sgd_update", 0.9, 1, 0},  {"sgd_update", 0.9, 0, 1},
                                         {"adam_update", 0, 0, -1},  {"adam_update", 0, 0, 0},
                                         {"adam_update", 0, 0, 1}};
  for (const UpdateCase& k : cases)
    for (DType to : {DType::kBFloat16, DType::kFloat16}) {
      SCOPED_TRACE(std::string(k.op) + " momentum " + std::to_string(k.momentum) + " flag " +
                   std::to_string(k.flag) + " " + Name(to));
      Tensor before;
      auto [p, copy] = RunUpdate(k, to, &before);
      if (k.flag == 1) {  // Note [Skipped updates]: nothing written, the copy's ones included
        EXPECT_EQ(HostBytes(p), HostBytes(before));
        EXPECT_EQ(HostBytes(copy), HostBytes(ops::Full({p.numel()}, 1.0, to, CpuDevice())));
        continue;
      }
      EXPECT_NE(HostBytes(p), HostBytes(before));
      EXPECT_EQ(HostBytes(copy), HostBytes(ops::Cast(p, to)));
    }
}

TEST(UpdateCopy, BadCopiesAreTypedErrorsNamingTheOp) {
  auto cpu = CpuDevice();
  Tensor p = RandomTensor({50}, DType::kFloat32, 1), g = RandomTensor({50}, DType::kFloat32, 2);
  Tensor lr = ops::Full({}, 0.05, DType::kFloat64, cpu);
  Tensor c16 = ops::Cast(p, DType::kBFloat16), h16 = ops::Cast(p, DType::kFloat16);
  const Attrs bf16{{"copy_dtype", int64_t(DType::kBFloat16)}};
  LOOM_EXPECT_THROW_MSG(CallInto("sgd_update", {p, g, lr}, {p, p}, Attrs{{"copy_dtype", int64_t(DType::kFloat32)}}),
                        DTypeError, "[sgd_update] copy_dtype 0: the parameter's copy is bfloat16 (3) or float16 (2)");
  LOOM_EXPECT_THROW_MSG(CallInto("sgd_update", {p, g, lr}, {p, h16}, bf16), ShapeError,
                        "[sgd_update] output 1 is");
  LOOM_EXPECT_THROW_MSG(CallInto("sgd_update", {p, g, lr}, {p, ops::Cast(RandomTensor({49}, DType::kFloat32, 3),
                                                                        DType::kBFloat16)}, bf16),
                        ShapeError, "[sgd_update] output 1 is bfloat16 (49,) on cpu:0, the op produces bfloat16 (50,)");
  LOOM_EXPECT_THROW_MSG(CallInto("sgd_update", {p, g, lr}, {p}, bf16), ValueError, "[sgd_update] writes 2 outputs, 1 given");
  Tensor p64 = ops::Cast(p, DType::kFloat64), m = ops::Cast(g, DType::kFloat64);
  LOOM_EXPECT_THROW_MSG(CallInto("adam_update", {p64, m, lr, m, m, lr}, {p64, m, m, c16},
                                 Attrs(bf16).Set("beta1", 0.9).Set("beta2", 0.99).Set("eps", 1e-8)),
                        DTypeError, "[adam_update] a bfloat16 copy needs a float32 parameter, got float64 (50,)");
  // matmul_sgd_update takes no copy: the attribute is not its own.
  LOOM_EXPECT_THROW_MSG(CallInto("matmul_sgd_update", {p, g, g, lr}, {p, c16}, bf16), AttrError, "copy_dtype");
}

// ---------------------------------------------------------------- the copy guard

// Note [Layout guards]: a copy guard writes the copy before a replay only when it is stale:
// before the first, after an access from outside, after a replay that did not complete.
TEST(CopyGuard, CastsBeforeAReplayOnlyWhenTheCopyIsStale) {
  auto cpu = CpuDevice();
  std::vector<float> w0(64), w1(64), w2(64);
  for (size_t i = 0; i < w0.size(); ++i) {
    w0[i] = 0.1f + 0.37f * float(i);
    w1[i] = -w0[i];
    w2[i] = 3 * w0[i];
  }
  auto bf16 = [](const std::vector<float>& v) {
    Bytes h;
    for (float f : v) {
      const uint16_t b = FloatToBFloat16(f);
      h.push_back(uint8_t(b & 0xff));  // little-endian, as the host holds it
      h.push_back(uint8_t(b >> 8));
    }
    return h;
  };
  Tensor w = ops::FromVector(w0, {64}, cpu), c = ops::Cast(ops::FromVector(w2, {64}, cpu), DType::kBFloat16);
  auto copy = [&] { return HostBytes(c); };
  {
    LayoutGuard guard(GuardRequest{w, &op_kind::cast, Attrs{{"dtype", int64_t(DType::kBFloat16)}}, Attrs{}, c});
    EXPECT_EQ(w.block()->guard(), &guard);
    guard.BeginReplay();  // stale at first: cast
    EXPECT_EQ(copy(), bf16(w0));
    w.CopyFrom(w1);  // the replay writes w (its update would write the copy too)
    guard.EndReplay(true);
    guard.BeginReplay();  // fresh: no cast, the copy stays what the replay left
    EXPECT_EQ(copy(), bf16(w0));
    guard.EndReplay(false);  // a replay that threw
    guard.BeginReplay();
    EXPECT_EQ(copy(), bf16(w1));
    guard.EndReplay(true);
    w.CopyFrom(w2);  // from outside
    guard.BeginReplay();
    EXPECT_EQ(copy(), bf16(w2));
    guard.EndReplay(true);
    const Bytes zeros(128, 0);
    c.CopyFromHost(zeros.data(), zeros.size());  // the copy alone, behind the guard's back: nothing notices
    guard.BeginReplay();
    EXPECT_EQ(copy(), zeros);
    guard.EndReplay(true);
    EXPECT_EQ(w.ToVector<float>(), w2);  // a read from outside counts as an access
    guard.BeginReplay();
    EXPECT_EQ(copy(), bf16(w2));
    guard.EndReplay(true);
  }
  EXPECT_EQ(w.block()->guard(), nullptr);
  EXPECT_EQ(w.ToVector<float>(), w2) << "a copy guard changes nothing of the block";
}

// ---------------------------------------------------------------- captured steps

const std::vector<int64_t> kDims = {24, 32, 16, 5};

enum class How { kEager, kGraph, kGraphWithoutPass, kGraphParallel };

struct Outcome {
  std::vector<Bytes> params;
  GraphStats stats;
  int casts = 0;  // cast records in the replayed step
};

// `steps` steps of the MLP on a fixed batch at precision `p`, as `how` says; between(s, mlp)
// runs after step s, in every mode alike.
Outcome TrainMlp(How how, Precision p, const std::function<std::unique_ptr<nn::Optimizer>()>& make_opt, int steps,
                 const std::function<void(int, Mlp&)>& between = nullptr) {
  auto dev = CpuDevice();
  Mlp m(kDims, 7, dev);
  std::unique_ptr<nn::Optimizer> opt = make_opt();
  Tensor x = RandomTensor({8, kDims[0]}, DType::kFloat32, 21, -1, 1, dev);
  Tensor y = ops::FromVector(std::vector<int32_t>{0, 1, 2, 3, 4, 0, 1, 2}, {8}, dev);
  Outcome r;
  std::unique_ptr<Graph> g;
  if (how != How::kEager) {
    GraphOptions o;
    o.passes.Set(p == Precision::kBFloat16 ? "autocast_bf16" : "autocast_fp16", true);
    o.passes.Set("keep_bf16_weight_copies", how != How::kGraphWithoutPass);
    if (how == How::kGraphParallel) {  // the workers' replay, whatever the machine (Note [Parallel or serial])
      o.parallel_fallback = false;
      o.num_workers = 2;
    }
    g = Graph::Capture(dev, "copies", [&] { m.Step(x, y, *opt); }, o);
    for (const OpRecord& op : g->ops().ops) r.casts += op.def == &op_kind::cast;
  }
  for (int s = 0; s < steps; ++s) {
    if (g) {
      g->Run(how != How::kGraphParallel);
    } else {
      AutocastScope scope(p);
      m.Step(x, y, *opt);
    }
    if (between) between(s, m);
  }
  for (const Tensor& t : m.params) r.params.push_back(HostBytes(t));
  for (const auto& kv : opt->states()) r.params.push_back(HostBytes(kv.second));
  if (g) r.stats = g->stats();
  return r;
}

std::unique_ptr<nn::Optimizer> Sgd() { return std::make_unique<nn::SGD>(0.05, 0.9, 1e-3); }
std::unique_ptr<nn::Optimizer> Adam() { return std::make_unique<nn::Adam>(0.01, 0.9, 0.999, 1e-8, 1e-3, true); }

void ExpectSame(const Outcome& a, const Outcome& b, const std::string& what) {
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  for (size_t i = 0; i < a.params.size(); ++i) EXPECT_TRUE(a.params[i] == b.params[i]) << what << ": tensor " << i;
}

TEST(WeightCopies, SgdAndAdamStepsKeepTheCopiesAndEqualEagerBitwise) {
  for (Precision p : {Precision::kBFloat16, Precision::kFloat16})
    for (auto make : {Sgd, Adam}) {
      SCOPED_TRACE(std::string(Name(p)) + (make == Sgd ? " SGD" : " Adam"));
      const Outcome eager = TrainMlp(How::kEager, p, make, 5), on = TrainMlp(How::kGraph, p, make, 5),
                    off = TrainMlp(How::kGraphWithoutPass, p, make, 5),
                    parallel = TrainMlp(How::kGraphParallel, p, make, 5);
      // Each of the 3 weights: its cast gone, its update writing the copy.
      EXPECT_EQ(on.stats.counters.Get("kept_weight_copies"), 3);
      EXPECT_EQ(off.stats.counters.Get("kept_weight_copies"), 0);
      EXPECT_EQ(parallel.stats.counters.Get("kept_weight_copies"), 3);
      EXPECT_EQ(on.casts, off.casts - 3);
      EXPECT_EQ(parallel.stats.parallel_replays, 5u) << "the workers did not replay";
      ExpectSame(eager, on, "graph with kept copies against eager");
      ExpectSame(eager, off, "graph without the pass against eager");
      ExpectSame(eager, parallel, "parallel replay with kept copies against eager");
    }
}

// Between replays the user writes a weight from outside: an eager op, a host write, a checkpoint
// restored. The next replay must compute from the new weight's copy.
TEST(WeightCopies, WritesFromOutsideBetweenReplaysReachTheNextReplaysCopy) {
  TempDir dir;
  enum class Write { kEagerOp, kHost, kCheckpoint };
  for (Write write : {Write::kEagerOp, Write::kHost, Write::kCheckpoint}) {
    auto meddle = [&](int s, Mlp& m) {
      if (write == Write::kEagerOp && s == 1) ops::CopyInto(m.params[2], ops::MulScalar(m.params[2], 0.5));  // w1
      if (write == Write::kHost && s == 1) {
        std::vector<float> w0 = m.params[0].ToVector<float>();
        for (float& v : w0) v = -1.5f * v;
        m.params[0].CopyFrom(w0);
      }
      if (write == Write::kCheckpoint && s == 0) io::SaveCheckpoint(dir / "ckpt", {{"w2", m.params[4]}}, {});
      if (write == Write::kCheckpoint && s == 2) io::RestoreInto(io::LoadCheckpoint(dir / "ckpt"), {{"w2", m.params[4]}});
    };
    for (auto make : {Sgd, Adam}) {
      SCOPED_TRACE(std::to_string(int(write)) + (make == Sgd ? " SGD" : " Adam"));
      const Outcome eager = TrainMlp(How::kEager, Precision::kBFloat16, make, 5, meddle),
                    on = TrainMlp(How::kGraph, Precision::kBFloat16, make, 5, meddle),
                    untouched = TrainMlp(How::kGraph, Precision::kBFloat16, make, 5);
      EXPECT_EQ(on.stats.counters.Get("kept_weight_copies"), 3);
      ExpectSame(eager, on, "graph against eager, both written between steps");
      EXPECT_NE(on.params, untouched.params) << "the write changed nothing";
    }
  }
}

// The conditions of the Note, one broken at a time on a hand-made step: cast(w) -> c, a reader of
// c, sgd_update(w).
TEST(WeightCopies, OnlyAnUnsharedCopyReadBeforeTheOnlyUpdateIsKept) {
  enum class Change { kNone, kLateReader, kHeldCopy, kViewed, kSecondWrite, kFloat64 };
  auto kept = [](Change change) {
    auto dev = CpuDevice();
    const DType dt = change == Change::kFloat64 ? DType::kFloat64 : DType::kFloat32;
    Tensor w = RandomTensor({4, 6}, dt, 1), g = RandomTensor({4, 6}, dt, 2), lr = ops::Full({}, 0.1, DType::kFloat64, dev);
    w.block()->set_persistent(true);
    if (change == Change::kViewed) w.block()->set_host_viewed();
    Tensor held;
    CapturedGraph graph(dev, "conditions");
    Tensor out = graph.Capture([&] {
      Tensor c = ops::Cast(w, DType::kBFloat16), early = ops::Cast(c, DType::kFloat32);
      CallInto("sgd_update", {w, g, lr}, {w});
      if (change == Change::kSecondWrite) ops::CopyInto(w, ops::MulScalar(w, 0.5));
      if (change == Change::kHeldCopy) held = c;
      return change == Change::kLateReader ? ops::Add(early, ops::Cast(c, DType::kFloat32)) : early;
    });
    graph.Replay();
    graph.Replay();
    return graph.graph().stats().counters.Get("kept_weight_copies");
  };
  EXPECT_EQ(kept(Change::kNone), 1);
  for (Change c : {Change::kLateReader, Change::kHeldCopy, Change::kViewed, Change::kSecondWrite, Change::kFloat64})
    EXPECT_EQ(kept(c), 0) << int(c);
}

// Note [Skipped updates]: fp16 from a loss scale of 2^40 skips many steps at first; a skipped
// update writes neither the weight nor its copy, and the copy stays the weight's rounding.
TEST(WeightCopies, SkippedFp16StepsKeepTheCopyAndEqualEagerBitwise) {
  auto train = [](bool graph, bool pass, bool adam) {
    CpuDevice()->SetRandSeed(9);
    auto net = std::make_shared<nn::Sequential>();
    net->Add(std::make_shared<nn::Linear>(24, 32));
    net->Add(nn::ReLU());
    net->Add(std::make_shared<nn::Linear>(32, 5));
    std::shared_ptr<nn::Optimizer> opt = adam ? std::shared_ptr<nn::Optimizer>(std::make_shared<nn::Adam>(0.01))
                                              : std::make_shared<nn::SGD>(0.05, 0.9);
    nn::LossScaling s;
    s.init_scale = std::ldexp(1.0, 40);
    s.interval = 3;
    opt->SetLossScaling(s);
    nn::Model m(net, opt);
    m.set_precision(Precision::kFloat16);
    GraphOptions o;
    o.passes.Set("keep_bf16_weight_copies", pass);
    Tensor x = RandomTensor({16, 24}, DType::kFloat32, 5, -1, 1);
    std::vector<int32_t> labels(16);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t((i * 7) % 5);
    Tensor y = ops::FromVector(labels, {16}, CpuDevice());
    m.Compile({x}, true, graph, true, o);
    for (int step = 0; step < 30; ++step) m.TrainOneBatch(x, y);
    std::vector<Bytes> out;
    for (const auto& kv : m.Params()) {
      for (float v : kv.second.ToVector<float>()) EXPECT_TRUE(std::isfinite(v)) << kv.first;
      out.push_back(HostBytes(kv.second));
    }
    EXPECT_GE(m.loss_scale().skipped_steps, 10);
    if (graph) {
      EXPECT_EQ(m.train_graph()->stats().counters.Get("kept_weight_copies"), pass ? 2 : 0);
    }
    return out;
  };
  for (bool adam : {false, true}) {
    const auto eager = train(false, false, adam), on = train(true, true, adam), off = train(true, false, adam);
    EXPECT_TRUE(eager == on) << (adam ? "Adam" : "SGD");
    EXPECT_TRUE(eager == off) << (adam ? "Adam" : "SGD");
  }
}

}  // namespace
}  // namespace test
}  // namespace loom
