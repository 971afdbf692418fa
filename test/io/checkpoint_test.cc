// Checkpoints: round trips for every dtype, restoring into existing tensors, the optimizer's
// state, resuming training bitwise, and a clear IOError for every kind of broken file.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <future>
#include <random>

#include "common/files.h"
#include "common/graph_capture.h"
#include "common/harness.h"
#include "common/mlp.h"
#include "io/checkpoint.h"
#include "nn/optimizer_checkpoint.h"
#include "io/checkpoint_format.h"
#include "io/checksum.h"
#include "io/file.h"

namespace loom {
namespace test {
namespace {

// Random bytes, valid for the dtype (bool: 0 or 1). Floats get arbitrary bit patterns, NaNs
// and infinities included: a checkpoint stores bits, not values.
std::vector<uint8_t> RandomBytes(size_t n, DType dtype, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> b(n * SizeOf(dtype));
  for (uint8_t& x : b) x = uint8_t(gen());
  if (dtype == DType::kBool)
    for (uint8_t& x : b) x &= 1;
  return b;
}

io::NamedTensors SmallSet() {
  return {{"a", TensorWithBytes({2, 3}, DType::kFloat32, RandomBytes(6, DType::kFloat32, 1))},
          {"b", TensorWithBytes({4}, DType::kInt64, RandomBytes(4, DType::kInt64, 2))}};
}

TEST(CheckpointTest, RoundTripsEveryDTypeBitwise) {
  TempDir dir;
  io::NamedTensors saved;
  std::vector<Shape> shapes = {{}, {7}, {3, 5}, {2, 0, 4}, {2, 3, 4}};
  uint32_t seed = 10;
  for (DType dt : kAllDTypes) {
    for (const Shape& s : shapes) {
      std::string name = std::string(Name(dt)) + "/" + ToString(s);
      saved.emplace_back(name, TensorWithBytes(s, dt, RandomBytes(size_t(NumElements(s)), dt, seed++)));
    }
  }
  std::map<std::string, double> meta = {{"step", 12345}, {"lr", 0.1}, {"tiny", 1e-300}, {"neg", -2.5}};
  io::SaveCheckpoint(dir / "all.ckpt", saved, meta);
  io::Checkpoint ck = io::LoadCheckpoint(dir / "all.ckpt");
  ASSERT_EQ(ck.tensors.size(), saved.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    const auto& got = ck.tensors[i];
    EXPECT_EQ(got.first, saved[i].first);
    EXPECT_EQ(got.second.dtype(), saved[i].second.dtype()) << got.first;
    EXPECT_EQ(got.second.shape(), saved[i].second.shape()) << got.first;
    EXPECT_EQ(got.second.device(), CpuDevice().get());
    EXPECT_EQ(HostBytes(got.second), HostBytes(saved[i].second)) << got.first;
  }
  EXPECT_EQ(ck.meta, meta);
  EXPECT_EQ(ck.Meta("step"), 12345);
  LOOM_EXPECT_THROW_MSG(ck.Get("nope"), IOError, "holds no tensor named 'nope'");
  // Nothing but the checkpoint itself is left in the directory.
  EXPECT_EQ(dir.List(), std::vector<std::string>{"all.ckpt"});
}

TEST(CheckpointTest, SavesViewsByValueAndIsReproducible) {
  TempDir dir;
  Tensor m = RandomTensor({3, 4}, DType::kFloat32, 7);
  Tensor mt = m.Transpose();  // a strided view
  ASSERT_FALSE(mt.is_contiguous());
  io::SaveCheckpoint(dir / "v.ckpt", {{"mt", mt}});
  io::Checkpoint ck = io::LoadCheckpoint(dir / "v.ckpt");
  EXPECT_EQ(ck.Get("mt").shape(), (Shape{4, 3}));
  EXPECT_EQ(ck.Get("mt").ToVector<float>(), mt.Contiguous().ToVector<float>());
  // The same contents give the same bytes.
  io::SaveCheckpoint(dir / "v2.ckpt", {{"mt", mt}});
  EXPECT_EQ(ReadBytes(dir / "v.ckpt"), ReadBytes(dir / "v2.ckpt"));
}

TEST(CheckpointTest, RestoreIntoCopiesIntoExistingTensorsOfAnyLayout) {
  TempDir dir;
  Tensor a = RandomTensor({2, 3}, DType::kFloat32, 1);
  Tensor b = RandomTensor({3, 2}, DType::kFloat64, 2);
  io::SaveCheckpoint(dir / "r.ckpt", {{"a", a}, {"b", b}, {"extra", a}});
  Tensor a2 = ops::Zeros({2, 3}, DType::kFloat32, CpuDevice());
  Tensor b_base = ops::Zeros({2, 3}, DType::kFloat64, CpuDevice());
  Tensor b2 = b_base.Transpose();  // non-contiguous target (3, 2)
  io::RestoreInto(io::LoadCheckpoint(dir / "r.ckpt"), {{"a", a2}, {"b", b2}});  // "extra" is ignored
  EXPECT_EQ(a2.ToVector<float>(), a.ToVector<float>());
  EXPECT_EQ(b2.Contiguous().ToVector<double>(), b.ToVector<double>());
}

TEST(CheckpointTest, RestoreReportsEveryMismatchByNameAndCopiesNothing) {
  TempDir dir;
  Mlp saved({8, 16, 4}, 1);
  io::NamedTensors params;
  for (const Tensor& p : saved.params) params.emplace_back(p.name(), p);
  io::SaveCheckpoint(dir / "mlp.ckpt", params);
  // Another architecture: w0 and b0 have other shapes, w1 another dtype, and one name is new.
  Mlp other({8, 32, 4}, 2);
  io::NamedTensors targets;
  for (const Tensor& p : other.params) targets.emplace_back(p.name(), p);
  targets[2].second = ops::Zeros({16, 4}, DType::kFloat64, CpuDevice());  // w1
  targets.emplace_back("w9", ops::Zeros({1}, DType::kFloat32, CpuDevice()));
  auto before = other.Values();
  try {
    io::RestoreInto(io::LoadCheckpoint(dir / "mlp.ckpt"), targets);
    FAIL() << "expected an IOError";
  } catch (const IOError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("mlp.ckpt"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'w0': shape (8, 16) in the file, (8, 32) in the target"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'b0': shape (16,) in the file, (32,) in the target"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'w1': dtype float32 in the file, float64 in the target"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'w9': not in the file"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("'b1'"), std::string::npos) << msg;  // b1 fits
  }
  EXPECT_EQ(other.Values(), before);  // nothing was copied
}

// ---- broken files ----

class BrokenCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    io::SaveCheckpoint(dir_ / "good.ckpt", SmallSet(), {{"step", 3}});
    good_ = ReadBytes(dir_ / "good.ckpt");
    ASSERT_GT(good_.size(), 60u);
  }
  std::string Write(const std::string& name, const std::vector<uint8_t>& bytes) {
    WriteBytes(dir_ / name, bytes);
    return dir_ / name;
  }
  TempDir dir_;
  std::vector<uint8_t> good_;
};

TEST_F(BrokenCheckpointTest, TruncatedFilesAreReportedAsTruncated) {
  for (size_t keep : {size_t(0), size_t(5), size_t(8), size_t(9), size_t(12), size_t(25), good_.size() / 2,
                      good_.size() - 1}) {
    std::string p = Write("cut.ckpt", std::vector<uint8_t>(good_.begin(), good_.begin() + long(keep)));
    SCOPED_TRACE("kept " + std::to_string(keep) + " of " + std::to_string(good_.size()) + " bytes");
    LOOM_EXPECT_THROW_MSG(io::LoadCheckpoint(p), IOError, "truncated");
    LOOM_EXPECT_THROW_MSG(io::LoadCheckpoint(p), IOError, "cut.ckpt");
  }
}

TEST_F(BrokenCheckpointTest, AFlippedDataByteIsAChecksumMismatch) {
  std::vector<uint8_t> bad = good_;
  bad[bad.size() - 20] ^= 0x04;  // inside the tensor data
  std::string p = Write("flip.ckpt", bad);
  LOOM_EXPECT_THROW_MSG(io::LoadCheckpoint(p), IOError, "checksum mismatch");
  LOOM_EXPECT_THROW_MSG(io::LoadCheckpoint(p), IOError, "flip.ckpt");
}

TEST_F(BrokenCheckpointTest, EveryFlippedByteAnywhereIsAnIOError) {
  for (size_t i = 0; i < good_.size(); ++i) {
    std::vector<uint8_t> bad = good_;
    bad[i] ^= 0x10;
    try {
      io::DecodeCheckpointBytes(std::string(bad.begin(), bad.end()), "flip");
      ADD_FAILURE() << "flipping byte " << i << " went unnoticed";
    } catch (const IOError&) {
    }
  }
}

TEST_F(BrokenCheckpointTest, ANewerFormatVersionIsRefusedByNumber) {
  std::vector<uint8_t> bad = good_;
  ASSERT_EQ(bad[8], 0x08);  // field 1 (format_version), varint
  ASSERT_EQ(bad[9], 0x01);
  bad[9] = 7;
  std::string p = Write("v7.ckpt", bad);
  LOOM_EXPECT_THROW_MSG(io::LoadCheckpoint(p), IOError, "format version 7, this build reads 1");
  LOOM_EXPECT_THROW_MSG(io::LoadCheckpoint(p), IOError, "v7.ckpt");
}

TEST_F(BrokenCheckpointTest, AnotherFileIsABadMagic) {
  std::vector<uint8_t> bad = good_;
  bad[0] = 'X';
  LOOM_EXPECT_THROW_MSG(io::LoadCheckpoint(Write("x.ckpt", bad)), IOError, "bad magic");
  LOOM_EXPECT_THROW_MSG(io::LoadCheckpoint(dir_ / "missing.ckpt"), IOError, "cannot open");
}

TEST_F(BrokenCheckpointTest, WrongShapesAreReportedByName) {
  io::Checkpoint ck = io::LoadCheckpoint(dir_ / "good.ckpt");
  Tensor a = ops::Zeros({3, 2}, DType::kFloat32, CpuDevice());
  Tensor b = ops::Zeros({4}, DType::kInt64, CpuDevice());
  LOOM_EXPECT_THROW_MSG(io::RestoreInto(ck, {{"a", a}, {"b", b}}), IOError,
                        "'a': shape (2, 3) in the file, (3, 2) in the target");
}

// A payload hand-encoded in protobuf's wire format: one TensorProto {name, shape, dtype, data}.
std::string TensorPayload(const std::string& dtype, std::vector<uint8_t> shape, size_t data_bytes) {
  std::string t;
  t += "\x0a\x01"; t += "a";                                           // name = "a"
  t += char(0x12); t += char(shape.size()); t.append(shape.begin(), shape.end());  // shape, packed
  t += char(0x1a); t += char(dtype.size()); t += dtype;                 // dtype
  t += char(0x22); t += char(data_bytes); t.append(data_bytes, '\x01');  // data
  std::string p;
  p += char(0x0a); p += char(t.size()); p += t;                         // tensors[0]
  return p;
}

// Magic + CheckpointProto{version 1, checksum, payload}, with a valid checksum.
std::string WrapPayload(const std::string& payload) {
  std::string f(io::kCheckpointMagic, 8);
  f += "\x08\x01";
  f += char(0x11);
  uint64_t h = io::Fnv1a64(payload.data(), payload.size());
  f.append(reinterpret_cast<const char*>(&h), 8);
  f += char(0x1a); f += char(payload.size()); f += payload;
  return f;
}

TEST(CheckpointFormatTest, RecordsThatDisagreeWithTheirShapeOrDTypeAreRefused) {
  std::string ok = TensorPayload("float32", {2, 3}, 24);
  io::RawCheckpoint raw = io::DecodeCheckpointPayload(ok.data(), ok.size(), "p");
  ASSERT_EQ(raw.tensors.size(), 1u);
  EXPECT_EQ(raw.tensors[0].shape, (Shape{2, 3}));
  // The same through a whole file with a valid checksum.
  std::string file = WrapPayload(ok);
  EXPECT_EQ(io::DecodeCheckpoint(file.data(), file.size(), "f").tensors[0].data, std::string(24, '\x01'));

  std::string short_data = WrapPayload(TensorPayload("float32", {2, 3}, 20));
  LOOM_EXPECT_THROW_MSG(io::DecodeCheckpoint(short_data.data(), short_data.size(), "short.ckpt"), IOError,
                        "'short.ckpt': tensor 'a' is float32 (2, 3) (24 bytes) but the file holds 20 bytes");
  std::string bad_dtype = WrapPayload(TensorPayload("float8", {2, 3}, 6));
  LOOM_EXPECT_THROW_MSG(io::DecodeCheckpoint(bad_dtype.data(), bad_dtype.size(), "f8.ckpt"), IOError,
                        "unknown dtype 'float8'");
  // Shapes are packed varints: -1 takes ten bytes, 2^32 - 1 five.
  std::string neg = TensorPayload("float32", {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 3}, 0);
  LOOM_EXPECT_THROW_MSG(io::DecodeCheckpointPayload(neg.data(), neg.size(), "n"), IOError, "negative dimension");
  std::string huge = TensorPayload("float64", {0xff, 0xff, 0xff, 0xff, 0x0f, 0xff, 0xff, 0xff, 0xff, 0x0f}, 0);
  LOOM_EXPECT_THROW_MSG(io::DecodeCheckpointPayload(huge.data(), huge.size(), "h"), IOError,
                        "impossibly large shape");
}

// ---- atomic saves ----

TEST(CheckpointSaveTest, AFailedSaveLeavesNoFileBehind) {
  TempDir dir;
  // The directory does not exist.
  std::string p = dir / "no/such/dir/x.ckpt";
  LOOM_EXPECT_THROW_MSG(io::SaveCheckpoint(p, SmallSet()), IOError, "x.ckpt");
  EXPECT_FALSE(FileExists(p));
  // The destination is a directory: writing succeeds, the rename fails, the temp file goes.
  ASSERT_EQ(::mkdir((dir / "isdir").c_str(), 0755), 0);
  LOOM_EXPECT_THROW_MSG(io::SaveCheckpoint(dir / "isdir", SmallSet()), IOError, "renaming");
  std::vector<std::string> left = dir.List();
  EXPECT_EQ(left, std::vector<std::string>{"isdir"});
}

TEST(CheckpointSaveTest, ADiskFullMidWriteKeepsTheOldFileIntact) {
  TempDir dir;
  std::string p = dir / "model.ckpt";
  io::SaveCheckpoint(p, SmallSet(), {{"step", 1}});
  std::vector<uint8_t> old = ReadBytes(p);
  // Let the process write at most 64 KiB per file: the 1 MB save fails halfway through.
  Tensor big = ops::Zeros({256, 1024}, DType::kFloat32, CpuDevice());
  struct rlimit saved_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved_limit), 0);
  auto saved_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved_limit;
  small.rlim_cur = 64 << 10;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  try {
    io::SaveCheckpoint(p, {{"big", big}}, {{"step", 2}});
  } catch (const IOError& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find("model.ckpt"), std::string::npos) << e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved_limit);
  std::signal(SIGXFSZ, saved_handler);
  EXPECT_TRUE(threw);
  EXPECT_EQ(ReadBytes(p), old);
  EXPECT_EQ(dir.List(), std::vector<std::string>{"model.ckpt"});
  EXPECT_EQ(io::LoadCheckpoint(p).Meta("step"), 1);
}

