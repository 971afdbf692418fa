// Observation (step 5 of graph.h): Graphviz DOT, Chrome trace-event JSON (open in Perfetto or
// chrome://tracing), and the memory timeline as CSV.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "device/device.h"
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

void WriteFileAtomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    LOOM_CHECK(f.good(), IOError, "[graph] cannot open '", tmp, "' for writing");
    f << text;
    f.flush();
    LOOM_CHECK(f.good(), IOError, "[graph] failed writing '", tmp, "'");
  }
  LOOM_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, IOError, "[graph] cannot rename '", tmp, "' to '", path,
             "'");
}
}  // namespace

// Ops are boxes, blocks ellipses (persistent ones filled); an edge block -> op is a read,
// op -> block a write.
std::string Graph::ToDot() const {
  std::ostringstream o;
  o << "digraph \"" << Escape(key_) << "\" {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n";
  for (size_t i = 0; i < ops_.size(); ++i) {
    std::string attrs = ops_[i].attrs.ToString();
    if (attrs.size() > 60) attrs = attrs.substr(0, 57) + "...";
    o << "  op" << i << " [shape=box, style=rounded, label=\"" << i << ": " << Escape(ops_[i].name())
      << (attrs.empty() ? "" : "\\n" + Escape(attrs)) << "\"];\n";
  }
  for (size_t b = 0; b < blocks_.size(); ++b) {
    const BlockLife& l = analysis_.blocks.empty() ? BlockLife() : analysis_.blocks[b];
    o << "  b" << b << " [shape=ellipse, label=\"#" << blocks_[b]->id() << "\\n" << facts_[b].bytes << " B";
    if (finalized_ && !l.persistent) o << "\\nlive " << l.first << ".." << l.last;
    o << "\"" << (finalized_ && l.persistent ? ", style=filled, fillcolor=\"#dddddd\"" : "") << "];\n";
  }
  for (size_t i = 0; i < access_.size(); ++i) {
    for (int b : access_[i].reads) o << "  b" << b << " -> op" << i << ";\n";
    for (int b : access_[i].writes) o << "  op" << i << " -> b" << b << " [color=\"#1f77b4\"];\n";
  }
  o << "}\n";
  return o.str();
}

std::string Graph::TraceJson() const {
  std::ostringstream o;
  o << "{\"displayTimeUnit\":\"us\",\"traceEvents\":[\n";
  o << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"loom graph '" << Escape(key_)
    << "' on " << device_->name() << "\"}}";
  for (const OpTiming& t : profile_) {
    const OpRecord& op = ops_[size_t(t.op)];
    o << ",\n{\"name\":\"" << Escape(op.name()) << "\",\"cat\":\"op\",\"ph\":\"X\",\"pid\":0,\"tid\":" << t.thread
      << ",\"ts\":" << t.start_us << ",\"dur\":" << (t.end_us - t.start_us) << ",\"args\":{\"op\":" << t.op
      << ",\"attrs\":\"" << Escape(op.attrs.ToString()) << "\"}}";
  }
  // Memory counter track: live intermediate bytes while each op runs, and the arena.
  for (const OpTiming& t : profile_) {
    const std::vector<size_t>& lb = stats_.memory == MemoryMode::kPlanned ? planned_live_bytes_ : analysis_.live_bytes;
    size_t live = lb.empty() ? 0 : lb[size_t(t.op)];
    o << ",\n{\"name\":\"memory\",\"ph\":\"C\",\"pid\":0,\"ts\":" << t.start_us << ",\"args\":{\"live_bytes\":" << live
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
    o << i << "," << ops_[i].name() << "," << (analysis_.live_bytes.empty() ? 0 : analysis_.live_bytes[i]) << ","
      << (planned_live_bytes_.empty() ? 0 : planned_live_bytes_[i]) << "," << stats_.lower_bound_bytes << ","
      << stats_.arena_bytes << "," << stats_.persistent_bytes << "\n";
  return o.str();
}

void Graph::WriteDot(const std::string& path) const { WriteFileAtomically(path, ToDot()); }

void Graph::WriteTrace(const std::string& path) const {
  LOOM_CHECK(!profile_.empty(), GraphError, "[graph '", key_,
             "'] no profiled replay to write: set_profile(true) (or LOOM_DEBUG=2) and run it first");
  WriteFileAtomically(path, TraceJson());
}

}  // namespace loom
