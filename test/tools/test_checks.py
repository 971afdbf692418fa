"""The lint stage's checks (tools/test.sh lint): each one passes a small clean tree and fails, naming
the file, on a violation planted in a copy of it. Plus the function-length counter on snippets
that a brace counter can get wrong.

Needs no build: the scripts are plain Python 3 and bash. Run with `pytest -q test/tools`."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(ROOT, "tools")

_spec = importlib.util.spec_from_file_location("func_lengths", os.path.join(TOOLS, "func_lengths.py"))
func_lengths = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(func_lengths)


def write_tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text) if isinstance(text, str) else "".join(text))


def run(args, cwd):
    p = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


# ---- include layering ----

# One file per folder, each including only what the rules allow, and no cycle.
CLEAN_LAYERS = {
    "src/core/tensor.h": "#pragma once\n",
    "src/core/device.h": '#include "core/tensor.h"\n',
    "src/core/ops/add.cc": '#include "core/tensor.h"\n#include "core/ops/add.h"\n',
    "src/core/ops/add.h": '#include "core/tensor.h"\n',
    "src/graph/graph.cc": '#include "core/device.h"\n#include "core/ops/add.h"\n#include "graph/graph.h"\n',
    "src/graph/graph.h": '#include "core/tensor.h"\n',
    "src/device/allocator.h": '#include "core/device.h"\n',
    "src/device/cpu/kernels/add.cc": '#include "device/allocator.h"\n#include "core/ops/add.h"\n',
    "src/device/cuda/add.cu": '#include "device/allocator.h"\n',
    "src/device/cuda_stub/stub.cc": '#include "core/device.h"\n',
    "src/nn/layer.cc": '#include "graph/graph.h"\n#include "io/checkpoint.h"\n',
    "src/io/checkpoint.h": '#include "core/tensor.h"\n#include "onnx_pb/onnx.pb.h"  // generated\n',
    "src/io/onnx/export.cc": '#include "io/checkpoint.h"\n#include "graph/graph.h"\n',
    "src/io/comm/comm.cc": '#include "core/device.h"\n#include <mpi.h>\n',
}


def layering(root):
    return run([sys.executable, os.path.join(TOOLS, "layering.py"), "--check", "--root", str(root)], ROOT)


def test_layering_passes_a_clean_tree(tmp_path):
    write_tree(tmp_path, CLEAN_LAYERS)
    rc, out = layering(tmp_path)
    assert rc == 0, out
    assert out.startswith("layering: 11 folders,") and "no violation" in out


def test_layering_fails_graph_including_a_cpu_header(tmp_path):
    write_tree(tmp_path, {**CLEAN_LAYERS, "src/device/cpu/parallel.h": "#pragma once\n",
                          "src/graph/replay.cc": '#include "core/tensor.h"\n#include "device/cpu/parallel.h"\n'})
    rc, out = layering(tmp_path)
    assert rc == 1, out
    assert 'src/graph/replay.cc:2: includes "device/cpu/parallel.h" (graph -> device/cpu):' in out
    assert "layering: 1 violations" in out


def test_layering_fails_io_including_nn(tmp_path):
    write_tree(tmp_path, {**CLEAN_LAYERS, "src/nn/optimizer.h": "#pragma once\n",
                          "src/io/onnx/export.cc": '#include "nn/optimizer.h"\n'})
    rc, out = layering(tmp_path)
    assert rc == 1, out
    assert 'src/io/onnx/export.cc:1: includes "nn/optimizer.h" (io/onnx -> nn):' in out
    assert "layering: 1 violations" in out  # nn includes io, not io/onnx: no cycle


def test_layering_fails_a_backend_including_another(tmp_path):
    write_tree(tmp_path, {**CLEAN_LAYERS, "src/device/cuda/add.cu": '#include "device/cpu/parallel.h"\n'})
    rc, out = layering(tmp_path)
    assert rc == 1, out
    assert 'src/device/cuda/add.cu:1: includes "device/cpu/parallel.h" (device/cuda -> device/cpu):' in out


def test_layering_fails_a_cycle_of_two_folders(tmp_path):
    # core and core/ops may include each other's files, so only the cycle between them is wrong.
    write_tree(tmp_path, {**CLEAN_LAYERS, "src/core/tensor.h": '#pragma once\n#include "core/ops/add.h"\n'})
    rc, out = layering(tmp_path)
    assert rc == 1, out
    lines = out.strip().splitlines()
    assert len(lines) == 3, out  # one example include per edge of the cycle, and the summary
    assert lines[0] == ('src/core/tensor.h:2: includes "core/ops/add.h" (core -> core/ops): '
                        "folders include each other in a cycle: core -> core/ops -> core")
    assert lines[1].startswith('src/core/ops/add.cc:1: includes "core/tensor.h" (core/ops -> core): ')


def test_layering_fails_a_file_in_no_known_folder(tmp_path):
    write_tree(tmp_path, {**CLEAN_LAYERS, "src/device/metal/add.cc": '#include "core/tensor.h"\n'})
    rc, out = layering(tmp_path)
    assert rc == 1, out
    assert "src/device/metal/add.cc:1:" in out and "no folder of the table" in out


# ---- size budgets ----

def budget_tree(tmp_path, files):
    """A tree with tools/loc.sh and the counter it runs, and these files."""
    os.makedirs(tmp_path / "tools")
    for script in ("loc.sh", "func_lengths.py"):
        shutil.copy(os.path.join(TOOLS, script), tmp_path / "tools" / script)
    write_tree(tmp_path, {"src/core/tensor.h": "#pragma once\nint F();\n", **files})
    return run(["bash", "tools/loc.sh", "--check"], tmp_path)


def function_of(lines, name="Long"):
    """A function `lines` long, from its signature to its closing brace."""
    return [f"int {name}(int x) {{\n"] + ["  x += 1;\n"] * (lines - 2) + ["  return x; }\n"]


def test_budgets_pass_a_clean_tree(tmp_path):
    rc, out = budget_tree(tmp_path, {"src/core/ok.cc": ["int k;\n"] * 800,
                                     "src/graph/f.cc": function_of(120)})
    assert rc == 0, out
    assert out.strip().splitlines()[-1] == ("loc: 11 folders within budget, no file over 800 lines, "
                                            "no function over 120 lines")


def test_budgets_fail_a_file_of_801_lines(tmp_path):
    rc, out = budget_tree(tmp_path, {"src/io/big.cc": ["int k;\n"] * 801})
    assert rc == 1, out
    assert "src/io/big.cc: 801 lines (max 800)" in out
    assert "1 files over 800 lines" in out


def test_budgets_fail_a_function_of_121_lines(tmp_path):
    rc, out = budget_tree(tmp_path, {"src/nn/f.cc": ["// Its comment.\n"] + function_of(121)})
    assert rc == 1, out
    assert "src/nn/f.cc:2: Long is 121 lines (max 120)" in out
    assert "1 functions over 120 lines" in out


def test_budgets_fail_a_folder_over_its_budget(tmp_path):
    # Files of 790 lines: none too long, but together one line more than src/core's budget.
    with open(os.path.join(TOOLS, "loc.sh")) as f:
        budget = int(re.search(r"\[src/core\]=(\d+)", f.read()).group(1))
    lines = budget + 1 - 2  # src/core/tensor.h has 2
    files = {f"src/core/part{k}.cc": ["int k;\n"] * min(790, lines - 790 * k)
             for k in range((lines + 789) // 790)}
    rc, out = budget_tree(tmp_path, files)
    assert rc == 1, out
    assert f"src/core: {budget + 1} lines, over its budget of {budget}" in out
    assert "1 of 11 folders over budget" in out


# ---- Notes ----

CLEAN_NOTES = {
    "src/core/block.h": """\
        // Note [Block lifetime in a graph]
        // A block lives from its first writer to its last reader.
        struct Block {};
        """,
    "src/graph/plan.cc": """\
        // The planner frees a block after its last reader (Note [Block lifetime in a graph]).
        // A title may wrap (Note [Block lifetime
        // in a graph]), and so may the word and its bracket: Note
        // [Block lifetime in a graph].
        """,
    "swig/python/loom/tensor.py": '''\
        def zeros():
            """Note [Counter-based draws]

            Draws are a hash of (seed, counter)."""
        # Cited after a hyphen: Note [Counter-
        # based draws].
        ''',
    "README.md": "Blocks are recycled (Note [Block lifetime in a graph] in `src/core/block.h`).\n"
                 "Invariants are `// Note [Title]` comments (a code span shows the notation).\n",
}


def notes(root):
    return run([sys.executable, os.path.join(TOOLS, "notes.py"), "--check", "--root", str(root)], ROOT)


def test_notes_pass_a_clean_tree(tmp_path):
    write_tree(tmp_path, CLEAN_NOTES)
    rc, out = notes(tmp_path)
    assert rc == 0, out
    assert out.strip() == "notes: 2 Notes defined, 5 citations, every cited Note defined once"


def test_notes_fail_a_citation_with_no_definition(tmp_path):
    write_tree(tmp_path, {**CLEAN_NOTES,
                          "src/nn/trainer.cc": "// Steps are dropped whole (Note [Dropping a step\n"
                                               "// during a capture]).\n"})
    rc, out = notes(tmp_path)
    assert rc == 1, out
    assert "src/nn/trainer.cc:1: cites Note [Dropping a step during a capture], which is defined nowhere" in out


def test_notes_fail_a_note_defined_twice(tmp_path):
    write_tree(tmp_path, {**CLEAN_NOTES,
                          "src/device/allocator.cc": "  // Note [Block lifetime in a graph]\n  // Again.\n"})
    rc, out = notes(tmp_path)
    assert rc == 1, out
    assert ("src/device/allocator.cc:1: defines Note [Block lifetime in a graph] again "
            "(first at src/core/block.h:1)") in out


# ---- the function-length counter ----

def lengths(code):
    return [(name, first, last - first + 1) for first, last, name in
            func_lengths.functions(textwrap.dedent(code))]


def test_counter_class_with_inline_methods():
    assert lengths("""\
        namespace loom {
        class Foo : public Base<Foo> {
         public:
          Foo(int a) : a_(a), b_{a} {
            Check();
          }
          int get() const { return a_; }
          bool operator==(const Foo& o) const { return a_ == o.a_; }
          struct Inner {
            void Run() {}
          };
         private:
          int a_;
          int b_{0};
          std::vector<int> v_ = {1, 2};
        };
        int Foo::Twice() const {
          return 2 * a_;
        }
        }  // namespace loom
        """) == [("Foo::Foo", 4, 3), ("Foo::get", 7, 1), ("Foo::operator==", 8, 1),
                 ("Foo::Inner::Run", 10, 1), ("Foo::Twice", 17, 3)]


def test_counter_lambda_is_part_of_its_function():
    assert lengths("""\
        template <typename T>
        void ForEach(const std::vector<T>& v) {
          auto f = [&](int i) {
            if (i) { return; }
          };
          std::sort(v.begin(), v.end(), [](T a, T b) { return a < b; });
        }
        static const auto kTwice = [](int x) {
          return 2 * x;
        };
        """) == [("ForEach", 1, 7), ("kTwice", 8, 3)]


def test_counter_skips_initializers_enums_and_declarations():
    assert lengths("""\
        struct Pair { int a; int b; };
        const Pair kTable[] = {
          {1, 2},
          {3, 4},
        };
        enum class Kind : int { kA, kB };
        extern "C" {
        int Declared(int x);
        int Defined(int x) { return x; }
        }
        std::map<std::string, int> kIndex{{"a", 1}};
        """) == [("Defined", 9, 1)]


def test_counter_template_specializations_and_members():
    assert lengths("""\
        template <typename T> T Infinity();
        template <> float Infinity<float>() { return 1.0f / 0.0f; }
        template <typename T>
        void Pool<T>::Get(int x) const {
        }
        int After() { return 0; }
        """) == [("Infinity<float>", 2, 1), ("Pool<T>::Get", 3, 3), ("After", 6, 1)]


def test_counter_macro_headed_bodies():
    assert lengths("""\
        #define LOOM_OP(name) static void name##_def(OpDef& def)
        LOOM_ACTIVATION(relu)
        LOOM_ACTIVATION(tanh)
        LOOM_OP(add) {
          def.infer = [](const Args& a) {
            return a.x;
          };
        }
        """) == [("LOOM_OP(add)", 4, 5)]


def test_counter_braces_in_strings_comments_and_characters():
    assert lengths("""\
        void Braces() {
          const char* s = "}}{\\"}";  // }
          char c = '}', d = '\\'';
          /* { */ int n = 1'000;
          auto r = R"x(}")x";
        #define OPEN_BRACES {  \\
            {
        }
        int After() { return 0; }
        """) == [("Braces", 1, 8), ("After", 9, 1)]


def test_counter_command_line_reports_long_functions(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.cc").write_text("".join(function_of(121, "TooLong") + function_of(5, "Short")))
    rc, out = run([sys.executable, os.path.join(TOOLS, "func_lengths.py"), "--max", "120",
                   "--root", str(tmp_path)], ROOT)
    assert rc == 1
    assert out.splitlines() == ["src/a.cc:1: TooLong is 121 lines (max 120)",
                                "func_lengths: 1 of 2 functions in 1 files over 120 lines"]


@pytest.mark.parametrize("script", ["layering.py", "notes.py"])
def test_checks_read_the_real_tree(script):
    """On the repository itself: a summary line, and an exit code that means checked (0 or 1)."""
    rc, out = run([sys.executable, os.path.join(TOOLS, script), "--check"], ROOT)
    assert rc in (0, 1), out
    assert out.strip().splitlines()[-1].startswith(script.split(".")[0] + ": ")
