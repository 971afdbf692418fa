"""loom.data: your own data for training. A dataset is any object with __len__ and
__getitem__(i) -> (x, y); ArrayDataset holds numpy arrays; Batches are batches you make (a
generator function or any iterable of (x, y) batches); DataLoader batches a dataset (or takes
Batches as they come), shuffles it by seed, reads ahead on a thread while the model steps, resumes
where a checkpoint left it and gives loom tensors on the model's device. loom.trainer.Trainer takes
it as it takes loom.io.DataLoader (checkpoints, resume, evaluation), and takes Batches, a generator
function or an iterable of batches directly.

    from loom import data, trainer
    train = data.DataLoader(data.ArrayDataset(x, y), batch_size=32, seed=1, drop_last=True)
    held_out = data.DataLoader(data.ArrayDataset(x_test, y_test), batch_size=256, shuffle=False)
    trainer.Trainer(model, train, held_out, epochs=10, checkpoint_dir="runs/a", resume=True).fit()

    def batches(epoch):                    # any iterable of (x, y) batches, made per epoch
        rng = np.random.default_rng(epoch)
        for i in rng.permutation(10):
            yield x[i * 32:(i + 1) * 32], y[i * 32:(i + 1) * 32]
    trainer.Trainer(model, batches, epochs=10, checkpoint_dir="runs/b", resume=True).fit()

The protocol (no base class needed; Dataset below documents it):
  len(ds)       the number of samples, at least 1
  ds[i]         sample i, 0 <= i < len(ds): a pair (x, y) of numpy arrays or scalars; the same
                sample for the same i every time (the loader's position is what a checkpoint saves)
  ds.name       optional: named in errors (the class name otherwise)
x is any real number type (bool, integers, floats) and becomes float32, as it is: normalise in the
dataset. y is a class label (an integer scalar: int32 in the batch; what softmax cross-entropy and
evaluation take) or float targets of any shape (float32: regression with MSE). Every sample has
item 0's shapes and kinds of y. Anything else is a loom error naming the dataset, the index and the
shapes: loom.ShapeError (lengths that disagree, ragged shapes), loom.DTypeError (strings, objects,
complex numbers, a label that is a float in one item and an integer in another), loom.ValueError
(an empty dataset, a value that is not finite, a negative label), loom.TypeError (an item that is
not an (x, y) pair). An exception raised by the dataset's own __getitem__ passes through unchanged.
Batches are checked the same way, batch by batch, naming the epoch and the batch (class Batches).

The order of epoch e is a function of (seed, e) only: C++'s io::EpochOrder, the order in which
io::DataLoader reads an io::ArrayDataset. A Trainer checkpoint saves the loader's position
(epoch, batch) and seed; resuming seeks there, so the run goes on with the batches an
uninterrupted run would have read. Items are read on a thread of the loader's, `prefetch` batches
ahead (ArrayDataset: one numpy gather per batch), in the order the calling thread takes them.

Note [Reading ahead on a thread]
A Python dataset cannot be read on C++'s loader thread (its __getitem__ needs the interpreter
lock), so loom.data reads ahead on a Python thread: one thread per loader, running the epoch's
reads (items, checks, stacking into numpy arrays) in order, at most `prefetch` batches ahead, into
a queue the calling thread takes batches from; the loom tensors are made on the calling thread.
The reads overlap the model's step because a step that replays its graph (or a C++ model's eager
step) runs without the interpreter lock (Note [Steps run without the interpreter lock] in
swig/nn.i; a capture keeps it), and file reads, sleeps and most of numpy's work release it too; pure Python work in __getitem__ still takes turns with the step's
Python parts. A dataset is read by that one thread only, item after item, as without it; an
exception raised there is raised by the call that reaches its batch. Seeking to another position,
an epoch's end, or the loader's end stops the thread (after the item it is reading) and drops what
it read ahead, so positions and resume are exactly those of prefetch=0.

Note [Positioning a source of batches]
Batches have no index to seek to: the loader positions one by making the epoch's iterable again
and reading and dropping its first `index` batches (fast-forward; neither checked nor made into
tensors). That resumes a run bitwise when the source gives the same batches for the same epoch;
a one-shot iterator cannot be made again, so it is refused (loom.ValueError) wherever a position
other than where it stands is asked for. Positions count batches, so every epoch must give the same
number: one more or one fewer is a loom.ValueError at the epoch's end.
"""
import inspect
import queue
import sys
import threading
import weakref

