#!/usr/bin/env bash
# Lines of code per folder, in pipeline order (STYLE.md: the size of each layer, kept honest).
# "src/device (shared)" is src/device minus its backend folders: Device, allocators, the CUDA stub.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

FOLDERS=(src/core src/graph "src/device (shared)" src/device/cpu src/device/cuda src/nn src/io swig test tools
         examples)

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

total=0
printf '%-20s %7s %6s\n' folder lines files
for d in "${FOLDERS[@]}"; do
  if [ "$d" = "src/device (shared)" ]; then
    read -r lines files < <(count src/device 'src/device/cu[d]a/*')
    read -r cpu_lines cpu_files < <(count src/device/cpu)
    lines=$((lines - cpu_lines)) files=$((files - cpu_files))
  else
    read -r lines files < <(count "$d")
  fi
  printf '%-20s %7d %6d\n' "$d" "$lines" "$files"
  total=$((total + lines))
done
printf '%-20s %7d\n' total "$total"
