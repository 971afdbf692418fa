// The NCCL communicator (src/device/cuda/nccl.cc) as a 1-rank world on the first GPU: started alone,
// MPI hands NCCL its id as a singleton. One GPU cannot hold two NCCL ranks, so the 2-rank checks
// of every collective live in test/comm (MPI); these check that the NCCL path initialises,
// enqueues on the device's stream, waits, and leaves the values where they belong.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/harness.h"
#include "core/ops.h"
#include "io/comm/comm.h"

namespace loom {
namespace test {
namespace {

// Made per test, not kept in a static: a communicator destroyed at static destruction would
// call into a CUDA runtime that may already be torn down.
std::shared_ptr<Communicator> Nccl() { return MakeCommunicator("nccl", CudaDevice(0)); }

#define LOOM_REQUIRE_NCCL()                                                                             \
  LOOM_REQUIRE_GPU();                                                                                   \
  if (!NcclBuilt()) GTEST_SKIP() << "loom built without NCCL or MPI: the NCCL communicator is not built"

TEST(NcclCommunicator, OneRankWorld) {
  LOOM_REQUIRE_NCCL();
  auto c = Nccl();
  EXPECT_STREQ(c->backend(), "nccl");
  EXPECT_TRUE(c->on_device());
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  EXPECT_STREQ(MakeCommunicator("auto", CudaDevice(0))->backend(), "nccl");
}

TEST(NcclCommunicator, CollectivesOnDeviceMemory) {
  LOOM_REQUIRE_NCCL();
  auto c = Nccl();
  Tensor x = ops::FromVector<float>({1.5f, -2.f, 3.f}, {3}, CudaDevice(0));
  c->AllReduce(x.raw_data(), 3, DType::kFloat32, ReduceOp::kSum);
  c->AllReduce(x.raw_data(), 3, DType::kFloat32, ReduceOp::kMax);
  c->Broadcast(x.raw_data(), 3, DType::kFloat32, 0);
  EXPECT_EQ(x.ToVector<float>(), (std::vector<float>{1.5f, -2.f, 3.f}));
  Tensor g = ops::FromVector<int64_t>({0, 0, 0}, {3}, CudaDevice(0));
  Tensor s = ops::FromVector<int64_t>({7, 8, 9}, {3}, CudaDevice(0));
  c->AllGather(s.raw_data(), g.raw_data(), 3, DType::kInt64);
  c->AllGather(g.raw_data(), g.raw_data(), 3, DType::kInt64);  // in place: rank 0's slot
  EXPECT_EQ(g.ToVector<int64_t>(), (std::vector<int64_t>{7, 8, 9}));
  c->AllReduce(nullptr, 0, DType::kFloat16, ReduceOp::kSum);  // 0 elements is still a collective
  c->Barrier();
  LOOM_EXPECT_THROW_MSG(c->Broadcast(x.raw_data(), 3, DType::kFloat32, 1), ValueError, "broadcast from rank 1");
}

// Note [Ranks agree on each collective] for NCCL: with LOOM_COMM_CHECK=1 each collective is
// first agreed on over the MPI bootstrap. On one GPU (one rank) the check runs and passes;
// started as 2 ranks with a GPU each (mpirun -n 2 build/test_cuda
// --gtest_filter=NcclCommunicator.RanksAgree*) the ranks' mismatched calls must be the same
// CommError on both, and the communicator must go on working after it.
TEST(NcclCommunicator, RanksAgreeOnEachCollectiveWhenChecked) {
  LOOM_REQUIRE_NCCL();
  const char* before = std::getenv("LOOM_COMM_CHECK");
  const std::string saved = before ? before : "";
  setenv("LOOM_COMM_CHECK", "1", 1);
  auto c = Nccl();
  if (before) setenv("LOOM_COMM_CHECK", saved.c_str(), 1);
  else unsetenv("LOOM_COMM_CHECK");
  const int rank = c->rank(), size = c->size();
  Tensor x = ops::FromVector<float>({1.f, 2.f}, {2}, CudaDevice(0));
  c->AllReduce(x.raw_data(), 2, DType::kFloat32, ReduceOp::kSum);  // agreed: runs
  EXPECT_EQ(x.ToVector<float>(), (std::vector<float>{1.f * size, 2.f * size}));
  if (size < 2) GTEST_SKIP() << "a 1-rank world cannot disagree: run 2 ranks on 2 GPUs (mpirun -n 2) to check the "
                                "mismatch";
  Tensor i = ops::FromVector<int32_t>({1, 2}, {2}, CudaDevice(0));
  LOOM_EXPECT_THROW_MSG(rank == 0 ? c->AllReduce(x.raw_data(), 2, DType::kFloat32, ReduceOp::kSum)
                                  : c->AllReduce(i.raw_data(), 2, DType::kInt32, ReduceOp::kSum),
                        CommError, "[nccl] the ranks disagree on a collective: rank 0 calls all_reduce (sum of 2 float32), "
                                   "rank 1 calls all_reduce (sum of 2 int32)");
  LOOM_EXPECT_THROW_MSG(c->Broadcast(x.raw_data(), 2, DType::kFloat32, rank), CommError,
                        "rank 1 calls broadcast (2 float32 from rank 1)");
  c->Broadcast(x.raw_data(), 2, DType::kFloat32, 0);  // nothing was enqueued: still usable
}

TEST(NcclCommunicator, RefusesHostDevices) {
  LOOM_REQUIRE_NCCL();
  LOOM_EXPECT_THROW_MSG(MakeCommunicator("nccl", CpuDevice()), DeviceError, "runs on a CUDA device");
}

}  // namespace
}  // namespace test
}  // namespace loom
