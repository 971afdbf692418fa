#!/usr/bin/env bash
# Fuzzes loom's parsers with libFuzzer + AddressSanitizer (targets in tools/fuzz/).
#
#   tools/fuzz.sh            60 s per target
#   tools/fuzz.sh 300        300 s per target
#   LOOM_FUZZ_BUILD=/tmp/f tools/fuzz.sh 10
#
# Builds with clang in its own folder (default build-fuzz/, never the main build), seeds each
# target's corpus with valid files, runs each target for the given time and prints how many
# inputs it executed. Exits non-zero when a target finds a crash; the input that crashed it is
# kept under build-fuzz/artifacts/.
set -euo pipefail

secs="${1:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${LOOM_FUZZ_BUILD:-$root/build-fuzz}"
targets=(checkpoint idx cifar)

if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz.sh: clang++ not found; installing clang" >&2
  apt-get install -y clang >&2
fi

cmake -G Ninja -S "$root/tools/fuzz" -B "$build" \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" >/dev/null

status=0
summary=()
mkdir -p "$build/artifacts"
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  mkdir -p "$corpus"
  "$build/make_seeds" "$t" "$corpus"
  log="$build/fuzz_$t.log"
  echo "== fuzz_$t for ${secs}s (corpus $corpus, log $log)"
  set +e
  "$build/fuzz_$t" -max_total_time="$secs" -print_final_stats=1 -max_len=16384 -timeout=10 \
    -artifact_prefix="$build/artifacts/$t-" "$corpus" >"$log" 2>&1
  rc=$?
  set -e
  execs="$(awk '/stat::number_of_executed_units/ {print $2}' "$log" | tail -1)"
  cov="$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 || true)"
  if [ "$rc" -ne 0 ]; then
    status=1
    summary+=("fuzz_$t: FAILED (exit $rc) after ${execs:-?} executions; see $log")
    tail -30 "$log" >&2
  else
    summary+=("fuzz_$t: ${execs:-?} executions in ${secs}s, ${cov:-cov: ?}, no crash")
  fi
done
echo "== summary"
printf '%s\n' "${summary[@]}"
exit "$status"
