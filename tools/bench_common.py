"""What tools/bench_torch.py and tools/bench_jax.py share with tools/loom-bench, framework-free
(numpy and the standard library only, so that every peer's environment can import it): the model
zoo's names and shapes, the synthetic data (loom-bench's MakeData, bit for bit: compare
data_checksum), the process-memory measurement, the flags, the "did it train" verdict and the
JSON line with loom-bench's fields.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

SEED = 20240607
LR, MOMENTUM = 0.01, 0.9
BN_MOMENTUM, BN_EPS = 0.1, 1e-5  # loom's BatchNorm2d defaults, PyTorch's convention
MASK64 = (1 << 64) - 1

# name: (arch as loom-bench reports it, sample shape, classes, default batch)
ZOO = {
    "mlp": ("mlp-784-1024-1024-10", (784,), 10, 64),
    "cnn": ("small-cnn-3x32x32 (conv32-bn-relu-pool, conv64-bn-relu-pool, linear)", (3, 32, 32), 10, 32),
    "resnet18": ("resnet18-cifar-3x32x32", (3, 32, 32), 10, 16),
    "resnet50": ("resnet50-3x224x224", (3, 224, 224), 1000, 8),
    "gpt": (None, None, None, 8),  # its shape comes from the --gpt-* flags: model_spec
}
GPT_DEFAULTS = {"gpt_layers": 4, "gpt_dim": 256, "gpt_heads": 4, "context": 256, "vocab": 1024}


def model_spec(a):
    """(arch, sample shape, classes, default batch) of --model, as loom-bench names them; for gpt
    the sample is `context` tokens and the classes the vocabulary."""
    if a.model != "gpt":
        return ZOO[a.model]
    arch = f"gpt-L{a.gpt_layers}-d{a.gpt_dim}-h{a.gpt_heads}-T{a.context}-V{a.vocab}"
    return arch, (a.context,), a.vocab, ZOO["gpt"][3]

# ---------------------------------------------------------------- data (loom-bench's MakeData)


def mix64(z):
    """splitmix64's finaliser on uint64 numpy values (wrapping arithmetic)."""
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def unit(h):
    return (np.asarray(h >> np.uint64(40)).astype(np.float32) * np.float32(1.0 / 16777216.0)).astype(np.float32)


