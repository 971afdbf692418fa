"""loom.data: your own data for training. A dataset is any object with __len__ and
__getitem__(i) -> (x, y); ArrayDataset holds numpy arrays; DataLoader batches a dataset, shuffles
it by seed, resumes where a checkpoint left it and gives loom tensors on the model's device.
loom.trainer.Trainer takes it as it takes loom.io.DataLoader (checkpoints, resume, evaluation).

    from loom import data, trainer
    train = data.DataLoader(data.ArrayDataset(x, y), batch_size=32, seed=1, drop_last=True)
    held_out = data.DataLoader(data.ArrayDataset(x_test, y_test), batch_size=256, shuffle=False)
    trainer.Trainer(model, train, held_out, epochs=10, checkpoint_dir="runs/a", resume=True).fit()

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

The order of epoch e is a function of (seed, e) only: C++'s io::EpochOrder, the order in which
io::DataLoader reads an io::ArrayDataset. A Trainer checkpoint saves the loader's position
(epoch, batch) and seed; resuming seeks there, so the run goes on with the batches an
uninterrupted run would have read. Items are read when their batch is (ArrayDataset: one numpy
gather per batch), on the calling thread.
"""
import sys

import numpy as np

from . import core, errors
from . import tensor as _tensor

__all__ = ["Dataset", "ArrayDataset", "DataLoader"]

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


def _check_values(x, y, name, indices):
    """Finite x (and float targets), labels in [0, 2**31): ValueError naming the sample."""
    for what, arr in (("x", x), ("y", y)):
        if arr.dtype.kind == "f":
            bad = ~np.isfinite(arr.reshape(len(arr), -1)).all(axis=1)
            if bad.any():
                i = int(np.argmax(bad))
                raise errors.ValueError(f"[data] dataset '{name}': sample {int(indices[i])}: {what} holds a value "
                                        "that is not finite (NaN or infinite)")
    if y.dtype.kind in "iu" and len(y):
        lo, hi = int(y.min()), int(y.max())
        if lo < 0 or hi > _INT32_MAX:
            i = int(np.argmax((y < 0) | (y > _INT32_MAX)))
            raise errors.ValueError(f"[data] dataset '{name}': sample {int(indices[i])}: label {int(y[i])} is outside "
                                    f"[0, {_INT32_MAX}] (class labels count from 0)")


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
        _check_values(x, y, self.name, np.arange(len(x)))
        with np.errstate(over="ignore"):
            self.x = np.ascontiguousarray(x, np.float32)
        _check_values(self.x, y, self.name, np.arange(len(x)))  # float64 beyond float32's range
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


