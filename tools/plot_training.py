#!/usr/bin/python3
"""Plots a training run's curves as written by `loom-cnn --epochs N --csv FILE`.

    /usr/bin/python3 tools/plot_training.py FILE [--out FILE_without_.csv.png] [--title TEXT]

Left: the mean training loss of each epoch and the held-out loss after it; right: the held-out
top-1 accuracy after each epoch. Epoch 0 is the untrained network (no training loss). Prints the PNG's path. matplotlib, Agg backend.
"""
import argparse
import csv
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--out", default=None)
    ap.add_argument("--title", default="loom-cnn")
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise SystemExit(f"plot_training: {a.csv} has no epochs")
    epoch = [int(r["epoch"]) for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    trained = [r for r in rows if r["train_loss"] != "nan"]  # epoch 0 (before training) has none
    left.plot([int(r["epoch"]) for r in trained], [float(r["train_loss"]) for r in trained], "o-",
              label="training (epoch mean)")
    left.plot(epoch, [float(r["heldout_loss"]) for r in rows], "s-", label="held out")
    left.set_xlabel("epoch")
    left.set_ylabel("softmax cross-entropy")
    left.set_yscale("log")
    left.legend()
    left.grid(alpha=0.3)
    right.plot(epoch, [100 * float(r["heldout_top1"]) for r in rows], "o-", color="tab:green")
    right.set_xlabel("epoch")
    right.set_ylabel("held-out top-1 accuracy (%)")
    right.grid(alpha=0.3)
    for x, r in zip(epoch, rows):
        right.annotate(f"{100 * float(r['heldout_top1']):.1f}%", (x, 100 * float(r["heldout_top1"])),
                       textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    right.margins(y=0.12)
    for ax in (left, right):
        ax.set_xticks(epoch)
    fig.suptitle(a.title)
    fig.tight_layout()
    out = a.out or os.path.splitext(a.csv)[0] + ".png"
    fig.savefig(out, dpi=100)
    print(out)


if __name__ == "__main__":
    main()
