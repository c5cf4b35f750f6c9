"""The import rule of the package: an import inside a function says why it is there.

Imports sit at module top so a module's first lines show its dependencies. One inside a function
carries ``# lazy: <reason>`` (start-up time, optional extra, typing only) on its line, or on a comment
line just above its block of imports. "layering" and "cycle" are no reasons (issue 24): an import that
points up or closes a circle is a structure to fix, so the check refuses them. ``cli/`` is exempt: the whole command
package imports on demand (see ``robfair/cli/__init__.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import robfair

SRC = Path(robfair.__file__).parent


#: reasons an import inside a function may not give: each says the structure is wrong, not the import
REFUSED = ("layering", "cycle")


def _refused(line: str) -> bool:
    at = line.find("lazy:")
    return at >= 0 and any(r in line[at:] for r in REFUSED)


def unexplained_imports(path: Path, root: Path = SRC) -> list[str]:
    lines = path.read_text().splitlines()
    tree = ast.parse("\n".join(lines))
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            k = node.lineno - 1
            if _refused(lines[k]):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {lines[k].strip()} (refused reason)")
                continue
            if "# lazy" in lines[k] or "(lazy:" in lines[k]:
                continue
            j = k - 1  # up through the block of imports (blank lines included) to the comment above it
            while j >= 0 and (not lines[j].strip() or lines[j].strip().startswith(("import ", "from "))):
                if "# lazy" in lines[j]:
                    break
                j -= 1
            if j >= 0 and "# lazy" in lines[j]:
                if _refused(lines[j]):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {lines[k].strip()} (refused reason)")
                continue
            found.append(f"{path.relative_to(root)}:{node.lineno}: {lines[k].strip()}")
    return found


def test_every_import_inside_a_function_says_why():
    files = [p for p in sorted(SRC.rglob("*.py")) if p.relative_to(SRC).parts[0] != "cli"]
    assert len(files) > 50
    bad = [line for p in files for line in unexplained_imports(p)]
    assert bad == []


def test_the_check_finds_an_unexplained_import(tmp_path):
    f = tmp_path / "mod.py"
    f.write_text("import os\n\n\ndef f():\n    import json\n\n    return json\n\n\ndef g():\n"
                 "    # lazy: start-up time\n    import json\n\n    import sys\n    return json, sys\n\n\n"
                 "def h():\n    import csv  # lazy: cycle\n    return csv\n"
                 "\n\ndef k():\n    # lazy: layering (data sits below models)\n    import csv\n    return csv\n"
                 "\n\ndef m():\n    import csv  # lazy: start-up time\n    return csv\n")
    assert unexplained_imports(f, tmp_path) == ["mod.py:5: import json",
                                                "mod.py:19: import csv  # lazy: cycle (refused reason)",
                                                "mod.py:25: import csv (refused reason)"]


def test_no_module_over_500_lines_without_its_reason():
    """Issue 24: one job per file; a module over 500 lines says in its docstring why it must be one."""
    long = []
    for p in sorted(SRC.rglob("*.py")):
        text = p.read_text()
        n = text.count("\n") + 1
        if n > 500:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "Why one module" not in doc:
                long.append(f"{p.relative_to(SRC)} ({n} lines)")
    assert long == []


def test_every_import_points_down_a_package_never_imports_a_higher_one():
    """The floors of docs/architecture.md, checked on the top-level imports (a package's own modules aside):
    a module may import only packages on floors below its own."""
    floors = {"errors": 1, "inert": 1, "seeding": 1, "parsing": 2, "registry": 2, "charts": 2, "provenance": 2,
              "attacks": 3, "utils": 3, "metrics": 4, "distributed": 4, "runfolder": 4, "hardware": 4, "safeio": 5,
              "data": 6, "models": 6, "auditing": 7, "theory": 7, "training": 8, "report": 8, "certifying": 8,
              "experiments": 9, "demo": 9, "cli": 10, "__main__": 11}
    bad = []
    for p in sorted(SRC.rglob("*.py")):
        rel = p.relative_to(SRC)
        here = rel.parts[0].removesuffix(".py")
        if here == "__init__" or here not in floors:
            continue
        tree = ast.parse(p.read_text())
        for node in tree.body:  # module level only: lazy imports are checked above for their reasons
            if isinstance(node, ast.ImportFrom) and node.level:
                target_parts = list(rel.parts[:len(rel.parts) - node.level]) + (node.module or "").split(".")
                target = next((t.removesuffix(".py") for t in target_parts if t), None)
                if target is None or target == here or target not in floors:
                    continue
                if floors[target] >= floors[here]:
                    bad.append(f"{rel}: from {'.' * node.level}{node.module or ''} (floor {floors[here]} -> {floors[target]})")
    assert bad == []
