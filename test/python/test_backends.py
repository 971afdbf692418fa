"""Note [Backends loaded on first use]: a CPU-only program maps none of CUDA's, cuDNN's, NCCL's or
MPI's libraries (a training step in a fresh process, read from /proc/self/maps), and the first
CUDA query or MPI communicator opens the backend's library (so the check sees them when they are
there). libloom.so itself does not link them (readelf)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import python_env

FOREIGN = ("libcudart", "libcudnn", "libcublas", "libnccl", "libmpi", "libloom_cuda", "libloom_mpi")

PROGRAM = r"""
import json, os, sys
import numpy as np
from loom import autograd, comm, device, layer, model, opt, tensor

def mapped():
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if ".so" in path:
                libs.add(path)
    return sorted(libs)

dev = device.create_cpu_device()
net = layer.Sequential(layer.Linear(4, 8, device=dev), layer.ReLU(), layer.Linear(8, 3, device=dev))
m = model.NativeModel(net, opt.SGD(lr=0.1))
x = tensor.from_numpy(np.ones((2, 4), np.float32), dev)
y = tensor.from_numpy(np.array([0, 2], np.int32), dev)
m.compile([x], is_train=True, use_graph=True)
for _ in range(3):
    loss = m.train_one_batch(x, y)[1]
out = {"loss": float(loss.to_numpy()), "cpu": mapped()}
libloom = next(p for p in out["cpu"] if os.path.basename(p) == "libloom.so")
out["cuda_built"] = os.path.exists(os.path.join(os.path.dirname(libloom), "libloom_cuda.so"))
if sys.argv[1] == "cuda":
    out["available"] = device.cuda_available()
elif sys.argv[1] == "mpi" and comm.mpi_built():
    out["size"] = comm.communicator("mpi").size()
out["after"] = mapped()
print(json.dumps(out))
"""


def run(what):
    env = python_env()
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = subprocess.run([sys.executable, "-c", PROGRAM, what], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def foreign(libs):
    return [p for p in libs if os.path.basename(p).startswith(FOREIGN)]


def test_a_cpu_training_step_maps_no_cuda_nccl_or_mpi_library():
    r = run("cpu")
    assert r["loss"] == r["loss"]  # it trained (a finite loss)
    assert foreign(r["cpu"]) == [], "a CPU-only step mapped " + ", ".join(foreign(r["cpu"]))
    libloom = next(p for p in r["cpu"] if os.path.basename(p) == "libloom.so")
    needed = subprocess.run(["readelf", "-d", libloom], capture_output=True, text=True).stdout
    linked = [line.split("[")[-1].rstrip("]") for line in needed.splitlines() if "(NEEDED)" in line]
    assert linked and not [n for n in linked if n.startswith(FOREIGN)], linked


def test_the_first_cuda_query_opens_the_cuda_backend():
    r = run("cuda")
    if not r["cuda_built"]:
        pytest.skip("loom built without the CUDA backend: no libloom_cuda.so to open")
    assert foreign(r["cpu"]) == []
    names = {os.path.basename(p).split(".so")[0] for p in r["after"]}
    assert {"libloom_cuda", "libcudart", "libcublas", "libcudnn"} <= names, sorted(names)


def test_the_first_mpi_communicator_opens_the_mpi_library():
    from loom import comm
    if not comm.mpi_built():
        pytest.skip("loom built without MPI")
    r = run("mpi")
    assert r["size"] == 1 and foreign(r["cpu"]) == []
    names = {os.path.basename(p).split(".so")[0] for p in r["after"]}
    assert {"libloom_mpi", "libmpi"} <= names, sorted(names)


MISSING = r"""
import sys
import loom
from loom import comm, device
print("cuda_available", device.cuda_available())
for what, make in (("cuda", lambda: device.create_cuda_device(0)), ("mpi", lambda: comm.communicator("mpi"))):
    try:
        make()
        print(what, "made")
    except loom.DeviceError as e:
        print(what, "DeviceError", e)
"""


def test_a_backend_library_that_is_missing_is_a_device_error_naming_it(tmp_path):
    """libloom.so alone in a folder (the dynamic loader's search path puts it first): a CUDA device
    and an MPI communicator are loom.DeviceErrors naming the library that is missing."""
    from loom import comm
    r = run("cpu")
    libloom = next(p for p in r["cpu"] if os.path.basename(p) == "libloom.so")
    if not r["cuda_built"] and not comm.mpi_built():
        pytest.skip("loom built without CUDA and MPI: no backend library to miss")
    shutil.copy(libloom, tmp_path / "libloom.so")
    env = python_env()
    env["LD_LIBRARY_PATH"] = str(tmp_path) + (os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH")
                                              else "")
    out = subprocess.run([sys.executable, "-c", MISSING], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "cuda_available False" in lines
    if r["cuda_built"]:
        assert any(line.startswith("cuda DeviceError [cuda] cannot load libloom_cuda.so: ") for line in lines), lines
    if comm.mpi_built():
        assert any(line.startswith("mpi DeviceError [comm] cannot load libloom_mpi.so: ") for line in lines), lines
