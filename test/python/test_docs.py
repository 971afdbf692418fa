"""The Python in the docs runs: every ```python block of README.md and docs/guide.md, each as a
program of its own in a fresh process, unless the line above its fence is an HTML comment
`<!-- not run: why -->` (a block that stands for a user's own names). So a quick start cannot
rot: a renamed function or a changed default fails here."""
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, python_env

FENCE = re.compile(r"^```python\n(.*?)^```$", re.M | re.S)
DOCS = ["README.md", "docs/guide.md"]


def blocks(doc):
    """(line of the fence, code) of each block that runs."""
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        text = f.read()
    out = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        if not before.startswith("<!-- not run:"):
            out.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


CASES = [(doc, line, code) for doc in DOCS for line, code in blocks(doc)]


def test_the_docs_have_python_to_run():
    assert {doc for doc, _, _ in CASES} == set(DOCS)


@pytest.mark.parametrize("doc, line, code", CASES, ids=[f"{d}:{n}" for d, n, _ in CASES])
def test_a_python_block_of_the_docs_runs(doc, line, code, tmp_path):
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       env=python_env(), timeout=300)
    assert r.returncode == 0, f"{doc}, the block at line {line}:\n{r.stdout}\n{r.stderr}"


# ---- the shell commands of the docs ----
# Every shell block of README.md and docs/*.md (a ```sh / bash / shell / console fence, or a plain
# fence whose first line is a `$ command` transcript) says on the line above its fence how CI
# checks it: `<!-- run -->` (cheap: this file runs it, from the repository root, `build/` meaning
# the build under test), or `<!-- covered: REF, REF... -->` where a REF is `tools/test.sh STAGE`
# (that stage's function and the helpers it calls), or a file of the repository (tools/setup.sh,
# .ci/run, a test file, CMakeLists.txt). A covered block's every command must be named in its
# REFs' text: the program (`loom-cnn`, `launch.sh`, `quickstart.py`, `loom.launch`, `cmake
# --install`...), what a launcher starts, and any VAR=value it sets. A new block without either
# fails here, as does a claim whose REFs never mention the command.
SHELL_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
SHELL_LANGS = {"sh", "bash", "shell", "console"}
MARKER = re.compile(r"^<!-- (run|covered: (.+?)) -->$")
SHELL_DOCS = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs"))
                                     if f.endswith(".md"))


def shell_blocks(text):
    """(line of the fence, marker line or None, commands) of each shell block of a document."""
    out = []
    for m in SHELL_FENCE.finditer(text):
        lang, body = m.group(1), m.group(2)
        lines = [line for line in body.splitlines() if line.strip()]
        transcript = lang == "" and lines and lines[0].startswith("$ ")
        if lang not in SHELL_LANGS and not transcript:
            continue
        if transcript or lang == "console":
            lines = [line[2:] for line in lines if line.startswith("$ ")]
        joined = []  # a line ending in a backslash goes on in the next one
        for line in lines:
            if joined and joined[-1].endswith("\\"):
                joined[-1] = joined[-1][:-1].rstrip() + " " + line.strip()
            else:
                joined.append(line)
        cmds = []
        for line in joined:
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                cmds += [c.strip() for c in line.split("&&") if c.strip()]
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        out.append((text.count("\n", 0, m.start()) + 1, before if MARKER.match(before) else None, cmds))
    return out


def command_keys(cmd):
    """What a REF must name for `cmd` to count as covered."""
    words = cmd.split()
    keys = [w for w in words if re.match(r"^[A-Z_][A-Z0-9_]*=", w)]  # VAR=value it sets
    words = words[len(keys):]
    while words:
        prog = os.path.basename(words[0])
        if prog.startswith("python"):
            if "-m" in words:
                module = words[words.index("-m") + 1]
                keys.append(module)
                if module != "loom.launch":
                    return keys
                words = words[words.index("-m") + 2:]  # and what the launcher starts
                words = [w for w in words if not w.startswith("-") and not w.isdigit()]
                continue
            scripts = [w for w in words[1:] if w.endswith(".py")]
            return keys + ([os.path.basename(scripts[0])] if scripts else [prog])
        if prog == "pip":
            return keys + ["pip install"]
        if prog == "cmake":
            flags = [w for w in words[1:] if w in ("--install", "--build", "-S")]
            return keys + ["cmake", flags[0] if flags else words[1]]
        keys.append(prog)
        if prog == "launch.sh" and "--" in words:
            words = words[words.index("--") + 1:]
            continue
        return keys
    return keys


