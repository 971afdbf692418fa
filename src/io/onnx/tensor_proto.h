// ONNX's tensors and files, shared by the exporter and the importer. An internal header of
// src/io/onnx: it includes the generated schema (loom::onnx_pb, see CMakeLists.txt for why that
// package name), so only src/io/onnx/*.cc include it; public io headers never do.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "onnx_pb/onnx.pb.h"

namespace loom {
class Device;
namespace io {
namespace onnx {

// ONNX's TensorProto.DataType for a loom dtype, and back. `where` starts the OnnxError raised for
// a type without a counterpart ("[onnx] node 'conv1' (Conv) input 0: ...").
int32_t OnnxFromDType(DType t);
DType DTypeFromOnnx(int32_t elem_type, const std::string& where);
const char* OnnxTypeName(int32_t elem_type);  // "FLOAT", "STRING", ... ("type 42" when unknown)

// `t` (any layout, any device; a host read) as a TensorProto named `name`, values in raw_data
// (little-endian, as ONNX stores them).
void TensorToProto(const Tensor& t, const std::string& name, onnx_pb::TensorProto* out);

// A TensorProto as a new loom tensor on `device`. Reads raw_data or the typed repeated field the
// dtype uses (float_data, int32_data holding 8/16-bit values and bools, int64_data, double_data);
// every count is checked against the dims, and a tensor stored in an external file, a string
// tensor or a negative dim raises OnnxError naming `where`.
Tensor TensorFromProto(const onnx_pb::TensorProto& p, const std::shared_ptr<Device>& device,
                       const std::string& where);

// Whole messages from and to files: a parse failure or a file over protobuf's 2 GiB limit is an
// OnnxError naming the path; writes are atomic (core/file.h).
void ReadProtoFile(const std::string& path, google::protobuf::MessageLite* out, const char* what);
void WriteProtoFile(const std::string& path, const google::protobuf::MessageLite& m, const char* what);

}  // namespace onnx
}  // namespace io
}  // namespace loom
