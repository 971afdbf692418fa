// Note [Loss scaling] (nn/loss_scale.h): fp16 training with dynamic loss scaling on the device.
// A skipped step leaves the weights and every piece of optimizer state bitwise as they were
// (Adam's moments and step count, momentum, a schedule's step); graph equals eager bitwise; the
// scale, the good-step count and the skipped-step count travel in checkpoints, and a run resumed
// by the trainer ends bitwise where an uninterrupted one does; the user's mistakes are typed
// errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "common/files.h"
#include "common/harness.h"
#include "core/ops.h"
#include "io/checkpoint.h"
#include "io/dataset.h"
#include "nn/model.h"
#include "nn/optimizer_checkpoint.h"
#include "nn/trainer.h"

namespace loom {
namespace test {
namespace {

using Bytes = std::vector<uint8_t>;

struct Batch {
  Tensor x, y;
};
Batch MakeBatch(int seed) {
  auto dev = CpuDevice();
  std::vector<int32_t> y(16);
  for (size_t i = 0; i < y.size(); ++i) y[i] = int32_t((i * 7 + size_t(seed)) % 5);
  return {RandomTensor({16, 24}, DType::kFloat32, uint32_t(seed), -1, 1, dev), ops::FromVector(y, {16}, dev)};
}

std::shared_ptr<nn::Layer> Net() {
  auto net = std::make_shared<nn::Sequential>();
  net->Add(std::make_shared<nn::Linear>(24, 32));
  net->Add(nn::ReLU());
  net->Add(std::make_shared<nn::Linear>(32, 5));
  return net;
}

enum class Opt { kSgdScheduled, kAdam };

struct Fp16Run {
  std::shared_ptr<nn::Optimizer> opt;
  std::unique_ptr<nn::Model> model;
  Fp16Run(Opt which, bool graph, double init_scale, int64_t interval = 2000) {
    CpuDevice()->SetRandSeed(9);
    if (which == Opt::kAdam) {
      opt = std::make_shared<nn::Adam>(0.01);
    } else {
      opt = std::make_shared<nn::SGD>(0.05, 0.9);
      opt->SetSchedule(nn::Schedule::Cosine(0.05, 100));
    }
    nn::LossScaling s;
    s.init_scale = init_scale;
    s.interval = interval;
    opt->SetLossScaling(s);
    model = std::make_unique<nn::Model>(Net(), opt);
    model->set_precision(Precision::kFloat16);
    model->Compile({MakeBatch(0).x}, true, graph);
  }
  // Everything a step may change, as bytes.
  struct State {
    std::vector<Bytes> params, slots;  // slots: the optimizer's state tensors (momentum, moments)
    double schedule_step = 0, adam_steps = 0;
    bool operator==(const State& o) const {
      return params == o.params && slots == o.slots && schedule_step == o.schedule_step && adam_steps == o.adam_steps;
    }
  };
  State Snapshot() {
    State s;
    for (const auto& kv : model->Params()) s.params.push_back(HostBytes(kv.second));
    for (const auto& kv : opt->states()) s.slots.push_back(HostBytes(kv.second));
    s.schedule_step = double(std::max<int64_t>(0, opt->schedule_step()));  // -1 before its counter exists
    if (auto* adam = dynamic_cast<nn::Adam*>(opt.get())) s.adam_steps = double(adam->steps_taken(CpuDevice()));
    return s;
  }
};

class LossScaleSteps : public ::testing::TestWithParam<std::tuple<Opt, bool>> {};

// From 2^40 the first steps overflow float16 in the backward products: each is skipped (nothing
// moves, the scale halves), until the scale fits and a step updates.
TEST_P(LossScaleSteps, SkippedStepsChangeNothingBitwiseThenTheScaleRecovers) {
  const auto [which, graph] = GetParam();
  Fp16Run r(which, graph, std::ldexp(1.0, 40));
  // Optimizer state is created at the first step (zeros): a skipped first step leaves zeros.
  Fp16Run::State before = r.Snapshot();
  int skipped = 0, updated = 0;
  for (int step = 0; step < 40 && updated < 3; ++step) {
    const Batch b = MakeBatch(step + 1);
    r.model->TrainOneBatch(b.x, b.y);
    const nn::LossScaleReading now = r.model->loss_scale();
    Fp16Run::State after = r.Snapshot();
    if (now.skipped_steps > skipped) {
      ++skipped;
      ASSERT_EQ(now.skipped_steps, skipped);
      EXPECT_EQ(now.scale, std::ldexp(1.0, 40 - skipped));
      EXPECT_EQ(now.good_steps, 0);
      if (before.slots.empty())
        for (Bytes& slot : before.slots = after.slots) std::fill(slot.begin(), slot.end(), 0);
      EXPECT_TRUE(after == before) << "skipped step " << step << " changed a parameter, a slot or a step count";
    } else {
      ++updated;
      EXPECT_EQ(now.good_steps, updated);
      EXPECT_NE(after.params[0], before.params[0]) << "a good step left the first weight alone";
      EXPECT_NE(after.slots, before.slots);
    }
    before = std::move(after);
  }
  EXPECT_GE(skipped, 10) << "2^40 should overflow float16 for many steps";
  EXPECT_EQ(updated, 3);
  for (const auto& kv : r.model->Params())
    for (float v : kv.second.ToVector<float>()) ASSERT_TRUE(std::isfinite(v)) << kv.first;
  if (which == Opt::kSgdScheduled) EXPECT_EQ(r.opt->schedule_step(), 3);
  else EXPECT_EQ(dynamic_cast<nn::Adam&>(*r.opt).steps_taken(CpuDevice()), 3);
}

INSTANTIATE_TEST_SUITE_P(Modes, LossScaleSteps,
                         ::testing::Combine(::testing::Values(Opt::kSgdScheduled, Opt::kAdam),
                                            ::testing::Values(false, true)),
                         [](const ::testing::TestParamInfo<std::tuple<Opt, bool>>& p) {
                           return std::string(std::get<0>(p.param) == Opt::kAdam ? "Adam" : "SgdScheduled") +
                                  (std::get<1>(p.param) ? "Graph" : "Eager");
                         });

// Overflows, recovery and growth (interval 4) in one run: the graph's bytes are eager's.
TEST(LossScale, GraphEqualsEagerBitwiseThroughSkipsAndGrowth) {
  auto train = [](bool graph) {
    Fp16Run r(Opt::kAdam, graph, std::ldexp(1.0, 30), /*interval=*/4);
    for (int step = 0; step < 40; ++step) {
      const Batch b = MakeBatch(step + 1);
      r.model->TrainOneBatch(b.x, b.y);
    }
    Fp16Run::State s = r.Snapshot();
    const nn::LossScaleReading ls = r.model->loss_scale();
    return std::make_tuple(s, ls.scale, ls.good_steps, ls.skipped_steps);
  };
  const auto eager = train(false), graph = train(true);
  EXPECT_TRUE(std::get<0>(eager) == std::get<0>(graph));
  EXPECT_EQ(std::get<1>(eager), std::get<1>(graph));
  EXPECT_EQ(std::get<2>(eager), std::get<2>(graph));
  EXPECT_EQ(std::get<3>(eager), std::get<3>(graph));
  EXPECT_GT(std::get<3>(eager), 0);  // it skipped
  // and grew again after skipping: with interval 4 and 40 steps the scale cannot be 2^30 / 2^k
  // for k = the skipped count unless it never grew
  EXPECT_GT(std::get<1>(eager), std::ldexp(1.0, 30 - int(std::get<3>(eager))));
}

// The state travels in the optimizer's checkpoint meta and comes back exactly.
TEST(LossScale, TheScaleAndCountsAreCheckpointedAndRestored) {
  Fp16Run a(Opt::kAdam, false, std::ldexp(1.0, 30), 4);
  for (int step = 0; step < 25; ++step) {
    const Batch b = MakeBatch(step + 1);
    a.model->TrainOneBatch(b.x, b.y);
  }
  io::Checkpoint ck;
  nn::AddOptimizerState(*a.opt, &ck.tensors, &ck.meta);
  const nn::LossScaleReading want = a.model->loss_scale();
  EXPECT_EQ(ck.Meta("optimizer/loss_scale"), want.scale);
  EXPECT_EQ(ck.Meta("optimizer/loss_scale_good_steps"), double(want.good_steps));
  EXPECT_EQ(ck.Meta("optimizer/skipped_steps"), double(want.skipped_steps));
  Fp16Run b(Opt::kAdam, false, 65536);
  nn::RestoreOptimizerState(ck, *b.opt, CpuDevice());
  const nn::LossScaleReading got = b.model->loss_scale();
  EXPECT_EQ(got.scale, want.scale);
  EXPECT_EQ(got.good_steps, want.good_steps);
  EXPECT_EQ(got.skipped_steps, want.skipped_steps);
  // Into an optimizer that does not scale losses: refused, naming what to do; nothing changed.
  auto plain = std::make_shared<nn::Adam>(0.01);
  LOOM_EXPECT_THROW_MSG(nn::RestoreOptimizerState(ck, *plain, CpuDevice()), IOError,
                        "does not scale losses: set the precision to fp16");
  EXPECT_TRUE(plain->states().empty());
  // A bad value is refused too.
  io::Checkpoint bad = ck;
  bad.meta["optimizer/loss_scale"] = -1;
  LOOM_EXPECT_THROW_MSG(nn::RestoreOptimizerState(bad, *b.opt, CpuDevice()), IOError, "not a loss scale");
  bad = ck;
  bad.meta.erase("optimizer/skipped_steps");
  LOOM_EXPECT_THROW_MSG(nn::RestoreOptimizerState(bad, *b.opt, CpuDevice()), IOError, "incomplete");
}

TEST(LossScale, MistakesAreTypedErrors) {
  nn::LossScaling s;
  s.growth = 1;
  LOOM_EXPECT_THROW_MSG(nn::CheckLossScaling(s), ValueError, "[loss scaling] growth 1");
  s = {};
  s.backoff = 1.5;
  LOOM_EXPECT_THROW_MSG(nn::CheckLossScaling(s), ValueError, "backoff 1.5: must lie in (0, 1)");
  s = {};
  s.init_scale = 1e39;
  LOOM_EXPECT_THROW_MSG(nn::CheckLossScaling(s), ValueError, "init_scale 1e+39");
  s = {};
  s.interval = 0;
  LOOM_EXPECT_THROW_MSG(nn::SGD(0.1).SetLossScaling(s), ValueError, "interval 0");
  nn::SGD sgd(0.1);
  LOOM_EXPECT_THROW_MSG(sgd.loss_scale(), ValueError, "no loss scaling: SetLossScaling first");
  LOOM_EXPECT_THROW_MSG(sgd.ScaleLoss(ops::Zeros({}, DType::kFloat32, CpuDevice())), ValueError, "no loss scaling");
  // Apply, one gradient at a time, cannot know whether another gradient overflowed.
  sgd.SetLossScaling({});
  Tensor p = ops::Zeros({3}, DType::kFloat32, CpuDevice()), g = ops::Zeros({3}, DType::kFloat32, CpuDevice());
  LOOM_EXPECT_THROW_MSG(sgd.Apply(g, p), ValueError, "[sgd] loss scaling checks every gradient before the first update");
  EXPECT_EQ(sgd.loss_scale().scale, 65536);  // the initial reading before any step
  // The op's own checks.
  Tensor s32 = ops::Full({}, 2.0, DType::kFloat32, CpuDevice()), s64 = ops::Full({}, 2.0, DType::kFloat64, CpuDevice());
  LOOM_EXPECT_THROW_MSG(Call("unscale_grads", {g, s64, s32}), DTypeError, "[unscale_grads] scale must be a float32 scalar");
  LOOM_EXPECT_THROW_MSG(Call("unscale_grads", {s32, s32}), ValueError, "at least 3 inputs");
  LOOM_EXPECT_THROW_MSG(
      CallInto("update_loss_scale", {s32, s64, s64, s32}, {s32, s64, s64},
               Attrs{{"growth", 2.0}, {"backoff", 2.0}, {"interval", int64_t(1)}}),
      ValueError, "[update_loss_scale] backoff 2");
  LOOM_EXPECT_THROW_MSG(CallInto("sgd_update", {p, g, s64, s64}, {p}, Attrs{{"found_inf", int64_t(1)}}), DTypeError,
                        "[sgd_update] the found_inf flag must be a float32 scalar");
}

// ---- resume through the trainer (Note [Bitwise resume] in nn/trainer.h) ----

std::shared_ptr<io::ImageData> Images(int64_t n) {
  auto d = std::make_shared<io::ImageData>();
  d->n = n;
  d->channels = 1;
  d->height = d->width = 6;
  std::mt19937 gen(4);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t c = int32_t(gen() % 3);
    d->labels.push_back(c);
    for (int64_t k = 0; k < 36; ++k) d->images.push_back(uint8_t(gen() % 90 + (k % 3 == c ? 160 : 0)));
  }
  return d;
}

// One fp16 run of `epochs` over 8 batches each with Adam, checkpointing into `dir` every 3
// steps and at the end; max_steps > 0 stops early. From 2^28 with interval 3, it skips, recovers
// and grows across the checkpoints.
void TrainFp16(bool graph, const std::string& dir, int64_t max_steps, bool resume) {
  CpuDevice()->SetRandSeed(2);
  auto net = std::make_shared<nn::Sequential>();
  net->Add(std::make_shared<nn::Flatten>());
  net->Add(std::make_shared<nn::Linear>(36, 16));
  net->Add(nn::ReLU());
  net->Add(std::make_shared<nn::Linear>(16, 3));
  auto opt = std::make_shared<nn::Adam>(0.01);
  nn::LossScaling s;
  s.init_scale = std::ldexp(1.0, 28);
  s.interval = 3;
  opt->SetLossScaling(s);
  nn::Model model(net, opt);
  model.set_precision(Precision::kFloat16);
  model.Compile({ops::Zeros({8, 1, 6, 6}, DType::kFloat32, CpuDevice())}, true, graph);
  io::DataLoaderOptions o;
  o.batch_size = 8;
  o.seed = 5;
  o.drop_last = true;
  o.device = CpuDevice();
  io::DataLoader train(Images(64), o);
  nn::TrainerOptions t;
  t.epochs = 4;
  t.max_steps = max_steps;
  t.log_every = 4;
  t.checkpoint_every = 3;
  t.keep_last = 50;
  t.checkpoint_dir = dir;
  t.resume = resume;
  t.progress = false;
  t.verbose = false;
  nn::Trainer(model, train, nullptr, t).Fit();
}

class LossScaleResume : public ::testing::TestWithParam<bool> {};

TEST_P(LossScaleResume, AResumedFp16RunEndsBitwiseWhereAnUninterruptedOneDoes) {
  const bool graph = GetParam();
  TempDir tmp;
  const std::string ref = tmp / "ref", run = tmp / "run";
  TrainFp16(graph, ref, 0, false);
  TrainFp16(graph, run, 13, false);  // stops at step 13: the newest checkpoint is step 13's
  TrainFp16(graph, run, 0, true);    // resumes there
  const std::string last = "/step-000000000032.ckpt";
  io::Checkpoint a = io::LoadCheckpoint(ref + last), b = io::LoadCheckpoint(run + last);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i)
    EXPECT_EQ(HostBytes(a.tensors[i].second), HostBytes(b.tensors[i].second)) << a.tensors[i].first;
  for (const char* key : {"optimizer/loss_scale", "optimizer/loss_scale_good_steps", "optimizer/skipped_steps",
                          "optimizer/adam_steps"})
    EXPECT_EQ(a.Meta(key), b.Meta(key)) << key;
  EXPECT_GT(a.Meta("optimizer/skipped_steps"), 0);
  // The scale had moved by the checkpoints the resumed run started from.
  io::Checkpoint mid = io::LoadCheckpoint(run + "/step-000000000012.ckpt");
  EXPECT_NE(mid.Meta("optimizer/loss_scale"), std::ldexp(1.0, 28));
  EXPECT_EQ(a.Meta("optimizer/adam_steps") + a.Meta("optimizer/skipped_steps"), 32);
}

INSTANTIATE_TEST_SUITE_P(Modes, LossScaleResume, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Graph" : "Eager"; });

}  // namespace
}  // namespace test
}  // namespace loom
