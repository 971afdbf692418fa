#!/usr/bin/env bash
# Lines of code per folder, in pipeline order (docs/style.md: the size of each layer, kept honest).
# "src/device (shared)" is src/device minus its backend folders: what the backends share, the CUDA stub.
#
#   tools/loc.sh           the table: lines and files per folder
#   tools/loc.sh --check   the size budgets, for CI (tools/test.sh lint): every folder within its
#                          line budget (BUDGETS below), no file in src/ over MAX_FILE_LINES lines,
#                          no C++ function in src/ over MAX_FUNCTION_LINES (tools/func_lengths.py).
#                          Prints one line per breach and a summary; exits 1 on any breach.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

FOLDERS=(src/core src/graph "src/device (shared)" src/device/cpu src/device/cuda src/nn src/io swig test tools
         examples)

# Line budgets, one per folder above: each is the folder's size when the budgets were set (the
# number beside it, 2026-11, the commit that added --check) plus about 15%, rounded up to the next
# 100. A folder that outgrows its budget is either due to be split or simplified, or has earned a
# larger one: raise it here, in a commit that says why.
declare -A BUDGETS=(
  [src/core]=7600               # 5712; 7000 from 2026-11-28: the transformer ops (attention, attention_qkv, gelu_erf); 7200 from 2026-11-28: core/backend_library, backends loaded on first use (issue 33); 7400 from 2026-11-28: out_dtype on the element-wise producers (fused casts) and attention's zero_dlse (issues 31, 32); 7600 from 2026-11-28: batch norm's bfloat16 x and bf16 convolution results (issue 31)
  [src/graph]=5700              # 4226; 5200 from 2026-11-28: the activation-layout pass moved here from src/device/cpu/passes (it plans CUDA's NHWC too, issue 30); 5300 from 2026-11-28: the pass fuse_bn_relu (issue 30); 5500 from 2026-11-29: the pass bf16_attention (issue 32); 5700: the pass group_updates (issues 30, 32)
  ["src/device (shared)"]=1000  # 583; 800 from 2026-11-28: the reduce-scatter and in-place gather kernels of sharded optimizer state (issue 35); 900 from 2026-11-28: cuda_entry.cc, the CUDA entry points that open libloom_cuda.so on first use (issue 33; it replaces cuda_stub/); 1000 from 2026-11-29: column sums by slabs in kernel_shapes.h (issue 30/32)
  [src/device/cpu]=6600         # 5708; 6400 from 2026-11-28: its activation-layout pass moved to src/graph; 6500 from 2026-11-28: batch norm's fused residual and ReLU (fuse_bn_relu, issue 30); 6600 from 2026-11-29: attention's bfloat16 y and dqkv, bias_grad of a bfloat16 dy (issue 32)
  [src/device/cuda]=6900        # 3633; 4700 from 2026-11-28: attention (issue 32), loss scaling and 16-bit paths (issue 31); 5000 from 2026-11-28: cuDNN's fused attention and the head fused with the loss, linear_cross_entropy (issue 32); 5500 from 2026-11-28: NHWC convolutions, batch norm in either layout, pooling in either layout (issue 30); 5700 from 2026-11-28: the embedding gradient by sorted rows, layer norm and column sums by chunks (issue 30/32, after the H200 run); 5800 from 2026-11-29: cudnn_plan.h split from cudnn.cc, the measured algorithms' cost counters and LOOM_CUDNN_DETERMINISTIC (issue 30); 6100: column sums by slabs, layer norm by warps, grad_norm by tables (issue 32, a review of the GPT-2 path); 6200: batch norm's chunks by shape (issue 30, a review of the ResNet-50 path); 6400 from 2026-11-29: grouped updates, tables of members a launch (issues 30, 32); 6700: float32 attention in tiles (attention_tiles.cuh, issue 32: GPT-2 in float32 on a GPU, and the fallback when cuDNN refuses bf16 attention); 6900: kernel fragments the CPU emulator includes (device_math, column_sums, update_kernels, layer_norm, batch_norm, linear_ce, bias_act, grad_norm, embedding .cuh: their headers and launch helpers), the tiled attention's transposed tiles
  [src/nn]=4800                 # 3081; 4300 from 2026-11-28: the transformer layers and micro-batches (issue 32); mixed precision (issue 31), loss scaling (nn/loss_scale.*) and its optimizer state, DistOpt's wire precision; 4800: sharded optimizer state (nn/shards.*, issue 35)
  [src/io]=8400                 # 6715; 8400 from 2026-11-28: the text corpus and tokenizer (issue 32), users' own datasets (issue 33)
  [swig]=11400                  # 8558; 10900 from 2026-11-28: the text corpus and tokenizer bindings (swig/text.i, loom.io, issue 32), loom.data (users' own datasets and their loader, issue 33); 11400 from 2026-11-28: loom.data.Batches (any iterable of batches) and the loader's reading thread (issue 33)
  [test]=36000                  # 23482; 29700 from 2026-11-28: the transformer, text-corpus and own-data tests; 30800: sharded optimizer state, the probe's regression tests (issues 35, 36); 31400 from 2026-11-28: batches you make, reading ahead, backends loaded on first use, the docs' shell commands (issue 33); 31700 from 2026-11-28: bf16 on cuDNN, bf16 attention, half-precision GEMMs on the pool, the simulator's shared cores (issues 31, 35); 32500: weights' 16-bit copies kept by their updates, fused casts, cuDNN's attention, a step that keeps no output (issues 31, 32); 32900: the head fused with the loss, GELUs from bfloat16 inputs, fused casts checked on CUDA (issues 31, 32); 33500 from 2026-11-28: NHWC on CUDA, the layout pass on a CUDA-typed device, bf16 ReLU masks and convolution outputs (issues 30, 31); 33800 from 2026-11-29: kernel counters, CUDA row and column kernels against the CPU (issues 30, 32); 34200 from 2026-11-29: attention results kept in bfloat16 (issue 32); 34300 from 2026-11-29: the GPU suite's triage against a scripted fake (issue 30); 36000: CUDA kernels emulated on the CPU (test/emu): the tiled attention, the column sums, the grouped updates, layer norm, batch norm, linear cross-entropy, bias_act_grad and grad_norm checked there (issues 30, 32)
  [tools]=10900                 # 6028; 8000 from 2026-11-27: the GPU bundle and check, the wheel, the SINGA shim, the ONNX op fuzzer; 8500 from 2026-11-28: the GPT in the benchmarks, the text converter; 9600 from 2026-11-28: tools/probe.py, the reliability probe (issue 36: about 1,000 lines, mostly its tables of cases); 9900: tools/probe_api.py, its sweep of the public Python API (issue 36); 10300: comm_bench and the measured predictions of loom-bench (issue 35); 10400: tools/data_bench.py, a Python dataset read while the step runs (issue 33); 10600: tools/trace_ops.py and the GPU check's profile part (issue 30); 10700 from 2026-11-29: tools/bench_digest.py, the GPU check's digest (issue 30); 10900: tools/gtest_triage.py, real failures told from their cascades in the GPU suite (issue 30)
  [examples]=2900               # 1797; 2900 from 2026-11-28: loom-gpt and gpt.py, the C++ package's consumer, own_data.py
)
# A file or function longer than these is no longer read in one sitting.
MAX_FILE_LINES=800
MAX_FUNCTION_LINES=120

