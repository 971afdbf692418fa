#!/usr/bin/python3
"""Trains a small CNN (two conv3x3-BatchNorm-ReLU-maxpool blocks and a linear classifier) on
synthetic CIFAR-10-shaped data, written as a SINGA-style loom.model.Model over loom.layer.
--graph (the default) captures the first train_one_batch and replays it from C++; --eager runs
every op from Python. Prints a progress bar, the loss, the median time per step and the
accuracy of the trained model in eval mode.

    /usr/bin/python3 examples/python/cnn.py [--graph | --eager] [--batch 32] [--steps 50]
        [--lr 0.005] [--momentum 0.9] [--parallel] [--dist] [--json]
        [--device cpu|cuda] [--cuda-float32-math tf32|full] [--precision fp32|bf16|fp16]

With --data DIR (MNIST idx files, such as the digits tools/setup.sh installs in data/digits, or
CIFAR-10 binary batches) it trains --epochs N through loom.trainer.Trainer instead: a progress
bar, held-out loss, top-1 and top-5 after each epoch, --checkpoint-dir DIR (every
--checkpoint-every N steps, else each epoch; --resume continues bitwise), --csv FILE and --plot
FILE.png of the curves, --augment (random crops of the image padded by 4 pixels; flips for
CIFAR-10 only).

--dist trains data-parallel over the ranks of `python3 -m loom.launch -n N` (opt.DistOpt;
--batch is the global batch, each rank trains its rows; rank 0 prints). BatchNorm uses each
rank's own batch statistics; the held-out accuracy is rank 0's. Not with --data yet.
"""
import argparse
import json
import os
import time

import numpy as np
from common import ProgressBar, Ranks, cifar_like, median

from loom import autograd, device, layer, model, opt, tensor


