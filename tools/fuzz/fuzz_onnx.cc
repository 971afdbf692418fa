// libFuzzer target: the ONNX importer (src/io/onnx/import.h) on arbitrary bytes. The input is a
// serialized ModelProto (seeded with ONNX's backend-test models); importing parses it, checks
// every node against the registry, infers dtypes and makes the initializers and Constant values
// as loom tensors on the CPU. Any input must import or raise a loom error (an OnnxError, or the
// typed error of a check the tensors make); an InternalError (a broken invariant) or any other
// exception is a finding.
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "core/error.h"
#include "core/device.h"
#include "io/onnx/import.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // invalid UTF-8 in string fields: a log line each
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    loom::io::OnnxModel m = loom::io::ImportOnnxFromBytes(bytes, loom::CpuDevice());
    // What imported is consistent: every node has a handler and every output a dtype.
    if (m.node_op_types().size() != m.num_nodes() || m.outputs().empty()) std::abort();
  } catch (const loom::InternalError& e) {
    std::fprintf(stderr, "fuzz_onnx: internal error: %s\n", e.what());
    std::abort();
  } catch (const loom::Error&) {
    // refused, with a typed error: the expected outcome for most inputs
  }
  return 0;
}
