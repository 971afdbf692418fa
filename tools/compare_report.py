#!/usr/bin/env python3
"""The tables tools/compare.sh prints from its JSON lines (one per framework, configuration and
repetition, in the order they ran).

    tools/compare_report.py FILE.jsonl REPS
"""
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
reps = int(sys.argv[2])

def column(r):  # which framework and mode a JSON line is
    if r["tool"] == "loom-bench":
        return "loom " + r["mode"]
    if r["tool"] == "bench_jax":
        return f"JAX {r['jax']} jit"
    kind = "torch.compile" if r["mode"] == "torch-compile" else "eager"
    if r["mode"] == "torch-compile" and r.get("compile_mode", "default") != "default":
        kind += " " + r["compile_mode"]
    return f"torch {r['torch'].split('a')[0].split('+')[0]} {kind}"

by = {}  # (model, batch, device) -> column -> [rows, one per repetition]
for r in rows:
    by.setdefault((r["model"], r["batch"], r["device"].split(":")[0]), {}).setdefault(column(r), []).append(r)
LOOM_MODES = ["eager", "graph-dynamic", "graph-planned", "graph-parallel", "cuda-graph"]
def rank(c):  # torch 1.x, torch 2.x eager, torch.compile, JAX, then loom's modes
    if c.startswith("loom"):
        return (4, LOOM_MODES.index(c[5:]), c)
    return (0 if c.startswith("torch 1.") else 2 if "compile" in c else 1 if c.startswith("torch") else 3, 0, c)
cols = sorted({c for m in by.values() for c in m}, key=rank)
med = lambda rs, k="ms_per_step_median": statistics.median(r[k] for r in rs)
mib = lambda b: "-" if b is None else f"{b / 2**20:.0f}"

def ms_cell(rs):
    if not rs:
        return "-"
    v = sorted(r["ms_per_step_median"] for r in rs)
    return f"{v[0]:.2f}" if len(v) == 1 or f"{v[0]:.2f}" == f"{v[-1]:.2f}" else f"{v[0]:.2f}–{v[-1]:.2f}"

threads = sorted({r["threads"] for r in rows})
print(f"\n## Time per training step: median ms ({reps} rep(s) in alternating order; a range is the reps' medians), "
      f"{'/'.join(map(str, threads))} thread(s), precision {'/'.join(sorted({r.get('precision') or 'fp32' for r in rows}))}"
      " (bf16: loom's --precision bf16, PyTorch's torch.autocast bf16)\n")
print("| model | batch | " + " | ".join(cols) + " | loom best graph / best peer | loom eager / best graph |")
print("|---|---:|" + "---:|" * len(cols) + "---|---:|")

def per_rep(m, cs, i):  # the best of columns cs' medians in repetition i of m (None: one is missing)
    v = [m[c][i]["ms_per_step_median"] for c in cs if i < len(m[c])]
    return min(v) if len(v) == len(cs) else None

for (model, batch, dev), m in by.items():
    graph_cols = [c for c in m if c.startswith("loom graph") or c == "loom cuda-graph"]
    # The target is against the best of PyTorch 2.x eager, torch.compile and JAX; PyTorch 1.x
    # is a second reference, the yardstick only when it is the one peer measured.
    peer_cols = [c for c in m if not c.startswith(("loom", "torch 1."))] or [c for c in m if not c.startswith("loom")]
    graphs = [(med(m[c]), c) for c in graph_cols]
    peers = [(med(m[c]), c) for c in peer_cols]
    ratio = replay = "-"
    if graphs and peers:
        (g, gc), (p, pc) = min(graphs), min(peers)
        ratio = f"**{g / p:.2f}** ({gc[5:]} vs {pc})"
        # Each repetition's own ratio, best against best within it: how far the noise moves the median.
        each = [(per_rep(m, graph_cols, i), per_rep(m, peer_cols, i)) for i in range(reps)]
        each = [f"{a / b:.2f}" for a, b in each if a and b]
        if len(each) > 1:
            ratio += "; reps " + " ".join(each)
    if graphs and "loom eager" in m:
        replay = f"{med(m['loom eager']) / min(graphs)[0]:.2f}x"
    print(f"| {model} | {batch} | " + " | ".join(ms_cell(m.get(c)) for c in cols) + f" | {ratio} | {replay} |")
