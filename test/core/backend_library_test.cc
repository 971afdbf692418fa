// core/backend_library.h (Note [Backends loaded on first use]): a backend library that cannot be
// opened, or is not a loom backend, is a DeviceError naming the file and the reason; libloom.so
// knows its own folder, where the backends are looked for first.
#include <unistd.h>

#include "common/harness.h"
#include "core/backend_library.h"
#include "core/device.h"

namespace loom {
namespace test {
namespace {

TEST(BackendLibrary, AMissingLibraryIsADeviceErrorNamingIt) {
  try {
    OpenBackendLibrary("libloom_no_such_backend.so", "loom_no_such_backend", "probe");
    FAIL() << "opened a library that does not exist";
  } catch (const DeviceError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[probe] cannot load libloom_no_such_backend.so: "), std::string::npos) << m;
    EXPECT_NE(m.find("No such file"), std::string::npos) << m;  // the loader's own reason
  }
  EXPECT_FALSE(BackendLibraryOpen("libloom_no_such_backend.so"));
}

TEST(BackendLibrary, ALibraryWithoutTheEntryIsNotABackend) {
  // zlib is loaded already (libloom links it) and has no loom entry.
  try {
    OpenBackendLibrary("libz.so.1", "loom_probe_backend", "probe");
    FAIL() << "took zlib for a backend";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("libz.so.1 has no loom_probe_backend(): not a loom backend library"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(BackendLibraryOpen("libz.so.1"));
}

TEST(BackendLibrary, TheFolderOfLibloomHoldsTheBuiltBackends) {
  const std::string folder = LibraryFolder();
  ASSERT_FALSE(folder.empty());
  EXPECT_EQ(access((folder + "/libloom.so").c_str(), F_OK), 0) << folder;
#ifdef LOOM_WITH_CUDA
  EXPECT_EQ(access((folder + "/libloom_cuda.so").c_str(), F_OK), 0) << folder;
#else
  EXPECT_THROW(LoadCudaBackend(), DeviceError);
  EXPECT_FALSE(CudaAvailable());
  EXPECT_EQ(CudaSetupError(), "");
#endif
}

}  // namespace
}  // namespace test
}  // namespace loom
