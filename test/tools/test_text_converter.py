"""tools/text.py, the text corpus converter, on its own (no build): the piece rule, BPE training and
encoding against cases worked out by hand, the split, the files' layout, the unigram baseline, and
that test/io/text_fixture is what the converter writes today (test/io's C++ tests compare loom's
tokenizer with it).

Run with `pytest -q test/tools`."""
import filecmp
import importlib.util
import math
import os
import struct
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "test", "io", "text_fixture")

_spec = importlib.util.spec_from_file_location("text", os.path.join(ROOT, "tools", "text.py"))
text = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(text)


@pytest.mark.parametrize("data, pieces", [
    (b"", []),
    (b"Hello, world!", [b"Hello", b",", b" world", b"!"]),
    (b"a  b", [b"a", b" ", b" b"]),
    (b" \n x", [b" \n", b" x"]),
    (b"x \n", [b"x", b" \n"]),
    (b"\n\n  x", [b"\n\n ", b" x"]),
    (b"\nx", [b"\n", b"x"]),
    (b"1234 5.6", [b"1234", b" 5", b".", b"6"]),
    (b"caf\xc3\xa9 \xff\xfe\x80z", [b"caf\xc3\xa9", b" \xff\xfe\x80z"]),
    (b" ?!x", [b" ?!", b"x"]),
    (b"a\0b", [b"a", b"\0", b"b"]),
])
def test_pieces_follow_the_rule(data, pieces):
    # The same cases as test/io/tokenizer_test.cc's PiecesFollowTheRule.
    assert text.pieces(data) == pieces


def test_pieces_join_back_to_any_bytes():
    state = 3
    for _ in range(200):
        state, r = text.splitmix64(state)
        data = r.to_bytes(8, "little") * (r % 7) + bytes(range(r % 256))
        assert b"".join(text.pieces(data)) == data


def test_training_merges_the_most_frequent_pair_smallest_ids_first():
    # "ababab", " abab": (a, b) 5 times -> 256; then (256, 256) 3 times -> 257; then nothing twice.
    assert text.train_merges(b"ababab abab", 1024) == [(97, 98), (256, 256)]
    # (a, b) and (c, d) both twice: the smaller ids first.
    assert text.train_merges(b"abab cdcd", 1024) == [(97, 98), (99, 100)]
    assert text.train_merges(b"abab cdcd", 257) == [(97, 98)]  # the vocabulary's limit
    assert text.train_merges(b"ab cd", 1024) == []               # no pair occurs twice


def test_encoding_applies_the_lowest_merge_everywhere_first():
    # The same cases as test/io/tokenizer_test.cc's MergesApplyLowestFirstAtEveryOccurrence.
    tok = text.Tokenizer([(97, 97), (256, 97), (98, 99)])
    assert tok.encode(b"aaa") == [257]
    assert tok.encode(b"aaaa") == [256, 256]
    assert tok.encode(b"aaaaa") == [256, 257]
    assert tok.encode(b"abcd") == [97, 258, 100]
    assert tok.encode(b"a a") == [97, 32, 97]
    assert tok.decode(tok.encode(b"\xff aaaa\n")) == b"\xff aaaa\n"


def test_split_holds_out_every_tenth_chunk_at_line_ends():
    lines = [b"line %03d\n" % i for i in range(300)]  # 9 bytes each
    corpus = b"".join(lines)
    train, valid = text.split(corpus, 30)  # chunks of 4 lines (36 bytes): the newline at or after 30
    chunks = [b"".join(lines[i:i + 4]) for i in range(0, 300, 4)]
    assert valid == b"".join(chunks[9::10])
    assert train == b"".join(c for k, c in enumerate(chunks) if k % 10 != 9)


def test_token_file_layout():
    merges = text.merges_file([(97, 97)])
    assert merges == b"loom-bpe 1 1\n97 97\n"
    data = text.token_file([1, 256, 65535], 65536 - 0, merges, 7)
    magic, vocab, merges_hash, count, nbytes, checksum = struct.unpack_from("<8sIIQQQ", data)
    assert (magic, vocab, count, nbytes) == (b"LOOMTOK1", 65536, 3, 7)
    assert merges_hash == text.fnv1a64(merges) & 0xFFFFFFFF
    assert data[40:] == b"\x01\x00\x00\x01\xff\xff" and checksum == text.fnv1a64(data[40:])
    assert text.fnv1a64(b"") == 0xCBF29CE484222325 and text.fnv1a64(b"a") == 0xAF63DC4C8601EC8C  # FNV-1a's own


def test_unigram_bits_by_hand():
    # Train counts 0: 2, 1: 1 of 3 tokens; p = (count + 1) / (3 + 256); valid 0, 1, 2.
    bits = -(math.log2(3 / 259) + math.log2(2 / 259) + math.log2(1 / 259))
    assert text.unigram_bits([0, 0, 1], [0, 1, 2], 256) == pytest.approx(bits, rel=1e-15)


def test_fixture_is_what_the_converter_writes(tmp_path):
    out = tmp_path / "fixture"
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "text.py"), "--fixture", str(out)], check=True)
    names = sorted(os.listdir(FIXTURE))
    assert names == sorted(os.listdir(out)) == ["SOURCE", "cases.txt", "merges.txt", "text.json", "train.bin",
                                                "valid.bin"]
    _, mismatch, errors = filecmp.cmpfiles(FIXTURE, out, names, shallow=False)
    assert not mismatch and not errors, (
        f"test/io/text_fixture is out of date ({mismatch or errors}): run "
        "/usr/bin/python3 tools/text.py --fixture test/io/text_fixture")


def test_usage_and_bad_input(tmp_path):
    script = os.path.join(ROOT, "tools", "text.py")
    r = subprocess.run([sys.executable, script], capture_output=True, text=True)
    assert r.returncode != 0 and "tools/text.py SDIST OUT_DIR" in r.stderr
    bad = tmp_path / "not.tar.gz"
    bad.write_bytes(b"not a tar file")
    r = subprocess.run([sys.executable, script, str(bad), str(tmp_path / "out")], capture_output=True, text=True)
    assert r.returncode != 0 and "text: error: cannot read the texts from" in r.stderr
    assert not (tmp_path / "out").exists()
