#!/usr/bin/env bash
# loom against its peers on the same models, batch sizes, optimizer and data, in one alternating
# run: tools/loom-bench (eager and the graph modes), Debian's PyTorch 1.13, PyTorch 2.x eager and
# torch.compile of the whole training step (tools/bench_torch.py), JAX jit of the whole step
# (tools/bench_jax.py). Prints one table; every JSON line goes to --out. Quote its medians.
#
#   tools/compare.sh [--peers LIST] [--only MODELS] [--reps N] [--quick] [--with-resnet50]
#                    [--threads N] [--device cpu|cuda] [--out FILE.jsonl] [--install-only]
#
#   --peers LIST     comma-separated, default all: torch113 (Debian's python3-torch),
#                    torch2 (PyTorch 2.x eager), compile (torch.compile of forward, backward and
#                    optimizer step), jax (jax.jit of the same); none: loom only
#   --only MODELS    comma-separated subset of mlp,cnn,resnet18,resnet50
#   --reps N         repetitions of every configuration; the order of the frameworks is reversed
#                    on every other one (default 2; 1 with --quick)
#   --quick          a few steps per run: a smoke test that everything runs, not a measurement
#   --with-resnet50  add ResNet-50 (224x224) at batch 8
#   --threads N      CPU threads for every framework (default: the core count)
#   --install-only   set up the peers' virtual environments and stop
#
# Configurations (issue 14's CPU targets): MLP 784-1024-1024-10 at batch 1, 8 and 64, the small
# CNN at batch 32, ResNet-18 (CIFAR stem) at batch 16; ResNet-50 at batch 8 with --with-resnet50.
#
# The peers are installed here, never by tools/setup.sh: each into its own virtual environment
# under $LOOM_CACHE_DIR (default ~/.cache/loom), from PyPI, at the pinned versions below, with a
# Python >= 3.12 ($LOOM_PEER_PYTHON, else a 3.12 on PATH or pyenv's, else a later one). Done once;
# a later run finds them and says nothing. PyTorch 1.13 is Debian's python3-torch for
# /usr/bin/python3 (apt-get, when missing).
#   LOOM_BUILD_DIR   build folder with loom-bench (default: build)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${LOOM_BUILD_DIR:-build}"
CACHE="${LOOM_CACHE_DIR:-$HOME/.cache/loom}"
DEBIAN_PY=/usr/bin/python3

# Note [Pinned peers]
# The versions the comparison is quoted against. Changing a pin changes the environment's stamp,
# so the next run rebuilds that environment from scratch instead of upgrading it in place.
# PyPI's Linux torch wheel is the CUDA build: it pulls the nvidia-* wheels (about 5 GB) and does
# not import without them, even on a CPU-only machine.
TORCH2_PINS=(torch==2.15.0 numpy==2.5.5)
JAX_PINS=(jax==0.12.0.1 jaxlib==0.12.0.1 numpy==2.5.5)

DEVICE=cpu
QUICK=0
R50=0
OUT=""
THREADS="$(nproc)"
PEERS=torch113,torch2,compile,jax
ONLY=""
REPS=""
INSTALL_ONLY=0
die() { echo "compare: $*" >&2; exit 1; }
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
    --peers) PEERS="$2"; shift 2 ;;
    --peers=*) PEERS="${1#*=}"; shift ;;
    --only) ONLY="$2"; shift 2 ;;
    --only=*) ONLY="${1#*=}"; shift ;;
    --reps) REPS="$2"; shift 2 ;;
    --reps=*) REPS="${1#*=}"; shift ;;
    --install-only) INSTALL_ONLY=1; shift ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "compare: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
[ -n "$REPS" ] || { [ "$QUICK" = 1 ] && REPS=1 || REPS=2; }
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || { echo "compare: --reps must be a positive integer, got '$REPS'" >&2; exit 2; }
[[ "$THREADS" =~ ^[1-9][0-9]*$ ]] || { echo "compare: --threads must be a positive integer, got '$THREADS'" >&2; exit 2; }
[ "$PEERS" = none ] && PEERS=""
want() { [[ ",$PEERS," == *",$1,"* ]]; }
for p in ${PEERS//,/ }; do
  case "$p" in torch113|torch2|compile|jax) ;;
    *) echo "compare: --peers: unknown peer '$p' (torch113, torch2, compile, jax, or none)" >&2; exit 2 ;;
  esac
done
for m in ${ONLY//,/ }; do
  case "$m" in mlp|cnn|resnet18|resnet50) ;;
    *) echo "compare: --only: unknown model '$m' (mlp, cnn, resnet18, resnet50)" >&2; exit 2 ;;
  esac
done
if [ "$DEVICE" = cuda ] && want jax; then
  die "--device cuda: the JAX environment is the CPU build (jaxlib); leave jax out of --peers"
fi

# ---------------------------------------------------------------- the peers' environments

