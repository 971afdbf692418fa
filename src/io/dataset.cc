#include "io/dataset.h"

#include <sys/stat.h>

#include <cfloat>
#include <cmath>

#include "core/device.h"
#include "io/checksum.h"
#include "io/file.h"

namespace loom {
namespace io {

const std::vector<float> kMnistMean = {0.1307f};
const std::vector<float> kMnistStd = {0.3081f};
const std::vector<float> kCifar10Mean = {0.4914f, 0.4822f, 0.4465f};
const std::vector<float> kCifar10Std = {0.2470f, 0.2435f, 0.2616f};

namespace {

// The file's bytes, inflated when they are gzip-compressed.
std::vector<uint8_t> ReadMaybeGzip(const std::string& path, const char* component) {
  std::string raw = ReadFile(path, component);
  const uint8_t* p = reinterpret_cast<const uint8_t*>(raw.data());
  if (IsGzip(p, raw.size())) return Gunzip(p, raw.size(), path);
  return std::vector<uint8_t>(p, p + raw.size());
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// `base` or `base.gz`, whichever exists.
std::string FindEither(const std::string& dir, const std::string& name, const char* component) {
  std::string base = dir + "/" + name;
  if (Exists(base)) return base;
  if (Exists(base + ".gz")) return base + ".gz";
  throw IOError(detail::Cat("[", component, "] '", dir, "' has neither '", name, "' nor '", name, ".gz'"));
}

}  // namespace

std::shared_ptr<ImageData> LoadMnist(const std::string& images_path, const std::string& labels_path) {
  auto data = std::make_shared<ImageData>();
  {
    std::vector<uint8_t> images = ReadMaybeGzip(images_path, "mnist");
    ParseMnistImages(images.data(), images.size(), images_path, data.get());
  }
  std::vector<uint8_t> labels = ReadMaybeGzip(labels_path, "mnist");
  ParseMnistLabels(labels.data(), labels.size(), labels_path, data.get());
  return data;
}

std::shared_ptr<ImageData> LoadMnistDir(const std::string& dir, bool train) {
  std::string prefix = train ? "train" : "t10k";
  std::string images = FindEither(dir, prefix + "-images-idx3-ubyte", "mnist");
  std::string labels = FindEither(dir, prefix + "-labels-idx1-ubyte", "mnist");
  return LoadMnist(images, labels);
}

std::shared_ptr<ImageData> LoadCifar10(const std::vector<std::string>& batch_files) {
  LOOM_CHECK(!batch_files.empty(), ValueError, "[cifar10] no batch files given");
  auto data = std::make_shared<ImageData>();
  for (const std::string& path : batch_files) {
    std::vector<uint8_t> bytes = ReadMaybeGzip(path, "cifar10");
    AppendCifar10(bytes.data(), bytes.size(), path, data.get());
  }
  return data;
}

std::shared_ptr<ImageData> LoadCifar10Dir(const std::string& dir, bool train) {
  std::vector<std::string> files;
  if (train) {
    for (int i = 1; i <= 5; ++i)
      files.push_back(FindEither(dir, "data_batch_" + std::to_string(i) + ".bin", "cifar10"));
  } else {
    files.push_back(FindEither(dir, "test_batch.bin", "cifar10"));
  }
  return LoadCifar10(files);
}

// ---------------------------------------------------------------- DataLoader

DataLoader::DataLoader(std::shared_ptr<const ImageData> data, DataLoaderOptions options)
    : data_(std::move(data)), opt_(std::move(options)) {
  LOOM_CHECK(data_ && data_->n > 0, ValueError, "[data_loader] the data set is empty");
  LOOM_CHECK(data_->images.size() == size_t(data_->n) * data_->sample_size() &&
                 data_->labels.size() == size_t(data_->n),
             ValueError, "[data_loader] the data set is inconsistent: ", data_->n, " samples of ",
             data_->sample_size(), " bytes, ", data_->images.size(), " image bytes, ", data_->labels.size(), " labels");
  n_ = data_->n;
  const size_t c = size_t(data_->channels);
  LOOM_CHECK(opt_.mean.size() == opt_.stddev.size() && (opt_.mean.empty() || opt_.mean.size() == c),
             ValueError, "[data_loader] mean and stddev need one value per channel (", c, "), got ",
             opt_.mean.size(), " and ", opt_.stddev.size());
  LOOM_CHECK(opt_.crop_padding >= 0 && opt_.crop_padding <= 0x7fff, ValueError, "[data_loader] crop_padding ",
             opt_.crop_padding, " must lie in [0, 32767]");
  LOOM_CHECK(!(opt_.crop_padding > 0 || opt_.hflip) || !opt_.flat, ValueError,
             "[data_loader] random crops and flips need images: they cannot be combined with flat");
  scale_.assign(c, 1.0f / 255.0f);
  shift_.assign(c, 0.0f);
  for (size_t i = 0; i < opt_.mean.size(); ++i) {
    LOOM_CHECK(std::isfinite(opt_.mean[i]), ValueError, "[data_loader] mean[", i, "] = ", opt_.mean[i],
               " must be a finite number");
    LOOM_CHECK(std::isnormal(opt_.stddev[i]) && opt_.stddev[i] > 0, ValueError, "[data_loader] stddev[", i, "] = ",
               opt_.stddev[i], " must be a positive, finite, normal float32");
    // The values pixels 0 and 255 map to must be float32 too (a tiny stddev made every pixel inf).
    const double lo = -double(opt_.mean[i]) / opt_.stddev[i], hi = (1.0 - opt_.mean[i]) / opt_.stddev[i];
    LOOM_CHECK(std::fabs(lo) <= FLT_MAX && std::fabs(hi) <= FLT_MAX, ValueError, "[data_loader] mean[", i, "] = ",
               opt_.mean[i], " and stddev[", i, "] = ", opt_.stddev[i], " map pixels to [", lo, ", ", hi,
               "], beyond float32");
    scale_[i] = 1.0f / (255.0f * opt_.stddev[i]);
    shift_[i] = -opt_.mean[i] / opt_.stddev[i];
  }
  Start();
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> data, DataLoaderOptions options)
    : dataset_(std::move(data)), opt_(std::move(options)) {
  LOOM_CHECK(dataset_, ValueError, "[data_loader] no data set");
  CheckDataset(*dataset_);
  n_ = dataset_->size();
  const bool images = !opt_.mean.empty() || !opt_.stddev.empty() || opt_.crop_padding != 0 || opt_.hflip || opt_.flat;
  LOOM_CHECK(!images, ValueError, "[data_loader] data set '", dataset_->name(), "': mean, stddev, crop_padding, hflip "
             "and flat are for the image readers (MNIST, CIFAR-10); a Dataset's samples are used as they are "
             "(normalise them in the Dataset, or in a transform)");
  Start();
}

void DataLoader::Start() {
  LOOM_CHECK(opt_.batch_size > 0, ValueError, "[data_loader] batch_size ", opt_.batch_size, " must be positive");
  LOOM_CHECK(opt_.prefetch >= 0 && opt_.prefetch <= 2, ValueError, "[data_loader] prefetch ", opt_.prefetch,
             " must be 0 (no background thread), 1 or 2");
  LOOM_CHECK(opt_.shard_world >= 1 && opt_.shard_rank >= 0 && opt_.shard_rank < opt_.shard_world, ValueError,
             "[data_loader] shard (", opt_.shard_rank, ", ", opt_.shard_world,
             "): the rank must lie in [0, world) and the world be >= 1");
  LOOM_CHECK(n_ >= opt_.shard_world, ValueError, "[data_loader] ", n_, " samples cannot be shared by ",
             opt_.shard_world, " ranks");
  if (!opt_.device) opt_.device = CpuDevice();
  LOOM_CHECK(!opt_.drop_last || opt_.batch_size <= samples_per_epoch(), ValueError, "[data_loader] batch_size ",
             opt_.batch_size, " with drop_last: an epoch of ", samples_per_epoch(),
             " samples would have no batch (drop_last=False gives one batch of them all)");
  StartThread(0, 0);
}

DataLoader::~DataLoader() { StopThread(); }

void DataLoader::StartThread(int64_t epoch, int64_t index) {
  if (opt_.prefetch > 0) thread_ = std::thread([this, epoch, index] { Produce(epoch, index); });
}

void DataLoader::StopThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DataLoader::Seek(int64_t epoch, int64_t index) {
  LOOM_CHECK(epoch >= 0 && index >= 0 && index <= batches_per_epoch(), ValueError, "[data_loader] cannot seek to "
             "batch ", index, " of epoch ", epoch, ": an epoch has batches 0 to ", batches_per_epoch() - 1,
             " (and ", batches_per_epoch(), " for its end)");
  StopThread();
  queue_.clear();
  stop_ = false;
  failed_ = nullptr;
  sync_epoch_ = epoch;
  sync_index_ = index;
  pos_ = {epoch, index};
  StartThread(epoch, index);
}

int64_t DataLoader::batches_per_epoch() const {
  const int64_t n = samples_per_epoch();
  // n + batch_size - 1 overflowed for a batch_size near 2^63: no batch at all.
  return n / opt_.batch_size + (!opt_.drop_last && n % opt_.batch_size != 0 ? 1 : 0);
}

Shape DataLoader::x_shape(int64_t batch) const {
  if (dataset_) {
    Shape s = dataset_->sample_shape();
    s.insert(s.begin(), batch);
    return s;
  }
  if (opt_.flat) return {batch, int64_t(data_->sample_size())};
  return {batch, data_->channels, data_->height, data_->width};
}

Shape DataLoader::y_shape(int64_t batch) const {
  Shape s = dataset_ ? dataset_->target_shape() : Shape{};
  s.insert(s.begin(), batch);
  return s;
}

DType DataLoader::y_dtype() const { return dataset_ ? dataset_->target_dtype() : DType::kInt32; }

std::string DataLoader::name() const { return dataset_ ? dataset_->name() : "images"; }

std::vector<int64_t> EpochOrder(int64_t n, bool shuffle, uint64_t seed, int64_t epoch, int64_t shard_rank,
                                int64_t shard_world) {
  LOOM_CHECK(n >= 0 && epoch >= 0 && shard_world >= 1 && shard_rank >= 0 && shard_rank < shard_world, ValueError,
             "[data_loader] no epoch order for ", n, " samples, epoch ", epoch, ", shard (", shard_rank, ", ",
             shard_world, ")");
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
  if (shuffle) {
    // Fisher-Yates with our own generator: the same order on every platform (std::shuffle's
    // and the standard distributions' results are implementation-defined).
    uint64_t state = SplitMix64(seed ^ SplitMix64(uint64_t(epoch)));
    for (size_t i = order.size(); i > 1; --i) {
      state = SplitMix64(state);
      size_t j = size_t(state % i);
      std::swap(order[i - 1], order[j]);
    }
  }
  if (shard_world > 1) {  // Note [Sharded epochs]
    std::vector<int64_t> mine(static_cast<size_t>(n / shard_world));
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = order[i * size_t(shard_world) + size_t(shard_rank)];
    order = std::move(mine);
  }
  return order;
}

void DataLoader::Reorder(int64_t epoch) {
  if (order_epoch_ == epoch) return;
  order_ = EpochOrder(n_, opt_.shuffle, opt_.seed, epoch, opt_.shard_rank, opt_.shard_world);
  order_epoch_ = epoch;
}

AugmentDraw DrawAugment(uint64_t augment_seed, int64_t epoch, int64_t sample, int64_t padding, bool hflip) {
  // Note [Counter-based augmentation] in dataset.h: a hash of (seed, epoch, sample), no state.
  uint64_t r = SplitMix64(SplitMix64(SplitMix64(augment_seed) ^ uint64_t(epoch)) ^ uint64_t(sample));
  AugmentDraw d;
  const uint64_t span = uint64_t(2 * padding + 1);
  d.dy = int64_t((r & 0xffff) % span);
  d.dx = int64_t(((r >> 16) & 0xffff) % span);
  d.flip = hflip && ((r >> 32) & 1);
  return d;
}

HostBatch DataLoader::MakeBatch(int64_t epoch, int64_t index) {
  Reorder(epoch);
  HostBatch b;
  b.epoch = epoch;
  b.index = index;
  int64_t begin = index * opt_.batch_size;
  b.size = std::min(opt_.batch_size, samples_per_epoch() - begin);
  if (dataset_) {
    FillFromDataset(&b, begin);
    return b;
  }
  const size_t sample = data_->sample_size(), plane = size_t(data_->height * data_->width);
  const size_t channels = size_t(data_->channels);
  const int64_t height = data_->height, width = data_->width, pad = opt_.crop_padding;
  const bool augment = pad > 0 || opt_.hflip;
  b.x.resize(size_t(b.size) * sample);
  b.y.resize(size_t(b.size));
  for (int64_t i = 0; i < b.size; ++i) {
    int64_t s = order_[size_t(begin + i)];
    b.y[size_t(i)] = data_->labels[size_t(s)];
    const uint8_t* src = data_->images.data() + size_t(s) * sample;
    float* dst = b.x.data() + size_t(i) * sample;
    if (!augment) {
      for (size_t c = 0; c < channels; ++c) {
        const float a = scale_[c], o = shift_[c];
        for (size_t k = c * plane; k < (c + 1) * plane; ++k) dst[k] = float(src[k]) * a + o;
      }
      continue;
    }
    // The window at (dy, dx) of the image padded with zero pixels, then mirrored when flipped.
    const AugmentDraw d = DrawAugment(opt_.augment_seed, epoch, s, pad, opt_.hflip);
    for (size_t c = 0; c < channels; ++c) {
      const float a = scale_[c], o = shift_[c];
      const uint8_t* sp = src + c * plane;
      float* dp = dst + c * plane;
      for (int64_t h = 0; h < height; ++h) {
        const int64_t sh = h + d.dy - pad;
        for (int64_t w = 0; w < width; ++w) {
          const int64_t sw = (d.flip ? width - 1 - w : w) + d.dx - pad;
          const bool inside = sh >= 0 && sh < height && sw >= 0 && sw < width;
          dp[h * width + w] = float(inside ? sp[sh * width + sw] : 0) * a + o;
        }
      }
    }
  }
  if (opt_.transform) opt_.transform(b);
  LOOM_CHECK(b.x.size() == size_t(b.size) * sample && b.y.size() == size_t(b.size) && b.y_float.empty(), ValueError,
             "[data_loader] the transform changed the batch's size");
  return b;
}

// Note [Users' data sets] in io/user_dataset.h: sample by sample, by index, in the epoch's order.
void DataLoader::FillFromDataset(HostBatch* b, int64_t begin) {
  const size_t xs = size_t(NumElements(dataset_->sample_shape())), ys = size_t(NumElements(dataset_->target_shape()));
  const bool labels = dataset_->target_dtype() == DType::kInt32;
  const size_t n = size_t(b->size);
  b->x.resize(n * xs);
  if (labels) {
    b->y.resize(n * ys);
  } else {
    b->y_float.resize(n * ys);
  }
  for (size_t i = 0; i < n; ++i) {
    SampleOut out;
    out.x = b->x.data() + i * xs;
    if (labels) {
      out.label = b->y.data() + i * ys;
    } else {
      out.target = b->y_float.data() + i * ys;
    }
    dataset_->Get(order_[size_t(begin) + i], out);
  }
  if (opt_.transform) opt_.transform(*b);
  LOOM_CHECK(b->x.size() == n * xs && b->y.size() == (labels ? n * ys : 0) && b->y_float.size() == (labels ? 0 : n * ys),
             ValueError, "[data_loader] data set '", dataset_->name(), "': the transform changed the batch's size");
}

DataLoader::Item DataLoader::MakeItem(int64_t epoch, int64_t index) {
  Item item;
  if (index >= batches_per_epoch()) {
    item.kind = Item::kEndOfEpoch;
    item.batch.epoch = epoch;
  } else {
    item.batch = MakeBatch(epoch, index);
  }
  return item;
}

bool DataLoader::Push(Item item) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return stop_ || int(queue_.size()) < opt_.prefetch; });
  if (stop_) return false;
  queue_.push_back(std::move(item));
  cv_.notify_all();
  return true;
}