import numpy as np

from . import core, errors
from . import tensor as _tensor

__all__ = ["Dataset", "ArrayDataset", "Batches", "DataLoader"]

_INT32_MAX = np.iinfo(np.int32).max


class Dataset:
    """The protocol, for documentation and isinstance: subclass it or not, as you like."""

    name = None

    def __len__(self):
        raise NotImplementedError

    def __getitem__(self, index):
        """(x, y) of sample `index`."""
        raise NotImplementedError


def _name_of(dataset):
    name = getattr(dataset, "name", None)
    return str(name) if name else type(dataset).__name__


def _kind(arr, name, where, what):
    """'real' for x, or 'label' / 'target' for y; DTypeError for anything else."""
    k = arr.dtype.kind
    if what == "x" and k in "biuf":
        return "real"
    if what == "y" and k in "iu":
        return "label"
    if what == "y" and k == "f":
        return "target"
    want = ("a real number type (bool, integer or float)" if what == "x"
            else "integer class labels or float targets")
    raise errors.DTypeError(f"[data] dataset '{name}': {where}{what} has dtype {arr.dtype}; {what} must be {want}")


def _array(value, name, where, what):
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as e:  # numpy: "inhomogeneous shape", "setting an array element..."
        raise errors.ShapeError(f"[data] dataset '{name}': {where}{what} is not an array of one shape "
                                f"(ragged nested sequences?): {e}") from None


def _check_values(x, y, who, row):
    """Finite x (and float targets), labels in [0, 2**31): ValueError naming the row (row(i): "sample
    17", "epoch 0, batch 3, row 2")."""
    for what, arr in (("x", x), ("y", y)):
        if arr.dtype.kind == "f":
            bad = ~np.isfinite(arr.reshape(len(arr), -1)).all(axis=1)
            if bad.any():
                raise errors.ValueError(f"[data] {who}: {row(int(np.argmax(bad)))}: {what} holds a value that is "
                                        "not finite (NaN or infinite)")
    if y.dtype.kind in "iu" and len(y):
        lo, hi = int(y.min()), int(y.max())
        if lo < 0 or hi > _INT32_MAX:
            i = int(np.argmax((y < 0) | (y > _INT32_MAX)))
            raise errors.ValueError(f"[data] {who}: {row(i)}: label {int(y[i])} is outside [0, {_INT32_MAX}] (class "
                                    "labels count from 0)")


def _samples(indices):
    return lambda i: f"sample {int(indices[i])}"


class ArrayDataset(Dataset):
    """Samples in numpy arrays: x of shape (N, ...) and y of shape (N,) (class labels, integers)
    or (N, ...) (float targets). Checked once, here: lengths, kinds, finite values, labels >= 0.
    x is kept as float32, labels as int32, targets as float32."""

    def __init__(self, x, y, name="ArrayDataset"):
        self.name = str(name)
        x, y = _array(x, self.name, "", "x"), _array(y, self.name, "", "y")
        if x.ndim < 1 or y.ndim < 1:
            raise errors.ShapeError(f"[data] dataset '{self.name}': x of shape {x.shape} and y of shape {y.shape}: "
                                    "both need a first axis of samples")
        if len(x) != len(y):
            raise errors.ShapeError(f"[data] dataset '{self.name}': x of shape {x.shape} holds {len(x)} samples but "
                                    f"y of shape {y.shape} holds {len(y)}")
        if len(x) == 0:
            raise errors.ValueError(f"[data] dataset '{self.name}' is empty: x of shape {x.shape}")
        _kind(x, self.name, "", "x")
        kind = _kind(y, self.name, "", "y")
        if kind == "label" and y.ndim != 1:
            raise errors.ShapeError(f"[data] dataset '{self.name}': integer y of shape {y.shape}: class labels are "
                                    "one per sample, shape (N,) (give float targets for regression)")
        who, row = f"dataset '{self.name}'", _samples(np.arange(len(x)))
        _check_values(x, y, who, row)
        with np.errstate(over="ignore"):
            self.x = np.ascontiguousarray(x, np.float32)
        _check_values(self.x, y, who, row)  # float64 beyond float32's range
        self.y = np.ascontiguousarray(y, np.int32 if kind == "label" else np.float32)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, index):
        return self.x[index], self.y[index]

    def _gather(self, indices):
        """The batch of these samples, already checked."""
        return self.x[indices], self.y[indices]

    def __repr__(self):
        return f"ArrayDataset({self.name!r}, x {self.x.shape} float32, y {self.y.shape} {self.y.dtype})"