peer_python() {  # a Python >= 3.12 to base the environments on (jax 0.12 needs it); 3.12 first
  local c
  for c in "${LOOM_PEER_PYTHON:-}" python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3 python3.13 \
           "$HOME"/.pyenv/versions/3.1[3-9]*/bin/python3; do
    [ -n "$c" ] || continue
    c="$(command -v "$c" 2>/dev/null)" || continue
    "$c" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && { echo "$c"; return 0; }
  done
  return 1
}

# ensure_venv NAME IMPORT PIN...: $CACHE/venv-NAME with exactly these pins, built when missing or
# when its stamp (the pins and the base Python) differs; prints the environment's python.
ensure_venv() {
  local name="$1" import="$2"; shift 2
  local dir="$CACHE/venv-$name" base stamp log t0
  base="$(peer_python)" ||
    die "the $name environment needs Python >= 3.12 with venv and ensurepip: set LOOM_PEER_PYTHON (pyenv install 3.12)"
  stamp="$* | $("$base" -c 'import sys; print(sys.version.split()[0])')"
  # The stamp is written only after the package imported once; here finding it is enough (fast).
  if [ -f "$dir/.loom-stamp" ] && [ "$(cat "$dir/.loom-stamp")" = "$stamp" ] &&
     "$dir/bin/python" -c "import importlib.util as u, sys; sys.exit(u.find_spec('$import') is None)" 2>/dev/null; then
    echo "$dir/bin/python"; return 0
  fi
  mkdir -p "$CACHE"
  # Two runs at once: the second waits for the first's install, then finds it done.
  exec 9>"$CACHE/venv-$name.lock"
  flock 9
  if [ -f "$dir/.loom-stamp" ] && [ "$(cat "$dir/.loom-stamp")" = "$stamp" ]; then
    exec 9>&-; echo "$dir/bin/python"; return 0
  fi
  log="$CACHE/venv-$name.log"
  echo "compare: installing $* into $dir (from PyPI; log $log)" >&2
  t0=$SECONDS
  rm -rf "$dir"
  { "$base" -m venv "$dir" && "$dir/bin/python" -m pip install --no-input --progress-bar off "$@"; } >"$log" 2>&1 || {
    rm -rf "$dir"
    if grep -qiE 'NewConnectionError|Temporary failure in name resolution|Network is unreachable|ConnectTimeout|ReadTimeout|No matching distribution|ProxyError|SSLError' "$log"; then
      die "could not download $* from PyPI (offline, or PyPI unreachable). Run again with network, or leave out the peers that need it (--peers torch113, or --peers none). Last lines of $log:
$(tail -n 5 "$log")"
    fi
    die "installing $* into $dir failed. Last lines of $log:
$(tail -n 5 "$log")"
  }
  "$dir/bin/python" -c "import $import" >>"$log" 2>&1 || { rm -rf "$dir"; die "$dir: 'import $import' fails after installing (see $log)"; }
  echo "$stamp" >"$dir/.loom-stamp"
  exec 9>&-
  echo "compare: $name environment ready in $((SECONDS - t0)) s ($(du -sh "$dir" | cut -f1))" >&2
  echo "$dir/bin/python"
}

ensure_debian_torch() {
  $DEBIAN_PY -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is None)" 2>/dev/null && return 0
  echo "compare: installing python3-torch (PyTorch 1.13 for $DEBIAN_PY)" >&2
  local sudo=(); [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-torch >/dev/null ||
    die "could not install python3-torch with apt-get (offline?); leave torch113 out of --peers"
  $DEBIAN_PY -c 'import torch' 2>/dev/null || die "$DEBIAN_PY cannot import torch after installing python3-torch"
}

TORCH2_PY=""; JAX_PY=""
want torch113 && ensure_debian_torch
if want torch2 || want compile; then TORCH2_PY="$(ensure_venv torch2 torch "${TORCH2_PINS[@]}")"; fi
if want jax; then JAX_PY="$(ensure_venv jax jax "${JAX_PINS[@]}")"; fi
if [ "$INSTALL_ONLY" = 1 ]; then
  echo "compare: peers ready: ${PEERS:-none} (${TORCH2_PY:+torch2 $TORCH2_PY }${JAX_PY:+jax $JAX_PY})" >&2
  exit 0
fi

# ---------------------------------------------------------------- the runs

BENCH="$BUILD/loom-bench"
[ -x "$BENCH" ] || die "$BENCH not built (tools/setup.sh, or LOOM_BUILD_DIR=...)"
[ -n "$OUT" ] || OUT="$(mktemp /tmp/loom-compare.XXXXXX.jsonl)"
LOG="${OUT%.jsonl}.log"
: >"$OUT"
: >"$LOG"

MODES=eager,graph-dynamic,graph-planned,graph-parallel
[ "$DEVICE" = cuda ] && MODES="$MODES,cuda-graph"

# model batch steps warmup rounds lr (loom-bench's modes take turns in rounds: Note [Rounds]).
# SGD momentum 0.9 throughout; at batch 1 lr 0.01 makes the MLP diverge within 200 steps in both
# frameworks (loss 2.3 -> 115 in PyTorch, -> 2224 in loom), and exploding values time nothing
# useful, so that row trains at lr 0.002 (both converge).
CONFIGS=("mlp 1 200 10 4 0.002" "mlp 8 200 10 4 0.01" "mlp 64 100 5 4 0.01" "cnn 32 30 3 3 0.01"
         "resnet18 16 12 2 3 0.01")
