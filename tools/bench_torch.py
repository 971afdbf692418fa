#!/usr/bin/python3
"""PyTorch reference for tools/loom-bench: the same models, batch sizes, optimizer and data.

    python3 tools/bench_torch.py --model mlp|cnn|resnet18|resnet50 [--batch N] [--device cpu|cuda]
        [--steps N] [--warmup N] [--threads N] [--lr X] [--momentum X] [--json]
        [--compile [--compile-mode M]]

Trains a fresh model (SGD lr 0.01, momentum 0.9, softmax cross-entropy) on the synthetic data of
loom-bench (the same counter-based recipe, bit for bit: compare data_checksum) and prints one JSON
line with loom-bench's fields (mode "torch-eager", or "torch-compile") and a one-row table.

Runs under any PyTorch from 1.13 (Debian's python3-torch, /usr/bin/python3) to 2.x (the
environment tools/compare.sh installs). --compile needs 2.x: torch.compile of the whole training
step, Note [Compiling the whole step].

Memory: on the CPU, peak_bytes is the process's resident-set growth (VmHWM at the end minus
VmRSS before the model was built, the high-water mark being reset through /proc/self/clear_refs),
the same measurement as loom-bench's rss_peak_delta_bytes; PyTorch's CPU allocator keeps no
statistics. On CUDA, peak_bytes is torch.cuda.max_memory_allocated() over the timed steps, like
loom-bench's allocator peak.

Like loom-bench it refuses to report a run that did not train (the loss or the parameters did
not change, or the optimizer did not step every parameter): exit 3.
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common as bc  # noqa: E402

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


class Block(nn.Module):
    """loom's TransformerBlock (src/nn/transformer.h): pre-norm, fused qkv, causal attention
    (PyTorch 2's scaled_dot_product_attention where it exists: its flash/memory-efficient
    kernels), GELU (tanh form), an MLP of 4 dim."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def attend(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # PyTorch 1.13
            s = (q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5
            s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            y = torch.softmax(s, -1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + self.attend(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    """loom's Gpt: token and learned position embeddings, blocks, a final LayerNorm, logits
    through the token embedding (tied), (B * T, vocab) out."""

    def __init__(self, vocab, context, layers, dim, heads):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Parameter(torch.zeros(context, dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.layers = layers

    def forward(self, tokens):
        h = self.wte(tokens) + self.wpe[:tokens.shape[1]]
        for blk in self.blocks:
            h = blk(h)
        return self.ln_f(h).reshape(-1, h.shape[-1]) @ self.wte.weight.T


def gpt_init(model):
    """GPT-2's initialisation, as loom's (src/nn/transformer.cc): normal(0, 0.02), the projections
    that end a residual branch 0.02 / sqrt(2 layers), positions normal(0, 0.01), biases zero."""
    for name, p in model.named_parameters():
        if name == "wpe":
            nn.init.normal_(p, 0.0, 0.01)
        elif p.dim() == 2:
            std = 0.02 / (2 * model.layers) ** 0.5 if name.endswith(("proj.weight", "fc2.weight")) else 0.02
            nn.init.normal_(p, 0.0, std)
        elif name.endswith("bias"):
            nn.init.zeros_(p)
    return model


def loom_init(model):
    """Initialise like loom's layers (src/nn/layer.cc): weights N(0, 2 / fan_in) (Kaiming normal),
    biases 0, BatchNorm gamma 1 and beta 0, so both sides train the same model from the same
    distribution (PyTorch's default Kaiming-uniform with a = sqrt(5) starts with smaller weights)."""
    if isinstance(model, Gpt):
        return gpt_init(model)
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


CONSTRUCTORS = {
    "mlp": mlp,
    "cnn": small_cnn,
    "resnet18": lambda: ResNet(False, (2, 2, 2, 2), 10, True),
    "resnet50": lambda: ResNet(True, (3, 4, 6, 3), 1000, False),
    "gpt": lambda a: Gpt(a.vocab, a.context, a.gpt_layers, a.gpt_dim, a.gpt_heads),
}

# ---------------------------------------------------------------- the BLAS in use


def blas_in_use():
    """The BLAS PyTorch's CPU matrix products use: what its build says (BLAS_INFO; PyPI's wheels
    link MKL into libtorch_cpu), and the BLAS libraries mapped into the process besides numpy's
    own and CUDA's (Debian's torch uses the libblas.so.3 alternative, OpenBLAS)."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if any(k in path for k in ("blas", "mkl", "dnnl")) and not any(k in path for k in ("numpy", "nvidia", "cublas")):
                libs.add(os.path.realpath(path))
    cfg = torch.__config__.show()
    info = next((w.split("=", 1)[1].rstrip(",") for w in cfg.split() if w.startswith("BLAS_INFO=")), None)
    return {"openblas": (info or "").lower() == "open" or "openblas" in (info or "").lower()
            or any("openblas" in l for l in libs),
            "libraries": sorted(libs) or ([f"built-in ({info})"] if info else []),
            "mkldnn": torch.backends.mkldnn.is_available()}


# ---------------------------------------------------------------- the step

# Note [Compiling the whole step]
# --compile hands torch.compile (TorchInductor, mode "default" unless --compile-mode says
# otherwise) one function holding the whole training step: clearing the gradients, forward, loss,
# backward and the SGD-momentum update, so the optimizer is compiled too. Dynamo does not trace
# loss.backward() by default; where PyTorch can (torch._dynamo.config.trace_autograd_ops, 2.1x)
# it is switched on, and forward and backward become one graph; else compiled autograd
# (compiled_autograd) traces the backward as a graph of its own; the JSON says which
# (compile_backward). Two ways the step is written for Dynamo: the gradients are cleared by
# setting them to None (Optimizer.zero_grad is marked not to be traced), and the loss value is
# detached before the backward (a returned tensor whose graph the backward consumes breaks the
# graph). Optimizer.step itself breaks the graph on purpose, before and after the update (PyTorch's
# note in torch/optim/optimizer.py: the update then compiles as an in-place inference graph), so
# the best PyTorch 2.15 offers is forward+backward in one graph and the update in another:
# compile_graphs, compile_graph_breaks and their reasons are in the JSON. Compilation (and the
# recompilation once the momentum buffers exist) happens in the warm-up, which --compile raises to
# at least 3 steps; its time is compile_warmup_ms.


def make_step(model, opt, compile_mode, autocast=None):
    params = list(model.parameters())

    def step(x, y):
        for p in params:
            p.grad = None
        if autocast is not None:  # PyTorch AMP: the forward and the loss under autocast
            with torch.autocast(device_type=x.device.type, dtype=autocast):
                loss = F.cross_entropy(model(x), y)
        else:
            loss = F.cross_entropy(model(x), y)
        value = loss.detach()
        loss.backward()
        opt.step()
        return value

    if compile_mode is None:
        return step, {}
    import torch._dynamo as dynamo
    info = {"compile_mode": compile_mode, "compile_includes_optimizer": True,
            "compile_backward": "AOTAutograd, after a graph break at loss.backward()"}
    if hasattr(dynamo.config, "trace_autograd_ops"):
        dynamo.config.trace_autograd_ops = True
        info["compile_backward"] = "traced with the forward (trace_autograd_ops)"
    elif hasattr(dynamo.config, "compiled_autograd"):
        dynamo.config.compiled_autograd = True
        info["compile_backward"] = "compiled autograd"
    return torch.compile(step, mode=compile_mode), info


def compile_counts():
    from torch._dynamo.utils import counters
    return {"compile_graphs": int(counters["stats"]["unique_graphs"]),
            "compile_graph_breaks": int(sum(counters["graph_break"].values())),
            "compile_graph_break_reasons": [" ".join(str(k).split())[:200] for k in counters["graph_break"]][:6]}

# ---------------------------------------------------------------- the run


def main():
    ap = bc.parser(__doc__)
    ap.add_argument("--torch-init", action="store_true",
                    help="keep PyTorch's default initialisation (default: loom's, Kaiming normal)")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the whole training step (PyTorch 2.x): Note [Compiling the whole step]")
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile's mode (default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs)")
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none",
                    help="torch.autocast to bfloat16 around forward and loss (PyTorch AMP; loom's --precision bf16)")
    ap.add_argument("--channels-last", action="store_true",
                    help="the convolutional models' weights and input batches in torch.channels_last (NHWC), "
                         "PyTorch's advice for AMP on tensor cores and oneDNN")
    ap.add_argument("--tf32", choices=["default", "on", "off"], default="default",
                    help="CUDA float32 math: PyTorch's defaults (TF32 convolutions, full-float32 matmuls), TF32 for "
                         "both (loom's default), or neither (loom's full float32); the JSON says which ran")
    a = ap.parse_args()
    bc.check_flags(ap, a)
    if a.compile and not hasattr(torch, "compile"):
        ap.error(f"--compile needs PyTorch 2.x; this is {torch.__version__}")
    a.threads = bc.default_threads(a.threads)
    if a.compile and a.warmup < 3:
        print(f"bench_torch: --compile: {a.warmup} warm-up step(s) raised to 3 (compilation and the "
              "recompilation once momentum exists happen there)", file=sys.stderr)
        a.warmup = 3
    torch.set_num_threads(a.threads)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("bench_torch: --device cuda: PyTorch sees no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device(a.device)
    if a.tf32 != "default":
        torch.backends.cuda.matmul.allow_tf32 = a.tf32 == "on"
        torch.backends.cudnn.allow_tf32 = a.tf32 == "on"
    arch, sample, classes, default_batch = bc.model_spec(a)
    lm = a.model == "gpt"
    batch = a.batch or default_batch
    mode = "torch-compile" if a.compile else "torch-eager"
    blas = blas_in_use()
    print(f"bench_torch: torch {torch.__version__} {mode}, {arch}, batch {batch}, {a.device}, {a.threads} threads, "
          f"BLAS {', '.join(blas['libraries']) or 'unknown'} (OpenBLAS: {blas['openblas']}), "
          f"{a.warmup} warm-up + {a.steps} timed steps", file=sys.stderr)

    xs, ys = bc.make_tokens(a.context, a.vocab, batch) if lm else bc.make_data(sample, classes, batch)
    checksum = bc.data_checksum(xs, ys)
    n = xs.shape[0]

    exact = bc.reset_high_water_mark()
    rss0_kb = bc.status_kb("VmRSS:")
    torch.manual_seed(bc.SEED)
    model = CONSTRUCTORS[a.model](a) if lm else CONSTRUCTORS[a.model]()
    if not a.torch_init:
        loom_init(model)
    model = model.to(dev)
    fmt = torch.channels_last if a.channels_last and len(sample) == 3 else torch.contiguous_format
    if a.channels_last and len(sample) == 3:
        model = model.to(memory_format=fmt)
    model.train()
    if a.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=a.lr, eps=1e-8)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    step, info = make_step(model, opt, a.compile_mode if a.compile else None,
                           torch.bfloat16 if a.autocast == "bf16" else None)
    x = torch.empty((batch,) + tuple(sample), dtype=torch.int64 if lm else torch.float32, device=dev,
                    memory_format=fmt)
    y = torch.empty((batch * sample[0] if lm else batch,), dtype=torch.int64, device=dev)
    before = [p.detach().clone() for p in model.parameters()]

    def batch_of(i):
        idx = bc.batch_indices(i, batch, n)
        return torch.from_numpy(xs[idx]), torch.from_numpy(ys[idx].reshape(-1))

    # Note [Compiling the whole step]: in the modes that replay CUDA graphs (reduce-overhead,
    # max-autotune) each call is a new step whose outputs may overwrite the last one's; PyTorch
    # must be told where a step begins, or reading the loss fails ("accessing tensor output of
    # CUDAGraphs that has been overwritten by a subsequent run").
    graphs = a.compile and dev.type == "cuda" and a.compile_mode in ("reduce-overhead", "max-autotune")
    mark_step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None) if graphs else None

    def run(b):
        x.copy_(b[0])
        y.copy_(b[1])
        if mark_step is not None:
            mark_step()
        value = step(x, y).item()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return value

    def before_timed():
        if dev.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

    timed = bc.time_steps("bench_torch", a, batch_of, run, before_timed)
    if timed is None:
        return 3
    times, warm, losses = timed

    hwm_kb = bc.status_kb("VmHWM:")
    rss_delta = max(0, hwm_kb - rss0_kb) * 1024
    state = x.nelement() * (4 if lm else x.element_size()) + y.nelement() * 4  # tokens, labels as int32, like loom
    state += sum(p.nelement() * p.element_size() for p in model.parameters())
    state += sum(b.nelement() * b.element_size() for b in model.buffers() if b.dtype.is_floating_point)
    for st in opt.state.values():
        state += sum(t.nelement() * t.element_size() for t in st.values() if torch.is_tensor(t))
    param_bytes = sum(p.nelement() * p.element_size() for p in model.parameters())

    # Did it train? PyTorch's SGD keeps no step counter: every parameter must have a momentum
    # buffer; Adam's count must be the steps taken.
    slot_ok = ((lambda st: st.get("momentum_buffer") is not None) if a.optimizer == "sgd"
               else (lambda st: int(st.get("step", 0)) == a.warmup + a.steps))
    why = bc.why_not_trained(
        losses, not all(torch.equal(b, p.detach()) for b, p in zip(before, model.parameters())),
        len(opt.state) == len(before) and all(slot_ok(st) for st in opt.state.values()))
    if why:
        print("bench_torch: error: " + "; ".join(why) + ": refusing to report this run", file=sys.stderr)
        return 3

    if dev.type == "cuda":
        peak, peak_is = torch.cuda.max_memory_allocated(), "torch.cuda.max_memory_allocated over the timed steps"
    else:
        peak, peak_is = rss_delta, bc.RSS_IS + " (CPU: no allocator stats)"
    fields = {
        "peak_bytes": peak, "state_bytes": state,
        "working_peak_bytes": max(0, peak - state) if dev.type == "cuda" else None,
        "rss_peak_delta_bytes": rss_delta, "rss_peak_delta_exact": exact,
        "arena_bytes": None, "lower_bound_bytes": None,
        "param_bytes": param_bytes, "param_traffic_bytes_per_step": 8 * param_bytes,
        "init": "torch default" if a.torch_init else "loom (kaiming normal)",
        "framework": "torch", "torch": torch.__version__, "version": torch.__version__,
        "blas": blas["libraries"], "blas_is_openblas": blas["openblas"], "mkldnn": blas["mkldnn"],
        "data_checksum": checksum, "peak_bytes_is": peak_is, "rss_peak_delta_is": bc.RSS_IS,
        "compile_warmup_ms": [round(w, 1) for w in warm] if a.compile else None,
        "precision": "bf16" if a.autocast == "bf16" else "fp32",
        "memory_format": "channels_last" if fmt == torch.channels_last else "contiguous",
        "cuda_tf32_matmul": torch.backends.cuda.matmul.allow_tf32 if dev.type == "cuda" else None,
        "cuda_tf32_conv": torch.backends.cudnn.allow_tf32 if dev.type == "cuda" else None,
    }
    fields.update(info)
    if a.compile:
        fields.update(compile_counts())
    bc.report(a, "bench_torch", mode, batch, times, losses, fields, f"PyTorch {torch.__version__} {mode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
