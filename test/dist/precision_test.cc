// Data parallelism in the model's precision (issue 31, Note [Gradients on the wire] in
// nn/dist_opt.h): DistOpt all-reduces gradients in bfloat16 under bf16 and in float16 under fp16
// unless told to keep float32; the sum is exactly the documented one, eagerly and replayed; fp16
// with loss scaling skips the same steps on every rank. Rank functions run under a launcher
// (Note [Rank launchers]).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/half.h"
#include "dist_common.h"
#include "nn/model.h"

LOOM_OP_KIND(allreduce);

namespace loom {
namespace test {
namespace {

constexpr int64_t kN = 96;

// Rank r's gradient: values whose 16-bit roundings are not exact, over a few binades, and one
// (index 5) past float16's largest finite value once two ranks add it.
std::vector<float> RankGradient(int rank) {
  std::vector<float> g(static_cast<size_t>(kN));
  for (int64_t i = 0; i < kN; ++i)
    g[size_t(i)] = float((1 + double(i) / 97 + rank / 3.0) * std::ldexp(1.0, int(i % 7) - 3) * (i % 2 ? -1 : 1));
  g[5] = 40000.0f + float(rank);
  return g;
}

// Note [Gradients on the wire], steps 1-3, for `world` ranks summed in rank order (what the
// in-process communicator does; MPI and NCCL round each partial sum, the same for two ranks).
float WireSum(int64_t i, int world, Compression c) {
  double sum32 = 0;
  float acc = 0;
  for (int r = 0; r < world; ++r) {
    const float g = RankGradient(r)[size_t(i)];
    sum32 += g;
    const float w = c == Compression::kFloat16    ? HalfToFloat(FloatToHalf(g))
                    : c == Compression::kBFloat16 ? BFloat16ToFloat(FloatToBFloat16(g))
                                                  : g;
    acc = r == 0 ? w : acc + w;
  }
  if (c == Compression::kFloat16) return HalfToFloat(FloatToHalf(acc));
  if (c == Compression::kBFloat16) return BFloat16ToFloat(FloatToBFloat16(acc));
  return acc;
}

// One step of SGD (lr 1) through DistOpt with the wire set by `precision` and `explicit_wire`,
// eagerly or captured and replayed: the parameter after it (from 0: -1/N times the reduced sum).
std::vector<float> OneStep(int rank, const std::shared_ptr<Communicator>& comm, Precision precision,
                           std::optional<Compression> explicit_wire, bool graph) {
  auto dev = NewCpuDevice(rank);
  Tensor p = ops::Zeros({kN}, DType::kFloat32, dev), g = ops::Zeros({kN}, DType::kFloat32, dev);
  p.block()->set_persistent(true);
  g.block()->set_persistent(true);
  g.CopyFrom(RankGradient(rank));
  nn::DistOpt opt(std::make_shared<nn::SGD>(1.0), comm, explicit_wire);
  opt.SetModelPrecision(precision);
  if (!graph) {
    opt.Step({{p, g}});
  } else {
    CapturedGraph cg(dev, "wire");
    cg.Capture([&] { opt.Step({{p, g}}); });
    int wires = 0;
    for (const OpRecord& op : cg.graph().ops().ops)
      if (op.def == &op_kind::allreduce) {
        ++wires;
        EXPECT_EQ(op.attrs.Int("compress", 0), int64_t(opt.compression()));
      }
    EXPECT_EQ(wires, 1);
    cg.Replay();
  }
  return p.ToVector<float>();
}

TEST(DistPrecision, TheWireFollowsTheModelsPrecisionUnlessSet) {
  Launch()(WorldSize(2), [&](int, const std::shared_ptr<Communicator>& comm) {
    nn::DistOpt d(std::make_shared<nn::SGD>(0.1), comm);
    EXPECT_EQ(d.compression(), Compression::kNone);
    d.SetModelPrecision(Precision::kBFloat16);
    EXPECT_EQ(d.compression(), Compression::kBFloat16);
    d.SetModelPrecision(Precision::kFloat16);
    EXPECT_EQ(d.compression(), Compression::kFloat16);
    d.SetCompression(Compression::kNone);  // float32 whatever the precision
    EXPECT_EQ(d.compression(), Compression::kNone);
    d.SetCompression(std::nullopt);
    EXPECT_EQ(d.compression(), Compression::kFloat16);
    nn::DistOpt fixed(std::make_shared<nn::SGD>(0.1), comm, Compression::kBFloat16);
    EXPECT_EQ(fixed.compression(), Compression::kBFloat16);  // in fp32 too
    EXPECT_EQ(ParseCompression("fp32"), Compression::kNone);
    LOOM_EXPECT_THROW_MSG(ParseCompression("fp8"), ValueError, "expected none (or fp32), fp16 or bf16");
  });
}

// The sum on the wire is exactly Note [Gradients on the wire]'s, eagerly and replayed; 16-bit
// wires differ from float32's (the test sees the rounding), and float16 overflows at index 5.
TEST(DistPrecision, TheSumIsTheDocumentedOneInEachWireType) {
  const int world = WorldSize(2);
  Launch()(world, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    struct Case {
      Precision precision;
      std::optional<Compression> wire;
      Compression expect;
    };
    for (const Case& c : {Case{Precision::kFloat32, std::nullopt, Compression::kNone},
                          Case{Precision::kBFloat16, std::nullopt, Compression::kBFloat16},
                          Case{Precision::kFloat16, std::nullopt, Compression::kFloat16},
                          Case{Precision::kBFloat16, Compression::kNone, Compression::kNone}})
      for (bool graph : {false, true}) {
        const std::vector<float> got = OneStep(rank, comm, c.precision, c.wire, graph);
        for (int64_t i = 0; i < kN; ++i) {
          const float want = 0.0f - 1.0f * (WireSum(i, world, c.expect) * float(1.0 / world));
          ASSERT_EQ(std::memcmp(&got[size_t(i)], &want, sizeof want), 0)
              << "element " << i << ": " << got[size_t(i)] << ", expected " << want << " (wire "
              << Name(c.expect) << (graph ? ", graph" : ", eager") << ")";
        }
        if (c.expect == Compression::kFloat16) EXPECT_TRUE(std::isinf(got[5]));
      }
    int differ = 0;
    for (int64_t i = 0; i < kN; ++i)
      differ += WireSum(i, world, Compression::kBFloat16) != WireSum(i, world, Compression::kNone);
    EXPECT_GT(differ, kN / 2);
  });
}

// fp16 with loss scaling over two ranks (nn::Model): every rank reads the same reduced
// gradients, so every rank finds the same overflows, skips the same steps and keeps the same
// weights; the model's precision put the gradients on a float16 wire.
TEST(DistPrecision, Fp16RanksSkipTheSameStepsAndStayEqual) {
  Launch()(WorldSize(2), [&](int rank, const std::shared_ptr<Communicator>& comm) {
    for (bool graph : {false, true}) {
      auto dev = NewCpuDevice(rank);
      dev->SetRandSeed(5);
      auto net = std::make_shared<nn::Sequential>();
      nn::LayerOptions lo;
      lo.device = dev;
      net->Add(std::make_shared<nn::Linear>(kFeatures, 32, true, lo));
      net->Add(nn::ReLU());
      net->Add(std::make_shared<nn::Linear>(32, kClasses, true, lo));
      auto sgd = std::make_shared<nn::SGD>(0.05, 0.9);
      nn::LossScaling s;
      s.init_scale = std::ldexp(1.0, 36);
      sgd->SetLossScaling(s);
      auto dist = std::make_shared<nn::DistOpt>(sgd, comm);
      nn::Model model(net, dist);
      model.set_precision(Precision::kFloat16);
      EXPECT_EQ(dist->compression(), Compression::kFloat16);
      EXPECT_EQ(model.loss_scale().scale, std::ldexp(1.0, 36));  // the wrapped optimizer's settings kept
      const int64_t rows = kGlobalBatch / comm->size();
      Tensor x = ops::Zeros({rows, kFeatures}, DType::kFloat32, dev), y = ops::Zeros({rows}, DType::kInt32, dev);
      model.Compile({x}, true, graph);
      for (int step = 0; step < 30; ++step) {
        FillShard(step, rank, comm->size(), x, y);
        model.TrainOneBatch(x, y);
      }
      if (graph)
        for (const OpRecord& op : model.train_graph()->ops().ops)
          if (op.def == &op_kind::allreduce) EXPECT_EQ(op.attrs.Int("compress", 0), int64_t(Compression::kFloat16));
      const nn::LossScaleReading ls = model.loss_scale();
      EXPECT_GT(ls.skipped_steps, 0);
      EXPECT_LT(ls.skipped_steps, 30);
      // A digest of this rank's weights and scale, gathered: every rank's the same.
      double digest[3] = {0, ls.scale, double(ls.skipped_steps)};
      for (const auto& kv : model.Params())
        for (float v : kv.second.ToVector<float>()) {
          ASSERT_TRUE(std::isfinite(v));
          digest[0] = digest[0] * 1.0000001 + double(v);
        }
      Tensor mine = ops::FromVector(std::vector<double>(digest, digest + 3), {3}, dev);
      const std::vector<double> all = ops::AllGather(dist->comm_id(), mine).ToVector<double>();
      for (int r = 1; r < comm->size(); ++r)
        for (int k = 0; k < 3; ++k) EXPECT_EQ(all[size_t(3 * r + k)], all[size_t(k)]) << "rank " << r << ", " << k;
    }
  });
}

}  // namespace
}  // namespace test
}  // namespace loom
