// Graph dumps: a captured, analysed graph written to a protobuf file (GraphDumpProto in
// loom.proto) and read back without a device, for offline inspection (tools/graph_dump) and
// for comparing graphs between builds. The dump holds what the analysis and the planner saw:
// ops (kind, attributes, blocks read and written), blocks (size, persistence, lifetime,
// planned offset), the dependency edges with their hazard kinds, and the graph's statistics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/attrs.h"
#include "graph/analysis.h"
#include "graph/graph.h"

namespace loom {
namespace io {

constexpr uint32_t kGraphDumpFormatVersion = 1;
constexpr char kGraphDumpMagic[8] = {'L', 'O', 'O', 'M', 'G', 'R', 'P', 'H'};

struct GraphDump {
  struct Op {
    std::string kind;
    Attrs attrs;
    std::vector<int> reads;   // block indices
    std::vector<int> writes;  // block indices
    uint64_t rng_offset = 0;
  };
  struct BlockInfo {
    uint64_t id = 0;          // the Block's process-wide id
    BlockFacts facts;
    BlockLife life;
    size_t offset = SIZE_MAX; // arena offset; SIZE_MAX when not planned
  };
  std::string key;
  std::string device;
  std::vector<Op> ops;
  std::vector<BlockInfo> blocks;
  std::vector<Dep> deps;
  GraphStats stats;
  std::vector<size_t> live_bytes;  // per op

  // Counts, memory figures, dependency kinds and the most common op kinds.
  std::string Summary() const;
  // Graphviz: ops are boxes, blocks ellipses (persistent ones filled, planned ones with their
  // offset); block -> op is a read, op -> block a write; dashed op -> op edges are the
  // dependencies, labelled with their hazard kinds.
  std::string ToDot(bool with_deps = true) const;
};

// From a finalized graph (GraphError while it is still capturing).
GraphDump MakeGraphDump(const Graph& graph);

void WriteGraphDump(const Graph& graph, const std::string& path);  // atomic (io/file.h)
GraphDump ReadGraphDump(const std::string& path);

// Bytes <-> dump, for tests and fuzzing. Decode checks magic, version and every index.
std::string EncodeGraphDump(const GraphDump& dump);
GraphDump DecodeGraphDump(const void* data, size_t size, const std::string& source);

// "RAW|WAR" for a DepKind bitmask.
std::string DepKindsToString(uint8_t kinds);

}  // namespace io
}  // namespace loom
