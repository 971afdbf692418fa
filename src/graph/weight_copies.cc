// The pass keep_bf16_weight_copies: a weight's 16-bit copy written by its update and kept
// between replays (Note [Precision policy] in core/autocast.h).
//
// Note [bfloat16 weight copies kept by the update]
// Under the bf16 and fp16 policies a captured step casts each float32 weight W once, at its
// start, C = cast(W) (by the pass autocast_bf16 / autocast_fp16 or an AutocastScope), and the
// forward product and the input gradient read C; at the end the optimizer's update writes W. So
// every replay reads all of W once more and writes C, a 16-bit arena block, only to compute what
// the previous replay's update could have written as it wrote W. This pass makes the update
// write it:
//   - the cast goes; the update (sgd_update or adam_update) gets copy_dtype and C as one more
//     output, and writes the 16-bit rounding of each new parameter element in its own loop
//     (core/ops/optimizer.cc), with the cast kernel's own conversion function (CPU:
//     CastFloat32To16 in device/cpu/kernels/cast.h; CUDA: DevCastTo16 in cuda/common.cuh), so
//     C holds bitwise what cast(W) would;
//   - C lives across replays: a new persistent block the pass asks for (a BufferRequest, bound
//     by Binding before the first replay), declared as state of the list it returns;
//   - the graph guards W with a copy guard (GuardRequest::copy, Note [Layout guards] in
//     layout_guard.h): a replay that finds C stale writes it with the cast kernel first (C is
//     stale before the first replay, after any access to W from outside the graph's replays: an
//     eager op, a host read or write, a checkpoint, another graph; and after a replay that
//     threw, whose update may have half run). Reads count as accesses: a loop that reads its
//     weights every step casts them every step, as before the pass.
// What it costs: the copies persist between replays (2 bytes per weight element), where the
// casts' outputs lived from the step's start to their last reader; the planned arena gives back
// what they held at its peak (ResNet-18 b16 17.6 of 22.3 MB, the GPT 6.3 of 6.8 MB, the MLP
// 784-1024-1024-10 none: its peak is elsewhere), so the peak grows by the rest. What it saves:
// one read of every weight per step, and a cast record each (docs/benchmarks.md).
// Why the values are exact: at a replay's start C = round(W) (written by the guard, or by the
// previous replay's update, after which nothing touched W: the guard would have said so). Inside
// the replay nothing writes W before its update, so every reader of C that the cast served reads
// round(W) as before; the update writes W and round(W_new) together; and when it skips (found_inf
// set, Note [Skipped updates] in core/ops/optimizer.cc) it writes neither, and C = round(W) still
// holds, because C was fresh when the replay began. Replay stays bitwise equal to eager.
// Conditions, each needed for that:
//   - the cast is float32 -> bfloat16 or float16 of a whole block W (contiguous, offset 0, all its
//     bytes) that had memory before the capture (a parameter), no other graph guards, and Python
//     never exposed as a zero-copy numpy view (writes through it would pass no guard);
//   - W is written exactly once in the list, after the cast, by one sgd_update or adam_update as
//     its parameter (input 0, output 0, whole, of the cast's shape) that has no copy yet;
//   - C is an intermediate (no memory before the capture, not marked persistent, held by nothing
//     outside the graph) written by the cast alone, and every reader of C comes before the update
//     (a later one would read the new rounding);
//   - the device supports the rewritten update (Device::Supports: a float32 parameter, a bfloat16
//     or float16 copy; matmul_sgd_update takes none, and fuse_weight_grad_update leaves an update
//     with a copy alone, as keep_weights_blocked does).
// A second cast of the same W (each product cast its own operand, as an AutocastScope capture
// does) stays. Order 8: after the autocast passes (5, 6), which make the casts, and before every
// pass that rewrites updates (fuse_weight_grad_update, 20) or moves them (bucket_gradients, 10,
// which keeps each reader of C before the update: it moves ops only later, in conflict order).
#include <algorithm>

#include "core/device.h"
#include "graph/op_uses.h"

LOOM_OP_KIND(cast);
LOOM_OP_KIND(sgd_update);
LOOM_OP_KIND(adam_update);