TEST(CheckpointSaveTest, BadInputsAreRefusedBeforeAnythingIsWritten) {
  TempDir dir;
  Tensor a = ops::Zeros({2}, DType::kFloat32, CpuDevice());
  LOOM_EXPECT_THROW_MSG(io::SaveCheckpoint(dir / "d.ckpt", {{"a", a}, {"a", a}}), ValueError,
                        "two tensors are named 'a'");
  LOOM_EXPECT_THROW_MSG(io::SaveCheckpoint(dir / "d.ckpt", {{"u", Tensor()}}), ValueError, "'u' is undefined");
  EXPECT_TRUE(dir.List().empty());
}

TEST(CheckpointSaveTest, SavingDuringCaptureIsRefused) {
  TempDir dir;
  Tensor x = RandomTensor({4}, DType::kFloat32, 3);
  CapturedGraph graph(CpuDevice(), "ckpt");
  graph.Capture([&] {
    Tensor y = ops::Relu(x);
    LOOM_EXPECT_THROW_MSG(io::SaveCheckpoint(dir / "c.ckpt", {{"y", y}}), GraphError, "capturing");
  });
  EXPECT_TRUE(dir.List().empty());
}

TEST(CheckpointCudaTest, SavesFromAndRestoresIntoGpuTensors) {
  LOOM_REQUIRE_GPU();  // skips without a GPU, fails under LOOM_REQUIRE_GPU=1 (the GPU check)
  TempDir dir;
  auto gpu = CudaDevice(0);
  Tensor a = RandomTensor({3, 4}, DType::kFloat32, 1, -1, 1, gpu);
  Tensor h = ops::Cast(a, DType::kFloat16);
  io::SaveCheckpoint(dir / "gpu.ckpt", {{"a", a}, {"at", a.Transpose()}, {"h", h}});
  io::Checkpoint ck = io::LoadCheckpoint(dir / "gpu.ckpt");
  EXPECT_EQ(ck.Get("a").device(), CpuDevice().get());
  EXPECT_EQ(HostBytes(ck.Get("a")), HostBytes(a));
  EXPECT_EQ(HostBytes(ck.Get("at")), HostBytes(a.Transpose()));
  EXPECT_EQ(HostBytes(ck.Get("h")), HostBytes(h));
  Tensor a2 = ops::Zeros({3, 4}, DType::kFloat32, gpu);
  Tensor base = ops::Zeros({3, 4}, DType::kFloat32, gpu);
  Tensor h2 = ops::Zeros({3, 4}, DType::kFloat16, gpu);
  io::RestoreInto(ck, {{"a", a2}, {"h", h2}, {"at", base.Transpose()}});  // the last one strided
  EXPECT_EQ(HostBytes(a2), HostBytes(a));
  EXPECT_EQ(HostBytes(h2), HostBytes(h));
  EXPECT_EQ(HostBytes(base), HostBytes(a));
}

