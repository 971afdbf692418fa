#include "io/onnx/tensor_proto.h"

#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/ops.h"
#include "core/shape.h"
#include "core/device.h"
#include "io/file.h"

namespace loom {
namespace io {
namespace onnx {

using onnx_pb::TensorProto;

int32_t OnnxFromDType(DType t) {
  switch (t) {
    case DType::kFloat32: return TensorProto::FLOAT;
    case DType::kFloat64: return TensorProto::DOUBLE;
    case DType::kFloat16: return TensorProto::FLOAT16;
    case DType::kBFloat16: return TensorProto::BFLOAT16;
    case DType::kInt32: return TensorProto::INT32;
    case DType::kInt64: return TensorProto::INT64;
    case DType::kUInt8: return TensorProto::UINT8;
    case DType::kBool: return TensorProto::BOOL;
  }
  LOOM_ASSERT(false, "[onnx] dtype ", int(t), " has no ONNX type");
  return 0;
}

const char* OnnxTypeName(int32_t elem_type) {
  if (TensorProto::DataType_IsValid(elem_type))
    return TensorProto::DataType_Name(static_cast<TensorProto::DataType>(elem_type)).c_str();
  return "an unknown type";
}

DType DTypeFromOnnx(int32_t elem_type, const std::string& where) {
  switch (elem_type) {
    case TensorProto::FLOAT: return DType::kFloat32;
    case TensorProto::DOUBLE: return DType::kFloat64;
    case TensorProto::FLOAT16: return DType::kFloat16;
    case TensorProto::BFLOAT16: return DType::kBFloat16;
    case TensorProto::INT32: return DType::kInt32;
    case TensorProto::INT64: return DType::kInt64;
    case TensorProto::UINT8: return DType::kUInt8;
    case TensorProto::BOOL: return DType::kBool;
    default: break;
  }
  throw OnnxError(detail::Cat(where, ": ONNX type ", OnnxTypeName(elem_type), " (", elem_type,
                              ") has no loom dtype; loom reads FLOAT, DOUBLE, FLOAT16, BFLOAT16, "
                              "INT32, INT64, UINT8 and BOOL"));
}

void TensorToProto(const Tensor& t, const std::string& name, TensorProto* out) {
  LOOM_CHECK(t.defined(), OnnxError, "[onnx] tensor '", name, "' is undefined");
  CheckHostReadAllowed(t, "onnx export");
  out->Clear();
  out->set_name(name);
  out->set_data_type(OnnxFromDType(t.dtype()));
  for (int64_t d : t.shape()) out->add_dims(d);
  NoGradGuard no_grad;
  Tensor c = t.is_contiguous() ? t : t.Detach().Contiguous();
  std::string* raw = out->mutable_raw_data();
  raw->assign(c.nbytes(), '\0');
  if (!raw->empty()) {
    c.device()->Synchronize();
    c.device()->MemcpyToHost(&(*raw)[0], c.raw_data(), raw->size());
  }
}

namespace {

// Narrows the int32_data values of an 8/16-bit or bool tensor to their stored width; a value
// the width cannot hold (300 for a uint8, 2 for a bool) is the file's error, not a wrapped number.
template <typename T>
std::string Narrow(const google::protobuf::RepeatedField<int32_t>& v, int32_t max, const std::string& where,
                   const TensorProto& p, DType dtype) {
  std::string out(v.size() * sizeof(T), '\0');
  for (int i = 0; i < v.size(); ++i) {
    LOOM_CHECK(v.Get(i) >= 0 && v.Get(i) <= max, OnnxError, where, ": tensor '", p.name(), "' holds ", v.Get(i),
               " at position ", i, " of int32_data, outside the range [0, ", max, "] of ", Name(dtype));
    T x = static_cast<T>(v.Get(i));
    std::memcpy(&out[i * sizeof(T)], &x, sizeof(T));
  }
  return out;
}

template <typename T>
std::string Bytes(const google::protobuf::RepeatedField<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

}  // namespace

Tensor TensorFromProto(const TensorProto& p, const std::shared_ptr<Device>& device, const std::string& where) {
  LOOM_CHECK(p.data_location() != TensorProto::EXTERNAL && p.external_data_size() == 0, OnnxError, where,
             ": tensor '", p.name(), "' keeps its values in an external file, which loom does not read");
  LOOM_CHECK(!p.has_segment(), OnnxError, where, ": tensor '", p.name(), "' is segmented, which loom does not read");
  DType dtype = DTypeFromOnnx(p.data_type(), where + ": tensor '" + p.name() + "'");
  Shape shape(p.dims().begin(), p.dims().end());
  for (int64_t d : shape)
    LOOM_CHECK(d >= 0, OnnxError, where, ": tensor '", p.name(), "' has a negative dim in ", ToString(shape));
  const int64_t n = NumElements(shape, "onnx");
  const size_t bytes = static_cast<size_t>(ByteSize(shape, SizeOf(dtype), "onnx"));

  std::string data;
  const char* field = "raw_data";
  if (p.has_raw_data()) {
    data = p.raw_data();
  } else {
    switch (dtype) {
      case DType::kFloat32: data = Bytes(p.float_data()); field = "float_data"; break;
      case DType::kFloat64: data = Bytes(p.double_data()); field = "double_data"; break;
      case DType::kInt64: data = Bytes(p.int64_data()); field = "int64_data"; break;
      case DType::kInt32: data = Bytes(p.int32_data()); field = "int32_data"; break;
      case DType::kUInt8:
      case DType::kBool:
        data = Narrow<uint8_t>(p.int32_data(), dtype == DType::kBool ? 1 : 255, where, p, dtype);
        field = "int32_data";
        break;
      case DType::kFloat16:  // bit patterns
      case DType::kBFloat16: data = Narrow<uint16_t>(p.int32_data(), 65535, where, p, dtype); field = "int32_data"; break;
    }
  }
  LOOM_CHECK(data.size() == bytes, OnnxError, where, ": tensor '", p.name(), "' of shape ", ToString(shape), " (",
             n, " ", Name(dtype), " values) holds ", data.size(), " bytes in ", field, ", expected ", bytes);
  Tensor t(shape, dtype, device);
  if (bytes > 0) t.CopyFromHost(data.data(), data.size());
  return t;
}

void ReadProtoFile(const std::string& path, google::protobuf::MessageLite* out, const char* what) {
  std::string bytes = ReadFile(path, "onnx", size_t(INT32_MAX));  // a protobuf message's limit
  LOOM_CHECK(bytes.size() <= size_t(INT32_MAX), OnnxError, "[onnx] '", path, "' is ", bytes.size(),
             " bytes: larger than the 2 GiB a protobuf message can hold");
  LOOM_CHECK(out->ParseFromArray(bytes.data(), int(bytes.size())), OnnxError, "[onnx] '", path,
             "' is not a valid ", what, " (protobuf parse failed; truncated or not an ONNX file?)");
}

void WriteProtoFile(const std::string& path, const google::protobuf::MessageLite& m, const char* what) {
  const size_t size = m.ByteSizeLong();
  LOOM_CHECK(size <= size_t(INT32_MAX), OnnxError, "[onnx] the ", what, " is ", size,
             " bytes: larger than the 2 GiB one ONNX file can hold");
  std::string bytes;
  LOOM_CHECK(m.SerializeToString(&bytes), OnnxError, "[onnx] could not serialize the ", what);
  WriteFileAtomic(path, {bytes}, "onnx");
}

}  // namespace onnx
}  // namespace io
}  // namespace loom
