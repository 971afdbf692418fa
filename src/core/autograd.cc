#include "core/autograd.h"

#include <atomic>
#include <queue>
#include <unordered_map>

#include "core/ops.h"

namespace loom {

static std::atomic<uint64_t> g_node_seq{0};
static std::atomic<bool> g_save_all{false};

// Note [Freeing a long history]
// A node owns its producers through `next`, so the history of a running loss summed over many
// steps, or of an RNN unrolled over a long sequence, is a chain of shared_ptrs as long as the
// number of ops. Freed naively, each node's destructor frees its producer from inside itself: one
// stack frame per op, and a SIGSEGV at some 100,000 ops (fewer on a thread's smaller stack or
// in a sanitized build). So a node that dies moves its edges onto a worklist and frees them in a
// loop; an edge it held the last reference to gives up its own edges to the same list first, so
// that no destructor ever has a chain left to recurse into. Backward walks the history with
// explicit stacks and a queue for the same reason.
Node::~Node() {
  std::vector<std::shared_ptr<Node>> doomed;
  auto take_edges = [&doomed](Node& n) {
    for (Edge& e : n.next)
      if (e.node) doomed.push_back(std::move(e.node));
  };
  take_edges(*this);
  while (!doomed.empty()) {
    std::shared_ptr<Node> n = std::move(doomed.back());
    doomed.pop_back();
    if (n.use_count() == 1) take_edges(*n);  // the last owner: its edges outlive it on the list
  }  // n is freed here with no node left behind it
}

void SetSaveAllForBackward(bool on) { g_save_all = on; }
bool SaveAllForBackward() { return g_save_all; }

void RecordAutograd(const OpDef& def, const Attrs& attrs, const std::vector<Tensor>& inputs,
                    std::vector<Tensor>& outputs) {
  if (!GradEnabled() || !def.backward) return;
  bool any = false;
  for (const Tensor& t : inputs) any = any || t.requires_grad();
  if (!any) return;

  auto node = std::make_shared<Node>();
  node->def = &def;
  node->attrs = attrs;
  node->seq = ++g_node_seq;
  node->inputs.resize(inputs.size());
  node->outputs.resize(outputs.size());
  // Note [Backward keeps only what it needs]: save exactly the declared tensors, detached (a
  // saved output must not point back at this node, or the two would keep each other alive).
  if (g_save_all) {
    for (size_t i = 0; i < inputs.size(); ++i) node->inputs[i] = inputs[i].Detach();
    for (size_t i = 0; i < outputs.size(); ++i) node->outputs[i] = outputs[i].Detach();
  } else {
    for (int i : def.saved_inputs) node->inputs[size_t(i)] = inputs[size_t(i)].Detach();
    // (an op whose attributes leave some outputs out, linear_cross_entropy with grads 0, saves
    // the ones it has)
    for (int i : def.saved_outputs)
      if (size_t(i) < outputs.size()) node->outputs[size_t(i)] = outputs[size_t(i)].Detach();
  }
  for (const Tensor& t : inputs) node->input_metas.push_back({t.shape(), t.dtype()});
  for (const Tensor& t : outputs) node->output_metas.push_back({t.shape(), t.dtype()});
  node->next.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.requires_grad()) continue;
    if (t.grad_fn()) {
      node->next[i].node = t.grad_fn();
      node->next[i].index = t.output_index();
    } else {
      node->next[i].leaf = t;
    }
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!IsFloating(outputs[i].dtype())) continue;
    auto meta = std::make_shared<AutogradMeta>();
    meta->requires_grad = true;
    meta->grad_fn = node;
    meta->output_index = int(i);
    outputs[i].set_meta(meta);
  }
}

namespace {
void Accumulate(Tensor& slot, const Tensor& g) { slot = slot.defined() ? ops::Add(slot, g) : g; }
}  // namespace

