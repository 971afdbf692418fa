"""Communicators: the ranks of a data-parallel job.

    from loom import comm
    c = comm.communicator()          # "auto": NCCL for a CUDA device (when built), else MPI
    print(c.rank(), c.size(), c.backend())
    c.all_reduce(t)                  # in place: the sum over ranks ("max" too)
    c.broadcast(t, root=0)           # in place: rank 0's values everywhere
    c.barrier()

Start the ranks with the launcher: `python3 -m loom.launch -n 2 train.py` (loom/launch.py). A
script started alone is a 1-rank world. Every rank makes the same communicators in the same order
and issues the same calls in the same order. A failed collective (a rank that died, exited or
raised, or a wait longer than LOOM_COMM_TIMEOUT_S seconds, default 25; inf, or anything from 1e9 s
up, is no limit) raises loom.CommError naming the rank and the call.

Once a communicator exists in a multi-rank job, an uncaught Python exception on any rank prints
its traceback and then aborts every rank (MPI_Abort), so that no other rank is left waiting for
this one in a collective.
"""
import sys

from . import core
from .errors import CommError  # noqa: F401  (re-exported)

Communicator = core.Communicator
mpi_built = core.mpi_built
nccl_built = core.nccl_built
local_rank = core.local_rank  # this rank's index on its machine (from the launcher's environment)

_previous_hook = None


def _abort_on_uncaught(exc_type, exc, tb):
    _previous_hook(exc_type, exc, tb)  # the traceback first
    sys.stderr.flush()
    core.abort_all_ranks(f"uncaught Python {exc_type.__name__}: {exc}", 1)


def _install_hook():
    global _previous_hook
    if _previous_hook is None:
        _previous_hook = sys.excepthook
        sys.excepthook = _abort_on_uncaught


def communicator(backend="auto", device=None):
    """A communicator over all ranks: backend "mpi", "nccl" or "auto" ("nccl" when `device` is a
    CUDA device and NCCL is built, else "mpi"). Raises loom.DeviceError naming what to install
    when the backend is not built."""
    c = core.make_communicator(backend, device)
    _install_hook()
    return c
