// --dist in loom's programs (issue 15, Note [--dist in the programs] in examples/common/dist.h):
// loom-mlp and loom-cnn started as 2 MPI ranks through the launcher, as users start them
// (launch.py, which tools/launch.sh runs, copied beside the Python package in the build folder),
// against the same program on one rank. Each test starts its own mpirun; the DistPrograms suite
// is not part of the tests that ctest runs under mpirun itself (test_dist_mpi_2ranks).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "common/programs.h"
#include "io/comm/comm.h"
#include "io/comm/simulated.h"

namespace loom {
namespace test {
namespace {

bool Has(const std::string& out, const std::string& s) { return out.find(s) != std::string::npos; }

// 2 ranks of `program args` through the launcher, one thread each. mpirun forwards the ranks'
// stdout and stderr separately, in chunks, so a merged stream can cut a line of one with a chunk
// of the other: `out` is stdout alone, then (after a marker line) stderr.
ProgramRun LaunchTwo(const std::string& program, const std::string& args) {
  static int calls = 0;  // ctest runs the tests of this file in parallel processes: a name per process and call
  const std::string err = ::testing::TempDir() + "loom_dist_programs_" + std::to_string(::getpid()) + "_" +
                          std::to_string(++calls) + ".txt";
  ProgramRun r = RunProgram("( /usr/bin/python3 " + ProgramPath("python/loom/launch.py") + " -n 2 --threads 1 -- " +
                                ProgramPath(program),
                            args + " 2>" + err + " )");
  std::ifstream f(err);
  std::stringstream text;
  text << f.rdbuf();
  r.out += "\n---- stderr ----\n" + text.str();
  std::remove(err.c_str());
  return r;
}

// The number after `"key": ` in the last JSON line of `out` (NaN when absent); a program's stdout
// comes first in `out` (LaunchTwo).
double JsonNumber(const std::string& out, const std::string& key) {
  size_t line = std::string::npos;
  for (size_t at = 0; at < out.size(); at = out.find('\n', at) + 1) {
    if (out.compare(at, 2, "{\"") == 0) line = at;
    if (out.find('\n', at) == std::string::npos) break;
  }
  const size_t at = line == std::string::npos ? line : out.find("\"" + key + "\": ", line);
  if (at == std::string::npos) return std::nan("");
  return std::strtod(out.c_str() + at + key.size() + 4, nullptr);
}

#define SKIP_WITHOUT_MPI()                                                                                        \
  if (!MpiBuilt()) GTEST_SKIP() << "loom was built without MPI, so --dist cannot run (test_comm_mpi_NOT_FOUND " \
                                   "says what to install)"

// A sanitizer build folder (tools/test.sh asan, tsan) makes the test executables and loom-bench
// only, without the Python module: the launcher and the example programs are not there. Those
// tests run in the release build (the cpp stage); here they say why they skip.
#define SKIP_WITHOUT_PROGRAMS(program)                                                                            \
  if (::access(ProgramPath("python/loom/launch.py").c_str(), F_OK) != 0 || !ProgramBuilt(ProgramPath(program))) \
  GTEST_SKIP() << program << " or the launcher (python/loom/launch.py) is not built in this build folder "       \
               << "(a sanitizer build makes only the tests and loom-bench; the release build runs this test)"

// 2 ranks at global batch 32 take the steps of 1 rank at batch 32: the first loss is the same
// global batch's (the shards are the right rows), the last one is the same training (gradients
// averaged, not summed), to float32's rounding of the sums in another order; in eager mode and
// in serial and parallel replay (buckets all-reduced during backward).
TEST(DistPrograms, MlpTwoRanksTrainLikeOneRank) {
  SKIP_WITHOUT_MPI();
  SKIP_WITHOUT_PROGRAMS("loom-mlp");
  for (const std::string mode : {"", "--graph", "--graph --parallel"}) {
    const std::string args = "--batch 32 --steps 8 --lr 0.05 --print-every 4 --json " + mode;
    const ProgramRun one = RunProgram(ProgramPath("loom-mlp"), "--threads 1 " + args);
    const ProgramRun two = LaunchTwo("loom-mlp", "--dist " + args);
    ASSERT_EQ(one.exit_code, 0) << one.out;
    ASSERT_EQ(two.exit_code, 0) << two.out;
    EXPECT_TRUE(Has(two.out, "parameters: bitwise the same on all 2 ranks")) << two.out;
    EXPECT_EQ(JsonNumber(two.out, "ranks"), 2) << two.out;
    EXPECT_EQ(JsonNumber(two.out, "batch_per_rank"), 16) << two.out;
    for (const char* key : {"first_loss", "last_loss"}) {
      const double a = JsonNumber(one.out, key), b = JsonNumber(two.out, key);
      EXPECT_LE(std::abs(a - b), 1e-5 * std::abs(a)) << mode << ": " << key << " " << a << " (1 rank) vs " << b
                                                     << " (2 ranks)\n" << two.out;
    }
    EXPECT_GT(std::abs(JsonNumber(one.out, "first_loss") - JsonNumber(one.out, "last_loss")), 0.05) << one.out;
  }
}

// The small CNN: BatchNorm uses each rank's batch statistics, so 2 ranks are not 1 rank; but
// eager and replay agree (docs/design.md invariant 5), and the ranks end with the same parameters.
TEST(DistPrograms, CnnTwoRanksEagerAndGraphAgree) {
  SKIP_WITHOUT_MPI();
  SKIP_WITHOUT_PROGRAMS("loom-cnn");
  const std::string args = "--dist --batch 16 --steps 4 --lr 0.01 --json";
  const ProgramRun eager = LaunchTwo("loom-cnn", args + " --eager");
  const ProgramRun graph = LaunchTwo("loom-cnn", args + " --graph");
  for (const ProgramRun* r : {&eager, &graph}) {
    ASSERT_EQ(r->exit_code, 0) << r->out;
    EXPECT_TRUE(Has(r->out, "parameters: bitwise the same on all 2 ranks")) << r->out;
    EXPECT_TRUE(Has(r->out, "data-parallel: 2 ranks, 8 samples per rank per step")) << r->out;
  }
  const double a = JsonNumber(eager.out, "train_loss"), b = JsonNumber(graph.out, "train_loss");
  EXPECT_LE(std::abs(a - b), 1e-4 * std::abs(a)) << eager.out << graph.out;
}

// --shard (Note [Sharded optimizer state]): the same training as without it, in both modes.
TEST(DistPrograms, CnnTwoShardedRanksTrainAsUnsharded) {
  SKIP_WITHOUT_MPI();
  SKIP_WITHOUT_PROGRAMS("loom-cnn");
  for (const char* mode : {" --eager", " --graph"}) {
    const std::string args = std::string("--dist --batch 16 --steps 4 --lr 0.01 --json") + mode;
    const ProgramRun plain = LaunchTwo("loom-cnn", args);
    const ProgramRun sharded = LaunchTwo("loom-cnn", args + " --shard");
    ASSERT_EQ(sharded.exit_code, 0) << sharded.out;
    EXPECT_TRUE(Has(sharded.out, "parameters: bitwise the same on all 2 ranks")) << sharded.out;
    const double a = JsonNumber(plain.out, "train_loss"), b = JsonNumber(sharded.out, "train_loss");
    EXPECT_LE(std::abs(a - b), 1e-5 * std::abs(a)) << mode << plain.out << sharded.out;
  }
  const ProgramRun alone = RunProgram(ProgramPath("loom-cnn"), "--shard --steps 1");
  EXPECT_EQ(alone.exit_code, 2) << alone.out;
  EXPECT_TRUE(Has(alone.out, "--shard needs --dist")) << alone.out;
}

// A global batch that does not divide between the ranks is refused, naming both.
TEST(DistPrograms, IndivisibleBatchIsRefused) {
  SKIP_WITHOUT_MPI();
  SKIP_WITHOUT_PROGRAMS("loom-mlp");
  const ProgramRun r = LaunchTwo("loom-mlp", "--dist --batch 33 --steps 2");
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "[loom-mlp] --dist: the global batch 33 does not divide into 2 ranks")) << r.out;
}

// All JSON lines of `out` (one run each).
std::vector<std::string> JsonLines(const std::string& out) {
  std::vector<std::string> lines;
  size_t at = 0;
  while ((at = out.find("{\"tool\"", at)) != std::string::npos) {
    const size_t end = out.find('\n', at);
    lines.push_back(out.substr(at, end - at));
    at = end;
  }
  return lines;
}

std::string JsonText(const std::string& line, const std::string& key) {
  const size_t at = line.find("\"" + key + "\": \"");
  if (at == std::string::npos) return "";
  const size_t b = at + key.size() + 5;
  return line.substr(b, line.find('"', b) - b);
}

// loom-bench --simulate-ranks: rank 0 of 4 on a modelled link. The statistics are the model's
// numbers for the graph's buckets (no clock is read): the MLP's gradients, each padded to 64
// bytes, in a 1 MiB first bucket and one more.
TEST(DistPrograms, BenchSimulatedRanksReportTheModelledCommunication) {
  if (!ProgramBuilt(ProgramPath("loom-bench")))
    GTEST_SKIP() << "loom-bench is not built in this build folder (the tsan stage builds only the tests; the "
                 << "release build runs this test)";
  const ProgramRun r =
      RunProgram(ProgramPath("loom-bench"), "--model mlp --mode graph-parallel --simulate-ranks 1,4 --link-gbps 10 "
                                            "--latency-us 5 --steps 3 --warmup 1 --threads 1 --peak-gflops 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::vector<std::string> runs = JsonLines(r.out);
  ASSERT_EQ(runs.size(), 2u) << r.out;
  EXPECT_EQ(JsonText(runs[0], "communicator"), "none");
  EXPECT_EQ(JsonNumber(runs[0], "ranks"), 1);
  EXPECT_EQ(JsonNumber(runs[0], "scaling_efficiency"), 1);
  EXPECT_EQ(JsonText(runs[1], "communicator"), "simulated");
  EXPECT_EQ(JsonNumber(runs[1], "ranks"), 4);
  EXPECT_EQ(JsonNumber(runs[1], "global_batch"), 4 * 64);
  const double padded = 784 * 1024 * 4 + 1024 * 4 + 1024 * 1024 * 4 + 1024 * 4 + 1024 * 10 * 4 + 64;
  const SimulatedLink link{4, 10, 5};
  EXPECT_EQ(JsonNumber(runs[1], "allreduces_per_step"), 2);
  EXPECT_EQ(JsonNumber(runs[1], "comm_bytes_per_step"), padded);
  const double ms = 1e3 * (RingAllReduceSeconds(1 << 20, link) + RingAllReduceSeconds(padded - (1 << 20), link));
  EXPECT_NEAR(JsonNumber(runs[1], "comm_modelled_ms_per_step"), ms, 1e-3) << runs[1];
  EXPECT_TRUE(Has(r.out, "Data-parallel scaling, SIMULATED")) << r.out;
}

// loom-bench --dist on 2 ranks: each mode compute-only and over MPI, reported by rank 0 alone.
TEST(DistPrograms, BenchOnTwoRanksReportsFromRankZero) {
  SKIP_WITHOUT_MPI();
  SKIP_WITHOUT_PROGRAMS("loom-bench");
  const ProgramRun r = LaunchTwo("loom-bench", "--model mlp --mode eager,graph-parallel --dist --batch 32 --steps 3 "
                                               "--warmup 1 --peak-gflops 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::vector<std::string> runs = JsonLines(r.out);
  ASSERT_EQ(runs.size(), 4u) << r.out;  // rank 1 prints nothing
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(JsonText(runs[i], "communicator"), i % 2 ? "mpi" : "none") << runs[i];
    EXPECT_EQ(JsonNumber(runs[i], "ranks"), 2) << runs[i];
    EXPECT_EQ(JsonNumber(runs[i], "batch_per_rank"), 16) << runs[i];
    EXPECT_EQ(JsonNumber(runs[i], "global_batch"), 32) << runs[i];
    EXPECT_EQ(JsonNumber(runs[i], "threads"), 1) << "the launcher's share of the cores: " << runs[i];
  }
  EXPECT_TRUE(Has(r.out, "Data-parallel over MPI (measured)")) << r.out;
}

// tools/comm_bench on 2 ranks: a line per collective and size, sizes growing by --factor in
// multiples of the ranks' slots, each repetition from cold caches unless --warm, and the ring
// model's fit last, with the flags loom-bench takes; bad flags exit 2.
TEST(DistPrograms, CommBenchTimesEachCollectiveAndFitsTheRing) {
  SKIP_WITHOUT_MPI();
  SKIP_WITHOUT_PROGRAMS("comm_bench");
  for (const std::string caches : {"cold", "warm"}) {
    const ProgramRun r = LaunchTwo("comm_bench", "--max-mib 0.0625 --factor 2 --reps 3" +
                                                     std::string(caches == "warm" ? " --warm" : ""));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    std::vector<std::string> lines;  // rank 0's JSON lines
    std::istringstream in(r.out.substr(0, r.out.find("---- stderr ----")));
    for (std::string l; std::getline(in, l);)
      if (l.rfind("{\"", 0) == 0) lines.push_back(l);
    ASSERT_EQ(lines.size(), 3u * 14 + 1) << r.out;  // 8 B to 64 KiB: 14 sizes, 3 collectives each
    double last = 0;
    for (size_t i = 0; i + 1 < lines.size(); ++i) {
      const std::string& l = lines[i];
      EXPECT_EQ(JsonText(l, "collective"), i % 3 == 0 ? "allreduce" : i % 3 == 1 ? "reducescatter" : "allgather");
      EXPECT_EQ(JsonText(l, "caches"), caches) << l;
      const double bytes = JsonNumber(l, "bytes");
      EXPECT_EQ(std::fmod(bytes, 8), 0) << l;  // 2 float32 slots
      if (i % 3 == 0) {
        EXPECT_EQ(bytes, last ? 2 * last : 8) << l;
        last = bytes;
      }
      EXPECT_GT(JsonNumber(l, "median_us"), 0) << l;
    }
    EXPECT_EQ(last, 65536);
    const std::string& fit = lines.back();
    EXPECT_TRUE(Has(fit, "\"fit\": \"ring all-reduce")) << fit;
    EXPECT_GT(JsonNumber(fit, "link_gbps"), 0) << fit;
    EXPECT_GE(JsonNumber(fit, "latency_us"), 0) << fit;
    EXPECT_TRUE(Has(fit, "\"loom_bench_flags\": \"--link-gbps ")) << fit;
  }
  const ProgramRun bad = RunProgram(ProgramPath("comm_bench"), "--factor 1");
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_TRUE(Has(bad.out, "--factor must lie in [1.1, 16]")) << bad.out;
}

// loom-bench --dist --shard --predict-ranks: a third variant per mode keeps half the optimizer
// state (Note [Sharded optimizer state]), and the graph runs predict their step from their own
// profiled replay, with the error against their measurement and the predictions at other rank
// counts (Note [Predicting a data-parallel step]).
TEST(DistPrograms, BenchShardsAndPredictsOnTwoRanks) {
  SKIP_WITHOUT_MPI();
  SKIP_WITHOUT_PROGRAMS("loom-bench");
  // A measured table (tools/comm_bench's lines) in which a 2-rank all-reduce, reduce-scatter or
  // gather of any size takes 0.1 s: the table's prediction holds 0.1 s per collective.
  const std::string table = ::testing::TempDir() + "loom_link_table_" + std::to_string(::getpid()) + ".json";
  {
    std::ofstream t(table);
    for (const char* kind : {"allreduce", "reducescatter", "allgather"})
      for (double bytes : {8.0, 1e9})
        t << "{\"collective\": \"" << kind << "\", \"ranks\": 2, \"bytes\": " << bytes << ", \"median_us\": 100000}\n";
  }
  const ProgramRun r = LaunchTwo("loom-bench", "--model mlp --mode eager,graph-planned --dist --shard --batch 32 "
                                               "--steps 3 --warmup 1 --peak-gflops 1 --predict-ranks 1,4,512 --json "
                                               "--link-table " + table);
  std::remove(table.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::vector<std::string> runs = JsonLines(r.out);
  ASSERT_EQ(runs.size(), 6u) << r.out;  // per mode: compute only, 2 ranks, 2 ranks sharded
  for (size_t m = 0; m < 2; ++m) {
    const std::string &plain = runs[3 * m + 1], &sharded = runs[3 * m + 2];
    EXPECT_EQ(JsonText(sharded, "communicator"), "mpi");
    EXPECT_TRUE(Has(sharded, "\"sharded_optimizer_state\": true")) << sharded;
    EXPECT_TRUE(Has(plain, "\"sharded_optimizer_state\": false")) << plain;
    const double ratio = JsonNumber(sharded, "optimizer_state_bytes") / JsonNumber(plain, "optimizer_state_bytes");
    EXPECT_GT(ratio, 0.45);
    EXPECT_LE(ratio, 0.55);
  }
  for (size_t i : {4, 5}) {  // graph-planned over MPI: predicted, with the error and other rank counts
    const std::string& run = runs[i];
    EXPECT_GT(JsonNumber(run, "predicted_ms_per_step"), JsonNumber(run, "predicted_compute_ms_per_step")) << run;
    EXPECT_NEAR(JsonNumber(run, "prediction_error"),
                JsonNumber(run, "predicted_ms_per_step") / JsonNumber(run, "ms_per_step_median") - 1, 1e-3)
        << run;
    EXPECT_TRUE(Has(run, "\"predictions\": [{\"ranks\": 1, ")) << run;
    // The plain run all-reduces its buckets, the sharded one reduce-scatters and gathers each:
    // at least 0.1 s per collective more than the computation.
    const double per = i == 4 ? 100 : 200;
    EXPECT_GT(JsonNumber(run, "predicted_ms_per_step_table"), per) << run;
    EXPECT_NEAR(JsonNumber(run, "prediction_error_table"),
                JsonNumber(run, "predicted_ms_per_step_table") / JsonNumber(run, "ms_per_step_median") - 1, 1e-3);
    EXPECT_TRUE(Has(run, "{\"ranks\": 512, ")) << run;
    // Each collective of the profiled replay, with the table's time, the wait for the slowest
    // rank (Note [Waiting for the slowest rank]) and its time as measured in the replay.
    EXPECT_TRUE(Has(run, i == 4 ? "\"collectives\": [{\"op\": \"allreduce\", " : "\"collectives\": [{\"op\": \"reducescatter\", "))
        << run;
    EXPECT_TRUE(Has(run, "\"table_ms\": 100.0000, \"wait_ms\": ")) << run;
    EXPECT_GE(JsonNumber(run, "predicted_wait_ms"), 0) << run;
    // Note [Ranks sharing cores]: the two ranks on this host, its cores, what sharing them added.
    EXPECT_EQ(JsonNumber(run, "host_ranks"), 2) << run;
    EXPECT_GE(JsonNumber(run, "host_cores"), 1) << run;
    EXPECT_GE(JsonNumber(run, "predicted_shared_cores_ms"), 0) << run;
    EXPECT_GT(JsonNumber(run, "in_replay_ms"), 0) << run;
  }
  EXPECT_FALSE(Has(runs[0], "predicted_ms_per_step")) << "eager runs have no graph to profile";
  EXPECT_TRUE(Has(r.out, "Predicted scaling of graph-planned")) << r.out;
}

}  // namespace
}  // namespace test
}  // namespace loom
