#include "core/debug.h"

#include <atomic>
#include <cstdlib>

namespace loom {
namespace {
std::atomic<int>& Level() {
  static std::atomic<int> level{[] {
    const char* s = std::getenv("LOOM_DEBUG");
    return s ? std::atoi(s) : 0;
  }()};
  return level;
}
}  // namespace
int DebugLevel() { return Level().load(std::memory_order_relaxed); }
void SetDebugLevel(int level) { Level() = level; }
}  // namespace loom
