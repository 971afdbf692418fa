// nn::Trainer: a run killed with SIGKILL at a random step and resumed ends with bitwise the
// parameters, states and optimizer state of an uninterrupted run (eager and graph mode, with
// dropout, BatchNorm, Adam and augmentation in the step); a NaN injected at step k stops the
// trainer with NonFiniteError naming k, and the last good checkpoint loads; the pieces (RunState,
// CheckpointDir, ProgressBar) on their own.
//
// The runs that get killed are this test executable started again with LOOM_TRAINER_TEST_CHILD
// set: it then trains (RunChildIfAsked, before any test) and exits, so no other program is needed.
#include <gtest/gtest.h>

#include <signal.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>

#include "common/files.h"
#include "common/harness.h"
#include "core/ops.h"
#include "core/device.h"
#include "io/checkpoint.h"
#include "io/checkpoint_dir.h"
#include "io/comm/inproc.h"
#include "io/dataset.h"
#include "nn/dist_opt.h"
#include "nn/cnn_layers.h"
#include "nn/progress.h"
#include "nn/trainer.h"

extern char** environ;

namespace loom {
namespace test {
namespace {

constexpr int64_t kEpochs = 4, kBatch = 8, kSamples = 96;  // 12 steps an epoch, 48 in all
constexpr char kChildVar[] = "LOOM_TRAINER_TEST_CHILD";

// kSamples random 1x8x8 images in 4 classes, the class a bright quadrant (learnable).
std::shared_ptr<io::ImageData> Images(int64_t n, uint32_t seed) {
  auto d = std::make_shared<io::ImageData>();
  d->n = n;
  d->channels = 1;
  d->height = d->width = 8;
  std::mt19937 gen(seed);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t c = int32_t(gen() % 4);
    d->labels.push_back(c);
    for (int64_t h = 0; h < 8; ++h)
      for (int64_t w = 0; w < 8; ++w) {
        const bool hot = (h < 4) == (c % 2 == 0) && (w < 4) == (c < 2);
        d->images.push_back(uint8_t(gen() % 100 + (hot ? 150 : 0)));
      }
  }
  return d;
}

std::shared_ptr<nn::Layer> Net(const std::shared_ptr<Device>& dev = nullptr) {
  nn::LayerOptions o;
  o.device = dev;
  auto net = std::make_shared<nn::Sequential>();
  net->Add(std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1, true, 1, 1, o));
  net->Add(std::make_shared<nn::BatchNorm2d>(4, 0.1, 1e-5, o));
  net->Add(nn::ReLU());
  net->Add(std::make_shared<nn::Flatten>());
  net->Add(std::make_shared<nn::Dropout>(0.25));  // the device's Philox counter is part of the run
  net->Add(std::make_shared<nn::Linear>(256, 4, true, o));
  return net;
}

io::DataLoaderOptions TrainOptions() {
  io::DataLoaderOptions o;
  o.batch_size = kBatch;
  o.seed = 11;
  o.drop_last = true;
  o.mean = {0.5f};
  o.stddev = {0.25f};
  o.crop_padding = 2;
  o.hflip = true;
  o.augment_seed = 5;
  return o;
}

io::DataLoaderOptions HeldOutOptions() {
  io::DataLoaderOptions o = TrainOptions();
  o.shuffle = false;
  o.crop_padding = 0;
  o.hflip = false;
  o.batch_size = 10;
  return o;
}

// A model on a fresh device seeded as every run is; with a communicator, rank `comm->rank()` of
// a data-parallel run (Note [Checkpoints across ranks] in nn/trainer.h): its own CPU device, the
// same seed (so the same initial weights), the update through DistOpt.
struct TrainRun {
  std::shared_ptr<Device> dev;
  std::shared_ptr<nn::Model> model;
  // shard: each rank keeps the Adam moments of its slot (Note [Sharded optimizer state]), in
  // small buckets (several of them).
  explicit TrainRun(bool graph, const std::shared_ptr<Communicator>& comm = nullptr, bool shard = false)
      : dev(comm ? NewCpuDevice(comm->rank()) : CpuDevice()) {
    dev->SetRandSeed(3);
    std::shared_ptr<nn::Optimizer> opt = std::make_shared<nn::Adam>(0.01);
    if (comm) opt = std::make_shared<nn::DistOpt>(opt, comm, std::nullopt, shard ? 512 : 25 << 20, shard);
    model = std::make_shared<nn::Model>(Net(dev), opt);
    model->Compile({ops::Zeros({kBatch, 1, 8, 8}, DType::kFloat32, dev)}, true, graph);
  }
};

// Steps of the whole run with `world` ranks (each reads 1/world of the samples).
int64_t StepsFor(int world) { return kEpochs * (kSamples / world) / kBatch; }

// One rank of the child's run (the only one when comm is null).
void TrainRank(bool graph, const std::string& dir, int delay_ms, const std::shared_ptr<Communicator>& comm,
               bool shard = false) {
  TrainRun run(graph, comm, shard);
  io::DataLoaderOptions o = TrainOptions();
  o.device = run.dev;
  if (comm) {
    o.shard_rank = comm->rank();
    o.shard_world = comm->size();
  }
  o.transform = [delay_ms](io::HostBatch&) { std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms)); };
  io::DataLoader train(Images(kSamples, 1), o);
  io::DataLoaderOptions h = HeldOutOptions();
  h.device = run.dev;
  io::DataLoader held_out(Images(30, 2), h);
  nn::TrainerOptions t;
  t.epochs = kEpochs;
  t.log_every = 4;
  t.eval_every = 5;  // evaluations between the steps must not change the run
  t.checkpoint_every = 3;
  t.keep_last = 2;
  t.checkpoint_dir = dir;
  t.resume = true;
  t.csv = dir + "/log.csv";
  t.progress = false;
  nn::Trainer(*run.model, train, &held_out, t).Fit();
}

