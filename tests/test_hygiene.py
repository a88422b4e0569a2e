"""What a case may leave behind in its worker: the comparison the runner replaces a worker by."""

import dataclasses
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from kernelkit import hygiene


@pytest.fixture(autouse=True)
def own_group():
    """Each test in a process group of its own: a snapshot counts its group's members, and pytest-xdist's workers
    share the group they start in, so another worker's subprocess (a compiler, a CLI run) would count here or not
    by the machine's timing."""
    old = os.getpgrp()
    os.setpgid(0, 0)
    try:
        yield
    finally:
        os.setpgid(0, old)


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


def test_a_process_that_left_the_children_lists_but_stayed_in_the_group_is_a_change():
    # A double fork without setsid (a shell's `cmd &` whose shell exits): the orphan is nobody's child here, but it is
    # in the worker's group, where kill_group ends it with the worker.
    before = hygiene.snapshot("cpu")
    shell = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
    orphan = int(shell.stdout)
    try:
        assert orphan not in [c.pid for c in psutil.Process().children()]
        after = hygiene.snapshot("cpu")
        assert orphan in after.children
        assert hygiene.changes(before, after) == ["1 process(es) it started still running"]
    finally:
        os.kill(orphan, signal.SIGKILL)


def test_a_zombie_is_not_a_member_and_another_group_is_found_by_its_id():
    exited = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while psutil.Process(exited.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.01)
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    try:
        assert exited.pid not in hygiene.group_members()  # exited, not yet waited for
        deadline = time.monotonic() + 10
        while len(hygiene.group_members(leader.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        members = hygiene.group_members(leader.pid)
        assert leader.pid in members and len(members) == 2  # the shell and its sleep
        assert leader.pid not in hygiene.group_members()  # its own session: out of this group
    finally:
        hygiene.kill_group(leader.pid)
        leader.wait()
        exited.wait()


def test_resident_bytes_follows_what_this_process_touches():
    import mmap

    block = mmap.mmap(-1, 64 << 20)  # fresh anonymous pages: none resident until written (a freed heap block may be)
    before = hygiene.resident_bytes()
    block.write(b"\1" * (64 << 20))
    assert hygiene.resident_bytes() - before > 48 << 20
    block.close()


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


def test_kill_tree_ends_a_descendant_that_left_the_group():
    # The shell's child leads a session of its own: killpg on the shell's group misses it, the tree does not.
    shell = subprocess.Popen(["sh", "-c", "setsid sleep 60 & wait"], start_new_session=True)
    deadline = time.monotonic() + 10
    while [c.name() for c in psutil.Process(shell.pid).children()] != ["sleep"] and time.monotonic() < deadline:
        time.sleep(0.01)  # until setsid has run and become the sleep
    (sleeper,) = psutil.Process(shell.pid).children()
    assert os.getpgid(sleeper.pid) != shell.pid
    assert shell.pid in hygiene.children() and sleeper.pid not in hygiene.group_members(shell.pid)
    hygiene.kill_tree(shell.pid)
    shell.wait(timeout=10)
    sleeper.wait(timeout=10)  # psutil: returns once it is gone (reaped by init, not by us)
    assert not sleeper.is_running() or sleeper.status() == psutil.STATUS_ZOMBIE


def test_a_worker_can_become_a_child_subreaper_on_linux():
    probe = "from kernelkit import hygiene; import sys; sys.exit(0 if hygiene.become_subreaper() else 3)"
    done = subprocess.run([sys.executable, "-c", probe], timeout=60)
    assert done.returncode == (0 if sys.platform.startswith("linux") else 3)


def test_a_variable_left_empty_where_it_was_unset_is_unset_again_but_a_value_is_a_change(monkeypatch):
    # GPU MODE's DeterministicContext saves os.environ.get(key, "") and writes it back: "" where nothing was set.
    monkeypatch.delenv("KK_EMPTIED", raising=False)
    monkeypatch.delenv("KK_SET", raising=False)
    monkeypatch.setenv("KK_WAS_EMPTY", "")
    before = hygiene.snapshot("cpu")
    monkeypatch.setenv("KK_EMPTIED", "")
    monkeypatch.setenv("KK_SET", "1")
    hygiene.restore_emptied(before)
    assert "KK_EMPTIED" not in os.environ and os.environ["KK_WAS_EMPTY"] == ""
    assert hygiene.changes(before, hygiene.snapshot("cpu")) == ["KK_SET=1"]


def test_spawn_without_main_hides_the_main_script_only_inside_the_block():
    import __main__

    before = {name: __main__.__dict__.get(name, "absent") for name in ("__file__", "__spec__")}
    with hygiene.spawn_without_main():
        assert getattr(__main__, "__file__", None) is None and getattr(__main__, "__spec__", None) is None
    assert {name: __main__.__dict__.get(name, "absent") for name in ("__file__", "__spec__")} == before