[ "$R50" = 1 ] && CONFIGS+=("resnet50 8 6 2 3 0.01")

# One framework's run of one configuration; its JSON line goes to $OUT, its stderr to $LOG. A
# peer that fails is reported and left out of the table; the run goes on.
run_one() {
  local who="$1"; shift
  local cmd=()
  case "$who" in
    loom) cmd=("$BENCH" --mode "$MODES" --rounds "$rounds") ;;
    torch113) cmd=("$DEBIAN_PY" tools/bench_torch.py) ;;
    torch2) cmd=("$TORCH2_PY" tools/bench_torch.py) ;;
    compile) cmd=("$TORCH2_PY" tools/bench_torch.py --compile) ;;
    jax) cmd=("$JAX_PY" tools/bench_jax.py) ;;
  esac
  local t0=$SECONDS rc=0 lines
  echo "=== $who: ${cmd[*]} $*" >>"$LOG"
  lines="$("${cmd[@]}" "$@" 2>>"$LOG")" || rc=$?
  lines="$(grep '^{' <<<"$lines" || true)"
  if [ "$rc" -ne 0 ] || [ -z "$lines" ]; then
    echo "compare:   $who FAILED (exit $rc; see $LOG)" >&2
    return 0
  fi
  printf '%s\n' "$lines" >>"$OUT"
  echo "compare:   $who: $((SECONDS - t0)) s" >&2
}

ORDER=(loom)
for p in torch113 torch2 compile jax; do want "$p" && ORDER+=("$p"); done
echo "compare: $(nproc) cores (load $(cut -d' ' -f1-3 /proc/loadavg)), $THREADS threads, device $DEVICE, $REPS rep(s)," \
     "order ${ORDER[*]} (reversed every other rep); JSON lines -> $OUT, logs -> $LOG" >&2
T_START=$SECONDS
for ((rep = 0; rep < REPS; ++rep)); do
  order=("${ORDER[@]}")
  if ((rep % 2 == 1)); then
    order=(); for ((i = ${#ORDER[@]} - 1; i >= 0; --i)); do order+=("${ORDER[i]}"); done
  fi
  for cfg in "${CONFIGS[@]}"; do
    read -r model batch steps warmup rounds lr <<<"$cfg"
    [ -z "$ONLY" ] || [[ ",$ONLY," == *",$model,"* ]] || continue
    if [ "$QUICK" = 1 ]; then steps=3; warmup=1; rounds=1; fi
    args=(--model "$model" --batch "$batch" --steps "$steps" --warmup "$warmup" --device "$DEVICE"
          --threads "$THREADS" --lr "$lr" --json)
    echo "compare: rep $((rep + 1))/$REPS, $model batch $batch: ${order[*]}" >&2
    for who in "${order[@]}"; do run_one "$who" "${args[@]}"; done
  done
done
echo "compare: all runs took $((SECONDS - T_START)) s" >&2

$DEBIAN_PY - "$OUT" "$REPS" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
reps = int(sys.argv[2])

def column(r):  # which framework and mode a JSON line is
    if r["tool"] == "loom-bench":
        return "loom " + r["mode"]
    if r["tool"] == "bench_jax":
        return f"JAX {r['jax']} jit"
    kind = "torch.compile" if r["mode"] == "torch-compile" else "eager"
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
      f"{'/'.join(map(str, threads))} thread(s)\n")
print("| model | batch | " + " | ".join(cols) + " | loom best graph / best peer |")
print("|---|---:|" + "---:|" * len(cols) + "---|")
for (model, batch, dev), m in by.items():
    graphs = [(med(rs), c) for c, rs in m.items() if c.startswith("loom graph") or c == "loom cuda-graph"]
    # The issue's target is against the best of PyTorch 2.x eager, torch.compile and JAX; PyTorch 1.x
    # is a second reference, the yardstick only when it is the one peer measured.
    peers = [(med(rs), c) for c, rs in m.items() if not c.startswith(("loom", "torch 1."))] or \
            [(med(rs), c) for c, rs in m.items() if not c.startswith("loom")]
    ratio = "-"
    if graphs and peers:
        (g, gc), (p, pc) = min(graphs), min(peers)
        ratio = f"**{g / p:.2f}** ({gc[5:]} vs {pc})"
    print(f"| {model} | {batch} | " + " | ".join(ms_cell(m.get(c)) for c in cols) + f" | {ratio} |")
print("\nms = median of the timed steps (copy-in, forward, backward, SGD-momentum update, loss read); a ratio "
      "below 1 means loom's fastest graph replay beats the fastest peer (PyTorch 2.x eager, torch.compile, JAX; "
      "PyTorch 1.x only when it is the one peer); the issue's target is <= 0.8.")

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
EOF
echo "compare: JSON lines in $OUT, logs in $LOG" >&2
