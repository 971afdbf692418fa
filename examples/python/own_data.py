"""Your own data: numpy arrays through loom.data and loom.trainer (docs/guide.md, "Your own data").

    python examples/python/own_data.py [--epochs 10] [--checkpoint-dir runs/own [--resume]]

Two classes of points in the plane (inside the unit circle or not), 1,000 to train on and 500
held out, in numpy arrays; a 2-32-2 MLP (C++'s nn::Model, replayed as a graph) trains on
batches of 32 shuffled by seed. With --checkpoint-dir it checkpoints each epoch, and --resume
continues a killed run with the batches it would have read. Exits non-zero unless held-out
accuracy passes 90%. tools/test.sh package runs it in a fresh virtualenv.
"""
import argparse

import numpy as np

from loom import data, device, layer, model, opt, tensor, trainer


def circle(n, rng):
    x = rng.uniform(-2, 2, size=(n, 2))
    return x, ((x ** 2).sum(axis=1) < 1).astype(np.int64)  # float64 x and int64 labels are fine


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--checkpoint-dir")
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    train = data.DataLoader(data.ArrayDataset(*circle(1000, rng), name="circle"), batch_size=32, seed=1,
                            drop_last=True)
    held_out = data.DataLoader(data.ArrayDataset(*circle(500, rng), name="circle-held-out"), batch_size=250,
                               shuffle=False)
    dev = device.create_cpu_device()
    dev.SetRandSeed(0)
    net = layer.Sequential(layer.Linear(2, 32, device=dev), layer.ReLU(), layer.Linear(32, 2, device=dev))
    m = model.NativeModel(net, opt.SGD(lr=0.1, momentum=0.9))
    m.compile([tensor.from_numpy(np.zeros((32, 2), np.float32), dev)], is_train=True, use_graph=True)
    r = trainer.Trainer(m, train, held_out, epochs=args.epochs, checkpoint_dir=args.checkpoint_dir,
                        resume=args.resume, eval_at_start=True).fit()
    print(f"own_data: {r['steps']} steps, held-out loss {r['eval']['loss']:.4f}, top-1 {100 * r['eval']['top1']:.1f}%")
    if not r["eval"]["top1"] > 0.9:
        raise SystemExit("own_data: held-out accuracy did not pass 90%")


if __name__ == "__main__":
    main()
