"""What a job is doing now, told to the process that waits for it: one short phrase per phase ("building cuda_vec4",
"compiling the torch.compile baseline", "timing 6 contenders").

A worker installs a sink that sends each phrase to its runner (runner.Worker passes it to its ``on_phase``); in any
other process ``say`` does nothing. A phase is news, not a result: it never moves a job's clocks or its verdict.
"""

from __future__ import annotations

from collections.abc import Callable

Sink = Callable[[str], None]

_sink: list[Sink] = []  # the worker's one sink, when installed (a list: no global rebinding)


def install(sink: Sink | None) -> None:
    """Send every later ``say`` to ``sink`` (None: to nothing). Called once by a worker as it starts."""
    _sink.clear()
    if sink is not None:
        _sink.append(sink)


def say(text: str) -> None:
    """Tell the waiting process what this job does now; a sink that fails is dropped, the job goes on."""
    for sink in list(_sink):
        try:
            sink(text)
        except Exception:  # noqa: BLE001 - progress is best effort: a closed pipe must not fail the job
            _sink.clear()
