"""Importing the user's architecture code (``--arch FILE.py:NAME`` / ``--arch package.module:NAME``) as
Python would run it, and leaving the interpreter as it was.

A file is imported with its folder on the import path, so ``from blocks import ResBlock`` beside it
works (as ``python FILE.py``); a file inside a package (its folder holds ``__init__.py``) is imported
under its package name with the package root on the path too, so ``from .blocks import ResBlock``
and ``from pkg.blocks import ResBlock`` work (as ``python -m pkg.net``). A dotted module is looked
up on the import path, then in the current folder (as ``python -m``). The path entries are there for
that import only: ``sys.path`` is restored after it, and the modules it loaded from the user's
folders leave ``sys.modules`` again, so a second architecture file with a ``blocks.py`` of its own
gets its own (a module of the same name loaded earlier from elsewhere is set aside during the
import and put back after it). Installed packages it imported (timm, torchvision) stay loaded.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import site
import sys
import sysconfig
import traceback
from pathlib import Path
from types import ModuleType

from ..errors import ModelError

#: the modules the user's file may never replace, whatever its folder holds
_KEEP = frozenset({"robfair", "torch", "numpy"})


def _installed_roots() -> list[Path]:
    roots = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        roots.update(site.getsitepackages())
        roots.add(site.getusersitepackages())
    except AttributeError:  # a virtualenv's old site.py lacks them
        pass
    return [Path(r).resolve() for r in roots if r]


def _where(mod: ModuleType) -> list[Path]:
    """The files / folders a module came from (a namespace package: its folders)."""
    out = []
    f = getattr(mod, "__file__", None)
    if isinstance(f, str):
        out.append(Path(f))
    try:
        out.extend(Path(p) for p in list(getattr(mod, "__path__", None) or []) if isinstance(p, str))
    except (TypeError, RuntimeError):
        pass
    return out


def _under(paths: list[Path], dirs: list[Path]) -> bool:
    return any(p.resolve().is_relative_to(d) for p in paths for d in dirs)


def _provided(dirs: list[Path]) -> set[str]:
    """The top-level module names the user's folders provide (``name.py`` or a folder ``name``)."""
    names = set()
    for d in dirs:
        try:
            for entry in os.scandir(d):
                stem = entry.name[:-3] if entry.name.endswith(".py") else entry.name
                if stem.isidentifier() and (entry.name.endswith(".py") or entry.is_dir()):
                    names.add(stem)
        except OSError:
            pass
    return names


class _Isolated:
    """``with _Isolated(front, back):`` ``front`` folders first on ``sys.path`` and ``back`` last, for
    the import inside only; then ``sys.path`` as it was, and the modules loaded from those folders
    gone from ``sys.modules`` (modules of the same top-level names loaded before from elsewhere are
    set aside while inside when ``shadow``, as the folders would shadow them in a fresh ``python``)."""

    def __init__(self, front: list[Path], back: list[Path] = (), *, shadow: bool = True, keep: str | None = None,
                 own: str | None = None):
        self.front, self.back, self.shadow, self.keep, self.own = list(front), list(back), shadow, keep, own
        self.dirs = [d.resolve() for d in (*self.front, *self.back)]

    def __enter__(self) -> _Isolated:
        self.path = list(sys.path)
        self.before = set(sys.modules)
        self.finders = set(sys.path_importer_cache)
        self.installed = _installed_roots()
        self.aside: dict[str, ModuleType] = {}
        if self.shadow:
            tops = _provided(self.front) - _KEEP
            for name, mod in list(sys.modules.items()):
                if name.partition(".")[0] in tops and mod is not None:
                    where = _where(mod)
                    if where and (_under(where, self.dirs) or not _under(where, self.installed)
                                  or name.partition(".")[0] == self.own):  # the file's own package, even installed
                        self.aside[name] = sys.modules.pop(name)
        sys.path[:0] = [str(d) for d in self.front]
        sys.path.extend(str(d) for d in self.back if str(d) not in sys.path)
        importlib.invalidate_caches()
        return self

    def __exit__(self, *exc: object) -> None:
        for name in set(sys.modules) - self.before:
            mod = sys.modules[name]
            if name == self.keep or name.partition(".")[0] in _KEEP:
                continue
            where = _where(mod) if mod is not None else []
            if where and _under(where, self.dirs) and not _under(where, self.installed):
                del sys.modules[name]
        sys.modules.update(self.aside)
        sys.path[:] = self.path
        for key in set(sys.path_importer_cache) - self.finders:  # the finders of the folders (and packages) inside
            if key not in sys.path and _under([Path(key)], self.dirs):
                del sys.path_importer_cache[key]


