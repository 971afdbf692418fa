// The checkpoint file format, below the Tensor level: records of bytes in, bytes out. Nothing
// here touches a device, so the parser is tested and fuzzed on its own (tools/fuzz/).
//
// Layout (the schema and the reasons are in loom.proto):
//   "LOOMCKPT"  CheckpointProto { format_version, checksum (FNV-1a 64 of payload), payload }
// where payload is a serialized CheckpointPayloadProto { tensors, meta }.
//
// Decoding checks, in this order, and throws IOError naming `source` and the problem:
// magic ("not a loom checkpoint"), format version ("format version 7, this build reads 1"),
// truncation ("truncated: ..."), checksum ("checksum mismatch"), then every record (dtype
// names, shapes, data sizes, duplicate names). Files are limited to 2 GiB (protobuf's limit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace loom {
namespace io {

constexpr uint32_t kCheckpointFormatVersion = 1;
constexpr char kCheckpointMagic[8] = {'L', 'O', 'O', 'M', 'C', 'K', 'P', 'T'};

struct RawTensor {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
  std::string data;  // contiguous, little-endian, numel * SizeOf(dtype) bytes
};

struct RawCheckpoint {
  std::vector<RawTensor> tensors;     // in file order, unique names
  std::map<std::string, double> meta;
};

// The file's bytes in two pieces (a small head and the payload), so that a large payload is
// written without another copy. Consumes the tensors' data. Checks names and sizes.
struct EncodedCheckpoint {
  std::string head;
  std::string payload;
  std::string Joined() const { return head + payload; }
};
EncodedCheckpoint EncodeCheckpoint(RawCheckpoint raw);

// Parses a whole file's bytes. `source` (the path) is named in every error.
RawCheckpoint DecodeCheckpoint(const void* data, size_t size, const std::string& source);
// Parses just a payload (no magic, no version, no checksum): the records' own checks.
RawCheckpoint DecodeCheckpointPayload(const void* data, size_t size, const std::string& source);

}  // namespace io
}  // namespace loom
