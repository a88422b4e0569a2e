"""The ``kernelkit`` command's entry point, kept apart from the CLI so Ctrl-C while the CLI's libraries import
(typer, rich: the first ~0.2 s) exits 130 with one line, as it does later, instead of a traceback. It runs the
command under supervise.py's watch: the exit code is reported to the supervising process, which alone exits."""

from __future__ import annotations

import signal
import sys

from kernelkit import supervise

EXIT_INTERRUPTED = 130  # cli.common.EXIT_INTERRUPTED, without importing the CLI
EXIT_TERMINATED = supervise.EXIT_TERMINATED


def main() -> None:
    """``kernelkit``: supervised (supervise.py: its exit code out of the loaded code's reach) unless in the child."""
    if supervise.wanted():
        sys.exit(supervise.supervise(sys.argv[1:]))
    reporter = supervise.Reporter()  # before anything the command loads
    terminated: list[int] = []

    def on_sigterm(signum: int, frame: object) -> None:
        terminated.append(signum)
        signal.default_int_handler(signum, frame)  # a Ctrl-C: results kept, workers ended

    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even where the shell started it ignoring SIGINT
    code: object = 0
    try:
        code = _run()
    except SystemExit as exc:
        code = exc.code
    finally:
        _end_resource_tracker()
    number = code if isinstance(code, int) else (0 if code is None else 1)
    if terminated and number == EXIT_INTERRUPTED:
        number = EXIT_TERMINATED
    if isinstance(code, str):
        sys.stderr.write(code + "\n")
    reporter.report(number)
    sys.exit(number)


def _run() -> object:
    try:
        from kernelkit.cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED
    cli_main()
    return 0


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
