#!/usr/bin/env python3
"""The size limits of the product's sources, checked on every test run.

No file in server/, cpu/, gpu/, gpu/kernels/, client/ or core/ is longer than
MAX_FILE_LINES, and no function (or lambda-free initialiser of a
namespace-scope table) in their C++ is longer than MAX_FUNCTION_LINES, from
the first line of its signature to its closing brace. Past those sizes a
unit stops being readable in one sitting; the fix is to split it by meaning.

Functions are found by tracking braces outside comments, strings and
character literals: a brace opened at namespace or class scope after a
parenthesised signature is a function body. The sources are formatted with
clang-format, which this relies on only for where a signature starts.
"""
import pathlib
import re
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 60
ROOTS = ("server", "cpu", "gpu", "client", "core")
SUFFIXES = (".cc", ".h", ".cl", ".clh", ".clt")


def code_only(text):
    """The text with comments, strings and character literals blanked
    (newlines kept, so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j - 1]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


SCOPE = re.compile(r"\b(namespace|class|struct|union|enum)\b[^;()]*$")


def long_functions(path):
    """(first line, lines, head) of each function body over the limit."""
    code = code_only(path.read_text())
    found = []
    stack = []  # per open brace: "scope", "function" or "block"
    start = 0  # where the text before the next brace at this level begins
    for i, c in enumerate(code):
        if c == ";":
            start = i + 1
        elif c == "{":
            head = code[start:i]
            in_scope = all(k[0] == "scope" for k in stack)
            if SCOPE.search(head) or (in_scope and head.strip() == ""):
                kind = "scope"
            elif in_scope and ("(" in head or head.rstrip().endswith("=")
                               or re.search(r"\w\s*$", head)):
                kind = "function"
                first = code.count("\n", 0, start + len(head) -
                                   len(head.lstrip())) + 1
                stack.append((kind, first, head.strip()))
                start = i + 1
                continue
            else:
                kind = "block"
            stack.append((kind, 0, ""))
            start = i + 1
        elif c == "}":
            if not stack:
                continue
            kind, first, head = stack.pop()
            if kind == "function":
                last = code.count("\n", 0, i) + 1
                if last - first + 1 > MAX_FUNCTION_LINES:
                    found.append((first, last - first + 1,
                                  " ".join(head.split())[:70]))
            start = i + 1
    return found


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    problems = []
    for folder in ROOTS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(root)
            lines = path.read_text().count("\n")
            if lines > MAX_FILE_LINES:
                problems.append(f"{rel}: {lines} lines "
                                f"(at most {MAX_FILE_LINES})")
            if path.suffix not in (".cc", ".h"):
                continue
            for first, count, head in long_functions(path):
                problems.append(f"{rel}:{first}: a function of {count} lines "
                                f"(at most {MAX_FUNCTION_LINES}): {head}")
    for p in problems:
        print(p)
    print(f"{len(problems)} over the limits")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
