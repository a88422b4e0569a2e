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


def test_a_thread_the_case_left_is_a_change_named_but_a_librarys_own_thread_is_not():
    # Seen on an H200: torch.compile's first compile in a GPU worker leaves inductor's reader thread and tqdm's
    # monitor running; they serve every later compile, so they must not cost the worker. A user's thread must.
    import threading

    stop = threading.Event()

    class Monitor(threading.Thread):  # a library's thread class, as tqdm's TMonitor is
        def run(self):
            stop.wait(30)

    Monitor.__module__ = "tqdm._monitor"

    def reader():  # a library's thread target, as inductor's compile pool reader is
        stop.wait(30)

    reader.__module__ = "torch._inductor.compile_worker.subproc_pool"

    def users_own():
        stop.wait(30)

    before = hygiene.snapshot("cpu")
    library = [Monitor(name="tqdm_monitor"), threading.Thread(target=reader, name="InductorSubproc")]
    mine = threading.Thread(target=users_own, name="left-behind")
    try:
        for t in library:
            t.start()
        assert hygiene.changes(before, hygiene.snapshot("cpu")) == []
        mine.start()
        assert hygiene.changes(before, hygiene.snapshot("cpu")) == ["1 Python thread(s) still running (left-behind)"]
    finally:
        stop.set()
        for t in (*library, mine):
            if t.is_alive():
                t.join(5)


def test_an_idle_thread_pool_is_not_a_change_but_one_still_working_is():
    # Inductor keeps a ThreadPoolExecutor for its compiles: idle between calls, it cannot touch the next case.
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    before = hygiene.snapshot("cpu")
    release = threading.Event()
    with ThreadPoolExecutor(1, thread_name_prefix="pool") as pool:
        pool.submit(time.sleep, 0).result()
        deadline = time.monotonic() + 5  # the worker goes back to its queue just after the task's result is set
        while hygiene.changes(before, hygiene.snapshot("cpu")) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert hygiene.changes(before, hygiene.snapshot("cpu")) == []
        started = threading.Event()
        pool.submit(lambda: (started.set(), release.wait(10)))
        assert started.wait(10)
        assert hygiene.changes(before, hygiene.snapshot("cpu")) == ["1 Python thread(s) still running (pool_0)"]
        release.set()
