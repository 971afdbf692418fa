#!/usr/bin/env bash
# Starts N ranks of a program under mpirun, on this machine or a host file's hosts:
#   tools/launch.sh -n N [--threads T] [--timeout S] [--hostfile FILE] [--] PROGRAM [ARGS...]
# The launcher itself is swig/python/loom/launch.py (also `python3 -m loom.launch`), which says
# what it does around mpirun: root in a container, cores split between ranks, the job killed and
# the failed rank named when one fails. It needs only Python and OpenMPI (tools/setup.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec /usr/bin/python3 "$ROOT/swig/python/loom/launch.py" "$@"