count() {  # prints "<lines> <files>" for the source files under $1, minus paths matching $2
  local lines=0 files=0 f
  [ -d "$1" ] || { echo "0 0"; return; }
  while IFS= read -r -d '' f; do
    files=$((files + 1))
    lines=$((lines + $(wc -l <"$f")))
  done < <(find "$1" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' -o -name '*.i' \
                                -o -name '*.py' -o -name '*.sh' -o -name '*.cmake' -o -name 'CMakeLists.txt' \) \
                ! -path "${2:-/no/such/path}" -print0)
  echo "$lines $files"
}

folder_lines() {  # sets lines and files for folder $1
  if [ "$1" = "src/device (shared)" ]; then
    read -r lines files < <(count src/device 'src/device/cu[d]a/*')
    read -r cpu_lines cpu_files < <(count src/device/cpu)
    lines=$((lines - cpu_lines)) files=$((files - cpu_files))
  else
    read -r lines files < <(count "$1")
  fi
}

if [ "${1:-}" = "--check" ]; then
  breaches=0 summary=()
  over=0
  for d in "${FOLDERS[@]}"; do
    folder_lines "$d"
    if [ "$lines" -gt "${BUDGETS[$d]}" ]; then
      echo "$d: $lines lines, over its budget of ${BUDGETS[$d]} (BUDGETS in tools/loc.sh)"
      over=$((over + 1))
    fi
  done
  summary+=("$([ "$over" -eq 0 ] && echo "${#FOLDERS[@]} folders within budget" || echo "$over of ${#FOLDERS[@]} folders over budget")")
  breaches=$((breaches + over))

  # Every file in src/, whatever its kind (a .proto too).
  over=0
  while IFS= read -r -d '' f; do
    n=$(wc -l <"$f")
    if [ "$n" -gt "$MAX_FILE_LINES" ]; then
      echo "$f: $n lines (max $MAX_FILE_LINES)"
      over=$((over + 1))
    fi
  done < <(find src -type f -print0 | sort -z)
  summary+=("$([ "$over" -eq 0 ] && echo "no file over $MAX_FILE_LINES lines" || echo "$over files over $MAX_FILE_LINES lines")")
  breaches=$((breaches + over))

  # func_lengths.py prints one line per long function, then its own summary (left out: ours
  # says it).
  set +e
  out="$(python3 tools/func_lengths.py --max "$MAX_FUNCTION_LINES")"
  rc=$?
  set -e
  [ "$rc" -le 1 ] || { echo "$out"; echo "loc: tools/func_lengths.py failed (exit $rc)" >&2; exit 2; }
  over="$(grep -c -v '^func_lengths:' <<<"$out" || true)"
  grep -v '^func_lengths:' <<<"$out" || true
  summary+=("$([ "$over" -eq 0 ] && echo "no function over $MAX_FUNCTION_LINES lines" || echo "$over functions over $MAX_FUNCTION_LINES lines")")
  breaches=$((breaches + over))

  joined="$(printf '%s, ' "${summary[@]}")"
  echo "loc: ${joined%, }"
  [ "$breaches" -eq 0 ]
  exit
fi
[ $# -eq 0 ] || { echo "loc: unknown argument '$1' (usage: tools/loc.sh [--check])" >&2; exit 2; }

total=0
printf '%-20s %7s %6s\n' folder lines files
for d in "${FOLDERS[@]}"; do
  folder_lines "$d"
  printf '%-20s %7d %6d\n' "$d" "$lines" "$files"
  total=$((total + lines))
done
printf '%-20s %7d\n' total "$total"
