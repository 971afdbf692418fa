"""tools/probe.py, issue 36's reliability probe: its planted cases show that it names every bad
outcome (a crash by signal or by a silent exit, a hang, a silent or wrong answer, a built-in
error, a healthy run that raised, a lost file), and its default subset (several hundred cases,
each in its own interpreter) finds none of them in loom. `tools/probe.py --all` runs the slow
cases too (mpirun, 100,000-op histories, the further values of each table)."""
import json
import os
import subprocess
import sys

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "probe.py")
sys.path.insert(0, os.path.dirname(PROBE))
import probe  # noqa: E402


def run(tmp_path, *args):
    out = tmp_path / "probe.json"
    r = subprocess.run([sys.executable, PROBE, *args, "--json", str(out)], capture_output=True, text=True)
    assert out.exists(), r.stdout[-2000:] + r.stderr[-2000:]
    return r, json.loads(out.read_text())


def test_the_probe_names_every_bad_outcome(tmp_path):
    r, report = run(tmp_path, "--selftest")
    got = {x["case"]: (x["planted"], x["outcome"]) for x in report["results"]}
    assert {planted for planted, _ in got.values()} == set(probe.OUTCOMES)  # one planted case at least per outcome
    for case, (planted, outcome) in got.items():
        assert outcome == planted, f"{case}: planted {planted}, the probe says {outcome}"
    assert r.returncode == 0, r.stdout[-2000:]


def test_the_default_subset_finds_no_crash_hang_silent_answer_untyped_error_or_lost_file(tmp_path):
    r, report = run(tmp_path)
    bad = [f"{x['outcome']}: {x['case']}: {x['detail']}" for x in report["results"] if x["outcome"] not in probe.GOOD]
    assert not bad, "\n".join(bad)
    assert r.returncode == 0, r.stdout[-2000:]
    groups = {x["group"] for x in report["results"]}
    assert {"onnx", "onnx-file", "onnx-export", "autograd", "graph", "trainer", "data", "numerics", "graph_dump",
            "comm", "api"} <= groups
    assert report["cases"] >= 300
    assert sum(x["group"] == "api" for x in report["results"]) >= 100  # one call of each public function swept


def test_results_interleaved_by_mpirun_are_each_read():
    """mpirun may print one rank's result line in the middle of another's (the --all run of the
    API sweep met it): each result is decoded where its mark starts, a cut-off one skipped."""
    a = probe.MARK + json.dumps({"outcome": "ok", "detail": "{x}", "rank": "0"})
    b = probe.MARK + json.dumps({"outcome": "typed", "detail": "", "rank": "1"})
    got = probe._results(f"noise\n{a}{b}\n{probe.MARK}" + '{"outcome": "o')
    assert [r["rank"] for r in got] == ["0", "1"]
