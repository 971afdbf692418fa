// Graph dumps on disk: a GraphDump (graph/dump.h: what the analysis and the planner saw) written
// to a protobuf file (GraphDumpProto in loom.proto) and read back without a device, for offline
// inspection (tools/graph_dump) and for comparing graphs between builds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "graph/dump.h"

namespace loom {
namespace io {

constexpr uint32_t kGraphDumpFormatVersion = 1;
constexpr char kGraphDumpMagic[8] = {'L', 'O', 'O', 'M', 'G', 'R', 'P', 'H'};

void WriteGraphDump(const Graph& graph, const std::string& path);  // atomic (core/file.h)
GraphDump ReadGraphDump(const std::string& path);

// Bytes <-> dump, for tests and fuzzing. Decode checks magic, version and every index.
std::string EncodeGraphDump(const GraphDump& dump);
GraphDump DecodeGraphDump(const void* data, size_t size, const std::string& source);

}  // namespace io
}  // namespace loom
