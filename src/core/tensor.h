// Tensor: a handle on (part of) a Block, with shape, strides, offset and dtype. Copies of a
// Tensor share the Block and the autograd state; views (Reshape, Transpose, Slice...) share the
// Block only. Values live on the device; reading them on the host is explicit (ToVector, Item)
// and is refused while the device is capturing a graph (docs/design.md invariant 4).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/block.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace loom {

class Device;
struct Node;

// Autograd state shared by all copies of one Tensor.
struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  int output_index = 0;           // which output of grad_fn this tensor is
  std::string name;               // optional, for messages and optimizers
};

class Tensor {
 public:
  Tensor() = default;
  // A new tensor with its own lazy (unallocated) block.
  Tensor(const Shape& shape, DType dtype, std::shared_ptr<Device> device);
  // A view on an existing block.
  Tensor(std::shared_ptr<Block> block, Shape shape, Shape strides, int64_t offset, DType dtype);

  bool defined() const { return block_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int64_t i) const;  // negative counts from the end
  int64_t ndim() const { return int64_t(shape_.size()); }
  const Shape& strides() const { return strides_; }
  int64_t offset() const { return offset_; }  // in elements
  DType dtype() const { return dtype_; }
  int64_t numel() const { return NumElements(shape_); }
  size_t nbytes() const { return size_t(numel()) * SizeOf(dtype_); }
  bool is_contiguous() const;
  Block* block() const { return block_.get(); }
  const std::shared_ptr<Block>& block_ptr() const { return block_; }
  Device* device() const { return block_ ? block_->device() : nullptr; }
  const std::shared_ptr<Device>& device_ptr() const;

  // Raw element pointer for kernels; the block must be allocated (checked).
  void* raw_data() const;
  template <typename T> T* data() const { return static_cast<T*>(raw_data()); }

  // ---- autograd ----
  bool requires_grad() const { return meta_ && meta_->requires_grad; }
  Tensor& set_requires_grad(bool r);  // only on leaves
  const std::shared_ptr<Node>& grad_fn() const;
  int output_index() const { return meta_ ? meta_->output_index : 0; }
  const std::shared_ptr<AutogradMeta>& meta() const { return meta_; }
  void set_meta(std::shared_ptr<AutogradMeta> m) { meta_ = std::move(m); }
  const std::string& name() const;
  Tensor& set_name(const std::string& n);
  Tensor Detach() const;  // same view, no autograd history

  // ---- host access (synchronises; throws GraphError during capture) ----
  template <typename T> std::vector<T> ToVector() const;
  double Item() const;  // one-element tensors, any numeric dtype
  void CopyFromHost(const void* src, size_t bytes);  // whole tensor, must be contiguous
  template <typename T> void CopyFrom(const std::vector<T>& v) {
    LOOM_CHECK(DTypeOf<T>::value == dtype_, DTypeError, "[copy_from_host] tensor is ", Name(dtype_),
               ", host data is ", Name(DTypeOf<T>::value));
    CopyFromHost(v.data(), v.size() * sizeof(T));
  }
  std::string ToString(int64_t max_items = 8) const;  // also a host read

  // ---- views (no copy; autograd-aware) and convenience ----
  Tensor Reshape(const Shape& shape) const;
  Tensor Transpose(int64_t a = -2, int64_t b = -1) const;
  Tensor Contiguous() const;

  std::string Describe() const;  // "float32 (2, 3) on cpu:0" for error messages

 private:
  std::shared_ptr<Block> block_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::kFloat32;
  std::shared_ptr<AutogradMeta> meta_;
};

// Host reads are refused while the tensor's device is capturing; this is the one check.
void CheckHostReadAllowed(const Tensor& t, const char* what);

}  // namespace loom
