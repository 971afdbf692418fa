#include "graph/analysis.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace loom {

bool IsPersistent(const BlockFacts& facts, const BlockLife& life) {
  return facts.marked_persistent || facts.held_outside || facts.has_memory || life.read_before_write;
}

Analysis Analyse(const std::vector<AccessList>& ops, const std::vector<BlockFacts>& blocks) {
  Analysis a;
  const int n = int(ops.size());
  a.blocks.resize(blocks.size());
  a.preds.resize(size_t(n));
  a.touches.resize(size_t(n));
  a.allocs.resize(size_t(n));
  a.frees.resize(size_t(n));

  // Dependencies, by one scan in issue order (Note [Dependencies]).
  std::vector<int> last_writer(blocks.size(), -1);
  std::vector<std::vector<int>> readers(blocks.size());
  std::map<std::pair<int, int>, uint8_t> edges;
  auto edge = [&](int from, int to, DepKind k) {
    if (from >= 0 && from != to) edges[{from, to}] |= uint8_t(k);
  };
  for (int i = 0; i < n; ++i) {
    const AccessList& op = ops[size_t(i)];
    std::vector<int> touched;
    for (int b : op.reads) {
      LOOM_ASSERT(b >= 0 && size_t(b) < blocks.size(), "block index ", b);
      BlockLife& l = a.blocks[size_t(b)];
      if (l.first_write < 0) l.read_before_write = true;
      edge(last_writer[size_t(b)], i, DepKind::kRAW);
      readers[size_t(b)].push_back(i);
      touched.push_back(b);
    }
    for (int b : op.writes) {
      LOOM_ASSERT(b >= 0 && size_t(b) < blocks.size(), "block index ", b);
      BlockLife& l = a.blocks[size_t(b)];
      for (int r : readers[size_t(b)]) edge(r, i, DepKind::kWAR);
      edge(last_writer[size_t(b)], i, DepKind::kWAW);
      readers[size_t(b)].clear();
      last_writer[size_t(b)] = i;
      if (l.first_write < 0) l.first_write = i;
      touched.push_back(b);
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (int b : touched) {
      BlockLife& l = a.blocks[size_t(b)];
      if (l.first < 0) l.first = i;
      l.last = i;
      l.accessors++;
    }
    a.touches[size_t(i)] = std::move(touched);
  }
  for (auto& e : edges) {
    a.deps.push_back({e.first.first, e.first.second, e.second});
    a.preds[size_t(e.first.second)].push_back(e.first.first);
  }

  // Lifetimes, persistence, allocation and release points.
  std::vector<int64_t> delta(size_t(n) + 1, 0);
  for (size_t b = 0; b < blocks.size(); ++b) {
    BlockLife& l = a.blocks[b];
    l.persistent = IsPersistent(blocks[b], l);
    if (l.first < 0) continue;  // not used by any op
    if (l.persistent) {
      a.persistent_bytes += blocks[b].bytes;
      continue;
    }
    a.allocs[size_t(l.first)].push_back(int(b));
    a.frees[size_t(l.last)].push_back(int(b));
    delta[size_t(l.first)] += int64_t(blocks[b].bytes);
    delta[size_t(l.last) + 1] -= int64_t(blocks[b].bytes);
  }
  for (auto& t : a.touches)
    t.erase(std::remove_if(t.begin(), t.end(), [&](int b) { return a.blocks[size_t(b)].persistent; }), t.end());
  a.live_bytes.resize(size_t(n));
  int64_t live = 0;
  for (int i = 0; i < n; ++i) {
    live += delta[size_t(i)];
    a.live_bytes[size_t(i)] = size_t(live);
    a.lower_bound_bytes = std::max(a.lower_bound_bytes, size_t(live));
  }
  return a;
}

}  // namespace loom
