#include "io/user_dataset.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace loom {
namespace io {

namespace {

void CheckShape(const std::string& name, const Shape& s, const char* what) {
  for (int64_t d : s)
    LOOM_CHECK(d > 0, ShapeError, "[dataset '", name, "'] ", what, " shape ", ToString(s),
               " has a dimension that is not positive");
  NumElements(s, "dataset");  // overflow (Note [Checked sizes])
}

}  // namespace

void CheckDataset(const Dataset& d) {
  const std::string name = d.name();
  LOOM_CHECK(!name.empty(), ValueError, "[dataset] a data set needs a name (it is named in its errors)");
  LOOM_CHECK(d.size() > 0, ValueError, "[dataset '", name, "'] is empty: ", d.size(), " samples");
  CheckShape(name, d.sample_shape(), "the sample");
  CheckShape(name, d.target_shape(), "the target");
  const DType t = d.target_dtype();
  LOOM_CHECK(t == DType::kInt32 || t == DType::kFloat32, DTypeError, "[dataset '", name, "'] targets of dtype ",
             Name(t), ": int32 (class labels) or float32 (regression targets)");
  LOOM_CHECK(t != DType::kInt32 || d.target_shape().empty(), ShapeError, "[dataset '", name,
             "'] int32 class labels are one per sample (shape ()), not ", ToString(d.target_shape()));
}

ArrayDataset::ArrayDataset(std::vector<float> x, Shape sample_shape, std::vector<int32_t> labels, std::string name)
    : name_(std::move(name)), sample_shape_(std::move(sample_shape)), x_(std::move(x)), labels_(std::move(labels)) {
  CheckX(int64_t(labels_.size()));
  for (int64_t i = 0; i < n_; ++i)
    LOOM_CHECK(labels_[size_t(i)] >= 0, ValueError, "[dataset '", name_, "'] sample ", i, ": label ",
               labels_[size_t(i)], " is negative (class labels count from 0)");
}

ArrayDataset::ArrayDataset(std::vector<float> x, Shape sample_shape, std::vector<float> targets, Shape target_shape,
                           std::string name)
    : name_(std::move(name)), sample_shape_(std::move(sample_shape)), target_shape_(std::move(target_shape)),
      x_(std::move(x)), targets_(std::move(targets)) {
  CheckShape(name_, target_shape_, "the target");
  y_size_ = NumElements(target_shape_, "dataset");
  LOOM_CHECK(targets_.size() % size_t(y_size_) == 0, ShapeError, "[dataset '", name_, "'] y holds ", targets_.size(),
             " values, not a whole number of targets of shape ", ToString(target_shape_));
  CheckX(int64_t(targets_.size()) / y_size_);
  for (size_t k = 0; k < targets_.size(); ++k)
    LOOM_CHECK(std::isfinite(targets_[k]), ValueError, "[dataset '", name_, "'] sample ", int64_t(k) / y_size_,
               ": target value ", targets_[k], " is not finite");
}

void ArrayDataset::CheckX(int64_t targets) {
  LOOM_CHECK(!name_.empty(), ValueError, "[dataset] a data set needs a name (it is named in its errors)");
  CheckShape(name_, sample_shape_, "the sample");
  x_size_ = NumElements(sample_shape_, "dataset");
  LOOM_CHECK(x_.size() % size_t(x_size_) == 0, ShapeError, "[dataset '", name_, "'] x holds ", x_.size(),
             " values, not a whole number of samples of shape ", ToString(sample_shape_));
  n_ = int64_t(x_.size()) / x_size_;
  LOOM_CHECK(n_ == targets, ShapeError, "[dataset '", name_, "'] x holds ", n_, " samples of shape ",
             ToString(sample_shape_), " but y holds ", targets, labels_.empty() ? " targets of shape " : " labels",
             labels_.empty() ? ToString(target_shape_) : "");
  LOOM_CHECK(n_ > 0, ValueError, "[dataset '", name_, "'] is empty: no samples");
  for (size_t k = 0; k < x_.size(); ++k)
    LOOM_CHECK(std::isfinite(x_[k]), ValueError, "[dataset '", name_, "'] sample ", int64_t(k) / x_size_, ": x value ",
               x_[k], " at element ", int64_t(k) % x_size_, " is not finite");
}

void ArrayDataset::Get(int64_t i, const SampleOut& out) const {
  LOOM_CHECK(i >= 0 && i < n_, ValueError, "[dataset '", name_, "'] sample ", i, " is outside [0, ", n_, ")");
  std::memcpy(out.x, x_.data() + size_t(i * x_size_), size_t(x_size_) * sizeof(float));
  if (labels_.empty()) {
    std::memcpy(out.target, targets_.data() + size_t(i * y_size_), size_t(y_size_) * sizeof(float));
  } else {
    *out.label = labels_[size_t(i)];
  }
}

}  // namespace io
}  // namespace loom
