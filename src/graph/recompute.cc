// Step 1c of graph.h: Note [Recomputing for a memory budget] (recompute.h).
#include "graph/recompute.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "core/block.h"
#include "core/error.h"
#include "graph/flops.h"
#include "graph/ranks.h"

LOOM_OP_KIND(copy);
LOOM_OP_KIND(batch_norm_train);
LOOM_OP_KIND(batch_norm_apply);

namespace loom {

namespace {

constexpr int kMaxChain = 64;  // ops one dropped block may need computed again
// A block saving less than 1/kMinShare of what the budget still asks is not worth a chain (a
// BatchNorm's 64-byte batch mean would otherwise be recomputed through the whole network).
constexpr size_t kMinShare = 1024;

// Per block of the current list: the ops writing it and the ops touching it, ascending
// (OpList::uses).
struct Accesses {
  std::vector<std::vector<int>> writers, touches;
};
Accesses Index(const OpList& l) {
  Accesses x;
  for (const BlockUses& u : l.uses) {
    x.writers.push_back(u.writers);
    x.touches.push_back(Touching(u));
  }
  return x;
}

bool WrittenBetween(const std::vector<int>& writers, int after, int before) {
  for (int w : writers)
    if (w > after && w < before) return true;
  return false;
}

// Cost of running an op again: its dense FLOPs plus one per element written.
int64_t Cost(const OpRecord& op) {
  int64_t c = DenseFlops(op);
  for (const Tensor& t : op.outputs) c += t.numel();
  return std::max<int64_t>(c, 1);
}

// Block b is state that op updates in place (Note [Outputs that are inputs] in core/op.h:
// batch_norm_train's running statistics).
bool IsUpdatedState(const OpRecord& op, const Block* b) {
  for (const auto& [o, i] : op.def->inplace)
    if (op.outputs[size_t(o)].block() == b && op.inputs[size_t(i)].block() == b) return true;
  return false;
}

struct Planner {
  const OpList& l;
  const Analysis& a;
  const Accesses& x;
  int q;                    // where the recomputed ops go (before op q)
  std::vector<int> chain;   // ops to copy, in an order that respects their dependencies
  std::set<int> made;       // blocks the chain writes afresh
  std::set<int> from_stats;  // batch_norm_train ops of the chain run as batch_norm_apply

  // Note [Batch norm applied from its saved statistics]: batch norm op p's y (block `block`)
  // comes again from the batch mean and invstd it saved, when both are still there at q (its
  // gradient reads them later): no pass over x for them, no copy of the running statistics.
  bool FromStats(int p, int block) const {
    const OpRecord& op = l.ops[size_t(p)];
    if (op.def != &op_kind::batch_norm_train || l.BlockIndex(op.outputs[0].block()) != block) return false;
    for (int k : {1, 2}) {
      const int b = l.BlockIndex(op.outputs[size_t(k)].block());
      if (b < 0 || x.writers[size_t(b)] != std::vector<int>{p} || a.blocks[size_t(b)].last < q) return false;
    }
    return true;
  }
  // The blocks batch_norm_apply reads in place of op p: x, gamma, beta, the saved statistics
  // (outputs 1 and 2) and the residual.
  std::vector<int> ApplyReads(int p) const {
    const OpRecord& op = l.ops[size_t(p)];
    std::vector<int> reads;
    for (size_t k = 0; k < op.inputs.size(); ++k)
      if (k != 3 && k != 4) reads.push_back(l.BlockIndex(op.inputs[k].block()));
    for (int k : {1, 2}) reads.push_back(l.BlockIndex(op.outputs[size_t(k)].block()));
    return reads;
  }

  // An op may run again when it is no collective and every block it writes is its own (written
  // by it alone, not read by it, not persistent) or state it updates in place, which the copy
  // updates in a private copy (Note [Recomputing for a memory budget]).
  bool CanRunAgain(int op) const {
    if (IsCollective(l.ops[size_t(op)])) return false;  // other ranks would have to run it again too
    const AccessList& acc = l.access[size_t(op)];
    for (int w : acc.writes) {
      if (IsUpdatedState(l.ops[size_t(op)], l.blocks[size_t(w)].get())) continue;
      if (a.blocks[size_t(w)].persistent) return false;
      if (std::find(acc.reads.begin(), acc.reads.end(), w) != acc.reads.end()) return false;
      if (x.writers[size_t(w)].size() != 1) return false;
    }
    return true;
  }

