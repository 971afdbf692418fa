// A rank that fails ends the whole job, non-zero and naming the rank, within a bounded time
// (issue 15, Note [Bounded waits], Note [A failing rank takes the job down]). Each test starts
// 2 ranks of this executable through tools/launch.sh (so mpirun and the launcher are tested as
// users run them); the ranks run MpiFailureWorker.Run, and rank 1 fails in the way the test
// names between two collectives. The only clock is an upper bound on a hang, the 30 s issue 15
// allows, not a speed: a working job ends in a few seconds.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/programs.h"
#include "core/error.h"
#include "io/comm/comm.h"

namespace loom {
namespace test {
namespace {

// What each rank runs. Started only by the tests below (LOOM_TEST_FAILURE_MODE set, gtest's
// exception catching off, so that an exception escapes as it would from a user's main).
TEST(MpiFailureWorker, Run) {
  const char* mode_env = std::getenv("LOOM_TEST_FAILURE_MODE");
  if (!mode_env) GTEST_SKIP() << "run by the MpiFailure tests through tools/launch.sh, not on its own";
  const std::string mode = mode_env;
  auto c = MakeCommunicator("mpi");
  ASSERT_EQ(c->size(), 2);
  float x = 1;
  c->AllReduce(&x, 1, DType::kFloat32, ReduceOp::kSum);
  ASSERT_EQ(x, 2.f);
  if (c->rank() == 1) {
    if (mode == "raise") throw ValueError("[worker] rank 1 raises before the second collective");
    if (mode == "exit") std::exit(3);
    if (mode == "kill") ::raise(SIGKILL);
    if (mode == "hang") std::this_thread::sleep_for(std::chrono::seconds(120));  // killed long before
  }
  c->AllReduce(&x, 1, DType::kFloat32, ReduceOp::kSum);  // rank 0 waits here for rank 1
  EXPECT_EQ(mode, "ok") << "rank " << c->rank() << " passed a collective that rank 1 never reached";
  EXPECT_EQ(x, 4.f);
}

struct JobRun {
  int exit_code;
  std::string out;
  double seconds;
};

JobRun Launch(const std::string& mode) {
  const std::string cmd = "env LOOM_TEST_FAILURE_MODE=" + mode + " LOOM_COMM_TIMEOUT_S=5 " LOOM_SOURCE_DIR
                          "/tools/launch.sh -n 2 -- " + ProgramPath("test_comm") +
                          " --gtest_filter=MpiFailureWorker.Run --gtest_catch_exceptions=0 --gtest_color=no";
  const auto start = std::chrono::steady_clock::now();
  ProgramRun r = RunProgram(cmd, "");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {r.exit_code, r.out, s};
}

bool Has(const std::string& out, const std::string& s) { return out.find(s) != std::string::npos; }

// The bound on a hang (issue 15: "within 30 s"), mpirun's start included: generous for a loaded
// machine, since a failing job ends in a few seconds (the "exit" case: LOOM_COMM_TIMEOUT_S=5).
constexpr double kHangBound = 30;

// Starts the job with rank 1 failing as `mode`: it must end non-zero, within the bound, and say
// every one of `lines`, and the launcher must report the failure.
void ExpectJobFails(const std::string& mode, const std::vector<std::string>& lines) {
  JobRun r = Launch(mode);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_LT(r.seconds, kHangBound) << r.out;
  for (const std::string& line : lines) EXPECT_TRUE(Has(r.out, line)) << "no '" << line << "' in:\n" << r.out;
  EXPECT_TRUE(Has(r.out, "[launch] the job failed")) << r.out;
}

TEST(MpiFailure, HealthyJobSucceeds) {
  JobRun r = Launch("ok");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(Has(r.out, "[launch] the job failed")) << r.out;
}

// An uncaught exception on rank 1 aborts the job at once (the terminate handler), naming the
// rank and the exception, while rank 0 waits in a collective.
TEST(MpiFailure, RankThatRaisesEndsTheJob) {
  ExpectJobFails("raise", {"[comm] rank 1 of 2: uncaught loom::ValueError: [worker] rank 1 raises"});
}

// Rank 1 exits with status 3 (finalising MPI on its way out, as any program does, which waits
// for rank 0): its exit notice reaches rank 0, whose collective gives up with a CommError naming
// rank 1 (Note [Exit notices]), and that CommError, uncaught, aborts the job.
TEST(MpiFailure, RankThatExitsEndsTheJob) {
  ExpectJobFails("exit", {"[comm] rank 0 of 2: uncaught loom::CommError: [mpi] all_reduce (sum of 1 float32) on rank 0 "
                          "of 2: rank 1 of 2 has ended its program while this rank waits for it"});
}

// With no exit notice (rank 1 busy elsewhere for ever), the collective fails after
// LOOM_COMM_TIMEOUT_S, here 5 s.
TEST(MpiFailure, RankThatHangsEndsTheJobAfterTheTimeout) {
  ExpectJobFails("hang", {"[comm] rank 0 of 2: uncaught loom::CommError: [mpi] all_reduce (sum of 1 float32) on rank 0 "
                          "of 2: did not complete within 5 s"});
}

// Rank 1 dies by SIGKILL: mpirun kills the job, and the launcher names the rank and the signal.
TEST(MpiFailure, RankThatDiesEndsTheJob) { ExpectJobFails("kill", {"[launch] rank 1 of 2 was killed by signal 9"}); }

}  // namespace
}  // namespace test
}  // namespace loom
