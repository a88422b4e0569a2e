"""Exceptions kernelkit raises on purpose; each message names the problem and the fix."""

from __future__ import annotations


class KernelkitError(Exception):
    """Base class for errors kernelkit raises on purpose."""


class SpecError(KernelkitError, ValueError):
    """An op or impl is described wrongly (bad size, unknown backend, duplicate name, ...)."""


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
