// graph_dump: inspect a graph dump written by io::WriteGraphDump.
//
//   graph_dump step.lgd                 summary: counts, memory, dependency kinds, op kinds
//   graph_dump step.lgd --ops           ... and one line per op (reads -> writes)
//   graph_dump step.lgd --dot > g.dot   the Graphviz graph (dot -Tsvg g.dot > g.svg)
//   graph_dump step.lgd --dot --no-deps without the dashed dependency edges
#include <cstdio>
#include <new>
#include <string>

#include "core/error.h"
#include "examples/common/flags.h"
#include "io/graph_dump.h"

namespace {

int Usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s DUMP_FILE [--ops] [--dot [--no-deps]]\n", argv0);
  return 2;
}

void PrintOps(const loom::GraphDump& d) {
  for (size_t i = 0; i < d.ops.size(); ++i) {
    const auto& op = d.ops[i];
    std::string line = std::to_string(i) + ": " + op.kind;
    std::string attrs = op.attrs.ToString();
    if (!attrs.empty()) line += " {" + attrs + "}";
    line += "  reads";
    for (int b : op.reads) line += " b" + std::to_string(b);
    line += "  writes";
    for (int b : op.writes) line += " b" + std::to_string(b);
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string path;
  bool dot = false, ops = false, deps = true;
  try {
    loom::flags::Args a(argc, argv);
    while (a.Next()) {
      if (a.Is("-h") || a.Is("--help")) return Usage(argv[0]), 0;
      else if (a.Switch("--dot")) dot = true;
      else if (a.Switch("--ops")) ops = true;
      else if (a.Switch("--no-deps")) deps = false;
      else if (a.Positional() && path.empty()) path = a.name();
      else a.Unknown();
    }
  } catch (const loom::flags::UsageError& e) {
    std::fprintf(stderr, "graph_dump: %s\n", e.what());
    return Usage(argv[0]);
  }
  if (path.empty()) return Usage(argv[0]);
  try {
    loom::GraphDump d = loom::io::ReadGraphDump(path);
    if (dot) {
      std::fputs(d.ToDot(deps).c_str(), stdout);
    } else {
      std::fputs(d.Summary().c_str(), stdout);
      if (ops) PrintOps(d);
    }
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "graph_dump: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "graph_dump: out of memory reading '%s'\n", path.c_str());
    return 1;
  }
  return 0;
}
