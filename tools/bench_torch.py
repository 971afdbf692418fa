#!/usr/bin/python3
"""PyTorch reference for tools/loom-bench: the same models, batch sizes, optimizer and data.

    /usr/bin/python3 tools/bench_torch.py --model mlp|cnn|resnet18|resnet50 [--batch N]
        [--device cpu|cuda] [--steps N] [--warmup N] [--threads N] [--json]

Trains a fresh model (SGD lr 0.01, momentum 0.9, softmax cross-entropy) on the synthetic data of
loom-bench (the same counter-based recipe, bit for bit: compare data_checksum) and prints one JSON
line with loom-bench's fields (mode "torch-eager") and a one-row Markdown table.

Memory: on the CPU, peak_bytes is the process's resident-set growth (VmHWM at the end minus
VmRSS before the model was built, the high-water mark being reset through /proc/self/clear_refs),
the same measurement as loom-bench's rss_peak_delta_bytes; PyTorch's CPU allocator keeps no
statistics. On CUDA, peak_bytes is torch.cuda.max_memory_allocated() over the timed steps, like
loom-bench's allocator peak.

Like loom-bench it refuses to report a run that did not train (the loss or the parameters did
not change, or the optimizer's step count did not advance): exit 3.
Debian's python3-torch (1.13) on the CPU; a GPU machine brings its own PyTorch.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 20240607
LR, MOMENTUM = 0.01, 0.9
MASK64 = (1 << 64) - 1

# ---------------------------------------------------------------- models (loom's src/nn/models.cc)


def mlp():
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def small_cnn():
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 10))


def conv_bn(cin, cout, k, stride, pad):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, pad, bias=False), nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):  # ResNet v1.5: the stride in the first 3x3
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a = conv_bn(cin, cout, 3, stride, 1)
        self.b = conv_bn(cout, cout, 3, 1, 1)
        self.down = conv_bn(cin, cout, 1, stride, 0) if stride != 1 or cin != cout else None

    def forward(self, x):
        h = self.b(F.relu(self.a(x)))
        return F.relu(h + (self.down(x) if self.down is not None else x))


class Bottleneck(nn.Module):  # ResNet v1.5 (torchvision): the stride in the 3x3
    def __init__(self, cin, mid, stride):
        super().__init__()
        cout = mid * 4
        self.a = conv_bn(cin, mid, 1, 1, 0)
        self.b = conv_bn(mid, mid, 3, stride, 1)
        self.c = conv_bn(mid, cout, 1, 1, 0)
        self.down = conv_bn(cin, cout, 1, stride, 0) if stride != 1 or cin != cout else None

    def forward(self, x):
        h = self.c(F.relu(self.b(F.relu(self.a(x)))))
        return F.relu(h + (self.down(x) if self.down is not None else x))


class ResNet(nn.Module):
    def __init__(self, bottleneck, blocks, classes, cifar_stem):
        super().__init__()
        if cifar_stem:  # 3x3 conv, stride 1, no max-pool
            self.stem = nn.Sequential(conv_bn(3, 64, 3, 1, 1), nn.ReLU())
        else:
            self.stem = nn.Sequential(conv_bn(3, 64, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for stage, (n, width) in enumerate(zip(blocks, (64, 128, 256, 512))):
            for b in range(n):
                stride = 2 if b == 0 and stage > 0 else 1
                if bottleneck:
                    layers.append(Bottleneck(cin, width, stride))
                    cin = width * 4
                else:
                    layers.append(BasicBlock(cin, width, stride))
                    cin = width
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        h = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


def loom_init(model):
    """Initialise like loom's layers (src/nn/layer.cc): weights N(0, 2 / fan_in) (Kaiming normal),
    biases 0, BatchNorm gamma 1 and beta 0, so both sides train the same model from the same
    distribution (PyTorch's default Kaiming-uniform with a = sqrt(5) starts with smaller weights)."""
    for mod in model.modules():
        if isinstance(mod, (nn.Linear, nn.Conv2d)):
            fan_in = mod.weight[0].numel()
            nn.init.normal_(mod.weight, 0.0, (2.0 / fan_in) ** 0.5)
            if mod.bias is not None:
                nn.init.zeros_(mod.bias)
        elif isinstance(mod, nn.BatchNorm2d):
            nn.init.ones_(mod.weight)
            nn.init.zeros_(mod.bias)
    return model


ZOO = {  # name: (arch, sample shape, classes, default batch, constructor)
    "mlp": ("mlp-784-1024-1024-10", (784,), 10, 64, mlp),
    "cnn": ("small-cnn-3x32x32 (conv32-bn-relu-pool, conv64-bn-relu-pool, linear)", (3, 32, 32), 10, 32, small_cnn),
    "resnet18": ("resnet18-cifar-3x32x32", (3, 32, 32), 10, 16, lambda: ResNet(False, (2, 2, 2, 2), 10, True)),
    "resnet50": ("resnet50-3x224x224", (3, 224, 224), 1000, 8, lambda: ResNet(True, (3, 4, 6, 3), 1000, False)),
}

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
    dim = int(np.prod(sample))
    budget = max(64, (64 << 20) // (dim * 4))
    n = max(2 * batch, min(1024, budget))
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


def fnv1a(data, h=1469598103934665603):
    for b in data:
        h = ((h ^ b) * 1099511628211) & MASK64
    return h


def data_checksum(x, y):
    """FNV-1a of the first sample's bytes and all labels (as int32), as loom-bench reports it."""
    return "%016x" % fnv1a(y.astype(np.int32).tobytes(), fnv1a(x[0].astype(np.float32).tobytes()))


# ---------------------------------------------------------------- process memory


def status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return 0


def reset_high_water_mark():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def blas_in_use():
    """The BLAS library mapped into this process (Debian's torch uses libblas.so.3 alternatives)."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if any(k in path for k in ("blas", "mkl", "dnnl")):
                libs.add(os.path.realpath(path))
    cfg = torch.__config__.show()
    return {"openblas": any("openblas" in l for l in libs) or "OpenBLAS" in cfg,
            "libraries": sorted(libs),
            "mkldnn": torch.backends.mkldnn.is_available()}


# ---------------------------------------------------------------- the run


def percentile(v, q):  # nearest rank, as loom-bench
    v = sorted(v)
    return v[int(round(q * (len(v) - 1)))] if v else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mlp", choices=sorted(ZOO))
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="default: the core count")
    ap.add_argument("--json", action="store_true", help="one JSON line on stdout, the table on stderr")
    ap.add_argument("--torch-init", action="store_true",
                    help="keep PyTorch's default initialisation (default: loom's, Kaiming normal)")
    ap.add_argument("--lr", type=float, default=LR)
    ap.add_argument("--momentum", type=float, default=MOMENTUM)
    a = ap.parse_args()
    if a.steps < 2 or a.warmup < 1 or a.batch < 0:
        ap.error("--steps must be at least 2, --warmup at least 1, --batch positive")
    threads = a.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("bench_torch: --device cuda: PyTorch sees no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device(a.device)
    arch, sample, classes, default_batch, make = ZOO[a.model]
    batch = a.batch or default_batch
    blas = blas_in_use()
    print(f"bench_torch: torch {torch.__version__}, {arch}, batch {batch}, {a.device}, {threads} threads, "
          f"BLAS {', '.join(blas['libraries']) or 'unknown'} (OpenBLAS: {blas['openblas']}), "
          f"{a.warmup} warm-up + {a.steps} timed steps", file=sys.stderr)

    xs, ys = make_data(sample, classes, batch)
    checksum = data_checksum(xs, ys)
    n = xs.shape[0]

    def host_batch(step):
        idx = [(step * batch + j) % n for j in range(batch)]
        return torch.from_numpy(xs[idx]), torch.from_numpy(ys[idx])

    exact = reset_high_water_mark()
    rss0_kb = status_kb("VmRSS:")
    torch.manual_seed(SEED)
    model = make()
    if not a.torch_init:
        loom_init(model)
    model = model.to(dev)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    x = torch.empty((batch,) + tuple(sample), dtype=torch.float32, device=dev)
    y = torch.empty((batch,), dtype=torch.int64, device=dev)
    before = [p.detach().clone() for p in model.parameters()]

    times, losses = [], []
    total = a.warmup + a.steps
    for step in range(total):
        bx, by = host_batch(step)
        if step == a.warmup and dev.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        x.copy_(bx)
        y.copy_(by)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        value = loss.item()  # a host read: synchronises, as loom-bench's Item()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        if step >= a.warmup:
            times.append((t1 - t0) * 1000.0)
        if not np.isfinite(value):
            print(f"bench_torch: error: the loss is {value} at step {step + 1}: training diverged", file=sys.stderr)
            return 3
        losses.append(value)

    hwm_kb = status_kb("VmHWM:")
    rss_delta = max(0, hwm_kb - rss0_kb) * 1024
    state = x.nelement() * x.element_size() + y.nelement() * 4  # labels count as int32, like loom
    state += sum(p.nelement() * p.element_size() for p in model.parameters())
    state += sum(b.nelement() * b.element_size() for b in model.buffers() if b.dtype.is_floating_point)
    for st in opt.state.values():
        state += sum(t.nelement() * t.element_size() for t in st.values() if torch.is_tensor(t))
    param_bytes = sum(p.nelement() * p.element_size() for p in model.parameters())

    # Did it train? The optimizer's step count is its momentum buffers' existence plus our count of
    # opt.step() calls; PyTorch's SGD keeps no counter, so check the buffers and the parameters.
    why = []
    if losses[0] == losses[-1]:
        why.append(f"the loss did not change ({losses[0]} at step 1 and at step {total})")
    if all(torch.equal(b, p.detach()) for b, p in zip(before, model.parameters())):
        why.append("the parameters did not change")
    if len(opt.state) != len(before) or any(st.get("momentum_buffer") is None for st in opt.state.values()):
        why.append("the optimizer did not step every parameter")
    if why:
        print("bench_torch: error: " + "; ".join(why) + ": refusing to report this run", file=sys.stderr)
        return 3

    if not losses[-1] < losses[0]:
        print(f"bench_torch: warning: the loss rose ({losses[0]:.4f} -> {losses[-1]:.4f}): it trained but is not "
              "converging at this batch and learning rate", file=sys.stderr)
    med, p10, p90 = percentile(times, 0.5), percentile(times, 0.1), percentile(times, 0.9)
    if dev.type == "cuda":
        peak, peak_is = torch.cuda.max_memory_allocated(), "torch.cuda.max_memory_allocated over the timed steps"
    else:
        peak, peak_is = rss_delta, "process VmHWM at the end minus VmRSS before the model was built (CPU: no allocator stats)"
    out = {
        "tool": "bench_torch", "model": a.model, "arch": arch, "batch": batch, "mode": "torch-eager",
        "device": a.device, "threads": threads, "steps": a.steps, "warmup": a.warmup,
        "ms_per_step_median": round(med, 4), "ms_per_step_p10": round(p10, 4), "ms_per_step_p90": round(p90, 4),
        "items_per_s": round(batch * 1000.0 / med, 2),
        "peak_bytes": peak, "state_bytes": state, "working_peak_bytes": max(0, peak - state) if dev.type == "cuda" else None,
        "rss_peak_delta_bytes": rss_delta, "rss_peak_delta_exact": exact,
        "arena_bytes": None, "lower_bound_bytes": None,
        "first_loss": round(losses[0], 6), "last_loss": round(losses[-1], 6),
        "loss_fell": losses[-1] < losses[0], "optimizer_steps": total,
        "params_changed": True, "param_bytes": param_bytes, "param_traffic_bytes_per_step": 8 * param_bytes,
        "optimizer": f"sgd lr {a.lr:g} momentum {a.momentum:g}", "init": "torch default" if a.torch_init else "loom (kaiming normal)", "torch": torch.__version__, "blas": blas["libraries"],
        "blas_is_openblas": blas["openblas"], "mkldnn": blas["mkldnn"], "data_checksum": checksum,
        "peak_bytes_is": peak_is,
        "rss_peak_delta_is": "process VmHWM at the end minus VmRSS before the model was built",
    }
    if a.json:
        print(json.dumps(out), flush=True)
    table = sys.stderr if a.json else sys.stdout
    print(f"\n### PyTorch {torch.__version__}: {arch}, batch {batch}, {a.device}\n", file=table)
    print("| mode | ms/step median | p10 | p90 | items/s | peak MiB | RSS growth MiB | loss first -> last |", file=table)
    print("|---|---:|---:|---:|---:|---:|---:|---|", file=table)
    print(f"| torch-eager | {med:.3f} | {p10:.3f} | {p90:.3f} | {batch * 1000.0 / med:.1f} | {peak / 2**20:.2f} | "
          f"{rss_delta / 2**20:.2f} | {losses[0]:.4f} -> {losses[-1]:.4f} |", file=table)
    print(f"\npeak = {peak_is}.", file=table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
