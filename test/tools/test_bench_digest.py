"""tools/bench_digest.py, the GPU check's one-line-per-run digest, on lines written by hand in
loom-bench's JSON shape (no build).

Run with `pytest -q test/tools`."""
import importlib.util
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("bench_digest", os.path.join(ROOT, "tools", "bench_digest.py"))
bench_digest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_digest)


def run(**kw):
    r = {"model": "resnet50", "batch": 32, "precision": "fp32", "mode": "cuda-graph", "ms_per_step_median": 26.18,
         "peak_bytes": 2941000000, "memory_budget": 0, "recomputed_ops": 0, "kernel_counters": {}}
    r.update(kw)
    return r


def write(path, records, junk=()):
    with open(path, "w", encoding="utf-8") as f:
        for line in junk:
            f.write(line + "\n")
        for r in records:
            f.write(json.dumps(r) + "\n")


def test_one_line_per_run_with_its_tags_and_the_convolutions_cost(tmp_path):
    counters = {"cudnn conv forward chosen ms": 4.0, "cudnn conv forward fastest ms, any determinism": 3.5,
                "cudnn conv grad input chosen ms": 5.0, "cudnn conv grad input fastest ms, any determinism": 5.0,
                "cudnn conv grad weight chosen ms": 7.25, "cudnn conv grad weight fastest ms, any determinism": 5.0}
    write(tmp_path / "bench.jsonl", [run(kernel_counters=counters),
                                     run(mode="graph-planned", memory_budget=1887436800, recomputed_ops=53)],
          junk=["not json", "{broken", json.dumps({"peer": "torch"})])
    write(tmp_path / "layouts.jsonl", [run(cudnn_layout="nhwc-nondet", precision="bf16")])
    write(tmp_path / "gpt2.jsonl", [run(model="gpt", passes_off="bf16_attention,group_updates", fused_loss=False)])
    with open(tmp_path / "notes.txt", "w") as f:
        f.write("ignored: not .jsonl\n")
    lines = bench_digest.digest([str(tmp_path)])
    assert len(lines) == 4, lines
    first, budgeted, gpt2, layout = lines
    assert first.startswith("bench.jsonl") and "resnet50" in first and "b32" in first and "cuda-graph" in first
    assert "26.180 ms" in first and "peak   2941.0 MB" in first
    assert "convs measured: chosen 16.25 ms, fastest of any determinism 13.50 ms" in first
    assert "budget 1800 MiB" in budgeted and "recomputed 53" in budgeted and "convs measured" not in budgeted
    assert layout.startswith("layouts.jsonl") and "bf16" in layout and "(nhwc-nondet)" in layout
    assert gpt2.startswith("gpt2.jsonl") and "(loss apart, off: bf16_attention,group_updates)" in gpt2


def test_files_are_read_in_the_order_given_and_unreadable_ones_named(tmp_path, capsys):
    write(tmp_path / "a.jsonl", [run(model="mlp", batch=64, ms_per_step_median=0.152)])
    lines = bench_digest.digest([str(tmp_path / "missing.jsonl"), str(tmp_path / "a.jsonl")])
    assert len(lines) == 1 and "mlp" in lines[0] and "b64" in lines[0] and "0.152 ms" in lines[0]
    assert "cannot read" in capsys.readouterr().err


def test_main_says_when_there_is_nothing(tmp_path, capsys):
    write(tmp_path / "empty.jsonl", [], junk=["nothing here"])
    assert bench_digest.main([str(tmp_path)]) == 1
    assert "no loom-bench lines" in capsys.readouterr().out
    assert bench_digest.main([]) == 2
