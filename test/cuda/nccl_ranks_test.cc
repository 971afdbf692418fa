// NCCL over every GPU of this machine: one rank per GPU, as threads of this process bootstrapped
// over the in-process communicator (io/comm/inproc.h), so no mpirun is needed (the GPU machines
// have none). On a 1-GPU machine it is a 1-rank world; on N GPUs, N ranks. Each collective is
// checked against the values the ranks handed in, including the two of sharded optimizer state
// (Note [Sharded optimizer state] in nn/dist_opt.h). tools/gpu_check.sh runs it with the other
// GPU tests.
#include <gtest/gtest.h>

#include <vector>

#include "common/harness.h"
#include "core/ops.h"
#include "io/comm/comm.h"
#include "io/comm/inproc.h"

namespace loom {
namespace test {
namespace {

TEST(NcclRanks, EveryCollectiveOverEveryGpu) {
  LOOM_REQUIRE_GPU();
  if (!NcclBuilt()) GTEST_SKIP() << "loom built without NCCL: the NCCL communicator is not built";
  const int n = CudaDeviceCount();
  ASSERT_GE(n, 1);
  auto errors = RunInProcRanks(n, [&](int rank, const std::shared_ptr<Communicator>& host) {
    auto dev = CudaDevice(rank);
    std::shared_ptr<Communicator> c = MakeNcclOver(dev, host, 60);
    EXPECT_EQ(c->rank(), rank);
    EXPECT_EQ(c->size(), n);
    const float r = float(rank + 1), total = float(n * (n + 1) / 2);
    Tensor x = ops::FromVector<float>({r, -r}, {2}, dev);
    c->AllReduce(x.raw_data(), 2, DType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(x.ToVector<float>(), (std::vector<float>{total, -total}));
    // Reduce-scatter in place: slot k of every rank holds k + rank + 1; this rank's slot sums to
    // n * rank + total.
    std::vector<float> slots;
    for (int k = 0; k < n; ++k) slots.insert(slots.end(), {float(k) + r, 2 * (float(k) + r)});
    Tensor s = ops::FromVector<float>(slots, {2 * n}, dev);
    c->ReduceScatter(s.raw_data(), 2, DType::kFloat32, ReduceOp::kSum);
    const std::vector<float> got = s.ToVector<float>();
    const float mine = float(n * rank) + total;
    EXPECT_EQ(got[size_t(2 * rank)], mine);
    EXPECT_EQ(got[size_t(2 * rank + 1)], 2 * mine);
    // All-gather in place of every rank's slot: rank k's slot holds k.
    std::vector<int64_t> g(size_t(n), -1);
    g[size_t(rank)] = rank;
    Tensor a = ops::FromVector<int64_t>(g, {n}, dev);
    c->AllGather(static_cast<int64_t*>(a.raw_data()) + rank, a.raw_data(), 1, DType::kInt64);
    std::vector<int64_t> want;
    for (int k = 0; k < n; ++k) want.push_back(k);
    EXPECT_EQ(a.ToVector<int64_t>(), want);
    Tensor b = ops::FromVector<float>({r}, {1}, dev);
    c->Broadcast(b.raw_data(), 1, DType::kFloat32, n - 1);
    EXPECT_EQ(b.ToVector<float>(), std::vector<float>{float(n)});
    c->Barrier();
  });
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace
}  // namespace test
}  // namespace loom
