#include "graph/pack.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>

namespace loom {

namespace {
size_t AlignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }
bool Intersect(const Lifetime& a, const Lifetime& b) { return a.begin <= b.end && b.begin <= a.end; }
int64_t Length(const Lifetime& b) { return int64_t(b.end) - b.begin + 1; }
// The greedy-by-size order: larger first, then longer-lived, then by index.
bool BySize(const std::vector<Lifetime>& blocks, size_t a, size_t b) {
  if (blocks[a].bytes != blocks[b].bytes) return blocks[a].bytes > blocks[b].bytes;
  if (Length(blocks[a]) != Length(blocks[b])) return Length(blocks[a]) > Length(blocks[b]);
  return a < b;
}

// Places blocks in the given order, each into the best-fitting gap left by the already placed
// blocks whose lifetimes intersect its own.
Packing GreedyInOrder(const std::vector<Lifetime>& blocks, const std::vector<size_t>& order, size_t alignment) {
  Packing plan;
  plan.offsets.assign(blocks.size(), 0);
  std::vector<size_t> placed;
  placed.reserve(blocks.size());
  std::vector<std::pair<size_t, size_t>> busy;  // (offset, end) of intersecting placed blocks
  for (size_t idx : order) {
    const Lifetime& x = blocks[idx];
    size_t need = AlignUp(std::max<size_t>(x.bytes, 1), alignment);
    busy.clear();
    for (size_t p : placed)
      if (Intersect(blocks[p], x)) busy.emplace_back(plan.offsets[p], plan.offsets[p] + AlignUp(std::max<size_t>(blocks[p].bytes, 1), alignment));
    std::sort(busy.begin(), busy.end());
    size_t best = SIZE_MAX, best_waste = SIZE_MAX, cursor = 0;
    for (auto& b : busy) {
      if (b.first > cursor) {
        size_t gap = b.first - cursor;
        if (gap >= need && gap - need < best_waste) {
          best_waste = gap - need;
          best = cursor;
        }
      }
      cursor = std::max(cursor, b.second);
    }
    if (best == SIZE_MAX) best = cursor;
    plan.offsets[idx] = best;
    plan.arena_bytes = std::max(plan.arena_bytes, best + need);
    placed.push_back(idx);
  }
  return plan;
}
}  // namespace

size_t LowerBound(const std::vector<Lifetime>& blocks) {
  std::map<int, int64_t> delta;
  for (const Lifetime& b : blocks) {
    delta[b.begin] += int64_t(b.bytes);
    delta[b.end + 1] -= int64_t(b.bytes);
  }
  int64_t live = 0, best = 0;
  for (auto& kv : delta) {
    live += kv.second;
    best = std::max(best, live);
  }
  return size_t(best);
}

Packing PackGreedyBySize(const std::vector<Lifetime>& blocks, size_t alignment) {
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), 0);
  using Key = std::function<bool(size_t, size_t)>;
  auto len = [&](size_t i) { return Length(blocks[i]); };
  std::vector<std::pair<std::string, Key>> orderings = {
      {"greedy-by-size", [&](size_t a, size_t b) { return BySize(blocks, a, b); }},
      {"greedy-by-area", [&](size_t a, size_t b) {
         double ka = double(blocks[a].bytes) * double(len(a)), kb = double(blocks[b].bytes) * double(len(b));
         if (ka != kb) return ka > kb;
         return a < b;
       }},
      {"greedy-by-duration", [&](size_t a, size_t b) {
         if (len(a) != len(b)) return len(a) > len(b);
         if (blocks[a].bytes != blocks[b].bytes) return blocks[a].bytes > blocks[b].bytes;
         return a < b;
       }},
  };
  Packing best;
  bool have = false;
  for (auto& o : orderings) {
    std::stable_sort(order.begin(), order.end(), o.second);
    Packing p = GreedyInOrder(blocks, order, alignment);
    p.strategy = o.first;
    if (!have || p.arena_bytes < best.arena_bytes) {
      best = std::move(p);
      have = true;
    }
  }
  return best;
}

