// Note [Column sums by slabs] (device/kernel_shapes.h): CUDA's column sums cut long columns into
// slabs. At shapes that take several slabs, sum, max and bias_grad match the CPU (max exactly),
// and bias_act_grad's db is bitwise bias_grad's from the dz it wrote.
#include <string>

#include "common/harness.h"
#include "device/kernel_shapes.h"

namespace loom {
namespace test {
namespace {

TEST(CudaColumnSums, SlabsMatchTheCpu) {
  LOOM_REQUIRE_GPU();
  auto gpu = CudaDevice(0);
  for (const Shape& s : {Shape{4096, 200}, Shape{8192, 96}, Shape{1000, 33}, Shape{3000, 5, 7}}) {
    const int64_t r = s[0], n = NumElements(s) / r;
    const std::string what = ToString(s);
    ASSERT_GT(ColumnSlabsOf(r, (n + 31) / 32).slabs, 1) << what << ": one slab, nothing tested";
    const Tensor x_cpu = RandomTensor(s, DType::kFloat32, 5, -1, 1, CpuDevice());
    const Tensor x = ToDevice(x_cpu, gpu);
    const Attrs lead{{"begin", int64_t(0)}, {"end", int64_t(1)}, {"keepdims", int64_t(0)}};
    ExpectClose(ToDoubles(Call("bias_grad", {x})[0]), ToDoubles(Call("bias_grad", {x_cpu})[0]), 1e-5, 1e-5,
                "bias_grad " + what);
    ExpectClose(ToDoubles(Call("sum", {x}, lead)[0]), ToDoubles(Call("sum", {x_cpu}, lead)[0]), 1e-5, 1e-5,
                "sum " + what);
    EXPECT_EQ(ToDoubles(Call("max", {x}, lead)[0]), ToDoubles(Call("max", {x_cpu}, lead)[0])) << "max " << what;
    // float64 too: the slabs' partial sums are double either way.
    const Tensor x64_cpu = RandomTensor(s, DType::kFloat64, 6, -1, 1, CpuDevice());
    ExpectClose(ToDoubles(Call("bias_grad", {ToDevice(x64_cpu, gpu)})[0]), ToDoubles(Call("bias_grad", {x64_cpu})[0]),
                1e-12, 1e-12, "bias_grad float64 " + what);
  }
}

TEST(CudaColumnSums, BiasActGradSumsAsBiasGradDoes) {
  LOOM_REQUIRE_GPU();
  auto gpu = CudaDevice(0);
  for (const Shape& s : {Shape{4096, 200}, Shape{8192, 96}, Shape{100, 70}}) {
    const Tensor y = RandomTensor(s, DType::kFloat32, 7, 0, 1, gpu), dy = RandomTensor(s, DType::kFloat32, 8, -1, 1, gpu);
    for (int64_t act : {int64_t(1), int64_t(2)}) {
      const std::vector<Tensor> out = Call("bias_act_grad", {y, dy}, Attrs{{"act", act}});
      EXPECT_TRUE(HostBytes(out[1]) == HostBytes(Call("bias_grad", {out[0]})[0]))
          << ToString(s) << " act " << act << ": db is not bias_grad(dz)";
    }
  }
}

}  // namespace
}  // namespace test
}  // namespace loom
