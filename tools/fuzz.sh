#!/usr/bin/env bash
# Fuzzes loom's parsers with libFuzzer + AddressSanitizer + UndefinedBehaviorSanitizer (targets in
# tools/fuzz/: checkpoint, idx, cifar, graph_dump, onnx, onnx_ops, tokenizer).
#
#   tools/fuzz.sh            60 s per target
#   tools/fuzz.sh 300        300 s per target
#   tools/fuzz.sh 5          what CI runs (tools/test.sh fuzz)
#   LOOM_FUZZ_BUILD=/tmp/f tools/fuzz.sh 10
#
# Builds with clang (from tools/setup.sh's packages) in its own folder (default build-fuzz/,
# never the main build), seeds each target's corpus with valid files (the graph-dump seeds are
# real dumps, written by the main build's graph_dump_seeds; the onnx seeds are models of ONNX's
# backend node tests, and the onnx targets link the main build's libloom; the onnx_ops seeds are
# op specs, among them the inputs that once crashed an ONNX handler), runs each target for the given
# time and prints how many inputs it executed. Every run first executes the inputs that once
# crashed a target (tools/fuzz/regressions/<target>/). Exits non-zero when a target finds a crash:
# the log then shows the stack, the crashing input (base64) and the command that reproduces it;
# the input itself is kept under build-fuzz/artifacts/.
#   LOOM_BUILD_DIR   the main build folder (default: build), for graph_dump_seeds
set -euo pipefail
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"

secs="${1:-60}"
[[ "$secs" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: seconds per target must be a positive integer, got '$secs'" >&2; exit 2; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${LOOM_FUZZ_BUILD:-$root/build-fuzz}"
main_build="${LOOM_BUILD_DIR:-build}"
targets=(checkpoint idx cifar graph_dump onnx onnx_ops tokenizer)

# clang with libFuzzer's runtime (Debian: clang, libclang-rt-dev) and a configured main build:
# tools/setup.sh provides both.
probe="$(mktemp -d)"
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/p.cc"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cc" -o "$probe/p" >/dev/null 2>&1 ||
   [ ! -f "$main_build/build.ninja" ]; then
  echo "fuzz.sh: clang with libFuzzer or the main build ($main_build) missing: running tools/setup.sh"
  bash tools/setup.sh
fi
rm -rf "$probe"

cmake --build "$main_build" --target graph_dump_seeds loom >/dev/null
cmake -G Ninja -S "$root/tools/fuzz" -B "$build" -DLOOM_MAIN_BUILD="$(cd "$main_build" && pwd)" \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" -j "$(nproc)" >"$build/build.log" 2>&1 || { tail -40 "$build/build.log" >&2; echo "fuzz.sh: build failed (log: $build/build.log)" >&2; exit 1; }

status=0
summary=()
mkdir -p "$build/artifacts"
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  mkdir -p "$corpus"
  if [ "$t" = graph_dump ]; then
    "$main_build/graph_dump_seeds" "$corpus"
  elif [ "$t" = onnx ]; then
    # A few of ONNX's backend node tests (tools/setup.sh installs them): convolution, pooling,
    # normalisation, dense, shapes, slicing, constants.
    onnx_data=""
    for d in /usr/lib/python3/dist-packages/onnx/backend/test/data/node /usr/share/libonnx-testdata/data/node; do
      [ -d "$d" ] && { onnx_data="$d"; break; }
    done
    [ -n "$onnx_data" ] || { echo "fuzz.sh: ONNX's backend node tests are missing: run tools/setup.sh" >&2; exit 1; }
    for m in basic_conv_with_padding maxpool_2d_pads batchnorm_example gemm_all_attributes reshape_negative_dim \
             slice_neg_steps gather_negative_indices constant_pad constantofshape_int_zeros split_variable_parts_2d; do
      cp "$onnx_data/test_$m/model.onnx" "$corpus/$m.onnx"
    done
  elif [ "$t" = tokenizer ]; then
    # The merges of tools/text.py's fixture, a NUL, and text with UTF-8, odd spaces and bad bytes.
    { cat test/io/text_fixture/merges.txt; printf '\0Shall I compare thee\n\n  to a summer\t caf\xc3\xa9 \xff 1609?'; } \
      >"$corpus/fixture"
  else
    "$build/make_seeds" "$t" "$corpus"
  fi
  dirs=("$corpus")  # new inputs go to the first folder only
  [ -d "tools/fuzz/regressions/$t" ] && dirs+=("tools/fuzz/regressions/$t")
  log="$build/fuzz_$t.log"
  prefix="$build/artifacts/$t-"
  rm -f "$prefix"*
  echo "== fuzz_$t for ${secs}s (corpus $corpus, log $log)"
  set +e
  # libFuzzer stops itself after max_total_time; the outer timeout only bounds a hang in start-up.
  timeout --kill-after=10 $((2 * secs + 60)) "$build/fuzz_$t" -max_total_time="$secs" -print_final_stats=1 \
    -max_len=16384 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$prefix" "${dirs[@]}" >"$log" 2>&1
  rc=$?
  set -e
  execs="$(awk '/stat::number_of_executed_units/ {print $2}' "$log" | tail -1)"
  cov="$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 || true)"
  if [ "$rc" -ne 0 ]; then
    status=1
    summary+=("fuzz_$t: FAILED (exit $rc) after ${execs:-?} executions; see above and $log")
    {
      echo "---- fuzz_$t: last lines of $log ----"
      grep -v '^#[0-9]' "$log" | tail -60
      for a in "$prefix"*; do
        [ -f "$a" ] || continue
        echo "---- fuzz_$t: reproducer $a ($(stat -c %s "$a") bytes), base64:"
        head -c 65536 "$a" | base64 -w 0
        echo
        echo "---- reproduce: base64 -d > input <<< '<the line above>' && $build/fuzz_$t input"
      done
    } >&2
  else
    summary+=("fuzz_$t: ${execs:-?} executions in ${secs}s, ${cov:-cov: ?}, no crash")
  fi
done
echo "== summary"
printf '%s\n' "${summary[@]}"
exit "$status"
