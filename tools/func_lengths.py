#!/usr/bin/env python3
"""Lengths of the C++ functions in src/ (docs/style.md: a function you can read in one sitting).

    tools/func_lengths.py --max 120            every function over 120 lines, then a summary;
                                               exit 1 if there is one
    tools/func_lengths.py --list [PATH...]     every function: file:line: Name is L lines
    tools/func_lengths.py --max N --root DIR   the same on another tree (the tests use it)

PATHs are files or folders (default: src/ under the root); folders are searched for
.h, .cc, .cu and .cuh files. A function's length runs from the first line of its signature
(its template<...> line included) to its closing brace. Counted: every function or method body at
namespace or class scope, out of line or inline, constructors with their initializer lists,
macro-headed bodies such as `LOOM_OP(relu) { ... }`, and lambdas assigned at namespace or class
scope. A lambda or local class inside a function is part of that function; a lambda passed to a
call at namespace scope, and a function whose body a macro's own definition holds, are not
counted.

This is a brace counter on the text with comments, string and character literals and
preprocessor lines blanked out, not a C++ parser: it assumes the braces of each preprocessor
branch balance (so a function whose signature differs between #if branches is misread).
"""
import argparse
import os
import re
import sys

SOURCE_EXTS = (".h", ".cc", ".cu", ".cuh")


def strip(text):
    """The text with comments, the contents of string and character literals, and preprocessor
    lines turned into spaces. Every newline stays, so offsets and line numbers do not move."""
    out = list(text)
    n = len(text)
    i = 0
    line_start = True  # only whitespace so far on this line: a '#' here starts a directive

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if line_start and c == "#":
            # A directive runs to the end of the line, and on past every backslash-newline; a
            # comment inside it is blanked with it (its /* could span lines: follow it).
            j = i
            while j < n and text[j] != "\n":
                if text.startswith("/*", j):
                    end = text.find("*/", j + 2)
                    j = n if end < 0 else end + 2
                    continue
                if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n":
                    j += 2
                    continue
                j += 1
            blank(i, j)
            i = j
            continue
        line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            # A comment that ends in a backslash goes on to the next line.
            while j < n and text[j - 1] == "\\":
                k = text.find("\n", j + 1)
                j = n if k < 0 else k
            blank(i, j)
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
            continue
        if c == '"':
            # A raw string: R"delim( ... )delim", perhaps u8R, uR, UR or LR.
            delim = raw_string_delimiter(text, i)
            if delim is not None:
                close = ")" + delim + '"'
                end = text.find(close, i + len(delim) + 2)
                j = n if end < 0 else end + len(close)
                blank(i + 1, j - 1)
                i = j
                continue
            j = i + 1
            while j < n and text[j] != '"' and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, min(j, n))
            i = j + 1
            continue
        if c == "'":
            # 1'000'000: a digit separator, when the token it is in starts with a digit.
            k = i
            while k > 0 and (text[k - 1].isalnum() or text[k - 1] in "_'."):
                k -= 1
            if k < i and text[k].isdigit():
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != "'" and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, min(j, n))
            i = j + 1
            continue
        i += 1
    return "".join(out)


def raw_string_delimiter(text, i):
    """The delimiter of the raw string whose quote is at text[i], or None if it is not one."""
    if i == 0 or text[i - 1] != "R":
        return None
    for prefix in ("u8", "u", "U", "L", ""):
        k = i - 1 - len(prefix)
        if k >= 0 and text[k:i - 1] == prefix and (k == 0 or not (text[k - 1].isalnum() or
                                                                 text[k - 1] == "_")):
            m = re.match(r'"([^()\\\s]{0,16})\(', text[i:i + 19])
            return m.group(1) if m else None
    return None


