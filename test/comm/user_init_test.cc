// A program that initialises MPI itself (as mpi4py does) is joined as it is: loom neither
// initialises nor finalises MPI again, and refuses a thread level below SERIALIZED with a
// CommError (Note [MPI thread level]). Each case runs in a process of its own, since MPI is
// initialised once per process: MpiUserInit.* start MpiUserInitWorker.Run alone (a 1-rank
// world) or as 2 ranks through tools/launch.sh. Built only with MPI (it calls MPI itself).
#ifdef LOOM_TEST_WITH_MPI
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>

#include "common/harness.h"
#include "common/programs.h"
#include "core/error.h"
#include "io/comm/comm.h"

namespace loom {
namespace test {
namespace {

TEST(MpiUserInitWorker, Run) {
  const char* level_env = std::getenv("LOOM_TEST_USER_INIT");
  if (!level_env) GTEST_SKIP() << "run by the MpiUserInit tests in a process of its own, not on its own";
  const std::string level = level_env;
  int provided = 0;
  ASSERT_EQ(MPI_Init_thread(nullptr, nullptr, level == "funneled" ? MPI_THREAD_FUNNELED : MPI_THREAD_SERIALIZED,
                            &provided),
            MPI_SUCCESS);
  if (level == "funneled") {
    ASSERT_EQ(provided, MPI_THREAD_FUNNELED);
    LOOM_EXPECT_THROW_MSG(MakeCommunicator("mpi"), CommError, "needs MPI_THREAD_SERIALIZED");
  } else {
    auto c = MakeCommunicator("mpi");
    int world = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    EXPECT_EQ(c->size(), world);
    int64_t v = c->rank() + 1;
    c->AllReduce(&v, 1, DType::kInt64, ReduceOp::kSum);
    EXPECT_EQ(v, int64_t(world) * (world + 1) / 2);
    // The program's own traffic on MPI_COMM_WORLD does not mix with loom's (a duplicate).
    int mine = c->rank(), sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(sum, world * (world - 1) / 2);
  }
  // The program finalises; loom's exit handler then finds MPI finalised and leaves it be.
  EXPECT_EQ(MPI_Finalize(), MPI_SUCCESS);
  std::printf("user-init worker done\n");
}

ProgramRun Worker(const std::string& level, int ranks) {
  const std::string self = ProgramPath("test_comm") + " --gtest_filter=MpiUserInitWorker.Run --gtest_color=no";
  const std::string env = "env LOOM_TEST_USER_INIT=" + level + " ";
  return RunProgram(ranks == 1 ? env + self : env + LOOM_SOURCE_DIR "/tools/launch.sh -n 2 -- " + self, "");
}

TEST(MpiUserInit, SerializedIsJoinedAloneAndAsTwoRanks) {
  for (int ranks : {1, 2}) {
    ProgramRun r = Worker("serialized", ranks);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("[  PASSED  ] 1 test"), std::string::npos) << r.out;
  }
}

TEST(MpiUserInit, FunneledIsRefused) {
  ProgramRun r = Worker("funneled", 1);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("[  PASSED  ] 1 test"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace test
}  // namespace loom
#endif  // LOOM_TEST_WITH_MPI
