// ONNX tensors <-> loom tensors (src/io/onnx/tensor_proto.h): every dtype both ways, the typed
// fields other writers use, and the malformed cases, each an OnnxError naming the tensor.
#include "io/onnx/tensor_proto.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "core/ops.h"
#include "common/files.h"
#include "common/harness.h"

namespace loom {
namespace {

using io::onnx::TensorFromProto;
using io::onnx::TensorToProto;
using onnx_pb::TensorProto;

using test::Cpu;

template <typename T>
void ExpectRoundTrip(DType dtype, const std::vector<T>& values, const Shape& shape) {
  Tensor t(shape, dtype, Cpu());
  t.CopyFromHost(values.data(), values.size() * sizeof(T));
  TensorProto p;
  TensorToProto(t, "w", &p);
  EXPECT_EQ(p.name(), "w");
  EXPECT_EQ(p.dims_size(), int(shape.size()));
  Tensor back = TensorFromProto(p, Cpu(), "[onnx] test");
  EXPECT_EQ(back.dtype(), dtype);
  EXPECT_EQ(back.shape(), shape);
  std::vector<T> got(values.size());
  if (!got.empty()) Cpu()->MemcpyToHost(got.data(), back.raw_data(), got.size() * sizeof(T));
  EXPECT_EQ(got, values);
}

TEST(OnnxTensor, EveryDTypeRoundTripsThroughRawData) {
  ExpectRoundTrip<float>(DType::kFloat32, {1.5f, -2.f, 0.f, 3.25f, 7.f, -0.f}, {2, 3});
  ExpectRoundTrip<double>(DType::kFloat64, {1e300, -2.5}, {2});
  ExpectRoundTrip<int32_t>(DType::kInt32, {1, -7, 2147483647}, {3, 1});
  ExpectRoundTrip<int64_t>(DType::kInt64, {int64_t(1) << 40, -3}, {2});
  ExpectRoundTrip<uint8_t>(DType::kUInt8, {0, 255, 17}, {3});
  ExpectRoundTrip<uint8_t>(DType::kBool, {0, 1, 1, 0}, {2, 2});
  ExpectRoundTrip<uint16_t>(DType::kFloat16, {0x3c00, 0xc000}, {2});
  ExpectRoundTrip<uint16_t>(DType::kBFloat16, {0x3f80, 0x4000}, {2});
  ExpectRoundTrip<float>(DType::kFloat32, {}, {0, 4});
  ExpectRoundTrip<float>(DType::kFloat32, {42.f}, {});  // a scalar: no dims
}

TEST(OnnxTensor, NonContiguousTensorsAreWrittenInLogicalOrder) {
  Tensor t(Shape{2, 3}, DType::kFloat32, Cpu());
  t.CopyFrom(std::vector<float>{0, 1, 2, 3, 4, 5});
  TensorProto p;
  TensorToProto(ops::Transpose(t, 0, 1), "t", &p);
  Tensor back = TensorFromProto(p, Cpu(), "[onnx] test");
  EXPECT_EQ(back.shape(), (Shape{3, 2}));
  EXPECT_EQ(back.ToVector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(OnnxTensor, ReadsTheTypedFields) {
  TensorProto f;
  f.set_data_type(TensorProto::FLOAT);
  f.add_dims(2);
  f.add_float_data(1.f);
  f.add_float_data(-4.f);
  EXPECT_EQ(TensorFromProto(f, Cpu(), "x").ToVector<float>(), (std::vector<float>{1.f, -4.f}));

  TensorProto i;
  i.set_data_type(TensorProto::INT64);
  i.add_dims(3);
  for (int64_t v : {5, -1, 9}) i.add_int64_data(v);
  EXPECT_EQ(TensorFromProto(i, Cpu(), "x").ToVector<int64_t>(), (std::vector<int64_t>{5, -1, 9}));

  TensorProto b;  // bools and 8-bit values are stored one per int32
  b.set_data_type(TensorProto::UINT8);
  b.add_dims(3);
  for (int v : {0, 200, 7}) b.add_int32_data(v);
  EXPECT_EQ(TensorFromProto(b, Cpu(), "x").ToVector<uint8_t>(), (std::vector<uint8_t>{0, 200, 7}));

  TensorProto d;
  d.set_data_type(TensorProto::DOUBLE);
  d.add_double_data(0.125);  // no dims: a scalar
  EXPECT_EQ(TensorFromProto(d, Cpu(), "x").ToVector<double>(), (std::vector<double>{0.125}));
}

void ExpectOnnxError(const TensorProto& p, const std::string& needle) {
  try {
    TensorFromProto(p, Cpu(), "[onnx] node 'n'");
    ADD_FAILURE() << "no error; expected one mentioning " << needle;
  } catch (const OnnxError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("node 'n'"), std::string::npos) << e.what();
  }
}

TEST(OnnxTensor, MalformedTensorsRaiseOnnxError) {
  TensorProto short_raw;
  short_raw.set_name("w");
  short_raw.set_data_type(TensorProto::FLOAT);
  short_raw.add_dims(4);
  short_raw.set_raw_data(std::string(12, '\0'));
  ExpectOnnxError(short_raw, "holds 12 bytes in raw_data, expected 16");

  TensorProto too_many = short_raw;
  too_many.clear_raw_data();
  for (int k = 0; k < 5; ++k) too_many.add_float_data(1.f);
  ExpectOnnxError(too_many, "float_data");

  TensorProto negative = short_raw;
  negative.set_dims(0, -4);
  ExpectOnnxError(negative, "negative dim");

  TensorProto strings;
  strings.set_data_type(TensorProto::STRING);
  strings.add_string_data("a");
  ExpectOnnxError(strings, "STRING");

  TensorProto external = short_raw;
  external.set_data_location(TensorProto::EXTERNAL);
  ExpectOnnxError(external, "external file");

  TensorProto unknown = short_raw;
  unknown.set_data_type(1234);
  ExpectOnnxError(unknown, "unknown type");

  TensorProto huge = short_raw;  // 2^62 elements: the checked size catches it before any allocation
  huge.set_dims(0, int64_t(1) << 62);
  EXPECT_THROW(TensorFromProto(huge, Cpu(), "x"), Error);
}

TEST(OnnxTensor, FilesAreWrittenWholeAndGarbageIsRefused) {
  test::TempDir dir;
  const std::string path = dir / "tensor.pb";
  TensorProto p;
  Tensor t(Shape{3}, DType::kFloat32, Cpu());
  t.CopyFrom(std::vector<float>{1, 2, 3});
  TensorToProto(t, "t", &p);
  io::onnx::WriteProtoFile(path, p, "tensor");
  TensorProto back;
  io::onnx::ReadProtoFile(path, &back, "tensor");
  EXPECT_EQ(back.SerializeAsString(), p.SerializeAsString());

  onnx_pb::ModelProto m;
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fputs("\xff\xff\xff this is not protobuf", f);
  std::fclose(f);
  EXPECT_THROW(io::onnx::ReadProtoFile(path, &m, "ONNX model"), OnnxError);
}

}  // namespace
}  // namespace loom
