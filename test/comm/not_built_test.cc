// A build without MPI (LOOM_USE_MPI=OFF, or MPI not installed) still builds, and asking for a
// communicator says what to install. Registered only in such builds (CMakeLists.txt).
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "io/comm/comm.h"

namespace loom {
namespace test {
namespace {

TEST(CommWithoutMpi, FactorySaysWhatToInstall) {
  if (MpiBuilt()) GTEST_SKIP() << "this build has MPI: ctest runs test_comm_mpi_* and test_comm_failure instead";
  EXPECT_FALSE(NcclBuilt());
  for (const char* backend : {"mpi", "auto", "nccl"}) {
    try {
      MakeCommunicator(backend);
      ADD_FAILURE() << backend << ": no error";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("libopenmpi-dev"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(AbortAllRanks("nothing to abort"));
}

}  // namespace
}  // namespace test
}  // namespace loom
