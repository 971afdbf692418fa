// The CUDA kernel table, checked without a GPU (the registry says which kernels exist, in any
// build with CUDA): every op with a CPU kernel has a CUDA kernel unless listed below with its
// reason, and every CUDA kernel has rows in the op-case table, which the GPU check
// (test/cuda, tools/gpu_check.sh) runs on CUDA against the CPU.
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "common/harness.h"
#include "common/op_check.h"
#include "core/backend_library.h"

namespace loom {
namespace test {
namespace {

// Ops with a CPU kernel that CUDA does not have, each with the reason. An op added for the CPU
// shows up as a failure until it has a CUDA kernel and a row, or a reason here.
const std::map<std::string, std::string>& CpuOnlyOps() {
  static const std::map<std::string, std::string> ops{
      {"matmul_sgd_update",
       "made only by a graph pass that checks for its kernel first (Note [Weight gradient into the update] in "
       "src/graph/fuse_weight_grad.cc); on CUDA the pair stays unfused"},
      {"conv_weight_layout",
       "converts weights to oneDNN's blocked OIhw16i16o, a CPU layout: only the CPU's weight-layout pass "
       "(device/cpu/passes/weight_layout.cc) makes it, and only when the device has its kernel"},
  };
  return ops;
}

TEST(CudaKernels, EveryCpuOpHasACudaKernelAndACase) {
#ifndef LOOM_WITH_CUDA
  GTEST_SKIP() << "loom built without CUDA: no CUDA kernels are registered";
#endif
  LoadCudaBackend();  // its kernels register as it opens (Note [Backends loaded on first use])
  std::vector<std::string> with = OpsWithCases();
  std::set<std::string> covered(with.begin(), with.end());
  int cuda_kernels = 0;
  for (const std::string& name : ListOps()) {
    if (name.rfind("test_", 0) == 0) continue;  // probes that tests register
    const OpDef& def = GetOp(name);
    const bool cpu = def.kernels[int(DeviceType::kCPU)] != nullptr;
    const bool cuda = def.kernels[int(DeviceType::kCUDA)] != nullptr;
    const bool cpu_only = CpuOnlyOps().count(name) != 0;
    if (cpu && !cpu_only) EXPECT_TRUE(cuda) << name << " has a CPU kernel but no CUDA kernel";
    if (cuda) {
      ++cuda_kernels;
      EXPECT_TRUE(covered.count(name)) << name << " has a CUDA kernel but no row in the op-case table";
      EXPECT_FALSE(cpu_only) << name << " has a CUDA kernel now: drop it from CpuOnlyOps()";
    }
  }
  EXPECT_GT(cuda_kernels, 50);
  for (const auto& [name, why] : CpuOnlyOps()) {
    EXPECT_NO_THROW(GetOp(name)) << name << " is listed in CpuOnlyOps() but not registered";
    EXPECT_FALSE(why.empty()) << name;
  }
}

// Note [What a kernel supports]: CUDA's convolution passes take the bf16 policy's records
// (bfloat16 operands, a float32 result: Note [bfloat16 convolutions on cuDNN]) and refuse any
// other mix of dtypes, which their kernels would read as the result's. The gradients once had no
// predicate, so on CUDA the policy lowered them to records their kernels read as float32.
TEST(CudaKernels, ConvolutionsTakeTheBf16PolicysRecordsAndNoOtherMix) {
#ifndef LOOM_WITH_CUDA
  GTEST_SKIP() << "loom built without CUDA: no CUDA kernels are registered";
#endif
  LoadCudaBackend();
  const DType f32 = DType::kFloat32, f64 = DType::kFloat64, bf16 = DType::kBFloat16, f16 = DType::kFloat16;
  auto record = [](const std::string& op, DType a, DType b, DType out) {
    OpRecord r;
    r.def = &GetOp(op);
    r.inputs = {Tensor({1, 1, 3, 3}, a, CpuDevice()), Tensor({1, 1, 3, 3}, b, CpuDevice())};
    r.outputs = {Tensor({1, 1, 1, 1}, out, CpuDevice())};
    return r;
  };
  for (const char* op : {"conv2d", "conv2d_grad_input", "conv2d_grad_weight", "conv2d_relu"}) {
    const auto supports = GetOp(op).supports[int(DeviceType::kCUDA)];
    ASSERT_NE(supports, nullptr) << op << " on CUDA has no predicate: it would take any record";
    EXPECT_TRUE(supports(record(op, f32, f32, f32))) << op;
    EXPECT_TRUE(supports(record(op, f64, f64, f64))) << op;
    const bool fused = std::string(op) == "conv2d_relu";  // one dtype only, as on the CPU
    EXPECT_EQ(supports(record(op, bf16, bf16, f32)), !fused) << op << ": the bf16 policy's record";
    EXPECT_FALSE(supports(record(op, bf16, f32, f32))) << op;
    EXPECT_FALSE(supports(record(op, f16, f16, f32))) << op << ": no float16 convolution on cuDNN here";
    EXPECT_FALSE(supports(record(op, f32, f32, f64))) << op;
  }
  // Attention over a packed qkv: a bfloat16 qkv runs on cuDNN's fused attention only where cuDNN
  // itself accepts the problem, asked on the record's CUDA device (Note [Attention on cuDNN]); a
  // record whose tensors are on no CUDA device, as here, is refused, and the policy keeps the
  // attention float32. cuda_graph_test.cc checks the accepted records on a GPU.
  for (const char* op : {"attention_qkv", "attention_qkv_grad"}) {
    const auto supports = GetOp(op).supports[int(DeviceType::kCUDA)];
    ASSERT_NE(supports, nullptr) << op;
    OpRecord r;
    r.def = &GetOp(op);
    r.attrs = Attrs{{"heads", int64_t(2)}, {"causal", int64_t(1)}, {"scale", 0.0}};
    r.inputs = {Tensor({1, 4, 24}, f32, CpuDevice())};
    r.outputs = {Tensor({1, 4, 8}, f32, CpuDevice())};
    EXPECT_TRUE(supports(r)) << op;
    r.inputs = {Tensor({1, 4, 24}, bf16, CpuDevice())};
    EXPECT_FALSE(supports(r)) << op << ": a bfloat16 qkv";
  }
}

// Note [Casts fused into their producers]: the producers take a 16-bit result from float32 on
// both backends (the pass folds a cast into them on either), and nothing else (a kernel without a
// predicate would take any record; a float64 input is out_dtype's error, not a kernel's).
TEST(CudaKernels, ProducersTakeAFusedCast) {
#ifndef LOOM_WITH_CUDA
  GTEST_SKIP() << "loom built without CUDA: no CUDA kernels are registered";
#endif
  LoadCudaBackend();
  for (const char* op : {"relu", "gelu", "tanh", "add_bias", "layer_norm"}) {
    const OpDef& def = GetOp(op);
    ASSERT_NE(def.kernels[int(DeviceType::kCUDA)], nullptr) << op;
    const auto cuda = def.supports[int(DeviceType::kCUDA)], cpu = def.supports[int(DeviceType::kCPU)];
    ASSERT_NE(cuda, nullptr) << op;
    ASSERT_NE(cpu, nullptr) << op;
    OpRecord r;
    r.def = &def;
    for (DType in : {DType::kFloat32, DType::kFloat64})
      for (DType out : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
        r.inputs = {Tensor({2, 8}, in, CpuDevice())};
        r.outputs = {Tensor({2, 8}, out, CpuDevice())};
        const bool takes = in == out || (in == DType::kFloat32 && (out == DType::kBFloat16 || out == DType::kFloat16));
        EXPECT_EQ(cuda(r), takes) << op << " " << Name(in) << " -> " << Name(out);
        EXPECT_EQ(cpu(r), takes) << op << " " << Name(in) << " -> " << Name(out);
      }
  }
}

// Note: fill's element bytes come from one function for both backends (core/dtype.h); the GPU
// once wrote fill(3) into bool as the byte 3.
TEST(FillBits, BoolIsOneForAnyNonZeroValue) {
  for (double v : {3.0, 5.0, 0.1, -3.0, 1.0, 1e300}) EXPECT_EQ(FillBits(DType::kBool, v), 1u) << v;
  EXPECT_EQ(FillBits(DType::kBool, 0.0), 0u);
  EXPECT_EQ(FillBits(DType::kBool, -0.0), 0u);
}

TEST(FillBits, EachDTypeHoldsTheValueAsTheCpuKernelWrites) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt32, DType::kInt64,
                   DType::kUInt8, DType::kBool})
    for (double v : {3.0, 5.0, 0.1, -3.0, 0.0, 2.75}) {
      if (dt == DType::kUInt8 && v < 0) continue;
      Tensor t = ops::Full({5}, v, dt, CpuDevice());
      const uint64_t want = FillBits(dt, v);
      for (int64_t i = 0; i < 5; ++i) {
        uint64_t got = 0;
        std::memcpy(&got, static_cast<const char*>(t.raw_data()) + i * int64_t(SizeOf(dt)), SizeOf(dt));
        EXPECT_EQ(got, want) << Name(dt) << " " << v;
      }
    }
  EXPECT_EQ(FillBits(DType::kInt32, -2.75), uint64_t(uint32_t(int32_t(-2))));
  EXPECT_EQ(FillBits(DType::kFloat16, 1.0), 0x3c00u);
  EXPECT_EQ(FillBits(DType::kBFloat16, 1.0), 0x3f80u);
}

TEST(FillBits, AnIntegerElementMustHoldTheValue) {
  LOOM_EXPECT_THROW_MSG(ops::Full({2}, 1e30, DType::kInt32, CpuDevice()), ValueError, "[fill] value 1e+30 does not fit int32");
  LOOM_EXPECT_THROW_MSG(ops::Full({2}, -1, DType::kUInt8, CpuDevice()), ValueError, "[fill] value -1 does not fit uint8");
  LOOM_EXPECT_THROW_MSG(ops::Full({2}, std::nan(""), DType::kInt64, CpuDevice()), ValueError, "does not fit int64");
  EXPECT_NO_THROW(ops::Full({2}, 255.9, DType::kUInt8, CpuDevice()));
  EXPECT_NO_THROW(ops::Full({2}, -2147483648.0, DType::kInt32, CpuDevice()));
}

}  // namespace
}  // namespace test
}  // namespace loom
