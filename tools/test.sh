#!/usr/bin/env bash
# Builds loom (tools/setup.sh) and runs test stages. Exits non-zero when any stage fails; every
# stage runs even after another failed, and the summary names each one with its time.
#
#   tools/test.sh                 lint cpp python: the checks and the plain suites (what developers run)
#   tools/test.sh STAGE...        the named stages, in that order; .ci/run runs all eight:
#     lint     the shape of the code, no build needed: include layering (tools/layering.py), size
#              budgets (tools/loc.sh --check), every cited Note defined once (tools/notes.py)
#     cpp      C++ suites (GoogleTest through ctest) in the main build
#     python   pytest on the SWIG module of the main build, and on the lint stage's scripts (test/tools)
#     asan     C++ suites (label cpu) under AddressSanitizer + UndefinedBehaviorSanitizer, build-asan/
#     tsan     the tests that use threads under ThreadSanitizer, build-tsan/
#     fuzz     each libFuzzer target for a few seconds (tools/fuzz.sh), build-fuzz/
#     package  the packages as users install them. C++: cmake --install into a fresh prefix, then
#              examples/consumer built against it (find_package(loom)) and run, and every
#              installed header compiled and linked through pkg-config's flags. Python: a wheel
#              (tools/wheel.sh) for a Python other than Debian's (pyenv's 3.12), installed into a
#              fresh virtualenv, runs examples/python/quickstart.py and own_data.py there; that
#              half is skipped, saying so, without such a Python
#     demo     README's first command, tools/demo.sh, into a temporary folder: it must finish and
#              its models must learn (the digits' last held-out accuracy >= 90%, the GPT's
#              held-out bits per byte at least 0.5 below the unigram baseline)
#   LOOM_BUILD_DIR      main build folder, absolute or relative to the repository root (default: build)
#   LOOM_FUZZ_SECONDS   seconds per fuzz target in the fuzz stage (default 5)
#   LOOM_PACKAGE_PYTHON the Python of the package stage (default: the newest pyenv CPython 3.12)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${LOOM_BUILD_DIR:-build}"
case "$BUILD" in /*) BUILD_ABS="$BUILD" ;; *) BUILD_ABS="$ROOT/$BUILD" ;; esac

ALL_STAGES=(lint cpp python asan tsan fuzz package demo)
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(lint cpp python)
for s in "${stages[@]}"; do
  [[ " ${ALL_STAGES[*]} " == *" $s "* ]] || { echo "test: unknown stage '$s' (stages: ${ALL_STAGES[*]})" >&2; exit 2; }
done

# A stage that cannot run here (the package stage without a second Python) returns this, and
# the summary says it was skipped.
SKIPPED=77

# ---- checks on the source text, before anything is built ----

stage_lint() {
  # Each check prints its breaches and one summary line; all three run even when one fails.
  local failed=0
  python3 tools/layering.py --check || failed=1
  bash tools/loc.sh --check || failed=1
  python3 tools/notes.py --check || failed=1
  return "$failed"
}

# ---- plain suites, in the main build ----

stage_cpp() {
  # GPU suites carry the label "gpu"; without a visible GPU they are left out.
  local args=(--test-dir "$BUILD" --output-on-failure --no-tests=error -j2)
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "test: GPU visible, running all labels"
  else
    echo "test: no GPU visible, skipping tests labelled gpu"
    args+=(-LE gpu)
  fi
  ctest "${args[@]}"
}

stage_python() {
  # The SWIG module (swig/) is built into <build>/python, for Debian's /usr/bin/python3 (the one
  # apt's numpy/pytest/torch serve).
  # test/tools tests the lint stage's scripts on planted trees; it needs no build, but it is
  # pytest too, so it runs here (its own folder: test/python's conftest imports loom).
  PYTHONPATH="$BUILD_ABS/python${PYTHONPATH:+:$PYTHONPATH}" /usr/bin/python3 -m pytest -q test/python test/tools
}

# ---- sanitizer stages, each in a build folder of its own ----

# configure_sanitized DIR SANITIZERS: -O1 -g, CUDA and Python off (the CPU suites are what they
# check), ccache as in the main build. Configured once; ninja re-runs CMake when it must.
configure_sanitized() {
  local dir="$1" sanitize="$2"
  [ -f "$dir/build.ninja" ] && return 0
  mkdir -p "$dir"
  cmake -G Ninja -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DLOOM_SANITIZE="$sanitize" \
    -DLOOM_USE_CUDA=OFF -DLOOM_BUILD_PYTHON=OFF >"$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log" >&2; return 1; }
}

# build_targets DIR TARGET...: quiet unless it fails.
build_targets() {
  local dir="$1" start=$SECONDS
  shift
  if ! cmake --build "$dir" -j "$(nproc)" --target "$@" >"$dir/stage-build.log" 2>&1; then
    grep -E 'error:|FAILED:|undefined reference' "$dir/stage-build.log" | head -40 >&2 || true
    tail -n 20 "$dir/stage-build.log" >&2
    echo "test: building $* in $dir failed (log: $dir/stage-build.log)" >&2
    return 1
  fi
  echo "test: built $* in $dir in $((SECONDS - start))s"
}

stage_asan() {
  local dir=build-asan
  configure_sanitized "$dir" address,undefined
  # Every GoogleTest executable but the GPU one (test/cuda, label gpu), and loom-bench, which
  # test_bench runs as a process.
  local targets
  ninja -C "$dir" build.ninja >/dev/null  # re-runs CMake first if the tree has changed (a new test folder)
  mapfile -t targets < <(ninja -C "$dir" -t targets all | sed -n 's/^\(test_[A-Za-z0-9_]*\): .*/\1/p' | grep -vx test_cuda)
  [ ${#targets[@]} -gt 0 ] || { echo "test: no test executables in $dir" >&2; return 1; }
  build_targets "$dir" "${targets[@]}" loom-bench
  # Leaks, initialisation order and use after return too; a UBSan finding aborts (it is built
  # with -fno-sanitize-recover=all) with its stack. test_cuda is not built here, so its
  # placeholder test is left out by name; any other missing executable fails the stage.
  local asan="detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1"
  ASAN_OPTIONS="$asan${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
  UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
    ctest --test-dir "$dir" -LE 'gpu|mpi' -E '^test_cuda_NOT_BUILT$' --output-on-failure --no-tests=error -j2
  # The MPI suites (label mpi) run under ASan and UBSan too, but without leak checking: OpenMPI
  # itself leaves thousands of allocations at MPI_Finalize, many from plugins it has unloaded
  # by then (no module name a suppression could match). Leaks in loom's own code are checked by
  # every other suite; the communicator's are not.
  ASAN_OPTIONS="${asan/detect_leaks=1/detect_leaks=0}${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
  UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
    ctest --test-dir "$dir" -L mpi --output-on-failure --no-tests=error -j2
}

# The tests that use threads, as "executable gtest-filter": capture and replay from two threads,
# a reset during replays and the parallel replay (all of test_graph); the kernels that split
# their work across the CPU pool (test_core's chunking and threading tests, and test_ops: every
# op forward, backward and replayed); the DataLoader's background thread (test_io).
# Left out, and said so: Linalg.SkinnyGemmAgainstLoops rebuilds the CPU pool 5,040 times (40 s
# under TSan); the plain and ASan stages run it.
TSAN_RUNS=(
  "test_graph *"
  "test_core -Linalg.SkinnyGemmAgainstLoops"
  "test_ops *"
  "test_io *"
  "test_dist *"
)

stage_tsan() {
  local dir=build-tsan
  # oneDNN stays on: loom runs each oneDNN call on one OpenMP thread (Note [oneDNN convolution]),
  # so libgomp starts no threads and has nothing for TSan to misreport. Should that change, build
  # this folder with -DLOOM_USE_DNNL=OFF rather than suppress reports.
  configure_sanitized "$dir" thread
  local run exes=()
  for run in "${TSAN_RUNS[@]}"; do exes+=("${run%% *}"); done
  build_targets "$dir" "${exes[@]}"
  local exe filter log out failed=0
  for run in "${TSAN_RUNS[@]}"; do
    exe="${run%% *}" filter="${run#* }"
    log="$dir/$exe.tsan.log"
    [ "$filter" = "*" ] && echo "test: tsan: $exe, every test" || echo "test: tsan: $exe --gtest_filter=$filter"
    # Four pool threads whatever the machine's core count, so that the pool always fans out;
    # TSan's exit code is 66 when it reported anything, and every report is printed.
    if LOOM_NUM_THREADS=4 TSAN_OPTIONS="second_deadlock_stack=1${TSAN_OPTIONS:+ $TSAN_OPTIONS}" \
        "$dir/$exe" --gtest_filter="$filter" >"$log" 2>&1; then
      out="$(grep -E '^\[==========\] [0-9]+ tests? from .* ran' "$log" || true)"
      if [[ "$out" =~ \]\ ([0-9]+)\ test ]] && [ "${BASH_REMATCH[1]}" -gt 0 ]; then
        echo "test: tsan: $exe: ${BASH_REMATCH[1]} tests passed, no report"
        continue
      fi
      echo "test: tsan: $exe ran no test with --gtest_filter=$filter (log: $log)" >&2
    else
      grep -E '^\[  FAILED  \]' "$log" >&2 || true
      # Each report whole: the two stacks and where the memory came from.
      awk '/^WARNING: ThreadSanitizer/ {p = 1} p {print} /^SUMMARY: ThreadSanitizer/ {p = 0}' "$log" | head -400 >&2
      echo "test: tsan: $exe FAILED (log: $log)" >&2
    fi
    failed=1
  done
  return "$failed"
}

