// Step 7 of graph.h, observing: a finalised graph as plain data (GraphDump), and the one DOT
// writer. src/io writes a GraphDump to a protobuf file and reads it back without a device
// (io/graph_dump.h, tools/graph_dump); a live Graph draws itself through the same writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/attrs.h"
#include "graph/analysis.h"
#include "graph/options.h"

namespace loom {

class Graph;

// What the analysis and the planner saw: ops (kind, attributes, blocks read and written),
// blocks (size, persistence, lifetime, planned offset), the dependency edges with their hazard
// kinds, and the graph's statistics.
struct GraphDump {
  struct Op {
    std::string kind;
    Attrs attrs;
    std::vector<int> reads;   // block indices
    std::vector<int> writes;  // block indices
    uint64_t rng_offset = 0;
  };
  struct BlockInfo {
    uint64_t id = 0;           // the Block's process-wide id
    BlockFacts facts;
    BlockLife life;
    size_t offset = SIZE_MAX;  // arena offset; SIZE_MAX when not planned
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
  // offset); block -> op is a read, op -> block a write; with_deps adds the dependencies as
  // dashed op -> op edges labelled with their hazard kinds.
  std::string ToDot(bool with_deps = true) const;
};

// From a finalised graph (GraphError while it is still capturing).
GraphDump MakeGraphDump(const Graph& graph);

// "RAW|WAR" for a DepKind bitmask.
std::string DepKindsToString(uint8_t kinds);

}  // namespace loom