void Backward(const Tensor& loss, const GradCallback& fn, const Tensor& grad_loss) {
  LOOM_CHECK(loss.defined(), ValueError, "[backward] loss is undefined");
  LOOM_CHECK(loss.requires_grad(), ValueError, "[backward] ", loss.Describe(),
             " does not require grad: no parameter with requires_grad contributed to it");
  NoGradGuard no_grad;
  Tensor seed = grad_loss.defined() ? grad_loss : ops::OnesLike(loss);
  LOOM_CHECK(seed.shape() == loss.shape(), ShapeError, "[backward] gradient ", seed.Describe(), " does not match loss ",
             loss.Describe());
  LOOM_CHECK(seed.dtype() == loss.dtype(), DTypeError, "[backward] gradient ", seed.Describe(),
             " has another dtype than loss ", loss.Describe(), ": gradients keep the dtype of what they differentiate");
  LOOM_CHECK(seed.device() == loss.device(), DeviceError, "[backward] gradient ", seed.Describe(),
             " is on another device than loss ", loss.Describe());
  if (!loss.grad_fn()) {  // the loss is itself a leaf
    fn(loss, seed);
    return;
  }

  // Count consumers of every reachable node and every leaf.
  std::unordered_map<Node*, int> pending;
  std::unordered_map<AutogradMeta*, int> leaf_pending;
  std::vector<Node*> stack{loss.grad_fn().get()};
  pending[loss.grad_fn().get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    LOOM_CHECK(!n->released, GraphError, "[backward] the graph through ", n->def->name,
               " was already used by an earlier backward; run the forward pass again");
    for (Edge& e : n->next) {
      if (e.node) {
        auto it = pending.find(e.node.get());
        if (it == pending.end()) {
          pending[e.node.get()] = 1;
          stack.push_back(e.node.get());
        } else {
          ++it->second;
        }
      } else if (e.leaf.defined()) {
        ++leaf_pending[e.leaf.meta().get()];
      }
    }
  }

  auto later_first = [](const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) { return a->seq < b->seq; };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, decltype(later_first)> ready(later_first);
  std::unordered_map<Node*, std::vector<Tensor>> grads;
  std::unordered_map<AutogradMeta*, Tensor> leaf_grads;
  grads[loss.grad_fn().get()].resize(loss.grad_fn()->output_metas.size());
  grads[loss.grad_fn().get()][size_t(loss.output_index())] = seed;
  ready.push(loss.grad_fn());

  while (!ready.empty()) {
    std::shared_ptr<Node> n = ready.top();
    ready.pop();
    std::vector<Tensor> gout = std::move(grads[n.get()]);
    grads.erase(n.get());
    gout.resize(n->output_metas.size());
    bool any_grad = false;
    for (const Tensor& g : gout) any_grad = any_grad || g.defined();

    std::vector<bool> needs(n->next.size());
    for (size_t i = 0; i < n->next.size(); ++i) needs[i] = n->next[i].node || n->next[i].leaf.defined();
    std::vector<Tensor> gin;
    if (any_grad) {
      BackwardArgs args{n->attrs, n->inputs, n->outputs, n->input_metas, gout, needs};
      gin = n->def->backward(args);
      LOOM_ASSERT(gin.size() == n->next.size(), n->def->name, " backward returned ", gin.size(), " gradients for ",
                  n->next.size(), " inputs");
    }
    gin.resize(n->next.size());
    // The saved tensors are no longer needed: drop them now so their memory can be reused.
    n->inputs.clear();
    n->outputs.clear();
    n->released = true;

    for (size_t i = 0; i < n->next.size(); ++i) {
      Edge& e = n->next[i];
      const Tensor& g = gin[i];
      if (g.defined())
        LOOM_ASSERT(g.shape() == n->input_metas[i].shape, n->def->name, " backward gave gradient ",
                    ToString(g.shape()), " for input ", i, " of shape ", ToString(n->input_metas[i].shape));
      if (e.node) {
        auto& slots = grads[e.node.get()];
        slots.resize(e.node->output_metas.size());
        if (g.defined()) Accumulate(slots[size_t(e.index)], g);
        if (--pending[e.node.get()] == 0) ready.push(e.node);
      } else if (e.leaf.defined()) {
        AutogradMeta* m = e.leaf.meta().get();
        if (g.defined()) Accumulate(leaf_grads[m], g);
        if (--leaf_pending[m] == 0) {
          auto it = leaf_grads.find(m);
          if (it != leaf_grads.end()) {
            Tensor final_grad = it->second;
            leaf_grads.erase(it);
            fn(e.leaf, final_grad);
          }
        }
      }
    }
  }
}

std::vector<std::pair<Tensor, Tensor>> Backward(const Tensor& loss) {
  std::vector<std::pair<Tensor, Tensor>> out;
  Backward(loss, [&](const Tensor& p, const Tensor& g) { out.emplace_back(p, g); });
  return out;
}

}  // namespace loom
