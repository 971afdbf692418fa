// Note [One list of fields] (graph/options.h): GraphOptions and GraphStats are made from their
// field lists, so whatever walks a list (the Python module, dumps) sees every field. These
// tests fail when a field is added to a struct outside its list, or a list entry is malformed.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <type_traits>

#include "common/harness.h"
#include "graph/graph.h"
#include "graph/options.h"
#include "graph/registry.h"
#include "graph/step.h"

namespace loom {
namespace test {
namespace {

// The structs as their lists alone would make them: a field declared outside the list changes
// the real struct's size (or, within padding, its field count below).
#define LOOM_MIRROR_FIELD(type, name, init, doc) type name = init;
struct OptionsFromList {
  LOOM_GRAPH_OPTIONS(LOOM_MIRROR_FIELD)
};
struct StatsFromList {
  LOOM_GRAPH_STATS(LOOM_MIRROR_FIELD)
};
#undef LOOM_MIRROR_FIELD
static_assert(sizeof(GraphOptions) == sizeof(OptionsFromList), "a GraphOptions field is outside LOOM_GRAPH_OPTIONS");
static_assert(sizeof(GraphStats) == sizeof(StatsFromList), "a GraphStats field is outside LOOM_GRAPH_STATS");

template <typename S, typename Walk>
std::vector<std::string> Names(Walk walk) {
  S s;
  std::vector<std::string> names;
  walk(s, [&](const char* name, const auto&, const char* doc) {
    EXPECT_GT(std::string(doc).size(), 10u) << name << " has no description";
    names.push_back(name);
  });
  return names;
}

TEST(GraphOptionLists, EveryFieldIsVisitedOnceWithADescription) {
  auto options = Names<GraphOptions>([](auto& s, auto&& f) { VisitGraphOptions(s, f); });
  auto stats = Names<GraphStats>([](auto& s, auto&& f) { VisitGraphStats(s, f); });
  EXPECT_EQ(std::set<std::string>(options.begin(), options.end()).size(), options.size());
  EXPECT_EQ(std::set<std::string>(stats.begin(), stats.end()).size(), stats.size());
  EXPECT_EQ(options.front(), "memory");
  EXPECT_EQ(stats.back(), "parallel_replays");
}

TEST(GraphOptionLists, VisitorsReachTheFieldsThemselves) {
  GraphOptions o;
  VisitGraphOptions(o, [](const char* name, auto& field, const char*) {
    if constexpr (std::is_same_v<std::decay_t<decltype(field)>, int>)
      if (std::string(name) == "num_workers") field = 3;
  });
  EXPECT_EQ(o.num_workers, 3);
  EXPECT_EQ(ParseMemoryMode("dynamic"), MemoryMode::kDynamic);
  EXPECT_STREQ(Name(ParseMemoryMode("planned")), "planned");
  LOOM_EXPECT_THROW_MSG(ParseMemoryMode("magic"), ValueError, "'planned' or 'dynamic', got 'magic'");
}

// num_workers 100000 hung the first parallel replay creating threads; -1 workers and negative
// bucket sizes were taken as they came. Each place that takes options refuses them there.
TEST(GraphOptionChecks, OutOfRangeValuesAreValueErrorsWhereTheyAreSet) {
  struct Case {
    void (*set)(GraphOptions&);
    const char* message;
  };
  const Case cases[] = {
      {[](GraphOptions& o) { o.num_workers = 100000; }, "[graph] option num_workers is 100000, expected 0"},
      {[](GraphOptions& o) { o.num_workers = -1; }, "[graph] option num_workers is -1, expected 0"},
      {[](GraphOptions& o) { o.bucket_bytes = -1; }, "[graph] option bucket_bytes is -1, expected a positive"},
      {[](GraphOptions& o) { o.bucket_bytes = 0; }, "[graph] option bucket_bytes is 0"},
      {[](GraphOptions& o) { o.first_bucket_bytes = -5; }, "[graph] option first_bucket_bytes is -5"},
      // A device's options took -1 (only a CapturedStep checked it), refused later by each step.
      {[](GraphOptions& o) { o.max_step_graphs = -1; }, "[graph] option max_step_graphs is -1, expected a number"},
  };
  for (const Case& c : cases) {
    GraphOptions o;
    c.set(o);
    LOOM_EXPECT_THROW_MSG(CheckGraphOptions(o), ValueError, c.message);
    LOOM_EXPECT_THROW_MSG(Graph(Cpu(), "g", o), ValueError, c.message);
    LOOM_EXPECT_THROW_MSG(CapturedStep(Cpu(), [](const std::vector<Tensor>& in) { return in; }, "s", true, true, o),
                          ValueError, c.message);
    LOOM_EXPECT_THROW_MSG(SetRegistryGraphOptions(*Cpu(), o), ValueError, c.message);
  }
  GraphOptions ok;
  ok.num_workers = kMaxReplayWorkers;
  ok.first_bucket_bytes = 0;  // as bucket_bytes
  CheckGraphOptions(ok);
  EXPECT_EQ(RegistryGraphOptions(*Cpu()).num_workers, 0) << "a refused set changes nothing";
  VisitGraphOptions(ok, [](const char* name, const auto&, const char* doc) {  // the doc states the bound
    if (std::string(name) == "num_workers")
      EXPECT_NE(std::string(doc).find("at most " + std::to_string(kMaxReplayWorkers)), std::string::npos) << doc;
  });
}

}  // namespace
}  // namespace test
}  // namespace loom
