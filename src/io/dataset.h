// Data sets and the DataLoader: MNIST (idx, raw or .gz) and CIFAR-10 (binary batches) read
// into host memory, then served as shuffled, normalised batches of Tensors on a device while a
// background thread prepares the next batch.
//
//   auto data = io::LoadMnist("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz");
//   io::DataLoaderOptions o;
//   o.batch_size = 64; o.mean = io::kMnistMean; o.stddev = io::kMnistStd;
//   io::DataLoader loader(data, o);
//   io::Batch b;
//   while (loader.Next(&b)) train(b.x, b.y);       // one epoch; the next call starts another
//
// With a captured graph, feed its input tensors instead: loader.NextInto(x, y).
//
// A user's own samples come through an io::Dataset instead of ImageData (io/user_dataset.h:
// io::ArrayDataset holds them in std::vectors): the same order, batching, background thread,
// position and Seek, with x float32 as the dataset gives it (the image options, normalisation,
// augmentation and flat, are the readers' and refused) and y int32 labels or float32 targets.
//
// Augmentation (CIFAR's standard: random crop with padding, horizontal flip) runs on the
// background thread; its draws are a function of (augment_seed, epoch, sample) (Note [Counter-
// based augmentation]). position() and Seek() name where the loader stands, so a checkpoint
// that saves the position resumes the same batches, augmented the same way.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "io/dataset_format.h"
#include "io/user_dataset.h"

namespace loom {

class Device;

namespace io {

// Reads files (gzip-compressed or not: detected from the content).
std::shared_ptr<ImageData> LoadMnist(const std::string& images_path, const std::string& labels_path);
// `dir` holding train-images-idx3-ubyte / train-labels-idx1-ubyte (or t10k-* when !train),
// each raw or with ".gz".
std::shared_ptr<ImageData> LoadMnistDir(const std::string& dir, bool train = true);
std::shared_ptr<ImageData> LoadCifar10(const std::vector<std::string>& batch_files);
// `dir` holding data_batch_1.bin ... data_batch_5.bin (or test_batch.bin when !train).
std::shared_ptr<ImageData> LoadCifar10Dir(const std::string& dir, bool train = true);

// The usual per-channel statistics of pixel / 255.
extern const std::vector<float> kMnistMean, kMnistStd;
extern const std::vector<float> kCifar10Mean, kCifar10Std;

// One batch prepared on the host: x float32 in the final layout, y int32 labels (or, from a
// Dataset of float32 targets, y_float instead).
struct HostBatch {
  std::vector<float> x;
  std::vector<int32_t> y;
  std::vector<float> y_float;
  int64_t size = 0;   // samples in this batch (the last one may be smaller)
  int64_t epoch = 0;
  int64_t index = 0;  // batch number within the epoch
};

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;
  uint64_t seed = 0;         // the order of epoch e depends only on (seed, e)
  bool drop_last = false;    // drop the last, smaller batch of an epoch
  // Note [Sharded epochs]
  // Data-parallel rank `shard_rank` of `shard_world` reads every
  // shard_world-th sample of each epoch's order, starting at its rank, and the same count on
  // every rank (n / shard_world: the tail is dropped), so all ranks run the same number of steps
  // and batch k of the ranks together is the global batch k of one loader of batch
  // batch_size * shard_world (as a set).
  int64_t shard_rank = 0, shard_world = 1;
  bool flat = false;         // x as (N, C*H*W) instead of (N, C, H, W): (N, 784) for MNIST
  // x = (pixel / 255 - mean[c]) / stddev[c]; one value per channel, or empty for pixel / 255.
  std::vector<float> mean, stddev;
  int prefetch = 2;          // batches prepared ahead by the background thread (1-2); 0: no thread
  std::shared_ptr<Device> device;  // where x and y go; null: the CPU
  // Augmentation, on the background thread: each image is padded by crop_padding pixels of
  // value 0 on every side and a random height x width window of it is kept (0: no crop), and
  // flipped left to right with probability 1/2 (hflip). Draws depend on (augment_seed, epoch,
  // sample) only (Note [Counter-based augmentation]).
  int64_t crop_padding = 0;
  bool hflip = false;
  uint64_t augment_seed = 0;
  // Runs on the background thread after normalisation and augmentation; may throw.
  std::function<void(HostBatch&)> transform;
};

// The samples of epoch `epoch` in the order a loader reads them: 0 .. n-1, shuffled by (seed,
// epoch) when shuffle, then shard_rank's share (Note [Sharded epochs]). Python's
// loom.data.DataLoader reads a user's dataset in this order too.
std::vector<int64_t> EpochOrder(int64_t n, bool shuffle, uint64_t seed, int64_t epoch, int64_t shard_rank = 0,
                                int64_t shard_world = 1);

// Where a loader stands: the batch the next call returns is batch `index` of epoch `epoch`
// (index == batches_per_epoch(): the next call reports the end of that epoch).
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t index = 0;
};

