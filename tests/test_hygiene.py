"""What a case may leave behind in its worker: the comparison the runner replaces a worker by."""

import dataclasses
import subprocess
import sys

from kernelkit import hygiene


def test_a_switch_that_appears_is_not_a_change_but_one_that_moves_is():
    # CUDA's switches exist only once CUDA is initialised: seeing them appear after a job must not cost a worker.
    before = hygiene.snapshot("cpu")
    after = dataclasses.replace(before, switches={**before.switches, "tf32 matmul": False, "cuda device": 0})
    assert hygiene.changes(before, after) == []
    moved = dataclasses.replace(after, switches={**after.switches, "tf32 matmul": True})
    assert hygiene.changes(after, moved) == ["tf32 matmul=True"]


def test_a_process_the_case_left_running_is_a_change_but_inductors_compile_pool_is_not():
    before = hygiene.snapshot("cpu")
    pool = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "torch/_inductor/compile_worker"])
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        after = hygiene.snapshot("cpu")
        assert pool.pid in after.children and stray.pid in after.children
        assert hygiene.changes(before, after) == ["1 process(es) it started still running"]
    finally:
        for p in (pool, stray):
            p.kill()
            p.wait()