namespace loom {
namespace {

constexpr size_t kAlign = 64;

// The update record writing C as op i's copy of its parameter, or a record with a null def when
// the cast at i does not qualify (the conditions of the Note).
OpRecord Rewrite(const OpList& list, const OpUses& u, int i, const Device& device) {
  const OpRecord& cast = list.ops[size_t(i)];
  const Tensor &w = cast.inputs[0], &c = cast.outputs[0];
  const DType to = c.dtype();
  if (w.dtype() != DType::kFloat32 || (to != DType::kBFloat16 && to != DType::kFloat16)) return {};
  const int wb = u.Block(w), cb = u.Block(c);
  const Block& block = *list.blocks[size_t(wb)];
  if (!list.facts[size_t(wb)].has_memory || !u.Whole(w) || block.guard() || block.host_viewed()) return {};
  if (u.Writers(wb).size() != 1 || u.Writers(wb)[0] <= i) return {};
  const int j = u.Writers(wb)[0];
  const OpRecord& up = list.ops[size_t(j)];
  if ((up.def != &op_kind::sgd_update && up.def != &op_kind::adam_update) || up.attrs.Has("copy_dtype")) return {};
  if (up.inputs[0].block() != w.block() || up.outputs[0].block() != w.block() || !u.Whole(up.inputs[0]) ||
      !u.Whole(up.outputs[0]) || up.inputs[0].shape() != w.shape())
    return {};
  if (!u.Intermediate(cb) || !u.Whole(c)) return {};
  if (u.Writers(cb) != std::vector<int>{i}) return {};
  for (int r : u.Readers(cb))
    if (r >= j) return {};
  OpRecord rec = up;
  rec.attrs.Set("copy_dtype", int64_t(to));
  rec.outputs.push_back(c);
  return device.Supports(rec) ? rec : OpRecord{};  // Note [What a kernel supports]
}

PassResult KeepWeightCopies(OpList list, const PassContext& ctx) {
  const OpUses u(list);
  OpRewrites rw{list.size()};
  std::vector<GuardRequest> guards;
  BufferRequest buffer;
  size_t bytes = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    if (list.ops[i].def != &op_kind::cast) continue;
    OpRecord up = Rewrite(list, u, int(i), ctx.device);
    if (!up.def) continue;
    const int j = u.Writers(u.Block(list.ops[i].inputs[0]))[0];
    if (rw.replace[size_t(j)].def) continue;  // a second cast of a weight already copied
    const Tensor &w = list.ops[i].inputs[0], &c = list.ops[i].outputs[0];
    guards.push_back({w, &op_kind::cast, Attrs{{"dtype", int64_t(c.dtype())}}, Attrs{}, c});
    buffer.members.emplace_back(c.block_ptr(), bytes);
    bytes += (c.nbytes() + kAlign - 1) / kAlign * kAlign;
    rw.Replace(int(j), std::move(up));
    rw.drop[i] = true;
  }
  if (guards.empty()) return PassResult{std::move(list)};
  buffer.buffer = std::make_shared<Block>(bytes, guards[0].whole.device_ptr());
  // Each copy has memory before the list runs (the buffer, bound before the first replay), so a
  // product may read it before the update writes it.
  std::vector<std::shared_ptr<Block>> state{buffer.buffer};
  for (const auto& m : buffer.members) state.push_back(m.first);
  PassResult r{rw.Apply(std::move(list), state)};
  r.buffers.push_back(std::move(buffer));
  r.guards = std::move(guards);
  r.counters.Add("kept_weight_copies", int64_t(r.guards.size()));
  return r;
}

}  // namespace

LOOM_PASS(PassDef{"keep_bf16_weight_copies", 8, kAllDevices, true, KeepWeightCopies,
                  "a weight's bfloat16 (or float16) copy is written by its SGD or Adam update and kept between "
                  "replays instead of cast at every step, cast again only after the weight was touched from "
                  "outside (Note [bfloat16 weight copies kept by the update]); acts only where a precision pass "
                  "or an autocast scope made the casts",
                  {{"kept_weight_copies", "weights whose 16-bit copy their update writes and the graph keeps"}}});

}  // namespace loom
