// Tensor handles (shape, strides, views, lazy blocks, host access and its errors) and the
// caching allocator behind every block (statistics, reuse, release when the last handle dies).
#include <cstdlib>

#include "common/harness.h"
#include "core/allocator.h"

namespace loom {
namespace test {
namespace {

TEST(Tensor, ShapeStridesAndContiguity) {
  Tensor t(Shape{2, 3, 4}, DType::kFloat32, Cpu());
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.ndim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.offset(), 0);
  EXPECT_EQ(t.dim(0), 2);
  EXPECT_EQ(t.dim(-1), 4);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.device(), Cpu().get());
  EXPECT_EQ(t.block()->bytes(), 96u);
  EXPECT_EQ(t.Describe(), "float32 (2, 3, 4) on cpu:0");
  LOOM_EXPECT_THROW_MSG(t.dim(3), ValueError, "[dim] axis 3 is out of range for a tensor of rank 3");

  Tensor s(Shape{}, DType::kFloat64, Cpu());  // a scalar
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.ndim(), 0);
  EXPECT_TRUE(s.is_contiguous());
  EXPECT_EQ(s.nbytes(), 8u);

  Tensor u;
  EXPECT_FALSE(u.defined());
  EXPECT_EQ(u.Describe(), "undefined tensor");
  EXPECT_EQ(u.device(), nullptr);

  LOOM_EXPECT_THROW_MSG(Tensor(Shape{2, -1}, DType::kFloat32, Cpu()), ShapeError,
                        "[tensor] negative dimension in shape (2, -1)");
  LOOM_EXPECT_THROW_MSG(Tensor(Shape{2}, DType::kFloat32, nullptr), DeviceError, "[tensor] no device given");
  // Size-1 dimensions do not break contiguity whatever their stride.
  Tensor v(t.block_ptr(), Shape{1, 24}, Shape{999, 1}, 0, DType::kFloat32);
  EXPECT_TRUE(v.is_contiguous());
}

