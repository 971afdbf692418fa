"""The transformer ops, layers, the text corpus and the new optimizer option under bad input:
each mistake is a typed loom.Error that names the op or component and what was expected (never
an abort, a hang or an untyped error)."""
import os

import numpy as np
import pytest

import loom
from loom import autograd as ag, io, layer, opt, tensor


def f32(*shape):
    return np.zeros(shape, np.float32)


def cases(dev):
    T = lambda a: tensor.from_numpy(np.asarray(a), dev)
    gpt = lambda: layer.GPT(10, context=4, num_layers=1, dim=8, num_heads=2, device=dev)
    return [
        ("attention int", lambda: ag.attention(*[T(np.zeros((2, 3, 4), np.int32))] * 3),
         loom.DTypeError, "[attention] q must be float32 or float64, got int32"),
        ("attention 1-d", lambda: ag.attention(*[T(f32(4))] * 3), loom.ShapeError, "[attention] q (4,) must be (..., T, D)"),
        ("attention dtypes", lambda: ag.attention(T(f32(2, 3, 4)), T(np.zeros((2, 3, 4))), T(f32(2, 3, 4))),
         loom.DTypeError, "[attention] dtypes differ: float32 and float64"),
        ("attention scale", lambda: ag.attention(*[T(f32(2, 3, 4))] * 3, scale=float("nan")),
         loom.ValueError, "[attention] scale must be finite and >= 0"),
        ("attention no keys", lambda: ag.attention(T(f32(2, 3, 4)), T(f32(2, 0, 4)), T(f32(2, 0, 4))),
         loom.ShapeError, "attention needs at least one query, one key"),
        ("attention_qkv heads", lambda: ag.call("attention_qkv", [T(f32(2, 3, 12))], heads=5),
         loom.ShapeError, "[attention_qkv] qkv (2, 3, 12) must be (B, T, 3 D) with D a positive multiple of heads = 5"),
        ("attention_qkv zero heads", lambda: ag.call("attention_qkv", [T(f32(2, 3, 12))], heads=0),
         loom.ValueError, "[attention_qkv] heads must be positive, got 0"),
        ("GPT width", lambda: layer.GPT(10, dim=30, num_heads=4), loom.ValueError,
         "[MultiHeadAttention] width 30 must be a positive multiple of the number of heads 4"),
        ("GPT vocabulary", lambda: layer.GPT(0), loom.ValueError, "[GPT] size must be a positive int, got 0"),
        ("GPT float tokens", lambda: gpt()(T(f32(2, 4))), loom.DTypeError, "[embedding] indices must be int32 or int64"),
        ("GPT token range", lambda: gpt()(T(np.full((2, 4), 12, np.int32))).to_numpy(), loom.ValueError,
         "[embedding] index 12 at position 0 is out of range for a table of 10 rows"),
        ("GPT context", lambda: gpt()(T(np.zeros((2, 5), np.int32))), loom.ShapeError,
         "[Gpt] sequence length 5 must be in [1, 4]"),
        ("MHA width", lambda: layer.MultiHeadAttention(8, 2, device=dev)(T(f32(2, 3, 7))), loom.ShapeError,
         "[MultiHeadAttention] expects (B, T, 8)"),
        ("block activation", lambda: layer.TransformerBlock(8, 2, activation="swish"), loom.ValueError,
         "[TransformerBlock] activation must be one of"),
        ("AdamW decay_on", lambda: opt.AdamW(decay_on=3), loom.ValueError, "[Adam] decay_on must be 'all' or 'matrices'"),
        ("cross-entropy label", lambda: ag.softmax_cross_entropy(T(f32(2, 4)), T(np.array([0, 9], np.int32))).to_numpy(),
         loom.ValueError, "[softmax_cross_entropy] label 9 in row 1 is outside [0, 4)"),
    ]


CORPUS = [
    ("missing folder", lambda c, d: io.TextCorpus("/nonexistent-loom-corpus"), loom.IOError, "run tools/setup.sh"),
    ("context 0", lambda c, d: c.batch("train", 2, 0, 1, 0, d), loom.ValueError, "[text] Batch: context must be positive"),
    ("context too long", lambda c, d: c.batch("valid", 2, 10 ** 9, 1, 0, d), loom.ValueError,
     "[text] Batch: a window of context 1000000000 needs"),
    ("split", lambda c, d: c.batch("test", 2, 8, 1, 0, d), loom.ValueError, "split must be 'train' or 'valid'"),
    ("batch", lambda c, d: c.batch("train", -2, 8, 1, 0, d), loom.ValueError, "batch must be positive"),
    ("eval window", lambda c, d: c.eval_batch("valid", 10 ** 9, 2, 8, d), loom.ValueError,
     "[text] EvalBatch: first window 1000000000 is outside"),
    ("decode id", lambda c, d: c.tokenizer.decode([5000]), loom.ValueError, "[tokenizer] Decode: id 5000 at index 0"),
    ("encode type", lambda c, d: c.tokenizer.encode(5), loom.TypeError, "[tokenizer] encode takes str or bytes"),
]


@pytest.mark.parametrize("index", range(len(cases(None))))  # the lambdas run in the test
def test_bad_input_is_a_typed_error(dev, index):
    name, fn, kind, message = cases(dev)[index]
    with pytest.raises(kind) as e:
        fn()
    assert message in str(e.value), (name, str(e.value))


@pytest.mark.parametrize("name,fn,kind,message", CORPUS, ids=[c[0] for c in CORPUS])
def test_text_corpus_bad_input_is_a_typed_error(dev, name, fn, kind, message):
    if not os.path.exists(os.path.join(io.default_text_dir(), "SOURCE")):
        pytest.skip("no text corpus in data/text: run tools/setup.sh")
    with pytest.raises(kind) as e:
        fn(io.TextCorpus(), dev)
    assert message in str(e.value), (name, str(e.value))
