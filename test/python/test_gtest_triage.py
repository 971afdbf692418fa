"""tools/gtest_triage.py against a fake GoogleTest binary whose failures are scripted: one test
poisons the process (every later test fails, as after a CUDA illegal address), one crashes."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRIAGE = os.path.join(ROOT, "tools", "gtest_triage.py")

FAKE = r'''#!PYTHON
import os, signal, sys
TESTS = ["A.fine", "A.poisons", "A.victim", "B.crashes", "B.broken", "B.fine"]
args = sys.argv[1:]
if "--gtest_list_tests" in args:
    print("A.\n  fine\n  poisons\n  victim\nB.\n  crashes  # GetParam() = 1\n  broken\n  fine")
    sys.exit(0)
chosen = TESTS
for a in args:
    if a.startswith("--gtest_filter="):
        chosen = [t for t in TESTS if t in a.split("=", 1)[1].split(":")]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(" ".join(args) + " CUDA_LAUNCH_BLOCKING=" + os.environ.get("CUDA_LAUNCH_BLOCKING", "") + "\n")
poisoned = failed = False
for t in chosen:
    print("[ RUN      ] " + t, flush=True)
    if t == "B.crashes":
        os.kill(os.getpid(), signal.SIGSEGV)
    bad = poisoned or t in ("A.poisons", "B.broken")
    poisoned = poisoned or t == "A.poisons"
    failed = failed or bad
    print(("[  FAILED  ] " if bad else "[       OK ] ") + t + " (1 ms)", flush=True)
sys.exit(1 if failed else 0)
'''


def fake(tmp_path, body=FAKE):
    path = tmp_path / "fake_gtest"
    path.write_text(body.replace("PYTHON", sys.executable))
    path.chmod(0o755)
    return str(path)


def triage(tmp_path, binary, *args):
    env = dict(os.environ, FAKE_LOG=str(tmp_path / "calls.log"))
    return subprocess.run([sys.executable, TRIAGE, binary, "--report", str(tmp_path / "r.json")] + list(args),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=60)


def test_triage_tells_real_failures_from_cascades_and_crashes(tmp_path):
    r = triage(tmp_path, fake(tmp_path), "--", "--gtest_output=json:first.json")
    assert r.returncode == 1, r.stdout
    verdicts = json.loads((tmp_path / "r.json").read_text())["verdicts"]
    assert verdicts == {"A.poisons": "failed", "B.crashes": "crashed", "A.victim": "cascade",
                        "B.broken": "failed", "B.fine": "cascade"}
    assert "triage: crashed       B.crashes" in r.stdout
    calls = (tmp_path / "calls.log").read_text().splitlines()
    # The first run as asked; then fresh processes, blocking launches, the first run's JSON kept.
    assert calls[0] == "--gtest_output=json:first.json CUDA_LAUNCH_BLOCKING="
    assert len(calls) >= 2 and all("CUDA_LAUNCH_BLOCKING=1" in c and "gtest_output" not in c for c in calls[1:])
    assert "--gtest_filter=A.victim:B.broken:B.fine" in calls[1]
    # then each real failure alone
    assert calls[-2:] == ["--gtest_filter=A.poisons CUDA_LAUNCH_BLOCKING=1", "--gtest_filter=B.broken CUDA_LAUNCH_BLOCKING=1"]


def test_a_failure_that_passes_alone_failed_after_others_and_disabled_tests_are_left_out(tmp_path):
    # A.fine leaves an error behind (as a kernel's asynchronous fault would) that A.poisons reports;
    # alone, A.poisons passes. B.DISABLED_never is listed but never runs.
    late = FAKE.replace('bad = poisoned or t in ("A.poisons", "B.broken")',
                        'bad = poisoned or (t == "A.poisons" and "A.fine" in chosen) or t == "B.broken"')
    late = late.replace('"B.fine"]', '"B.fine", "B.DISABLED_never"]').replace(
        '  broken\\n  fine")', '  broken\\n  fine\\n  DISABLED_never")').replace('t == "B.crashes"', "False")
    r = triage(tmp_path, fake(tmp_path, late))
    assert r.returncode == 1, r.stdout
    verdicts = json.loads((tmp_path / "r.json").read_text())["verdicts"]
    assert verdicts["A.poisons"] == "after others"
    assert "B.DISABLED_never" not in verdicts


def test_a_clean_run_needs_no_triage(tmp_path):
    clean = FAKE.replace('"A.poisons", "B.broken"', '"none"').replace('t == "B.crashes"', "False").replace(
        't == "A.poisons"', "False")
    r = triage(tmp_path, fake(tmp_path, clean))
    assert r.returncode == 0, r.stdout
    assert json.loads((tmp_path / "r.json").read_text()) == {"binary": "fake_gtest", "clean": True, "verdicts": {}}
    assert len((tmp_path / "calls.log").read_text().splitlines()) == 1


def test_past_the_deadline_what_is_left_is_unresolved(tmp_path):
    hang = FAKE.replace("os.kill(os.getpid(), signal.SIGSEGV)", "import time; time.sleep(60)")
    r = triage(tmp_path, fake(tmp_path, hang), "--deadline-s", "3")
    assert r.returncode == 1, r.stdout
    verdicts = json.loads((tmp_path / "r.json").read_text())["verdicts"]
    assert verdicts["B.crashes"] == "timed out" and verdicts["A.poisons"] == "failed"
    assert verdicts["A.victim"] == "unresolved"


def test_bad_arguments_are_refused(tmp_path):
    for args in (["--deadline-s", "soon"], ["--frobnicate"]):
        r = subprocess.run([sys.executable, TRIAGE, sys.executable] + args, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 2 and "gtest_triage:" in r.stdout
    r = subprocess.run([sys.executable, TRIAGE, str(tmp_path / "none")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 2 and "not an executable" in r.stdout
