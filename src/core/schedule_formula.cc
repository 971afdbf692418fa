// The schedule spec as op attributes (core/schedule_formula.h).
#include "core/schedule_formula.h"

#include <cstring>

namespace loom {
namespace sched {

namespace {
const char* const kKindNames[kNumKinds] = {"constant", "exponential", "multistep", "cosine", "linear"};

std::string Key(int i, const char* field) { return "s" + std::to_string(i) + "." + field; }
}  // namespace

const char* KindName(int32_t kind) { return kind >= 0 && kind < kNumKinds ? kKindNames[kind] : "?"; }

Attrs ToAttrs(const Spec& s) {
  Attrs a;
  a.Set("segments", int64_t(s.num_segments));
  a.Set("milestones", std::vector<int64_t>(s.milestones, s.milestones + s.num_milestones));
  for (int i = 0; i < s.num_segments; ++i) {
    const Segment& g = s.seg[i];
    a.Set(Key(i, "kind"), std::string(KindName(g.kind)));
    a.Set(Key(i, "start"), g.start);
    a.Set(Key(i, "period"), g.period);
    a.Set(Key(i, "staircase"), int64_t(g.staircase));
    a.Set(Key(i, "v0"), g.v0);
    a.Set(Key(i, "v1"), g.v1);
    a.Set(Key(i, "gamma"), g.gamma);
    a.Set(Key(i, "milestones"), int64_t(g.m_end - g.m_begin));
  }
  return a;
}

std::vector<AttrDecl> AttrDecls() {
  std::vector<AttrDecl> d = {{"segments", AttrType::kInt}, {"milestones", AttrType::kInts}};
  for (int i = 0; i < kMaxSegments; ++i) {
    d.push_back({Key(i, "kind"), AttrType::kStr});
    for (const char* f : {"start", "period", "staircase", "milestones"}) d.push_back({Key(i, f), AttrType::kInt});
    for (const char* f : {"v0", "v1", "gamma"}) d.push_back({Key(i, f), AttrType::kFloat});
  }
  return d;
}

Spec FromAttrs(const Attrs& a) {
  Spec s;
  std::memset(&s, 0, sizeof s);
  const int64_t n = a.Int("segments");
  LOOM_CHECK(n >= 1 && n <= kMaxSegments, ValueError, "[lr_schedule] ", n, " segments; 1 to ", kMaxSegments,
             " are supported");
  const std::vector<int64_t>& ms = a.Ints("milestones");
  LOOM_CHECK(ms.size() <= size_t(kMaxMilestones), ValueError, "[lr_schedule] ", ms.size(),
             " milestones; at most ", kMaxMilestones, " are supported");
  s.num_segments = int32_t(n);
  s.num_milestones = int32_t(ms.size());
  for (size_t i = 0; i < ms.size(); ++i) s.milestones[i] = ms[i];
  int32_t next = 0;
  for (int i = 0; i < s.num_segments; ++i) {
    Segment& g = s.seg[i];
    const std::string& kind = a.Str(Key(i, "kind"));
    g.kind = -1;
    for (int k = 0; k < kNumKinds; ++k)
      if (kind == kKindNames[k]) g.kind = k;
    LOOM_CHECK(g.kind >= 0, ValueError, "[lr_schedule] segment ", i, " has unknown kind '", kind, "'");
    g.start = a.Int(Key(i, "start"));
    g.period = a.Int(Key(i, "period"));
    g.staircase = int32_t(a.Int(Key(i, "staircase")));
    g.v0 = a.Float(Key(i, "v0"));
    g.v1 = a.Float(Key(i, "v1"));
    g.gamma = a.Float(Key(i, "gamma"));
    const int64_t own = a.Int(Key(i, "milestones"));
    LOOM_CHECK(own >= 0 && next + own <= s.num_milestones, ValueError, "[lr_schedule] segment ", i, " claims ", own,
               " of ", s.num_milestones, " milestones, ", next, " already taken");
    g.m_begin = next;
    g.m_end = int32_t(next + own);
    next = g.m_end;
    LOOM_CHECK(i == 0 ? g.start == 0 : g.start > s.seg[i - 1].start, ValueError, "[lr_schedule] segment ", i,
               " starts at step ", g.start, ": starts must be 0 and then increasing");
    LOOM_CHECK(g.period >= (g.kind == kLinear ? 0 : 1) || g.kind == kConstant || g.kind == kMultiStep,
               ValueError, "[lr_schedule] ", kind, " segment ", i, " has period ", g.period);
  }
  LOOM_CHECK(next == s.num_milestones, ValueError, "[lr_schedule] segments claim ", next, " of ", s.num_milestones,
             " milestones");
  return s;
}

}  // namespace sched
}  // namespace loom