stage_fuzz() {
  bash tools/fuzz.sh "${LOOM_FUZZ_SECONDS:-5}"
}

# ---- the package, outside the build tree ----

# The Python the package stage builds for: LOOM_PACKAGE_PYTHON, else the newest pyenv CPython
# 3.12 (a Python whose ABI differs from Debian's 3.11, so that nothing of the main build fits it).
package_python() {
  if [ -n "${LOOM_PACKAGE_PYTHON:-}" ]; then
    echo "$LOOM_PACKAGE_PYTHON"
    return 0
  fi
  local found
  found="$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3 2>/dev/null | sort -V | tail -n 1)"
  [ -n "$found" ] && echo "$found"
}

# quiet LOG COMMAND...: runs it with its output in LOG, shown only when it fails.
quiet() {
  local log="$1"
  shift
  "$@" >"$log" 2>&1 || { cat "$log" >&2; echo "test: package: failed: $*" >&2; return 1; }
}

# The C++ package in the folder $1: installed from the main build, a program of its own built on
# it with CMake and one with pkg-config, both run. ccache serves their compiles when it is there.
package_cpp() {
  local tmp="$1" prefix="$1/prefix" consumer="$1/consumer" launcher=()
  command -v ccache >/dev/null 2>&1 && launcher=(ccache)
  quiet "$tmp/install.log" cmake --install "$BUILD" --prefix "$prefix"
  if readelf -d "$prefix"/lib*/libloom*.so | grep -E 'R(UN)?PATH' | grep -F "$ROOT"; then
    echo "test: package: an installed libloom library has a RUNPATH into $ROOT (above)" >&2
    return 1
  fi
  # Note [Backends loaded on first use]: libloom.so links no CUDA, cuDNN, NCCL or MPI library.
  if readelf -d "$prefix"/lib*/libloom.so | grep NEEDED | grep -E 'lib(cudart|cublas|cudnn|nccl|mpi)'; then
    echo "test: package: the installed libloom.so links a backend's library (above)" >&2
    return 1
  fi
  quiet "$tmp/consumer.log" cmake -G Ninja -S examples/consumer -B "$consumer" -DCMAKE_PREFIX_PATH="$prefix" \
    ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER=ccache}
  quiet "$tmp/consumer.log" cmake --build "$consumer"
  (cd "$tmp" && "$consumer/consumer" | tail -n 1)
  # Every installed header in one program, with nothing but pkg-config's flags: none may need a
  # header that was not installed (a backend's, generated code's) or a library users do not link.
  local pc
  pc="$(dirname "$(find "$prefix" -name loom.pc)")"
  { (cd "$prefix/include" && find loom -name '*.h' | sort | sed 's/.*/#include <&>/')
    echo 'int main() { return loom::NumElements({2, 3}) == 6 && LOOM_VERSION_MAJOR == 0 ? 0 : 1; }'
  } >"$tmp/all_headers.cc"
  # shellcheck disable=SC2046  # pkg-config's flags are words
  quiet "$tmp/pkg-config.log" "${launcher[@]}" c++ "$tmp/all_headers.cc" -o "$tmp/all_headers" \
    $(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs loom)
  "$tmp/all_headers"
  # Components: the backends this build has are found, a made-up one is refused naming it.
  local have=() probe="$tmp/components"
  mkdir -p "$probe"
  local config c
  config="$(find "$prefix" -name loomConfig.cmake)"
  for c in cuda dnnl mpi; do grep -qi "set(loom_WITH_$c ON)" "$config" && have+=("$c"); done
  for c in cuda mpi; do  # a backend found is a library installed beside libloom.so
    if [[ " ${have[*]} " == *" $c "* ]] && ! ls "$prefix"/lib*/libloom_$c.so >/dev/null 2>&1; then
      echo "test: package: component $c is found but $prefix/lib*/libloom_$c.so was not installed" >&2
      return 1
    fi
  done
  printf 'cmake_minimum_required(VERSION 3.20)\nproject(probe CXX)\nfind_package(loom REQUIRED COMPONENTS %s)\n' \
    "${have[*]:-dnnl}" >"$probe/CMakeLists.txt"
  quiet "$tmp/components.log" cmake -S "$probe" -B "$probe/build" -DCMAKE_PREFIX_PATH="$prefix"
  printf 'cmake_minimum_required(VERSION 3.20)\nproject(probe CXX)\nfind_package(loom REQUIRED COMPONENTS warp)\n' \
    >"$probe/CMakeLists.txt"
  if cmake -S "$probe" -B "$probe/build2" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/components2.log" 2>&1 ||
     ! grep -q "loom has no component 'warp'" "$tmp/components2.log"; then
    cat "$tmp/components2.log" >&2
    echo "test: package: find_package(loom COMPONENTS warp) did not fail naming the component" >&2
    return 1
  fi
  echo "test: package: the C++ package: examples/consumer built with find_package(loom) and run, and" \
       "$(grep -c '^#include' "$tmp/all_headers.cc") installed headers built with pkg-config, from $prefix;" \
       "components found: ${have[*]:-none}, a made-up one refused"
}