class Batches:
    """Batches you make yourself: an iterable of (x, y) pairs, x of shape (B, ...) (any real number
    type, becomes float32) and y of shape (B,) (integer class labels, int32) or (B, ...) (float
    targets, float32), B >= 1 and free to vary (a last, smaller batch). `source` is one of
      a function           source(epoch), or source() when it takes no argument, returning an
                           iterable of the batches of that epoch (a generator function): called
                           once per epoch, and again to resume
      a re-iterable        an object whose iter() is a fresh iterator each time (a list of batches,
                           a class whose __iter__ is a generator): iterated once per epoch
      a one-shot iterator  iter(source) is source (a generator object, a file's lines): read once,
                           one epoch, never positioned again (no resume, no second epoch)
    batches_per_epoch is given, or len(source), or else counted by reading epoch 0 once (a one-shot
    iterator is not counted: its count stays unknown, and a Trainer asks for it). Every epoch gives
    that many batches, each with batch 0's sample shapes and kinds: anything else is a loom error
    naming the epoch, the batch and the shapes. name (or source.name, or its type) is named in
    errors.

    Resume (Note [Positioning a source of batches]): a checkpoint saves (epoch, batch); to continue,
    the loader makes epoch e's iterable again and reads and drops its first `batch` batches. A
    source that gives the same batches for the same epoch (a function of the epoch, a re-iterable
    that yields the same sequence) resumes bitwise; a one-shot iterator cannot be positioned, and
    seeking it anywhere but where it stands is a loom.ValueError."""

    def __init__(self, source, batches_per_epoch=None, name=None):
        self.name = str(name or getattr(source, "name", None) or getattr(source, "__name__", None)
                        or type(source).__name__)
        self.source, self.one_shot, self._takes_epoch = source, False, False
        if callable(source) and not hasattr(source, "__iter__"):
            self._takes_epoch = _takes_one_argument(source, self.name)
        elif hasattr(source, "__iter__"):
            self.one_shot = iter(source) is source
        else:
            raise errors.TypeError(f"[data] batches '{self.name}': the source must be a function returning an "
                                   f"iterable of (x, y) batches, or an iterable of them, got {type(source).__name__}")
        n = batches_per_epoch
        if n is None and hasattr(source, "__len__"):
            n = len(source)
        if n is not None and int(n) < 1:
            raise errors.ValueError(f"[data] batches '{self.name}': batches_per_epoch is {n}; an epoch needs a batch")
        self._count = None if n is None else int(n)
        self._spec = None  # (x sample shape, y sample shape, y kind) of the first batch read
        self._read_from = None  # a one-shot iterator: the (epoch, batch) it stands at, once read

    def count(self, counting=True):
        """Batches per epoch: known, or counted by reading epoch 0 once (None for a one-shot
        iterator that does not say)."""
        if self._count is None and counting and not self.one_shot:
            n = sum(1 for _ in self._iterable(0))
            if n < 1:
                raise errors.ValueError(f"[data] batches '{self.name}': epoch 0 gave no batch")
            self._count = n
        return self._count

    def _iterable(self, epoch):
        if self.one_shot:
            return self.source
        if callable(self.source) and not hasattr(self.source, "__iter__"):
            return self.source(epoch) if self._takes_epoch else self.source()
        return self.source

    def read(self, epoch, start):
        """(index, x, y) of epoch `epoch` from batch `start` on, checked (numpy arrays)."""
        if self.one_shot:
            at = self._read_from or (0, 0)
            if epoch > 0 or (epoch, start) != at:
                raise errors.ValueError(
                    f"[data] batches '{self.name}' come from a one-shot iterator (a generator object): it gives one "
                    f"epoch, read once, and stands at epoch {at[0]}, batch {at[1]}; epoch {epoch}, batch {start} was "
                    "asked for (a second epoch, a resume, a second evaluation): give the generator function instead, "
                    "called as source(epoch) each epoch, or a re-iterable")
        n = self._count
        it = iter(self._iterable(epoch))
        for index in range(0 if self.one_shot else start):  # Note [Positioning a source of batches]
            if next(it, _END) is _END:
                raise errors.ValueError(f"[data] batches '{self.name}': epoch {epoch} ended after {index} batches "
                                        f"while seeking batch {start} (batches_per_epoch is {n})")
        index = start
        while n is None or index < n:
            b = next(it, _END)
            if b is _END:
                if n is None and index > 0:
                    self._count = n = index  # a one-shot iterator, counted as it ends
                    break
                raise errors.ValueError(f"[data] batches '{self.name}': epoch {epoch} ended after {index} batches; "
                                        + (f"batches_per_epoch is {n}" if n else "it gave none")
                                        + ": every epoch must give the same number (positions count batches)")
            x, y = self._check(b, f"epoch {epoch}, batch {index}")
            if self.one_shot:
                self._read_from = (epoch, index + 1)
            yield index, x, y
            index += 1
        if next(it, _END) is not _END:
            raise errors.ValueError(f"[data] batches '{self.name}': epoch {epoch} gives more than batches_per_epoch "
                                    f"{n} batches: every epoch must give the same number (positions count batches)")
        if self.one_shot:
            self._read_from = (epoch + 1, 0)

    def _check(self, b, where):
        who = f"batches '{self.name}'"
        if not isinstance(b, (tuple, list)) or len(b) != 2:
            raise errors.TypeError(f"[data] {who}: {where} is a {type(b).__name__}, not an (x, y) pair")
        x, y = _array(b[0], self.name, f"{where}: ", "x"), _array(b[1], self.name, f"{where}: ", "y")
        _kind(x, self.name, f"{where}: ", "x")
        kind = _kind(y, self.name, f"{where}: ", "y")
        if x.ndim < 1 or y.ndim < 1 or len(x) != len(y) or len(x) == 0:
            raise errors.ShapeError(f"[data] {who}: {where}: x of shape {x.shape} and y of shape {y.shape}: both need "
                                    "a first axis of the same number of samples, at least 1")
        if kind == "label" and y.ndim != 1:
            raise errors.ShapeError(f"[data] {who}: {where}: integer y of shape {y.shape}: class labels are one per "
                                    "sample, shape (B,) (give float targets for regression)")
        spec = (x.shape[1:], y.shape[1:], kind)
        if self._spec is None:
            self._spec = spec
        elif spec != self._spec:
            (xs0, ys0, k0), (xs1, ys1, k1) = self._spec, spec
            raise (errors.DTypeError if k0 != k1 else errors.ShapeError)(
                f"[data] {who}: {where} has samples of x shape {xs1} and y shape {ys1} ({k1}s), x of shape {x.shape}; "
                f"the first batch had samples of x shape {xs0} and y shape {ys0} ({k0}s): every batch must have the "
                "same")
        row = lambda i: f"{where}, row {i}"  # noqa: E731
        _check_values(x, y, who, row)
        with np.errstate(over="ignore"):
            x = np.ascontiguousarray(x, np.float32)
        _check_values(x, y, who, row)
        return x, np.ascontiguousarray(y, np.int32 if kind == "label" else np.float32)


