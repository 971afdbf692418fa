#!/usr/bin/env bash
# Builds loom (tools/setup.sh) and runs every test suite. Exits non-zero on any failure.
#   LOOM_BUILD_DIR   build folder, absolute or relative to the repository root (default: build)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${LOOM_BUILD_DIR:-build}"
case "$BUILD" in /*) BUILD_ABS="$BUILD" ;; *) BUILD_ABS="$ROOT/$BUILD" ;; esac

bash tools/setup.sh

# ---- C++ (GoogleTest through ctest) ----
# GPU suites carry the label "gpu"; without a visible GPU they are left out.
ctest_args=(--test-dir "$BUILD" --output-on-failure --no-tests=error -j2)
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "test: GPU visible, running all labels"
else
  echo "test: no GPU visible, skipping tests labelled gpu"
  ctest_args+=(-LE gpu)
fi
ctest "${ctest_args[@]}"

# ---- Python (pytest) ----
# >>> Python tests: run once test/python exists. The SWIG module (swig/) is built into
# >>> <build>/python, for Debian's /usr/bin/python3 (the one apt's numpy/pytest/torch serve).
if [ -d test/python ]; then
  PYTHONPATH="$BUILD_ABS/python${PYTHONPATH:+:$PYTHONPATH}" /usr/bin/python3 -m pytest -q test/python
else
  echo "test: no test/python yet, pytest skipped"
fi
