"""Communicators from Python (issue 15): a 1-rank world in this process, and 2-rank jobs started
with `python3 -m loom.launch -n 2` on tiny scripts, healthy and failing. The only clock is an
upper bound on a hang (the 30 s issue 15 allows), never a speed."""
import os
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import loom
from loom import comm, tensor

needs_mpi = pytest.mark.skipif(not comm.mpi_built(), reason="loom built without MPI (LOOM_USE_MPI=OFF, or MPI not "
                               "installed: tools/setup.sh installs it)")

HANG_BOUND_S = 30


@pytest.mark.skipif(comm.mpi_built(), reason="this build has MPI: the tests below use it")
def test_without_mpi_says_what_to_install():
    with pytest.raises(loom.DeviceError, match="libopenmpi-dev"):
        comm.communicator()


@needs_mpi
def test_one_rank_world(dev):
    c = comm.communicator("mpi")
    assert (c.rank(), c.size(), c.backend(), c.on_device()) == (0, 1, "mpi", False)
    t = tensor.from_numpy(np.array([1.5, -2.0, 3.0], dtype=np.float32), dev)
    c.all_reduce(t)
    c.all_reduce(t, "max")
    c.broadcast(t, 0)
    # The keywords the module's docstring shows (they raised TypeError).
    c.broadcast(t, root=0)
    c.all_reduce(t, op="max")
    c.barrier()
    np.testing.assert_array_equal(tensor.to_numpy(t), [1.5, -2.0, 3.0])
    assert comm.communicator("auto", dev).backend() == "mpi"  # a CPU device


@needs_mpi
def test_mistakes_are_loom_errors(dev):
    c = comm.communicator("mpi")
    t = tensor.from_numpy(np.zeros(4, dtype=np.float32), dev)
    with pytest.raises(loom.ValueError, match=r"\[all_reduce\] op 'min'"):
        c.all_reduce(t, "min")
    with pytest.raises(loom.ValueError, match=r"broadcast from rank 1: the world has ranks 0 to 0"):
        c.broadcast(t, 1)
    with pytest.raises(loom.ValueError, match="unknown backend 'gloo'"):
        comm.communicator("gloo")
    with pytest.raises(loom.ValueError, match="non-contiguous"):
        c.all_reduce(tensor.from_numpy(np.zeros((2, 3), dtype=np.float32), dev).transpose())
    assert issubclass(loom.CommError, loom.Error) and issubclass(loom.CommError, RuntimeError)


def _launch(tmp_path, script, *args, env=None, launcher=()):
    """Runs `python3 -m loom.launch -n 2 [launcher options] script args` and returns (exit code,
    output, seconds)."""
    path = tmp_path / "rank_script.py"
    path.write_text(textwrap.dedent(script))
    e = dict(os.environ)
    e["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(loom.__file__)))
    e.update(env or {})
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "loom.launch", "-n", "2", *launcher, str(path), *args],
                       capture_output=True, text=True, env=e, timeout=120)
    return r.returncode, r.stdout + r.stderr, time.monotonic() - start


SCRIPT = """
    import os, sys, time
    import numpy as np
    import loom
    from loom import comm, device, tensor
    c = comm.communicator()
    dev = device.create_cpu_device()
    t = tensor.from_numpy(np.arange(5, dtype=np.float64) * (c.rank() + 1), dev)
    c.all_reduce(t)
    print(f"rank {c.rank()} of {c.size()} (local {comm.local_rank()}): sum {tensor.to_numpy(t).tolist()} "
          f"threads {os.environ['LOOM_NUM_THREADS']}", flush=True)
    mode = sys.argv[1]
    if c.rank() == 1 and mode == "raise":
        raise KeyError("rank 1 raises before the barrier")
    if c.rank() == 1 and mode == "late":
        time.sleep(0.5)  # rank 0 waits for it in the all_reduce below
    if c.rank() == 1 and mode == "stall":
        time.sleep(60)  # never reaches the all_reduce below; killed long before
    try:
        c.all_reduce(t, "max")
    except loom.CommError as e:
        print(f"caught loom.CommError (a RuntimeError: {isinstance(e, RuntimeError)}): {e}", flush=True)
        sys.exit(4)
    print(f"rank {c.rank()} max {tensor.to_numpy(t).tolist()}", flush=True)
"""