_END = object()


def _takes_one_argument(fn, name):
    """Whether fn is called with the epoch (one positional argument) or with none."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: given the epoch
        return True
    for args in ((0,), ()):
        try:
            sig.bind(*args)
            return bool(args)
        except TypeError:
            pass
    raise errors.TypeError(f"[data] batches '{name}': the source function must take the epoch or nothing, it "
                           f"takes {sig}")


class _Ahead:
    """Note [Reading ahead on a thread]: a thread runs the iterator `items` up to `depth` items
    ahead of get(); an exception it raises reaches get() in its place in the order."""

    def __init__(self, items, depth):
        self._q = queue.Queue(depth)
        self._stop = threading.Event()
        self.produced = 0
        self._thread = threading.Thread(target=self._run, args=(items,), name="loom.data prefetch", daemon=True)
        self._thread.start()

    def _run(self, items):
        try:
            for item in items:
                if not self._put((True, item)):
                    return
                self.produced += 1
            self._put((True, None))
        except BaseException as e:  # noqa: B036 (handed to the reader, raised there)
            self._put((False, e))

    def _put(self, message):
        while not self._stop.is_set():
            try:
                self._q.put(message, timeout=0.05)
                return True
            except queue.Full:
                pass
        return False

    def get(self):
        ok, value = self._q.get()
        if not ok:
            raise value
        return value

    def close(self):
        """Stops the thread (after the item it is reading) and waits for it; on the thread itself
        (the loader's last reference dropped there, so its __del__ runs there) only stops it."""
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()


class DataLoader:
    """Batches of `dataset` (see the module's docstring): (x float32 (N, ...), y int32 (N) or
    float32 (N, ...)) as loom tensors on `device` (None: the model's, when a Trainer uses the
    loader; the default device otherwise). `dataset` is a dataset of the protocol, an
    ArrayDataset, or batches you make (a Batches; a generator function or an iterable that has no
    __getitem__ is wrapped in one).

    batch_size, drop_last   the last, smaller batch of an epoch is dropped with drop_last (a graph-
                            mode model trains on batches of one shape)
    shuffle, seed           the order of epoch e is a function of (seed, e) only
    shard=(rank, world)     data-parallel rank `rank` of `world` reads every world-th sample of
                            each epoch's order from its rank on, the same count on every rank
    prefetch                batches read ahead on a thread while the model steps (0: read on the
                            calling thread when asked): Note [Reading ahead on a thread]
    (batch_size, shuffle, drop_last and shard are a dataset's: Batches come batched and ordered.)

    Iterating yields (x, y) for one epoch; iterate again for the next. next() gives
    (x, y, epoch, index), or None at the end of an epoch (the call after starts the next one).
    position() is (epoch, index) of the next batch; seek(epoch, index) moves there."""

    def __init__(self, dataset, batch_size=None, shuffle=None, seed=0, drop_last=None, device=None, shard=None,
                 prefetch=2):
        if not isinstance(dataset, Batches) and not hasattr(dataset, "__getitem__") and (
                callable(dataset) or hasattr(dataset, "__iter__")):
            dataset = Batches(dataset)
        if errors._whole("data", "prefetch", prefetch) < 0:
            raise errors.ValueError(f"[data] prefetch {prefetch} must be >= 0 (0: no reading ahead)")
        if not 0 <= errors._whole("data", "seed", seed) < 2 ** 64:
            raise errors.ValueError(f"[data] seed {seed} must lie in [0, 2**64)")
        self.dataset, self.name, self.device, self.prefetch = dataset, _name_of(dataset), device, int(prefetch)
        self.seed, self._epoch, self._index = int(seed), 0, 0
        self._reader, self._reader_at = None, None  # reads (index, x, y) from where it stands
        if isinstance(dataset, Batches):
            given = [k for k, v in (("batch_size", batch_size), ("shuffle", shuffle), ("drop_last", drop_last),
                                    ("shard", shard)) if v is not None]
            if given:
                raise errors.ValueError(f"[data] batches '{self.name}' come batched and in their order: "
                                        f"{', '.join(given)} apply to a dataset, not to Batches")
            self.batch_size, self.shuffle, self.drop_last, self.shard = 0, False, False, (0, 1)
            return
        self._init_dataset(dataset, 64 if batch_size is None else batch_size, True if shuffle is None else shuffle,
                           bool(drop_last), (0, 1) if shard is None else shard)

    def _init_dataset(self, dataset, batch_size, shuffle, drop_last, shard):
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise errors.TypeError(f"[data] a dataset needs __len__ and __getitem__, got {type(dataset).__name__} "
                                   "(numpy arrays: loom.data.ArrayDataset(x, y); batches you make: "
                                   "loom.data.Batches(source))")
        n = len(dataset)
        if n < 1:
            raise errors.ValueError(f"[data] dataset '{self.name}' is empty: len() is {n}")
        try:
            rank, world = (errors._whole("data", "shard", v) for v in shard)
        except (TypeError, ValueError):  # loom's are both too
            raise errors.ValueError(f"[data] shard must be (rank, world), got {shard!r}") from None
        if errors._whole("data", "batch_size", batch_size) < 1:
            raise errors.ValueError(f"[data] batch_size {batch_size} must be positive")
        if world < 1 or not 0 <= rank < world or n < world:
            raise errors.ValueError(f"[data] shard ({rank}, {world}) of {n} samples: the rank must lie in [0, world) "
                                    "and every rank have a sample")
        self.size, self.batch_size, self.shuffle = n, int(batch_size), bool(shuffle)
        self.drop_last, self.shard = bool(drop_last), (rank, world)
        self.samples_per_epoch = n // world
        if self.drop_last and self.batch_size > self.samples_per_epoch:
            raise errors.ValueError(f"[data] batch_size {self.batch_size} with drop_last: an epoch of "
                                    f"{self.samples_per_epoch} samples would have no batch")
        self._order_epoch, self._order = -1, None
        # An ArrayDataset was checked whole when made; any other dataset is checked item by item
        # against item 0.
        self._spec = None if isinstance(dataset, ArrayDataset) else self._item_spec(0, self._item(0))

    # ---- where it stands ----
    @property
    def batches_per_epoch(self):
        """Batches an epoch; None for Batches from a one-shot iterator that does not say."""
        if isinstance(self.dataset, Batches):
            return self.dataset.count()
        n, b = self.samples_per_epoch, self.batch_size
        return n // b + (0 if self.drop_last or n % b == 0 else 1)

    def __len__(self):
        n = self.batches_per_epoch
        if n is None:
            raise errors.TypeError(f"[data] batches '{self.name}': a one-shot iterator has no length (give "
                                   "batches_per_epoch to loom.data.Batches)")
        return n

    def position(self):
        return self._epoch, self._index

    def seek(self, epoch, index):
        epoch, index = int(epoch), int(index)
        n = self.batches_per_epoch
        if epoch < 0 or index < 0 or (n is not None and index > n):
            raise errors.ValueError(f"[data] cannot seek to batch {index} of epoch {epoch}: an epoch has batches 0 to "
                                    f"{n - 1} (and {n} for its end)" if n is not None else
                                    f"[data] cannot seek to batch {index} of epoch {epoch}")
        if isinstance(self.dataset, Batches) and self.dataset.one_shot and (epoch, index) != (self._epoch, self._index):
            raise errors.ValueError(
                f"[data] batches '{self.name}' come from a one-shot iterator (a generator object), which stands at "
                f"epoch {self._epoch}, batch {self._index} and cannot be positioned at epoch {epoch}, batch {index} (a "
                "resume, a second evaluation): give the generator function instead, called as source(epoch) each "
                "epoch, or a re-iterable")
        if (epoch, index) != (self._epoch, self._index):
            self._stop_reading()
        self._epoch, self._index = epoch, index

    def x_shape(self, batch):
        """The shape of x in a batch of `batch` samples."""
        if isinstance(self.dataset, Batches):
            if self.dataset._spec is None:
                raise errors.ValueError(f"[data] batches '{self.name}': no batch read yet, so no shape known")
            sample = self.dataset._spec[0]
        else:
            sample = self.dataset.x.shape[1:] if self._spec is None else self._spec[0]
        return (int(batch),) + tuple(sample)

    def _facts(self):
        """What a Trainer's run state records of this loader (nn::LoaderFacts); Batches record
        batch size 0 (they come batched) and their count."""
        f = core.LoaderFacts()
        f.epoch, f.index = self._epoch, self._index
        f.batch_size, f.batches_per_epoch = self.batch_size, self.batches_per_epoch or 0
        f.seed, f.augment_seed = self.seed, 0
        return f

    # ---- batches ----
    def next(self):
        epoch, index = self._epoch, self._index
        n = self.batches_per_epoch
        if n is not None and index >= n:
            if self._reader is not None and self._reader_at == (epoch, index):
                try:  # the reader's end: it checks that the epoch gives no more batches
                    self._reader.get() if self.prefetch else next(self._reader, None)
                finally:
                    self._stop_reading()
            self._stop_reading()
            self._epoch, self._index = epoch + 1, 0
            return None
        if self._reader is None or self._reader_at != (epoch, index):
            self._start_reading(epoch, index)
        try:
            got = self._reader.get() if self.prefetch else next(self._reader, None)
        except BaseException:
            self._stop_reading()  # the next call reads this batch again
            raise
        if got is None:  # a one-shot iterator of unknown length ended
            self._stop_reading()
            self._epoch, self._index = epoch + 1, 0
            return None
        _, x, y = got
        self._index, self._reader_at = index + 1, (epoch, index + 1)
        dev = self.device
        return _tensor.from_numpy(x, dev), _tensor.from_numpy(y, dev), epoch, index

    def __iter__(self):
        while True:
            b = self.next()
            if b is None:
                return
            yield b[0], b[1]

    def _start_reading(self, epoch, index):
        self._stop_reading()
        items = (self.dataset.read(epoch, index) if isinstance(self.dataset, Batches)
                 else _read_epoch(weakref.ref(self), epoch, index))
        self._reader = _Ahead(items, self.prefetch) if self.prefetch else items
        self._reader_at = (epoch, index)

    def _stop_reading(self):
        if isinstance(self._reader, _Ahead):
            self._reader.close()
        self._reader, self._reader_at = None, None

    def __del__(self):
        if getattr(self, "_reader", None) is not None:
            self._stop_reading()

    # ---- a dataset of the protocol, item by item ----
    def _item(self, i):
        try:
            return self.dataset[i]
        except Exception as e:  # the dataset's own error, with where it happened
            if sys.version_info >= (3, 11):
                e.add_note(f"loom.data: reading item {i} of dataset '{self.name}'")
            raise

    def _item_spec(self, i, item):
        """(x shape, y shape, y kind) of one item, checked."""
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise errors.TypeError(f"[data] dataset '{self.name}': item {i} is a {type(item).__name__}, not an "
                                   "(x, y) pair")
        x = _array(item[0], self.name, f"item {i}: ", "x")
        y = _array(item[1], self.name, f"item {i}: ", "y")
        _kind(x, self.name, f"item {i}: ", "x")
        kind = _kind(y, self.name, f"item {i}: ", "y")
        if kind == "label" and y.ndim != 0:
            raise errors.ShapeError(f"[data] dataset '{self.name}': item {i}: integer y of shape {y.shape}: a class "
                                    "label is one integer (give float targets for regression)")
        return x.shape, y.shape, kind

    def _read(self, indices):
        xs, ys = [], []
        for i in indices:
            i = int(i)
            item = self._item(i)
            spec = self._item_spec(i, item)
            if spec != self._spec:
                (xs0, ys0, k0), (xs1, ys1, k1) = self._spec, spec
                raise (errors.DTypeError if k0 != k1 else errors.ShapeError)(
                    f"[data] dataset '{self.name}': item {i} has x of shape {xs1} and y of shape {ys1} ({k1}s); "
                    f"item 0 has x of shape {xs0} and y of shape {ys0} ({k0}s): every item must have the same")
            xs.append(item[0])
            ys.append(item[1])
        x, y = np.asarray(xs), np.asarray(ys)
        who, row = f"dataset '{self.name}'", _samples(indices)
        _check_values(x, y, who, row)
        with np.errstate(over="ignore"):
            x = np.ascontiguousarray(x, np.float32)
        _check_values(x, y, who, row)
        return x, np.ascontiguousarray(y, np.int32 if self._spec[2] == "label" else np.float32)


def _read_epoch(loader_ref, epoch, start):
    """(index, x, y) of a dataset's epoch from batch `start` (numpy arrays, checked). Holds the
    loader weakly between batches: a reading thread keeps no loader alive (its __del__ stops it)."""
    loader = loader_ref()
    rank, world = loader.shard
    order = np.frombuffer(core.epoch_order(loader.size, loader.shuffle, loader.seed, epoch, rank, world), np.int64)
    size, n = loader.batch_size, loader.batches_per_epoch
    del loader
    for index in range(start, n):
        loader = loader_ref()
        if loader is None:
            return
        indices = order[index * size:(index + 1) * size]
        x, y = loader.dataset._gather(indices) if loader._spec is None else loader._read(indices)
        del loader
        yield index, x, y
