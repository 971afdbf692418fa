#!/usr/bin/python3
"""Plots a training run's curves from its CSV log, as `loom-cnn --epochs N --csv FILE` and
loom.trainer.Trainer(csv=...) write it (nn::TrainingLog's columns).

    /usr/bin/python3 tools/plot_training.py FILE [--out FILE_without_.csv.png] [--title TEXT]

Left: the training loss at each log point and the held-out loss at each evaluation; right: the
held-out top-1 and top-5 accuracy. Prints the PNG's path. The drawing is loom.curves, loaded
from the source tree (it needs matplotlib only, not a built loom).
"""
import argparse
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def curves():
    spec = importlib.util.spec_from_file_location("loom_curves", os.path.join(ROOT, "swig", "python", "loom",
                                                                             "curves.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--out", default=None)
    ap.add_argument("--title", default="loom-cnn")
    a = ap.parse_args()
    try:
        print(curves().plot_log(a.csv, a.out or os.path.splitext(a.csv)[0] + ".png", a.title))
    except ValueError as e:
        raise SystemExit(f"plot_training: {e}")


if __name__ == "__main__":
    main()
