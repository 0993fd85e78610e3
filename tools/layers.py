#!/usr/bin/env python3
"""Checks that the top-level modules of a crate import each other without a cycle.

`tools/layers.py runtime/src agent/src` reads every `.rs` file of each crate, finds where each one
reaches into another top-level module of its crate (`use crate::spec::...`, `crate::images::X`
in code, `super::` from a top-level file), resolves the names the crate root re-exports
(`crate::PodPhase` is `supervisor`'s), and fails, naming each cycle and the files that make it,
when module A needs B and B needs A, however many modules lie between. `docs/design.md` says
the library is layered; CI runs this so that it stays so. Test code (`#[cfg(test)]` blocks and
`tests/` folders) is left out: a module's tests may use what they like.
"""

import re
import sys
from pathlib import Path

USE = re.compile(r"\buse\s+crate::(\{[^;]*\}|[A-Za-z_][A-Za-z0-9_]*)", re.S)
PATH = re.compile(r"\bcrate::([A-Za-z_][A-Za-z0-9_]*)")
REEXPORT = re.compile(r"^\s*pub(?:\([a-z]+\))?\s+use\s+([A-Za-z_][A-Za-z0-9_]*)::([^;]*);", re.M | re.S)


def code_only(text):
    """The text with comments, string literals and character literals blanked, in one pass."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif c == "r" and re.match(r'r#*"', text[i:]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            i = n if end < 0 else end + 1 + len(hashes)
            out.append('""')
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\[^']{1,10}|[^'\\])'", text[i:]):
            i += re.match(r"'(\\[^']{1,10}|[^'\\])'", text[i:]).end()
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip(text):
    """The code without comments, literals and `#[cfg(test)]` modules."""
    text = code_only(text)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def names_in(group):
    """The names a re-export brings in: `a::{B, c::D as E}` gives B and E."""
    names = []
    for part in re.split(r"[{},]", group):
        part = part.strip()
        if not part or part == "self":
            continue
        alias = re.search(r"\bas\s+(\w+)$", part)
        names.append(alias.group(1) if alias else part.split("::")[-1])
    return names


def check(src):
    src = Path(src)
    root = src / "lib.rs" if (src / "lib.rs").exists() else src / "main.rs"
    modules = {p.stem for p in src.glob("*.rs") if p.name not in ("lib.rs", "main.rs")}
    modules |= {p.name for p in src.iterdir() if p.is_dir()}
    reexported = {}
    for m in REEXPORT.finditer(strip(root.read_text())):
        if m.group(1) in modules:
            for name in names_in(m.group(2)):
                reexported[name] = m.group(1)
    edges = {}
    for file in sorted(src.rglob("*.rs")):
        rel = file.relative_to(src)
        if file == root or "tests" in rel.parts[:-1] or rel.name == "tests.rs":
            continue
        top = rel.parts[0].removesuffix(".rs")
        text = strip(file.read_text())
        targets = set()
        for m in USE.finditer(text):
            first = m.group(1)
            heads = [p.strip().split("::")[0] for p in re.split(r",(?![^{]*\})", first.strip("{}"))] if first.startswith("{") else [first]
            targets |= {h for h in heads if h}
        targets |= set(PATH.findall(text))
        if len(rel.parts) == 1 and re.search(r"\bsuper::", text):
            targets |= set(re.findall(r"\bsuper::(\w+)", text))
        for t in targets:
            t = t if t in modules else reexported.get(t)
            if t and t != top:
                edges.setdefault(top, {}).setdefault(t, set()).add(str(rel))
    # Cycles: strongly connected components of more than one module (Tarjan).
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(sorted(scc))

    sys.setrecursionlimit(10000)
    for v in sorted(modules):
        if v not in index:
            visit(v)
    for scc in out:
        print(f"{src}: the modules {', '.join(scc)} need each other:")
        for a in scc:
            for b in sorted(edges.get(a, {})):
                if b in scc:
                    print(f"  {a} -> {b}: {', '.join(sorted(edges[a][b]))}")
    return not out


if __name__ == "__main__":
    ok = all([check(src) for src in sys.argv[1:]])
    if ok:
        print(f"no cycles between the top-level modules of {', '.join(sys.argv[1:])}")
    sys.exit(0 if ok else 1)
