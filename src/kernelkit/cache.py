"""Where kernelkit keeps build products between runs, and how they are keyed."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

from kernelkit.errors import KernelkitError


def cache_dir(*parts: str) -> Path:
    """The kernelkit cache directory (or a subdirectory of it), created on demand.

    ``$KERNELKIT_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/kernelkit``, else ``~/.cache/kernelkit``.
    Read on every call, so a test can point it elsewhere with an environment variable. Every folder created here
    is private (0o700), whatever the umask: the cache holds shared libraries that kernelkit loads. CacheDirError
    (an OSError and a KernelkitError) names the folder and the fix when it cannot be created.
    """
    root = os.environ.get("KERNELKIT_CACHE_DIR")
    if root:
        base = Path(root).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        try:
            home = Path.home()
        except RuntimeError as exc:  # no HOME and no passwd entry
            raise CacheDirError(f"no home directory to keep kernelkit's cache in ({exc}); set KERNELKIT_CACHE_DIR "
                                "to a writable folder") from None
        base = (Path(xdg).expanduser() if xdg else home / ".cache") / "kernelkit"
    path = base.joinpath(*parts)
    if not path.is_dir():
        _make_private(path)
    return path


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