def ref_text(ref):
    ref = ref.strip()
    if ref.startswith("tools/test.sh "):
        with open(os.path.join(ROOT, "tools/test.sh"), encoding="utf-8") as f:
            script = f.read()
        bodies = dict(re.findall(r"^(\w+)\(\) \{\n(.*?)^\}$", script, re.M | re.S))
        stage = "stage_" + ref.split()[1]
        assert stage in bodies, f"tools/test.sh has no stage '{ref.split()[1]}'"
        text = bodies[stage]
        return text + "".join(body for name, body in bodies.items() if name != stage and name in text)
    path = os.path.join(ROOT, ref)
    assert os.path.isfile(path), f"'{ref}' is neither 'tools/test.sh STAGE' nor a file of the repository"
    with open(path, encoding="utf-8") as f:
        return f.read()


def uncovered(marker, cmds):
    """The commands of a covered block that none of its REFs names, with the missing keys."""
    refs = MARKER.match(marker).group(2).split(",")
    text = "".join(ref_text(r) for r in refs)
    return [(c, [k for k in command_keys(c) if k not in text]) for c in cmds
            if any(k not in text for k in command_keys(c))]


SHELL_CASES = [(doc, line, marker, cmds) for doc in SHELL_DOCS
               for line, marker, cmds in shell_blocks(open(os.path.join(ROOT, doc), encoding="utf-8").read())]


def test_the_checker_finds_blocks_and_refuses_an_unmarked_or_unnamed_one():
    text = ("```sh\nbuild/loom-new --fast\n```\n\n<!-- covered: tools/test.sh demo -->\n```sh\ntools/demo.sh\n"
            "build/loom-new\n```\n\n```\n$ tools/test.sh lint\nsetup: ...\n```\n\n```python\nprint(1)\n```\n\n"
            "```sh\ntools/launch.sh -n 2 -- build/loom-new \\\n    --fast\n```\n")
    blocks = shell_blocks(text)
    assert [(b[0], b[1], b[2]) for b in blocks] == [
        (1, None, ["build/loom-new --fast"]),
        (6, "<!-- covered: tools/test.sh demo -->", ["tools/demo.sh", "build/loom-new"]),
        (11, None, ["tools/test.sh lint"]),
        (20, None, ["tools/launch.sh -n 2 -- build/loom-new --fast"])]
    assert uncovered(blocks[1][1], blocks[1][2]) == [("build/loom-new", ["loom-new"])]
    assert command_keys("LOOM_SETUP_APT=0 tools/demo.sh") == ["LOOM_SETUP_APT=0", "demo.sh"]
    assert command_keys("tools/launch.sh -n 2 -- build/test_comm --gtest_filter=X") == ["launch.sh", "test_comm"]
    assert command_keys("python3 -m loom.launch -n 2 examples/python/cnn.py --dist") == ["loom.launch", "cnn.py"]
    assert command_keys("cmake --install build --prefix ~/loom") == ["cmake", "--install"]


def test_the_docs_have_shell_blocks_both_run_and_covered():
    kinds = {MARKER.match(m).group(1).split(":")[0] for _, _, m, _ in SHELL_CASES if m}
    assert kinds == {"run", "covered"} and len(SHELL_CASES) >= 10


@pytest.mark.parametrize("doc, line, marker, cmds", SHELL_CASES, ids=[f"{d}:{n}" for d, n, _, _ in SHELL_CASES])
def test_every_shell_block_of_the_docs_is_run_or_covered(doc, line, marker, cmds, tmp_path):
    assert marker, (f"{doc}:{line}: a shell block with neither <!-- run --> nor <!-- covered: REF --> on the line "
                    f"above its fence (what checks {cmds}?)")
    if marker != "<!-- run -->":
        missing = uncovered(marker, cmds)
        assert not missing, f"{doc}:{line}: {marker} names none of these: {missing}"
        return
    import loom
    build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(loom.__file__))))
    script = "\n".join(re.sub(r"(^|\s)build/", lambda m: m.group(1) + build + "/", c) for c in cmds)
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, capture_output=True, text=True,
                       env=python_env(), timeout=300)
    assert r.returncode == 0, f"{doc}, the block at line {line}:\n{r.stdout}\n{r.stderr}"
