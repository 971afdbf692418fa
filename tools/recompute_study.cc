// How close the memory budget's greedy search (RecomputeForBudget, Note [Recomputing for a memory
// budget]) comes to the best plan over the same moves, found by enumerating them
// (RecomputeExhaustive) on graphs small enough to enumerate: small MLPs with uneven widths and a
// small conv-BatchNorm-ReLU net, each under budgets from 90% down to 40% of its planned arena.
// Prints one JSON object: a row per (model, budget) and a summary.
//   recompute_study [--max-states N]     (default 20000 candidate drops per search)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/device.h"
#include "graph/graph.h"
#include "graph/plan.h"
#include "graph/recompute.h"
#include "nn/cnn_layers.h"
#include "nn/layer.h"
#include "nn/model.h"
#include "nn/optimizer.h"

using namespace loom;

namespace {

struct Case {
  std::string name;
  std::function<std::shared_ptr<nn::Layer>()> make;
  Shape input;
};

std::shared_ptr<nn::Layer> Mlp(const std::vector<int64_t>& widths, nn::Act act) {
  auto net = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    net->Add(std::make_shared<nn::Linear>(widths[i], widths[i + 1], true));
    if (i + 2 < widths.size()) net->Add(std::make_shared<nn::Activation>(act));
  }
  return net;
}

std::shared_ptr<nn::Layer> SmallCnn() {
  auto net = std::make_shared<nn::Sequential>();
  for (int i = 0; i < 3; ++i) {
    net->Add(std::make_shared<nn::Conv2d>(i == 0 ? 3 : 8, 8, 3, 1, 1, false, 1, 1));
    net->Add(std::make_shared<nn::BatchNorm2d>(8, 0.1, 1e-5));
    net->Add(nn::ReLU());
  }
  net->Add(std::make_shared<nn::Flatten>());
  net->Add(std::make_shared<nn::Linear>(8 * 8 * 8, 10, true));
  return net;
}

// The captured, unbudgeted training step of `c`.
OpList Capture(const Case& c) {
  auto dev = CpuDevice();
  nn::Model m(c.make(), std::make_shared<nn::SGD>(0.01, 0.9));
  Tensor x = ops::FromVector(std::vector<float>(size_t(NumElements(c.input)), 0.25f), c.input, dev);
  std::vector<int32_t> labels(size_t(c.input[0]));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t(i % 10);
  Tensor y = ops::FromVector(labels, {c.input[0]}, dev);
  m.Compile({x}, true, true, true, GraphOptions{});
  m.TrainOneBatch(x, y);
  return m.train_graph()->ops();
}

PeakEstimate PlannedPeak(const OpList& l, const Analysis& a) {
  MemoryLayout m = PlanMemory(l, a, std::vector<size_t>(l.size(), 0));
  return {m.packing.arena_bytes + a.persistent_bytes, m.live_bytes};
}

}  // namespace

int main(int argc, char** argv) {
  size_t max_states = 20000;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--max-states") && i + 1 < argc) {
      max_states = size_t(std::strtoull(argv[++i], nullptr, 10));
    } else {
      std::fprintf(stderr, "usage: %s [--max-states N]\n", argv[0]);
      return 2;
    }
  }
  const std::vector<Case> cases = {
      {"mlp 64-512-64-512-64-10 relu b128", [] { return Mlp({64, 512, 64, 512, 64, 10}, nn::Act::kReLU); }, {128, 64}},
      {"mlp 32-256x4-10 tanh b256", [] { return Mlp({32, 256, 256, 256, 256, 10}, nn::Act::kTanh); }, {256, 32}},
      {"mlp 128-1024-128-1024-10 sigmoid b64", [] { return Mlp({128, 1024, 128, 1024, 10}, nn::Act::kSigmoid); }, {64, 128}},
      {"mlp 32-128x8-10 relu b512", [] { return Mlp({32, 128, 128, 128, 128, 128, 128, 128, 128, 10}, nn::Act::kReLU); }, {512, 32}},
      {"cnn 3x(conv-bn-relu) 8x8 b32", SmallCnn, {32, 3, 8, 8}},
  };
  const double fractions[] = {0.9, 0.8, 0.7, 0.6, 0.5, 0.4};
  int rows = 0, both_met = 0, complete_rows = 0, greedy_optimal = 0, only_opt_met = 0;
  double worst = 1, sum_ratio = 0;
  std::printf("{\"max_states\": %zu, \"rows\": [\n", max_states);
  for (const Case& c : cases) {
    const OpList ops = Capture(c);
    const Analysis a = Analyse(ops.access, ops.facts);
    const PeakEstimate base = PlannedPeak(ops, a);
    const size_t persistent = a.persistent_bytes, arena = base.peak_bytes - persistent;
    for (double f : fractions) {
      const size_t budget = persistent + size_t(f * double(arena));
      const RecomputeResult g = RecomputeForBudget(ops, budget, PlannedPeak);
      bool complete = false;
      const RecomputeResult o = RecomputeExhaustive(ops, budget, PlannedPeak, max_states, &complete);
      const double ratio = g.met && o.met && o.added_cost > 0 ? double(g.added_cost) / double(o.added_cost) : 0;
      std::printf("%s  {\"model\": \"%s\", \"ops\": %zu, \"budget_fraction\": %.2f, \"greedy_met\": %s, "
                  "\"greedy_cost\": %lld, \"greedy_flops\": %lld, \"greedy_drops\": %zu, \"best_met\": %s, "
                  "\"best_cost\": %lld, \"best_flops\": %lld, \"best_drops\": %zu, \"search_complete\": %s, "
                  "\"greedy_over_best\": %.4f, \"greedy_peak_fraction\": %.4f, \"best_peak_fraction\": %.4f}",
                  rows ? ",\n" : "", c.name.c_str(), ops.size(), f, g.met ? "true" : "false",
                  (long long)g.added_cost, (long long)g.added_flops, g.dropped_blocks, o.met ? "true" : "false",
                  (long long)o.added_cost, (long long)o.added_flops, o.dropped_blocks, complete ? "true" : "false", ratio,
                  double(g.peak_bytes - persistent) / double(arena), double(o.peak_bytes - persistent) / double(arena));
      ++rows;
      if (!complete) continue;
      ++complete_rows;
      if (o.met && !g.met) ++only_opt_met;
      if (g.met && o.met) {
        ++both_met;
        const double r = o.added_cost > 0 ? ratio : (g.added_cost == 0 ? 1 : 0);
        sum_ratio += r;
        if (r > worst) worst = r;
        if (g.added_cost == o.added_cost) ++greedy_optimal;
      }
    }
  }
  std::printf("\n], \"summary\": {\"rows\": %d, \"searched_completely\": %d, \"both_met\": %d, "
              "\"greedy_equal_to_best\": %d, \"met_only_by_best\": %d, \"mean_greedy_over_best\": %.4f, "
              "\"worst_greedy_over_best\": %.4f}}\n",
              rows, complete_rows, both_met, greedy_optimal, only_opt_met, both_met ? sum_ratio / both_met : 0.0, worst);
  return 0;
}