Packing PackOpOrder(const std::vector<Lifetime>& blocks, size_t alignment) {
  Packing plan;
  plan.strategy = "op-order";
  plan.offsets.assign(blocks.size(), 0);
  int steps = 0;
  for (const Lifetime& b : blocks) steps = std::max(steps, b.end + 1);
  std::vector<std::vector<size_t>> starts(static_cast<size_t>(steps)), ends(static_cast<size_t>(steps));
  for (size_t i = 0; i < blocks.size(); ++i) {
    starts[size_t(blocks[i].begin)].push_back(i);
    ends[size_t(blocks[i].end)].push_back(i);
  }
  std::map<size_t, size_t> holes;  // offset -> size
  size_t top = 0;                  // end of the used arena
  for (int t = 0; t < steps; ++t) {
    auto& s = starts[size_t(t)];
    std::sort(s.begin(), s.end(), [&](size_t a, size_t b) { return blocks[a].bytes > blocks[b].bytes; });
    for (size_t i : s) {
      size_t need = AlignUp(std::max<size_t>(blocks[i].bytes, 1), alignment);
      auto best = holes.end();
      for (auto it = holes.begin(); it != holes.end(); ++it)
        if (it->second >= need && (best == holes.end() || it->second < best->second)) best = it;
      if (best != holes.end()) {
        size_t off = best->first, size = best->second;
        holes.erase(best);
        if (size > need) holes[off + need] = size - need;
        plan.offsets[i] = off;
      } else if (!holes.empty() && std::prev(holes.end())->first + std::prev(holes.end())->second == top) {
        auto last = std::prev(holes.end());  // grow the arena from the last hole
        plan.offsets[i] = last->first;
        top = last->first + need;
        holes.erase(last);
      } else {
        plan.offsets[i] = top;
        top += need;
      }
      plan.arena_bytes = std::max(plan.arena_bytes, top);
    }
    for (size_t i : ends[size_t(t)]) {
      size_t off = plan.offsets[i], size = AlignUp(std::max<size_t>(blocks[i].bytes, 1), alignment);
      auto next = holes.lower_bound(off);
      if (next != holes.end() && next->first == off + size) {
        size += next->second;
        holes.erase(next);
      }
      auto it = holes.lower_bound(off);
      if (it != holes.begin()) {
        auto prev = std::prev(it);
        if (prev->first + prev->second == off) {
          prev->second += size;
          continue;
        }
      }
      holes[off] = size;
    }
  }
  return plan;
}

// Greedy placement is sensitive to the order of blocks of similar size. When the best plan is
// still above the lower bound, try the greedy-by-size order with nearby blocks swapped (a fixed
// pseudo-random sequence, so plans are reproducible), keeping any improvement, within a budget
// of about 2e7 block-pair checks (milliseconds, once per graph).
Packing PerturbGreedy(const std::vector<Lifetime>& blocks, size_t alignment, Packing best, size_t bound) {
  const size_t n = blocks.size();
  if (n < 3) return best;
  const size_t tries = std::min<size_t>(256, size_t(2e7) / (n * n) + 1);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return BySize(blocks, a, b); });
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] {  // xorshift64
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  std::vector<size_t> best_order = order;
  for (size_t t = 0; t < tries && best.arena_bytes > AlignUp(bound, alignment); ++t) {
    std::vector<size_t> trial = best_order;
    for (int k = 0; k < 1 + int(next() % 4); ++k) {
      size_t i = next() % n, j = std::min(n - 1, i + 1 + next() % 4);
      std::swap(trial[i], trial[j]);
    }
    Packing p = GreedyInOrder(blocks, trial, alignment);
    if (p.arena_bytes < best.arena_bytes) {
      p.strategy = "greedy-by-size, perturbed";
      best = std::move(p);
      best_order = std::move(trial);
    }
  }
  return best;
}

Packing PackLifetimes(const std::vector<Lifetime>& blocks, size_t alignment) {
  Packing a = PackGreedyBySize(blocks, alignment);
  Packing b = PackOpOrder(blocks, alignment);
  Packing best = b.arena_bytes < a.arena_bytes ? b : a;
  return PerturbGreedy(blocks, alignment, std::move(best), LowerBound(blocks));
}

bool PackingIsValid(const std::vector<Lifetime>& blocks, const Packing& plan) {
  if (plan.offsets.size() != blocks.size()) return false;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (plan.offsets[i] + blocks[i].bytes > plan.arena_bytes) return false;
    for (size_t j = i + 1; j < blocks.size(); ++j) {
      if (!Intersect(blocks[i], blocks[j])) continue;
      size_t a0 = plan.offsets[i], a1 = a0 + blocks[i].bytes, b0 = plan.offsets[j], b1 = b0 + blocks[j].bytes;
      if (a0 < b1 && b0 < a1 && blocks[i].bytes && blocks[j].bytes) return false;
    }
  }
  return true;
}

}  // namespace loom
