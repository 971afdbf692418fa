#!/usr/bin/env bash
# SINGA's own Python test suite, run against loom with its imports renamed and nothing else.
#
#   tools/singa_suite.sh [-v] DIR   DIR: a checkout of SINGA's test/python (not kept in this
#                                   repository). Prints, per file, the tests that pass, the tests
#                                   run (skips excluded) and SINGA's skips, and the total.
#   -v                              pytest's output too
#   LOOM_BUILD_DIR                  the build whose Python module is tested (default: build)
#   PYTHON                          the interpreter (default: /usr/bin/python3)
#
# The shim (tools/singa_shim/singa_rename.py) maps `singa.X` to `loom.X` and `singa.singa_wrap`
# to `loom.singa_wrap`; SINGA's files are run as they are. Without a GPU, SINGA's GPU variants
# skip themselves (`skipIf(not singa_wrap.USE_CUDA)`) and the figure is over its CPU tests.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${LOOM_BUILD_DIR:-build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
export PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-/usr/bin/python3}" "$ROOT/tools/singa_shim/run_suite.py" "$@"
