#!/usr/bin/env python3
"""JAX reference for tools/loom-bench: the same models, batch sizes, optimizer and data, with the
whole training step under one jax.jit.

    python3 tools/bench_jax.py --model mlp|cnn|resnet18|resnet50|gpt [--batch N] [--steps N]
        [--warmup N] [--threads N] [--lr X] [--momentum X] [--precision fp32|bf16] [--json]

Needs jax and jaxlib (the CPU build; tools/compare.sh installs them into their own environment).
Trains a fresh model (SGD lr 0.01, momentum 0.9, softmax cross-entropy) on loom-bench's synthetic
data (bit for bit: compare data_checksum) and prints one JSON line with loom-bench's fields (mode
"jax-jit") and a one-row table.

The models are tools/bench_torch.py's (loom's src/nn/models.cc), written with jax.numpy and
jax.lax: Note [The JAX models]. The step: Note [One jit for the whole step]. --precision bf16:
Note [bf16 in the JAX models].

Memory: peak_bytes is the process's resident-set growth (VmHWM at the end minus VmRSS before the
model was built), the same measurement as loom-bench's rss_peak_delta_bytes; it includes XLA's
compilation. Threads: XLA's CPU thread pool is sized from the CPUs this process may run on, so
--threads N below the core count restricts the process to N of them (sched_setaffinity).

Like loom-bench it refuses to report a run that did not train (the loss or the parameters did
not change, or the optimizer's step count did not advance by every step): exit 3.
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common as bc  # noqa: E402

# ---------------------------------------------------------------- layers

# Note [The JAX models]
# The architectures are bench_torch.py's, layer for layer (ResNet v1.5, BatchNorm after every
# convolution, convolutions without bias), written as plain functions over a dict of parameters
# so that nothing but jax is needed. Activations are NHWC and kernels HWIO, the layout XLA's CPU
# convolutions and every JAX library use; the data pool is transposed once, on the host, before
# any step (the same samples, another arrangement of their bytes; the flatten before the CNN's
# linear layer then reads (h, w, c) instead of (c, h, w), a fixed permutation of that layer's
# randomly initialised inputs). Initialisation as loom's: weights N(0, 2 / fan_in), biases 0,
# BatchNorm gamma 1 and beta 0, running mean 0 and variance 1, drawn from numpy's generator.
# BatchNorm trains as PyTorch's and loom's: batch statistics (biased variance) normalise, the
# running statistics move by momentum 0.1 with the unbiased variance, eps 1e-5.


# Note [bf16 in the JAX models]
# --precision bf16 is loom's policy (Note [Precision policy], src/core/autocast.h) as a JAX user
# writes it: every matrix product (the dense and attention projections, the tied logits) and
# every convolution takes bfloat16 operands (the float32 parameters and activations cast in the
# step: the parameters stay float32, the master copy the update writes) and gives float32
# results (preferred_element_type), and everything else (BatchNorm, LayerNorm, softmax, the
# attention's score products, the loss, the update) stays float32. Differences from loom's
# policy: jax.grad transposes the lowered products, so the convolutions' gradients are computed
# from bfloat16 operands too (loom computes them in float32 on the CPU), and attention stays
# float32 (as loom's, whose attention op is not lowered).
BF16 = False  # --precision bf16


def product(x, w):
    """x @ w; under --precision bf16 from bfloat16 operands with a float32 result."""
    import jax.numpy as jnp
    if not BF16:
        return x @ w
    return jnp.matmul(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), preferred_element_type=jnp.float32)


class Ctx:
    """Parameters and BatchNorm statistics by name. Built once with init=True (shapes only, under
    jax.eval_shape, drawing the initial values in numpy), then read inside the jitted step."""

    vocab = context = None  # the GPT's, set for the init pass (later passes read the shapes from params)

    def __init__(self, params=None, state=None, rng=None):
        self.init = params is None
        self.params = {} if self.init else params
        self.state = {} if self.init else state
        self.new_state = {}
        self.rng = rng

    def _get(self, store, name, shape, value):
        import jax.numpy as jnp
        if self.init:
            store[name] = value(shape)
            return jnp.zeros(shape, jnp.float32)
        return store[name]

    def weight(self, name, shape):  # fan_in = all but the last (output) dimension: HWIO, (in, out)
        std = math.sqrt(2.0 / int(np.prod(shape[:-1])))
        return self._get(self.params, name, shape,
                         lambda s: (self.rng.standard_normal(s) * std).astype(np.float32))

    def const(self, store, name, shape, v):
        return self._get(store, name, shape, lambda s: np.full(s, v, np.float32))

    def normal(self, name, shape, std):  # GPT-2's initialisation
        return self._get(self.params, name, shape, lambda s: (self.rng.standard_normal(s) * std).astype(np.float32))


def dense(ctx, name, x, cout):
    return product(x, ctx.weight(name + ".w", (x.shape[-1], cout))) + ctx.const(ctx.params, name + ".b", (cout,), 0.0)


def conv_bn(ctx, name, x, cout, k, stride, pad):
    """conv (no bias) + training-mode BatchNorm. x: (N, H, W, C), w: (k, k, C, cout) -> (N, OH, OW, cout)."""
    import jax.lax as lax
    import jax.numpy as jnp
    w = ctx.weight(name + ".w", (k, k, x.shape[-1], cout))
    if BF16:  # Note [bf16 in the JAX models]
        y = lax.conv_general_dilated(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), (stride, stride),
                                     [(pad, pad), (pad, pad)], dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                     preferred_element_type=jnp.float32)
    else:
        y = lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad), (pad, pad)],
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    mean = jnp.mean(y, axis=(0, 1, 2))
    var = jnp.mean(jnp.square(y - mean), axis=(0, 1, 2))
    m = y.size // cout
    rm = ctx.const(ctx.state, name + ".running_mean", (cout,), 0.0)
    rv = ctx.const(ctx.state, name + ".running_var", (cout,), 1.0)
    ctx.new_state[name + ".running_mean"] = (1 - bc.BN_MOMENTUM) * rm + bc.BN_MOMENTUM * mean
    ctx.new_state[name + ".running_var"] = (1 - bc.BN_MOMENTUM) * rv + bc.BN_MOMENTUM * var * (m / (m - 1))
    gamma = ctx.const(ctx.params, name + ".gamma", (cout,), 1.0)
    beta = ctx.const(ctx.params, name + ".beta", (cout,), 0.0)
    return (y - mean) * (gamma * lax.rsqrt(var + bc.BN_EPS)) + beta


def max_pool(x, k, stride, pad=0):
    import jax.lax as lax
    import jax.numpy as jnp
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, k, k, 1), (1, stride, stride, 1),
                             [(0, 0), (pad, pad), (pad, pad), (0, 0)])


# ---------------------------------------------------------------- models


def mlp(ctx, x):
    import jax
    h = jax.nn.relu(dense(ctx, "fc1", x, 1024))
    h = jax.nn.relu(dense(ctx, "fc2", h, 1024))
    return dense(ctx, "fc3", h, 10)


def small_cnn(ctx, x):
    import jax
    h = max_pool(jax.nn.relu(conv_bn(ctx, "conv1", x, 32, 3, 1, 1)), 2, 2)
    h = max_pool(jax.nn.relu(conv_bn(ctx, "conv2", h, 64, 3, 1, 1)), 2, 2)
    return dense(ctx, "fc", h.reshape(h.shape[0], -1), 10)


def basic_block(ctx, name, x, cout, stride):  # ResNet v1.5: the stride in the first 3x3
    import jax
    h = jax.nn.relu(conv_bn(ctx, name + ".a", x, cout, 3, stride, 1))
    h = conv_bn(ctx, name + ".b", h, cout, 3, 1, 1)
    short = conv_bn(ctx, name + ".down", x, cout, 1, stride, 0) if stride != 1 or x.shape[-1] != cout else x
    return jax.nn.relu(h + short)


def bottleneck(ctx, name, x, mid, stride):  # torchvision's: the stride in the 3x3
    import jax
    cout = mid * 4
    h = jax.nn.relu(conv_bn(ctx, name + ".a", x, mid, 1, 1, 0))
    h = jax.nn.relu(conv_bn(ctx, name + ".b", h, mid, 3, stride, 1))
    h = conv_bn(ctx, name + ".c", h, cout, 1, 1, 0)
    short = conv_bn(ctx, name + ".down", x, cout, 1, stride, 0) if stride != 1 or x.shape[-1] != cout else x
    return jax.nn.relu(h + short)


def resnet(block, blocks, classes, cifar_stem):
    def forward(ctx, x):
        import jax
        import jax.numpy as jnp
        if cifar_stem:  # 3x3 conv, stride 1, no max-pool
            h = jax.nn.relu(conv_bn(ctx, "stem", x, 64, 3, 1, 1))
        else:
            h = max_pool(jax.nn.relu(conv_bn(ctx, "stem", x, 64, 7, 2, 3)), 3, 2, 1)
        for stage, (n, width) in enumerate(zip(blocks, (64, 128, 256, 512))):
            for b in range(n):
                h = block(ctx, f"layer{stage + 1}.{b}", h, width, 2 if b == 0 and stage > 0 else 1)
        return dense(ctx, "fc", jnp.mean(h, axis=(1, 2)), classes)
    return forward


def gpt(layers, dim, heads):
    """loom's Gpt (src/nn/transformer.h): pre-norm blocks, fused qkv, causal attention
    (jax.nn.dot_product_attention), GELU (tanh form), logits through the token embedding; GPT-2's
    initialisation. tokens (B, T) -> logits (B * T, vocab)."""
    def layer_norm(ctx, name, x):
        import jax.numpy as jnp
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        g = ctx.const(ctx.params, name + ".gamma", (x.shape[-1],), 1.0)
        b = ctx.const(ctx.params, name + ".beta", (x.shape[-1],), 0.0)
        return (x - mean) / jnp.sqrt(var + 1e-5) * g + b

    def linear(ctx, name, x, cout, std):
        return product(x, ctx.normal(name + ".w", (x.shape[-1], cout), std)) + ctx.const(ctx.params, name + ".b",
                                                                                           (cout,), 0.0)

    def forward(ctx, tokens):
        import jax
        b, t = tokens.shape
        wte = ctx.normal("wte", (ctx.vocab, dim), 0.02)
        wpe = ctx.normal("wpe", (ctx.context, dim), 0.01)
        h = wte[tokens] + wpe[:t]
        resid = 0.02 / math.sqrt(2 * layers)
        for i in range(layers):
            n = f"h{i}"
            qkv = linear(ctx, n + ".qkv", layer_norm(ctx, n + ".ln1", h), 3 * dim, 0.02)
            q, k, v = (qkv[..., j * dim:(j + 1) * dim].reshape(b, t, heads, dim // heads) for j in range(3))
            y = jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(b, t, dim)
            h = h + linear(ctx, n + ".proj", y, dim, resid)
            m = jax.nn.gelu(linear(ctx, n + ".fc1", layer_norm(ctx, n + ".ln2", h), 4 * dim, 0.02), approximate=True)
            h = h + linear(ctx, n + ".fc2", m, dim, resid)
        return product(layer_norm(ctx, "ln_f", h).reshape(b * t, dim), wte.T)
    return forward


MODELS = {
    "mlp": mlp,
    "cnn": small_cnn,
    "resnet18": resnet(basic_block, (2, 2, 2, 2), 10, True),
    "resnet50": resnet(bottleneck, (3, 4, 6, 3), 1000, False),
}

# ---------------------------------------------------------------- the step

# Note [One jit for the whole step]
# One jax.jit holds the whole training step: forward, softmax cross-entropy, the gradient
# (jax.value_and_grad), the BatchNorm running statistics and the SGD-momentum update written as
# PyTorch's (buf = momentum * buf + grad, param -= lr * buf; buf starts at 0, so the first buf is
# the gradient, as in PyTorch) with a step counter. Parameters, statistics and optimizer state are
# donated, so XLA updates them in place instead of holding two copies. Compilation happens in the
# first warm-up step; its time is compile_warmup_ms.


def make_step(forward, lr, momentum, adam=False):
    import jax
    import jax.numpy as jnp

    def loss_fn(params, state, x, y):
        ctx = Ctx(params, state)
        logits = forward(ctx, x)
        lse = jax.nn.logsumexp(logits, axis=1)
        loss = jnp.mean(lse - jnp.take_along_axis(logits, y[:, None], axis=1)[:, 0])
        return loss, ctx.new_state

    def step(params, state, opt, x, y):
        (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, state, x, y)
        count, bufs = opt
        bufs = jax.tree_util.tree_map(lambda b, g: momentum * b + g, bufs, grads)
        params = jax.tree_util.tree_map(lambda p, b: p - lr * b, params, bufs)
        return params, new_state, (count + 1, bufs), loss

    def adam_step(params, state, opt, x, y):  # PyTorch's Adam: betas 0.9, 0.999, eps 1e-8
        (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, state, x, y)
        count, (m, v) = opt
        t = (count + 1).astype(jnp.float32)
        m = jax.tree_util.tree_map(lambda a, g: 0.9 * a + 0.1 * g, m, grads)
        v = jax.tree_util.tree_map(lambda a, g: 0.999 * a + 0.001 * g * g, v, grads)
        c1, c2 = 1 - 0.9 ** t, 1 - 0.999 ** t
        params = jax.tree_util.tree_map(lambda p, a, s: p - lr * (a / c1) / (jnp.sqrt(s / c2) + 1e-8), params, m, v)
        return params, new_state, (count + 1, (m, v)), loss

    return jax.jit(adam_step if adam else step, donate_argnums=(0, 1, 2))


def init_model(forward, sample, batch, a=None):
    """Initial parameters and BatchNorm statistics (numpy), by running the forward on shapes; `a`
    the flags (the GPT's vocabulary and context come from them)."""
    import jax
    import jax.numpy as jnp
    ctx = Ctx(rng=np.random.default_rng(bc.SEED))
    lm = a is not None and a.model == "gpt"
    if lm:
        ctx.vocab, ctx.context = a.vocab, a.context
    dtype = jnp.int32 if lm else jnp.float32
    jax.eval_shape(lambda x: forward(ctx, x), jax.ShapeDtypeStruct((batch,) + tuple(sample), dtype))
    return ctx.params, ctx.state


def nhwc(sample):
    return (sample[1], sample[2], sample[0]) if len(sample) == 3 else tuple(sample)

# ---------------------------------------------------------------- the run


def main():
    ap = bc.parser(__doc__)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: products and convolutions from bfloat16 operands (Note [bf16 in the JAX models])")
    a = ap.parse_args()
    bc.check_flags(ap, a)
    global BF16
    BF16 = a.precision == "bf16"
    if a.device != "cpu":
        ap.error("--device cuda: this is the CPU build of jaxlib")
    cpus = sorted(os.sched_getaffinity(0))
    a.threads = bc.default_threads(a.threads)
    if a.threads < len(cpus):  # XLA sizes its pool from the schedulable CPUs (see the docstring)
        os.sched_setaffinity(0, cpus[:a.threads])
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        import jax
        import jax.numpy as jnp
        import jaxlib
    except ImportError as e:
        print(f"bench_jax: cannot import jax ({e}): run it with the environment tools/compare.sh installs",
              file=sys.stderr)
        return 1
    arch, sample, classes, default_batch = bc.model_spec(a)
    lm = a.model == "gpt"
    batch = a.batch or default_batch
    print(f"bench_jax: jax {jax.__version__} (jaxlib {jaxlib.__version__}) jit, {arch}, {a.precision}, batch {batch}, cpu, "
          f"{a.threads} threads, {a.warmup} warm-up + {a.steps} timed steps", file=sys.stderr)

    xs, ys = bc.make_tokens(a.context, a.vocab, batch) if lm else bc.make_data(sample, classes, batch)
    checksum = bc.data_checksum(xs, ys)
    if lm:
        xs = xs.astype(np.int32)
    n = xs.shape[0]
    if len(sample) == 3:
        xs = np.ascontiguousarray(xs.transpose(0, 2, 3, 1))  # NCHW -> NHWC: Note [The JAX models]
    ys = ys.astype(np.int32)

    exact = bc.reset_high_water_mark()
    rss0_kb = bc.status_kb("VmRSS:")
    forward = gpt(a.gpt_layers, a.gpt_dim, a.gpt_heads) if lm else MODELS[a.model]
    params0, state0 = init_model(forward, nhwc(sample), batch, a)
    params = {k: jnp.asarray(v) for k, v in params0.items()}
    state = {k: jnp.asarray(v) for k, v in state0.items()}
    zeros = lambda: {k: jnp.zeros_like(v) for k, v in params.items()}
    adam = a.optimizer == "adam"
    opt = (jnp.zeros((), jnp.int32), (zeros(), zeros()) if adam else zeros())
    step = make_step(forward, a.lr, a.momentum, adam)

    def run(batch):
        nonlocal params, state, opt
        x, y = jnp.asarray(batch[0]), jnp.asarray(batch[1])
        params, state, opt, loss = step(params, state, opt, x, y)
        return float(loss)

    total = a.warmup + a.steps
    timed = bc.time_steps("bench_jax", a, lambda i: (xs[bc.batch_indices(i, batch, n)],
                                                     ys[bc.batch_indices(i, batch, n)].reshape(-1)), run)
    if timed is None:
        return 3
    times, warm, losses = timed
    jax.block_until_ready((params, state, opt))

    hwm_kb = bc.status_kb("VmHWM:")
    rss_delta = max(0, hwm_kb - rss0_kb) * 1024
    nbytes = lambda tree: sum(int(v.size) * v.dtype.itemsize for v in jax.tree_util.tree_leaves(tree))
    param_bytes = nbytes(params)
    state_bytes = param_bytes + nbytes(state) + nbytes(opt[1]) + xs[0].nbytes * batch + ys[0].size * 4 * batch

    why = bc.why_not_trained(
        losses, any(not np.array_equal(np.asarray(params[k]), params0[k]) for k in params0),
        int(opt[0]) == total)
    if why:
        print("bench_jax: error: " + "; ".join(why) + ": refusing to report this run", file=sys.stderr)
        return 3

    fields = {
        "peak_bytes": rss_delta, "state_bytes": state_bytes, "working_peak_bytes": None,
        "rss_peak_delta_bytes": rss_delta, "rss_peak_delta_exact": exact,
        "arena_bytes": None, "lower_bound_bytes": None,
        "param_bytes": param_bytes, "param_traffic_bytes_per_step": 8 * param_bytes,
        "init": "loom (kaiming normal)", "framework": "jax", "precision": a.precision, "jax": jax.__version__, "jaxlib": jaxlib.__version__,
        "version": jax.__version__, "layout": "NHWC" if len(sample) == 3 else "NC",
        "jit": f"whole step: forward, backward, BatchNorm statistics, {a.optimizer} update; state donated",
        "data_checksum": checksum, "peak_bytes_is": bc.RSS_IS + " (includes XLA compilation)",
        "rss_peak_delta_is": bc.RSS_IS, "compile_warmup_ms": [round(w, 1) for w in warm],
    }
    bc.report(a, "bench_jax", "jax-jit", batch, times, losses, fields, f"JAX {jax.__version__} jit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
