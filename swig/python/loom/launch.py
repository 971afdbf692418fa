"""Starts N ranks of a program under OpenMPI's mpirun, on this machine or the hosts of a host file.

    python3 -m loom.launch -n 2 train.py --epochs 3      a Python script: run by this Python
    tools/launch.sh -n 2 -- build/loom-mlp --dist        any program

Options (before the program):
    -n, --np N          number of ranks (required)
    --threads T         loom threads per rank (default: the cores this process may use, split
                        between the ranks, at least 1)
    --timeout S         LOOM_COMM_TIMEOUT_S for the ranks: how long a collective waits for a
                        rank that does not arrive before it fails (default 25 s)
    --mpirun PATH       the mpirun to use (default: the one on PATH)
    --hostfile FILE     OpenMPI's host file: one host per line, `host [slots=N]`, # comments;
                        a host named on several lines has one slot per line (OpenMPI refuses
                        that mixed with slots=, and so does this launcher, saying which host);
                        the ranks go to its hosts in order (mpirun --hostfile). Each host needs
                        loom at the same path and passwordless ssh from this one (OpenMPI's
                        own requirements); a host named twice, or this machine, runs locally.
                        Threads per rank: the cores here / the ranks on the busiest host.

What it does around mpirun:
  - works as root in a container (OMPI_ALLOW_RUN_AS_ROOT=1 and its confirmation), starts more
    ranks than cores (--oversubscribe) and pins none of them (--bind-to none: each rank's loom
    pool spreads over the cores it is given by thread count, not by binding);
  - splits the cores: LOOM_NUM_THREADS (and OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, for the
    libraries' own pools) = cores / N, at least 1, unless the environment sets them already;
  - passes the environment through (the ranks inherit it; LOOM_*, PATH, PYTHONPATH and
    LD_LIBRARY_PATH are also exported explicitly with -x, for launchers that start elsewhere);
  - kills the whole job as soon as one rank exits non-zero or dies (OpenMPI's default, asked for
    explicitly), and names every rank that failed, on stderr and again in a summary at the end.
    A rank that raises while others wait in a collective aborts the job itself (Note [A failing
    rank takes the job down] in src/io/comm/comm.h).
The exit status is mpirun's: 0 when every rank succeeded.

This file runs on its own too (tools/launch.sh runs it with /usr/bin/python3): it imports nothing
from loom.
"""
import os
import shutil
import subprocess
import sys
import tempfile

# Runs one rank's program; when it fails, says which rank and how, and leaves a record for the
# summary. $1 is the status folder, the rest the program and its arguments.
_RANK_WRAPPER = r'''
status_dir="$1"; shift
"$@"
rc=$?
if [ "$rc" -ne 0 ]; then
  if [ "$rc" -gt 128 ]; then how="was killed by signal $((rc - 128))"; else how="exited with status $rc"; fi
  msg="rank ${OMPI_COMM_WORLD_RANK:-?} of ${OMPI_COMM_WORLD_SIZE:-?} $how"
  echo "[launch] $msg: $*" >&2
  echo "$msg" > "$status_dir/rank-${OMPI_COMM_WORLD_RANK:-unknown}"
fi
exit "$rc"
'''

USAGE = ("usage: python3 -m loom.launch -n N [--threads T] [--timeout S] [--mpirun PATH] [--hostfile FILE] [--] "
         "PROGRAM [ARGS...]")


def _fail(msg):
    print(f"[launch] error: {msg}\n{USAGE}", file=sys.stderr)
    sys.exit(2)


def _positive_int(flag, text):
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        _fail(f"{flag} takes a whole number of at least 1, not '{text}'")
    return v


def parse(argv):
    """(options dict, program argv) from the launcher's command line."""
    opts = {"np": None, "threads": None, "timeout": None, "mpirun": None, "hostfile": None}
    flags = {"-n": "np", "--np": "np", "--threads": "threads", "--timeout": "timeout", "--mpirun": "mpirun",
             "--hostfile": "hostfile"}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            i += 1
            break
        if a in ("-h", "--help"):
            print(__doc__)
            sys.exit(0)
        key, value = (a.split("=", 1) + [None])[:2] if a.startswith("--") else (a, None)
        if key not in flags:
            if a.startswith("-"):
                _fail(f"unknown option '{a}'")
            break  # the program
        if value is None:
            if i + 1 >= len(argv):
                _fail(f"{key} needs a value")
            value = argv[i + 1]
            i += 1
        opts[flags[key]] = value
        i += 1
    program = argv[i:]
    if opts["np"] is None:
        _fail("the number of ranks (-n N) is required")
    opts["np"] = _positive_int("-n", opts["np"])
    if opts["threads"] is not None:
        opts["threads"] = _positive_int("--threads", opts["threads"])
    if opts["timeout"] is not None:
        try:
            ok = float(opts["timeout"]) > 0
        except ValueError:
            ok = False
        if not ok:
            _fail(f"--timeout takes a positive number of seconds, not '{opts['timeout']}'")
    if opts["hostfile"] is not None:
        opts["hosts"] = read_hostfile(opts["hostfile"])
    if not program:
        _fail("no program to run")
    if program[0].endswith(".py"):
        program = [sys.executable] + program
    return opts, program


