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
  ASSERT_FALSE(MpiBuilt()) << "run only in builds without MPI";
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
