"""The command line the SINGA-style examples share: --graph (the default) or --eager, positive
sizes, --json for a last line of results that the tests read."""
import argparse
import json


def parser(doc, **sizes):
    """An ArgumentParser with --graph/--eager, --json and an int option --NAME per size."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--graph", dest="graph", action="store_true", default=True,
                      help="capture the training step once and replay it (default)")
    mode.add_argument("--eager", dest="graph", action="store_false", help="run every op at once")
    for name, default in sizes.items():
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--json", action="store_true", help="end with one JSON line of results")
    ap.set_defaults(_sizes=tuple(sizes))
    return ap


def parse(ap):
    args = ap.parse_args()
    for name in args._sizes:
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be positive")
    return args


def report(args, losses, accuracy, what="test accuracy", note="", **extra):
    """The summary line ("graph: loss 2.3 -> 0.1, test accuracy 0.950 (note)"), and the JSON line
    with --json (`extra` added to it)."""
    mode = "graph" if args.graph else "eager"
    print(f"{mode}: loss {losses[0]:.4f} -> {losses[-1]:.4f}, {what} {accuracy:.3f}" + (f" ({note})" if note else ""))
    if args.json:
        print(json.dumps({"mode": mode, "losses": losses, "accuracy": accuracy, **extra}))