print("\nms = median of the timed steps (copy-in, forward, backward, the update: SGD with momentum, Adam on the GPT; loss read); a ratio "
      "below 1 means loom's fastest graph replay beats the fastest peer (PyTorch 2.x eager, torch.compile, JAX; "
      "PyTorch 1.x only when it is the one peer); the issue's target is <= 0.8. The ratio is of the medians over "
      "the reps; 'reps' lists each repetition's own ratio. loom eager / best graph: the replay's speed-up over "
      "eager (target >= 1.15x on the CNN and the ResNets).")

print("\n## Memory: RSS growth MiB (VmHWM at the end minus VmRSS before the model was built; median of the reps)\n")
print("| model | batch | " + " | ".join(cols) + " | loom planned arena / lower bound |")
print("|---|---:|" + "---:|" * len(cols) + "---:|")
for (model, batch, dev), m in by.items():
    cell = lambda c: mib(med(m[c], "rss_peak_delta_bytes")) if c in m else "-"
    p = m.get("loom graph-planned")
    bound = f"{p[0]['arena_bytes'] / p[0]['lower_bound_bytes']:.3f}" if p and p[0].get("lower_bound_bytes") else "-"
    print(f"| {model} | {batch} | " + " | ".join(cell(c) for c in cols) + f" | {bound} |")
print("\nThe peers' growth includes their compilers' (torch.compile, XLA) memory; loom's, its capture and plan.")

print("\n## Arithmetic: GFLOP/s (fraction of the FP32 FMA peak loom-bench measured at its start)\n")
print("| model | batch | GFLOP per step | FMA peak GFLOP/s | " + " | ".join(cols) + " |")
print("|---|---:|---:|---:|" + "---:|" * len(cols))
for (model, batch, dev), m in by.items():
    loom = [r for c, rs in m.items() if c.startswith("loom") for r in rs]
    flops = next((r["flops_per_step"] for r in loom if r.get("flops_per_step")), None)
    peaks = [r["fma_peak_gflops"] for r in loom if r.get("fma_peak_gflops")]
    peak = statistics.median(peaks) if peaks else None
    def cell(c):  # loom's rows: its own fields; the peers: loom's FLOP count of the same model
        if c not in m or not flops:
            return "-"
        g = statistics.median(r["gflops_per_s"] for r in m[c]) if c.startswith("loom") else flops / (med(m[c]) * 1e6)
        return f"{g:.1f} ({g / peak:.0%})" if peak else f"{g:.1f}"
    print(f"| {model} | {batch} | {f'{flops / 1e9:.3f}' if flops else '-'} | {f'{peak:.1f}' if peak else '-'} | "
          + " | ".join(cell(c) for c in cols) + " |")
print("\nFLOPs: loom-bench's count of the step's matrix products and convolutions (forward and backward), used "
      "for every framework, since all run the same model. The peak is measured under whatever else loads the machine.")

print("\n## Did every framework train? loss at the first step -> at the last (first rep)\n")
print("| model | batch | " + " | ".join(cols) + " |")
print("|---|---:|" + "---|" * len(cols))
bad = []
for (model, batch, dev), m in by.items():
    for c, rs in m.items():
        bad += [f"{model} b{batch} {c}" for r in rs if not r["last_loss"] < r["first_loss"]]
    cell = lambda c: f"{m[c][0]['first_loss']:.3f} -> {m[c][0]['last_loss']:.3f}" if c in m else "-"
    print(f"| {model} | {batch} | " + " | ".join(cell(c) for c in cols) + " |")
print(f"\nThe loss fell in every run{'' if not bad else ' EXCEPT: ' + ', '.join(bad)}. Same data bytes in every "
      f"framework: {'yes' if all(len({r['data_checksum'] for rs in m.values() for r in rs}) == 1 for m in by.values()) else 'NO'} "
      "(data_checksum).")
