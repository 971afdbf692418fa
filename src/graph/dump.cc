// Step 7 of graph.h: observing a graph — GraphDump, the DOT writer, Chrome trace-event JSON
// (open in Perfetto or chrome://tracing) and the memory timeline as CSV.
#include "graph/dump.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/file.h"
#include "graph/graph.h"

namespace loom {

namespace {
std::string Escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

std::string Mb(size_t bytes) {
  char buf[32];
  if (bytes < 10000) std::snprintf(buf, sizeof buf, "%zu B", bytes);
  else if (bytes < 10000000) std::snprintf(buf, sizeof buf, "%.1f KB", double(bytes) / 1e3);
  else std::snprintf(buf, sizeof buf, "%.2f MB", double(bytes) / 1e6);
  return buf;
}

}  // namespace

std::string DepKindsToString(uint8_t kinds) {
  std::string s;
  if (kinds & uint8_t(DepKind::kRAW)) s += "RAW";
  if (kinds & uint8_t(DepKind::kWAR)) s += s.empty() ? "WAR" : "|WAR";
  if (kinds & uint8_t(DepKind::kWAW)) s += s.empty() ? "WAW" : "|WAW";
  return s.empty() ? "none" : s;
}

GraphDump MakeGraphDump(const Graph& graph) {
  LOOM_CHECK(graph.finalized(), GraphError, "[graph_dump] graph '", graph.name(),
             "' has no finished capture: dump it after its capture ended (EnableGraph(false))");
  GraphDump d;
  d.key = graph.name();
  d.device = graph.device().name();
  const OpList& ops = graph.ops();
  for (size_t i = 0; i < ops.size(); ++i) {
    GraphDump::Op o;
    o.kind = ops.ops[i].name();
    o.attrs = ops.ops[i].attrs;
    o.reads = ops.access[i].reads;
    o.writes = ops.access[i].writes;
    o.rng_offset = ops.ops[i].rng_offset;
    d.ops.push_back(std::move(o));
  }
  const Analysis& a = graph.analysis();
  for (size_t b = 0; b < ops.blocks.size(); ++b) {
    GraphDump::BlockInfo info;
    info.id = ops.blocks[b]->id();
    info.facts = ops.facts[b];
    info.life = a.blocks[b];
    info.offset = graph.layout().BlockOffset(int(b));
    d.blocks.push_back(info);
  }
  d.deps = a.deps;
  d.stats = graph.stats();
  d.live_bytes = a.live_bytes;
  return d;
}

std::string GraphDump::Summary() const {
  std::ostringstream o;
  size_t planned = 0, persistent = 0, total_bytes = 0;
  for (const BlockInfo& b : blocks) {
    planned += b.offset != SIZE_MAX;
    persistent += b.life.persistent;
    total_bytes += b.facts.bytes;
  }
  size_t raw = 0, war = 0, waw = 0;
  for (const Dep& dep : deps) {
    raw += (dep.kinds & uint8_t(DepKind::kRAW)) != 0;
    war += (dep.kinds & uint8_t(DepKind::kWAR)) != 0;
    waw += (dep.kinds & uint8_t(DepKind::kWAW)) != 0;
  }
  o << "graph '" << key << "' on " << device << "\n"
    << "  ops          " << ops.size() << "\n"
    << "  blocks       " << blocks.size() << " (" << persistent << " persistent, " << planned << " planned, "
    << Mb(total_bytes) << " in all)\n"
    << "  dependencies " << deps.size() << " (RAW " << raw << ", WAR " << war << ", WAW " << waw << ")\n"
    << "  memory       " << (stats.memory == MemoryMode::kPlanned ? "planned" : "dynamic") << ", lower bound "
    << Mb(stats.lower_bound_bytes);
  if (stats.memory == MemoryMode::kPlanned) {
    o << ", arena " << Mb(stats.arena_bytes);
    if (stats.lower_bound_bytes) {
      char ratio[32];
      std::snprintf(ratio, sizeof ratio, "%.3f", double(stats.arena_bytes) / double(stats.lower_bound_bytes));
      o << " (" << ratio << "x, " << stats.plan_strategy << ")";
    }
  }
  o << ", persistent " << Mb(stats.persistent_bytes) << "\n";
  if (stats.replays) o << "  replays      " << stats.replays << "\n";
  if (stats.random_draws) o << "  random draws " << stats.random_draws << " per replay\n";
  std::map<std::string, int> kinds;
  for (const Op& op : ops) kinds[op.kind]++;
  std::vector<std::pair<int, std::string>> by_count;
  for (const auto& kv : kinds) by_count.emplace_back(-kv.second, kv.first);
  std::sort(by_count.begin(), by_count.end());
  o << "  op kinds    ";
  for (size_t i = 0; i < by_count.size(); ++i)
    o << (i ? ", " : " ") << by_count[i].second << " x" << -by_count[i].first;
  o << "\n";
  return o.str();
}

std::string GraphDump::ToDot(bool with_deps) const {
  std::ostringstream o;
  o << "digraph \"" << Escape(key) << "\" {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n";
  for (size_t i = 0; i < ops.size(); ++i) {
    std::string attrs = ops[i].attrs.ToString();
    if (attrs.size() > 60) attrs = attrs.substr(0, 57) + "...";
    o << "  op" << i << " [shape=box, style=rounded, label=\"" << i << ": " << Escape(ops[i].kind)
      << (attrs.empty() ? "" : "\\n" + Escape(attrs)) << "\"];\n";
  }
  for (size_t b = 0; b < blocks.size(); ++b) {
    const BlockInfo& info = blocks[b];
    o << "  b" << b << " [shape=ellipse, label=\"#" << info.id << "\\n" << info.facts.bytes << " B";
    if (!info.life.persistent && info.life.first >= 0) o << "\\nlive " << info.life.first << ".." << info.life.last;
    if (info.offset != SIZE_MAX) o << "\\n@" << info.offset;
    o << "\"" << (info.life.persistent ? ", style=filled, fillcolor=\"#dddddd\"" : "") << "];\n";
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    for (int b : ops[i].reads) o << "  b" << b << " -> op" << i << ";\n";
    for (int b : ops[i].writes) o << "  op" << i << " -> b" << b << " [color=\"#1f77b4\"];\n";
  }
  if (with_deps)
    for (const Dep& dep : deps)
      o << "  op" << dep.from << " -> op" << dep.to << " [style=dashed, color=\"#999999\", label=\""
        << DepKindsToString(dep.kinds) << "\", fontsize=8];\n";
  o << "}\n";
  return o.str();
}

std::string Graph::Summary() const {
  std::ostringstream o;
  o << quoted_name_ << " on " << device_->name() << ": " << stats_.num_ops << " ops, " << stats_.num_blocks
    << " blocks (" << stats_.num_intermediate << " intermediate), memory " << Name(stats_.memory)
    << ", lower bound " << Mb(stats_.lower_bound_bytes);
  if (stats_.inplace_ops)
    o << " (" << Mb(stats_.lower_bound_no_inplace_bytes) << " without the " << stats_.inplace_ops << " in-place ops)";
  if (stats_.memory == MemoryMode::kPlanned && stats_.lower_bound_bytes) {
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.3f", double(stats_.arena_bytes) / double(stats_.lower_bound_bytes));
    o << ", arena " << Mb(stats_.arena_bytes) << " (" << ratio << "x, " << stats_.plan_strategy << ")";
  }
  o << ", persistent " << Mb(stats_.persistent_bytes);
  for (const auto& [counter, n] : stats_.counters.counts())  // Note [Pass switches and counters]
    if (n) o << ", " << counter << " " << n;
  if (options_.memory_budget)
    o << ", memory budget " << options_.memory_budget << " B: " << stats_.recomputed_ops << " ops recomputed (+"
      << stats_.recompute_flops << " FLOPs)";
  return o.str();
}

std::string Graph::ToDot() const { return MakeGraphDump(*this).ToDot(/*with_deps=*/false); }

std::string Graph::TraceJson() const {
  std::ostringstream o;
  o << "{\"displayTimeUnit\":\"us\",\"traceEvents\":[\n";
  o << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"loom " << Escape(capture_name())
    << " on " << device_->name() << "\"}}";
  const std::vector<OpTiming>& profile = last_profile();
  for (const OpTiming& t : profile) {
    const OpRecord& op = ops_.ops[size_t(t.op)];
    o << ",\n{\"name\":\"" << Escape(op.name()) << "\",\"cat\":\"op\",\"ph\":\"X\",\"pid\":0,\"tid\":" << t.thread
      << ",\"ts\":" << t.start_us << ",\"dur\":" << (t.end_us - t.start_us) << ",\"args\":{\"op\":" << t.op
      << ",\"attrs\":\"" << Escape(op.attrs.ToString()) << "\"}}";
  }
  // Memory counter track: live intermediate bytes while each op runs, and the arena.
  const std::vector<size_t>& live = layout_.empty() ? analysis_.live_bytes : layout_.live_bytes;
  for (const OpTiming& t : profile) {
    o << ",\n{\"name\":\"memory\",\"ph\":\"C\",\"pid\":0,\"ts\":" << t.start_us
      << ",\"args\":{\"live_bytes\":" << (live.empty() ? 0 : live[size_t(t.op)])
      << ",\"arena_bytes\":" << stats_.arena_bytes << "}}";
  }
  o << "\n]}\n";
  return o.str();
}

std::string Graph::MemoryTimelineCsv() const {
  std::ostringstream o;
  // live_bytes: intermediates alive at each op (what dynamic recycling holds); planned_live_bytes:
  // the same with in-place reuse (what the planned arena packs).
  o << "op,name,live_bytes,planned_live_bytes,lower_bound_bytes,arena_bytes,persistent_bytes\n";
  for (size_t i = 0; i < ops_.size(); ++i)
    o << i << "," << ops_.ops[i].name() << "," << (analysis_.live_bytes.empty() ? 0 : analysis_.live_bytes[i]) << ","
      << (layout_.live_bytes.empty() ? 0 : layout_.live_bytes[i]) << "," << stats_.lower_bound_bytes << ","
      << stats_.arena_bytes << "," << stats_.persistent_bytes << "\n";
  return o.str();
}

// Note [Atomic file writes] in core/file.h.
void Graph::WriteDot(const std::string& path) const { WriteFileAtomic(path, {ToDot()}, "graph"); }

std::string Graph::ProfiledTraceJson() const {
  LOOM_CHECK(!last_profile().empty(), GraphError, "[", capture_name(),
             "] no profiled replay to write: set_profile(true) (or LOOM_DEBUG=2) and run it first");
  return TraceJson();
}

void Graph::WriteTrace(const std::string& path) const { WriteFileAtomic(path, {ProfiledTraceJson()}, "graph"); }

}  // namespace loom
