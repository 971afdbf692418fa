#!/usr/bin/env bash
# loom against its peers on the same models, batch sizes, optimizer and data, in one alternating
# run: tools/loom-bench (eager and the graph modes), Debian's PyTorch 1.13, PyTorch 2.x eager and
# torch.compile of the whole training step (tools/bench_torch.py), JAX jit of the whole step
# (tools/bench_jax.py). Prints one table; every JSON line goes to --out. Quote its medians.
#
#   tools/compare.sh [--peers LIST] [--only MODELS] [--reps N] [--quick] [--with-resnet50]
#                    [--threads N] [--device cpu|cuda] [--out FILE.jsonl] [--install-only]
#                    [--torch-python PY] [--precision fp32|bf16]
#
#   --peers LIST     comma-separated, default all: torch113 (Debian's python3-torch),
#                    torch2 (PyTorch 2.x eager), compile (torch.compile of forward, backward and
#                    optimizer step), compile-ro (the same in mode reduce-overhead: CUDA graphs),
#                    jax (jax.jit of the same); none: loom only
#   --torch-python PY  run torch2, compile and compile-ro with this Python's own PyTorch instead
#                    of the pinned environment (a GPU machine's, offline); its version is in the JSON
#   --only MODELS    comma-separated subset of mlp,cnn,resnet18,resnet50,gpt
#   --reps N         repetitions of every configuration; the order of the frameworks is reversed
#                    on every other one (default 2; 1 with --quick)
#   --quick          a few steps per run: a smoke test that everything runs, not a measurement
#   --with-resnet50  add ResNet-50 (224x224) at batch 8 (on cuda ResNet-50 is always in, at 32 and 64)
#   --threads N      CPU threads for every framework (default: the core count)
#   --install-only   set up the peers' virtual environments and stop
#   --precision P    fp32 (default) or bf16: loom-bench --precision bf16 against PyTorch AMP
#                    (bench_torch.py --autocast bf16 --channels-last, eager and compiled, both
#                    PyTorch versions) and JAX with bfloat16 products (bench_jax.py --precision
#                    bf16: Note [bf16 in the JAX models])
#
# Configurations (the CPU targets): MLP 784-1024-1024-10 at batch 1, 8 and 64, the small
# CNN at batch 32, ResNet-18 (CIFAR stem) at batch 16, the small GPT (4 layers, width 256, 4 heads,
# context 256, vocabulary 1024) at batch 8 with Adam; ResNet-50 at batch 8 with --with-resnet50.
# On cuda: MLP at batch 1 and 64, the CNN at 32, ResNet-18 at 16, ResNet-50 at 32 and 64, GPT-2
# 124M (12 layers, width 768, 12 heads, context 1024, vocabulary 50304) at batch 8 with Adam.
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
TORCH_PY=""
PRECISION=fp32
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
    --torch-python) TORCH_PY="$2"; shift 2 ;;
    --torch-python=*) TORCH_PY="${1#*=}"; shift ;;
    --precision) PRECISION="$2"; shift 2 ;;
    --precision=*) PRECISION="${1#*=}"; shift ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "compare: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
[ -n "$REPS" ] || { [ "$QUICK" = 1 ] && REPS=1 || REPS=2; }
case "$PRECISION" in fp32|bf16) ;; *) echo "compare: --precision must be fp32 or bf16, got '$PRECISION'" >&2; exit 2 ;; esac
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || { echo "compare: --reps must be a positive integer, got '$REPS'" >&2; exit 2; }
[[ "$THREADS" =~ ^[1-9][0-9]*$ ]] || { echo "compare: --threads must be a positive integer, got '$THREADS'" >&2; exit 2; }
[ "$PEERS" = none ] && PEERS=""
want() { [[ ",$PEERS," == *",$1,"* ]]; }
for p in ${PEERS//,/ }; do
  case "$p" in torch113|torch2|compile|compile-ro|jax) ;;
    *) echo "compare: --peers: unknown peer '$p' (torch113, torch2, compile, compile-ro, jax, or none)" >&2; exit 2 ;;
  esac
done
for m in ${ONLY//,/ }; do
  case "$m" in mlp|cnn|resnet18|resnet50|gpt) ;;
    *) echo "compare: --only: unknown model '$m' (mlp, cnn, resnet18, resnet50, gpt)" >&2; exit 2 ;;
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
if want torch2 || want compile || want compile-ro; then
  if [ -n "$TORCH_PY" ]; then
    "$TORCH_PY" -c 'import torch' 2>/dev/null || die "--torch-python $TORCH_PY cannot import torch"
    TORCH2_PY="$TORCH_PY"
  else
    TORCH2_PY="$(ensure_venv torch2 torch "${TORCH2_PINS[@]}")"
  fi
