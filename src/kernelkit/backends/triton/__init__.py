"""Triton: a ``do_bench`` that lets ``@triton.autotune`` run in the interpreter too, and what autotuning chose.

    @triton.autotune(configs=[...], key=["n_elements"], do_bench=kernelkit.backends.triton.do_bench)
    @triton.jit
    def square_flat_kernel(...): ...

bench.py: ``do_bench`` and ``interpreting``; autotune.py: the config each autotuned kernel runs with; backend.py:
the Triton backend (interpreter on the CPU, compiler errors, autotuning details); asm.py: its kernels compiled for
a GPU target without one. Nothing here imports triton at import time: importing it fixes whether its kernels run
in the interpreter.
"""

from kernelkit.backends.triton.autotune import AutotuneState, autotune_details, autotune_state, format_config
from kernelkit.backends.triton.bench import DEFAULT_REP_MS, DEFAULT_WARMUP_MS, do_bench, interpreting, summarize_times

__all__ = ["DEFAULT_REP_MS", "DEFAULT_WARMUP_MS", "AutotuneState", "autotune_details", "autotune_state", "do_bench",
           "format_config", "interpreting", "summarize_times"]