def match_brace(s, i):
    """Index of the '}' that closes the '{' at s[i] (len(s) - 1 when the file ends first)."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == "{":
            depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(s) - 1


# Operator names hold the punctuation the head is split on: each becomes one identifier-like
# word first (operator() -> operator@0) and goes back into the reported name.
OPERATOR_RE = re.compile(r"\boperator\s*(\(\s*\)|\[\s*\]|(?:new|delete)\b(?:\s*\[\s*\])?|"
                         r"[^\w\s(]+|\s[\w:]+(?:\s*[*&])*)")
# Words whose parentheses are never the parameter list of the function being defined.
NOT_A_NAME = {"decltype", "alignas", "noexcept", "throw", "sizeof", "alignof", "static_assert",
              "requires", "if", "for", "while", "switch", "return", "catch"}
QUALIFIERS_RE = re.compile(
    r"\s*(?:(?:const|volatile|override|final|mutable|try|&&|&|noexcept|throw)\b\s*|&&|&|"
    r"@P\d+@\s*)*(?:->[^=;]*)?\s*$")
CTOR_INIT_RE = re.compile(r"\s*(?:noexcept\s*(?:@P\d+@)?\s*)?:(?!:)")
# A function's name just before its parameter list, qualified or not, template arguments
# included where a specialization or a class template's member has them: Infinity<float>,
# Pool<T>::Get, ~Block, operator@0.
TEMPLATE_ARGS = r"(?:<[^<>]*(?:<[^<>]*>[^<>]*)*>)?"
NAME_RE = re.compile(rf"((?:[\w~@]+\s*{TEMPLATE_ARGS}\s*::\s*)*~?[\w@]+\s*{TEMPLATE_ARGS})\s*$")
LAMBDA_RE = re.compile(r"([A-Za-z_]\w*)\s*(?:\[\s*\])?\s*=\s*\[[^\]]*\]\s*(?:@P\d+@)?\s*"
                       r"(?:(?:mutable|constexpr|noexcept)\s*)*(?:->[^=]*)?$")


def top_level(head):
    """The head with every parenthesized group at depth 0 (outside template brackets too)
    replaced by @P<k>@, and those groups' texts by k. Template brackets are only counted where
    '<' follows a word, so 'a < b' inside parentheses does not matter (it is replaced whole)."""
    out, groups = [], []
    depth_p = depth_a = 0
    start = None
    i = 0
    while i < len(head):
        c = head[i]
        if depth_p == 0:
            if c == "<" and re.search(r"[\w>]\s*$", head[:i]) and not head.startswith("<<", i):
                depth_a += 1
            elif c == ">" and depth_a > 0 and head[i - 1] != "-":
                depth_a -= 1
        if c == "(":
            if depth_p == 0 and depth_a == 0:
                start = i
            depth_p += 1
        elif c == ")":
            depth_p = max(0, depth_p - 1)
            if depth_p == 0 and depth_a == 0 and start is not None:
                out.append(f"@P{len(groups)}@")
                groups.append(head[start:i + 1])
                start = None
                i += 1
                continue
        if start is None:
            out.append(c)
        i += 1
    if start is not None:
        out.append(head[start:])
    return "".join(out), groups


def strip_template_prefix(h):
    """h without its leading template<...> clauses and [[attributes]]."""
    while True:
        m = re.match(r"\s*(template\s*<|\[\[)", h)
        if not m:
            return h.strip()
        if m.group(1) == "[[":
            end = h.find("]]", m.end())
            h = h[end + 2:] if end >= 0 else ""
            continue
        depth, i = 1, m.end()
        while i < len(h) and depth:
            depth += {"<": 1, ">": -1}.get(h[i], 0)
            i += 1
        h = h[i:]


def function_name(head):
    """The name of the function whose body follows `head`, or None when the head is not a
    function signature. Macro-headed bodies are named with their arguments: LOOM_OP(relu)."""
    ops = []

    def keep_op(m):
        ops.append(re.sub(r"\s+", " ", m.group(0).strip()))
        return f"operator@{len(ops) - 1}"

    h = OPERATOR_RE.sub(keep_op, strip_template_prefix(head))
    flat, groups = top_level(h)
    if "=" in flat.replace("->", ""):
        m = LAMBDA_RE.search(flat)
        return m.group(1) if m else None  # an initializer, or a lambda given a name
    for m in re.finditer(r"@P(\d+)@", flat):
        before = flat[:m.start()]
        word = NAME_RE.search(before)
        if not word:
            continue
        name = re.sub(r"\s+", "", word.group(1))
        last = re.sub(r"<.*", "", name.split("::")[-1])
        if last in NOT_A_NAME or (last.startswith("__") and last.endswith("__")):
            continue
        tail = flat[m.end():]
        if QUALIFIERS_RE.fullmatch(tail) or (CTOR_INIT_RE.match(tail) and
                                             re.search(r"(?:[)}]|@P\d+@)\s*$", tail)):
            name = re.sub(r"operator@(\d+)", lambda o: ops[int(o.group(1))], name)
            if re.fullmatch(r"[A-Z][A-Z0-9]*_[A-Z0-9_]+", last):  # a macro: its arguments say which
                name += re.sub(r"\s+", " ", groups[int(m.group(1))])
            return name
    return None


def class_name(head):
    """('namespace', None), ('class', name), ('enum', None), or None for anything else."""
    h = strip_template_prefix(head)
    if re.match(r"(inline\s+)?namespace\b", h) or re.fullmatch(r'extern\s*"\s*"', h):
        return ("namespace", None)
    if re.match(r"(typedef\s+)?enum\b", h):
        return ("enum", None)
    m = re.match(r"(?:typedef\s+)?(?:class|struct|union)\b(.*)$", h, re.S)
    if m and function_name(head) is None:  # not `struct Foo* Make() {`
        rest = re.split(r"<|(?<!:):(?!:)", m.group(1))[0]
        words = [w for w in re.findall(r"[A-Za-z_]\w*", rest) if w != "final"]
        return ("class", words[-1] if words else "(anonymous)")
    return None


ACCESS_RE = re.compile(r"\s*(public|private|protected)\s*$")
MACRO_LINE_RE = re.compile(r"\s*[A-Z][A-Z0-9_]*\s*\(.*\)\s*$", re.S)


def functions(text):
    """[(first line, last line, name)] of every function body in a C++ source text."""
    s = list(strip(text))
    n = len(s)
    line_of = []  # the line number of each offset
    ln = 1
    for ch in s:
        line_of.append(ln)
        if ch == "\n":
            ln += 1
    found = []
    scopes = []  # the class names open around i; None for a namespace
    head_start = 0
    paren = 0
    i = 0
    while i < n:
        c = s[i]
        if c == "(":
            paren += 1
        elif c == ")":
            paren = max(0, paren - 1)
        elif c == ";" and paren == 0:
            head_start = i + 1
        elif c == "}":
            if scopes:
                scopes.pop()
            head_start = i + 1
            paren = 0
        elif c == ":" and paren == 0 and scopes and scopes[-1] is not None and \
                ACCESS_RE.fullmatch("".join(s[head_start:i])):
            head_start = i + 1
        elif c == "\n" and paren == 0:
            # An X-macro invocation on a line of its own has no ';' after it: it is not part of
            # the next function's signature.
            head = "".join(s[head_start:i])
            rest = "".join(s[i:i + 200]).lstrip()
            if MACRO_LINE_RE.fullmatch(head) and not rest.startswith("{"):
                head_start = i + 1
        elif c == "{":
            head = "".join(s[head_start:i])
            kind = class_name(head) if paren == 0 else None
            name = function_name(head) if paren == 0 and kind is None else None
            if kind and kind[0] in ("namespace", "class"):
                scopes.append(kind[1])
                head_start = i + 1
            elif name:
                j = match_brace(s, i)
                start = head_start + (len(head) - len(head.lstrip()))
                owners = [k for k in scopes if k]
                if owners and "::" not in name:
                    name = "::".join(owners + [name])
                found.append((line_of[start], line_of[j], name))
                head_start = j + 1
                i = j
            else:
                # An initializer, an enum's values, a member's brace-init in a constructor's list,
                # a lambda passed in a call: the statement goes on after it, with its braces
                # emptied so that they do not confuse the rest of the head.
                j = match_brace(s, i)
                for k in range(i + 1, j):
                    if s[k] != "\n":
                        s[k] = " "
                i = j
        i += 1
    return found


def source_files(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for dirpath, dirnames, filenames in os.walk(p):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(SOURCE_EXTS):
                    yield os.path.join(dirpath, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*", help="files or folders (default: src/)")
    ap.add_argument("--max", type=int, help="report the functions over this many lines, exit 1 if any")
    ap.add_argument("--list", action="store_true", help="print every function with its length")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="repository root; paths are relative to it (default: this script's)")
    args = ap.parse_args()
    paths = [os.path.join(args.root, p) for p in (args.paths or ["src"])]
    total = files = 0
    over = []
    for path in source_files(paths):
        files += 1
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        shown = os.path.relpath(path, args.root)
        for first, last, name in functions(text):
            total += 1
            length = last - first + 1
            if args.list:
                print(f"{shown}:{first}: {name} is {length} lines")
            if args.max is not None and length > args.max:
                over.append((shown, first, name, length))
    if args.max is None:
        return 0
    for shown, first, name, length in over:
        print(f"{shown}:{first}: {name} is {length} lines (max {args.max})")
    if over:
        print(f"func_lengths: {len(over)} of {total} functions in {files} files over {args.max} lines")
        return 1
    print(f"func_lengths: {total} functions in {files} files, none over {args.max} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
