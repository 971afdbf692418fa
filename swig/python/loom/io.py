"""loom.io: checkpoints (named tensors and metadata in one file) and data sets (MNIST, CIFAR-10,
the DataLoader). Everything is C++ (src/io); every failure is a loom.IOError (an OSError) that
names the file and what is wrong, except a path or name with a NUL byte (loom.ValueError). Only
regular files are read (a FIFO is refused, never waited on); re-saving a file keeps its mode; the
file I/O runs without the interpreter lock, so other Python threads go on meanwhile.

    io.save_checkpoint("m.ckpt", model.get_states(), {"step": 100})   # atomic: never half a file
    ck = io.load_checkpoint("m.ckpt")           # ck.tensors (on the CPU), ck.meta, ck["w0"]
    io.restore_into(ck, model.get_states())     # all targets checked first, then copied

    data = io.load_mnist_dir("data/mnist")      # or load_mnist(images, labels), load_cifar10_dir
    loader = io.DataLoader(data, batch_size=64, mean=io.MNIST_MEAN, std=io.MNIST_STD, device=dev)
    for x, y in loader:                         # one epoch; iterate again for the next
        ...

    corpus = io.TextCorpus()                    # the text that tools/setup.sh made (default_text_dir())
    x, y = corpus.batch("train", 32, 128, seed, step, dev)   # int32 (32, 128); y is x shifted by one
    corpus.tokenizer.decode(corpus.tokenizer.encode("To be, or not to be"))

Model.save_states(path) / load_states(path) (loom.model) are built on these.
"""
import os

import numpy as np

from . import core, errors

_STATS = core.dataset_stats()
MNIST_MEAN, MNIST_STD = _STATS["mnist"]
CIFAR10_MEAN, CIFAR10_STD = _STATS["cifar10"]

OPTIMIZER_PREFIX = "optimizer/"


def _path(p, what="path"):
    """A str or os.PathLike as a str path; anything else is a loom.TypeError (os.fspath's own is
    Python's TypeError)."""
    if not isinstance(p, (str, os.PathLike)):
        raise errors.TypeError(f"[io] {what} must be a str or an os.PathLike, got {type(p).__name__} {p!r}"[:300])
    return os.fspath(p)


def _named(tensors):
    if tensors is None:
        return []
    if isinstance(tensors, dict):
        return list(tensors.items())
    if isinstance(tensors, (str, bytes)) or not hasattr(tensors, "__iter__"):
        raise errors.TypeError(f"[io] tensors must be a dict name -> Tensor or (name, Tensor) pairs, got "
                               f"{errors._show(tensors)}")
    return list(tensors)


# ---- checkpoints ----

class Checkpoint:
    """A loaded checkpoint: `tensors` (an ordered dict name -> CPU Tensor, in file order),
    `meta` (dict name -> float) and `path`."""

    def __init__(self, impl):
        self._impl = impl
        self.path = impl.path()
        self.tensors = dict(impl.tensors())
        self.meta = impl.meta()

    def __contains__(self, name):
        return name in self.tensors

    def __getitem__(self, name):
        return self._impl.get(name)  # loom.IOError naming the file when absent

    def keys(self):
        return self.tensors.keys()

    def __repr__(self):
        return f"Checkpoint({self.path!r}, {len(self.tensors)} tensors, meta={self.meta})"


def save_checkpoint(path, tensors, meta=None):
    """Writes `tensors` (a dict name -> Tensor, or (name, Tensor) pairs; any device) and `meta`
    (dict name -> float) to `path`, atomically."""
    core.save_checkpoint(_path(path), _named(tensors), dict(meta or {}))


def load_checkpoint(path):
    """Reads a checkpoint written by save_checkpoint; its tensors are on the CPU."""
    return Checkpoint(core.load_checkpoint(_path(path)))


def decode_checkpoint(data, source="<bytes>"):
    """The same from bytes in memory; `source` is named in errors."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise errors.TypeError(f"[decode_checkpoint] data must be bytes, got {errors._show(data)}")
    return Checkpoint(core.decode_checkpoint_bytes(data, str(source)))


def restore_into(ckpt, targets):
    """Copies the checkpoint's values into existing tensors (a dict name -> Tensor, or pairs). All
    must be present with the same shape and dtype, else one loom.IOError lists every mismatch and
    nothing is copied. `ckpt`: a Checkpoint or a path."""
    if not isinstance(ckpt, Checkpoint):
        ckpt = load_checkpoint(ckpt)
    core.restore_into(ckpt._impl, _named(targets))


def _opt_impl(optimizer):
    return getattr(optimizer, "_impl", optimizer)


def save_optimizer(path, optimizer):
    """An optimizer's state (momentum, moments, learning rate) alone in a file. Its state is
    keyed by the parameters' storage in this process: use Model.save_states to resume a model."""
    core.save_optimizer(_path(path), _opt_impl(optimizer))