// The child: trains to the end in `dir` with `world` ranks (in-process ones: killing the child
// kills them all at once), resuming from its newest checkpoint; each batch takes at least
// `delay_ms` to prepare, so that the parent can kill it mid-run.
void TrainChild(bool graph, const std::string& dir, int delay_ms, int world, bool shard) {
  if (world == 1) return TrainRank(graph, dir, delay_ms, nullptr);
  for (const std::exception_ptr& e : RunInProcRanks(world, [&](int, const std::shared_ptr<Communicator>& comm) {
         TrainRank(graph, dir, delay_ms, comm, shard);
       }))
    if (e) std::rethrow_exception(e);
}

void RunChildIfAsked() {
  const char* cfg = std::getenv(kChildVar);
  if (!cfg) return;
  // "<graph|eager> <delay ms> <world>[s] <dir>": s, sharded optimizer state
  std::string s(cfg);
  size_t a = s.find(' '), b = s.find(' ', a + 1), c = s.find(' ', b + 1);
  try {
    const std::string world = s.substr(b + 1, c - b - 1);
    TrainChild(s.substr(0, a) == "graph", s.substr(c + 1), std::stoi(s.substr(a + 1, b - a - 1)), std::stoi(world),
               world.back() == 's');
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer child: %s\n", e.what());
    std::fflush(nullptr);
    _exit(1);
  }
  std::fflush(nullptr);
  _exit(0);
}
// The child trains from a test environment's SetUp, after main has started and before any test
// runs, not from a static initialiser: ops are called through their op_kind handles, which are
// other files' static objects (Note [Op kinds]), and the asan stage (strict_init_order) rightly
// reports a read of one from another file's static initialiser.
class ChildIfAsked : public ::testing::Environment {
 public:
  void SetUp() override { RunChildIfAsked(); }
};
::testing::Environment* const kChild = ::testing::AddGlobalTestEnvironment(new ChildIfAsked);

std::string SelfPath() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

