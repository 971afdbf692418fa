#!/usr/bin/env bash
# tools/gpu_check.sh: everything GPU in one go, on a machine that has one (CPU CI has none: there
# the CUDA backend is compiled, and the kernel table checked, but nothing runs on a GPU).
#
#   tools/gpu_check.sh                  from a checkout: set-up and build first (tools/setup.sh:
#                                       apt and the network), then the parts below
#   tools/gpu_check.sh --bundle FILE    from an archive of tools/gpu_bundle.sh, on a bare, offline
#                                       GPU machine: no build, no network; starts at once
#
# The parts, each under its own time limit, all within LOOM_GPU_BUDGET_S seconds (default 330,
# so that a 6-minute slot still writes the summary), each running even after another failed:
#   env          nvidia-smi, the bundle's manifest, every library the binaries need found
#   cpp-gpu      the GPU suite (test_cuda) and the CUDA checkpoint test, LOOM_REQUIRE_GPU=1 so
#                that "no GPU" and CUDA setup errors fail instead of skipping (Note [No GPU, or a
#                broken one] in src/core/device.h); GoogleTest's JSON kept; a failing run is
#                triaged (tools/gtest_triage.py: each failed test's verdict, real or a cascade of
#                another, and the tests a crash kept from running, in test_cuda_triage.json)
#   python-gpu   the Python GPU tests (test_cuda.py, test_device.py)
#   tf32-digits  the digits CNN trained on the GPU in full float32 and in TF32, same seed: held-out
#                accuracies within 0.5 point (Note [Float32 math on the GPU])
#   bench        loom-bench on cuda: MLP b64, small CNN b32, ResNet-18 b16, ResNet-50 b32, in eager,
#                planned and CUDA-graph replay; one JSON line per run, with the kernels cuDNN and
#                cuBLAS ran; then ResNet-50 b32 planned under memory budgets of 0.8 and 0.6 x its
#                arena (recomputing batch norm, ReLU and adds, no convolution: docs/benchmarks.md,
#                "ResNet-50's memory plan"), for their peaks and times against the run without
#   profile      where a step's time goes on the GPU, op by op: one profiled planned replay
#                (loom-bench --timeline) of ResNet-50 b32 in float32 (TF32) and in bf16, and of
#                GPT-2 124M b8 x 1024 in bf16, each summed by op kind (tools/trace_ops.py) into
#                profile-NAME.txt and .json
#   compare      tools/compare.sh --device cuda: loom against PyTorch eager and torch.compile (the
#                machine's own PyTorch), alternating; LOOM_GPU_COMPARE gives compare.sh other
#                flags (e.g. "--peers torch2,compile,compile-ro --only resnet50" in a second call
#                with LOOM_GPU_PARTS=compare: each torch.compile of ResNet-50 takes a minute)
# Not in the default set (a second call, LOOM_GPU_PARTS=precision,compare-bf16, about 5 minutes):
#   precision    loom-bench on cuda in bf16 and fp16 (ResNet-50 b32, the GPT), planned and CUDA-graph
#                replay; a per-op trace of one bf16 replay of each (timeline-*-bf16/trace.json);
#                tools/precision_digits.py on cuda (the digits CNN from 3 seeds in float32,
#                bf16 and fp16: held-out top-1 and loss curves; issue 31's accuracy target)
#   gpt2         loom-bench on cuda: GPT-2 124M (b8 x 1024) in bf16, CUDA-graph replay, with no memory
#                budget, at 0.7 x its arena, with --no-fused-loss, and with the passes bf16_attention
#                and group_updates off (what they save); the small GPT in bf16 with
#                LOOM_CUDNN_ATTENTION=0
#                (a third call, or LOOM_GPU_PARTS=precision,gpt2,compare-bf16 LOOM_GPU_BUDGET_S=460)
#   compare-bf16 tools/compare.sh --device cuda --precision bf16: loom bf16 against PyTorch AMP
#                (channels_last), eager and torch.compile, ResNet-50 and the GPT
#   layouts      ResNet-50 b32 in CUDA-graph replay, float32 (TF32) and bf16, with NHWC convolution
#                plans and NHWC regions (the default), NHWC plans without the layout pass (every
#                convolution transposes), the default without the pass fuse_bn_relu (batch norm,
#                the shortcut's add and ReLU as separate kernels: Note [Batch norm with its ReLU]),
#                and NCHW plans (LOOM_CUDNN_LAYOUT=nchw), taking turns; each JSON line tagged
#                "cudnn_layout" (Note [NHWC convolutions on cuDNN]). Also on request (LOOM_GPU_LAYOUTS):
#                nhwc-nondet, the default with nondeterministic algorithms allowed to win
#                (LOOM_CUDNN_DETERMINISTIC=0; every JSON line's "kernel_counters" already gives
#                the measured milliseconds of the chosen algorithms against the fastest of any
#                determinism: Note [Measured algorithms]); nhwc-ungrouped, the default with each
#                update its own launch (--pass group_updates=off: Note [Small updates grouped])
#                (with the second call: LOOM_GPU_PARTS=precision,layouts,compare-bf16)
# Logs, JSON and summary.json (one line per part) go to LOOM_GPU_OUT, else $OUT when set, else
# <build>/gpu_check; before the summary, digest.txt has one line per loom-bench run (ms, peak,
# what the measured convolutions cost: tools/bench_digest.py). The exit status is non-zero when
# any part failed.
#   LOOM_BUILD_DIR     build folder (default: build)
#   LOOM_GPU_PYTHON    the Python with PyTorch (default: python3 with a bundle, else /usr/bin/python3)
#   LOOM_GPU_STEPS     timed steps per loom-bench mode (default 30)
#   LOOM_GPU_PARTS     comma-separated parts to run (default: all)
#   LOOM_GPU_WORK      where a bundle is unpacked (default: a temporary folder)
#   LOOM_GPU_COMPARE_BF16  compare.sh's selection for compare-bf16 (default: torch2 and compile on
#                      ResNet-50 and the GPT)
#   LOOM_GPU_PRECISIONS  the precision part's loom-bench precisions (default: "bf16 fp16")
#   LOOM_GPU_LAYOUTS   the layouts part's runs, in turn (default: "nchw nhwc nhwc-unplanned nhwc-unfused nhwc";
#                      also nhwc-nondet)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUNDLE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE="${2:-}"; shift 2 || { echo "gpu_check: --bundle needs a file" >&2; exit 2; } ;;
    --bundle=*) BUNDLE="${1#*=}"; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done