@needs_mpi
def test_launch_two_ranks(tmp_path):
    code, out, _ = _launch(tmp_path, SCRIPT, "ok")
    assert code == 0, out
    threads = max(1, len(os.sched_getaffinity(0)) // 2)  # the launcher splits the cores
    for r in (0, 1):
        assert f"rank {r} of 2 (local {r}): sum [0.0, 3.0, 6.0, 9.0, 12.0] threads {threads}" in out, out
        assert f"rank {r} max [0.0, 3.0, 6.0, 9.0, 12.0]" in out, out


@needs_mpi
def test_rank_that_raises_ends_the_job(tmp_path):
    code, out, seconds = _launch(tmp_path, SCRIPT, "raise")
    assert code != 0, out
    assert seconds < HANG_BOUND_S, out
    assert "KeyError: 'rank 1 raises before the barrier'" in out, out  # the traceback, first
    assert "[comm] rank 1 of 2: uncaught Python KeyError" in out, out
    assert "[launch] the job failed" in out, out


@needs_mpi
def test_stalled_rank_gives_comm_error_naming_the_rank_and_call(tmp_path):
    code, out, seconds = _launch(tmp_path, SCRIPT, "stall", env={"LOOM_COMM_TIMEOUT_S": "3"})
    assert code != 0, out
    assert seconds < HANG_BOUND_S, out
    assert ("caught loom.CommError (a RuntimeError: True): [mpi] all_reduce (max of 5 float64) on rank 0 of 2: "
            "did not complete within 3 s") in out, out


@needs_mpi
@pytest.mark.parametrize("timeout", ["inf", "1e10", "1e300"])
def test_timeout_without_end_lets_a_healthy_job_wait(tmp_path, timeout):
    # Note [Timeouts without end]: the deadline overflowed into the past and the rank that waited
    # failed its all_reduce at once.
    code, out, _ = _launch(tmp_path, SCRIPT, "late", env={"LOOM_COMM_TIMEOUT_S": timeout})
    assert code == 0, out
    for r in (0, 1):
        assert f"rank {r} max [0.0, 3.0, 6.0, 9.0, 12.0]" in out, out


@needs_mpi
@pytest.mark.parametrize("mode", ["ok", "raise"])
def test_launch_on_a_host_file_naming_this_machine_twice(tmp_path, mode):
    # OpenMPI's host file, as a run on several machines gives it: here this machine on two lines
    # (a slot each); a rank that fails still takes the job down within the bound.
    hosts = tmp_path / "hosts"
    hosts.write_text(f"# two slots on this machine\n{socket.gethostname()}\n{socket.gethostname()}\n")
    code, out, seconds = _launch(tmp_path, SCRIPT, mode, launcher=("--hostfile", str(hosts)))
    threads = max(1, len(os.sched_getaffinity(0)) // 2)
    if mode == "ok":
        assert code == 0, out
        for r in (0, 1):
            assert f"rank {r} of 2 (local {r}): sum [0.0, 3.0, 6.0, 9.0, 12.0] threads {threads}" in out, out
    else:
        assert code != 0 and seconds < HANG_BOUND_S, out
        assert "[comm] rank 1 of 2: uncaught Python KeyError" in out and "[launch] the job failed" in out, out


def test_launcher_refuses_bad_host_files(tmp_path):
    host = socket.gethostname()
    files = {"empty": "# nobody\n\n", "bad": f"{host} cores=4\n", "zero": f"{host} slots=0\n",
             "mixed": f"{host} slots=1\n{host} slots=1\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    cases = [("missing", "cannot read it"), ("empty", "names no host"),
             ("bad", "line 1: 'cores=4' is not slots=N or max_slots=N with N >= 1"),
             ("zero", "line 1: 'slots=0' is not slots=N"),
             ("mixed", f"host '{host}' is on several lines and has slots=")]
    for name, message in cases:
        r = subprocess.run([sys.executable, "-m", "loom.launch", "-n", "2", "--hostfile", str(tmp_path / name), "x.py"],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.path.dirname(
                               os.path.dirname(os.path.abspath(loom.__file__)))))
        assert r.returncode == 2 and message in r.stderr, (name, r.stderr)


def test_launcher_refuses_bad_command_lines():
    for args, message in [(["-n", "0", "x.py"], "-n takes a whole number of at least 1, not '0'"),
                          (["x.py"], "the number of ranks (-n N) is required"),
                          (["-n", "2", "--timeout", "-1", "x.py"], "--timeout takes a positive number of seconds"),
                          (["-n", "2", "--"], "no program to run")]:
        r = subprocess.run([sys.executable, "-m", "loom.launch", *args], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(
                               loom.__file__)))))
        assert r.returncode == 2 and f"[launch] error: {message}" in r.stderr, (args, r.stderr)
