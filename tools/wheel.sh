#!/usr/bin/env bash
# Builds a wheel of loom (distribution loomrt, import name loom) for one Python into dist/.
#
#   tools/wheel.sh [--python PATH] [-D NAME=VALUE]...
#     --python PATH    the Python the wheel is for (default: python3 on PATH); it needs pip
#     -D NAME=VALUE    a CMake cache entry for this build, e.g. -D LOOM_USE_CUDA=OFF (the default
#                      is a developer build's: CUDA when nvcc is found)
#   Prints where the build log is, then the wheel's path as its last line.
#
# It runs `PYTHON -m pip wheel --no-deps` on the repository: pyproject.toml's backend
# (scikit-build-core, and SWIG from PyPI, both pinned) builds libloom and the SWIG module with
# CMake in build-wheel/<wheel tag>/ (the fixed path lets ccache serve every unchanged object on
# the next build: pyproject.toml says why). Install the wheel with `pip install dist/loomrt-*.whl`
# into any environment of that Python (numpy comes from PyPI then).
#
# Deterministic: the same commit, machine and Python give the same wheel, byte for byte. The
# files in the wheel carry the last commit's time (SOURCE_DATE_EPOCH), not the build's; the build
# requirements are pinned (pyproject.toml); sources are named relative to the checkout, whatever
# its folder and whether ccache compiled them (CMakeLists.txt); the wheel of the same name is
# replaced, never appended to. One exception: nvcc names the kernels of an anonymous namespace
# after the source path it was given, absolute without ccache and relative with it, so a CUDA
# wheel built through ccache differs from one built without (a CPU-only wheel,
# -D LOOM_USE_CUDA=OFF, is the same either way).
# The wheel is for this machine: it links the system's libraries (OpenBLAS, protobuf, oneDNN,
# MPI, CUDA) and is compiled with -march=native, as a developer build is.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

die() { echo "wheel: error: $*" >&2; exit 1; }
usage() { sed -n "4,8p" "${BASH_SOURCE[0]}" | sed "s/^# \{0,1\}//" >&2; exit "${1:-2}"; }

PY=python3
settings=()
while [ $# -gt 0 ]; do
  case "$1" in
    --python) [ $# -ge 2 ] || usage; PY="$2"; shift 2 ;;
    -D) [ $# -ge 2 ] || usage; [[ "$2" == ?*=* ]] || die "-D takes NAME=VALUE, not '$2'"
        settings+=("--config-settings=cmake.define.$2"); shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "wheel: unknown argument '$1'" >&2; usage ;;
  esac
done

command -v "$PY" >/dev/null 2>&1 || die "no Python '$PY'"
version="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" || die "'$PY' does not run"
"$PY" -m pip --version >/dev/null 2>&1 || die "$PY (Python $version) has no pip: install it (python -m ensurepip)"

epoch="$(git log -1 --format=%ct 2>/dev/null)" || die "not a git checkout: SOURCE_DATE_EPOCH comes from the last commit"
mkdir -p dist build-wheel
log="build-wheel/wheel-$version.log"
echo "wheel: building for Python $version ($PY), log: $log"
start=$SECONDS
# pip leaves a wheel of the same name in place: remove it first, so dist/ holds this build's.
out="$(mktemp -d "$ROOT/build-wheel/.dist-XXXXXX")"
trap 'rm -rf "$out"' EXIT
if ! SOURCE_DATE_EPOCH="$epoch" "$PY" -m pip wheel --no-deps --disable-pip-version-check -v \
       -w "$out" "${settings[@]}" . >"$log" 2>&1; then
  grep -E 'error:|Error|FAILED:|CMake Error' "$log" | head -30 >&2 || true
  echo "---- last lines of $log ----" >&2
  tail -n 20 "$log" >&2
  die "the wheel build failed (full log: $log)"
fi
wheels=("$out"/loomrt-*.whl)
[ ${#wheels[@]} -eq 1 ] && [ -f "${wheels[0]}" ] || die "pip built no loomrt wheel into $out (log: $log)"
name="$(basename "${wheels[0]}")"
mv -f "${wheels[0]}" "dist/$name"
echo "wheel: built in $((SECONDS - start))s, sha256 $(sha256sum "dist/$name" | cut -d' ' -f1)"
echo "$ROOT/dist/$name"