// ---- optimizer state and resuming ----

// Step s trains on batch 16 of data seeded 1000 + s.
const BatchPlan kBatches{16, 1000};

TEST(CheckpointResumeTest, SaveLoadAndContinueIsBitwiseEqualToTrainingStraight) {
  const int n = 4, m = 5;
  Blobs data(12, 5);
  // Straight: N + M steps.
  TrainRun straight;
  {
    Mlp model({12, 32, 5}, 21);
    nn::SGD opt(0.05, 0.9, 1e-3, /*nesterov=*/true);
    TrainEager(model, opt, data, 0, n + m, &straight, kBatches);
  }
  // N steps, save parameters and optimizer state, then continue in fresh objects.
  TempDir dir;
  TrainRun first, resumed;
  {
    Mlp model({12, 32, 5}, 21);
    nn::SGD opt(0.05, 0.9, 1e-3, true);
    TrainEager(model, opt, data, 0, n, &first, kBatches);
    io::NamedTensors tensors;
    for (const Tensor& p : model.params) tensors.emplace_back("model/" + p.name(), p);
    std::map<std::string, double> meta = {{"step", n}};
    nn::AddOptimizerState(opt, &tensors, &meta);
    EXPECT_EQ(opt.states().size(), model.params.size());  // one momentum buffer per parameter
    io::SaveCheckpoint(dir / "run.ckpt", tensors, meta);
  }
  {
    Mlp model({12, 32, 5}, 999);            // other initial values: the checkpoint must win
    nn::SGD opt(0.7, 0.9, 1e-3, true);      // another learning rate: the checkpoint's is restored
    io::Checkpoint ck = io::LoadCheckpoint(dir / "run.ckpt");
    io::NamedTensors targets;
    for (const Tensor& p : model.params) targets.emplace_back("model/" + p.name(), p);
    io::RestoreInto(ck, targets);
    nn::RestoreOptimizerState(ck, opt, CpuDevice());
    EXPECT_EQ(opt.learning_rate(), 0.05);
    EXPECT_EQ(opt.states().size(), model.params.size());
    EXPECT_EQ(ck.Meta("step"), n);
    TrainEager(model, opt, data, n, n + m, &resumed, kBatches);
  }
  EXPECT_TRUE(SameBits(resumed.params, straight.params));
  std::vector<float> tail(straight.losses.begin() + n, straight.losses.end());
  EXPECT_EQ(0, std::memcmp(resumed.losses.data(), tail.data(), tail.size() * sizeof(float)));
}

