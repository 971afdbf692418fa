"""loom.curves: a PNG of a training run's curves from its CSV log (nn::TrainingLog's columns,
which loom.trainer.Trainer and loom-cnn --csv write). Plain Python and matplotlib (Agg backend),
nothing of loom's own, so that tools/plot_training.py loads this file straight from the source
tree.

Left: the training loss at each log point and the held-out loss at each evaluation (log scale);
right: held-out top-1 and top-5 accuracy. The x axis is the epoch (fractional between epochs).
"""
import csv


def read_log(path):
    """The rows of a training log as dicts of floats (None where a column is empty)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        out.append({k: (float(v) if v not in ("", None) else None) for k, v in r.items()})
    return out


def plot_log(csv_path, png_path, title="training"):
    """Draws `csv_path` into `png_path`; returns png_path. ValueError when the log has no rows."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_log(csv_path)
    if not rows:
        raise ValueError(f"[curves] {csv_path} has no rows")
    train = [r for r in rows if r.get("train_loss") is not None]
    evals = [r for r in rows if r.get("eval_top1") is not None]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    if train:
        left.plot([r["epoch"] for r in train], [r["train_loss"] for r in train], ".-", label="training")
    if evals:
        left.plot([r["epoch"] for r in evals], [r["eval_loss"] for r in evals], "s-", label="held out")
    left.set_xlabel("epoch")
    left.set_ylabel("softmax cross-entropy")
    if all(r[k] > 0 for r in train for k in ("train_loss",)) and all(r["eval_loss"] > 0 for r in evals):
        left.set_yscale("log")
    left.legend()
    left.grid(alpha=0.3)
    if evals:
        xs = [r["epoch"] for r in evals]
        right.plot(xs, [100 * r["eval_top1"] for r in evals], "o-", color="tab:green", label="top-1")
        right.plot(xs, [100 * r["eval_top5"] for r in evals], "^--", color="tab:olive", label="top-5")
        for x, r in zip(xs, evals):
            right.annotate(f"{100 * r['eval_top1']:.1f}%", (x, 100 * r["eval_top1"]), textcoords="offset points",
                           xytext=(0, -12), ha="center", fontsize=8)
        right.legend(loc="lower right")
    right.set_xlabel("epoch")
    right.set_ylabel("held-out accuracy (%)")
    right.grid(alpha=0.3)
    right.margins(y=0.12)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return png_path
