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
