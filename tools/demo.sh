#!/usr/bin/env bash
# tools/demo.sh: the main job in one go: set-up (tools/setup.sh), then the small CNN (conv-bn-relu-pool x2,
# linear; 3x32x32, batch 32) trained on loom-bench's embedded synthetic data, eagerly and as
# replayed graphs (dynamic recycling, planned arena, parallel replay), on the CPU and, when a GPU
# is visible and loom was built with CUDA, on the GPU (with CUDA-graph replay too). Prints the
# graph-vs-eager tables, the per-op trace and, last, the path of the memory-timeline plot.
# Under two minutes on a 2-core machine once built.
#   LOOM_BUILD_DIR   build folder (default: build)
#   LOOM_DEMO_OUT    where the timeline, trace and plot go (default: <build>/demo)
#   LOOM_DEMO_STEPS  timed steps per mode (default 60)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${LOOM_BUILD_DIR:-build}"
OUT="${LOOM_DEMO_OUT:-$BUILD/demo}"
STEPS="${LOOM_DEMO_STEPS:-60}"
PY=/usr/bin/python3

bash tools/setup.sh
start=$SECONDS
mkdir -p "$OUT"
BENCH="$BUILD/loom-bench"
[ -x "$BENCH" ] || { echo "demo: $BENCH was not built" >&2; exit 1; }

echo
echo "demo: small CNN, batch 32, CPU ($(nproc) cores): eager vs graph replay"
"$BENCH" --model cnn --batch 32 --steps "$STEPS" --warmup 3 --rounds 4 \
  --mode eager,graph-dynamic,graph-planned,graph-parallel --timeline "$OUT/cpu" 2>"$OUT/cpu.log" ||
  { cat "$OUT/cpu.log" >&2; exit 1; }

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo
  echo "demo: small CNN, batch 32, GPU: eager vs graph replay"
  if "$BENCH" --model cnn --batch 32 --steps "$STEPS" --warmup 3 --rounds 4 --device cuda \
       --mode eager,graph-dynamic,graph-planned,cuda-graph --timeline "$OUT/cuda" 2>"$OUT/cuda.log"; then
    :
  else
    echo "demo: GPU run skipped or failed (see $OUT/cuda.log):" >&2
    tail -n 3 "$OUT/cuda.log" >&2
  fi
else
  echo
  echo "demo: no GPU visible, GPU run skipped"
fi

echo
echo "demo: per-op trace of one planned replay (Chrome trace JSON; open in https://ui.perfetto.dev): $OUT/cpu/trace.json"
echo "demo: done in $((SECONDS - start))s after set-up"
if $PY -c 'import matplotlib' 2>/dev/null; then
  [ -f "$OUT/cuda/meta.json" ] && $PY tools/plot_memory.py "$OUT/cuda" >/dev/null &&
    echo "demo: GPU memory timeline plot: $OUT/cuda/memory_timeline.png"
  echo "demo: memory timeline plot (eager, dynamic recycling, planned arena, lower bound):"
  $PY tools/plot_memory.py "$OUT/cpu"
else
  echo "demo: matplotlib missing (apt-get install python3-matplotlib): no plot; the timeline CSVs are in $OUT/cpu"
fi
