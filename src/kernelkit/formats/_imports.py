"""Import the files of an outside problem (a KernelBench problem, a GPU MODE task) without letting them collide.

Every file gets its own module name (``kernelkit_<kind>_<stem>_<digest of the path>``), registered in
``sys.modules`` so Triton's source lookup and pickling work. A GPU MODE task's files import each other by plain
names (``from utils import ...``, ``from task import input_t``); those names point at the task's own files only while
the task is being imported, then whatever held them before is put back. A file's top-level code runs at most the build
limit (deadline.build_timeout): one that hangs is a LoadError, not a hang of the process that plans the cases.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.util
import sys
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from kernelkit.deadline import BUILD_TIMEOUT_ENV, Expired, build_timeout, deadline
from kernelkit.errors import LoadError


def module_name(path: Path, kind: str) -> str:
    """A module name of its own for ``path``: the same path always gets the same name."""
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:10]
    stem = "".join(c if c.isalnum() else "_" for c in path.stem)
    return f"kernelkit_{kind}_{stem}_{digest}"


def import_file(path: Path, kind: str, aliases: Mapping[str, Path] | None = None) -> ModuleType:
    """Execute ``path`` as a fresh module; a failure is a LoadError naming the file and the line.

    aliases: plain module names (``utils``) the file may import, each mapped to a file; they resolve to those
    files during this import only.
    """
    with _aliased(aliases or {}, kind) as session:
        return session.load(path)


@contextmanager
def aliased_imports(aliases: Mapping[str, Path], kind: str) -> Iterator[_Session]:
    """Import several files that share the same plain-name modules (a task's reference and its submission)."""
    with _aliased(aliases, kind) as session:
        yield session


class _Session(importlib.abc.MetaPathFinder):
    """Resolves the alias names to their files for the duration of one load; each file is executed once."""

    def __init__(self, aliases: Mapping[str, Path], kind: str) -> None:
        self.aliases = {name: path.resolve() for name, path in aliases.items()}
        self.kind = kind
        self.loaded: dict[Path, ModuleType] = {}
        self.running = False  # a file's top-level code is running (the imports it makes run inside its limit)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.aliases:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(self, self.aliases[fullname]))

    def load(self, path: Path) -> ModuleType:
        path = path.resolve()
        if path in self.loaded:
            return self.loaded[path]
        name = module_name(path, self.kind)
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise LoadError(f"cannot import {path}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        self.loaded[path] = module
        try:
            self._run(spec.loader, module, path)
        except LoadError:
            self._forget(path, name)
            raise
        except SyntaxError as exc:
            self._forget(path, name)
            text = (exc.text or "").strip()
            shown = f"\n    {text}" if text else ""
            raise LoadError(f"syntax error in {exc.filename}:{exc.lineno}: {exc.msg}{shown}") from None
        except (Exception, SystemExit) as exc:  # a script-like file calling exit() failed to import too
            where = self._where(exc, path)
            self._forget(path, name)
            raise LoadError(f"importing {path} failed{where}: {type(exc).__name__}: {exc}") from None
        return module

    def _run(self, loader: importlib.abc.Loader, module: ModuleType, path: Path) -> None:
        """Execute the module; the outermost import of a load is bounded by the build limit (the files' top-level
        code runs in the process that plans the cases, before any worker could stop it)."""
        if self.running:
            loader.exec_module(module)
            return
        self.running = True
        limit = build_timeout()
        try:
            with deadline(limit):
                loader.exec_module(module)
        except Expired:
            raise LoadError(f"importing {path} ran past {limit:g} s (the build limit; set {BUILD_TIMEOUT_ENV}=SECONDS "
                            "to move it): its top-level code hangs or does the work of a call") from None
        finally:
            self.running = False

    def _forget(self, path: Path, name: str) -> None:
        self.loaded.pop(path, None)
        sys.modules.pop(name, None)

    def _where(self, exc: BaseException, path: Path) -> str:
        """' (line 12)' in the file itself, or ' (at /task/utils.py:12)' in a file of the task it imported."""
        files = {str(p) for p in (path, *self.loaded, *self.aliases.values())}
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if str(Path(f.filename).resolve()) in files]
        if not frames:
            return ""
        last = frames[-1]
        if Path(last.filename).resolve() == path:
            return f" (line {last.lineno})"
        return f" (at {last.filename}:{last.lineno})"


class _AliasLoader(importlib.abc.Loader):
    """Loads an alias name as the session's module for that file (executed once, shared by every importer)."""

    def __init__(self, session: _Session, path: Path) -> None:
        self.session = session
        self.path = path

    def create_module(self, spec: Any) -> ModuleType:
        return self.session.load(self.path)

    def exec_module(self, module: ModuleType) -> None:
        """Already executed by ``create_module``."""


@contextmanager
def _aliased(aliases: Mapping[str, Path], kind: str) -> Iterator[_Session]:
    session = _Session(aliases, kind)
    saved = {name: sys.modules.pop(name) for name in session.aliases if name in sys.modules}
    sys.meta_path.insert(0, session)
    try:
        yield session
    finally:
        sys.meta_path.remove(session)
        for name in session.aliases:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