def read_hostfile(path):
    """[(host, slots)] of an OpenMPI host file, checked: a missing or empty file, or a line that is
    not `host [slots=N] [max_slots=N]`, is refused naming the file and the line."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        _fail(f"--hostfile {path}: cannot read it ({e.strerror})")
    hosts, with_slots = [], set()
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        slots = 1
        for w in words[1:]:
            key, _, value = w.partition("=")
            if key not in ("slots", "max_slots", "max-slots") or not value.isdigit() or int(value) < 1:
                _fail(f"--hostfile {path} line {number}: '{w}' is not slots=N or max_slots=N with N >= 1 "
                      f"(a line is `host [slots=N]`)")
            if key == "slots":
                slots = int(value)
                with_slots.add(words[0])
        hosts.append((words[0], slots))
    if not hosts:
        _fail(f"--hostfile {path}: names no host")
    for host in sorted(with_slots):
        if sum(1 for h, _ in hosts if h == host) > 1:
            _fail(f"--hostfile {path}: host '{host}' is on several lines and has slots=: OpenMPI takes one line "
                  f"per slot or one line with slots=N, not both")
    return hosts


def _ranks_on_busiest_host(n, hosts):
    """The most ranks one host gets when mpirun fills the hosts' slots in order (repeated names
    merged, as OpenMPI does), then round-robin over the hosts once the slots are full."""
    slots = {}
    for host, s in hosts:
        slots[host] = slots.get(host, 0) + s
    placed = {h: 0 for h in slots}
    left = n
    for h, s in slots.items():
        take = min(s, left)
        placed[h] += take
        left -= take
    names = list(slots)
    for i in range(left):  # oversubscribed
        placed[names[i % len(names)]] += 1
    return max(placed.values())


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _openmpi_major(mpirun):
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for word in out.split():
        if word[:1].isdigit() and "." in word:
            return int(word.split(".")[0])
    return None


def command(opts, program, status_dir, env):
    """The mpirun command line; sets the ranks' variables in env."""
    mpirun = opts["mpirun"] or shutil.which("mpirun")
    if not mpirun:
        _fail("mpirun not found: install OpenMPI (apt-get install openmpi-bin libopenmpi-dev, or tools/setup.sh)")
    n = opts["np"]
    busiest = _ranks_on_busiest_host(n, opts["hosts"]) if opts.get("hosts") else n
    threads = opts["threads"] or max(1, _cores() // busiest)
    for var in ("LOOM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        if opts["threads"] is not None or not env.get(var):
            env[var] = str(threads)
    if opts["timeout"] is not None:
        env["LOOM_COMM_TIMEOUT_S"] = opts["timeout"]
    if os.geteuid() == 0:  # containers run as root; OpenMPI refuses that unless told twice
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    cmd = [mpirun, "-np", str(n), "--oversubscribe", "--bind-to", "none"]
    if opts.get("hostfile"):
        cmd += ["--hostfile", os.path.abspath(opts["hostfile"])]
    if _openmpi_major(mpirun) == 4:
        cmd += ["--mca", "orte_abort_on_non_zero_status", "1"]
    exported = sorted(v for v in env if v.startswith("LOOM_") or v.startswith("OMP_") or v.startswith("OPENBLAS_")
                      or v in ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH"))
    for var in exported:
        cmd += ["-x", var]
    return cmd + ["/bin/sh", "-c", _RANK_WRAPPER, "loom-rank", status_dir] + program


def main(argv=None):
    opts, program = parse(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="loom-launch-") as status_dir:
        cmd = command(opts, program, status_dir, env)
        try:
            rc = subprocess.call(cmd, env=env)
        except KeyboardInterrupt:
            rc = 130
        failed = sorted(os.listdir(status_dir), key=lambda f: os.path.getmtime(os.path.join(status_dir, f)))
        records = []
        for f in failed:
            with open(os.path.join(status_dir, f)) as fh:
                records.append(fh.read().strip())
    if rc != 0:
        who = "; ".join(records) if records else (
            "no rank exited by itself: a rank aborted the job (its message above names it) or mpirun failed")
        print(f"[launch] the job failed (mpirun exit status {rc}): {who}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
