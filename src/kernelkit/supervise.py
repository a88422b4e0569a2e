"""The ``kernelkit`` command's exit, kept out of reach of the code it loads.

``kernelkit check my_ops.py`` imports the user's file, and a KernelBench or GPU MODE run its problem's files, in
the process that judges them. Code there can end that process at any moment with the exit code it likes
(``os._exit(0)`` at import: no output, exit 0, and a CI job that trusts the exit code accepts a run that never
happened). So the command runs in two processes: this small one, which imports neither torch nor the user's
code, starts the command in a child and waits; the child reports its exit code down a pipe of its own, stamped
with a token it read before any user code ran. The command's exit is that report; a child that ended without one
(``os._exit``, a signal) is a failure with one line that says so, never the child's own exit code.

Signals: Ctrl-C (SIGINT) and SIGTERM (``timeout``, CI runners, ``docker stop``) are passed to the child as a
Ctrl-C: it keeps what finished, ends its workers and exits; after SIGTERM the command exits 143. The child runs in
a process group of its own (the terminal's Ctrl-C reaches it once, through here) and is sent SIGTERM if this
process dies first. Set ``KERNELKIT_NO_SUPERVISOR=1`` to run the command in one process (a debugger).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Sequence

CHILD_ENV = "KERNELKIT_SUPERVISED"  # in the child: "<token fd>,<status fd>"
OFF_ENV = "KERNELKIT_NO_SUPERVISOR"
EXIT_FAILED, EXIT_TERMINATED = 1, 143
_PR_SET_PDEATHSIG = 1


def wanted() -> bool:
    """Whether this process should supervise: not in the child, and not turned off."""
    return CHILD_ENV not in os.environ and os.environ.get(OFF_ENV, "") in ("", "0")


def supervise(argv: Sequence[str]) -> int:
    """Run the command ``argv`` in a child and return the exit code it reported (see the module's docstring)."""
    token = secrets.token_hex(16)
    token_r, token_w = os.pipe()
    status_r, status_w = os.pipe()
    os.write(token_w, token.encode())
    os.close(token_w)
    env = {**os.environ, CHILD_ENV: f"{token_r},{status_w}"}
    code = "import sys; sys.argv = sys.argv[1:]; from kernelkit._entry import main; main()"
    parent = os.getpid()
    terminated: list[int] = []
    try:
        child = subprocess.Popen([sys.executable, "-c", code, *(sys.argv[:1] or ["kernelkit"]), *argv], env=env,
                                 pass_fds=(token_r, status_w), process_group=0,
                                 preexec_fn=lambda: _die_with(parent))
    except OSError as exc:
        sys.stderr.write(f"error: cannot start the command's process: {exc}\n")
        return EXIT_FAILED
    finally:
        os.close(token_r)
        os.close(status_w)

    def forward(signum: int, _frame: object) -> None:
        if signum == signal.SIGTERM:
            terminated.append(signum)
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signal.SIGINT)  # the child's Ctrl-C: it keeps what finished

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    returncode = _wait(child)
    reported = _report(status_r, token)
    os.close(status_r)
    if terminated:
        return EXIT_TERMINATED
    if reported is not None:
        return reported
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else -returncode
        sys.stderr.write(f"error: the run was killed by {name} before it finished\n")
        return 128 - returncode
    sys.stderr.write(f"error: the run ended before kernelkit finished it: its process exited with code "
                     f"{returncode} from code it loaded (os._exit or exit at import or in a call, in the target's "
                     "file, a solution or a submission); treated as a failure, whatever that code was\n")
    return EXIT_FAILED


def _wait(child: subprocess.Popen[bytes]) -> int:
    while True:
        try:
            return child.wait()
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for older kernels' odd returns
            continue


def _report(fd: int, token: str) -> int | None:
    """The exit code the child reported with ``token``; None when it reported none (or not with the token)."""
    os.set_blocking(fd, False)  # a process the child started may hold the pipe open: read only what is there
    data = b""
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 4096):
            data += chunk
    for line in data.decode(errors="replace").splitlines():
        said, _, value = line.partition(" ")
        if secrets.compare_digest(said, token) and value.lstrip("-").isdigit():
            return int(value)
    return None


def _die_with(parent: int) -> None:
    """In the child before it runs: SIGTERM when the supervisor dies (Linux), and none of its ignored signals."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a shell's `cmd &` ignores SIGINT: the child must not
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(EXIT_FAILED)


class Reporter:
    """The child's side: the token read (before any user code) and the pipe the exit code goes down."""

    def __init__(self) -> None:
        self.token = ""
        self.fd = -1
        spec = os.environ.pop(CHILD_ENV, "")
        if not spec:
            return
        token_fd, _, status_fd = spec.partition(",")
        try:
            self.token = os.read(int(token_fd), 64).decode()
            os.close(int(token_fd))
            self.fd = int(status_fd)
            os.set_inheritable(self.fd, False)  # no worker or subprocess gets it
        except (OSError, ValueError):
            self.fd = -1

    def report(self, code: int) -> None:
        if self.fd < 0:
            return
        with contextlib.suppress(OSError):
            os.write(self.fd, f"{self.token} {code}\n".encode())
            os.close(self.fd)
        self.fd = -1
