#include "core/tensor.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "core/op.h"
#include "core/device.h"

LOOM_OP_KIND(copy);
LOOM_OP_KIND(reshape);
LOOM_OP_KIND(transpose);

namespace loom {

Tensor::Tensor(const Shape& shape, DType dtype, std::shared_ptr<Device> device)
    : shape_(shape), dtype_(dtype) {
  LOOM_CHECK(device, DeviceError, "[tensor] no device given");
  const int64_t bytes = ByteSize(shape, SizeOf(dtype), "tensor");  // Note [Checked sizes]
  strides_ = ContiguousStrides(shape);
  block_ = std::make_shared<Block>(size_t(bytes), std::move(device));
}

Tensor::Tensor(std::shared_ptr<Block> block, Shape shape, Shape strides, int64_t offset, DType dtype)
    : block_(std::move(block)), shape_(std::move(shape)), strides_(std::move(strides)), offset_(offset), dtype_(dtype) {}

int64_t Tensor::dim(int64_t i) const { return shape_[size_t(NormalizeAxis(i, ndim(), "dim"))]; }

bool Tensor::is_contiguous() const {
  int64_t acc = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != acc) return false;
    acc *= shape_[i];
  }
  return true;
}

const std::shared_ptr<Device>& Tensor::device_ptr() const {
  static const std::shared_ptr<Device> none;
  return block_ ? block_->device_ptr() : none;
}

void* Tensor::raw_data() const {
  LOOM_ASSERT(block_ && block_->allocated(), "kernel touched unallocated ", Describe());
  if (BlockGuard* g = block_->guard()) g->BeforeAccess();  // Note [Layout guards]
  return static_cast<char*>(block_->ptr()) + offset_ * int64_t(SizeOf(dtype_));
}

Tensor& Tensor::set_requires_grad(bool r) {
  LOOM_CHECK(!grad_fn(), ValueError, "[requires_grad] can only be set on leaf tensors; ", Describe(),
             " was produced by an op");
  LOOM_CHECK(!r || IsFloating(dtype_), DTypeError, "[requires_grad] only floating tensors can require gradients, got ",
             Describe());
  if (!meta_) meta_ = std::make_shared<AutogradMeta>();
  meta_->requires_grad = r;
  return *this;
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  return meta_ ? meta_->grad_fn : none;
}

const std::string& Tensor::name() const {
  static const std::string none;
  return meta_ ? meta_->name : none;
}

Tensor& Tensor::set_name(const std::string& n) {
  if (!meta_) meta_ = std::make_shared<AutogradMeta>();
  meta_->name = n;
  return *this;
}

Tensor Tensor::Detach() const { return Tensor(block_, shape_, strides_, offset_, dtype_); }

std::string Tensor::Describe() const {
  if (!block_) return "undefined tensor";
  std::ostringstream o;
  o << Name(dtype_) << " " << loom::ToString(shape_) << " on " << block_->device()->name();
  return o.str();
}

void CheckHostReadAllowed(const Tensor& t, const char* what) {
  LOOM_CHECK(t.defined(), ValueError, "[", what, "] undefined tensor");
  Device* d = t.device();
  LOOM_CHECK(!d->buffering(), GraphError, "[", what, "] cannot read ", t.Describe(),
             " on the host while ", d->name(), " is capturing ", d->capture_name(),
             ": capture runs nothing, so there is no value yet. Read it after the capture ends and the "
             "graph has run (EnableGraph(false) and RunGraph())");
  LOOM_CHECK(t.block()->allocated(), ValueError, "[", what, "] ", t.Describe(),
             " holds no value (it was never written, or its memory was recycled by a graph)");
  d->NoteHostTransfer(what, /*write=*/false);  // Note [Host-transfer trap]
}

template <typename T>
std::vector<T> Tensor::ToVector() const {
  CheckHostReadAllowed(*this, "to_host");
  LOOM_CHECK(DTypeOf<T>::value == dtype_, DTypeError, "[to_host] tensor is ", Name(dtype_), ", asked for ",
             Name(DTypeOf<T>::value));
  Tensor c = is_contiguous() ? *this : Contiguous();
  std::vector<T> out(static_cast<size_t>(numel()));
  device()->Synchronize();
  device()->MemcpyToHost(out.data(), c.raw_data(), out.size() * sizeof(T));
  return out;
}
template std::vector<float> Tensor::ToVector<float>() const;
template std::vector<double> Tensor::ToVector<double>() const;
template std::vector<int32_t> Tensor::ToVector<int32_t>() const;
template std::vector<int64_t> Tensor::ToVector<int64_t>() const;
template std::vector<uint8_t> Tensor::ToVector<uint8_t>() const;