fi
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
TORCH_MATH=()
if [ "$DEVICE" = cuda ]; then
  MODES=eager,graph-planned,cuda-graph
  # The same float32 math on both sides: loom's default is TF32 for convolutions and matrix
  # products (Note [Float32 math on the GPU]); PyTorch's is TF32 for convolutions only.
  # LOOM_CUDA_FLOAT32_MATH=full runs both in full float32.
  if [ "${LOOM_CUDA_FLOAT32_MATH:-tf32}" = full ]; then TORCH_MATH=(--tf32 off); else TORCH_MATH=(--tf32 on); fi
fi

# model batch steps warmup rounds lr [flags...] (loom-bench's modes take turns in rounds: Note
# [Rounds]; the flags go to every framework, which share their names).
# SGD momentum 0.9 throughout; at batch 1 lr 0.01 makes the MLP diverge within 200 steps in both
# frameworks (loss 2.3 -> 115 in PyTorch, -> 2224 in loom), and exploding values time nothing
# useful, so that row trains at lr 0.002 (both converge).
CONFIGS=("mlp 1 200 10 4 0.002" "mlp 8 200 10 4 0.01" "mlp 64 100 5 4 0.01" "cnn 32 30 3 3 0.01"
         "resnet18 16 12 2 3 0.01" "gpt 8 10 2 2 0.001 --optimizer adam")
[ "$R50" = 1 ] && CONFIGS+=("resnet50 8 6 2 3 0.01")
if [ "$DEVICE" = cuda ]; then  # compute-bound configurations join; each run is seconds on a GPU
  CONFIGS=("mlp 1 200 10 3 0.002" "mlp 64 200 10 3 0.01" "cnn 32 100 10 3 0.01" "resnet18 16 50 5 3 0.01"
           "resnet50 32 30 5 3 0.01" "resnet50 64 20 5 3 0.01"
           "gpt 8 20 5 3 0.0006 --optimizer adam --gpt-layers 12 --gpt-dim 768 --gpt-heads 12 --context 1024 --vocab 50304")
fi

# One framework's run of one configuration; its JSON line goes to $OUT, its stderr to $LOG. A
# peer that fails is reported and left out of the table; the run goes on.
run_one() {
  local who="$1"; shift
  local cmd=() amp=()
  if [ "$PRECISION" = bf16 ]; then
    amp=(--autocast bf16 --channels-last)  # PyTorch AMP as its docs advise (channels_last: convolutions only)
  fi
  case "$who" in
    loom) cmd=("$BENCH" --mode "$MODES" --rounds "$rounds" --precision "$PRECISION") ;;
    torch113) cmd=("$DEBIAN_PY" tools/bench_torch.py "${amp[@]}") ;;
    torch2) cmd=("$TORCH2_PY" tools/bench_torch.py "${TORCH_MATH[@]}" "${amp[@]}") ;;
    compile) cmd=("$TORCH2_PY" tools/bench_torch.py "${TORCH_MATH[@]}" "${amp[@]}" --compile) ;;
    compile-ro) cmd=("$TORCH2_PY" tools/bench_torch.py "${TORCH_MATH[@]}" "${amp[@]}" --compile --compile-mode reduce-overhead) ;;
    jax) cmd=("$JAX_PY" tools/bench_jax.py --precision "$PRECISION") ;;
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
for p in torch113 torch2 compile compile-ro jax; do want "$p" && ORDER+=("$p"); done
echo "compare: $(nproc) cores (load $(cut -d' ' -f1-3 /proc/loadavg)), $THREADS threads, device $DEVICE, $REPS rep(s)," \
     "order ${ORDER[*]} (reversed every other rep); JSON lines -> $OUT, logs -> $LOG" >&2
T_START=$SECONDS
for ((rep = 0; rep < REPS; ++rep)); do
  order=("${ORDER[@]}")
  if ((rep % 2 == 1)); then
    order=(); for ((i = ${#ORDER[@]} - 1; i >= 0; --i)); do order+=("${ORDER[i]}"); done
  fi
  for cfg in "${CONFIGS[@]}"; do
    read -r model batch steps warmup rounds lr extra <<<"$cfg"
    [ -z "$ONLY" ] || [[ ",$ONLY," == *",$model,"* ]] || continue
    if [ "$QUICK" = 1 ]; then steps=3; warmup=1; rounds=1; fi
    args=(--model "$model" --batch "$batch" --steps "$steps" --warmup "$warmup" --device "$DEVICE"
          --threads "$THREADS" --lr "$lr" --json)
    # shellcheck disable=SC2206  # the extra flags split into words
    [ -z "${extra:-}" ] || args+=($extra)
    echo "compare: rep $((rep + 1))/$REPS, $model batch $batch: ${order[*]}" >&2
    for who in "${order[@]}"; do run_one "$who" "${args[@]}"; done
  done
done
echo "compare: all runs took $((SECONDS - T_START)) s" >&2

REPORT_PY="$DEBIAN_PY"; [ -x "$REPORT_PY" ] || REPORT_PY=python3  # a GPU machine has no Debian Python
"$REPORT_PY" tools/compare_report.py "$OUT" "$REPS"
echo "compare: JSON lines in $OUT, logs in $LOG" >&2
