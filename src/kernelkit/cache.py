"""Where kernelkit keeps build products between runs, and how they are keyed."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """The kernelkit cache directory (or a subdirectory of it), created on demand.

    ``$KERNELKIT_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/kernelkit``, else ``~/.cache/kernelkit``.
    Read on every call, so a test can point it elsewhere with an environment variable.
    """
    root = os.environ.get("KERNELKIT_CACHE_DIR")
    if root:
        base = Path(root).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "kernelkit"
    path = base.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


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