// Starts the child; its output goes to dir.log.
pid_t Spawn(bool graph, const std::string& dir, int delay_ms, int world, bool shard) {
  std::string var = std::string(kChildVar) + "=" + (graph ? "graph " : "eager ") + std::to_string(delay_ms) + " " +
                    std::to_string(world) + (shard ? "s " : " ") + dir;
  std::vector<char*> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, kChildVar, sizeof(kChildVar) - 1) != 0) env.push_back(*e);
  env.push_back(&var[0]);
  env.push_back(nullptr);
  std::string self = SelfPath(), log = dir + ".log";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  char* argv[] = {&self[0], nullptr};
  pid_t pid = -1;
  int rc = posix_spawn(&pid, self.c_str(), &fa, nullptr, argv, env.data());
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

std::string ReadText(const std::string& path) {
  auto b = ReadBytes(path);
  return std::string(b.begin(), b.end());
}

// Runs the child to its end; its exit status.
int RunToEnd(bool graph, const std::string& dir, int world, bool shard) {
  pid_t pid = Spawn(graph, dir, 0, world, shard);
  if (pid < 0) return -1;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Every tensor of two checkpoints equal, bit for bit; how many are optimizer slots.
int ExpectSameTensors(const io::Checkpoint& a, const io::Checkpoint& b) {
  EXPECT_EQ(a.tensors.size(), b.tensors.size());
  int optimizer_slots = 0;
  for (size_t i = 0; i < std::min(a.tensors.size(), b.tensors.size()); ++i) {
    EXPECT_EQ(a.tensors[i].first, b.tensors[i].first);
    optimizer_slots += a.tensors[i].first.rfind("optimizer/", 0) == 0;
    const Tensor &x = a.tensors[i].second, &y = b.tensors[i].second;
    EXPECT_EQ(x.nbytes(), y.nbytes());
    if (x.nbytes() == y.nbytes()) {
      EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()), 0) << a.tensors[i].first << " differs";
    }
  }
  return optimizer_slots;
}

// (graph mode, ranks, sharded): one rank, or two in-process ranks of a data-parallel run (Note
// [Checkpoints across ranks] in nn/trainer.h), killed together; sharded, each rank's file holds
// its own optimizer state (Note [Sharded optimizer state] in nn/dist_opt.h).
class TrainerResume : public ::testing::TestWithParam<std::tuple<bool, int, bool>> {};