void DataLoader::Produce(int64_t first_epoch, int64_t first_index) {
  try {
    for (int64_t epoch = first_epoch;; ++epoch) {
      for (int64_t index = epoch == first_epoch ? first_index : 0; index <= batches_per_epoch(); ++index)
        if (!Push(MakeItem(epoch, index))) return;
    }
  } catch (...) {
    Item item;
    item.kind = Item::kError;
    item.error = std::current_exception();
    Push(std::move(item));
  }
}

DataLoader::Item DataLoader::Pop() {
  if (!thread_.joinable()) {  // synchronous mode
    Item item = MakeItem(sync_epoch_, sync_index_);
    if (item.kind == Item::kEndOfEpoch) {
      ++sync_epoch_;
      sync_index_ = 0;
    } else {
      ++sync_index_;
    }
    return item;
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty(); });
  Item item = std::move(queue_.front());
  queue_.pop_front();
  cv_.notify_all();
  return item;
}

bool DataLoader::NextHost(HostBatch* batch) {
  if (failed_) std::rethrow_exception(failed_);
  Item item;
  try {
    item = Pop();
  } catch (...) {  // synchronous mode: the same contract as the thread's
    failed_ = std::current_exception();
    throw;
  }
  if (item.kind == Item::kError) {
    failed_ = item.error;
    std::rethrow_exception(failed_);
  }
  if (item.kind == Item::kEndOfEpoch) {
    pos_ = {item.batch.epoch + 1, 0};
    return false;
  }
  pos_ = {item.batch.epoch, item.batch.index + 1};
  *batch = std::move(item.batch);
  return true;
}

