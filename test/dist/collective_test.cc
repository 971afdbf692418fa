// The in-process communicator and the collective ops (core/collective.h) on it, eager and
// captured: sums and maxima in rank order, gathers, broadcasts, 16-bit wire compression, and
// typed errors for collectives that do not match across ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <thread>

#include "dist_common.h"
#include "core/collective.h"
#include "core/ranks_agree.h"

namespace loom {
namespace test {
namespace {

TEST(InProc, AllReduceAllGatherBroadcastBarrier) {
  auto errors = RunInProcRanks(3, [](int rank, const std::shared_ptr<Communicator>& c) {
    EXPECT_EQ(c->size(), 3);
    EXPECT_EQ(c->rank(), rank);
    EXPECT_STREQ(c->backend(), "inproc");
    std::vector<double> v{double(rank), 10.0 * rank};
    c->AllReduce(v.data(), 2, DType::kFloat64, ReduceOp::kSum);
    EXPECT_EQ(v, (std::vector<double>{3, 30}));
    std::vector<int32_t> m{rank, -rank};
    c->AllReduce(m.data(), 2, DType::kInt32, ReduceOp::kMax);
    EXPECT_EQ(m, (std::vector<int32_t>{2, 0}));
    std::vector<float> send{float(rank)}, recv(3);
    c->AllGather(send.data(), recv.data(), 1, DType::kFloat32);
    EXPECT_EQ(recv, (std::vector<float>{0, 1, 2}));
    std::vector<int64_t> b{rank == 2 ? 42 : 0};
    c->Broadcast(b.data(), 1, DType::kInt64, 2);
    EXPECT_EQ(b[0], 42);
    c->Barrier();
  });
  for (auto& e : errors) EXPECT_FALSE(e);
}

TEST(InProc, MismatchedCollectivesRaiseCommErrorOnEveryRank) {
  auto errors = RunInProcRanks(2, [](int rank, const std::shared_ptr<Communicator>& c) {
    std::vector<float> v(4, 1);
    c->AllReduce(v.data(), rank == 0 ? 4 : 3, DType::kFloat32, ReduceOp::kSum);
  });
  for (auto& e : errors) {
    ASSERT_TRUE(e);
    LOOM_EXPECT_THROW_MSG(std::rethrow_exception(e), CommError, "ranks called different collectives");
  }
}

// The agreement check the NCCL communicator runs over its host bootstrap (core/ranks_agree.h),
// here over in-process ranks: the NCCL side can only be compiled without a GPU, and
// test/cuda/nccl_test.cc runs it where there are GPUs.
TEST(RanksAgree, DescriptionsGatheredOverAHostCommunicator) {
  auto disagree = RunInProcRanks(3, [](int rank, const std::shared_ptr<Communicator>& c) {
    AgreeOverHost(*c, "nccl", "all_reduce (sum of 4 float32)");  // the same call: nothing happens
    AgreeOverHost(*c, "nccl", rank == 1 ? "all_reduce (sum of 4 int32)" : "all_reduce (sum of 4 float32)");
  });
  for (auto& e : disagree) {  // every rank throws the same error, naming each rank's call
    ASSERT_TRUE(e);
    LOOM_EXPECT_THROW_MSG(std::rethrow_exception(e), CommError,
                          "[nccl] the ranks disagree on a collective: rank 0 calls all_reduce (sum of 4 float32), "
                          "rank 1 calls all_reduce (sum of 4 int32) (every rank must issue");
  }
  auto root = RunInProcRanks(2, [](int rank, const std::shared_ptr<Communicator>& c) {
    AgreeOverHost(*c, "nccl", detail::Cat("broadcast (4 float32 from rank ", rank, ")"));
  });
  for (auto& e : root) LOOM_EXPECT_THROW_MSG(std::rethrow_exception(e), CommError, "rank 1 calls broadcast (4 float32 from rank 1)");
  LOOM_EXPECT_THROW_MSG(CheckRanksAgree("mpi", {"barrier", "barrier", "all_gather (1 int64 per rank)"}), CommError,
                        "[mpi] the ranks disagree on a collective: rank 0 calls barrier, rank 2 calls all_gather");
  CheckRanksAgree("mpi", {"barrier"});
}

TEST(InProc, BadGroups) {
  LOOM_EXPECT_THROW_MSG(MakeInProcGroup(0), ValueError, "at least one rank");
  InProcOptions o;
  o.timeout_s = 0;
  LOOM_EXPECT_THROW_MSG(MakeInProcGroup(2, o), ValueError, "must be positive");
}

// Note [Timeouts without end]: a timeout of inf or of 1e10 s put the deadline in the past (the
// clock's nanoseconds overflowed), so the first rank to arrive failed at once.
TEST(InProc, TimeoutsWithoutEndWaitForASlowRank) {
  const auto now = std::chrono::steady_clock::now();
  EXPECT_EQ(WaitDeadline(now, 2.5), now + std::chrono::milliseconds(2500));
  for (double t : {1e9, 1e10, 1e300, std::numeric_limits<double>::infinity()}) {
    EXPECT_EQ(WaitDeadline(now, t), now + std::chrono::seconds(int64_t(kLongestWaitS))) << t;
    InProcOptions o;
    o.timeout_s = t;
    auto errors = RunInProcRanks(2, [](int rank, const std::shared_ptr<Communicator>& c) {
      // Rank 1 comes late, so rank 0 waits for it whatever the scheduling.
      if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::vector<double> v{double(rank + 1)};
      c->AllReduce(v.data(), 1, DType::kFloat64, ReduceOp::kSum);
      EXPECT_EQ(v[0], 3.0);
    }, o);
    for (auto& e : errors) EXPECT_FALSE(e) << "timeout " << t;
  }
}

// The ops, eager and captured, on two ranks with their own devices.
TEST(CollectiveOps, EagerAndCapturedGiveTheSameResults) {
  auto errors = RunInProcRanks(2, [](int rank, const std::shared_ptr<Communicator>& comm) {
    auto dev = NewCpuDevice(rank);
    CommunicatorId id(comm);
    const std::vector<float> mine{1.0f + rank, 0.1f * float(rank), -3.0f, 1000.25f};
    for (int captured = 0; captured < 2; ++captured) {
      Tensor sum = ops::FromVector(mine, {4}, dev), mx = ops::FromVector(mine, {4}, dev);
      Tensor f16 = ops::FromVector(mine, {4}, dev), b16 = ops::FromVector(mine, {4}, dev);
      Tensor root = ops::FromVector(mine, {2, 2}, dev);
      Tensor gathered;
      auto step = [&] {
        ops::AllReduce(id.id(), sum, ReduceOp::kSum, 0.5);
        ops::AllReduce(id.id(), mx, ReduceOp::kMax);
        ops::AllReduce(id.id(), f16, ReduceOp::kSum, 1.0, Compression::kFloat16);
        ops::AllReduce(id.id(), b16, ReduceOp::kSum, 1.0, Compression::kBFloat16);
        ops::Broadcast(id.id(), root, 1);
        gathered = ops::AllGather(id.id(), sum);
      };
      std::unique_ptr<CapturedGraph> g;
      if (captured) {
        g = std::make_unique<CapturedGraph>(dev, "collectives");
        g->Capture(step);
        g->Replay();
      } else {
        step();
      }
      const std::vector<float> s = sum.ToVector<float>();
      EXPECT_EQ(s, (std::vector<float>{1.5f, 0.05f, -3.0f, 1000.25f}));
      EXPECT_EQ(mx.ToVector<float>(), (std::vector<float>{2.0f, 0.1f, -3.0f, 1000.25f}));
      // 16-bit on the wire: 2000.5 is not a float16 (spacing 1 there), 0.1 is not a bfloat16.
      const std::vector<float> h = f16.ToVector<float>(), bf = b16.ToVector<float>();
      EXPECT_EQ(h[0], 3.0f);
      EXPECT_NE(h[3], 2000.5f);
      EXPECT_NEAR(h[3], 2000.5f, 1.0f);
      EXPECT_NE(bf[1], 0.1f);
      EXPECT_NEAR(bf[1], 0.1f, 1e-3f);
      EXPECT_EQ(root.ToVector<float>(), (std::vector<float>{2.0f, 0.1f, -3.0f, 1000.25f}));
      EXPECT_EQ(gathered.shape(), (Shape{2, 4}));
      std::vector<float> twice = s;
      twice.insert(twice.end(), s.begin(), s.end());
      EXPECT_EQ(gathered.ToVector<float>(), twice);
    }
  });
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

TEST(CollectiveOps, TypedErrors) {
  auto comm = MakeInProcGroup(1)[0];
  CommunicatorId id(comm);
  auto dev = NewCpuDevice(0);
  Tensor i = ops::Zeros({4}, DType::kInt32, dev);
  LOOM_EXPECT_THROW_MSG(ops::AllReduce(id.id(), i), DTypeError, "[allreduce] buffer must be floating");
  Tensor t = ops::Zeros({4, 4}, DType::kFloat32, dev);
  LOOM_EXPECT_THROW_MSG(ops::AllReduce(id.id(), t.Transpose()), ValueError, "must be contiguous");
  LOOM_EXPECT_THROW_MSG(ops::AllReduce(12345, t), CommError, "no communicator with id 12345");
  LOOM_EXPECT_THROW_MSG(ops::Broadcast(id.id(), t, 3), CommError, "root 3 of 1 ranks");
}

}  // namespace
}  // namespace test
}  // namespace loom