TEST_P(TrainerResume, KilledAtARandomStepThenResumedEqualsAnUninterruptedRunBitwise) {
  const bool graph = std::get<0>(GetParam());
  const int world = std::get<1>(GetParam());
  const bool shard = std::get<2>(GetParam());
  const int64_t steps = StepsFor(world);
  TempDir tmp;
  const std::string ref = tmp / "ref", run = tmp / "run";
  ASSERT_EQ(RunToEnd(graph, ref, world, shard), 0) << ReadText(ref + ".log");

  std::mt19937 gen(std::random_device{}());
  const int64_t kill_after = 3 + int64_t(gen() % (steps - 12));  // a checkpoint at or after this step, then a random delay
  const int jitter_ms = int(gen() % 25);
  SCOPED_TRACE("killed after the checkpoint of step >= " + std::to_string(kill_after) + " and " +
               std::to_string(jitter_ms) + " ms more");
  pid_t pid = Spawn(graph, run, /*delay_ms=*/8, world, shard);
  ASSERT_GT(pid, 0);
  int status = 0;
  bool exited = false;
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    if (FileExists(run)) {
      auto steps = io::CheckpointDir(run).Steps();
      if (!steps.empty() && steps.back() >= kill_after) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_FALSE(exited) << "the run ended before it could be killed:\n" << ReadText(run + ".log");
  std::this_thread::sleep_for(std::chrono::milliseconds(jitter_ms));
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  char final_name[40];  // the last step's checkpoint
  std::snprintf(final_name, sizeof final_name, "/step-%012lld.ckpt", (long long)steps);
  ASSERT_FALSE(FileExists(run + final_name)) << "killed after the last step: nothing left to resume";
  const int64_t resumed_at = io::CheckpointDir(run).Steps().back();

  ASSERT_EQ(RunToEnd(graph, run, world, shard), 0) << ReadText(run + ".log");
  EXPECT_NE(ReadText(run + ".log").find("resumed at step " + std::to_string(resumed_at)), std::string::npos)
      << ReadText(run + ".log");

  io::Checkpoint a = io::LoadCheckpoint(ref + final_name), b = io::LoadCheckpoint(run + final_name);
  EXPECT_GT(ExpectSameTensors(a, b), 0);
  for (int r = 1; r < world; ++r) {  // each rank's own states
    const std::string rank_file = io::CheckpointDir(ref).RankPathFor(steps, r).substr(ref.size());
    io::Checkpoint ra = io::LoadCheckpoint(ref + rank_file), rb = io::LoadCheckpoint(run + rank_file);
    EXPECT_GT(ra.tensors.size(), 0u);
    const int slots = ExpectSameTensors(ra, rb);
    if (shard) EXPECT_GT(slots, 0) << "rank " << r << "'s file holds its optimizer state";
    else EXPECT_EQ(slots, 0);
    EXPECT_EQ(ra.Meta("run/rank"), double(r));
    EXPECT_EQ(ra.Meta("run/rng_counter_lo"), rb.Meta("run/rng_counter_lo"));
  }
  EXPECT_EQ(a.Meta("run/world"), double(world));
  for (const char* key : {"run/rng_counter_lo", "run/epoch", "run/index", "optimizer/adam_steps", "run/best_top1"})
    EXPECT_EQ(a.Meta(key), b.Meta(key)) << key;
  EXPECT_EQ(a.Meta("run/step"), double(steps));
  EXPECT_GT(a.Meta("run/rng_counter_lo"), 0);  // dropout drew numbers

  // The log holds every row once with the same values as an uninterrupted run's, but for the
  // timing columns (seconds, ms_per_step, items_per_s).
  auto rows = [](const std::string& csv) {
    std::vector<std::string> out;
    std::istringstream in(ReadText(csv));
    std::string line;
    while (std::getline(in, line)) {
      std::vector<std::string> cells;
      std::istringstream row(line);
      for (std::string cell; std::getline(row, cell, ',');) cells.push_back(cell);
      cells.resize(10);
      out.push_back(cells[0] + "," + cells[1] + "," + cells[3] + "," + cells[4] + "," + cells[7] + "," + cells[8] +
                    "," + cells[9]);
    }
    return out;
  };
  EXPECT_EQ(rows(ref + "/log.csv"), rows(run + "/log.csv"));
}

std::string ResumeName(const ::testing::TestParamInfo<std::tuple<bool, int, bool>>& p) {
  return std::string(std::get<0>(p.param) ? "Graph" : "Eager") + (std::get<1>(p.param) == 1 ? "" : "TwoRanks") +
         (std::get<2>(p.param) ? "Sharded" : "");
}
INSTANTIATE_TEST_SUITE_P(Modes, TrainerResume,
                         ::testing::Combine(::testing::Values(false, true), ::testing::Values(1, 2),
                                            ::testing::Values(false)),
                         ResumeName);
INSTANTIATE_TEST_SUITE_P(Sharded, TrainerResume,
                         ::testing::Combine(::testing::Values(false, true), ::testing::Values(2), ::testing::Values(true)),
                         ResumeName);

// ---- a NaN at step k ----

class TrainerNonFinite : public ::testing::TestWithParam<bool> {};

TEST_P(TrainerNonFinite, ANaNAtStepKStopsWithNonFiniteErrorNamingKAndTheLastGoodCheckpointLoads) {
  const bool graph = GetParam();
  TempDir tmp;
  for (int64_t k : {10, 13}) {  // found at a checkpoint point (12) and at a log point (14)
    SCOPED_TRACE("NaN at step " + std::to_string(k));
    const std::string dir = tmp / ("k" + std::to_string(k));
    TrainRun run(graph);
    io::DataLoaderOptions o = TrainOptions();
    const int64_t bpe = kSamples / kBatch;
    o.transform = [k, bpe](io::HostBatch& b) {  // step k reads batch k - 1
      if (b.epoch * bpe + b.index + 1 == k) b.x[5] = std::nanf("");
    };
    io::DataLoader train(Images(kSamples, 1), o);
    nn::TrainerOptions t;
    t.epochs = kEpochs;
    t.log_every = 7;
    t.checkpoint_every = 4;
    t.keep_last = 10;
    t.checkpoint_dir = dir;
    t.progress = false;
    t.verbose = false;
    nn::Trainer trainer(*run.model, train, nullptr, t);
    try {
      trainer.Fit();
      FAIL() << "no NonFiniteError";
    } catch (const nn::NonFiniteError& e) {
      EXPECT_EQ(e.step(), k) << e.what();
      EXPECT_NE(std::string(e.what()).find("at step " + std::to_string(k)), std::string::npos) << e.what();
      io::CheckpointDir d(dir);
      const int64_t good = (k - 1) / 4 * 4;  // the newest checkpoint step before k
      EXPECT_EQ(e.last_good_checkpoint(), d.PathFor(good));
      EXPECT_EQ(d.Steps().back(), good);  // nothing saved at or after k
    }
    // The last good checkpoint loads into a fresh model, and its weights are finite.
    TrainRun fresh(graph);
    io::DataLoader train2(Images(kSamples, 1), TrainOptions());
    nn::Trainer again(*fresh.model, train2, nullptr, t);
    const int64_t good = (k - 1) / 4 * 4;
    again.Restore(io::CheckpointDir(dir).PathFor(good));
    EXPECT_EQ(again.step(), good);
    EXPECT_EQ(train2.position().index, good);
    for (auto& p : fresh.model->Params()) {
      std::vector<float> values = p.second.ToVector<float>();
      for (float v : values) ASSERT_TRUE(std::isfinite(v)) << p.first;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, TrainerNonFinite, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Graph" : "Eager"; });

TEST(StepMonitor, CountsStepsAndKeepsTheFirstNonFiniteOne) {
  auto dev = CpuDevice();
  Tensor w = ops::Ones({3}, DType::kFloat32, dev);
  nn::StepMonitor m(dev, {{"w", w}}, /*use_graph=*/true);
  auto loss = [&](float v) { return ops::FromVector(std::vector<float>{v}, {}, dev); };
  m.Record(loss(1));
  m.Record(loss(2));
  auto r = m.Read();
  EXPECT_EQ(r.steps, 2);
  EXPECT_EQ(r.first_bad, 0);
  EXPECT_EQ(r.loss_sum, 3.0);
  w.CopyFrom(std::vector<float>{1, INFINITY, 1});  // a parameter, not the loss
  m.Record(loss(1));
  w.CopyFrom(std::vector<float>{1, 1, 1});
  m.Record(loss(NAN));
  r = m.Read();
  EXPECT_EQ(r.steps, 4);
  EXPECT_EQ(r.first_bad, 3);  // the first one stays
  m.SetSteps(10);
  m.Record(loss(1));
  r = m.Read();
  EXPECT_EQ(r.steps, 11);
  EXPECT_EQ(r.first_bad, 0);
}

// ---- the pieces ----

TEST(RunState, MetadataRoundTripsEvery64BitValueExactly) {
  nn::RunState s;
  s.step = 123456789;
  s.position = {7, 42};
  s.loader_seed = 0xfedcba9876543210ull;
  s.augment_seed = 0xffffffffffffffffull;
  s.rng_seed = 1;
  s.rng_counter = (1ull << 60) + 3;  // beyond a double's 53 bits
  s.best_top1 = 0.875;
  s.best_step = 99;
  s.seconds = 12.5;
  s.loss_sum = 2.5;
  s.losses = 3;
  nn::RunState t = nn::RunState::FromMeta(s.ToMeta(), "test");
  EXPECT_EQ(t.loss_sum, 2.5);
  EXPECT_EQ(t.losses, 3);
  EXPECT_EQ(t.step, s.step);
  EXPECT_EQ(t.position.epoch, 7);
  EXPECT_EQ(t.position.index, 42);
  EXPECT_EQ(t.loader_seed, s.loader_seed);
  EXPECT_EQ(t.augment_seed, s.augment_seed);
  EXPECT_EQ(t.rng_counter, s.rng_counter);
  EXPECT_EQ(t.best_top1, 0.875);
  auto meta = s.ToMeta();
  meta.erase("run/rng_seed_lo");
  EXPECT_THROW(nn::RunState::FromMeta(meta, "x.ckpt"), IOError);
  meta = s.ToMeta();
  meta["run/step"] = 1.5;
  EXPECT_THROW(nn::RunState::FromMeta(meta, "x.ckpt"), IOError);
}

TEST(RunState, ARunWithAnotherLoaderSeedIsRefused) {
  auto dev = CpuDevice();
  io::DataLoader loader(Images(16, 1), TrainOptions());
  nn::RunState s = nn::CaptureRunState(5, loader, *dev);
  io::DataLoaderOptions other = TrainOptions();
  other.augment_seed = 6;
  io::DataLoader loader2(Images(16, 1), other);
  EXPECT_THROW(nn::ApplyRunState(s, loader2, *dev, "x.ckpt"), IOError);
}

TEST(RunState, ARunWithAnotherBatchSizeIsRefused) {
  // The position counts batches: resumed with batch_size 8, batch 2 of a run of batch_size 4 is
  // other samples (issue 36: it resumed silently).
  auto dev = CpuDevice();
  io::DataLoaderOptions o = TrainOptions();
  o.batch_size = 4;
  io::DataLoader loader(Images(16, 1), o);
  loader.Seek(0, 2);
  nn::RunState s = nn::CaptureRunState(5, loader, *dev);
  EXPECT_EQ(nn::RunState::FromMeta(s.ToMeta(), "x.ckpt").batch_size, 4);
  o.batch_size = 8;
  io::DataLoader loader2(Images(16, 1), o);
  LOOM_EXPECT_THROW_MSG(nn::ApplyRunState(s, loader2, *dev, "x.ckpt"), IOError,
                        "[trainer] 'x.ckpt' was saved by a run whose loader had batch_size 4; this loader has 8");
  // A checkpoint from before the batch size was saved still resumes.
  auto meta = s.ToMeta();
  meta.erase("run/batch_size");
  nn::ApplyRunState(nn::RunState::FromMeta(meta, "old.ckpt"), loader2, *dev, "old.ckpt");
  EXPECT_EQ(loader2.position().index, 2);
}

TEST(CheckpointDir, KeepsTheNewestKAndTheBestAndIgnoresOtherFiles) {
  TempDir tmp;
  io::CheckpointDir d(tmp / "a/b", 2);
  auto t = ops::Ones({2}, DType::kFloat32, CpuDevice());
  for (int64_t s : {3, 6, 9, 12}) d.Save(s, {{"t", t}}, {});
  d.SaveBest({{"t", t}}, {});
  WriteBytes(d.PathFor(15) + ".tmp.123", {1, 2});  // what a save killed midway leaves
  WriteBytes(tmp / "a/b/step-x.ckpt", {1});
  EXPECT_EQ(d.Steps(), (std::vector<int64_t>{9, 12}));
  EXPECT_EQ(d.Latest(), d.PathFor(12));
  EXPECT_EQ(d.LatestBefore(12), d.PathFor(9));
  EXPECT_EQ(d.LatestBefore(9), "");
  EXPECT_TRUE(FileExists(d.BestPath()));
  EXPECT_THROW(io::CheckpointDir(tmp / "c", 0), ValueError);
}

TEST(ProgressBar, StaysQuietWhenTheStreamIsNotATerminal) {
  std::FILE* f = std::tmpfile();
  {
    nn::ProgressBar bar(10, f);
    EXPECT_FALSE(bar.drawing());
    bar.Update(5, "loss 1");
    bar.Print("a line");
    bar.Update(10, "loss 0.5");
  }
  std::rewind(f);
  char buf[256] = {};
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  EXPECT_EQ(std::string(buf, n), "a line\n");
}

TEST(Trainer, RefusesAFolderHoldingAnotherRunUnlessResuming) {
  TempDir tmp;
  TrainRun run(false);
  io::DataLoader train(Images(kSamples, 1), TrainOptions());
  nn::TrainerOptions t;
  t.max_steps = 2;
  t.checkpoint_dir = tmp.path();
  t.progress = t.verbose = false;
  nn::Trainer(*run.model, train, nullptr, t).Fit();
  EXPECT_THROW(nn::Trainer(*run.model, train, nullptr, t).Fit(), ValueError);
  t.resume = true;
  t.max_steps = 3;
  EXPECT_EQ(nn::Trainer(*run.model, train, nullptr, t).Fit().resumed_from, 2);
}

// Note [Checkpoints across ranks]: `max_steps` steps of two in-process ranks in `dir`; each
// rank's exception, if any.
std::vector<std::exception_ptr> TwoRanks(const std::string& dir, int64_t max_steps, bool resume) {
  return RunInProcRanks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    TrainRun run(false, comm);
    io::DataLoaderOptions o = TrainOptions();
    o.device = run.dev;
    o.shard_rank = rank;
    o.shard_world = 2;
    io::DataLoader train(Images(kSamples, 1), o);
    nn::TrainerOptions t;
    t.epochs = 3;  // 6 steps an epoch on each rank
    t.max_steps = max_steps;
    t.checkpoint_every = 2;
    t.checkpoint_dir = dir;
    t.resume = resume;
    t.progress = t.verbose = false;
    nn::Trainer(*run.model, train, nullptr, t).Fit();
  });
}

TEST(TrainerRanks, ACheckpointOfTwoRanksIsRefusedByAnotherWorldSize) {
  TempDir tmp;
  for (const auto& e : TwoRanks(tmp.path(), 4, false)) ASSERT_FALSE(e);
  EXPECT_TRUE(FileExists(io::CheckpointDir(tmp.path()).RankPathFor(4, 1)));
  TrainRun one(false);
  io::DataLoader train(Images(kSamples, 1), TrainOptions());
  nn::TrainerOptions t;
  t.max_steps = 6;
  t.checkpoint_dir = tmp.path();
  t.resume = true;
  t.progress = t.verbose = false;
  LOOM_EXPECT_THROW_MSG(nn::Trainer(*one.model, train, nullptr, t).Fit(), IOError,
                        "was written by a run of 2 rank(s); this run has 1: resume it with 2");
}

TEST(TrainerRanks, ARankThatCannotWriteItsFileFailsEveryRankWithoutAHang) {
  TempDir tmp;
  // A folder where rank 1's file of step 2 would go: its atomic rename fails.
  io::CheckpointDir dir(tmp.path());
  ASSERT_EQ(::mkdir(dir.RankPathFor(2, 1).c_str(), 0755), 0);
  std::vector<std::exception_ptr> errors = TwoRanks(tmp.path(), 4, false);
  ASSERT_TRUE(errors[0] && errors[1]);
  // Rank 0 learns of rank 1's failure from the agreement (IOError), or, when rank 1 has already
  // left, from the in-process group, which fails the collective still under way (CommError):
  // either names rank 1 and its reason.
  try {
    std::rethrow_exception(errors[0]);
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(m.find("writing the rank checkpoints failed on rank(s) 1 of 2") != std::string::npos ||
                (m.find("rank 1 failed") != std::string::npos && m.find("cannot write") != std::string::npos))
        << m;
  }
  EXPECT_THROW(std::rethrow_exception(errors[1]), IOError);
  EXPECT_TRUE(io::CheckpointDir(tmp.path()).Steps().empty());  // rank 0 wrote no incomplete checkpoint
}

TEST(TrainerRanks, PruningTakesTheRankFilesOfPrunedSteps) {
  TempDir tmp;
  for (const auto& e : TwoRanks(tmp.path(), 10, false)) ASSERT_FALSE(e);
  io::CheckpointDir dir(tmp.path());
  EXPECT_EQ(dir.Steps(), (std::vector<int64_t>{6, 8, 10}));  // keep_last 3
  for (int64_t step : {2, 4}) EXPECT_FALSE(FileExists(dir.RankPathFor(step, 1))) << step;
  for (int64_t step : {6, 8, 10}) EXPECT_TRUE(FileExists(dir.RankPathFor(step, 1))) << step;
  // And a resume continues from step 10 on both ranks.
  for (const auto& e : TwoRanks(tmp.path(), 12, true)) ASSERT_FALSE(e);
  EXPECT_EQ(io::CheckpointDir(tmp.path()).Steps().back(), 12);
}

TEST(Trainer, NeverOverwritesAnotherRunsBestCheckpoint) {
  // A folder holding only another run's best.ckpt (its step checkpoints removed): a new run, or a
  // "resume" with nothing to resume from, would overwrite it with its own first evaluation.
  TempDir tmp;
  TrainRun run(false);
  io::DataLoader train(Images(kSamples, 1), TrainOptions());
  io::CheckpointDir dir(tmp.path());
  dir.SaveBest({{"t", ops::Ones({2}, DType::kFloat32, CpuDevice())}}, {});
  const std::vector<uint8_t> before = ReadBytes(dir.BestPath());
  EXPECT_EQ(dir.Existing(), dir.BestPath());
  nn::TrainerOptions t;
  t.max_steps = 2;
  t.checkpoint_dir = tmp.path();
  t.progress = t.verbose = false;
  LOOM_EXPECT_THROW_MSG(nn::Trainer(*run.model, train, nullptr, t).Fit(), ValueError, "best.ckpt");
  t.resume = true;
  LOOM_EXPECT_THROW_MSG(nn::Trainer(*run.model, train, nullptr, t).Fit(), ValueError,
                        "but no step checkpoint to resume from");
  EXPECT_EQ(ReadBytes(dir.BestPath()), before);
}

TEST(TrainingLog, AResumedLogKeepsTheWholeRowsUpToItsStep) {
  TempDir tmp;
  const std::string path = tmp / "log.csv";
  {
    nn::TrainingLog log(path, 0);
    log.Train(2, 0.5, 1.0, 0.1, 2.5, 10, 100);
    nn::EvalResult r;
    r.loss = 1.5;
    r.top1 = 0.25;
    r.top5 = 0.75;
    log.Eval(4, 1.0, 2.0, r);
    log.Train(4, 1.0, 2.0, 0.1, 1.25, 10, 100);
    log.Train(6, 1.5, 3.0, 0.1, 1.0, 10, 100);
  }
  std::vector<uint8_t> bytes = ReadBytes(path);
  for (char c : std::string("3,0.7500,1"))  // half a row (as a run killed mid-write leaves) of an early step
    bytes.push_back(uint8_t(c));
  WriteBytes(path, bytes);
  { nn::TrainingLog resumed(path, 4); }
  auto text = ReadBytes(path);
  EXPECT_EQ(std::string(text.begin(), text.end()),
            std::string(nn::TrainingLog::Header()) +
                "2,0.5000,1.000,0.1,2.5,10,100,,,\n"
                "4,1.0000,2.000,,,,,1.5,0.25,0.75\n"
                "4,1.0000,2.000,0.1,1.25,10,100,,,\n");
}

TEST(Trainer, RefusesBadOptions) {
  TrainRun run(false);
  io::DataLoader train(Images(kSamples, 1), TrainOptions());
  nn::TrainerOptions t;
  t.log_every = 0;
  EXPECT_THROW(nn::Trainer(*run.model, train, nullptr, t), ValueError);
  t = {};
  t.resume = true;
  EXPECT_THROW(nn::Trainer(*run.model, train, nullptr, t), ValueError);
}

}  // namespace
}  // namespace test
}  // namespace loom