namespace {
void CopyY(const HostBatch& hb, Tensor& y) {
  if (hb.y_float.empty()) {
    y.CopyFromHost(hb.y.data(), hb.y.size() * sizeof(int32_t));
  } else {
    y.CopyFromHost(hb.y_float.data(), hb.y_float.size() * sizeof(float));
  }
}
}  // namespace

bool DataLoader::Next(Batch* batch) {
  HostBatch hb;
  if (!NextHost(&hb)) return false;
  batch->x = Tensor(x_shape(hb.size), DType::kFloat32, opt_.device);
  batch->x.CopyFromHost(hb.x.data(), hb.x.size() * sizeof(float));
  batch->y = Tensor(y_shape(hb.size), y_dtype(), opt_.device);
  CopyY(hb, batch->y);
  batch->epoch = hb.epoch;
  batch->index = hb.index;
  return true;
}

bool DataLoader::NextInto(const Tensor& x, const Tensor& y) {
  HostBatch hb;
  if (!NextHost(&hb)) return false;
  Shape xs = x_shape(hb.size);
  LOOM_CHECK(x.shape() == xs && x.dtype() == DType::kFloat32, ShapeError, "[data_loader] batch ", hb.index,
             " of epoch ", hb.epoch, " is float32 ", ToString(xs), ", the target x is ", x.Describe(),
             hb.size < opt_.batch_size ? " (the last batch is smaller: set drop_last)" : "");
  const Shape ys = y_shape(hb.size);
  LOOM_CHECK(y.shape() == ys && y.dtype() == y_dtype(), ShapeError, "[data_loader] batch ", hb.index, " of epoch ",
             hb.epoch, " has ", Name(y_dtype()), " y ", ToString(ys), ", the target y is ", y.Describe());
  Tensor tx = x, ty = y;
  tx.CopyFromHost(hb.x.data(), hb.x.size() * sizeof(float));
  CopyY(hb, ty);
  return true;
}

}  // namespace io
}  // namespace loom