class CNN(model.Model):
    def __init__(self, dev, in_channels=3, classes=10, side=32):
        super().__init__()
        self.features = layer.Sequential(
            layer.Conv2d(in_channels, 32, 3, padding=1, bias=False, device=dev),
            layer.BatchNorm2d(32, device=dev),
            layer.ReLU(),
            layer.MaxPool2d(2, 2),
            layer.Conv2d(32, 64, 3, padding=1, bias=False, device=dev),
            layer.BatchNorm2d(64, device=dev),
            layer.ReLU(),
            layer.MaxPool2d(2, 2),
            layer.Flatten(),
        )
        self.classifier = layer.Linear(64 * (side // 4) * (side // 4), classes, device=dev)

    def forward(self, x):
        return self.classifier(self.features(x))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def train_on_data(args, dev):
    """--data: epochs of real images through loom.trainer.Trainer."""
    from loom import io, trainer
    mnist = any(os.path.exists(os.path.join(args.data, "train-images-idx3-ubyte" + z)) for z in ("", ".gz"))
    load = io.load_mnist_dir if mnist else io.load_cifar10_dir
    mean, std = (io.MNIST_MEAN, io.MNIST_STD) if mnist else (io.CIFAR10_MEAN, io.CIFAR10_STD)
    train_data, test_data = load(args.data, True), load(args.data, False)
    train = io.DataLoader(train_data, batch_size=args.batch, seed=args.seed, drop_last=True, mean=mean, std=std,
                          device=dev, crop_padding=4 if args.augment else 0, hflip=args.augment and not mnist,
                          augment_seed=args.seed)
    held_out = io.DataLoader(test_data, batch_size=200, shuffle=False, mean=mean, std=std, device=dev)
    m = CNN(dev, in_channels=train_data.channels, side=train_data.height)
    m.set_optimizer(opt.SGD(lr=args.lr, momentum=args.momentum, weight_decay=5e-4))
    m.compile([tensor.zeros((args.batch,) + train.x_shape(1)[1:], device=dev)], is_train=True,
              use_graph=args.graph, sequential=not args.parallel, precision=args.precision)
    print(f"cnn: {'MNIST' if mnist else 'CIFAR-10'} ({len(train_data)} train, {len(test_data)} held out), batch "
          f"{args.batch}, {args.epochs} epochs, {'graph' if args.graph else 'eager'}, {args.precision}")
    r = trainer.Trainer(m, train, held_out, epochs=args.epochs, log_every=10, eval_at_start=True,
                        checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every,
                        resume=args.resume, csv=args.csv, plot=args.plot).fit()
    print(f"held-out top-1 {100 * r['eval']['top1']:.2f}%, top-5 {100 * r['eval']['top5']:.2f}% after {r['steps']} "
          f"steps ({r['seconds']:.1f}s)")
    if args.json:
        print(json.dumps({"model": "small-cnn", "mode": "graph" if args.graph else "eager", "batch": args.batch,
                          "precision": args.precision, "seed": args.seed, "steps": r["steps"],
                          "train_loss": r["train_loss"], "heldout_loss": r["eval"]["loss"],
                          "heldout_top1": r["eval"]["top1"], "heldout_top5": r["eval"]["top5"]}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--graph", dest="graph", action="store_true", default=True, help="capture once, replay (default)")
    mode.add_argument("--eager", dest="graph", action="store_false", help="run every op from Python")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--lr", type=float, default=0.005)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--parallel", action="store_true", help="replay independent ops on worker threads")
    ap.add_argument("--dist", action="store_true", help="data-parallel over the ranks of python3 -m loom.launch")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of results")
    ap.add_argument("--data", help="train on MNIST or CIFAR-10 files in DIR through loom.trainer")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--checkpoint-dir")
    ap.add_argument("--checkpoint-every", type=int, default=0)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--csv")
    ap.add_argument("--plot")
    ap.add_argument("--augment", action="store_true")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to train (default cpu)")
    ap.add_argument("--cuda-float32-math", choices=["tf32", "full"],
                    help="float32 matrix products and convolutions on the GPU (default tf32; "
                         "loom.device.set_cuda_float32_math)")
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                    help="Note [Precision policy]: products from 16-bit operands (fp16 scales the loss)")
    args = ap.parse_args()
    if args.batch < 1 or args.steps < 1:
        ap.error("--batch and --steps must be positive")
    if not args.data and (args.checkpoint_dir or args.resume or args.csv or args.plot or args.augment):
        ap.error("--checkpoint-dir, --resume, --csv, --plot and --augment need --data")
    if args.data and args.dist:
        ap.error("--dist trains the synthetic batches only; with --data use one process")

    if args.cuda_float32_math:
        device.set_cuda_float32_math(args.cuda_float32_math)
    dev = device.create_cuda_device(0) if args.device == "cuda" else device.create_cpu_device()
    dev.SetRandSeed(args.seed)
    if args.data:
        train_on_data(args, dev)
        return
    xs, ys = cifar_like(max(1024, args.batch))
    m = CNN(dev)
    ranks = Ranks(opt.SGD(lr=args.lr, momentum=args.momentum, weight_decay=1e-4), args.dist, dev)
    mine = ranks.rows(args.batch)  # this rank's rows of each global batch
    ranks.broadcast(m.get_params().values())
    m.set_optimizer(ranks.optimizer)
    x = tensor.from_numpy(xs[:args.batch][mine], dev)
    y = tensor.from_numpy(ys[:args.batch][mine], dev)
    m.compile([x], is_train=True, use_graph=args.graph, sequential=not args.parallel, precision=args.precision)
    ranks.print(f"cnn: conv32-bn-relu-pool, conv64-bn-relu-pool, linear; SGD lr {args.lr} momentum {args.momentum}, "
          f"batch {args.batch}, {args.steps} steps, {'graph' if args.graph else 'eager'}"
                + (f", {ranks.world} ranks" if args.dist else ""))

    bar = ProgressBar(args.steps, every=5) if ranks.root else None
    times, losses = [], []
    n = xs.shape[0]
    for step in range(args.steps):
        lo = (step * args.batch) % (n - args.batch + 1)
        t0 = time.perf_counter()
        x.copy_from_numpy(xs[lo:lo + args.batch][mine])
        y.copy_from_numpy(ys[lo:lo + args.batch][mine])
        out, loss = m.train_one_batch(x, y)
        value = ranks.mean(loss.item())  # the global batch's loss
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(value)
        if bar:
            bar.update(step + 1, loss=value, ms=f"{times[-1]:.1f}")
    ranks.check_same_parameters(m.get_params().values())

    # Accuracy on held-out samples, eval mode (running statistics), no gradients.
    m.eval()
    xe, ye = cifar_like(256, seed=99)
    with autograd.no_grad():
        pred = np.argmax(m(tensor.from_numpy(xe, dev)).to_numpy(), axis=1)
    accuracy = float(np.mean(pred == ye))
    timed = times[2:] if len(times) > 2 else times
    ranks.print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}; median {median(timed):.1f} ms/step; "
          f"held-out accuracy {accuracy:.3f}")
    if args.json:
        ranks.print(json.dumps({"model": "small-cnn", "mode": "graph" if args.graph else "eager", "batch": args.batch,
                                "ranks": ranks.world, "steps": args.steps, "ms_per_step_median": median(timed), "first_loss": losses[0],
                                "last_loss": losses[-1], "accuracy": accuracy}))


if __name__ == "__main__":
    main()
