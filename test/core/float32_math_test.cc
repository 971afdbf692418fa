// Note [Float32 math on the GPU] (core/device.h): the process-wide mode, its names and its scope
// guard, without a GPU (the kernels that read it are tested in test/cuda).
#include "common/harness.h"

namespace loom {
namespace test {
namespace {

TEST(Float32Math, NamesRoundTripAndOthersAreTypedErrors) {
  for (Float32Math m : {Float32Math::kTF32, Float32Math::kFull}) EXPECT_EQ(Float32MathFromName(Name(m)), m);
  EXPECT_STREQ(Name(Float32Math::kTF32), "tf32");
  EXPECT_STREQ(Name(Float32Math::kFull), "full");
  LOOM_EXPECT_THROW_MSG(Float32MathFromName("fp32"), ValueError, "'fp32': expected 'tf32'");
  LOOM_EXPECT_THROW_MSG(Float32MathFromName(""), ValueError, "'full' (IEEE float32)");
}

TEST(Float32Math, SetAndScopedRestore) {
  const Float32Math before = CudaFloat32Math();
  {
    ScopedFloat32Math full(Float32Math::kFull);
    EXPECT_EQ(CudaFloat32Math(), Float32Math::kFull);
    {
      ScopedFloat32Math tf32(Float32Math::kTF32);
      EXPECT_EQ(CudaFloat32Math(), Float32Math::kTF32);
    }
    EXPECT_EQ(CudaFloat32Math(), Float32Math::kFull);
  }
  EXPECT_EQ(CudaFloat32Math(), before);
}

}  // namespace
}  // namespace test
}  // namespace loom
