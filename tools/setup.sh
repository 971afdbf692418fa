#!/usr/bin/env bash
# Installs what loom needs, configures and builds it. Idempotent: a second run checks, prints one
# line per phase and does nothing else. Works from any directory; run as root or with sudo.
#   LOOM_BUILD_DIR   build folder, relative to the repository root (default: build)
set -euo pipefail

# Debian packages. Later work adds: swig protobuf-compiler libprotobuf-dev python3-numpy
# python3-pytest python3-torch libdnnl-dev.
PACKAGES=(build-essential cmake ninja-build ccache libopenblas-dev libgtest-dev pkg-config)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${LOOM_BUILD_DIR:-build}"

say() { echo "setup: $*"; }
die() { echo "setup: error: $*" >&2; exit 1; }

# ---- packages ----
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  say "packages: all ${#PACKAGES[@]} present"
else
  say "packages: installing ${missing[*]}"
  if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
  elif command -v sudo >/dev/null 2>&1; then
    # Without a terminal sudo cannot ask for a password: fail at once instead of hanging.
    if [ -t 0 ]; then SUDO=(sudo); else SUDO=(sudo -n); fi
  else
    die "missing packages (${missing[*]}) and not root, and sudo is not installed; run as root or install them: apt-get install ${missing[*]}"
  fi
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

# ---- configure (once: later builds re-run cmake by themselves when CMakeLists.txt changes) ----
if [ -f "$BUILD/build.ninja" ] && [ -f "$BUILD/CMakeCache.txt" ]; then
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
start=$SECONDS
log="$BUILD/setup-build.log"
dry="$(ninja -C "$BUILD" -n 2>&1 || true)"  # what would run, without running it
if [[ "$dry" == *"no work to do"* ]]; then
  say "build: $BUILD up to date"
  exit 0
fi
say "build: compiling with $(nproc) jobs (log: $log)"
if ! cmake --build "$BUILD" -j "$(nproc)" >"$log" 2>&1; then
  # Compiler errors first: with parallel jobs they can sit far above the tail.
  grep -E 'error:|FAILED:' "$log" | head -40 >&2 || true
  echo "---- last lines of $log ----" >&2
  tail -n 20 "$log" >&2
  die "build failed (full log: $log)"
fi
say "build: done in $((SECONDS - start))s"
