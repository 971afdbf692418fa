"""Shared by the Python examples: a progress bar, timing, and synthetic data sets with the shapes
of MNIST and CIFAR-10 (learnable, deterministic per seed, generated in numpy)."""
import hashlib
import sys
import time

import numpy as np


class ProgressBar:
    """A one-line bar on a terminal (redrawn in place); plain lines every `every` steps when the
    output is a file or a pipe."""

    def __init__(self, total, width=30, stream=sys.stderr, every=10):
        self.total, self.width, self.stream, self.every = total, width, stream, every
        self.tty = stream.isatty()
        self.start = time.perf_counter()

    def update(self, done, **fields):
        info = "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in fields.items())
        if self.tty:
            filled = int(self.width * done / self.total)
            bar = "#" * filled + "." * (self.width - filled)
            self.stream.write(f"\r[{bar}] {done}/{self.total}  {info}  ")
            if done == self.total:
                self.stream.write(f"  {time.perf_counter() - self.start:.1f}s\n")
            self.stream.flush()
        elif done == 1 or done % self.every == 0 or done == self.total:
            self.stream.write(f"step {done}/{self.total}  {info}\n")
            self.stream.flush()


def median(values):
    v = sorted(values)
    return v[len(v) // 2] if v else float("nan")


def mnist_like(n, seed=1234, classes=10):
    """(n, 784) float32 in [0, 1] and (n,) int32 labels: 10 stroke prototypes (fixed), each
    sample (drawn with `seed`) a prototype blended with another class's and with noise."""
    proto_rng, rng = np.random.default_rng(4321), np.random.default_rng(seed)
    proto = np.zeros((classes, 784), np.float32)
    lit = proto_rng.random((classes, 784)) < 0.05
    for k in range(3):  # short horizontal strokes
        proto[:, k:] = np.maximum(proto[:, k:], lit[:, :784 - k])
    y = rng.integers(0, classes, n).astype(np.int32)
    other = rng.integers(0, classes, n)
    mix = (0.45 * rng.random(n)).astype(np.float32)[:, None]
    x = (1 - mix) * proto[y] + mix * proto[other] + rng.normal(0, 0.6, (n, 784)).astype(np.float32)
    return np.clip(x, 0, 1).astype(np.float32), y


def cifar_like(n, seed=1234, classes=10):
    """(n, 3, 32, 32) float32 and (n,) int32 labels: smooth random colour prototypes (fixed) plus
    noise (drawn with `seed`)."""
    proto_rng, rng = np.random.default_rng(4321), np.random.default_rng(seed)
    coarse = proto_rng.normal(0, 1, (classes, 3, 8, 8)).astype(np.float32)
    proto = coarse.repeat(4, axis=2).repeat(4, axis=3)
    y = rng.integers(0, classes, n).astype(np.int32)
    x = proto[y] + rng.normal(0, 1.0, (n, 3, 32, 32)).astype(np.float32)
    return x.astype(np.float32), y


class Ranks:
    """--dist in the Python examples, as in loom's programs (Note [--dist in the programs] in
    examples/common/dist.h): the optimizer wrapped in opt.DistOpt over MPI's world (the ranks of
    `python3 -m loom.launch -n N`), rank 0's parameters broadcast, --batch the global batch of
    which each rank trains its rows, losses averaged over ranks, rank 0 printing, and a check at
    the end that every rank holds bitwise the same parameters. Without --dist: one rank, nothing
    wrapped. shard (--shard): each rank keeps 1/N of the optimizer state (opt.DistOpt(shard=True))."""

    def __init__(self, optimizer, dist, dev, shard=False):
        from loom import opt
        if shard and not dist:
            raise SystemExit("--shard needs --dist (it shards the optimizer state over the ranks)")
        self.dev = dev
        self.optimizer = opt.DistOpt(optimizer, shard=shard) if dist else optimizer
        self.dist = dist
        self.rank = self.optimizer.global_rank if dist else 0
        self.world = self.optimizer.world_size if dist else 1

    @property
    def root(self):
        return self.rank == 0

    def print(self, *args, **kwargs):
        if self.root:
            print(*args, **kwargs, flush=True)

    def rows(self, global_batch):
        """This rank's slice of a global batch's rows."""
        if global_batch % self.world:
            raise SystemExit(f"--dist: the global batch {global_batch} does not divide into {self.world} ranks")
        n = global_batch // self.world
        return slice(self.rank * n, (self.rank + 1) * n)

    def broadcast(self, params):
        if self.dist:
            self.optimizer.broadcast_parameters(list(params))

    def _reduce(self, values, op):
        from loom import tensor
        t = tensor.from_numpy(np.asarray(values, dtype=np.float64), self.dev)
        self.optimizer.communicator.all_reduce(t, op)
        return t.to_numpy()

    def mean(self, value):
        """The mean over ranks of each rank's `value`."""
        return float(self._reduce([value], "sum")[0]) / self.world if self.dist else value

    def check_same_parameters(self, params):
        """Raises RuntimeError unless all ranks hold bitwise the same `params` (a hash of their
        bytes, 4 x 32 bits: their largest and smallest values over ranks agree)."""
        if not self.dist:
            return
        digest = hashlib.sha256(b"".join(np.ascontiguousarray(p.to_numpy()).tobytes() for p in params)).digest()
        parts = [float(int.from_bytes(digest[i:i + 4], "little")) for i in range(0, 16, 4)]
        hi = self._reduce(parts, "max")
        lo = -self._reduce([-v for v in parts], "max")
        if not np.array_equal(hi, lo):
            raise RuntimeError(f"--dist: the ranks' parameters differ after training (rank {self.rank})")
        self.print(f"parameters: bitwise the same on all {self.world} ranks")