def make_data(sample, classes, batch, seed=SEED):
    """The pool of samples loom-bench cycles through: (x float32 (n, *sample), y int64 (n,))."""
    dim = int(np.prod(sample))
    pool = min(1024, max(64, (64 << 20) // (dim * 4)))
    n = 2 * batch if pool < classes else max(2 * batch, pool)  # loom-bench's MakeData says why
    p = np.arange(dim, dtype=np.uint64)
    if len(sample) == 3:  # images: one prototype bit per 4x4 block of a channel
        ch, h, w = sample
        pi = np.arange(dim, dtype=np.int64)
        c_, r, col = pi // (h * w), (pi // w) % h, pi % w
        key = ((c_ * ((h + 3) // 4) + r // 4) * ((w + 3) // 4) + col // 4).astype(np.uint64)
    else:
        key = p
    cache = {}

    def proto(c):
        if c not in cache:
            with np.errstate(over="ignore"):
                inner = mix64(np.uint64(c) * np.uint64(1000003) + key)
            cache[c] = unit(mix64(np.uint64(seed) ^ inner)) < np.float32(0.25)
        return cache[c]

    x = np.empty((n, dim), dtype=np.float32)
    y = np.empty(n, dtype=np.int64)
    with np.errstate(over="ignore"):
        for s in range(n):
            hs = mix64(np.uint64((seed + 0x100000000 * (s + 1)) & MASK64))
            c = int(mix64(hs ^ np.uint64(1)) % np.uint64(classes))
            other = int(mix64(hs ^ np.uint64(2)) % np.uint64(classes))
            mix = np.float32(0.45) * unit(mix64(hs ^ np.uint64(3)))
            a = np.where(proto(c), np.float32(1.0) - mix, np.float32(0.0)).astype(np.float32)
            b = np.where(proto(other), mix, np.float32(0.0)).astype(np.float32)
            noise = unit(mix64(hs + p + np.uint64(16))) - np.float32(0.5)
            x[s] = (a + b) + noise
            y[s] = c
    return x.reshape((n,) + tuple(sample)), y


def make_tokens(context, vocab, batch, seed=SEED):
    """loom-bench's MakeTokens: sequences of a first-order chain (each next token, with probability
    3/4, the current one's hashed successor, else uniform): (x int64 (n, context), y int64 (n,
    context)), y the next tokens."""
    n = max(2 * batch, 64)
    v = np.uint64(vocab)
    seq = np.empty((n, context + 1), dtype=np.uint64)
    with np.errstate(over="ignore"):
        hs = mix64(np.array([(seed + 0x100000000 * (s + 1)) & MASK64 for s in range(n)], dtype=np.uint64))
        seq[:, 0] = mix64(hs ^ np.uint64(1)) % v
        for i in range(1, context + 1):
            r = mix64(hs + np.uint64(i + 16))
            succ = mix64(np.uint64(seed) ^ (seq[:, i - 1] + np.uint64(0x5bd1e995))) % v
            seq[:, i] = np.where((r >> np.uint64(62)) != 0, succ, (r >> np.uint64(8)) % v)
    seq = seq.astype(np.int64)
    return seq[:, :-1], seq[:, 1:]


def batch_indices(step, batch, n):
    """Samples [step * batch, (step + 1) * batch) modulo n, as loom-bench's Data::Batch."""
    return [(step * batch + j) % n for j in range(batch)]


def fnv1a(data, h=1469598103934665603):
    for b in data:
        h = ((h ^ b) * 1099511628211) & MASK64
    return h


def data_checksum(x, y):
    """FNV-1a of the first sample's bytes and all labels (as int32), as loom-bench reports it:
    float32 samples, or int32 tokens."""
    first = x[0].astype(np.int32 if np.issubdtype(x.dtype, np.integer) else np.float32)
    return "%016x" % fnv1a(y.astype(np.int32).tobytes(), fnv1a(first.tobytes()))


# ---------------------------------------------------------------- process memory


def status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return 0


def reset_high_water_mark():
    """VmHWM := VmRSS now; False when the kernel refuses (VmHWM is then the whole process's)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


RSS_IS = "process VmHWM at the end minus VmRSS before the model was built"

# ---------------------------------------------------------------- flags and report


def percentile(v, q):  # nearest rank, as loom-bench
    v = sorted(v)
    return v[int(round(q * (len(v) - 1)))] if v else 0.0


def parser(doc):
    """The flags every bench_*.py shares with loom-bench (same names, same defaults)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mlp", choices=sorted(ZOO))
    ap.add_argument("--batch", type=int, default=0, help="default: the model's (mlp 64, cnn 32, resnet18 16, resnet50 8)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation happens there)")
    ap.add_argument("--threads", type=int, default=0, help="default: the core count")
    ap.add_argument("--json", action="store_true", help="one JSON line on stdout, the table on stderr")
    ap.add_argument("--lr", type=float, default=LR)
    ap.add_argument("--momentum", type=float, default=MOMENTUM)
    ap.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd",
                    help="sgd (momentum) or adam (default lr then 0.001), as loom-bench's")
    for k, v in GPT_DEFAULTS.items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v, help=f"--model gpt: default {v}")
    return ap


def check_flags(ap, a):
    if a.steps < 2 or a.warmup < 1 or a.batch < 0 or a.threads < 0:
        ap.error("--steps must be at least 2, --warmup at least 1, --batch and --threads not negative")
    if a.gpt_dim % a.gpt_heads:
        ap.error(f"--gpt-dim {a.gpt_dim} must be a multiple of --gpt-heads {a.gpt_heads}")
    if a.optimizer == "adam" and "--lr" not in sys.argv and not any(s.startswith("--lr=") for s in sys.argv):
        a.lr = 1e-3


def time_steps(tool, a, batch_of, run, before_timed=None):
    """a.warmup + a.steps training steps, each timed from copy-in to the loss on the host:
    batch_of(i) -> the host batch (untimed), run(batch) -> the loss as a float (a host read, so
    the step has finished, as loom-bench's Item()). Returns (timed ms, warm-up ms, losses), or None
    when the loss stopped being finite (printed)."""
    times, warm, losses = [], [], []
    for i in range(a.warmup + a.steps):
        batch = batch_of(i)
        if i == a.warmup and before_timed:
            before_timed()
        t0 = time.perf_counter()
        value = run(batch)
        ms = (time.perf_counter() - t0) * 1000.0
        (times if i >= a.warmup else warm).append(ms)
        if not np.isfinite(value):
            print(f"{tool}: error: the loss is {value} at step {i + 1}: training diverged", file=sys.stderr)
            return None
        losses.append(value)
    return times, warm, losses


def why_not_trained(losses, params_changed, steps_ok):
    """Reasons to refuse a run, as loom-bench's: [] when it trained."""
    why = []
    if losses[0] == losses[-1]:
        why.append(f"the loss did not change ({losses[0]} at step 1 and at step {len(losses)})")
    if not params_changed:
        why.append("the parameters did not change")
    if not steps_ok:
        why.append("the optimizer did not step every parameter")
    return why


def report(a, tool, mode, batch, times, losses, fields, version_line):
    """Prints the JSON line (stdout, with --json) and a one-row table (stderr with --json)."""
    arch = model_spec(a)[0]
    med, p10, p90 = percentile(times, 0.5), percentile(times, 0.1), percentile(times, 0.9)
    out = {
        "tool": tool, "model": a.model, "arch": arch, "batch": batch, "mode": mode, "device": a.device,
        "threads": a.threads, "steps": a.steps, "warmup": a.warmup,
        "ms_per_step_median": round(med, 4), "ms_per_step_p10": round(p10, 4), "ms_per_step_p90": round(p90, 4),
        "items_per_s": round(batch * 1000.0 / med, 2),
        "first_loss": round(losses[0], 6), "last_loss": round(losses[-1], 6), "loss_fell": losses[-1] < losses[0],
        "optimizer_steps": len(losses), "params_changed": True,
        "optimizer": (f"sgd lr {a.lr:g} momentum {a.momentum:g}" if a.optimizer == "sgd"
                      else f"adam lr {a.lr:g} betas 0.9,0.999 eps 1e-08"),
    }
    out.update(fields)
    if not losses[-1] < losses[0]:
        print(f"{tool}: warning: the loss rose ({losses[0]:.4f} -> {losses[-1]:.4f}): it trained but is not "
              "converging at this batch and learning rate", file=sys.stderr)
    if a.json:
        print(json.dumps(out), flush=True)
    table = sys.stderr if a.json else sys.stdout
    mib = lambda b: "-" if b is None else f"{b / 2**20:.2f}"
    print(f"\n### {version_line}: {arch}, batch {batch}, {a.device}\n", file=table)
    print("| mode | ms/step median | p10 | p90 | items/s | peak MiB | RSS growth MiB | loss first -> last |", file=table)
    print("|---|---:|---:|---:|---:|---:|---:|---|", file=table)
    print(f"| {mode} | {med:.3f} | {p10:.3f} | {p90:.3f} | {batch * 1000.0 / med:.1f} | {mib(out.get('peak_bytes'))} | "
          f"{mib(out.get('rss_peak_delta_bytes'))} | {losses[0]:.4f} -> {losses[-1]:.4f} |", file=table)
    if out.get("peak_bytes_is"):
        print(f"\npeak = {out['peak_bytes_is']}.", file=table)
    return out


def default_threads(threads):
    return threads or len(os.sched_getaffinity(0)) or os.cpu_count() or 1
