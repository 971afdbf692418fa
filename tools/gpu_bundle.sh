#!/usr/bin/env bash
# tools/gpu_bundle.sh: builds, on a CPU machine with the CUDA toolkit, one self-contained archive
# that tools/gpu_check.sh --bundle runs on a bare, offline GPU machine (no apt, no network, no
# build tools needed there: nvcc, cuDNN, cuBLAS and NCCL are found on that machine, nothing else).
#
#   tools/gpu_bundle.sh [--python PY] [--arch SM] [--out FILE] [--build DIR]
#
#   --python PY   the GPU machine's Python, by version (3.12, found as python3.12 or in pyenv) or
#                 path (default 3.12: CPython 3.12 on the GPU machines this project uses); the
#                 Python module is built for its ABI in a virtual environment holding numpy
#   --arch SM     CUDA architecture(s) for the kernels (default 90: Hopper, H100/H200)
#   --out FILE    the archive (default gpu-bundle/loom-gpu-<rev>.tar.xz)
#   --build DIR   the build folder (default build-gpu; kept, so a second bundle builds incrementally)
# Host code is built for x86-64-v3 (AVX2), not this machine's CPU (LOOM_BUNDLE_MARCH overrides).
#
# The archive unpacks to one folder shaped like a checkout with its build folder: build/ (the GPU
# tests and the other C++ suites, loom-bench, the examples, libloom.so, the Python module in
# build/python), lib/ (every library they need that is neither the C library's nor CUDA's:
# OpenBLAS, oneDNN, protobuf, OpenMPI, ...), pylib/ (pytest and its dependencies, pure Python),
# tools/ (the check, the peer scripts), test/python, examples/, data/ and bundle.json (the
# revision, the Python, the architecture, the libraries left out). CUDA's own libraries are not
# packed: the GPU machine's driver decides which of them work.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY_WANT=3.12
ARCH=90
OUT_FILE=""
BUILD=build-gpu
CACHE="${LOOM_CACHE_DIR:-$HOME/.cache/loom}"
die() { echo "gpu_bundle: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --python) PY_WANT="$2"; shift 2 ;;
    --arch) ARCH="$2"; shift 2 ;;
    --out) OUT_FILE="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "gpu_bundle: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
[[ "$ARCH" =~ ^[0-9]+(\;[0-9]+)*$ ]] || die "--arch: expected CUDA architectures such as 90 or '80;90', got '$ARCH'"
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || die "no nvcc: the bundle needs the CUDA toolkit (tools/setup.sh installs it where it can)"

# ---- what the build packs and reads: packages, the data, cudnn-frontend (idempotent, quick once done)
bash tools/setup.sh --gpu-bundle || die "tools/setup.sh --gpu-bundle failed (above)"

# ---- the Python the module is built for, in a virtual environment with numpy (build time only)
find_python() {
  local c
  if [[ "$PY_WANT" == */* ]]; then [ -x "$PY_WANT" ] && { echo "$PY_WANT"; return 0; }; return 1; fi
  for c in "python$PY_WANT" "$HOME"/.pyenv/versions/"$PY_WANT".*/bin/python3; do
    c="$(command -v "$c" 2>/dev/null)" || continue
    "$c" -c 'import venv' >/dev/null 2>&1 || continue  # a pyenv shim for a version not selected fails here
    echo "$c"; return 0
  done
  return 1
}
BASE_PY="$(find_python)" || die "no Python $PY_WANT (give --python PATH, or pyenv install $PY_WANT)"
PY_VER="$("$BASE_PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
VENV="$CACHE/bundle-py$PY_VER"
if ! "$VENV/bin/python" -c "import numpy" 2>/dev/null; then
  echo "gpu_bundle: a build environment for Python $PY_VER with numpy in $VENV"
  rm -rf "$VENV"
  "$BASE_PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --no-input --progress-bar off numpy >/dev/null ||
    die "pip install numpy into $VENV failed (offline?)"
fi

# ---- build
echo "gpu_bundle: building in $BUILD (CUDA arch $ARCH, Python $PY_VER)"
mkdir -p "$BUILD"
# x86-64-v3 (AVX2, FMA): the GPU machine's CPU is not this one, and -march=native could emit
# instructions it lacks (LOOM_BUNDLE_MARCH overrides).
cmake -G Ninja -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLOOM_USE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
  -DLOOM_MARCH="${LOOM_BUNDLE_MARCH:-x86-64-v3}" \
  -DPython3_EXECUTABLE="$VENV/bin/python" >"$BUILD/bundle-configure.log" 2>&1 ||
  { tail -n 30 "$BUILD/bundle-configure.log"; die "configure failed ($BUILD/bundle-configure.log)"; }
cmake --build "$BUILD" -j "$(nproc)" >"$BUILD/bundle-build.log" 2>&1 ||
  { tail -n 30 "$BUILD/bundle-build.log"; die "build failed ($BUILD/bundle-build.log)"; }
[ -x "$BUILD/test_cuda" ] || die "$BUILD/test_cuda was not built: is CUDA found? ($BUILD/bundle-configure.log)"
ls "$BUILD"/python/loom/_core*.so >/dev/null 2>&1 || die "the Python module was not built ($BUILD/bundle-configure.log)"
# Without cudnn-frontend the GPT's bf16 attention has no cuDNN kernel, and the GPU check would
# time another model than the one users train (Note [Attention on cuDNN]).
FE="$(sed -n 's/^LOOM_CUDNN_FRONTEND_INCLUDE:PATH=//p' "$BUILD/CMakeCache.txt")"
[ -f "$FE/cudnn_frontend.h" ] ||
  die "the build found no cudnn-frontend (tools/setup.sh --gpu-bundle fetches it; -DLOOM_CUDNN_FRONTEND_DIR names another)"

# ---- stage
REV="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD 2>/dev/null || REV="$REV-dirty"
[ -n "$OUT_FILE" ] || OUT_FILE="gpu-bundle/loom-gpu-$REV.tar.xz"
STAGE="$(mktemp -d /tmp/loom-gpu-bundle.XXXXXX)"
trap 'rm -rf "$STAGE"' EXIT
B="$STAGE/loom-gpu"
mkdir -p "$B/build" "$B/lib" "$B/pylib"

# The executables: every C++ suite (the GPU check runs the GPU ones), loom-bench, the examples.
bins=()
for f in "$BUILD"/test_* "$BUILD"/loom-* "$BUILD"/demo; do
  [ -f "$f" ] && [ -x "$f" ] && case "$f" in *.cmake) ;; *) bins+=("$f") ;; esac