TEST(CheckpointResumeTest, OptimizerFileRoundTripAndMismatches) {
  TempDir dir;
  Blobs data(6, 3);
  Mlp model({6, 8, 3}, 4);
  nn::SGD opt(0.1, 0.5);
  TrainRun t;
  TrainEager(model, opt, data, 0, 2, &t, kBatches);
  nn::SaveOptimizer(dir / "opt.ckpt", opt);
  io::Checkpoint ck = io::LoadCheckpoint(dir / "opt.ckpt");
  EXPECT_TRUE(ck.Has("optimizer/w0/momentum"));
  EXPECT_EQ(ck.Meta("optimizer/lr"), 0.1);
  // Into the same optimizer: values come back.
  nn::SGD fresh(0.2, 0.5);
  nn::LoadOptimizer(dir / "opt.ckpt", fresh, CpuDevice());
  for (const auto& kv : opt.states())
    EXPECT_EQ(fresh.states().at(kv.first).ToVector<float>(), kv.second.ToVector<float>()) << kv.first;
  // An optimizer without momentum has nowhere to put it.
  nn::SGD plain(0.1);
  LOOM_EXPECT_THROW_MSG(nn::LoadOptimizer(dir / "opt.ckpt", plain, CpuDevice()), IOError, "w0/momentum");
}