def load_optimizer(path, optimizer, device):
    """Restores what save_optimizer wrote. Any other file (a model checkpoint: use
    Model.load_states) is a loom.IOError naming what it lacks, and the optimizer is unchanged."""
    core.load_optimizer(_path(path), _opt_impl(optimizer), device)


# ---- optimizer state by parameter name (what Model.save_states stores) ----

def _slot_key(param):
    return f"block{param._block_id()}"


def optimizer_state_by_name(optimizer, params, prefix=OPTIMIZER_PREFIX):
    """(tensors, meta) of `optimizer`'s state with each slot named after its parameter's name in
    `params` (dict name -> Tensor): "optimizer/fc1.weight/momentum". State of parameters not in
    `params` is an error (it could not be restored)."""
    tensors, meta = core.optimizer_state(_opt_impl(optimizer), "")
    by_block = {_slot_key(p): name for name, p in params.items()}
    out = []
    for key, t in tensors:
        owner, _, slot = key.rpartition("/")
        if owner in by_block:
            name = by_block[owner]
        elif owner.startswith("block"):
            raise core.IOError(f"[checkpoint] optimizer state '{key}' belongs to no parameter of the model")
        else:
            name = "@" + owner  # keyed by the name the caller gave the optimizer: kept as it is
        out.append((f"{prefix}{name}/{slot}", t))
    meta = {prefix + k: v for k, v in meta.items()}
    step_count = getattr(optimizer, "step_count", None)
    if step_count is not None:
        meta[prefix + "step_count"] = float(step_count)
    return out, meta


def _optimizer_entries(ckpt, params, prefix):
    """(tensors, meta, step_count) of what optimizer_state_by_name saved in `ckpt`, renamed to
    the storage keys of the parameters of the same names in `params`. Reads only."""
    keys = {name: _slot_key(p) for name, p in params.items()}
    tensors = []
    for key, t in ckpt.tensors.items():
        if not key.startswith(prefix):
            continue
        name, _, slot = key[len(prefix):].rpartition("/")
        if name.startswith("@"):
            tensors.append((f"{name[1:]}/{slot}", t))
            continue
        if name not in keys:
            raise core.IOError(f"[checkpoint] '{ckpt.path}': optimizer state '{key}' names no parameter of the model")
        tensors.append((f"{keys[name]}/{slot}", t))
    meta = {k[len(prefix):]: v for k, v in ckpt.meta.items() if k.startswith(prefix)}
    step_count = meta.pop("step_count", None)
    return tensors, meta, step_count


class _OptimizerRestore:
    """A restore of optimizer_state_by_name's state, checked when made (every mismatch raises
    one loom.IOError and nothing changes) and applied by apply(): Note [Check everything, then
    copy] in src/io/checkpoint.h."""

    def __init__(self, ckpt, optimizer, params, device, prefix=OPTIMIZER_PREFIX):
        self._optimizer, self._device, self._path = optimizer, device, ckpt.path
        self._tensors, self._meta, self._step_count = _optimizer_entries(ckpt, params, prefix)
        core.check_optimizer_state_from(_opt_impl(optimizer), self._tensors, self._meta, "", ckpt.path)

    def apply(self):
        core.restore_optimizer_state_from(_opt_impl(self._optimizer), self._tensors, self._meta, self._device, "",
                                          self._path)
        if self._step_count is not None and hasattr(self._optimizer, "step_count"):
            self._optimizer.step_count = int(self._step_count)


def restore_optimizer_by_name(ckpt, optimizer, params, device, prefix=OPTIMIZER_PREFIX):
    """Restores what optimizer_state_by_name saved into `optimizer`, keyed by the storage of the
    parameters of the same names in `params`: all checked first, then copied."""
    _OptimizerRestore(ckpt, optimizer, params, device, prefix).apply()


# ---- data sets ----