def package_of(file: Path) -> tuple[Path, list[str]]:
    """(the package root, the package names) of a ``.py`` file: its folder and [] outside a package."""
    root, parts = file.resolve().parent, []
    while (root / "__init__.py").is_file() and root.name.isidentifier() and root.parent != root:
        parts.insert(0, root.name)
        root = root.parent
    return root, parts


def import_file(file: Path, unique: str) -> ModuleType:
    """The module of the user's ``file``: run as ``python FILE.py`` would (its folder on the path),
    or as ``python -m pkg.mod`` from the package root when it lies in a package. Outside a package
    the module is kept in ``sys.modules`` as ``unique``; a package's module is named by its package."""
    folder = file.resolve().parent
    root, parts = package_of(file)
    front = [folder] + ([root] if parts else [])
    qualname = ".".join([*parts, file.stem]) if parts and file.stem.isidentifier() else None
    with _Isolated(front, keep=None if qualname else unique, own=parts[0] if qualname else None):
        try:
            if qualname is not None:
                return importlib.import_module(qualname)
            spec = importlib.util.spec_from_file_location(unique, file)
            if spec is None or spec.loader is None:
                raise ModelError(f"cannot import {file}; pass a Python source file (.py)")
            module = importlib.util.module_from_spec(spec)
            sys.modules[unique] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(unique, None)
                raise
            return module
        except (KeyboardInterrupt, ModelError):
            raise
        except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's file: what its import raises is its own
            raise ModelError(_failed(f"importing --arch file {file}", e, front, file=file,
                                     package=bool(parts))) from None


def import_dotted(where: str) -> ModuleType:
    """The installed module ``where`` (``pkg.module``), else one in the current folder (as ``python -m``)."""
    if not all(p.isidentifier() for p in where.split(".")):
        raise ModelError(f"--arch '{where}' is neither an existing .py file nor a module name (package.module); "
                         "pass --arch FILE.py:NAME or an installed module, e.g. --arch mypkg.nets:WideResNet")
    cwd = Path.cwd()
    with _Isolated([], [cwd], shadow=False):
        try:
            return importlib.import_module(where)
        except KeyboardInterrupt:
            raise
        except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's module: what its import raises is its own
            raise ModelError(_failed(f"--arch module '{where}'", e, [cwd], module=where)) from None


def _failed(what: str, e: BaseException, searched: list[Path], *, file: Path | None = None, package: bool = False,
            module: str | None = None) -> str:
    """One line for an import of the user's code that raised ``e``."""
    if isinstance(e, SystemExit):
        return (f"{what} called sys.exit({e.code!r}); put the file's script part under "
                "`if __name__ == \"__main__\":` so importing it only defines the model")
    by = _raised_in(e, searched)
    missing = getattr(e, "name", None) if isinstance(e, ModuleNotFoundError) else None
    if missing:
        top = missing.partition(".")[0]
        if module is not None and (module == missing or module.startswith(missing + ".")):
            return (f"{what} cannot be imported: no module named '{missing}' (searched the installed packages, "
                    f"then the current folder {searched[0]}); `pip install` the package that provides it, run from "
                    "the folder that holds it, or pass --arch FILE.py:NAME")
        parent, _, leaf = missing.rpartition(".")
        pkg = sys.modules.get(parent) if parent else None  # still imported: this runs inside the import
        inside = [Path(p) for p in getattr(pkg, "__path__", None) or [] if isinstance(p, str)]
        put = f"{leaf}.py (or the folder {leaf}/) in {inside[0]}" if inside else \
            f"{top}.py (or the folder {top}/) in {searched[0]}"
        where = "the file's folder" + (" and its package root" if package else "") if file is not None \
            else "the current folder"
        return (f"{what} failed: no module named '{missing}' ({'imported' + by + '; ' if by else ''}searched "
                f"{where} {' and '.join(str(d) for d in searched)}, then the installed packages); put {put}, "
                "`pip install` the package that provides it, or fix the import")
    msg = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
    if isinstance(e, ImportError) and "no known parent package" in msg and file is not None:
        return (f"{what} failed: it uses a relative import (`from .x import ...`) but its folder {searched[0]} has "
                f"no __init__.py; add an empty {searched[0] / '__init__.py'} so the folder is a package (imported "
                f"from {searched[0].parent}), or import the module by name (`from x import ...`)")
    fix = "the file so `python FILE.py` runs" if module is None else f"the module so `python -m {module}` runs"
    return f"{what} failed ({type(e).__name__}: {msg}){by}; fix {fix}"


def _raised_in(e: BaseException, dirs: list[Path]) -> str:
    """`` at blocks.py line 3``: the user's own file (below ``dirs``) where ``e`` was raised, if any."""
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if f.filename and not f.filename.startswith("<") and _under([Path(f.filename)], [d.resolve() for d in dirs])]
    if not frames:
        return ""
    f = frames[-1]
    return f" at {Path(f.filename).name} line {f.lineno}"
