"""The ``kernelkit`` command's entry point, kept apart from the CLI so Ctrl-C while the CLI's libraries import
(typer, rich: the first ~0.2 s) exits 130 with one line, as it does later, instead of a traceback."""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130  # cli.common.EXIT_INTERRUPTED, without importing the CLI


def main() -> None:
    try:
        from kernelkit.cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(EXIT_INTERRUPTED)
    try:
        cli_main()
    finally:
        _end_resource_tracker()


def _end_resource_tracker() -> None:
    """Stop and reap multiprocessing's resource tracker (started with the first worker), so the command leaves no
    process behind: on its own it exits only after this process has, unreaped where PID 1 reaps nothing (a
    container)."""
    tracker = sys.modules.get("multiprocessing.resource_tracker")
    stop = getattr(getattr(tracker, "_resource_tracker", None), "_stop", None)
    if stop is not None:
        try:
            stop()
        except Exception:  # noqa: BLE001, S110 - a private API of the standard library: best effort
            pass