  // Adds to the chain what computes `block` again before op q; false when it cannot.
  bool Need(int block, int depth) {
    if (made.count(block)) return true;
    if (x.writers[size_t(block)].size() != 1 || depth > kMaxChain) return false;
    const int p = x.writers[size_t(block)][0];
    if (p >= q || !CanRunAgain(p)) return false;
    const bool stats = FromStats(p, block);
    for (int in : stats ? ApplyReads(p) : l.access[size_t(p)].reads) {
      if (WrittenBetween(x.writers[size_t(in)], p, q)) return false;  // no longer its value at p
      if (a.blocks[size_t(in)].persistent || a.blocks[size_t(in)].last >= q) continue;  // still there
      if (!Need(in, depth + 1)) return false;
    }
    if (stats) {
      made.insert(block);
      from_stats.insert(p);
    } else {
      for (int w : l.access[size_t(p)].writes) made.insert(w);
    }
    chain.push_back(p);
    return true;
  }
};

struct Choice {
  int block = -1, q = -1, last_before = -1;
  std::vector<int> chain;
  std::set<int> from_stats;  // Planner::from_stats
  double bytes_per_cost = 0;
  int64_t cost = 0;
  int peak_op = -1;  // the op where the peak sat when this drop was found
};

// batch_norm_apply in place of batch norm record `bn`: its y from the statistics it saved
// (Note [Batch norm applied from its saved statistics]), with its relu, residual and layouts.
OpRecord ApplyFromStats(const OpRecord& bn) {
  OpRecord r;
  r.def = &op_kind::batch_norm_apply;
  for (const char* a : {"x_blocked", "y_blocked", "relu"})
    if (bn.attrs.Has(a)) r.attrs.Set(a, bn.attrs.Int(a));
  r.inputs = {bn.inputs[0], bn.inputs[1], bn.inputs[2], bn.outputs[1], bn.outputs[2]};
  if (bn.inputs.size() > 5) r.inputs.push_back(bn.inputs[5]);
  r.outputs = {bn.outputs[0]};
  return r;
}

// Cost of running op p of the chain again (as batch_norm_apply when `stats`).
int64_t ChainOpCost(const OpList& l, int p, bool stats) {
  return stats ? std::max<int64_t>(l.ops[size_t(p)].outputs[0].numel(), 1) : Cost(l.ops[size_t(p)]);
}

// The list with `c.chain` copied before op c.q (writing fresh blocks) and the ops from c.q on
// reading the fresh copy of c.block. Random ops keep their Philox offsets.
OpList Apply(const OpList& l, const Choice& c) {
  std::unordered_map<const Block*, std::shared_ptr<Block>> fresh;
  auto remap = [&](const Tensor& t, bool all) {
    auto it = fresh.find(t.block());
    if (it == fresh.end() || (!all && t.block() != l.blocks[size_t(c.block)].get())) return t;
    return Tensor(it->second, t.shape(), t.strides(), t.offset(), t.dtype());
  };
  std::vector<OpRecord> ops;
  std::vector<uint64_t> offsets;
  for (size_t i = 0; i < l.size(); ++i) {
    if (int(i) == c.q) {
      for (int p : c.chain) {
        OpRecord r = c.from_stats.count(p) ? ApplyFromStats(l.ops[size_t(p)]) : l.ops[size_t(p)];
        for (const auto& [o, in] : r.def->inplace) {  // state updated in a private copy
          const Tensor& state = r.inputs[size_t(in)];
          if (fresh.count(state.block()) || !IsUpdatedState(r, state.block())) continue;
          auto b = std::make_shared<Block>(state.block()->bytes(), state.block()->device_ptr());
          fresh[state.block()] = b;
          OpRecord cp;
          cp.def = &op_kind::copy;
          cp.inputs = {state};
          cp.outputs = {remap(state, true)};
          offsets.push_back(0);
          ops.push_back(std::move(cp));
        }
        for (Tensor& t : r.inputs) t = remap(t, true);
        for (const Tensor& t : r.outputs)
          if (!fresh.count(t.block())) {
            auto b = std::make_shared<Block>(t.block()->bytes(), t.block()->device_ptr());
            fresh[t.block()] = std::move(b);
          }
        for (Tensor& t : r.outputs) t = remap(t, true);
        offsets.push_back(r.rng_offset);
        ops.push_back(std::move(r));
      }
    }
    OpRecord r = l.ops[i];
    if (int(i) >= c.q)
      for (Tensor& t : r.inputs) t = remap(t, false);
    offsets.push_back(r.rng_offset);
    ops.push_back(std::move(r));
  }
  OpList out = Rebuild(std::move(ops), l);
  for (size_t i = 0; i < out.size(); ++i) out.ops[i].rng_offset = offsets[i];  // the same draws
  out.random_draws = l.random_draws;
  return out;
}

std::string Mb(size_t bytes) { return std::to_string(double(bytes) / 1e6).substr(0, 6) + " MB"; }

}  // namespace

namespace {

size_t TotalLive(const PeakEstimate& e) {
  size_t s = 0;
  for (size_t v : e.live_bytes) s += v;
  return s;
}

// One state of the search: a list, its analysis and its peak.
struct State {
  OpList list;
  Analysis a;
  PeakEstimate pe;
};

// The drops at the op where the peak sits, best bytes per cost first.
std::vector<Choice> Candidates(const State& s, size_t budget) {
  const OpList& list = s.list;
  const PeakEstimate& pe = s.pe;
  const int t = int(std::max_element(pe.live_bytes.begin(), pe.live_bytes.end()) - pe.live_bytes.begin());
  const Accesses x = Index(list);
  std::vector<Choice> candidates;
  for (size_t b = 0; b < list.blocks.size(); ++b) {
    const BlockLife& life = s.a.blocks[b];
    if (life.persistent || life.first < 0 || life.first >= t || life.last <= t) continue;
    const std::vector<int>& touches = x.touches[b];
    auto after = std::upper_bound(touches.begin(), touches.end(), t);
    if (after == touches.begin() || *(after - 1) == t) continue;  // touched at the peak
    if (list.facts[b].bytes * kMinShare < pe.peak_bytes - budget) continue;  // too small to matter
    Planner p{list, s.a, x, *after, {}, {}};
    if (!p.Need(int(b), 0)) continue;
    int64_t cost = 0;
    for (int op : p.chain) cost += ChainOpCost(list, op, p.from_stats.count(op) != 0);
    candidates.push_back({int(b), *after, *(after - 1), std::move(p.chain), std::move(p.from_stats),
                          double(list.facts[b].bytes) / double(cost), cost, t});
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Choice& u, const Choice& v) { return u.bytes_per_cost > v.bytes_per_cost; });
  return candidates;
}

// `c` applied to `s`, or nothing when it does not help: a drop is kept when it lowers the peak,
// or leaves it and lowers the live bytes summed over the ops (another op at the same peak is
// next). The sum falls at every kept drop, so every search over drops ends.
bool TryDrop(const State& s, const Choice& c, const PeakFn& peak, State* next) {
  next->list = Apply(s.list, c);
  next->a = Analyse(next->list.access, next->list.facts);
  next->pe = peak(next->list, next->a);
  return next->pe.peak_bytes < s.pe.peak_bytes ||
         (next->pe.peak_bytes == s.pe.peak_bytes && TotalLive(next->pe) < TotalLive(s.pe));
}

int64_t ChainFlops(const OpList& l, const Choice& c) {
  int64_t flops = 0;
  for (int op : c.chain) flops += DenseFlops(l.ops[size_t(op)]);
  return flops;
}

RecomputeResult Finish(RecomputeResult r, State s, size_t budget) {
  r.met = !budget || s.pe.peak_bytes <= budget;
  r.peak_bytes = s.pe.peak_bytes;
  r.ops = std::move(s.list);
  return r;
}

State Start(OpList list, const PeakFn& peak) {
  State s;
  s.list = std::move(list);
  s.a = Analyse(s.list.access, s.list.facts);
  s.pe = peak(s.list, s.a);
  return s;
}

}  // namespace