TEST(Tensor, ViewsShareTheBlock) {
  Tensor x = ops::FromVector<float>({0, 1, 2, 3, 4, 5}, {2, 3}, Cpu());
  Tensor r = x.Reshape({3, 2});
  Tensor t = x.Transpose();
  Tensor copy = x;  // a copy of the handle
  EXPECT_EQ(r.block(), x.block());
  EXPECT_EQ(t.block(), x.block());
  EXPECT_EQ(copy.block(), x.block());
  EXPECT_EQ(t.strides(), (Shape{1, 3}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.ToVector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  // Writing through the block shows in every view.
  x.CopyFrom(std::vector<float>{6, 7, 8, 9, 10, 11});
  EXPECT_EQ(r.ToVector<float>(), (std::vector<float>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(t.ToVector<float>(), (std::vector<float>{6, 9, 7, 10, 8, 11}));
  // A view with an offset: the second row.
  Tensor row(x.block_ptr(), Shape{3}, Shape{1}, 3, DType::kFloat32);
  EXPECT_EQ(row.ToVector<float>(), (std::vector<float>{9, 10, 11}));
  Tensor one(x.block_ptr(), Shape{}, Shape{}, 4, DType::kFloat32);
  EXPECT_EQ(one.Item(), 10.0);
  // Detach keeps the view but drops autograd state.
  Tensor p = ops::Zeros({2}, DType::kFloat32, Cpu()).set_requires_grad(true);
  Tensor d = p.Detach();
  EXPECT_EQ(d.block(), p.block());
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(p.requires_grad());
}

TEST(Tensor, BlockIsLazyUntilWritten) {
  auto dev = Cpu();
  MemStats before = dev->stats();
  Tensor t(Shape{1000}, DType::kFloat32, dev);
  EXPECT_FALSE(t.block()->allocated());
  EXPECT_EQ(t.block()->ptr(), nullptr);
  Tensor v = t.Reshape({10, 100});  // a view allocates nothing either
  EXPECT_FALSE(v.block()->allocated());
  EXPECT_EQ(dev->stats().live_bytes, before.live_bytes);
  EXPECT_EQ(dev->stats().num_allocs, before.num_allocs);
  ops::Fill(t, 2);  // the first op that writes it
  EXPECT_TRUE(t.block()->allocated());
  EXPECT_TRUE(t.block()->owns_memory());
  EXPECT_EQ(dev->stats().live_bytes, before.live_bytes + 4000);
  EXPECT_EQ(dev->stats().num_allocs, before.num_allocs + 1);
  EXPECT_EQ(v.ToVector<float>(), std::vector<float>(1000, 2.0f));
  // Host writes allocate too.
  Tensor h(Shape{4}, DType::kInt32, dev);
  h.CopyFrom(std::vector<int32_t>{1, 2, 3, 4});
  EXPECT_TRUE(h.block()->allocated());
}

TEST(Tensor, HostAccessAndItsErrors) {
  auto dev = Cpu();
  EXPECT_EQ(ops::Full({}, 2.5, DType::kFloat32, dev).Item(), 2.5);
  EXPECT_EQ(ops::Full({1, 1}, -3, DType::kInt64, dev).Item(), -3.0);
  EXPECT_EQ(ops::Full({1}, 0.75, DType::kBFloat16, dev).Item(), 0.75);
  EXPECT_EQ(ops::Full({1}, 200, DType::kUInt8, dev).Item(), 200.0);
  Tensor x = ops::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3}, dev);
  LOOM_EXPECT_THROW_MSG(x.Item(), ShapeError, "[item] needs a tensor with one element, got float32 (2, 3) on cpu:0");
  LOOM_EXPECT_THROW_MSG(x.ToVector<double>(), DTypeError, "[to_host] tensor is float32, asked for float64");
  LOOM_EXPECT_THROW_MSG(x.ToVector<int32_t>(), DTypeError, "[to_host] tensor is float32, asked for int32");
  float host[5] = {};
  LOOM_EXPECT_THROW_MSG(x.CopyFromHost(host, sizeof(host)), ShapeError,
                        "[copy_from_host] float32 (2, 3) on cpu:0 holds 24 bytes, host data has 20");
  LOOM_EXPECT_THROW_MSG(x.CopyFrom(std::vector<float>{1, 2}), ShapeError, "holds 24 bytes, host data has 8");
  LOOM_EXPECT_THROW_MSG(x.CopyFrom(std::vector<double>(6)), DTypeError,
                        "[copy_from_host] tensor is float32, host data is float64");
  float host6[6] = {};
  LOOM_EXPECT_THROW_MSG(x.Transpose().CopyFromHost(host6, sizeof(host6)), ValueError, "is not contiguous");
  LOOM_EXPECT_THROW_MSG(Tensor().ToVector<float>(), ValueError, "[to_host] undefined tensor");

  // A tensor that no op has written holds no value.
  Tensor fresh(Shape{2, 2}, DType::kFloat32, dev);
  LOOM_EXPECT_THROW_MSG(fresh.ToVector<float>(), ValueError, "[to_host] float32 (2, 2) on cpu:0 holds no value");
  LOOM_EXPECT_THROW_MSG(fresh.Reshape({4}).ToVector<float>(), ValueError, "holds no value");
  LOOM_EXPECT_THROW_MSG(Tensor(Shape{}, DType::kFloat32, dev).Item(), ValueError, "[item] float32 () on cpu:0 holds no value");
  LOOM_EXPECT_THROW_MSG(ops::Add(fresh, fresh), ValueError, "[add] input 0 (float32 (2, 2) on cpu:0) was never written");
  EXPECT_FALSE(fresh.block()->allocated());  // the failed op allocated nothing

  EXPECT_EQ(x.ToString(), "Tensor(float32 (2, 3) on cpu:0, [1, 2, 3, 4, 5, 6])");
  EXPECT_EQ(x.ToString(4), "Tensor(float32 (2, 3) on cpu:0, [1, 2, 3, 4, ...])");
  // Every dtype prints its values (bool, uint8 and the 16-bit floats printed [] before).
  Tensor v = FromDoubles({0, 1, 2.5}, {3}, DType::kFloat32);
  EXPECT_EQ(ops::Cast(v, DType::kFloat16).ToString(), "Tensor(float16 (3,) on cpu:0, [0, 1, 2.5])");
  EXPECT_EQ(ops::Cast(v, DType::kBFloat16).ToString(), "Tensor(bfloat16 (3,) on cpu:0, [0, 1, 2.5])");
  EXPECT_EQ(ops::Cast(v, DType::kUInt8).ToString(), "Tensor(uint8 (3,) on cpu:0, [0, 1, 2])");
  EXPECT_EQ(ops::Cast(v, DType::kBool).ToString(), "Tensor(bool (3,) on cpu:0, [0, 1, 1])");
}

TEST(Tensor, RequiresGradAndNames) {
  Tensor p = ops::Zeros({3}, DType::kFloat32, Cpu());
  EXPECT_FALSE(p.requires_grad());
  p.set_requires_grad(true).set_name("w");
  EXPECT_TRUE(p.requires_grad());
  EXPECT_EQ(p.name(), "w");
  EXPECT_EQ(p.grad_fn(), nullptr);
  Tensor y = ops::MulScalar(p, 2);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_NE(y.grad_fn(), nullptr);
  LOOM_EXPECT_THROW_MSG(y.set_requires_grad(false), ValueError, "[requires_grad] can only be set on leaf tensors");
  Tensor i = ops::Zeros({3}, DType::kInt32, Cpu());
  LOOM_EXPECT_THROW_MSG(i.set_requires_grad(true), DTypeError, "[requires_grad] only floating tensors");
  {
    NoGradGuard ng;
    EXPECT_FALSE(ops::MulScalar(p, 2).requires_grad());
  }
  EXPECT_TRUE(GradEnabled());
}

// The memory of a block goes back to the pool when the last handle on it dies, and is reused.
TEST(Tensor, BlockReturnsToThePoolWithTheLastHandle) {
  auto dev = Cpu();
  const size_t bytes = 1 << 16;
  MemStats s0 = dev->stats();
  void* first = nullptr;
  {
    Tensor a = ops::Zeros({int64_t(bytes / 4)}, DType::kFloat32, dev);
    first = a.block()->ptr();
    Tensor view = a.Transpose(0, 0);
    EXPECT_EQ(dev->stats().live_bytes, s0.live_bytes + bytes);
    a = Tensor();  // the view still holds the block
    EXPECT_EQ(dev->stats().live_bytes, s0.live_bytes + bytes);
  }
  EXPECT_EQ(dev->stats().live_bytes, s0.live_bytes);
  MemStats s1 = dev->stats();
  // The same size again comes from the cache: no new system allocation, same memory.
  Tensor b = ops::Zeros({int64_t(bytes / 4)}, DType::kFloat32, dev);
  EXPECT_EQ(b.block()->ptr(), first);
  EXPECT_EQ(dev->stats().num_system_allocs, s1.num_system_allocs);
  EXPECT_EQ(dev->stats().num_allocs, s1.num_allocs + 1);
  // A handle reassigned along a chain frees the previous value: the peak is two tensors, not four.
  b = Tensor();
  dev->ResetPeak();
  MemStats s2 = dev->stats();
  Tensor c = ops::Zeros({int64_t(bytes / 4)}, DType::kFloat32, dev);
  Tensor d = ops::Exp(c);
  c = Tensor();
  d = ops::Exp(d);
  d = ops::Exp(d);
  EXPECT_EQ(dev->stats().live_bytes, s2.live_bytes + bytes);
  EXPECT_EQ(dev->stats().peak_bytes, s2.live_bytes + 2 * bytes);
}

// The allocator on its own, over malloc/free that count calls.
struct CountingSystem {
  int allocs = 0, frees = 0;
  CachingAllocator Make() {
    return CachingAllocator([this](size_t n) { ++allocs; return std::malloc(n); },
                            [this](void* p) { ++frees; std::free(p); });
  }
};

TEST(Allocator, RoundSize) {
  EXPECT_EQ(CachingAllocator::RoundSize(0), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(1), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(512), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(513), 1024u);
  EXPECT_EQ(CachingAllocator::RoundSize(1 << 20), size_t(1) << 20);
  // Above 1 MiB: multiples of 1/8 of the next power of two p, so the waste is below p / 8.
  EXPECT_EQ(CachingAllocator::RoundSize((1 << 20) + 1), (size_t(1) << 20) + (size_t(1) << 18));
  EXPECT_EQ(CachingAllocator::RoundSize(3000000), size_t(3145728));
  for (size_t n : {size_t(1) << 21, size_t(5000000), size_t(123456789), (size_t(1) << 30) + 1}) {
    size_t p = 1;
    while (p < n) p <<= 1;
    size_t r = CachingAllocator::RoundSize(n);
    EXPECT_GE(r, n);
    EXPECT_LT(r - n, p / 8) << n;
    EXPECT_EQ(r % (p / 8), 0u) << n;
  }
}

TEST(Allocator, StatsAndReuse) {
  CountingSystem sys;
  {
    CachingAllocator a = sys.Make();
    EXPECT_EQ(a.stats().live_bytes, 0u);
    void* p = a.Malloc(1000);
    void* q = a.Malloc(3000);
    MemStats s = a.stats();
    EXPECT_EQ(s.live_bytes, 4000u);  // requested bytes, not rounded
    EXPECT_EQ(s.peak_bytes, 4000u);
    EXPECT_EQ(s.reserved_bytes, 1024u + 3072u);
    EXPECT_EQ(s.num_allocs, 2u);
    EXPECT_EQ(s.num_system_allocs, 2u);
    EXPECT_EQ(sys.allocs, 2);

    a.Free(p);
    s = a.stats();
    EXPECT_EQ(s.live_bytes, 3000u);
    EXPECT_EQ(s.peak_bytes, 4000u);
    EXPECT_EQ(s.reserved_bytes, 1024u + 3072u);  // cached, not returned
    EXPECT_EQ(sys.frees, 0);

    // Same size class (1024): the freed chunk is handed out again.
    void* r = a.Malloc(600);
    EXPECT_EQ(r, p);
    s = a.stats();
    EXPECT_EQ(s.num_allocs, 3u);
    EXPECT_EQ(s.num_system_allocs, 2u);
    EXPECT_EQ(s.live_bytes, 3600u);
    // Another size class needs the system.
    void* big = a.Malloc(5000);
    EXPECT_EQ(a.stats().num_system_allocs, 3u);
    EXPECT_EQ(a.stats().peak_bytes, 8600u);

    // ResetPeak starts again from what is live now.
    a.Free(big);
    a.Free(q);
    EXPECT_EQ(a.stats().peak_bytes, 8600u);
    a.ResetPeak();
    EXPECT_EQ(a.stats().peak_bytes, 600u);
    void* t = a.Malloc(100);
    EXPECT_EQ(a.stats().peak_bytes, 700u);

    // EmptyCache returns only the free chunks.
    a.EmptyCache();
    EXPECT_EQ(sys.frees, 2);
    EXPECT_EQ(a.stats().reserved_bytes, 1024u + 512u);
    a.Free(t);
    a.Free(r);
    EXPECT_EQ(a.stats().live_bytes, 0u);
    EXPECT_EQ(a.stats().reserved_bytes, 1024u + 512u);
    a.Free(nullptr);  // a no-op
  }
  // The destructor returns everything.
  EXPECT_EQ(sys.frees, sys.allocs);
}

TEST(Allocator, FreeingForeignPointerIsAnInternalError) {
  CountingSystem sys;
  CachingAllocator a = sys.Make();
  int x = 0;
  EXPECT_THROW(a.Free(&x), InternalError);
}

}  // namespace
}  // namespace test
}  // namespace loom