T0=$SECONDS
if [ -n "$BUNDLE" ]; then
  [ -f "$BUNDLE" ] || { echo "gpu_check: --bundle: no file '$BUNDLE'" >&2; exit 2; }
  BUNDLE="$(cd "$(dirname "$BUNDLE")" && pwd)/$(basename "$BUNDLE")"
  WORK="${LOOM_GPU_WORK:-$(mktemp -d /tmp/loom-gpu-check.XXXXXX)}"
  mkdir -p "$WORK"
  echo "gpu_check: unpacking $BUNDLE into $WORK"
  tar -C "$WORK" -xJf "$BUNDLE" || { echo "gpu_check: cannot unpack $BUNDLE" >&2; exit 2; }
  [ -f "$WORK/loom-gpu/bundle.json" ] || { echo "gpu_check: $BUNDLE is not a tools/gpu_bundle.sh archive" >&2; exit 2; }
  ROOT="$WORK/loom-gpu"
fi
cd "$ROOT"
BUILD="${LOOM_BUILD_DIR:-build}"
DEST="${LOOM_GPU_OUT:-${OUT:-$BUILD/gpu_check}}"
STEPS="${LOOM_GPU_STEPS:-30}"
BUDGET="${LOOM_GPU_BUDGET_S:-330}"
PARTS="${LOOM_GPU_PARTS:-env,cpp-gpu,python-gpu,tf32-digits,bench,profile,compare}"
if [ -n "$BUNDLE" ]; then PY="${LOOM_GPU_PYTHON:-python3}"; else PY="${LOOM_GPU_PYTHON:-/usr/bin/python3}"; fi
export LOOM_REQUIRE_GPU=1
mkdir -p "$DEST"
DEST="$(cd "$DEST" && pwd)"
: >"$DEST/summary.json"

