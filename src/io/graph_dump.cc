#include "io/graph_dump.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "io/file.h"
#include "io/loom.pb.h"

namespace loom {
namespace io {

namespace {

constexpr size_t kMagicSize = sizeof(kGraphDumpMagic);

}  // namespace

std::string EncodeGraphDump(const GraphDump& d) {
  GraphDumpProto p;
  p.set_format_version(kGraphDumpFormatVersion);
  p.set_key(d.key);
  p.set_device(d.device);
  for (const GraphDump::Op& o : d.ops) {
    OpProto* op = p.add_ops();
    op->set_kind(o.kind);
    for (const auto& kv : o.attrs.items()) {
      AttrProto* a = op->add_attrs();
      a->set_name(kv.first);
      if (auto* i = std::get_if<int64_t>(&kv.second)) {
        a->set_i(*i);
      } else if (auto* f = std::get_if<double>(&kv.second)) {
        a->set_f(*f);
      } else if (auto* v = std::get_if<std::vector<int64_t>>(&kv.second)) {
        Int64ListProto* list = a->mutable_ints();  // set even when empty: the oneof says "ints"
        for (int64_t x : *v) list->add_values(x);
      } else {
        a->set_s(std::get<std::string>(kv.second));
      }
    }
    for (int b : o.reads) op->add_reads(b);
    for (int b : o.writes) op->add_writes(b);
    op->set_rng_offset(o.rng_offset);
  }
  for (size_t b = 0; b < d.blocks.size(); ++b) {
    const GraphDump::BlockInfo& info = d.blocks[b];
    BlockProto* bp = p.add_blocks();
    bp->set_index(int32_t(b));
    bp->set_id(info.id);
    bp->set_bytes(info.facts.bytes);
    bp->set_persistent(info.life.persistent);
    bp->set_marked_persistent(info.facts.marked_persistent);
    bp->set_held_outside(info.facts.held_outside);
    bp->set_has_memory(info.facts.has_memory);
    bp->set_read_before_write(info.life.read_before_write);
    bp->set_first(info.life.first);
    bp->set_last(info.life.last);
    bp->set_first_write(info.life.first_write);
    bp->set_accessors(info.life.accessors);
    bp->set_planned(info.offset != SIZE_MAX);
    if (info.offset != SIZE_MAX) bp->set_offset(info.offset);
  }
  for (const Dep& dep : d.deps) {
    DepProto* dp = p.add_deps();
    dp->set_from(dep.from);
    dp->set_to(dep.to);
    dp->set_kinds(dep.kinds);
  }
  GraphStatsProto* s = p.mutable_stats();
  s->set_num_ops(d.stats.num_ops);
  s->set_num_blocks(d.stats.num_blocks);
  s->set_num_intermediate(d.stats.num_intermediate);
  s->set_persistent_bytes(d.stats.persistent_bytes);
  s->set_lower_bound_bytes(d.stats.lower_bound_bytes);
  s->set_arena_bytes(d.stats.arena_bytes);
  s->set_dynamic_peak_bytes(d.stats.dynamic_peak_bytes);
  s->set_plan_strategy(d.stats.plan_strategy);
  s->set_memory(d.stats.memory == MemoryMode::kPlanned ? "planned" : "dynamic");
  s->set_replays(d.stats.replays);
  s->set_random_draws(d.stats.random_draws);
  for (size_t v : d.live_bytes) p.add_live_bytes(v);
  p.set_complete(true);
  return std::string(kGraphDumpMagic, kMagicSize) + p.SerializeAsString();
}

GraphDump DecodeGraphDump(const void* data, size_t size, const std::string& source) {
  const std::string where = "[graph_dump] '" + source + "': ";
  const char* bytes = static_cast<const char*>(data);
  LOOM_CHECK(size > 0, IOError, where, "truncated: the file is empty");
  LOOM_CHECK(std::memcmp(bytes, kGraphDumpMagic, std::min(size, kMagicSize)) == 0, IOError, where,
             "bad magic: not a loom graph dump (it does not start with \"LOOMGRPH\")");
  LOOM_CHECK(size > kMagicSize, IOError, where, "truncated: ", size, " bytes, only part of the header");
  LOOM_CHECK(size - kMagicSize <= size_t(INT_MAX), IOError, where, "larger than 2 GiB");
  GraphDumpProto p;
  LOOM_CHECK(p.ParseFromArray(bytes + kMagicSize, int(size - kMagicSize)), IOError, where,
             "truncated or corrupt: the graph record does not parse (", size, " bytes)");
  LOOM_CHECK(p.format_version() == kGraphDumpFormatVersion || p.format_version() == 0, IOError, where,
             "format version ", p.format_version(), ", this build reads ", kGraphDumpFormatVersion);
  LOOM_CHECK(p.complete(), IOError, where, "truncated: the graph record ends before its end marker (", size,
             " bytes)");
  LOOM_CHECK(p.format_version() == kGraphDumpFormatVersion, IOError, where, "format version ", p.format_version(),
             ", this build reads ", kGraphDumpFormatVersion);
  GraphDump d;
  d.key = p.key();
  d.device = p.device();
  const int nops = p.ops_size(), nblocks = p.blocks_size();
  auto check_block = [&](int b, int op, const char* what) {
    LOOM_CHECK(b >= 0 && b < nblocks, IOError, where, "op ", op, " ", what, " block ", b, ", the dump has ", nblocks,
               " blocks");
  };
  auto check_op = [&](int64_t i, bool allow_none, const std::string& what) {
    LOOM_CHECK((allow_none && i == -1) || (i >= 0 && i < nops), IOError, where, what, " refers to op ", i,
               ", the dump has ", nops, " ops");
  };
  for (int i = 0; i < nops; ++i) {
    const OpProto& op = p.ops(i);
    GraphDump::Op o;
    o.kind = op.kind();
    for (const AttrProto& a : op.attrs()) {
      switch (a.value_case()) {
        case AttrProto::kI: o.attrs.Set(a.name(), a.i()); break;
        case AttrProto::kF: o.attrs.Set(a.name(), a.f()); break;
        case AttrProto::kInts:
          o.attrs.Set(a.name(), std::vector<int64_t>(a.ints().values().begin(), a.ints().values().end()));
          break;
        case AttrProto::kS: o.attrs.Set(a.name(), a.s()); break;
        default: throw IOError(detail::Cat(where, "op ", i, " attribute '", a.name(), "' has no value"));
      }
    }
    for (int b : op.reads()) check_block(b, i, "reads");
    for (int b : op.writes()) check_block(b, i, "writes");
    o.reads.assign(op.reads().begin(), op.reads().end());
    o.writes.assign(op.writes().begin(), op.writes().end());
    o.rng_offset = op.rng_offset();
    d.ops.push_back(std::move(o));
  }
  for (int b = 0; b < nblocks; ++b) {
    const BlockProto& bp = p.blocks(b);
    LOOM_CHECK(bp.index() == b, IOError, where, "block record ", b, " says it is block ", bp.index());
    GraphDump::BlockInfo info;
    info.id = bp.id();
    info.facts.bytes = size_t(bp.bytes());
    info.facts.marked_persistent = bp.marked_persistent();
    info.facts.held_outside = bp.held_outside();
    info.facts.has_memory = bp.has_memory();
    info.life.persistent = bp.persistent();
    info.life.read_before_write = bp.read_before_write();
    const std::string what = "block " + std::to_string(b);
    check_op(bp.first(), true, what + "'s lifetime");
    check_op(bp.last(), true, what + "'s lifetime");
    check_op(bp.first_write(), true, what + "'s first write");
    info.life.first = bp.first();
    info.life.last = bp.last();
    info.life.first_write = bp.first_write();
    info.life.accessors = bp.accessors();
    LOOM_CHECK(!bp.planned() || bp.offset() < uint64_t(SIZE_MAX), IOError, where, what, " has an impossible offset");
    info.offset = bp.planned() ? size_t(bp.offset()) : SIZE_MAX;
    d.blocks.push_back(info);
  }
  for (const DepProto& dp : p.deps()) {
    const std::string what = "dependency " + std::to_string(dp.from()) + " -> " + std::to_string(dp.to());
    check_op(dp.from(), false, what);
    check_op(dp.to(), false, what);
    LOOM_CHECK(dp.kinds() >= 1 && dp.kinds() <= 7, IOError, where, what, " has unknown kinds ", dp.kinds());
    d.deps.push_back(Dep{dp.from(), dp.to(), uint8_t(dp.kinds())});
  }
  const GraphStatsProto& s = p.stats();
  d.stats.num_ops = size_t(s.num_ops());
  d.stats.num_blocks = size_t(s.num_blocks());
  d.stats.num_intermediate = size_t(s.num_intermediate());
  d.stats.persistent_bytes = size_t(s.persistent_bytes());
  d.stats.lower_bound_bytes = size_t(s.lower_bound_bytes());
  d.stats.arena_bytes = size_t(s.arena_bytes());
  d.stats.dynamic_peak_bytes = size_t(s.dynamic_peak_bytes());
  d.stats.plan_strategy = s.plan_strategy();
  LOOM_CHECK(s.memory() == "planned" || s.memory() == "dynamic", IOError, where, "unknown memory mode '", s.memory(),
             "'");
  d.stats.memory = s.memory() == "planned" ? MemoryMode::kPlanned : MemoryMode::kDynamic;
  d.stats.replays = s.replays();
  d.stats.random_draws = s.random_draws();
  d.live_bytes.assign(p.live_bytes().begin(), p.live_bytes().end());
  return d;
}

void WriteGraphDump(const Graph& graph, const std::string& path) {
  std::string bytes = EncodeGraphDump(MakeGraphDump(graph));
  WriteFileAtomic(path, {bytes}, "graph_dump");
}

GraphDump ReadGraphDump(const std::string& path) {
  // The record is one protobuf message: at most 2 GiB after the magic number.
  std::string bytes = ReadFile(path, "graph_dump", kMagicSize + size_t(INT_MAX));
  return DecodeGraphDump(bytes.data(), bytes.size(), path);
}

}  // namespace io
}  // namespace loom
