"""Exceptions kernelkit raises on purpose (each message names the problem and the fix), and how any other exception
is told in one line (``describe_exception``): a status message points at the user's own line."""

from __future__ import annotations

import difflib
import sysconfig
import traceback
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
_LIBRARY_DIRS = tuple({Path(p).resolve() for key in ("stdlib", "platstdlib", "purelib", "platlib")
                       if (p := sysconfig.get_paths().get(key))})


class KernelkitError(Exception):
    """Base class for errors kernelkit raises on purpose."""


class SpecError(KernelkitError, ValueError):
    """An op or impl is described wrongly (bad size, unknown backend, duplicate name, ...)."""


class InputError(KernelkitError):
    """An op's own inputs are wrong: making them failed, or its reference raised on them (the op's fault, not an
    impl's); cases end in INPUT_ERROR."""


class LoadError(KernelkitError):
    """An op name or file given by the user cannot be resolved or imported."""


class CompileError(KernelkitError):
    """A kernel failed to compile. ``log`` holds the compiler's own message."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message if not log else f"{message}\n{log}")
        self.log = log


class BackendUnavailable(KernelkitError):
    """A backend cannot run here (package missing, no GPU, ...); cases using it are SKIPPED with this reason."""


class LaunchError(KernelkitError, ValueError):
    """Arguments given to a kernel launch do not match the kernel (wrong dtype, device, count, ...)."""


def did_you_mean(word: str, choices: object) -> str:
    """' (did you mean 'softmax'?)' when a choice is close to ``word``; '' otherwise."""
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)  # type: ignore[attr-defined]
    return f" (did you mean {close[0]!r}?)" if close else ""


def describe_exception(exc: BaseException) -> str:
    """'TypeError: ... (at my_kernels.py:12 in square_triton)': the message and the innermost user frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    user = [f for f in frames if _is_user_frame(f.filename)]
    where = f" (at {user[-1].filename}:{user[-1].lineno} in {user[-1].name})" if user else ""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}{where}"


def _is_user_frame(filename: str) -> bool:
    """Frames of the user's code: not kernelkit's machinery (its built-in ops count), not installed libraries."""
    path = Path(filename).resolve()
    if path.is_relative_to(_PACKAGE_DIR):
        return path.is_relative_to(_PACKAGE_DIR / "ops")
    return not any(path.is_relative_to(lib) for lib in _LIBRARY_DIRS)
