"""loom.onnx_eager: the graph of outputs computed eagerly, rebuilt from their creators (used by
onnx_export.to_onnx).

Note [Exporting eager outputs]
SINGA exports `to_onnx([x], [y])` after a plain forward by walking y.creator back to x. loom's
creators (Note [Creators of op results], Note [Creators of layer results]) hold their op's
inputs weakly and the creators of those inputs strongly, so the walk reaches x even when the
intermediate tensors are gone. replay_creators runs every creator's op again, in dependency order,
while the device captures a fresh graph: an input of to_onnx stands for itself, a tensor made by
an op is the replayed op's output, and any other tensor (a parameter, a constant) is itself. The
graph holds the ops the eager forward ran, recorded as a capture records them, so the exported
model is the one the captured path (to_onnx(inputs, model)) exports. The replay runs without
autograd history and, as the captured path, in eval mode (autograd.training False: batch norm
with its running statistics, dropout the identity); a tensor that is neither alive nor made by a recorded op is a loom.OnnxError.
"""
from . import autograd, core, errors
from .creators import Arg
from .tensor import Tensor


def creator_of(t):
    """The creator autograd hung on t (None when there is none)."""
    return t.__dict__.get("creator") if isinstance(t, Tensor) else None


def recorded(outputs):
    """Whether every output carries a creator (computed while autograd.training was set)."""
    return all(creator_of(y) is not None for y in outputs)


def _key(t):
    return (t._block_id(), t.offset(), tuple(t.shape), t.dtype)


class _Walk:
    """Replays the creators behind some outputs, each once, dependencies first. The order comes
    from an explicit-stack depth-first search, so a chain of any length fits (no recursion)."""

    def __init__(self, inputs):
        self.inputs = inputs
        self.keys = {_key(x): x for x in inputs if x.defined()}
        self.records = {}  # id(creator) -> its tensor arguments as Arg records
        self.done = {}  # id(creator) -> (creator, its replayed outputs)

    def _input(self, t):
        for x in self.inputs:
            if t is x:
                return x
        return self.keys.get(_key(t)) if t.defined() else None

    def _made_by(self, arg):
        """The creator to replay for arg (None: an input of to_onnx or a leaf)."""
        t = arg.ref()
        if t is not None and self._input(t) is not None:
            return None
        return arg.creator

    def _records_of(self, creator):
        recs = self.records.get(id(creator))
        if recs is None:
            if callable(getattr(creator, "arg_records", None)):
                recs = creator.arg_records()
            else:  # an autograd Operator: its inputs
                recs = [Arg(x) for x in getattr(creator, "src", [])]
            self.records[id(creator)] = recs
        return recs

    def run(self, args):
        """Replays every creator the records `args` depend on; returns their tensors."""
        order, seen = [], set()
        stack = [(c, False) for c in (self._made_by(a) for a in args) if c is not None]
        while stack:
            creator, expanded = stack.pop()
            if expanded:
                order.append(creator)
                continue
            if id(creator) in seen:
                continue
            seen.add(id(creator))
            stack.append((creator, True))
            for a in self._records_of(creator):
                dep = self._made_by(a)
                if dep is not None and id(dep) not in seen:
                    stack.append((dep, False))
        for creator in order:
            ys = self._replay(creator)
            self.done[id(creator)] = (creator, list(ys) if isinstance(ys, (list, tuple)) else [ys])
        return [self.tensor(a) for a in args]

    def tensor(self, arg):
        t = arg.ref()
        if t is not None and self._input(t) is not None:
            return self._input(t)
        if arg.creator is not None:
            return self._output(arg.creator, arg.index)
        if t is None:
            raise errors.OnnxError("[onnx] to_onnx: a tensor the outputs depend on was freed and no recorded op made "
                                   "it; keep a reference to it, or pass the model itself (to_onnx(inputs, model))")
        return t

    def _output(self, creator, index):
        ys = self.done[id(creator)][1]  # run() replayed every creator before its readers
        if index >= len(ys) or not isinstance(ys[index], Tensor):
            raise errors.OnnxError(f"[onnx] to_onnx: {getattr(creator, 'name', type(creator).__name__)} replayed "
                                   f"gave no tensor output {index}")
        return ys[index]

    def _replay(self, creator):
        if callable(getattr(creator, "replay", None)):
            return creator.replay(self.tensor)
        if isinstance(creator, autograd.Operator):  # an operator written in Python: its forward
            return creator.forward(*[self.tensor(a) for a in self._records_of(creator)])
        raise errors.OnnxError(f"[onnx] to_onnx: cannot run the op that made an output again "
                               f"({type(creator).__name__})")


def replay_creators(inputs, outputs, model_name):
    """(graph, outputs): the ops that made `outputs` from `inputs`, run again while a new graph
    captures (Note [Exporting eager outputs])."""
    graph = core.new_graph(inputs[0].device, f"{model_name}.onnx_export", None)
    walk = _Walk(inputs)
    was_training, autograd.training = autograd.training, False  # as the captured path: eval mode
    try:
        with autograd.no_grad():
            graph.begin_capture()
            try:
                outs = walk.run([Arg(y) for y in outputs])
            except BaseException:
                graph.abort_capture()
                raise
            graph.end_capture()
    finally:
        autograd.training = was_training
    return graph, outs
