"""Shared by the Python examples: a progress bar, timing, and synthetic data sets with the shapes
of MNIST and CIFAR-10 (learnable, deterministic per seed, generated in numpy)."""
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
