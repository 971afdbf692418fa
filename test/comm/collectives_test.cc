// The MPI communicator's collectives, run by ctest under `mpirun -np 2` (test_comm_mpi_2ranks)
// and alone as a 1-rank world (test_comm_mpi_1rank). Written for any world size: every rank
// fills its buffers with values that depend on its rank, and checks the exact reduction,
// gathering or broadcast over all ranks. The values are small integers and halves, exact in
// every dtype, float16 and bfloat16 included, so every check is exact.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "io/comm/comm.h"
#ifdef LOOM_TEST_WITH_MPI
#include <functional>

#include "io/comm/mpi.h"
#endif

namespace loom {
namespace test {
namespace {

const DType kAllDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                            DType::kInt32,   DType::kInt64,   DType::kUInt8,   DType::kBool};
// 0 and 1, an odd count, and an odd count large enough that MPI splits it into segments.
const int64_t kCounts[] = {0, 1, 7, 100003};

// A buffer of `count` elements of `dtype`, read and written as doubles.
struct Buf {
  DType dtype;
  std::vector<uint8_t> bytes;
  Buf(DType t, int64_t count) : dtype(t), bytes(size_t(count) * SizeOf(t)) {}
  int64_t count() const { return int64_t(bytes.size() / SizeOf(dtype)); }
  void* data() { return bytes.data(); }
  void Set(int64_t i, double v) {
    uint8_t* p = &bytes[size_t(i) * SizeOf(dtype)];
    switch (dtype) {
      case DType::kFloat32: { float x = float(v); std::memcpy(p, &x, 4); break; }
      case DType::kFloat64: std::memcpy(p, &v, 8); break;
      case DType::kFloat16: { uint16_t x = FloatToHalf(float(v)); std::memcpy(p, &x, 2); break; }
      case DType::kBFloat16: { uint16_t x = FloatToBFloat16(float(v)); std::memcpy(p, &x, 2); break; }
      case DType::kInt32: { int32_t x = int32_t(v); std::memcpy(p, &x, 4); break; }
      case DType::kInt64: { int64_t x = int64_t(v); std::memcpy(p, &x, 8); break; }
      case DType::kUInt8: *p = uint8_t(v); break;
      case DType::kBool: *p = v != 0; break;
    }
  }
  double Get(int64_t i) const {
    const uint8_t* p = &bytes[size_t(i) * SizeOf(dtype)];
    switch (dtype) {
      case DType::kFloat32: { float x; std::memcpy(&x, p, 4); return x; }
      case DType::kFloat64: { double x; std::memcpy(&x, p, 8); return x; }
      case DType::kFloat16: { uint16_t x; std::memcpy(&x, p, 2); return HalfToFloat(x); }
      case DType::kBFloat16: { uint16_t x; std::memcpy(&x, p, 2); return BFloat16ToFloat(x); }
      case DType::kInt32: { int32_t x; std::memcpy(&x, p, 4); return x; }
      case DType::kInt64: { int64_t x; std::memcpy(&x, p, 8); return double(x); }
      case DType::kUInt8: return *p;
      case DType::kBool: return *p;
    }
    return 0;
  }
};

bool Floating(DType t) { return IsFloating(t); }

// Rank r's element i: small values, halves for floating types, 0/1 for bool (true on some ranks
// only, so that the logical or differs from every single rank's value somewhere).
double Value(DType t, int r, int64_t i) {
  if (t == DType::kBool) return (i + r) % 3 == 0;
  double v = double((i * 5 + r * 3) % 11 + 1);
  if (Floating(t) && i % 2) v = -v / 2;
  if (t == DType::kUInt8) v = std::abs(v);
  return v;
}

std::shared_ptr<Communicator> World() {
  static std::shared_ptr<Communicator> comm = MakeCommunicator("mpi");
  return comm;
}

std::string Label(DType t, int64_t count) { return std::string(Name(t)) + " x " + std::to_string(count); }

TEST(MpiCollectives, RankAndSize) {
  auto c = World();
  EXPECT_STREQ(c->backend(), "mpi");
  EXPECT_FALSE(c->on_device());
  const char* env_size = std::getenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(c->size(), env_size ? std::atoi(env_size) : 1);
  const char* env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(c->rank(), env_rank ? std::atoi(env_rank) : 0);
  // Every rank has a distinct number in [0, size).
  std::vector<int32_t> ranks(size_t(c->size()), -1);
  int32_t mine = c->rank();
  c->AllGather(&mine, ranks.data(), 1, DType::kInt32);
  for (int r = 0; r < c->size(); ++r) EXPECT_EQ(ranks[size_t(r)], r);
  // One machine: the local rank is the rank.
  EXPECT_EQ(LocalRank(), c->rank());
}

TEST(MpiCollectives, AllReduceSumAndMaxEveryDType) {
  auto c = World();
  for (DType t : kAllDTypes)
    for (int64_t count : kCounts)
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        SCOPED_TRACE(Label(t, count) + (op == ReduceOp::kSum ? " sum" : " max"));
        Buf b(t, count);
        for (int64_t i = 0; i < count; ++i) b.Set(i, Value(t, c->rank(), i));
        c->AllReduce(b.data(), count, t, op);  // in place
        int64_t wrong = 0;
        for (int64_t i = 0; i < count; ++i) {
          double want = Value(t, 0, i);
          for (int r = 1; r < c->size(); ++r) {
            const double v = Value(t, r, i);
            // bool: sum and max are both a logical or (Note [MPI types and reductions]).
            want = t == DType::kBool ? double(want || v) : op == ReduceOp::kSum ? want + v : std::max(want, v);
          }
          if (b.Get(i) != want && wrong++ < 5) ADD_FAILURE() << "element " << i << ": " << b.Get(i) << ", want " << want;
        }
        EXPECT_EQ(wrong, 0);
      }
}

TEST(MpiCollectives, AllGatherEveryDType) {
  auto c = World();
  for (DType t : kAllDTypes)
    for (int64_t count : kCounts) {
      SCOPED_TRACE(Label(t, count));
      Buf send(t, count), recv(t, count * c->size());
      for (int64_t i = 0; i < count; ++i) send.Set(i, Value(t, c->rank(), i));
      c->AllGather(send.data(), recv.data(), count, t);
      // In place: this rank's contribution already sits in its slot of the output.
      Buf inplace(t, count * c->size());
      for (int64_t i = 0; i < count; ++i) inplace.Set(c->rank() * count + i, Value(t, c->rank(), i));
      c->AllGather(inplace.bytes.data() + size_t(c->rank() * count) * SizeOf(t), inplace.data(), count, t);
      int64_t wrong = 0;
      for (int r = 0; r < c->size(); ++r)
        for (int64_t i = 0; i < count; ++i) {
          const double want = Value(t, r, i);
          if ((recv.Get(r * count + i) != want || inplace.Get(r * count + i) != want) && wrong++ < 5)
            ADD_FAILURE() << "rank " << r << " element " << i << ": " << recv.Get(r * count + i) << " and "
                          << inplace.Get(r * count + i) << " in place, want " << want;
        }
      EXPECT_EQ(wrong, 0);
    }
}

TEST(MpiCollectives, BroadcastFromTheLastRankEveryDType) {
  auto c = World();
  const int root = c->size() - 1;  // rank 1 in the 2-rank run
  for (DType t : kAllDTypes)
    for (int64_t count : kCounts) {
      SCOPED_TRACE(Label(t, count));
      Buf b(t, count);
      for (int64_t i = 0; i < count; ++i) b.Set(i, Value(t, c->rank(), i));
      c->Broadcast(b.data(), count, t, root);
      int64_t wrong = 0;
      for (int64_t i = 0; i < count; ++i)
        if (b.Get(i) != Value(t, root, i) && wrong++ < 5)
          ADD_FAILURE() << "element " << i << ": " << b.Get(i) << ", want " << Value(t, root, i);
      EXPECT_EQ(wrong, 0);
    }
}

// No clocks: before the barrier every rank creates a file, after it every rank finds all of
// them. The folder's name comes from rank 0, broadcast.
TEST(MpiCollectives, BarrierOrdersWhatRanksDoAroundIt) {
  auto c = World();
  char dir[64] = {};
  if (c->rank() == 0) {
    std::strcpy(dir, "/tmp/loom-barrier-XXXXXX");
    ASSERT_NE(::mkdtemp(dir), nullptr);
  }
  c->Broadcast(dir, sizeof dir, DType::kUInt8, 0);
  for (int round = 0; round < 3; ++round) {
    const std::string mine = std::string(dir) + "/" + std::to_string(round) + "-" + std::to_string(c->rank());
    std::ofstream(mine) << "here";
    c->Barrier();
    for (int r = 0; r < c->size(); ++r) {
      const std::string theirs = std::string(dir) + "/" + std::to_string(round) + "-" + std::to_string(r);
      EXPECT_EQ(::access(theirs.c_str(), F_OK), 0) << theirs << " missing after the barrier";
    }
  }
  c->Barrier();  // everyone has looked before rank 0 cleans up
  if (c->rank() == 0) {
    for (int round = 0; round < 3; ++round)
      for (int r = 0; r < c->size(); ++r)
        std::remove((std::string(dir) + "/" + std::to_string(round) + "-" + std::to_string(r)).c_str());
    ::rmdir(dir);
  }
}

// Caller mistakes are caught before any message is sent, on every rank alike, so the
// communicator stays usable afterwards.
#ifdef LOOM_TEST_WITH_MPI
// Note [Ranks agree on each collective]: with the check on, ranks that issue different
// collectives all raise the same CommError naming each call, and the communicator goes on.
TEST(MpiCollectives, RanksThatDisagreeRaiseCommErrorOnEveryRankWhenChecked) {
  auto c = World();
  if (c->size() < 2) GTEST_SKIP() << "one rank agrees with itself";
  auto* mpi = dynamic_cast<MpiCommunicator*>(c.get());
  ASSERT_NE(mpi, nullptr);
  mpi->set_check(true);
  const bool zero = c->rank() == 0;
  std::vector<float> f(4, 1.f);
  std::vector<int32_t> i(4, 1);
  auto expect_disagreement = [&](const std::function<void()>& call, const std::string& rank0, const std::string& rank1) {
    try {
      call();
      ADD_FAILURE() << "no error for disagreeing ranks";
    } catch (const CommError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("the ranks disagree on a collective: rank 0 calls " + rank0), std::string::npos) << m;
      EXPECT_NE(m.find("rank 1 calls " + rank1), std::string::npos) << m;
    }
  };
  expect_disagreement([&] { c->AllReduce(f.data(), zero ? 3 : 4, DType::kFloat32, ReduceOp::kSum); },
                      "all_reduce (sum of 3 float32)", "all_reduce (sum of 4 float32)");
  expect_disagreement(
      [&] { zero ? c->AllReduce(f.data(), 4, DType::kFloat32, ReduceOp::kSum) : c->AllReduce(i.data(), 4, DType::kInt32, ReduceOp::kSum); },
      "all_reduce (sum of 4 float32)", "all_reduce (sum of 4 int32)");
  expect_disagreement([&] { c->AllReduce(f.data(), 4, DType::kFloat32, zero ? ReduceOp::kSum : ReduceOp::kMax); },
                      "all_reduce (sum of 4 float32)", "all_reduce (max of 4 float32)");
  expect_disagreement([&] { c->Broadcast(f.data(), 4, DType::kFloat32, zero ? 0 : 1); },
                      "broadcast (4 float32 from rank 0)", "broadcast (4 float32 from rank 1)");
  expect_disagreement([&] { zero ? c->Barrier() : c->AllReduce(f.data(), 4, DType::kFloat32, ReduceOp::kSum); },
                      "barrier", "all_reduce (sum of 4 float32)");
  // Nothing was issued but the agreements: the ranks go on together.
  float x = 1;
  c->AllReduce(&x, 1, DType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(x, float(c->size()));
  mpi->set_check(false);
}
#endif

#ifdef LOOM_TEST_WITH_MPI
// Note [Waiting without taking a core]: busy polling only where each rank has a core; the
// environment's value checked whole.
TEST(MpiCollectives, WaitsPollBusilyOnlyWhereEachRankHasACore) {
  EXPECT_EQ(WaitSpinMicros(nullptr, 2, 2), 1000);
  EXPECT_EQ(WaitSpinMicros("", 1, 16), 1000);
  EXPECT_EQ(WaitSpinMicros(nullptr, 4, 2), 0);  // two ranks per core
  EXPECT_EQ(WaitSpinMicros("250", 4, 2), 250);
  EXPECT_EQ(WaitSpinMicros("0", 1, 8), 0);
  for (const char* bad : {"-1", "1e3", "12us", "1000001", "99999999999999999999"}) {
    try {
      WaitSpinMicros(bad, 2, 2);
      ADD_FAILURE() << "no error for LOOM_COMM_SPIN_US=" << bad;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("[LOOM_COMM_SPIN_US] '") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
  auto c = World();
  auto* mpi = dynamic_cast<MpiCommunicator*>(c.get());
  ASSERT_NE(mpi, nullptr);
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  cpu_set_t cpus;
  ASSERT_EQ(sched_getaffinity(0, sizeof cpus, &cpus), 0);
  if (!std::getenv("LOOM_COMM_SPIN_US"))
    EXPECT_EQ(mpi->spin_us(), (local ? std::atoi(local) : 1) > CPU_COUNT(&cpus) ? 0 : 1000);
}
#endif

TEST(MpiCollectives, BadArgumentsAreValueErrors) {
  auto c = World();
  float x = 1;
  EXPECT_THROW(c->AllReduce(&x, -1, DType::kFloat32, ReduceOp::kSum), ValueError);
  EXPECT_THROW(c->AllReduce(nullptr, 3, DType::kFloat32, ReduceOp::kSum), ValueError);
  try {
    c->Broadcast(&x, 1, DType::kFloat32, c->size());
    ADD_FAILURE() << "no error for a root outside the world";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("broadcast from rank " + std::to_string(c->size())), std::string::npos)
        << e.what();
  }
  std::vector<float> big(size_t(4 * c->size()), 0.f);
  if (c->size() > 1) {  // send overlapping recv, but not at this rank's slot
    EXPECT_THROW(c->AllGather(big.data() + (c->rank() == 0 ? 1 : 0), big.data(), 2, DType::kFloat32), ValueError);
  }
  x = float(c->rank() + 1);
  c->AllReduce(&x, 1, DType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(x, float(c->size() * (c->size() + 1) / 2));
}

TEST(MpiCollectives, FactoryChoosesAndRefuses) {
  auto c = World();
  EXPECT_THROW(MakeCommunicator("gloo"), ValueError);
  // "auto" without a CUDA device is MPI; a second communicator works beside the first.
  auto second = MakeCommunicator("auto", CpuDevice());
  EXPECT_STREQ(second->backend(), "mpi");
  EXPECT_EQ(second->rank(), c->rank());
  int64_t v = 10 + c->rank();
  second->AllReduce(&v, 1, DType::kInt64, ReduceOp::kMax);
  EXPECT_EQ(v, 10 + c->size() - 1);
  // NCCL needs a CUDA device: refused for the CPU device, with the reason.
  try {
    MakeCommunicator("nccl", CpuDevice());
    ADD_FAILURE() << "nccl made on the CPU device";
  } catch (const DeviceError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("CUDA device") != std::string::npos || what.find("not built") != std::string::npos) << what;
  }
}

}  // namespace
}  // namespace test
}  // namespace loom