RecomputeResult RecomputeForBudget(OpList list, size_t budget, const PeakFn& peak) {
  RecomputeResult r;
  State s = Start(std::move(list), peak);
  const size_t rounds = 4 * s.list.size() + 16;
  for (size_t round = 0; round < rounds && budget && s.pe.peak_bytes > budget; ++round) {
    bool kept = false;
    for (const Choice& c : Candidates(s, budget)) {
      State next;
      if (!TryDrop(s, c, peak, &next)) continue;
      const int64_t flops = ChainFlops(s.list, c);
      std::string names;
      for (int op : c.chain)
        names += (names.empty() ? "" : " ") + (c.from_stats.count(op) ? std::string("batch_norm_apply") : s.list.ops[size_t(op)].name()) +
                 "#" + std::to_string(op);
      r.choices.push_back("drop block " + std::to_string(c.block) + " (" + Mb(s.list.facts[size_t(c.block)].bytes) +
                          ") between ops " + std::to_string(c.last_before) + " and " + std::to_string(c.q) +
                          " (peak at op " + std::to_string(c.peak_op) + "): recompute " + names + ", " +
                          std::to_string(flops) + " FLOPs; peak " + Mb(s.pe.peak_bytes) + " -> " + Mb(next.pe.peak_bytes));
      r.dropped_blocks++;
      r.added_flops += flops;
      r.added_cost += c.cost;
      r.recomputed_ops += next.list.size() - s.list.size();  // the chain and the copies of state it updates
      s = std::move(next);
      kept = true;
      break;
    }
    if (!kept) break;  // no drop at the peak lowers it: the smallest peak this search reaches
  }
  return Finish(std::move(r), std::move(s), budget);
}

