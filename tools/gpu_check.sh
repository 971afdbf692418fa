#!/usr/bin/env bash
# tools/gpu_check.sh: everything GPU in one go, for a machine that has one (the CUDA backend is
# compiled and its kernels compile-checked in CI, which has no GPU; this is where they run).
#   1. set-up and build (tools/setup.sh; CUDA is built when nvcc is found)
#   2. every GPU test with LOOM_REQUIRE_GPU=1, so "no GPU" and CUDA setup errors fail instead of
#      skipping (Note [No GPU, or a broken one] in src/core/device.h): the C++ suites labelled
#      gpu, then the Python suite
#   3. the GPU benchmarks: loom-bench on cuda for the MLP, the small CNN and ResNet-18, in eager,
#      planned and CUDA-graph replay, one JSON line per run
# Every part runs even after another failed; the summary names each with its status, and the exit
# status is non-zero when any failed.
#   LOOM_BUILD_DIR   build folder (default: build)
#   LOOM_GPU_OUT     where logs and JSON go (default: $OUT when set, else <build>/gpu_check)
#   LOOM_GPU_STEPS   timed steps per benchmark mode (default 30)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${LOOM_BUILD_DIR:-build}"
DEST="${LOOM_GPU_OUT:-${OUT:-$BUILD/gpu_check}}"
STEPS="${LOOM_GPU_STEPS:-30}"
export LOOM_REQUIRE_GPU=1
mkdir -p "$DEST"

names=()
results=()
part() {  # part NAME CMD...: runs CMD with its output in DEST/NAME.log, records the status
  local name="$1"
  shift
  local t0=$SECONDS
  echo "gpu_check: $name"
  if "$@" >"$DEST/$name.log" 2>&1; then
    results+=("passed   $(( SECONDS - t0 )) s")
  else
    results+=("FAILED   $(( SECONDS - t0 )) s (see $DEST/$name.log)")
    tail -n 20 "$DEST/$name.log"
  fi
  names+=("$name")
}

part setup bash tools/setup.sh
nvidia-smi >"$DEST/nvidia-smi.txt" 2>&1 || true
part cpp-gpu ctest --test-dir "$BUILD" -L gpu --output-on-failure --no-tests=error
part python-gpu env PYTHONPATH="$ROOT/$BUILD/python" /usr/bin/python3 -m pytest -q test/python/test_cuda.py
part python-all env PYTHONPATH="$ROOT/$BUILD/python" /usr/bin/python3 -m pytest -q test/python

bench() {  # bench MODEL BATCH
  "$BUILD/loom-bench" --device cuda --model "$1" --batch "$2" --steps "$STEPS" --warmup 3 --rounds 3 \
    --mode eager,graph-planned,cuda-graph --json >"$DEST/bench-$1.json"
}
part bench-mlp bench mlp 64
part bench-cnn bench cnn 32
part bench-resnet18 bench resnet18 16

echo
echo "gpu_check summary ($DEST):"
status=0
for i in "${!names[@]}"; do
  printf '  %-16s %s\n' "${names[$i]}" "${results[$i]}"
  [[ "${results[$i]}" == passed* ]] || status=1
done
exit $status