# ---- the libraries: the bundle's own, then CUDA's wherever this machine keeps them
cuda_lib_dirs() {  # the folders holding CUDA's libraries: the toolkit, /opt, Python's nvidia packages
  local roots=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu /opt)
  local site
  site="$("$PY" -c 'import nvidia, os; print(" ".join(os.path.dirname(p) for p in nvidia.__path__))' 2>/dev/null)" &&
    roots+=($site)
  local lib
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2 libnvrtc.so.13; do
    find "${roots[@]}" -name "$lib" \( -type f -o -type l \) 2>/dev/null | head -n 1 | xargs -r dirname
  done | awk '!seen[$0]++' | paste -sd: -
}
if [ -n "$BUNDLE" ]; then
  export LD_LIBRARY_PATH="$ROOT/lib:$ROOT/$BUILD:$(cuda_lib_dirs)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PYTHONPATH="$ROOT/$BUILD/python:$ROOT/pylib${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$ROOT/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
fi

names=()
results=()
json_line() {  # json_line NAME STATUS SECONDS LOG
  printf '{"part": "%s", "status": "%s", "seconds": %d, "log": "%s"}\n' "$1" "$2" "$3" "$4" >>"$DEST/summary.json"
}
part() {  # part NAME LIMIT_S CMD...: runs CMD (under timeout) with its output in DEST/NAME.log
  local name="$1" limit="$2"
  shift 2
  [[ ",$PARTS," == *",$name,"* ]] || return 0
  local left=$(( BUDGET - (SECONDS - T0) ))
  names+=("$name")
  if (( left < 10 )); then
    results+=("SKIPPED  (the ${BUDGET} s budget is spent)")
    json_line "$name" skipped 0 ""
    return 0
  fi
  (( limit > left )) && limit=$left
  local t0=$SECONDS rc=0
  echo "gpu_check: $name (at most $limit s)"
  if [ "$(type -t "$1")" = function ]; then  # a part_* function: exported, run by a child bash
    timeout --kill-after=10 "$limit" bash -c "$1" >"$DEST/$name.log" 2>&1 || rc=$?
  else
    timeout --kill-after=10 "$limit" "$@" >"$DEST/$name.log" 2>&1 || rc=$?
  fi
  local took=$(( SECONDS - t0 ))
  if (( rc == 0 )); then
    results+=("passed   $took s")
    json_line "$name" passed "$took" "$name.log"
  else
    local why="exit $rc"
    (( rc == 124 || rc == 137 )) && why="timed out after $limit s"
    results+=("FAILED   $took s ($why; see $DEST/$name.log)")
    json_line "$name" failed "$took" "$name.log"
    tail -n 15 "$DEST/$name.log"
  fi
}

part_env() {
  nvidia-smi || echo "(no nvidia-smi)"
  [ -f bundle.json ] && cat bundle.json
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' ||
    echo "(no PyTorch for $PY: the compare part will fail)"
  local missing=0 f
  for f in "$BUILD"/test_cuda "$BUILD"/loom-bench "$BUILD"/libloom.so "$BUILD"/python/loom/_core*.so; do
    if ldd "$f" | grep "not found"; then echo "$f: libraries not found (above)"; missing=1; fi
  done
  return "$missing"
}

part_cpp() {
  local rc=0
  # A failing run is triaged in fresh processes: the real failures from their cascades (a bad
  # kernel poisons the CUDA context for every later test) and the tests a crash kept from running.
  "$PY" tools/gtest_triage.py "$BUILD/test_cuda" --deadline-s 120 --report "$DEST/test_cuda_triage.json" \
    -- --gtest_output="json:$DEST/test_cuda.json" || rc=1
  "$BUILD/test_io" --gtest_filter='CheckpointCuda*' --gtest_output="json:$DEST/test_io_cuda.json" || rc=1
  return "$rc"
}

part_python() {
  "$PY" -m pytest -q -p no:cacheprovider test/python/test_cuda.py test/python/test_device.py
}

part_tf32() {
  "$PY" tools/tf32_digits.py --json "$DEST/tf32-digits.json"
}

part_bench() {
  local rc=0 m
  for m in "mlp 64" "cnn 32" "resnet18 16" "resnet50 32" "gpt 8 --optimizer adam"; do
    set -- $m
    "$BUILD/loom-bench" --device cuda --model "$1" --batch "$2" "${@:3}" --steps "$STEPS" --warmup 3 --rounds 2 \
      --mode eager,graph-planned,cuda-graph --json >>"$DEST/bench.jsonl" || rc=1
  done
  for f in 0.8 0.6; do
    "$BUILD/loom-bench" --device cuda --model resnet50 --batch 32 --memory-budget-fraction "$f" --steps "$STEPS" \
      --warmup 3 --rounds 2 --mode graph-planned,cuda-graph --json >>"$DEST/bench.jsonl" || rc=1
  done
  return "$rc"
}

part_profile() {
  local rc=0 name
  local gpt2=(--model gpt --gpt-layers 12 --gpt-dim 768 --gpt-heads 12 --context 1024 --vocab 50304 --batch 8
    --optimizer adam --precision bf16)
  for name in resnet50-fp32 resnet50-bf16 gpt2-bf16; do
    case "$name" in
      resnet50-fp32) set -- --model resnet50 --batch 32 ;;
      resnet50-bf16) set -- --model resnet50 --batch 32 --precision bf16 ;;
      gpt2-bf16) set -- "${gpt2[@]}" ;;
    esac
    "$BUILD/loom-bench" --device cuda "$@" --steps 2 --warmup 1 --rounds 1 --mode graph-planned \
      --timeline "$DEST/timeline-$name" >/dev/null || { rc=1; continue; }
    rm -f "$DEST/timeline-$name"/*.csv  # the memory timelines: large, and not this part's question
    "$PY" tools/trace_ops.py "$DEST/timeline-$name/trace.json" --json "$DEST/profile-$name.json" |
      tee "$DEST/profile-$name.txt" || rc=1
  done
  return "$rc"
}

part_compare() {  # LOOM_GPU_COMPARE: compare.sh's selection (default: what fits the budget's rest)
  bash tools/compare.sh --device cuda --torch-python "$PY" --reps 1 --out "$DEST/compare.jsonl" \
    ${LOOM_GPU_COMPARE:---peers torch2,compile --only mlp,cnn,resnet18,resnet50}
}

part_precision() {
  local rc=0 m p
  for m in "resnet50 32" "gpt 8 --optimizer adam"; do
    set -- $m
    for p in ${LOOM_GPU_PRECISIONS:-bf16 fp16}; do
      "$BUILD/loom-bench" --device cuda --model "$1" --batch "$2" "${@:3}" --precision "$p" --steps "$STEPS" \
        --warmup 3 --rounds 2 --mode graph-planned,cuda-graph --json >>"$DEST/precision.jsonl" || rc=1
    done
  done
  # ResNet-50 bf16 under a memory budget of 0.7 x its arena (issue 31's peak: docs/benchmarks.md,
  # "bf16 memory": 1.27 GB planned on a CPU, recomputing element-wise ops only).
  "$BUILD/loom-bench" --device cuda --model resnet50 --batch 32 --precision bf16 --memory-budget-fraction 0.7 \
    --steps "$STEPS" --warmup 3 --rounds 2 --mode graph-planned,cuda-graph --json >>"$DEST/precision.jsonl" || rc=1
  # Where a bf16 step's time goes, op by op (a Chrome trace of one planned replay, trace.json).
  for m in "resnet50 32" "gpt 8 --optimizer adam"; do
    set -- $m
    "$BUILD/loom-bench" --device cuda --model "$1" --batch "$2" "${@:3}" --precision bf16 --steps 2 --warmup 1 \
      --rounds 1 --mode graph-planned --timeline "$DEST/timeline-$1-bf16" >/dev/null || rc=1
  done
  "$PY" tools/precision_digits.py --device cuda --seeds 1,2,3 --epochs 2 --json "$DEST/precision-digits.json" || rc=1
  return "$rc"
}

part_gpt2() {
  local rc=0 f
  # Issue 32's GPU model, GPT-2 124M at batch 8 x 1024 in bf16 (attention on cuDNN: Note [Attention
  # on cuDNN]; head and loss as one linear_cross_entropy: Note [Cross-entropy fused with the head's
  # product]), also under a memory budget of 0.7 x its arena, the peak issue 32 asks
  # (docs/benchmarks.md, "GPT-2 124M's memory plan": 4.08 GB planned on a CPU, recomputing 45
  # element-wise ops and no product); then the plain head and loss (--no-fused-loss) for what the
  # fusion costs or saves in time, the passes bf16_attention and group_updates off for what they
  # save, and the small GPT's bf16 step with cuDNN's attention refused, for the difference that
  # makes. One JSON line each.
  local gpt2=(--device cuda --model gpt --gpt-layers 12 --gpt-dim 768 --gpt-heads 12 --context 1024 --vocab 50304
    --batch 8 --optimizer adam --precision bf16 --steps 10 --warmup 3 --rounds 1 --mode cuda-graph --json)
  for f in 1 0.7; do
    "$BUILD/loom-bench" "${gpt2[@]}" --memory-budget-fraction "$f" >>"$DEST/gpt2.jsonl" || rc=1
  done
  "$BUILD/loom-bench" "${gpt2[@]}" --no-fused-loss >>"$DEST/gpt2.jsonl" || rc=1
  "$BUILD/loom-bench" "${gpt2[@]}" --pass bf16_attention=off --pass group_updates=off | \
    sed 's/^{/{"passes_off": "bf16_attention,group_updates", /' >>"$DEST/gpt2.jsonl"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  LOOM_CUDNN_ATTENTION=0 "$BUILD/loom-bench" --device cuda --model gpt --batch 8 --optimizer adam --precision bf16 \
    --steps "$STEPS" --warmup 3 --rounds 2 --mode cuda-graph --json >>"$DEST/gpt2.jsonl" || rc=1
  return "$rc"
}

part_layouts() {
  local rc=0 p l
  local r50=(--device cuda --model resnet50 --batch 32 --steps "$STEPS" --warmup 3 --rounds 1 --mode cuda-graph --json)
  for p in fp32 bf16; do
    for l in ${LOOM_GPU_LAYOUTS:-nchw nhwc nhwc-unplanned nhwc-unfused nhwc}; do
      case "$l" in
        nchw) LOOM_CUDNN_LAYOUT=nchw "$BUILD/loom-bench" "${r50[@]}" --precision "$p" ;;
        nhwc) "$BUILD/loom-bench" "${r50[@]}" --precision "$p" ;;
        nhwc-unplanned) "$BUILD/loom-bench" "${r50[@]}" --precision "$p" --pass plan_layouts=off ;;
        nhwc-unfused) "$BUILD/loom-bench" "${r50[@]}" --precision "$p" --pass fuse_bn_relu=off ;;
        nhwc-nondet) LOOM_CUDNN_DETERMINISTIC=0 "$BUILD/loom-bench" "${r50[@]}" --precision "$p" ;;
        nhwc-ungrouped) "$BUILD/loom-bench" "${r50[@]}" --precision "$p" --pass group_updates=off ;;
        *) echo "gpu_check: LOOM_GPU_LAYOUTS: unknown run '$l'" >&2; false ;;
      esac | sed "s/^{/{\"cudnn_layout\": \"$l\", /" >>"$DEST/layouts.jsonl"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    done
  done
  return "$rc"
}

part_compare_bf16() {
  bash tools/compare.sh --device cuda --torch-python "$PY" --reps 1 --precision bf16 \
    --out "$DEST/compare-bf16.jsonl" ${LOOM_GPU_COMPARE_BF16:---peers torch2,compile --only resnet50,gpt}
}

export BUILD DEST STEPS PY LOOM_GPU_COMPARE LOOM_GPU_COMPARE_BF16 LOOM_GPU_LAYOUTS LOOM_GPU_PRECISIONS
export -f part_env part_cpp part_python part_tf32 part_bench part_profile part_compare part_precision part_gpt2 part_layouts \
  part_compare_bf16
if [ -z "$BUNDLE" ]; then  # the set-up is outside the budget, which starts after it
  PARTS="setup,$PARTS" BUDGET=1000000 part setup 1200 bash tools/setup.sh
  T0=$SECONDS
fi
part env 30 part_env
part cpp-gpu 150 part_cpp
part python-gpu 60 part_python
part tf32-digits 60 part_tf32
part bench 90 part_bench
part profile 60 part_profile
part compare 180 part_compare
part precision 150 part_precision
part gpt2 150 part_gpt2
part layouts 150 part_layouts
part compare-bf16 180 part_compare_bf16

echo
# One line per loom-bench run of the parts above (tools/bench_digest.py), for a short slot's reader.
if ls "$DEST"/*.jsonl >/dev/null 2>&1; then
  echo "gpu_check: the runs, one line each:"
  "$PY" tools/bench_digest.py "$DEST" | tee "$DEST/digest.txt" || true
  echo
fi
echo "gpu_check summary ($DEST, $(( SECONDS - T0 )) s):"
status=0
for i in "${!names[@]}"; do
  printf '  %-12s %s\n' "${names[$i]}" "${results[$i]}"
  [[ "${results[$i]}" == passed* ]] || status=1
done
exit $status