TEST(CheckpointResumeTest, AdamResumesIntoAFreshOptimizer) {
  TempDir dir;
  Blobs data(6, 3);
  Mlp model({6, 8, 3}, 4);
  nn::Adam opt(0.01);
  TrainRun t;
  TrainEager(model, opt, data, 0, 3, &t, kBatches);
  nn::SaveOptimizer(dir / "adam.ckpt", opt);
  EXPECT_EQ(io::LoadCheckpoint(dir / "adam.ckpt").Meta("optimizer/adam_steps"), 3);
  // A fresh Adam gets the moments and the step count (its bias correction continues).
  nn::Adam fresh(0.01);
  nn::LoadOptimizer(dir / "adam.ckpt", fresh, CpuDevice());
  EXPECT_EQ(fresh.steps_taken(CpuDevice()), 3);
  for (const auto& kv : opt.states())
    EXPECT_EQ(fresh.states().at(kv.first).ToVector<float>(), kv.second.ToVector<float>()) << kv.first;
  // The same optimizer (same step count) can roll back to its saved state.
  std::map<std::string, std::vector<float>> saved;
  for (const auto& kv : opt.states()) saved[kv.first] = kv.second.ToVector<float>();
  for (const auto& kv : opt.states()) ops::Fill(kv.second, 0.5);
  nn::LoadOptimizer(dir / "adam.ckpt", opt, CpuDevice());
  for (const auto& kv : opt.states()) EXPECT_EQ(kv.second.ToVector<float>(), saved[kv.first]) << kv.first;
}

