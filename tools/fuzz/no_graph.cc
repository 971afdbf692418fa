// The fuzz build compiles io/graph_dump.cc for its decoder, but not the graph library (which
// needs a device): the file's writer, WriteGraphDump, refers to MakeGraphDump. The fuzz targets
// never write a dump; this definition satisfies the linker and aborts if that ever changes.
#include <cstdio>
#include <cstdlib>

#include "graph/dump.h"

namespace loom {

GraphDump MakeGraphDump(const Graph&) {
  std::fprintf(stderr, "tools/fuzz: MakeGraphDump called, but the fuzz build has no graph library\n");
  std::abort();
}

}  // namespace loom
