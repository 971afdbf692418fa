#!/usr/bin/env bash
# loom against PyTorch on the same models, batch sizes, optimizer and data: runs tools/loom-bench
# (eager and the graph modes) and tools/bench_torch.py, alternating per configuration, and prints
# the ratios. One run; quote its medians.
#
#   tools/compare.sh [--device cpu|cuda] [--threads N] [--quick] [--with-resnet50] [--out FILE.jsonl]
#
# Configurations (the issue's CPU targets): MLP 784-1024-1024-10 at batch 1, 8 and 64, the small
# CNN at batch 32, ResNet-18 (CIFAR stem) at batch 16; ResNet-50 at batch 8 with --with-resnet50.
# --quick: fewer steps (a smoke run, not a measurement). --threads: CPU threads for both (default:
# the core count; 1 is the fair setting on a machine other jobs load: OpenMP's spinning barriers
# collapse under oversubscription).
#   LOOM_BUILD_DIR   build folder with loom-bench (default: build)
# Every JSON line goes to --out (default: a file under /tmp, printed at the end).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${LOOM_BUILD_DIR:-build}"
PY=/usr/bin/python3
if ! $PY -c 'import torch' 2>/dev/null; then  # the comparison's one extra dependency
  echo "compare: installing python3-torch (PyTorch for /usr/bin/python3)"
  SUDO=(); [ "$(id -u)" -eq 0 ] || SUDO=(sudo)
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-torch >/dev/null ||
    { echo "compare: could not install python3-torch" >&2; exit 1; }
fi
DEVICE=cpu
QUICK=0
R50=0
OUT=""
THREADS="$(nproc)"
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --device=*) DEVICE="${1#*=}"; shift ;;
    --quick) QUICK=1; shift ;;
    --threads) THREADS="$2"; shift 2 ;;
    --threads=*) THREADS="${1#*=}"; shift ;;
    --with-resnet50) R50=1; shift ;;
    --out) OUT="$2"; shift 2 ;;
    --out=*) OUT="${1#*=}"; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "compare: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
BENCH="$BUILD/loom-bench"
[ -x "$BENCH" ] || { echo "compare: $BENCH not built (tools/setup.sh, or LOOM_BUILD_DIR=...)" >&2; exit 1; }
$PY -c 'import torch' 2>/dev/null || { echo "compare: PyTorch missing for $PY (apt-get install python3-torch)" >&2; exit 1; }
[ -n "$OUT" ] || OUT="$(mktemp /tmp/loom-compare.XXXXXX.jsonl)"
: >"$OUT"

MODES=eager,graph-dynamic,graph-planned,graph-parallel
[ "$DEVICE" = cuda ] && MODES="$MODES,cuda-graph"

# model batch steps warmup rounds lr (loom-bench's modes take turns in rounds: Note [Rounds]).
# SGD momentum 0.9 throughout; at batch 1 lr 0.01 makes the MLP diverge within 200 steps in both
# frameworks (loss 2.3 -> 115 in PyTorch, -> 2224 in loom), and exploding values time nothing
# useful, so that row trains at lr 0.002 (both converge).
CONFIGS=("mlp 1 200 10 4 0.002" "mlp 8 200 10 4 0.01" "mlp 64 100 5 4 0.01" "cnn 32 30 3 3 0.01"
         "resnet18 16 12 2 3 0.01")
[ "$R50" = 1 ] && CONFIGS+=("resnet50 8 6 2 3 0.01")

echo "compare: $(nproc) cores (load $(cut -d' ' -f1-3 /proc/loadavg)), $THREADS threads, device $DEVICE, loom modes $MODES; JSON lines -> $OUT" >&2
for cfg in "${CONFIGS[@]}"; do
  read -r model batch steps warmup rounds lr <<<"$cfg"
  if [ "$QUICK" = 1 ]; then steps=3; warmup=1; rounds=1; fi
  args=(--model "$model" --batch "$batch" --steps "$steps" --warmup "$warmup" --device "$DEVICE" --threads "$THREADS" --lr "$lr" --json)
  echo "compare: $model batch $batch: loom-bench" >&2
  "$BENCH" "${args[@]}" --mode "$MODES" --rounds "$rounds" 2>/dev/null | grep '^{' >>"$OUT"
  echo "compare: $model batch $batch: bench_torch.py" >&2
  $PY tools/bench_torch.py "${args[@]}" 2>/dev/null | grep '^{' >>"$OUT"
done

$PY - "$OUT" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault((r["model"], r["batch"], r["device"].split(":")[0]), {})[r["mode"]] = r
mib = lambda b: "-" if b is None else f"{b / 2**20:.1f}"
threads = sorted({r["threads"] for r in rows})
print(f"\n## loom vs PyTorch: time per training step (median) and memory, {'/'.join(map(str, threads))} thread(s)\n")
print("| model | batch | torch ms | loom eager ms | loom graph-planned ms | loom graph-parallel ms | "
      "torch / loom best graph | graph-planned vs eager | torch RSS growth MiB | loom planned RSS growth MiB | "
      "loom eager peak MiB | loom planned peak MiB | arena / lower bound | arena <= eager working peak |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for (model, batch, dev), m in by.items():
    t, e, p, q = m.get("torch-eager"), m.get("eager"), m.get("graph-planned"), m.get("graph-parallel")
    ms = lambda r: f"{r['ms_per_step_median']:.3f}" if r else "-"
    graphs = [r for r in (m.get("graph-dynamic"), p, q, m.get("cuda-graph")) if r]
    best = min(graphs, key=lambda r: r["ms_per_step_median"]) if graphs else None
    vs_torch = f"{t['ms_per_step_median'] / best['ms_per_step_median']:.2f}x ({best['mode']})" if t and best else "-"
    vs_eager = f"{e['ms_per_step_median'] / p['ms_per_step_median']:.2f}x" if e and p else "-"
    torch_mem = t and (t["peak_bytes"] if dev == "cuda" else t["rss_peak_delta_bytes"])
    loom_mem = p and (p["peak_bytes"] if dev == "cuda" else p["rss_peak_delta_bytes"])
    ratio = f"{p['arena_bytes'] / p['lower_bound_bytes']:.3f}" if p and p["lower_bound_bytes"] else "-"
    under = ("yes" if p["arena_bytes"] <= e["working_peak_bytes"] else "NO") if p and e else "-"
    print(f"| {model} | {batch} | {ms(t)} | {ms(e)} | {ms(p)} | {ms(q)} | {vs_torch} | {vs_eager} | "
          f"{mib(torch_mem)} | {mib(loom_mem)} | {mib(e and e['peak_bytes'])} | {mib(p and p['peak_bytes'])} | "
          f"{ratio} | {under} |")
print("\nms = median ms per step (copy-in, forward, backward, SGD update, loss read). torch / loom best graph > 1 "
      "means loom's fastest graph replay beats PyTorch. Memory on the CPU: RSS growth = VmHWM at the end minus "
      "VmRSS before the model was built, for both; on CUDA: allocator peaks. loom peak = loom's allocator peak "
      "(parameters, momentum, inputs, intermediates). The data is the same bytes in both (data_checksum).")
EOF
echo "compare: JSON lines in $OUT" >&2