namespace {

// Depth-first search over every sequence of helpful drops, bounded by the cheapest plan found so
// far; a set of drops reached in another order is searched once.
struct Exhaustive {
  size_t budget;
  const PeakFn& peak;
  size_t max_states;
  size_t states = 0;
  bool complete = true;
  int64_t best_cost = -1;
  RecomputeResult best;
  size_t lowest_peak = SIZE_MAX;  // over every state searched
  std::set<std::vector<std::pair<const Block*, const Block*>>> seen;

  void Search(const State& s, int64_t cost, int64_t flops, size_t dropped,
              std::vector<std::pair<const Block*, const Block*>> key) {
    lowest_peak = std::min(lowest_peak, s.pe.peak_bytes);
    if (best_cost >= 0 && cost >= best_cost) return;
    if (s.pe.peak_bytes <= budget) {
      best_cost = cost;
      best.added_cost = cost;
      best.added_flops = flops;
      best.dropped_blocks = dropped;
      best.ops = s.list;
      best.met = true;
      best.peak_bytes = s.pe.peak_bytes;
      return;
    }
    for (const Choice& c : Candidates(s, budget)) {
      if (++states > max_states) {
        complete = false;
        return;
      }
      // A drop is named by the block dropped and the first output of the op it is made again before.
      auto k = key;
      const OpRecord& reader = s.list.ops[size_t(c.q)];
      k.emplace_back(s.list.blocks[size_t(c.block)].get(), reader.outputs.empty() ? nullptr : reader.outputs[0].block());
      std::sort(k.begin(), k.end());
      if (!seen.insert(k).second) continue;
      State next;
      if (!TryDrop(s, c, peak, &next)) continue;
      Search(next, cost + c.cost, flops + ChainFlops(s.list, c), dropped + 1, std::move(k));
    }
  }
};

}  // namespace

RecomputeResult RecomputeExhaustive(OpList list, size_t budget, const PeakFn& peak, size_t max_states, bool* complete) {
  State s = Start(std::move(list), peak);
  const size_t original = s.list.size();
  Exhaustive e{budget, peak, max_states};
  e.Search(s, 0, 0, 0, {});
  if (complete) *complete = e.complete;
  if (e.best_cost < 0) {  // not met: the lowest peak any sequence of drops reached
    RecomputeResult r = Finish(RecomputeResult{}, std::move(s), budget);
    r.peak_bytes = e.lowest_peak;
    return r;
  }
  e.best.recomputed_ops = e.best.ops.size() - original;
  return std::move(e.best);
}

}  // namespace loom