// Note [Check everything, then copy]: a refused optimizer restore leaves the optimizer as it was
// (issue 16, class 3: slots used to be created and Adam's step count set before the refusal).
TEST(CheckpointResumeTest, ARefusedOptimizerRestoreChangesNothing) {
  TempDir dir;
  Blobs data(6, 3);
  Mlp model({6, 8, 3}, 4);
  nn::Adam opt(0.01);
  TrainRun t;
  TrainEager(model, opt, data, 0, 3, &t, kBatches);
  nn::SaveOptimizer(dir / "adam.ckpt", opt);
  io::Checkpoint ck = io::LoadCheckpoint(dir / "adam.ckpt");

  // A slot Adam does not keep, beside the ones it does: nothing is created, the count stays 0.
  io::Checkpoint mixed = ck;
  mixed.tensors.emplace_back("optimizer/w0/momentum", ck.Get("optimizer/w0/m"));
  nn::Adam fresh(0.02);
  LOOM_EXPECT_THROW_MSG(nn::CheckOptimizerState(mixed, fresh), IOError, "keeps no 'momentum'");
  LOOM_EXPECT_THROW_MSG(nn::RestoreOptimizerState(mixed, fresh, CpuDevice()), IOError, "nothing was restored");
  EXPECT_TRUE(fresh.states().empty());
  EXPECT_EQ(fresh.steps_taken(CpuDevice()), 0);
  EXPECT_EQ(fresh.learning_rate(), 0.02);

  // An Adam of a bigger model: its third layer's slots are not in the file, its second's differ
  // in shape. Its step count and moments stay as they were.
  Mlp bigger({6, 8, 8, 3}, 5);
  nn::Adam other(0.03);
  TrainRun t2;
  TrainEager(bigger, other, data, 0, 5, &t2, kBatches);
  std::map<std::string, std::vector<float>> before;
  for (const auto& kv : other.states()) before[kv.first] = kv.second.ToVector<float>();
  LOOM_EXPECT_THROW_MSG(nn::RestoreOptimizerState(ck, other, CpuDevice()), IOError,
                        "'optimizer/w2/m': not in the file");
  EXPECT_EQ(other.steps_taken(CpuDevice()), 5);
  EXPECT_EQ(other.learning_rate(), 0.03);
  ASSERT_EQ(other.states().size(), before.size());
  for (const auto& kv : other.states()) EXPECT_EQ(kv.second.ToVector<float>(), before[kv.first]) << kv.first;
}

