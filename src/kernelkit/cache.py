"""Where kernelkit keeps build products between runs, and how they are keyed."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

import platformdirs

from kernelkit.errors import KernelkitError


def cache_dir(*parts: str) -> Path:
    """The kernelkit cache directory (or a subdirectory of it), created on demand.

    ``$KERNELKIT_CACHE_DIR`` if set, else the user's cache folder as platformdirs names it
    (``$XDG_CACHE_HOME/kernelkit`` or ``~/.cache/kernelkit`` on Linux, ``~/Library/Caches/kernelkit`` on macOS).
    Read on every call, so a test can point it elsewhere with an environment variable. Every folder created here
    is private (0o700), whatever the umask: the cache holds shared libraries that kernelkit loads. CacheDirError
    (an OSError and a KernelkitError) names the folder and the fix when it cannot be created.
    """
    root = os.environ.get("KERNELKIT_CACHE_DIR")
    base = Path(root).expanduser() if root else _user_cache_dir()
    path = base.joinpath(*parts)
    if not path.is_dir():
        _make_private(path)
    return path


def _user_cache_dir() -> Path:
    # platformdirs raises RuntimeError where it finds no home (4.x), or leaves the '~' in place (3.x).
    try:
        folder = Path(platformdirs.user_cache_dir("kernelkit", appauthor=False))
    except RuntimeError as exc:
        reason = str(exc)
    else:
        if folder.is_absolute():
            return folder
        reason = f"the user cache folder resolved to {folder}"
    raise CacheDirError(f"no home directory to keep kernelkit's cache in ({reason}); set KERNELKIT_CACHE_DIR "
                        "to a writable folder")


class CacheDirError(KernelkitError, OSError):
    """The cache directory cannot be created or written."""


def _make_private(path: Path) -> None:
    """Create ``path`` and its missing parents, each with mode 0o700 (mkdir's mode is masked by the umask only
    towards fewer permissions, so the result is 0o700 under any umask)."""
    missing = []
    for folder in (path, *path.parents):
        if folder.is_dir():
            break
        missing.append(folder)
    try:
        for folder in reversed(missing):
            try:
                folder.mkdir(mode=0o700)
            except FileExistsError:
                if not folder.is_dir():
                    raise
    except OSError as exc:
        raise CacheDirError(f"cannot create kernelkit's cache directory {path}: {exc.strerror or exc}; set "
                            "KERNELKIT_CACHE_DIR to a writable folder") from None


def content_key(*parts: str | bytes) -> str:
    """sha256 hex digest of ``parts``; each is length-prefixed, so ("ab", "c") and ("a", "bc") differ."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8") if isinstance(part, str) else bytes(part)
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a concurrent reader sees the old file or the whole new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
