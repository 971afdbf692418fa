// libFuzzer target: the graph-dump reader (io/graph_dump.h DecodeGraphDump), what tools/graph_dump
// runs on a file. The whole input is the file (seeds: real dumps, from graph_dump_seeds). Any input
// must decode or raise loom::Error. What decodes must keep the promises readers rely on (every op,
// block and lifetime index in range) and encode and decode again to the same dump.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "core/error.h"
#include "io/graph_dump.h"

namespace {

bool InRange(int64_t i, size_t n, bool allow_none) { return (allow_none && i == -1) || (i >= 0 && uint64_t(i) < n); }

void CheckIndices(const loom::GraphDump& d) {
  const size_t nops = d.ops.size(), nblocks = d.blocks.size();
  for (const auto& op : d.ops) {
    for (int b : op.reads)
      if (!InRange(b, nblocks, false)) std::abort();
    for (int b : op.writes)
      if (!InRange(b, nblocks, false)) std::abort();
  }
  for (const auto& b : d.blocks)
    if (!InRange(b.life.first, nops, true) || !InRange(b.life.last, nops, true) ||
        !InRange(b.life.first_write, nops, true))
      std::abort();
  for (const loom::Dep& dep : d.deps)
    if (!InRange(dep.from, nops, false) || !InRange(dep.to, nops, false) || dep.kinds < 1 || dep.kinds > 7)
      std::abort();
}

}  // namespace

// protobuf logs an error line for every string field with invalid UTF-8 it parses: megabytes
// of log per second of fuzzing, and no finding (the parse fails and loom raises IOError).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    loom::GraphDump d = loom::io::DecodeGraphDump(data, size, "fuzz");
    CheckIndices(d);
    // Encoding is a function of the dump: a lossless decode gives back the same bytes.
    const std::string bytes = loom::io::EncodeGraphDump(d);
    try {
      loom::GraphDump back = loom::io::DecodeGraphDump(bytes.data(), bytes.size(), "re-encoded");
      if (loom::io::EncodeGraphDump(back) != bytes) std::abort();
    } catch (const loom::Error&) {
      std::abort();  // what decoded must encode and decode again
    }
  } catch (const loom::Error&) {
  }
  return 0;
}