// ---- files (issue 16, class 6) ----

// Note [Names are C strings] in core/file.h: "a\0b.ckpt" used to write "a".
TEST(CheckpointFileTest, ANulByteInAPathOrANameIsRefused) {
  TempDir dir;
  const std::string nul_path = dir / std::string("a\0b.ckpt", 8);
  LOOM_EXPECT_THROW_MSG(io::SaveCheckpoint(nul_path, SmallSet()), ValueError, "contains a NUL byte");
  LOOM_EXPECT_THROW_MSG(io::SaveCheckpoint(nul_path, SmallSet()), ValueError, "a\\0b.ckpt");
  EXPECT_TRUE(dir.List().empty());  // no 'a', no temporary file
  io::SaveCheckpoint(dir / "a", SmallSet());
  LOOM_EXPECT_THROW_MSG(io::LoadCheckpoint(nul_path), ValueError, "contains a NUL byte");  // not 'a'
  Tensor t = SmallSet()[0].second;
  LOOM_EXPECT_THROW_MSG(io::SaveCheckpoint(dir / "n.ckpt", {{std::string("w\0x", 3), t}}), ValueError,
                        "tensor name 'w\\0x' contains a NUL byte");
  LOOM_EXPECT_THROW_MSG(io::SaveCheckpoint(dir / "n.ckpt", {{"w", t}}, {{std::string("s\0t", 3), 1.0}}),
                        ValueError, "metadata name 's\\0t'");
  EXPECT_EQ(dir.List(), std::vector<std::string>{"a"});
}