class ImageData:
    """Images and labels in host memory: n, channels, height, width; images() as a uint8 array
    (n, channels, height, width), labels() as int32 (n)."""

    def __init__(self, impl):
        self._impl = impl

    n = property(lambda self: self._impl.n)
    channels = property(lambda self: self._impl.channels)
    height = property(lambda self: self._impl.height)
    width = property(lambda self: self._impl.width)

    def __len__(self):
        return self._impl.n

    def images(self):
        i = self._impl
        return np.frombuffer(i.images_bytes(), np.uint8).reshape(i.n, i.channels, i.height, i.width)

    def labels(self):
        return np.frombuffer(self._impl.labels_bytes(), np.int32)

    def __repr__(self):
        return f"ImageData(n={self.n}, channels={self.channels}, height={self.height}, width={self.width})"


def load_mnist(images_path, labels_path):
    """MNIST idx files (raw or gzip)."""
    return ImageData(core.load_mnist(_path(images_path), _path(labels_path)))


def load_mnist_dir(directory, train=True):
    """train-images-idx3-ubyte / train-labels-idx1-ubyte (t10k-* when not train), raw or .gz."""
    return ImageData(core.load_mnist_dir(_path(directory), bool(train)))


def load_cifar10(batch_files):
    """CIFAR-10 binary batch files."""
    if isinstance(batch_files, (str, os.PathLike)):
        batch_files = [batch_files]
    if not hasattr(batch_files, "__iter__"):
        raise errors.TypeError(f"[io] load_cifar10 takes a path or a list of them, got {type(batch_files).__name__}")
    return ImageData(core.load_cifar10([_path(f, "a batch file") for f in batch_files]))


def load_cifar10_dir(directory, train=True):
    """data_batch_1.bin ... data_batch_5.bin (test_batch.bin when not train)."""
    return ImageData(core.load_cifar10_dir(_path(directory), bool(train)))


class DataLoader:
    """Shuffled, normalised batches (x float32 (N, C, H, W) or (N, C*H*W) with flat; y int32)
    on `device`, prepared ahead by a background thread. x = (pixel / 255 - mean[c]) / std[c].

    Iterating yields (x, y) for one epoch; iterate again for the next. next() gives
    (x, y, epoch, index) or None at the end of an epoch; next_into(x, y) writes into existing
    tensors (a captured graph's inputs; use drop_last so every batch has the same shape).

    shard=(rank, world): data-parallel rank `rank` of `world` reads every world-th sample of each
    epoch's order from its rank on, the same count on every rank (the tail is dropped); give
    every rank the same seed (opt.DistOpt's global_rank and world_size are the pair).

    Augmentation on the background thread: crop_padding=P keeps a random window of the image
    padded by P zero pixels, hflip=True mirrors half the images; both drawn from (augment_seed,
    epoch, sample) only. position() is (epoch, index) of the next batch; seek(epoch, index) moves
    there (loom.trainer resumes a run so)."""

    def __init__(self, data, batch_size=64, shuffle=True, seed=0, drop_last=False, flat=False, mean=None,
                 std=None, prefetch=2, device=None, shard=(0, 1), crop_padding=0, hflip=False, augment_seed=0):
        impl = data._impl if isinstance(data, ImageData) else data
        self.data = data
        try:
            rank, world = (errors._whole("DataLoader", "shard", v) for v in shard)
        except (TypeError, ValueError):  # loom's are both too
            raise errors.ValueError(f"[DataLoader] shard must be (rank, world), got {shard!r}") from None
        w = errors._whole
        self._impl = core.DataLoader(impl, w("DataLoader", "batch_size", batch_size), bool(shuffle),
                                     w("DataLoader", "seed", seed), bool(drop_last), bool(flat),
                                     [errors._real("DataLoader", "mean", m) for m in (mean or [])],
                                     [errors._real("DataLoader", "std", v) for v in (std or [])],
                                     w("DataLoader", "prefetch", prefetch), device, rank, world,
                                     w("DataLoader", "crop_padding", crop_padding), bool(hflip),
                                     w("DataLoader", "augment_seed", augment_seed))

    def position(self):
        return self._impl.position()

    def seek(self, epoch, index):
        self._impl.seek(int(epoch), int(index))

    def next(self):
        return self._impl.next_batch()

    def next_into(self, x, y):
        """True with x, y holding the next batch; False at the end of an epoch."""
        return self._impl.next_into(x, y)

    def __iter__(self):
        while True:
            b = self._impl.next_batch()
            if b is None:
                return
            yield b[0], b[1]

    def __len__(self):
        return self._impl.batches_per_epoch()

    @property
    def batches_per_epoch(self):
        return self._impl.batches_per_epoch()

    @property
    def size(self):
        return self._impl.size()

    def x_shape(self, batch):
        return tuple(self._impl.x_shape(int(batch)))


