// A user's own data for the DataLoader (and so nn::Trainer): the interface io::Dataset, and
// io::ArrayDataset, samples already in host memory as std::vectors.
//
//   auto data = std::make_shared<io::ArrayDataset>(std::move(x), Shape{2}, std::move(labels), "xor");
//   io::DataLoaderOptions o;
//   o.batch_size = 32; o.seed = 1; o.drop_last = true;
//   io::DataLoader loader(data, o);                   // shuffles, batches, prefetches, resumes
//   nn::Trainer(model, loader, nullptr, {}).Fit();
//
// Note [Users' data sets]
// A Dataset is size() samples, each an x of sample_shape() float32 values and a y: an int32
// class label (target_dtype kInt32, target_shape () for softmax cross-entropy and evaluation)
// or float32 targets of target_shape() (kFloat32: regression with MSE). The loader asks for
// samples by index only (Get), in the order its seed gives (Note [Sharded epochs] in
// io/dataset.h), so its position (epoch, batch) is all a checkpoint needs to resume the same
// batches (Note [Bitwise resume] in nn/trainer.h): Get(i) must give the same sample for the same
// i every time. Get runs on the loader's background thread; two loaders may share a dataset, so
// it must be safe to call from two threads at once (a const method that reads only is).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace loom {
namespace io {

// Where Get writes sample i: x holds NumElements(sample_shape()) floats; exactly one of label
// (target_dtype kInt32) and target (kFloat32) is set, with NumElements(target_shape()) elements.
struct SampleOut {
  float* x = nullptr;
  int32_t* label = nullptr;
  float* target = nullptr;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::string name() const = 0;        // named in every error about it
  virtual int64_t size() const = 0;            // samples
  virtual Shape sample_shape() const = 0;      // one x: (784), (3, 32, 32), ...
  virtual Shape target_shape() const { return {}; }  // one y: () for a class label
  virtual DType target_dtype() const { return DType::kInt32; }  // kInt32 or kFloat32
  // Writes sample i (0 <= i < size()); may throw a loom::Error, which the loader re-throws in
  // its consumer.
  virtual void Get(int64_t i, const SampleOut& out) const = 0;
};

// Checks what the loader relies on: a name, at least one sample, shapes without a zero or
// negative dimension, target_dtype kInt32 or kFloat32 (and kInt32 with target_shape ()).
// ValueError, ShapeError or DTypeError naming the dataset.
void CheckDataset(const Dataset& d);

// Samples in host memory: x is size * NumElements(sample_shape) floats, sample after sample.
// Checked when made (Note [Users' data sets]): x's length a whole number of samples, as many
// labels (or targets) as samples, at least one sample, every value finite, labels >= 0; each
// failure a typed error naming the dataset, and the index and value where one is at fault.
class ArrayDataset : public Dataset {
 public:
  // Classification: one int32 label per sample.
  ArrayDataset(std::vector<float> x, Shape sample_shape, std::vector<int32_t> labels,
               std::string name = "ArrayDataset");
  // Regression: NumElements(target_shape) float32 targets per sample.
  ArrayDataset(std::vector<float> x, Shape sample_shape, std::vector<float> targets, Shape target_shape,
               std::string name = "ArrayDataset");

  std::string name() const override { return name_; }
  int64_t size() const override { return n_; }
  Shape sample_shape() const override { return sample_shape_; }
  Shape target_shape() const override { return target_shape_; }
  DType target_dtype() const override { return labels_.empty() ? DType::kFloat32 : DType::kInt32; }
  void Get(int64_t i, const SampleOut& out) const override;

 private:
  void CheckX(int64_t targets);  // x against the shape and the target count, then every value

  std::string name_;
  Shape sample_shape_, target_shape_;
  int64_t n_ = 0, x_size_ = 0, y_size_ = 1;  // samples, and elements per x and per y
  std::vector<float> x_, targets_;
  std::vector<int32_t> labels_;
};

}  // namespace io
}  // namespace loom
