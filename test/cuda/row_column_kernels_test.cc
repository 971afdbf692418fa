// CUDA's row and column kernels at the shapes that pick their faster forms, against the CPU.
// Note [Column sums by slabs] (device/kernel_shapes.h): at shapes that take several slabs, sum,
// max and bias_grad match the CPU (max exactly), and bias_act_grad's db is bitwise bias_grad's
// from the dz it wrote. Note [Layer norm rows by warps] (cuda/transformer.cu): layer norm and its
// gradient by warps (rows of up to 1,024 float32 values, 8 to 32 a lane) and by blocks. Note [A
// row of logits staged in shared memory] (cuda/loss.cu): linear_cross_entropy with rows staged
// (GPT-2's vocabulary) and not (a vocabulary too large for an SM's shared memory, and float64).
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
  // {5000, 1}: one output unit, which bias_grad sums by the column kernel too.
  for (const Shape& s : {Shape{4096, 200}, Shape{8192, 96}, Shape{100, 70}, Shape{5000, 1}}) {
    const Tensor y = RandomTensor(s, DType::kFloat32, 7, 0, 1, gpu), dy = RandomTensor(s, DType::kFloat32, 8, -1, 1, gpu);
    for (int64_t act : {int64_t(1), int64_t(2)}) {
      const std::vector<Tensor> out = Call("bias_act_grad", {y, dy}, Attrs{{"act", act}});
      EXPECT_TRUE(HostBytes(out[1]) == HostBytes(Call("bias_grad", {out[0]})[0]))
          << ToString(s) << " act " << act << ": db is not bias_grad(dz)";
    }
  }
}

TEST(CudaRowKernels, LayerNormByWarpsAndBlocksMatchesTheCpu) {
  LOOM_REQUIRE_GPU();
  auto gpu = CudaDevice(0);
  const Attrs eps{{"eps", 1e-5}};
  for (int64_t d : {int64_t(5), int64_t(256), int64_t(300), int64_t(768), int64_t(1000), int64_t(1024), int64_t(1030)})
    for (DType t : {DType::kFloat32, DType::kFloat64}) {
      const std::string what = "d " + std::to_string(d) + " " + Name(t);
      const Shape s{67, d};
      const std::vector<Tensor> cpu_in = {RandomTensor(s, t, 1, -2, 3, CpuDevice()),
                                          RandomTensor({d}, t, 2, 0.5, 1.5, CpuDevice()),
                                          RandomTensor({d}, t, 3, -1, 1, CpuDevice())};
      std::vector<Tensor> gpu_in;
      for (const Tensor& x : cpu_in) gpu_in.push_back(ToDevice(x, gpu));
      const std::vector<Tensor> want = Call("layer_norm", cpu_in, eps), got = Call("layer_norm", gpu_in, eps);
      const double tol = t == DType::kFloat32 ? 1e-5 : 1e-12;
      for (size_t k = 0; k < want.size(); ++k)
        ExpectClose(ToDoubles(got[k]), ToDoubles(want[k]), tol, tol, "layer_norm output " + std::to_string(k) + " " + what);
      const Tensor dy_cpu = RandomTensor(s, t, 4, -1, 1, CpuDevice());
      const std::vector<Tensor> gwant =
          Call("layer_norm_grad", {cpu_in[0], cpu_in[1], want[1], want[2], dy_cpu});
      const std::vector<Tensor> ggot =
          Call("layer_norm_grad", {gpu_in[0], gpu_in[1], got[1], got[2], ToDevice(dy_cpu, gpu)});
      for (size_t k = 0; k < gwant.size(); ++k)
        ExpectClose(ToDoubles(ggot[k]), ToDoubles(gwant[k]), 10 * tol, 10 * tol,
                    "layer_norm_grad output " + std::to_string(k) + " " + what);
    }
}

TEST(CudaRowKernels, LinearCrossEntropyStagedOrNotMatchesTheCpu) {
  LOOM_REQUIRE_GPU();
  ScopedFloat32Math full(Float32Math::kFull);  // the logits' products as the CPU's, not TF32
  auto gpu = CudaDevice(0);
  struct Case {
    int64_t n, d, v;
    DType t;
  };
  for (const Case& c : {Case{37, 16, 50304, DType::kFloat32}, Case{19, 8, 70001, DType::kFloat32},
                        Case{23, 8, 3000, DType::kFloat64}, Case{40, 24, 1000, DType::kFloat32}}) {
    const std::string what = "n " + std::to_string(c.n) + " d " + std::to_string(c.d) + " v " + std::to_string(c.v) +
                             " " + Name(c.t);
    std::vector<int32_t> labels(size_t(c.n));
    for (int64_t i = 0; i < c.n; ++i) labels[size_t(i)] = int32_t((i * 7919) % c.v);
    const std::vector<Tensor> cpu_in = {RandomTensor({c.n, c.d}, c.t, 11, -1, 1, CpuDevice()),
                                        RandomTensor({c.v, c.d}, c.t, 12, -1, 1, CpuDevice()),
                                        ops::FromVector(labels, {c.n}, CpuDevice())};
    std::vector<Tensor> gpu_in;
    for (const Tensor& x : cpu_in) gpu_in.push_back(ToDevice(x, gpu));
    const Attrs a{{"tb", int64_t(1)}, {"grads", int64_t(1)}, {"chunk", int64_t(16)}};  // several chunks
    const std::vector<Tensor> want = Call("linear_cross_entropy", cpu_in, a), got = Call("linear_cross_entropy", gpu_in, a);
    const double tol = c.t == DType::kFloat32 ? 2e-5 : 1e-12;
    for (size_t k = 0; k < want.size(); ++k)
      ExpectClose(ToDoubles(got[k]), ToDoubles(want[k]), tol, tol, "output " + std::to_string(k) + " " + what);
  }
}

}  // namespace
}  // namespace test
}  // namespace loom
