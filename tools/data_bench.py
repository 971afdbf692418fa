#!/usr/bin/env python3
"""Epoch time of a model fed by a Python dataset with a slow __getitem__, reading on the calling
thread (prefetch=0) against the loader's reading thread (prefetch=N): Note [Reading ahead on a
thread] in loom/data.py. One JSON line per run; runs alternate between the settings.

  tools/data_bench.py [--work sleep|numpy] [--reps 3] [--batches 20]

sleep: each item sleeps --sleep-us (a read from disk or network); numpy: each item computes a
64 x 64 float32 matrix product and a sort (numpy work, partly without the interpreter lock).
The model is an MLP 256 -> --width -> 10 (a C++ NativeModel in a graph), batch 64; the time of
its step alone is printed first (prefetch "none": the batches made beforehand)."""
import argparse
import json
import time

import numpy as np

from loom import data, device, layer, model, opt, tensor


class Slow(data.Dataset):
    def __init__(self, n, work, sleep_s):
        rng = np.random.default_rng(0)
        self.x, self.y = rng.standard_normal((n, 256)).astype(np.float32), rng.integers(0, 10, n)
        self.work, self.sleep_s = work, sleep_s
        self.m = rng.standard_normal((64, 64)).astype(np.float32)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.work == "sleep":
            time.sleep(self.sleep_s)
        else:
            np.sort((self.m @ self.m).ravel())
        return self.x[i], int(self.y[i])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", choices=["sleep", "numpy"], default="sleep")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--sleep-us", type=float, default=50)
    a = ap.parse_args()
    dev = device.create_cpu_device()
    net = layer.Sequential(layer.Linear(256, a.width, device=dev), layer.ReLU(),
                           layer.Linear(a.width, 10, device=dev))
    m = model.NativeModel(net, opt.SGD(lr=0.01))
    m.compile([tensor.from_numpy(np.zeros((64, 256), np.float32), dev)], is_train=True, use_graph=True)
    ds = Slow(64 * a.batches, a.work, a.sleep_us * 1e-6)
    ready = list(data.DataLoader(ds, batch_size=64, prefetch=0, device=dev))
    start = time.perf_counter()
    for x, y in ready:
        m.train_one_batch(x, y)[1].to_numpy()
    print(json.dumps({"work": a.work, "prefetch": "none", "batches": a.batches,
                      "ms_per_batch": round(1e3 * (time.perf_counter() - start) / a.batches, 2)}), flush=True)
    for rep in range(a.reps):
        for prefetch in (0, a.prefetch):
            loader = data.DataLoader(ds, batch_size=64, seed=rep, prefetch=prefetch, device=dev)
            start = time.perf_counter()
            for x, y in loader:
                m.train_one_batch(x, y)[1].to_numpy()  # the step's end
            seconds = time.perf_counter() - start
            print(json.dumps({"work": a.work, "prefetch": prefetch, "rep": rep, "batches": a.batches,
                              "ms_per_batch": round(1e3 * seconds / a.batches, 2)}), flush=True)


if __name__ == "__main__":
    main()
