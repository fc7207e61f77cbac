"""Every ```python block of README.md and docs/**/*.md runs.

Blocks of one page share a namespace and run in order, as a reader would type them. A block
whose first line is ``# requires: X`` (or ``X, Y``) is skipped, with the blocks after it on that
page that may depend on it, when module X is not importable here; ``# requires: cupy`` also needs
a CUDA device. Blocks of ``text`` or other languages are not run. Pages that the Sphinx build
excludes (``docs/conf.py``'s ``LEGACY_PAGES``, lab notebooks awaiting their owners' rewrite) are
not collected either.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)$")
#: pages whose blocks take more than a second or two; run with ``-m slow``
SLOW_PAGES: set[str] = set()


def _legacy_pages():
    # Read the list from docs/conf.py without importing it (importing it runs the build's setup).
    tree = ast.parse(open(os.path.join(DOCS, "conf.py")).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "LEGACY_PAGES" for t in node.targets):
            return {os.path.join(DOCS, p) for p in ast.literal_eval(node.value)}
    return set()


def pages():
    found = [os.path.join(ROOT, "README.md")]
    skip = _legacy_pages()
    for folder, dirs, files in os.walk(DOCS):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        found += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".md")]
    return [p for p in found if p not in skip]


def python_blocks(text):
    """[(line number, source)] of the ```python blocks of a Markdown text."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, indent = m["fence"], m["info"].strip().split(), len(m["indent"])
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not (lines[i].strip().startswith(fence[0] * len(fence))
                                      and lines[i].strip().strip(fence[0]) == ""):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        i += 1
        if info and info[0] in ("python", "py", "{code-cell}"):
            blocks.append((start, "\n".join(body) + "\n"))
    return blocks


def missing_requirement(source):
    first = source.lstrip().splitlines()[0] if source.strip() else ""
    m = re.match(r"#\s*requires:\s*(.+)", first)
    if not m:
        return None
    for name in re.split(r"[,\s]+", m.group(1).strip()):
        if not name:
            continue
        if importlib.util.find_spec(name) is None:
            return name
        if name == "cupy":
            try:
                import cupy

                if cupy.cuda.runtime.getDeviceCount() < 1:
                    return "a CUDA device"
            except Exception:
                return "a CUDA device"
    return None


def _bound(tree):
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def _used(tree):
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _param(path):
    rel = os.path.relpath(path, ROOT)
    marks = [pytest.mark.slow] if rel in SLOW_PAGES else []
    return pytest.param(path, id=rel, marks=marks)


@pytest.mark.parametrize("path", [_param(p) for p in pages()])
def test_page_code_blocks_run(path, tmp_path, monkeypatch):
    blocks = python_blocks(open(path, encoding="utf-8").read())
    if not blocks:
        pytest.skip("no python blocks")
    monkeypatch.chdir(tmp_path)  # blocks that write files write them here
    namespace = {"__name__": "__docs__"}
    ran, skipped, unbound = 0, None, set()
    for line, source in blocks:
        tree = ast.parse(source, f"{path}:{line}")
        need = missing_requirement(source)
        if need is None and unbound & (_used(tree) - namespace.keys()):
            need = "a name from a skipped block"
        if need:
            skipped = skipped or f"line {line} needs {need}"
            unbound |= _bound(tree)  # later blocks using these names are skipped too
            continue
        try:
            exec(compile(tree, f"{path}:{line}", "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"{os.path.relpath(path, ROOT)}, block at line {line} failed: "
                                 f"{type(exc).__name__}: {exc}\n{source}") from exc
        ran += 1
    if ran == 0:
        pytest.skip(skipped or "nothing ran")


def test_fence_parser():
    text = "x\n```python\na = 1\n```\n```text\nb\n```\n  ```python\n  c = 2\n  ```\n"
    assert python_blocks(text) == [(2, "a = 1\n"), (8, "c = 2\n")]
