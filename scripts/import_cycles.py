#!/usr/bin/env python3
"""Import cycles between the files of a Rust crate: `python3 scripts/import_cycles.py src`.

Reads every .rs file under a crate root (the directory holding lib.rs or main.rs), takes
the paths that name the crate's own modules (`use crate::…`, `use super::…`, `use self::…`,
`use child::…` for a module the file declares, and such paths written inline in code),
resolves each to the file of the deepest module it names (`a::b` is a/b.rs or a/b/mod.rs),
follows re-exports to the file that defines the name, and prints every cycle in that file
graph. Exits 1 if there is one.

Declaring is not depending: a parent's `mod child;` is no edge, nor is a `pub use` whose
name the file does not use itself (a facade such as lib.rs re-exporting its children).
Comments and string literals are skipped; an edge from a file to itself is ignored.
"""

import re
import sys
from pathlib import Path

# Comments, strings and char literals, so that nothing inside them is read as a path.
NOISE = re.compile(
    r'//[^\n]*|/\*.*?\*/|r(#*)".*?"\1|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'', re.S
)
USE = re.compile(r"(\bpub\b(?:\s*\([^)]*\))?\s*)?\buse\s+([^;]+);")
INLINE = re.compile(r"(?<![\w:])(\$?crate|super|self)((?:\s*::\s*\w+)+)")
MOD_DECL = re.compile(r"\bmod\s+(\w+)\s*;")
MOD_BLOCK = re.compile(r"\bmod\s+(\w+)\s*\{")


def blank(match):
    """The matched text as spaces, its line breaks kept (offsets and lines stay put)."""
    return re.sub(r"[^\n]", " ", match.group(0))


def module_of(root, file):
    """The module path of a file: src/a/b.rs and src/a/b/mod.rs are both ("a", "b")."""
    parts = list(file.relative_to(root).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts.pop()
    return tuple(parts)


def expand(tree):
    """`a::{b, c::{d, e as f}}` -> [("a::b", "b"), ("a::c::d", "d"), ("a::c::e", "f")]."""
    tree = " ".join(tree.split())
    if "{" not in tree:
        path, _, alias = tree.partition(" as ")
        return [(path, alias or path.split("::")[-1].strip())]
    open_at = tree.index("{")
    prefix, inner, depth, start, parts = tree[:open_at], tree[open_at + 1 : -1], 0, 0, []
    for i, ch in enumerate(inner + ","):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    return [(prefix + p, name) for part in parts if part.strip() for p, name in expand(part)]


def inline_mods(text):
    """(start, end, name) of every inline `mod name { … }` block in a cleaned text."""
    spans = []
    for m in MOD_BLOCK.finditer(text):
        depth = 0
        for i in range(m.end() - 1, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                spans.append((m.start(), i, m.group(1)))
                break
    return spans


class Crate:
    def __init__(self, root):
        self.files = sorted(root.rglob("*.rs"))
        self.modules = {module_of(root, f): f for f in self.files}
        self.refs = {}  # file -> [(module written in, path, name, is a pub use)]
        self.uses = {}  # file -> {name: (module written in, path)}: what a `use` brings in
        self.code = {}  # file -> its code without comments, strings and use statements
        for f in self.files:
            text = NOISE.sub(blank, f.read_text())
            self.code[f] = code = USE.sub(blank, text)
            spans, children = inline_mods(text), set(MOD_DECL.findall(text))
            found = [
                (m.start(), path, name, bool(m.group(1)))
                for m in USE.finditer(text)
                for path, name in expand(m.group(2))
            ]
            found += [(m.start(), m.group(0), None, False) for m in INLINE.finditer(code)]
            if children:  # `child::x` in the file that declares `mod child;`
                child = re.compile(r"(?<![\w:])(?:%s)\s*::\s*\w+" % "|".join(children))
                found += [(m.start(), m.group(0), None, False) for m in child.finditer(code)]
            self.refs[f], self.uses[f] = [], {}
            for at, path, name, public in found:
                inner = tuple(n for s, e, n in spans if s < at < e)  # inline modules
                here = module_of(root, f) + inner
                if not inner and path.split("::")[0].strip() in children:
                    path = "self::" + path
                self.refs[f].append((here, path, name, public))
                if name and here == module_of(root, f):
                    self.uses[f][name] = (here, path)

    def resolve(self, here, path, hops=0):
        """The file that defines what `path` (written in module `here`) names, or None."""
        segs = [s for s in re.split(r"\s*::\s*", path.strip()) if s]
        if segs[0] in ("crate", "$crate"):
            mod, segs = [], segs[1:]
        elif segs[0] in ("super", "self"):
            mod = list(here)
            while segs and segs[0] in ("super", "self"):
                if segs.pop(0) == "super":
                    mod.pop()
        else:
            return None  # another crate (std, bevy_ecs, …)
        mod += [s for s in segs if s not in ("self", "*")]
        rest = []
        while tuple(mod) not in self.modules:  # an item or inline module inside a file
            rest.insert(0, mod.pop())
        file = self.modules[tuple(mod)]
        if len(rest) == 1 and rest[0] in self.uses[file] and hops < 16:  # a re-export
            return self.resolve(*self.uses[file][rest[0]], hops + 1) or file
        return file

    def edges(self):
        """file -> {file it depends on: the names it takes from there}."""
        graph = {f: {} for f in self.files}
        for f in self.files:
            for here, path, name, public in self.refs[f]:
                if public and not re.search(r"\b%s\b" % re.escape(name), self.code[f]):
                    continue  # re-exported, not used here
                target = self.resolve(here, path)
                if target is not None and target != f:
                    graph[f].setdefault(target, set()).add(path.split("::")[-1].strip())
        return graph


def cycles(graph):
    """Every elementary cycle, each found once, from its first file in sorted order."""
    order = {f: i for i, f in enumerate(graph)}
    found = []

    def walk(start, node, trail):
        for nxt in graph[node]:
            if nxt == start:
                found.append(trail + [start])
            elif order[nxt] > order[start] and nxt not in trail:
                walk(start, nxt, trail + [nxt])

    for f in graph:
        walk(f, f, [f])
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: import_cycles.py CRATE_ROOT_DIR (src, demo/src)")
    root = Path(sys.argv[1])
    graph = Crate(root).edges()
    found = cycles(graph)
    for cycle in found:
        steps = [str(cycle[0].relative_to(root))]
        for a, b in zip(cycle, cycle[1:]):
            steps.append(f"-> {b.relative_to(root)} ({', '.join(sorted(graph[a][b]))})")
        print("cycle: " + " ".join(steps))
    print(f"{len(found)} import cycle(s) among {len(graph)} files under {root}")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
