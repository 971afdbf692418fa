#!/usr/bin/env python3
"""Runs a GoogleTest binary and, when tests fail or the binary dies, tells the real failures from
their cascades: what a short GPU slot needs from one run of the GPU suite.

  tools/gtest_triage.py BINARY [--deadline-s N] [--report FILE] [-- GTEST_ARGS...]

On a GPU one bad kernel (an illegal address) poisons the process's CUDA context, after which every
later test of the run fails, and a crash (a signal, an abort, a time-out) ends the run with the
tests after it never run and GoogleTest's JSON never written. So after a first run that is not
clean, rounds follow, each in a fresh process, with CUDA_LAUNCH_BLOCKING=1 (an error is reported
by the kernel that made it):
  - a test that crashed is a real failure ("crashed", or "timed out"); the tests it kept from
    running run next;
  - of the failed tests, the first to finish is a real failure ("failed"); the others ran after
    it and run again without it;
  - a test that passes in a later round is a cascade ("cascade": it failed only after another).
Then each "failed" test runs alone: one that passes there failed only after the tests before it
("after others": an asynchronous error of an earlier test can surface in a later one).
Later rounds drop GTEST_ARGS' --gtest_filter and --gtest_output (the first run's JSON is kept);
disabled tests are left out unless GTEST_ARGS has --gtest_also_run_disabled_tests.
Rounds stop when every test has a verdict or the deadline (seconds from the start) is near; a test
left without one is "unresolved". Each round's output is printed line by line as it comes, each
verdict on a "triage:" line at the end, and --report writes them as JSON. The exit status is 0
when the first run passed, 1 otherwise (a cascade still leaves the run failed: its cause failed),
2 for bad arguments.
"""
import json
import os
import re
import subprocess
import sys
import threading
import time

LINE = re.compile(r"^\[ *(RUN|OK|FAILED|SKIPPED) *\] (\S+)")


def run_once(binary, tests, extra, env, limit):
    """Runs binary on tests (None: its own selection), printing its output as it comes; returns
    (results {name: status} in the order the tests finished, the test running when the process
    ended, the exit status; -1 when it ran past limit)."""
    cmd = [binary] + list(extra)
    if tests is not None:
        cmd.append("--gtest_filter=" + ":".join(tests))
    results, state = {}, {"running": None}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            text=True, errors="replace")

    def read():
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            m = LINE.match(line)
            if not m:
                continue
            what, name = m.groups()
            if what == "RUN":
                state["running"] = name
            elif name == state["running"] or name not in results:  # the summary repeats FAILED lines
                results[name] = "passed" if what in ("OK", "SKIPPED") else "failed"
                if name == state["running"]:
                    state["running"] = None

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=max(limit, 1))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = -1
    reader.join(timeout=5)
    return results, (None if rc == 0 else state["running"]), rc


def listed(binary, extra, limit):
    """The tests binary would run with extra's filter, in order ([] when it cannot say in time)."""
    try:
        out = subprocess.run([binary, "--gtest_list_tests"] + [a for a in extra if a.startswith("--gtest_filter")],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                             timeout=max(limit, 1)).stdout
    except subprocess.TimeoutExpired:
        return []
    disabled = "--gtest_also_run_disabled_tests" not in extra
    names, suite = [], ""
    for line in out.splitlines():
        if not line.strip() or line.startswith(("Running", "Note:")):
            continue
        if not line.startswith(" "):
            suite = line.split("#")[0].strip()
        else:
            names.append(suite + line.split("#")[0].strip())
    return [n for n in names if not (disabled and "DISABLED_" in n)]


def triage(binary, extra, deadline_s):
    """(verdicts {name: verdict}, whether the first run passed)."""
    start = time.monotonic()
    left = lambda: deadline_s - (time.monotonic() - start)
    order = listed(binary, extra, left() / 4)
    results, crashed, rc = run_once(binary, None, extra, os.environ.copy(), left())
    if rc == 0:
        return {}, True
    verdicts = {}
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
    later = [a for a in extra if not a.startswith(("--gtest_filter", "--gtest_output"))]
    asked = order
    while True:
        if crashed:
            verdicts[crashed] = "crashed" if rc != -1 else "timed out"
        failed = [t for t, s in results.items() if s == "failed" and t not in verdicts]  # in finishing order
        if failed:  # the first failure of a run, all before it having passed, is real
            verdicts[failed[0]] = "failed"
        pending = [t for t in asked if t not in verdicts and results.get(t) != "passed"]
        if not pending:
            break
        if left() < 10:
            for t in pending:
                verdicts[t] = "unresolved"
            break
        print(f"triage: again without {len(verdicts)} failed test(s): {len(pending)} to run", flush=True)
        asked = pending
        results, crashed, rc = run_once(binary, asked, later, env, left() - 5)
        for t in asked:
            if results.get(t) == "passed":
                verdicts[t] = "cascade"
        if not results and not crashed:  # nothing ran: the binary itself is broken
            for t in asked:
                verdicts[t] = "unresolved"
            break
    # A failure confirmed alone, in a fresh process; one that passes there failed after others.
    for t in [t for t, v in verdicts.items() if v == "failed"]:
        if left() < 10:
            break
        print(f"triage: {t} alone", flush=True)
        alone, _, _ = run_once(binary, [t], later, env, left() - 5)
        if alone.get(t) == "passed":
            verdicts[t] = "after others"
    return verdicts, False


def main(argv):
    args, extra = argv, []
    if "--" in argv:
        i = argv.index("--")
        args, extra = argv[:i], argv[i + 1:]
    if not args or args[0].startswith("-"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    binary, report, deadline = args[0], None, 110.0
    rest = args[1:]
    while rest:
        flag = rest.pop(0)
        if flag in ("--deadline-s", "--report") and rest:
            value = rest.pop(0)
            if flag == "--report":
                report = value
            else:
                try:
                    deadline = float(value)
                except ValueError:
                    print(f"gtest_triage: --deadline-s takes seconds, not '{value}'", file=sys.stderr)
                    return 2
        else:
            print(f"gtest_triage: unknown or incomplete argument '{flag}'", file=sys.stderr)
            return 2
    if not os.access(binary, os.X_OK):
        print(f"gtest_triage: '{binary}' is not an executable", file=sys.stderr)
        return 2
    verdicts, clean = triage(binary, extra, deadline)
    if not clean and not verdicts:
        print("triage: the run failed with no test failing (at start-up or at exit)")
    for name, verdict in verdicts.items():
        print(f"triage: {verdict:13} {name}")
    if report:
        tmp = report + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"binary": os.path.basename(binary), "clean": clean, "verdicts": verdicts}, f, indent=1)
        os.replace(tmp, report)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
