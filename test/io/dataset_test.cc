// Data set readers and the DataLoader. The tests write tiny files in the exact MNIST idx and
// CIFAR-10 binary formats, read them back exactly, and break them one way at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <limits>
#include <set>

#include "common/files.h"
#include "common/harness.h"
#include "io/dataset.h"

namespace loom {
namespace test {
namespace {

void PutBE32(std::vector<uint8_t>* b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b->push_back(uint8_t(v >> s));
}

// An idx file: magic 0x00 0x00 type ndims, big-endian sizes, data.
std::vector<uint8_t> Idx(uint32_t magic, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b;
  PutBE32(&b, magic);
  for (uint32_t d : dims) PutBE32(&b, d);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// 5 images of 4 x 3 pixels, pixel i = (i * 7 + 13) % 256, labels 3 1 4 1 5.
std::vector<uint8_t> Pixels(size_t n) {
  std::vector<uint8_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = uint8_t((i * 7 + 13) % 256);
  return p;
}
const std::vector<uint8_t> kLabels = {3, 1, 4, 1, 5};
std::vector<uint8_t> MnistImages() { return Idx(0x803, {5, 4, 3}, Pixels(60)); }
std::vector<uint8_t> MnistLabels() { return Idx(0x801, {5}, kLabels); }

// The same two files, compressed by Python's gzip.compress(data, mtime=0): an independent
// compressor.
const std::vector<uint8_t> kImagesGz = {
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0x63, 0x60, 0xe0, 0x60, 0x66, 0x60, 0x60, 0x60, 0x05,
    0x62, 0x16, 0x20, 0x66, 0xe6, 0x15, 0x91, 0x56, 0xd2, 0x34, 0x30, 0xb7, 0x73, 0xf5, 0x09, 0x8e, 0x4a, 0xcc, 0xc8,
    0x2f, 0xab, 0x6d, 0xe9, 0x9e, 0x34, 0x73, 0xc1, 0xf2, 0x75, 0x5b, 0xf7, 0x1c, 0x3e, 0x75, 0xf1, 0xc6, 0xfd, 0x67,
    0x6f, 0xbf, 0xfc, 0x66, 0xe2, 0x14, 0x10, 0x97, 0x53, 0xd5, 0x31, 0xb6, 0x72, 0xf4, 0xf0, 0x0f, 0x8b, 0x4d, 0xc9,
    0x2e, 0xaa, 0x6c, 0x68, 0xef, 0x9b, 0x3a, 0x67, 0xf1, 0x2a, 0x00, 0x41, 0xfd, 0x9c, 0x24, 0x4c, 0x00, 0x00, 0x00};
const std::vector<uint8_t> kLabelsGz = {0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0x63,
                                        0x60, 0xe0, 0x60, 0x64, 0x60, 0x60, 0x60, 0x65, 0x66, 0x64, 0x61,
                                        0x64, 0x05, 0x00, 0xed, 0x2d, 0xdc, 0x9b, 0x0d, 0x00, 0x00, 0x00};

// CIFAR-10 records: label, then 3072 pixels; record r's pixel k = (r * 31 + k) % 251.
std::vector<uint8_t> CifarRecords(size_t first, size_t count, std::vector<int32_t>* labels = nullptr) {
  std::vector<uint8_t> b;
  for (size_t r = first; r < first + count; ++r) {
    uint8_t label = uint8_t((r * 3 + 1) % 10);
    if (labels) labels->push_back(label);
    b.push_back(label);
    for (size_t k = 0; k < 3072; ++k) b.push_back(uint8_t((r * 31 + k) % 251));
  }
  return b;
}

class DatasetTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::vector<uint8_t>& bytes) {
    WriteBytes(dir_ / name, bytes);
    return dir_ / name;
  }
  // Loads MNIST from the two given files' contents.
  std::shared_ptr<io::ImageData> Mnist(const std::vector<uint8_t>& images, const std::vector<uint8_t>& labels) {
    return io::LoadMnist(Write("images", images), Write("labels", labels));
  }
  TempDir dir_;
};

// ---- MNIST ----

TEST_F(DatasetTest, MnistRawFilesReadBackExactly) {
  auto d = Mnist(MnistImages(), MnistLabels());
  EXPECT_EQ(d->n, 5);
  EXPECT_EQ(d->channels, 1);
  EXPECT_EQ(d->height, 4);
  EXPECT_EQ(d->width, 3);
  EXPECT_EQ(d->images, Pixels(60));
  EXPECT_EQ(d->labels, (std::vector<int32_t>{3, 1, 4, 1, 5}));
}

TEST_F(DatasetTest, MnistGzipFilesReadBackExactly) {
  auto d = Mnist(kImagesGz, kLabelsGz);
  EXPECT_EQ(d->images, Pixels(60));
  EXPECT_EQ(d->labels, (std::vector<int32_t>{3, 1, 4, 1, 5}));
  // Directory layout, compressed and not.
  Write("train-images-idx3-ubyte.gz", kImagesGz);
  Write("train-labels-idx1-ubyte", MnistLabels());
  auto dd = io::LoadMnistDir(dir_.path(), true);
  EXPECT_EQ(dd->images, Pixels(60));
  LOOM_EXPECT_THROW_MSG(io::LoadMnistDir(dir_.path(), false), IOError, "t10k-images-idx3-ubyte");
}

TEST_F(DatasetTest, MnistBadMagicNumber) {
  LOOM_EXPECT_THROW_MSG(Mnist(Idx(0x12345678, {5, 4, 3}, Pixels(60)), MnistLabels()), IOError,
                        "bad magic number 0x12345678");
  LOOM_EXPECT_THROW_MSG(Mnist(Idx(0x12345678, {5, 4, 3}, Pixels(60)), MnistLabels()), IOError, "images");
}

TEST_F(DatasetTest, MnistImagesOfAnotherElementTypeAreABadMagicNumber) {
  LOOM_EXPECT_THROW_MSG(Mnist(Idx(0xD03, {5, 4, 3}, Pixels(240)), MnistLabels()), IOError,
                        "bad magic number 0x00000d03");
}

TEST_F(DatasetTest, MnistLabelsGivenAsImagesAreWrongDimensions) {
  // A label file (1 dimension) where images (3 dimensions) belong.
  LOOM_EXPECT_THROW_MSG(Mnist(MnistLabels(), MnistLabels()), IOError, "wrong dimensions: MNIST images have 3");
}

TEST_F(DatasetTest, MnistImageAndLabelCountsMustAgree) {
  LOOM_EXPECT_THROW_MSG(Mnist(MnistImages(), Idx(0x801, {4}, {1, 2, 3, 4})), IOError,
                        "wrong dimensions: 4 labels for 5 images");
}

TEST_F(DatasetTest, MnistTruncatedData) {
  std::vector<uint8_t> cut = MnistImages();
  cut.resize(cut.size() - 7);
  LOOM_EXPECT_THROW_MSG(Mnist(cut, MnistLabels()), IOError, "truncated: the header declares 5 x 4 x 3");
  LOOM_EXPECT_THROW_MSG(Mnist(cut, MnistLabels()), IOError, "images");  // the file's name
}

TEST_F(DatasetTest, MnistTruncatedHeader) {
  LOOM_EXPECT_THROW_MSG(Mnist(MnistImages(), {0, 0, 8}), IOError, "truncated: 3 bytes");
  std::vector<uint8_t> cut = MnistImages();
  cut.resize(10);  // magic and 1.5 of 3 sizes
  LOOM_EXPECT_THROW_MSG(Mnist(cut, MnistLabels()), IOError, "truncated: the header declares 3 dimensions");
}

TEST_F(DatasetTest, MnistTrailingBytes) {
  std::vector<uint8_t> more = MnistLabels();
  more.push_back(0);
  LOOM_EXPECT_THROW_MSG(Mnist(MnistImages(), more), IOError, "1 unexpected bytes at the end");
}

TEST_F(DatasetTest, MnistLabelOutOfRange) {
  LOOM_EXPECT_THROW_MSG(Mnist(MnistImages(), Idx(0x801, {5}, {3, 1, 4, 12, 5})), IOError,
                        "label 12 at index 3 is not a digit 0-9");
}

TEST_F(DatasetTest, MnistTruncatedGzip) {
  std::vector<uint8_t> cut(kImagesGz.begin(), kImagesGz.end() - 12);
  LOOM_EXPECT_THROW_MSG(Mnist(cut, MnistLabels()), IOError, "truncated gzip stream");
}

TEST_F(DatasetTest, MnistCorruptGzip) {
  std::vector<uint8_t> bad = kImagesGz;
  bad[bad.size() - 3] ^= 0xff;  // inside the CRC32/length trailer
  LOOM_EXPECT_THROW_MSG(Mnist(bad, MnistLabels()), IOError, "corrupt gzip stream");
  bad = kImagesGz;
  bad.push_back(0x42);
  LOOM_EXPECT_THROW_MSG(Mnist(bad, MnistLabels()), IOError, "unexpected bytes after the end of the gzip stream");
}

// ---- CIFAR-10 ----

TEST_F(DatasetTest, Cifar10BatchesReadBackExactly) {
  std::vector<int32_t> labels;
  std::vector<uint8_t> a = CifarRecords(0, 3, &labels), b = CifarRecords(3, 2, &labels);
  auto d = io::LoadCifar10({Write("data_batch_1.bin", a), Write("data_batch_2.bin", b)});
  EXPECT_EQ(d->n, 5);
  EXPECT_EQ(d->channels, 3);
  EXPECT_EQ(d->height, 32);
  EXPECT_EQ(d->width, 32);
  EXPECT_EQ(d->labels, labels);
  ASSERT_EQ(d->images.size(), 5u * 3072);
  for (size_t r = 0; r < 5; ++r)
    for (size_t k = 0; k < 3072; k += 97) ASSERT_EQ(d->images[r * 3072 + k], uint8_t((r * 31 + k) % 251));
  // The directory layout wants all five training batches.
  LOOM_EXPECT_THROW_MSG(io::LoadCifar10Dir(dir_.path(), true), IOError, "data_batch_3.bin");
  Write("test_batch.bin", a);
  EXPECT_EQ(io::LoadCifar10Dir(dir_.path(), false)->n, 3);
}

TEST_F(DatasetTest, Cifar10SizeNotAMultipleOfTheRecord) {
  std::vector<uint8_t> a = CifarRecords(0, 2);
  a.resize(a.size() - 100);
  LOOM_EXPECT_THROW_MSG(io::LoadCifar10({Write("short.bin", a)}), IOError,
                        "not a multiple of the 3073-byte record");
  LOOM_EXPECT_THROW_MSG(io::LoadCifar10({Write("short.bin", a)}), IOError, "short.bin");
}

TEST_F(DatasetTest, Cifar10EmptyFile) {
  LOOM_EXPECT_THROW_MSG(io::LoadCifar10({Write("empty.bin", {})}), IOError, "the file is empty");
}

TEST_F(DatasetTest, Cifar10LabelOutOfRange) {
  std::vector<uint8_t> a = CifarRecords(0, 3);
  a[2 * 3073] = 10;
  LOOM_EXPECT_THROW_MSG(io::LoadCifar10({Write("bad.bin", a)}), IOError, "record 2 has label 10");
}

// ---- DataLoader ----

std::shared_ptr<io::ImageData> Synthetic(int64_t n, int64_t c, int64_t h, int64_t w) {
  auto d = std::make_shared<io::ImageData>();
  d->n = n, d->channels = c, d->height = h, d->width = w;
  d->images.resize(size_t(n * c * h * w));
  for (size_t i = 0; i < d->images.size(); ++i) d->images[i] = uint8_t((i * 37 + 11) % 256);
  for (int64_t i = 0; i < n; ++i) d->labels.push_back(int32_t(i));  // label = sample index
  return d;
}

std::vector<std::vector<int32_t>> EpochLabels(io::DataLoader& loader, int epochs) {
  std::vector<std::vector<int32_t>> out;
  for (int e = 0; e < epochs; ++e) {
    std::vector<int32_t> labels;
    io::Batch b;
    while (loader.Next(&b))
      for (int32_t y : b.y.ToVector<int32_t>()) labels.push_back(y);
    out.push_back(labels);
  }
  return out;
}

TEST_F(DatasetTest, LoaderBatchesInOrderWithNormalisation) {
  auto d = Synthetic(5, 3, 2, 2);
  io::DataLoaderOptions o;
  o.batch_size = 2;
  o.shuffle = false;
  o.mean = {0.5f, 0.25f, 0.f};
  o.stddev = {0.5f, 2.f, 1.f};
  io::DataLoader loader(d, o);
  EXPECT_EQ(loader.batches_per_epoch(), 3);
  io::Batch b;
  std::vector<int64_t> sizes;
  int64_t sample = 0;
  while (loader.Next(&b)) {
    sizes.push_back(b.x.dim(0));
    EXPECT_EQ(b.x.shape(), (Shape{b.x.dim(0), 3, 2, 2}));
    EXPECT_EQ(b.x.dtype(), DType::kFloat32);
    EXPECT_EQ(b.y.dtype(), DType::kInt32);
    std::vector<float> x = b.x.ToVector<float>();
    std::vector<int32_t> y = b.y.ToVector<int32_t>();
    for (int64_t i = 0; i < b.x.dim(0); ++i, ++sample) {
      EXPECT_EQ(y[size_t(i)], sample);
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t k = 0; k < 4; ++k) {
          float pixel = d->images[size_t(sample * 12 + c * 4 + k)];
          float want = (pixel / 255.0f - o.mean[size_t(c)]) / o.stddev[size_t(c)];
          EXPECT_NEAR(x[size_t(i * 12 + c * 4 + k)], want, 1e-5f);
        }
    }
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(b.epoch, 0);
  // The next call starts epoch 1.
  ASSERT_TRUE(loader.Next(&b));
  EXPECT_EQ(b.epoch, 1);
  EXPECT_EQ(b.index, 0);
}

TEST_F(DatasetTest, LoaderFlatMnistAndDropLast) {
  auto d = Mnist(MnistImages(), MnistLabels());
  io::DataLoaderOptions o;
  o.batch_size = 2;
  o.shuffle = false;
  o.flat = true;
  o.drop_last = true;
  io::DataLoader loader(d, o);
  EXPECT_EQ(loader.batches_per_epoch(), 2);
  io::Batch b;
  ASSERT_TRUE(loader.Next(&b));
  EXPECT_EQ(b.x.shape(), (Shape{2, 12}));
  std::vector<float> x = b.x.ToVector<float>();
  for (size_t i = 0; i < 24; ++i) EXPECT_FLOAT_EQ(x[i], float(Pixels(60)[i]) / 255.0f);
  EXPECT_EQ(b.y.ToVector<int32_t>(), (std::vector<int32_t>{3, 1}));
  ASSERT_TRUE(loader.Next(&b));
  EXPECT_FALSE(loader.Next(&b));  // the fifth sample is dropped
}

TEST_F(DatasetTest, LoaderShufflesEachEpochReproduciblyAndTheThreadChangesNothing) {
  auto d = Synthetic(50, 1, 2, 2);
  io::DataLoaderOptions o;
  o.batch_size = 8;
  o.seed = 42;
  io::DataLoader threaded(d, o);
  auto a = EpochLabels(threaded, 3);
  o.prefetch = 0;
  io::DataLoader inline_loader(d, o);
  EXPECT_EQ(EpochLabels(inline_loader, 3), a);  // the same sequence with and without the thread
  for (const auto& epoch : a) {
    std::vector<int32_t> sorted = epoch;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int32_t> all(50);
    for (int i = 0; i < 50; ++i) all[size_t(i)] = i;
    EXPECT_EQ(sorted, all);  // each sample exactly once
  }
  EXPECT_NE(a[0], a[1]);
  EXPECT_NE(a[1], a[2]);
  o.seed = 43;
  io::DataLoader other(d, o);
  EXPECT_NE(EpochLabels(other, 1)[0], a[0]);
}

TEST_F(DatasetTest, LoaderRethrowsTheBackgroundThreadsExceptionInTheConsumer) {
  auto d = Synthetic(10, 1, 2, 2);
  io::DataLoaderOptions o;
  o.batch_size = 3;
  o.shuffle = false;
  std::atomic<std::thread::id> producer{};
  o.transform = [&](io::HostBatch& b) {
    producer = std::this_thread::get_id();
    if (b.index == 1) throw IOError("[augment] batch 1 is cursed");
  };
  io::DataLoader loader(d, o);
  io::Batch b;
  ASSERT_TRUE(loader.Next(&b));
  EXPECT_NE(producer.load(), std::this_thread::get_id());  // prepared on another thread
  LOOM_EXPECT_THROW_MSG(loader.Next(&b), IOError, "batch 1 is cursed");
  LOOM_EXPECT_THROW_MSG(loader.Next(&b), IOError, "batch 1 is cursed");  // and stays failed
}

TEST_F(DatasetTest, LoaderShutsDownCleanlyWhateverTheQueueHolds) {
  auto d = Synthetic(100, 1, 4, 4);
  for (int prefetch : {1, 2}) {
    io::DataLoaderOptions o;
    o.batch_size = 4;
    o.prefetch = prefetch;
    { io::DataLoader idle(d, o); }  // destroyed at once
    {
      io::DataLoader full(d, o);   // destroyed with a full queue and a producer waiting
      io::Batch b;
      ASSERT_TRUE(full.Next(&b));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  SUCCEED();
}

TEST_F(DatasetTest, LoaderFeedsExistingTensors) {
  auto d = Synthetic(5, 1, 2, 2);
  io::DataLoaderOptions o;
  o.batch_size = 2;
  o.shuffle = false;
  io::DataLoader loader(d, o);
  Tensor x = ops::Zeros({2, 1, 2, 2}, DType::kFloat32, CpuDevice());
  Tensor y = ops::Zeros({2}, DType::kInt32, CpuDevice());
  ASSERT_TRUE(loader.NextInto(x, y));
  EXPECT_EQ(y.ToVector<int32_t>(), (std::vector<int32_t>{0, 1}));
  ASSERT_TRUE(loader.NextInto(x, y));
  LOOM_EXPECT_THROW_MSG(loader.NextInto(x, y), ShapeError, "set drop_last");
}

TEST_F(DatasetTest, LoaderRejectsBadOptions) {
  auto d = Synthetic(5, 3, 2, 2);
  io::DataLoaderOptions o;
  o.mean = {0.5f};
  o.stddev = {0.5f};
  LOOM_EXPECT_THROW_MSG(io::DataLoader bad(d, o), ValueError, "one value per channel (3)");
  o = io::DataLoaderOptions();
  o.batch_size = 0;
  LOOM_EXPECT_THROW_MSG(io::DataLoader bad(d, o), ValueError, "batch_size 0");
}

TEST_F(DatasetTest, LoaderRefusesNormalisationThatIsNotANumber) {
  // NaN means, and inf, zero or denormal stddevs, made every pixel NaN or inf.
  auto d = Synthetic(5, 1, 2, 2);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  struct Case {
    float mean, stddev;
    const char* message;
  };
  for (const Case& c : {Case{nan, 0.5f, "mean[0] = nan must be a finite number"},
                        Case{inf, 0.5f, "mean[0] = inf must be a finite number"},
                        Case{0.5f, inf, "stddev[0] = inf must be a positive, finite, normal float32"},
                        Case{0.5f, 0.0f, "stddev[0] = 0 must be"}, Case{0.5f, -1.0f, "stddev[0] = -1 must be"},
                        Case{0.5f, 1e-40f, "must be a positive, finite, normal float32"},
                        Case{3e38f, 0.5f, "beyond float32"}}) {
    io::DataLoaderOptions o;
    o.mean = {c.mean};
    o.stddev = {c.stddev};
    LOOM_EXPECT_THROW_MSG(io::DataLoader bad(d, o), ValueError, c.message);
  }
}

TEST_F(DatasetTest, LoaderBatchLargerThanTheDataSet) {
  // Without drop_last, one batch of all 5 samples (the documented partial batch), also for a
  // batch_size near 2^63 (n + batch_size - 1 overflowed: no batch at all); with drop_last, an
  // epoch that could never give a batch is refused.
  auto d = Synthetic(5, 1, 2, 2);
  for (int64_t bs : {int64_t(6), std::numeric_limits<int64_t>::max()}) {
    io::DataLoaderOptions o;
    o.batch_size = bs;
    o.shuffle = false;
    io::DataLoader loader(d, o);
    EXPECT_EQ(loader.batches_per_epoch(), 1) << bs;
    io::Batch b;
    ASSERT_TRUE(loader.Next(&b)) << bs;
    EXPECT_EQ(b.x.dim(0), 5) << bs;
    EXPECT_FALSE(loader.Next(&b)) << bs;
    o.drop_last = true;
    LOOM_EXPECT_THROW_MSG(io::DataLoader bad(d, o), ValueError, "with drop_last: an epoch of 5 samples would have no batch");
  }
}

}  // namespace
}  // namespace test
}  // namespace loom

namespace loom {
namespace {
// Note [Sharded epochs]: the ranks' batches together are the global batches of one loader
// (as sets), every rank runs the same number of steps, and no sample is read by two ranks.
TEST(DatasetShardTest, RanksSplitEachEpochIntoDisjointEqualShards) {
  const int64_t n = 23, world = 3, batch = 2;
  auto d = std::make_shared<io::ImageData>();
  d->n = n;
  d->channels = 1;
  d->height = d->width = 1;
  for (int64_t i = 0; i < n; ++i) {
    d->images.push_back(uint8_t(i));
    d->labels.push_back(int32_t(i));
  }
  io::DataLoaderOptions g;
  g.batch_size = batch * world;
  g.seed = 5;
  g.drop_last = true;
  g.prefetch = 0;
  io::DataLoader global(d, g);
  std::vector<std::unique_ptr<io::DataLoader>> ranks;
  for (int64_t r = 0; r < world; ++r) {
    io::DataLoaderOptions o = g;
    o.batch_size = batch;
    o.shard_rank = r;
    o.shard_world = world;
    ranks.push_back(std::make_unique<io::DataLoader>(d, o));
    EXPECT_EQ(ranks.back()->batches_per_epoch(), (n / world) / batch);
  }
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::set<int32_t> seen;
    io::Batch gb, rb;
    while (global.Next(&gb)) {
      std::multiset<int32_t> want, got;
      for (int32_t v : gb.y.ToVector<int32_t>()) want.insert(v);
      for (auto& l : ranks) {
        ASSERT_TRUE(l->Next(&rb));
        for (int32_t v : rb.y.ToVector<int32_t>()) {
          got.insert(v);
          EXPECT_TRUE(seen.insert(v).second) << "sample " << v << " read twice in epoch " << epoch;
        }
      }
      EXPECT_EQ(got, want);
    }
    for (auto& l : ranks) EXPECT_FALSE(l->Next(&rb));
  }
  io::DataLoaderOptions bad = g;
  bad.shard_rank = 3;
  bad.shard_world = 3;
  EXPECT_THROW(io::DataLoader(d, bad), ValueError);
}
}  // namespace
}  // namespace loom