done
cp "${bins[@]}" "$BUILD"/libloom.so "$BUILD"/libloom_*.so "$B/build/"  # the backends, opened beside libloom.so
mkdir -p "$B/build/python"
cp -r "$BUILD/python/loom" "$B/build/python/"
find "$B/build/python" -name __pycache__ -prune -exec rm -rf {} +

# Libraries: the closure ldd finds, less the C library's own (the GPU machine's glibc is newer)
# and CUDA's (the GPU machine's, matched to its driver).
system_lib() {
  case "$(basename "$1")" in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libutil.so*|libresolv.so*|\
    libstdc++.so*|libgcc_s.so*) return 0 ;;
  esac
  return 1
}
cuda_lib() {
  case "$(basename "$1")" in
    libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libcudnn*.so*|libnccl.so*|libnvrtc*|libnvJitLink*) return 0 ;;
  esac
  return 1
}
left_out=()
while read -r name path; do
  [ -n "$path" ] || continue
  if system_lib "$name" || cuda_lib "$name"; then left_out+=("$name"); continue; fi
  [ "$path" = "not" ] && die "ldd: $name not found for the bundle's binaries"
  cp -L "$path" "$B/lib/$name"
done < <(for f in "$B"/build/* "$B"/build/python/loom/_core*.so; do
           [ -f "$f" ] && ldd "$f" 2>/dev/null | awk '/=>/ {print $1, $3}'
         done | sort -u)
# Plug-ins OpenMPI loads by name at run time are not ldd's to find; one rank over no network needs none.

# pytest for the Python GPU tests: pure-Python wheels, unpacked (no pip needed there).
"$VENV/bin/python" -m pip download -q --no-input --progress-bar off --only-binary=:all: \
  -d "$CACHE/bundle-wheels" pytest >/dev/null 2>&1 ||
  ls "$CACHE"/bundle-wheels/pytest-*.whl >/dev/null 2>&1 || die "could not download pytest's wheels (offline?)"
for w in "$CACHE"/bundle-wheels/*.whl; do "$VENV/bin/python" -m zipfile -e "$w" "$B/pylib"; done

# The scripts and the data the check reads.
cp -r tools "$B/tools"
rm -rf "$B/tools/fuzz"
mkdir -p "$B/test"
cp -r test/python "$B/test/python"
cp -r examples data "$B/"
find "$B" -name __pycache__ -prune -exec rm -rf {} +

"$VENV/bin/python" - "$B/bundle.json" "$REV" "$PY_VER" "$ARCH" "${left_out[*]}" "$FE" <<'EOF'
import json, sys, time, platform
path, rev, py, arch, left, fe = sys.argv[1:7]
json.dump({"revision": rev, "python": py, "cuda_arch": arch, "cudnn_frontend": fe, "built_on": platform.platform(),
           "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "libraries_left_out": sorted(set(left.split()))}, open(path, "w"), indent=1)
EOF

mkdir -p "$(dirname "$OUT_FILE")"
tmp="$OUT_FILE.tmp.$$"
tar -C "$STAGE" -cf - loom-gpu | xz -T0 -6 >"$tmp"
mv -f "$tmp" "$OUT_FILE"
echo "gpu_bundle: $OUT_FILE ($(du -h "$OUT_FILE" | cut -f1), revision $REV, Python $PY_VER, sm_$ARCH)"
echo "gpu_bundle: on the GPU machine: tools/gpu_check.sh --bundle $OUT_FILE"
