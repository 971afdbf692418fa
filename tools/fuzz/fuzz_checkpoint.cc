// libFuzzer target: the checkpoint parser (src/io/checkpoint_format.h).
// The first byte picks what the rest is: even, a whole file (magic, version, checksum, payload);
// odd, a bare payload, so that the fuzzer also reaches the record checks behind the checksum.
// Any input must either parse or raise loom::Error; what parses must re-encode and parse back
// to the same records.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <google/protobuf/stubs/logging.h>

#include "core/error.h"
#include "io/checkpoint_format.h"

using loom::io::RawCheckpoint;

static void CheckRoundTrip(const RawCheckpoint& raw) {
  RawCheckpoint copy = raw;
  std::string bytes = loom::io::EncodeCheckpoint(copy).Joined();
  RawCheckpoint back = loom::io::DecodeCheckpoint(bytes.data(), bytes.size(), "re-encoded");
  if (back.tensors.size() != raw.tensors.size() || back.meta.size() != raw.meta.size()) std::abort();
  for (size_t i = 0; i < raw.tensors.size(); ++i) {
    const auto &a = raw.tensors[i], &b = back.tensors[i];
    if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape || a.data != b.data) std::abort();
  }
  for (const auto& kv : raw.meta) {
    auto it = back.meta.find(kv.first);
    // Compare bits: NaN != NaN.
    if (it == back.meta.end() || std::memcmp(&it->second, &kv.second, sizeof(double)) != 0) std::abort();
  }
}

// protobuf logs an error line for every string field with invalid UTF-8 it parses: megabytes
// of log per second of fuzzing, and no finding (the parse fails and loom raises IOError).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool payload_only = data[0] & 1;
  try {
    RawCheckpoint raw = payload_only ? loom::io::DecodeCheckpointPayload(data + 1, size - 1, "fuzz")
                                     : loom::io::DecodeCheckpoint(data + 1, size - 1, "fuzz");
    try {
      CheckRoundTrip(raw);
    } catch (const loom::Error&) {
      std::abort();  // what parsed must encode and parse again
    }
  } catch (const loom::Error&) {
  }
  return 0;
}