# ---- text (src/io/text.h) ----

_SPLITS = {"train": core.TextSplit_kTrain, "valid": core.TextSplit_kValid}


def _split(split):
    try:
        return _SPLITS[split]
    except (KeyError, TypeError):
        raise errors.ValueError(f"[text] split must be 'train' or 'valid', got {split!r}") from None


def default_data_dir():
    """Where tools/setup.sh puts data sets: $LOOM_DATA_DIR, else the data/ folder of the checkout
    that holds loom's library (loom.IOError outside a checkout: set LOOM_DATA_DIR)."""
    return core.default_data_dir()


def default_text_dir():
    """default_data_dir() + "/text": the text corpus."""
    return core.default_text_dir()


class Tokenizer:
    """Byte-level BPE (Note [Byte-level BPE] in src/io/tokenizer.h), as tools/text.py trained it.
    encode(text) takes str (as UTF-8) or bytes and gives a list of ids; decode_bytes(ids) gives the
    bytes back exactly; decode(ids) the str (an invalid UTF-8 sequence, such as a token cut from
    a character, becomes U+FFFD). An id out of range is a loom.ValueError."""

    def __init__(self, merges_path=None, *, _impl=None):
        self._impl = _impl if _impl is not None else core.Tokenizer.load(_path(merges_path))

    @property
    def vocab_size(self):
        return self._impl.vocab_size()

    def encode(self, text):
        return self._impl.encode(text)

    def decode_bytes(self, ids):
        return self._impl.decode_bytes(ids)

    def decode(self, ids):
        return self._impl.decode_bytes(ids).decode("utf-8", errors="replace")

    def token_bytes(self, token_id):
        return self._impl.token_bytes(int(token_id))

    def __repr__(self):
        return f"Tokenizer(vocab_size={self.vocab_size})"


class TextCorpus:
    """The tokenizer and the ids of the "train" and "valid" splits of a corpus folder (default:
    default_text_dir()), checked whole when loaded (Note [Text corpus] in src/io/text.h).

    batch(split, batch, context, seed, step, device): (inputs, targets), int32 (batch, context),
    targets shifted by one token; the windows depend on (seed, step) alone. eval_batch(split,
    first, batch, context, device): windows first.. of the split cut at every context tokens, of
    which there are num_windows(split, context); eval_bytes(split, context) is the bits-per-byte
    divisor of a whole pass. unigram_bits_per_byte(): the baseline a model must beat."""

    def __init__(self, directory=None):
        directory = default_text_dir() if directory is None else _path(directory)
        self._impl = core.TextCorpus.load(directory)
        self.dir = directory
        self.tokenizer = Tokenizer(_impl=self._impl.tokenizer_copy())

    def num_tokens(self, split):
        return self._impl.num_tokens(_split(split))

    def num_bytes(self, split):
        return self._impl.num_bytes(_split(split))

    def tokens(self, split):
        """The split's ids, an int32 numpy array (a copy)."""
        return np.frombuffer(self._impl.tokens_bytes(_split(split)), np.int32)

    def batch(self, split, batch, context, seed, step, device):
        return self._impl.batch(_split(split), int(batch), int(context), int(seed), int(step), device)

    def batch_positions(self, split, batch, context, seed, step):
        return self._impl.batch_positions(_split(split), int(batch), int(context), int(seed), int(step))

    def num_windows(self, split, context):
        return self._impl.num_windows(_split(split), int(context))

    def eval_batch(self, split, first, batch, context, device):
        return self._impl.eval_batch(_split(split), int(first), int(batch), int(context), device)

    def eval_bytes(self, split, context):
        return self._impl.eval_bytes(_split(split), int(context))

    def unigram_bits_per_byte(self):
        return self._impl.unigram_bits_per_byte()

    def __repr__(self):
        return (f"TextCorpus({self.dir!r}, vocab_size={self.tokenizer.vocab_size}, "
                f"train={self.num_tokens('train')} tokens, valid={self.num_tokens('valid')} tokens)")