stage_package() {
  local tmp
  tmp="$(mktemp -d)"
  trap "rm -rf '$tmp'" EXIT  # the stage runs in a subshell of its own; $tmp is expanded now
  mkdir "$tmp/cpp"
  package_cpp "$tmp/cpp"
  local py
  if ! py="$(package_python)"; then
    echo "test: package: the Python half skipped: no CPython 3.12 in ${PYENV_ROOT:-$HOME/.pyenv}/versions (pyenv install 3.12, or set LOOM_PACKAGE_PYTHON)"
    return "$SKIPPED"
  fi
  local wheel venv
  bash tools/wheel.sh --python "$py" >"$tmp/wheel.out" || { cat "$tmp/wheel.out"; return 1; }
  cat "$tmp/wheel.out"
  wheel="$(tail -n 1 "$tmp/wheel.out")"
  venv="$tmp/venv"
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "$wheel"
  local pkg
  pkg="$("$venv/bin/python" -c 'import os, loom; print(os.path.dirname(loom.__file__))')"
  [[ "$pkg" == "$venv/"* ]] || { echo "test: package: loom imported from $pkg, not the virtualenv" >&2; return 1; }
  # The wheel must not reach back into the build tree: no RUNPATH there, libloom.so its own.
  if readelf -d "$pkg"/*.so | grep -E 'R(UN)?PATH' | grep -F "$ROOT"; then
    echo "test: package: a library in the wheel has a RUNPATH into $ROOT (above)" >&2
    return 1
  fi
  # ldd's output is read whole first: `ldd | grep -q` under pipefail fails whenever grep stops
  # reading before ldd has written its last line (SIGPIPE), which a loaded CI machine does.
  local deps
  deps="$(ldd "$pkg"/_core.*.so)"
  grep -qF "libloom.so => $pkg/libloom.so" <<<"$deps" ||
    { echo "$deps" >&2; echo "test: package: the extension does not load $pkg/libloom.so" >&2; return 1; }
  # From a folder outside the repository, as a user would.
  (cd "$tmp" && "$venv/bin/python" "$ROOT/examples/python/quickstart.py")
  (cd "$tmp" && "$venv/bin/python" "$ROOT/examples/python/own_data.py" --epochs 4 | tail -n 1)
  (cd "$tmp" && "$venv/bin/python" -m loom.launch --help >/dev/null)
  (cd "$tmp" && "$venv/bin/python" -c 'import loom; print("test: package: loom", loom.__version__, "has", loom.clip.__name__, "and", loom.trainer.__name__, "after import loom")')
  (cd "$tmp" && "$venv/bin/python" -c 'import loom.clip, loom.onnx_import')
  echo "test: package: $(basename "$wheel") works in a fresh virtualenv of $("$py" --version)"
}

stage_demo() {
  local out
  out="$(mktemp -d)"
  trap "rm -rf '$out'" EXIT
  LOOM_DEMO_OUT="$out" LOOM_BUILD_DIR="$BUILD" bash tools/demo.sh
  # What the demo claims, checked from what it wrote: the digits' curve and the GPT's JSON line.
  /usr/bin/python3 - "$out" <<'PY'
import csv, json, sys
out = sys.argv[1]
rows = [r for r in csv.DictReader(open(f"{out}/digits.csv")) if r["eval_top1"]]
top1 = float(rows[-1]["eval_top1"])
gpt = json.loads([l for l in open(f"{out}/gpt.out") if l.startswith("{")][-1])
bpb, unigram = gpt["valid_bits_per_byte"], gpt["unigram_bits_per_byte"]
print(f"test: demo: digits held-out top-1 {top1:.1%}; GPT held-out {bpb:.3f} bits/byte, unigram {unigram:.3f}")
sys.exit(0 if top1 >= 0.90 and bpb < unigram - 0.5 else 1)
PY
}

# ---- run ----

# Only the lint stage needs no build: asked for alone, it starts at once.
results=()
if [ "${stages[*]}" != "lint" ]; then
  start=$SECONDS
  bash tools/setup.sh
  results+=("setup: done in $((SECONDS - start))s")
fi
status=0
for s in "${stages[@]}"; do
  echo "==== test: stage $s"
  start=$SECONDS
  # A subshell with its own -e: a failing command ends the stage, not the script.
  set +e
  (set -e; "stage_$s")
  rc=$?
  set -e
  if [ "$rc" -eq 0 ]; then
    results+=("$s: passed in $((SECONDS - start))s")
  elif [ "$rc" -eq "$SKIPPED" ]; then
    results+=("$s: skipped after $((SECONDS - start))s (why: above)")
  else
    results+=("$s: FAILED (exit $rc) after $((SECONDS - start))s")
    status=1
  fi
  echo "==== test: stage ${results[-1]}"
done
echo "==== test: summary"
printf '  %s\n' "${results[@]}"
exit "$status"
