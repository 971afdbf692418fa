#include "graph/options.h"

#include "core/error.h"

namespace loom {

const char* Name(MemoryMode m) { return m == MemoryMode::kPlanned ? "planned" : "dynamic"; }

MemoryMode ParseMemoryMode(const std::string& s) {
  if (s == "planned") return MemoryMode::kPlanned;
  if (s == "dynamic") return MemoryMode::kDynamic;
  throw ValueError("[graph] memory mode must be 'planned' or 'dynamic', got '" + s + "'");
}

}  // namespace loom