class DataLoader:
    """Batches of `dataset` (see the module's docstring): (x float32 (N, ...), y int32 (N) or
    float32 (N, ...)) as loom tensors on `device` (None: the model's, when a Trainer uses the
    loader; the default device otherwise).

    batch_size, drop_last   the last, smaller batch of an epoch is dropped with drop_last (a graph-
                            mode model trains on batches of one shape)
    shuffle, seed           the order of epoch e is a function of (seed, e) only
    shard=(rank, world)     data-parallel rank `rank` of `world` reads every world-th sample of
                            each epoch's order from its rank on, the same count on every rank

    Iterating yields (x, y) for one epoch; iterate again for the next. next() gives
    (x, y, epoch, index), or None at the end of an epoch (the call after starts the next one).
    position() is (epoch, index) of the next batch; seek(epoch, index) moves there."""

    def __init__(self, dataset, batch_size=64, shuffle=True, seed=0, drop_last=False, device=None, shard=(0, 1)):
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise errors.TypeError(f"[data] a dataset needs __len__ and __getitem__, got {type(dataset).__name__} "
                                   "(numpy arrays: loom.data.ArrayDataset(x, y))")
        self.dataset, self.name = dataset, _name_of(dataset)
        n = len(dataset)
        if n < 1:
            raise errors.ValueError(f"[data] dataset '{self.name}' is empty: len() is {n}")
        try:
            rank, world = (errors._whole("data", "shard", v) for v in shard)
        except (TypeError, ValueError):  # loom's are both too
            raise errors.ValueError(f"[data] shard must be (rank, world), got {shard!r}") from None
        if errors._whole("data", "batch_size", batch_size) < 1:
            raise errors.ValueError(f"[data] batch_size {batch_size} must be positive")
        if not 0 <= errors._whole("data", "seed", seed) < 2 ** 64:
            raise errors.ValueError(f"[data] seed {seed} must lie in [0, 2**64)")
        if world < 1 or not 0 <= rank < world or n < world:
            raise errors.ValueError(f"[data] shard ({rank}, {world}) of {n} samples: the rank must lie in [0, world) "
                                    "and every rank have a sample")
        self.size, self.batch_size, self.shuffle, self.seed = n, int(batch_size), bool(shuffle), int(seed)
        self.drop_last, self.shard, self.device = bool(drop_last), (rank, world), device
        self.samples_per_epoch = n // world
        if self.drop_last and self.batch_size > self.samples_per_epoch:
            raise errors.ValueError(f"[data] batch_size {self.batch_size} with drop_last: an epoch of "
                                    f"{self.samples_per_epoch} samples would have no batch")
        self._order_epoch, self._order = -1, None
        self._epoch, self._index = 0, 0
        # An ArrayDataset was checked whole when made; any other dataset is checked item by item
        # against item 0.
        self._spec = None if isinstance(dataset, ArrayDataset) else self._item_spec(0, self._item(0))

    # ---- where it stands ----
    @property
    def batches_per_epoch(self):
        n, b = self.samples_per_epoch, self.batch_size
        return n // b + (0 if self.drop_last or n % b == 0 else 1)

    def __len__(self):
        return self.batches_per_epoch

    def position(self):
        return self._epoch, self._index

    def seek(self, epoch, index):
        epoch, index = int(epoch), int(index)
        if epoch < 0 or not 0 <= index <= self.batches_per_epoch:
            raise errors.ValueError(f"[data] cannot seek to batch {index} of epoch {epoch}: an epoch has batches 0 to "
                                    f"{self.batches_per_epoch - 1} (and {self.batches_per_epoch} for its end)")
        self._epoch, self._index = epoch, index

    def x_shape(self, batch):
        """The shape of x in a batch of `batch` samples."""
        sample = self.dataset.x.shape[1:] if self._spec is None else self._spec[0]
        return (int(batch),) + tuple(sample)

    def _facts(self):
        """What a Trainer's run state records of this loader (nn::LoaderFacts)."""
        f = core.LoaderFacts()
        f.epoch, f.index = self._epoch, self._index
        f.batch_size, f.batches_per_epoch = self.batch_size, self.batches_per_epoch
        f.seed, f.augment_seed = self.seed, 0
        return f

    # ---- batches ----
    def next(self):
        epoch, index = self._epoch, self._index
        if index >= self.batches_per_epoch:
            self._epoch, self._index = epoch + 1, 0
            return None
        if self._order_epoch != epoch:
            rank, world = self.shard
            raw = core.epoch_order(self.size, self.shuffle, self.seed, epoch, rank, world)
            self._order, self._order_epoch = np.frombuffer(raw, np.int64), epoch
        indices = self._order[index * self.batch_size:(index + 1) * self.batch_size]
        if self._spec is None:
            x, y = self.dataset._gather(indices)
        else:
            x, y = self._read(indices)
        self._index = index + 1
        dev = self.device
        return _tensor.from_numpy(x, dev), _tensor.from_numpy(y, dev), epoch, index

    def __iter__(self):
        while True:
            b = self.next()
            if b is None:
                return
            yield b[0], b[1]

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
        _check_values(x, y, self.name, indices)
        with np.errstate(over="ignore"):
            x = np.ascontiguousarray(x, np.float32)
        _check_values(x, y, self.name, indices)
        return x, np.ascontiguousarray(y, np.int32 if self._spec[2] == "label" else np.float32)
