#!/usr/bin/env bash
# Builds loom (tools/setup.sh) and trains the example MLP (784-1024-1024-10, SGD with momentum)
# on synthetic MNIST-shaped data, printing the loss, the time per step and the peak memory.
# Extra arguments go to loom-mlp (e.g. --batch 128, --json).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${LOOM_BUILD_DIR:-build}"

bash tools/setup.sh
"$BUILD/loom-mlp" --batch 64 --steps 200 --print-every 20 "$@"
