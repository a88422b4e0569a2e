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
    cli_main()