// Note [Counter-based augmentation]
// The crop offsets and the flip of sample s in epoch e are drawn from a hash of (augment_seed,
// e, s), never from a generator that advances as batches are made. So the background thread may
// run ahead, be stopped and restarted (Seek), or be absent (prefetch 0), and an epoch is
// augmented identically: the augmentation's whole random state is the seed and the loader's
// position, which is what a checkpoint saves (nn::RunState).

// The crop offsets (dy, dx in [0, 2 * padding]) and flip of sample `sample` in epoch `epoch`.
struct AugmentDraw {
  int64_t dy = 0, dx = 0;
  bool flip = false;
};
AugmentDraw DrawAugment(uint64_t augment_seed, int64_t epoch, int64_t sample, int64_t padding, bool hflip);

struct Batch {
  Tensor x;  // float32 (N, C, H, W), or (N, C*H*W) with flat; (N, sample_shape...) from a Dataset
  Tensor y;  // int32 (N), or float32 (N, target_shape...) from a Dataset of float32 targets
  int64_t epoch = 0;
  int64_t index = 0;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const ImageData> data, DataLoaderOptions options);
  // A user's samples (Note [Users' data sets] in io/user_dataset.h): CheckDataset, and
  // ValueError for the image options (mean, stddev, crop_padding, hflip, flat).
  DataLoader(std::shared_ptr<const Dataset> data, DataLoaderOptions options);
  ~DataLoader();  // stops and joins the background thread
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch of the current epoch, or false at the end of the epoch (the call after
  // that starts the next epoch). An exception raised while preparing a batch on the background
  // thread is re-thrown here, and again on every later call.
  bool Next(Batch* batch);
  // The same, written into existing tensors (a captured graph's inputs: docs/design.md invariant 6).
  // Their shapes must fit the batch: ShapeError otherwise (use drop_last with a graph).
  bool NextInto(const Tensor& x, const Tensor& y);
  // The host side only, without a device.
  bool NextHost(HostBatch* batch);

  int64_t batches_per_epoch() const;
  int64_t size() const { return n_; }
  int64_t samples_per_epoch() const { return n_ / opt_.shard_world; }  // this shard's
  Shape x_shape(int64_t batch) const;  // the shape of x for a batch of `batch` samples
  Shape y_shape(int64_t batch) const;  // and of y
  DType y_dtype() const;               // int32, or float32 from a Dataset of float32 targets
  std::string name() const;            // the Dataset's name, or "images"
  const DataLoaderOptions& options() const { return opt_; }

  // The batch the next call returns (LoaderPosition).
  LoaderPosition position() const { return pos_; }
  // Makes the next call return batch `index` of epoch `epoch` (0 <= index <= batches_per_epoch()):
  // the background thread is stopped, its prepared batches dropped, and it restarts there. A
  // failure of an earlier batch is forgotten. ValueError for a position outside the epoch.
  void Seek(int64_t epoch, int64_t index);

 private:
  struct Item {
    enum Kind { kBatch, kEndOfEpoch, kError } kind = kBatch;
    HostBatch batch;
    std::exception_ptr error;
  };
  void Produce(int64_t epoch, int64_t index);     // the background thread, from that batch on
  void StartThread(int64_t epoch, int64_t index);
  void StopThread();
  Item MakeItem(int64_t epoch, int64_t index);     // one batch or end marker, on any thread
  HostBatch MakeBatch(int64_t epoch, int64_t index);
  void FillFromDataset(HostBatch* b, int64_t begin);
  void Start();                                    // checks the options, starts the thread
  void Reorder(int64_t epoch);
  bool Push(Item item);                            // false when stopping
  Item Pop();

  std::shared_ptr<const ImageData> data_;          // one of these two
  std::shared_ptr<const Dataset> dataset_;
  int64_t n_ = 0;                                  // samples
  DataLoaderOptions opt_;
  std::vector<float> scale_, shift_;               // per channel: x = pixel * scale + shift
  std::vector<int64_t> order_;                     // the current epoch's sample order
  int64_t order_epoch_ = -1;

  // Synchronous mode (prefetch 0): the consumer's own cursor.
  int64_t sync_epoch_ = 0, sync_index_ = 0;
  LoaderPosition pos_;                             // the consumer's: what the next call returns

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::exception_ptr failed_;
  std::thread thread_;
};

}  // namespace io
}  // namespace loom
