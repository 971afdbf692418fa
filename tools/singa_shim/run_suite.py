"""Runs SINGA's Python test files against loom through the rename shim (singa_rename.py) and
prints per-file and total pass counts. Called by tools/singa_suite.sh; see there for usage.

Each file runs in its own pytest process (a file that fails to import costs only its own tests)
with a JUnit XML report, read back for passed / failed / errors / skipped. A file whose module
cannot be imported reports its test functions, counted from the source, as failed. Skips are
SINGA's own (`skipIf(not USE_CUDA)`): without a GPU its GPU variants skip and the figure is over
the CPU tests; with one they run and count.
"""
import ast
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

# The files of SINGA's test/python that test what a user script calls. Left out: test_dist.py
# (needs several GPUs and NCCL), test_mkldnn.py (SINGA's DNNL build internals) and
# test_onnx_backend.py (onnx's own backend suite, a separate measurement).
FILES = ("test_operation.py", "test_onnx.py", "test_api.py", "test_opt.py", "test_model.py",
         "test_tensor.py", "test_initializer.py")
SHIM = os.path.dirname(os.path.abspath(__file__))


def count_defined_tests(path):
    """Test methods defined in the file: what a file that cannot be collected would have run."""
    with open(path) as f:
        tree = ast.parse(f.read())
    return sum(1 for node in ast.walk(tree)
               if isinstance(node, ast.FunctionDef) and node.name.startswith("test"))


def run_file(directory, name, python, verbose):
    with tempfile.TemporaryDirectory() as tmp:
        xml = os.path.join(tmp, "report.xml")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (SHIM, directory, env.get("PYTHONPATH")) if p)
        cmd = [python, "-m", "pytest", "-q", "-p", "singa_rename", "-p", "no:cacheprovider",
               "--junitxml", xml, "-o", "junit_family=xunit2", name]
        proc = subprocess.run(cmd, cwd=directory, env=env, capture_output=True, text=True)
        if verbose:
            sys.stdout.write(proc.stdout[-20000:] + proc.stderr[-5000:])
        counts = {"passed": 0, "failed": 0, "skipped": 0}
        collected = False
        if os.path.exists(xml):
            for case in ET.parse(xml).getroot().iter("testcase"):
                if not case.get("name"):
                    continue
                collected = True
                tags = {child.tag for child in case}
                if "skipped" in tags:
                    counts["skipped"] += 1
                elif tags & {"failure", "error"}:
                    counts["failed"] += 1
                else:
                    counts["passed"] += 1
        note = ""
        if not collected or proc.returncode in (2, 3, 4):  # interrupted: collection or usage error
            counts = {"passed": 0, "failed": count_defined_tests(os.path.join(directory, name)), "skipped": 0}
            note = "  (not collected: " + _last_error(proc.stdout + proc.stderr) + ")"
        return counts, note


def _last_error(text):
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("E ")]
    return lines[-1][2:].strip()[:120] if lines else "see pytest's output"


def main(argv):
    verbose = "-v" in argv
    args = [a for a in argv if a != "-v"]
    if len(args) != 1 or not os.path.isdir(args[0]):
        sys.stderr.write("usage: tools/singa_suite.sh [-v] SINGA_TEST_PYTHON_DIR\n")
        return 2
    directory = os.path.abspath(args[0])
    python = os.environ.get("PYTHON", sys.executable)
    total = {"passed": 0, "failed": 0, "skipped": 0}
    print(f"{'file':24} {'passed':>6} {'run':>5} {'skipped':>8}")
    for name in FILES:
        if not os.path.exists(os.path.join(directory, name)):
            print(f"{name:24} missing")
            continue
        counts, note = run_file(directory, name, python, verbose)
        for k in total:
            total[k] += counts[k]
        ran = counts["passed"] + counts["failed"]
        print(f"{name:24} {counts['passed']:6d} {ran:5d} {counts['skipped']:8d}{note}")
    ran = total["passed"] + total["failed"]
    share = 100.0 * total["passed"] / ran if ran else 0.0
    print(f"{'total':24} {total['passed']:6d} {ran:5d} {total['skipped']:8d}   {share:.1f}% of the tests run pass")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