double Tensor::Item() const {
  CheckHostReadAllowed(*this, "item");
  LOOM_CHECK(numel() == 1, ShapeError, "[item] needs a tensor with one element, got ", Describe());
  char buf[8];
  device()->Synchronize();
  device()->MemcpyToHost(buf, raw_data(), SizeOf(dtype_));
  switch (dtype_) {
    case DType::kFloat32: { float v; std::memcpy(&v, buf, 4); return v; }
    case DType::kFloat64: { double v; std::memcpy(&v, buf, 8); return v; }
    case DType::kFloat16: { uint16_t v; std::memcpy(&v, buf, 2); return HalfToFloat(v); }
    case DType::kBFloat16: { uint16_t v; std::memcpy(&v, buf, 2); return BFloat16ToFloat(v); }
    case DType::kInt32: { int32_t v; std::memcpy(&v, buf, 4); return v; }
    case DType::kInt64: { int64_t v; std::memcpy(&v, buf, 8); return double(v); }
    case DType::kUInt8:
    case DType::kBool: return double(uint8_t(buf[0]));
  }
  return 0;
}

void Tensor::CopyFromHost(const void* src, size_t bytes) {
  LOOM_CHECK(defined(), ValueError, "[copy_from_host] undefined tensor");
  LOOM_CHECK(bytes == nbytes(), ShapeError, "[copy_from_host] ", Describe(), " holds ", nbytes(),
             " bytes, host data has ", bytes);
  LOOM_CHECK(is_contiguous(), ValueError, "[copy_from_host] target ", Describe(), " is not contiguous");
  device()->NoteHostTransfer("copy_from_host", /*write=*/true);  // Note [Host-transfer trap]
  // A host write is a feed: it lands in the block now, also during a capture (the graph reads
  // the block when it runs). See docs/design.md invariant 6.
  block_->Allocate();
  device()->Synchronize();
  device()->MemcpyFromHost(raw_data(), src, bytes);
}

std::string Tensor::ToString(int64_t max_items) const {
  std::ostringstream o;
  o << "Tensor(" << Describe() << ", [";
  Tensor f = *this;
  std::vector<double> vals;
  if (dtype_ == DType::kFloat64) {
    vals = f.ToVector<double>();
  } else if (dtype_ == DType::kFloat32) {
    for (float v : f.ToVector<float>()) vals.push_back(v);
  } else if (dtype_ == DType::kInt64) {
    for (int64_t v : f.ToVector<int64_t>()) vals.push_back(double(v));
  } else if (dtype_ == DType::kInt32) {
    for (int32_t v : f.ToVector<int32_t>()) vals.push_back(v);
  } else if (numel() > 0) {  // bool, uint8, float16, bfloat16: the bytes, decoded here
    CheckHostReadAllowed(*this, "print");
    Tensor c = is_contiguous() ? *this : Contiguous();
    std::vector<uint8_t> bytes(nbytes());
    device()->Synchronize();
    device()->MemcpyToHost(bytes.data(), c.raw_data(), bytes.size());
    for (int64_t i = 0; i < numel(); ++i) {
      uint16_t h = 0;
      if (dtype_ == DType::kFloat16 || dtype_ == DType::kBFloat16) std::memcpy(&h, &bytes[size_t(2 * i)], 2);
      vals.push_back(dtype_ == DType::kFloat16    ? double(HalfToFloat(h))
                     : dtype_ == DType::kBFloat16 ? double(BFloat16ToFloat(h))
                                                  : double(bytes[size_t(i)]));
    }
  }
  for (size_t i = 0; i < vals.size() && int64_t(i) < max_items; ++i) o << (i ? ", " : "") << vals[i];
  if (int64_t(vals.size()) > max_items) o << ", ...";
  o << "])";
  return o.str();
}

Tensor Tensor::Reshape(const Shape& shape) const {
  return Call1(op_kind::reshape, {*this}, Attrs{{"shape", shape}});
}

Tensor Tensor::Transpose(int64_t a, int64_t b) const {
  return Call1(op_kind::transpose, {*this}, Attrs{{"a", a}, {"b", b}});
}

Tensor Tensor::Contiguous() const {
  if (is_contiguous()) return *this;
  return Call1(op_kind::copy, {*this});
}

}  // namespace loom
