"""docs/architecture.md followed literally: every file it names exists, and every ``module.name`` it
points to (``cli/options.image_radius``, ``auditing/engine.evaluate``, ``metrics/stats.py``) is there.
A rename that forgets the page fails here, not in a reader's hands."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "robfair"
DOC = ROOT / "docs" / "architecture.md"

_TOP = {p.stem for p in SRC.glob("*.py")} | {p.name for p in SRC.iterdir() if p.is_dir() and not p.name.startswith("_")}
_FILE = re.compile(r"^(?:robfair/)?((?:[a-z_]+/)*[a-z_]+)\.py$")  # cli/audit.py, robfair/__main__.py, safeio.py
_ATTR = re.compile(r"^(?:robfair/)?((?:[a-z_]+/)*[a-z_]+)(?:\.py)?(?:::|\.)([A-Za-z_][\w.]*)$")  # cli/app.printed_warnings
_DIR = re.compile(r"^(?:robfair/)?((?:[a-z_]+/)*[a-z_]+)/$")  # auditing/
#: names the page uses on purpose for what is no longer there (history), each with its reason
HISTORY = {"robfair/audit/": "the package's name until issue 24, said as such",
           "base.py": "named as the name no module has"}
#: a file the code writes, not a place in it
_DATA = (".json", ".jsonl", ".npz", ".pt", ".pt2", ".yaml", ".csv", ".png", ".html", ".md", ".txt", ".safetensors")


def _code_spans(text: str) -> list[str]:
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # the floor drawing: plain names, checked by test_imports
    return re.findall(r"`([^`\n]+)`", text)


def _resolve(path: str) -> tuple[Path | None, str | None]:
    """The file or folder a doc path names, under src/robfair, then the repository root; and its module."""
    for base in (SRC, ROOT):
        for cand in (base / f"{path}.py", base / path / "__init__.py", base / path):
            if cand.exists():
                return cand, _module(cand) if cand.suffix == ".py" else None
    return None, None


def _module(file: Path) -> str | None:
    try:
        rel = file.relative_to(SRC.parent)
    except ValueError:
        return None
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _references() -> list[tuple[str, str, str | None]]:
    """(span, path, attribute) for every code span that names a place in the code: a file, a folder,
    or a module's attribute (a top-level module's too: ``utils.to_jsonable``)."""
    refs = []
    for span in _code_spans(DOC.read_text()):
        span = span.strip()
        if span in HISTORY or span.endswith(_DATA):
            continue
        for rx, has_attr in ((_FILE, False), (_DIR, False), (_ATTR, True)):
            m = rx.match(span)
            if m is None:
                continue
            path = m.group(1)
            if "/" not in path and path not in _TOP and rx is not _FILE:
                break  # `engine.evaluate`: shorthand inside a sentence about its package, `x.shape`: not a place
            if rx is _FILE and "/" not in path and path not in _TOP:  # a bare file name: wherever it is
                found = [p for p in (*SRC.rglob(f"{path}.py"), *(ROOT / "tests").rglob(f"{path}.py"))]
                path = str(found[0].relative_to(SRC if SRC in found[0].parents else ROOT).with_suffix("")) if found else path
            refs.append((span, path, m.group(2) if has_attr else None))
            break
    return refs


REFS = _references()


def test_the_page_names_many_places():
    assert len(REFS) > 80  # the check reads the page (a parse that found nothing would pass vacuously)


@pytest.mark.parametrize("span, path, attr", REFS, ids=[r[0] for r in REFS])
def test_every_place_the_page_names_exists(span, path, attr):
    where, module = _resolve(path)
    assert where is not None, f"docs/architecture.md names `{span}`: no {path}.py or {path}/ under src/robfair or the repository"
    if attr is None or module is None:
        return
    obj = importlib.import_module(module)
    for part in attr.split("."):
        assert hasattr(obj, part), f"docs/architecture.md names `{span}`: {module} has no {attr}"
        obj = getattr(obj, part)
