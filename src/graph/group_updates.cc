// The pass group_updates: the optimizer updates of small parameters in one record.
//
// Note [Small updates grouped]
// Each parameter's update is one op (sgd_update, adam_update), run where its gradient is final
// (nn/optimizer.h): a GPT-2 step makes about 150, a ResNet-50 step 161.
// Most update a few hundred values (biases, layer and batch norms' scales and shifts), and on a
// GPU each such launch costs more than its work. This pass gathers the updates of parameters of
// at most kSmallUpdate elements that share their op, attributes and dtype into one update_group
// record (core/ops/optimizer.cc), placed where the last of them was: CUDA updates up to 24
// members a launch (each member with its own pointers, each element by the arithmetic of its
// own record's kernel), the CPU runs the members' own kernels in turn. Every value is what the
// separate updates give, so replay stays bitwise equal to eager, which runs them one by one.
// Moving an update later keeps its gradient alive longer, so only small parameters' gradients
// are moved: at most kSmallUpdate = 4,096 elements each (GPT-2 124M's 98 biases and layer-norm
// parameters, ~0.5 MB of gradients in all; ResNet-50's batch-norm scales and shifts). Larger
// ones stay where they are: a deep MLP's 128 x 128 weights, grouped at the end, once kept 0.6 MB
// of gradients alive beside 0.25 MB activations, and its memory budget could no longer be met.
// Conditions, for each update moved from position i to the group's position P (the last
// member's): its gradient is all of its block and no collective writes it (under data
// parallelism each update stays just after its gradient's all-reduce, overlapping the
// all-reduces still running: Note [Gradient buckets]); nothing in (i, P], another member or
// not, reads or writes a block the update writes (the parameter, its state, its 16-bit copy), and
// nothing there writes a block it reads (the gradient, the learning rate, Adam's step count, a
// clip scale, a found_inf flag), so no two members write one block (CUDA runs them at once); at
// least two members; the device supports the group. Order 70: after every pass that rewrites
// updates (keep_bf16_weight_copies, bucket_gradients, fuse_weight_grad_update, the CPU's
// keep_weights_blocked), so they see the members as their own records.
#include <cstdio>
#include <map>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/device.h"
#include "graph/op_uses.h"
#include "graph/ranks.h"

LOOM_OP_KIND(sgd_update);
LOOM_OP_KIND(adam_update);
LOOM_OP_KIND(update_group);

namespace loom {
namespace {

constexpr int64_t kSmallUpdate = 4096;

// An attribute's value, exactly (a float by its hexadecimal digits).
std::string Text(const AttrValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, double>) {
          char b[40];
          std::snprintf(b, sizeof b, "%a", x);
          return b;
        } else if constexpr (std::is_same_v<X, int64_t>) {
          return std::to_string(x);
        } else if constexpr (std::is_same_v<X, std::string>) {
          return "'" + x + "'";
        } else {
          std::string s = "[";
          for (int64_t e : x) s += std::to_string(e) + ",";
          return s + "]";
        }
      },
      v);
}

// What members of one group share: the op, every attribute, the parameter's dtype, the number
// of inputs and outputs.
std::string GroupKey(const OpRecord& op) {
  std::string key = detail::Cat(op.def->name, " ", Name(op.inputs[0].dtype()), " ", op.inputs.size(), " ",
                                op.outputs.size());
  std::map<std::string, std::string> attrs;
  for (const auto& [k, v] : op.attrs.items()) attrs[k] = Text(v);
  for (const auto& [k, v] : attrs) key += " " + k + "=" + v;
  return key;
}

bool Candidate(const OpList& list, const OpUses& u, const OpRecord& op) {
  if ((op.def != &op_kind::sgd_update && op.def != &op_kind::adam_update) || op.inputs.size() < 3 ||
      op.inputs[0].numel() > kSmallUpdate || !u.Whole(op.inputs[1]))
    return false;
  for (int w : u.Writers(u.Block(op.inputs[1])))
    if (IsCollective(list.ops[size_t(w)])) return false;  // data parallel: the update follows its all-reduce
  for (const auto& [key, value] : op.attrs.items())  // an attribute a group does not carry (a backend's)
    if (!FindAttrDecl(op_kind::update_group, key)) return false;
  return true;
}

// Update i may run at position p instead (the Note's conditions): no other op in (i, p], a
// member or not, reads or writes what it writes, or writes what it reads. Members therefore write
// disjoint blocks, which CUDA's grouped launch needs (they run at once).
bool Movable(const OpList& list, const OpUses& u, int i, int p) {
  auto others = [&](const std::vector<int>& ops) {
    for (int o : ops)
      if (o > i && o <= p) return true;
    return false;
  };
  const OpRecord& op = list.ops[size_t(i)];
  for (const Tensor& t : op.outputs) {
    const int b = u.Block(t);
    if (others(u.Readers(b)) || others(u.Writers(b))) return false;
  }
  for (const Tensor& t : op.inputs)
    if (others(u.Writers(u.Block(t)))) return false;
  return true;
}

PassResult GroupSmallUpdates(OpList list, const PassContext& ctx) {
  const OpUses u(list);
  std::map<std::string, std::vector<int>> groups;
  for (size_t i = 0; i < list.size(); ++i)
    if (Candidate(list, u, list.ops[i])) groups[GroupKey(list.ops[i])].push_back(int(i));
  OpRewrites rw(list.size());
  int64_t grouped = 0;
  for (auto& [key, ops] : groups) {
    if (ops.size() < 2) continue;
    const int p = ops.back();
    std::vector<int> kept;
    for (int i : ops)
      if (i == p || Movable(list, u, i, p)) kept.push_back(i);
    if (kept.size() < 2) continue;
    OpRecord g;
    g.def = &op_kind::update_group;
    for (const auto& [k, v] : list.ops[size_t(p)].attrs.items()) g.attrs.Set(k, v);  // unbound: the group's own
    g.attrs.Set("of", list.ops[size_t(p)].def->name).Set("members", int64_t(kept.size()));
    for (int i : kept) {
      const OpRecord& op = list.ops[size_t(i)];
      g.inputs.insert(g.inputs.end(), op.inputs.begin(), op.inputs.end());
      g.outputs.insert(g.outputs.end(), op.outputs.begin(), op.outputs.end());
    }
    if (!ctx.device.Supports(g)) continue;  // Note [What a kernel supports]
    for (int i : kept) rw.drop[size_t(i)] = i != p;
    rw.Replace(p, std::move(g));
    grouped += int64_t(kept.size());
  }
  PassResult r{rw.Apply(std::move(list))};
  r.counters.Add("grouped_updates", grouped);
  return r;
}

}  // namespace

LOOM_PASS(PassDef{"group_updates", 70, kAllDevices, true, GroupSmallUpdates,
                  "the optimizer updates of parameters of at most 4,096 elements that share their op and "
                  "attributes run as one record where the last of them ran (on CUDA up to 24 a launch), bitwise "
                  "the same (Note [Small updates grouped])",
                  {{"grouped_updates", "the updates run in groups"}}});

}  // namespace loom