TEST(CheckpointFileTest, ResavingKeepsTheFilesMode) {
  TempDir dir;
  const std::string p = dir / "private.ckpt";
  io::SaveCheckpoint(p, SmallSet());
  for (mode_t mode : {0600, 0640, 0604}) {
    ASSERT_EQ(::chmod(p.c_str(), mode), 0);
    io::SaveCheckpoint(p, SmallSet());
    struct stat st;
    ASSERT_EQ(::stat(p.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, mode);
  }
}

// A FIFO with no writer used to block the reader forever in open(). The call runs on another
// thread so that a regression fails instead of hanging: after a generous wait the test opens
// the FIFO's write end itself, which lets a blocked reader go on.
TEST(CheckpointFileTest, AFifoIsRefusedWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir / "pipe.ckpt";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto load = std::async(std::launch::async, [&] {
    try {
      io::LoadCheckpoint(fifo);
    } catch (const IOError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  });
  if (load.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "LoadCheckpoint blocked on a FIFO";
    int fd = ::open(fifo.c_str(), O_WRONLY);
    if (fd >= 0) ::close(fd);
  }
  std::string msg = load.get();
  EXPECT_NE(msg.find("not a regular file (a FIFO)"), std::string::npos) << msg;
  LOOM_EXPECT_THROW_MSG(io::LoadCheckpoint(dir.path()), IOError, "not a regular file (a directory)");
}

TEST(CheckpointFileTest, LoadOptimizerRefusesAModelCheckpointNamingWhatIsMissing) {
  TempDir dir;
  Blobs data(6, 3);
  Mlp model({6, 8, 3}, 4);
  nn::SGD opt(0.1, 0.5);
  TrainRun t;
  TrainEager(model, opt, data, 0, 2, &t, kBatches);
  io::NamedTensors params;
  for (const Tensor& p : model.params) params.emplace_back(p.name(), p);
  io::SaveCheckpoint(dir / "params.ckpt", params);
  io::NamedTensors both = params;
  std::map<std::string, double> meta;
  nn::AddOptimizerState(opt, &both, &meta);
  io::SaveCheckpoint(dir / "both.ckpt", both, meta);

  nn::SGD fresh(0.3, 0.5);
  LOOM_EXPECT_THROW_MSG(nn::LoadOptimizer(dir / "params.ckpt", fresh, CpuDevice()), IOError,
                        "no metadata 'optimizer/lr'");
  LOOM_EXPECT_THROW_MSG(nn::LoadOptimizer(dir / "params.ckpt", fresh, CpuDevice()), IOError,
                        "4 tensor(s) outside 'optimizer/' ('w0', 'b0', 'w1', ...)");
  LOOM_EXPECT_THROW_MSG(nn::LoadOptimizer(dir / "both.ckpt", fresh, CpuDevice()), IOError, "A model checkpoint?");
  EXPECT_TRUE(fresh.states().empty());
  EXPECT_EQ(fresh.learning_rate(), 0.3);
  nn::RestoreOptimizerState(io::LoadCheckpoint(dir / "both.ckpt"), fresh, CpuDevice());  // the way to read it
  EXPECT_EQ(fresh.states().size(), opt.states().size());
}

}  // namespace
}  // namespace test
}  // namespace loom
