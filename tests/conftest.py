import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    # Without a GPU, Triton runs in its interpreter, and that is fixed when triton is first imported: its own
    # @triton.jit library functions (tl.max, tl.sum) are made interpreted or compiled at that moment. Some test
    # modules import triton at collection, before any fixture could set this.
    os.environ.setdefault("TRITON_INTERPRET", "1")


# Measured on an idle 2-core VM (2026-11): the suite took 4m44s on 2 xdist workers, 7m03s in one process (its tests
# keep about one core busy: their own process or a worker they wait on). Each xdist worker holds ~1 GB (torch),
# hence the cap.
MAX_XDIST_WORKERS = 4


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """Workers for ``-n auto`` (addopts): one per CPU core, at most MAX_XDIST_WORKERS. None (this process alone)
    where a GPU is, as GPU tests time kernels and count memory on a GPU they must have to themselves; and for one
    test file, which --dist loadfile would give to one worker anyway (each costs seconds to start: torch).
    $PYTEST_XDIST_AUTO_NUM_WORKERS still decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    files = {arg.split("::")[0] for arg in config.args}
    if torch.cuda.is_available() or (len(files) == 1 and Path(files.pop()).is_file()):
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(cores, MAX_XDIST_WORKERS) if cores > 1 else 0


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (gpu marker)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_logreport(report):
    """A GPU test's failure written out when it happens, not only in the summary at the end: a device run cut by
    its time limit (killed before the summary) keeps the messages of the tests that failed before the cut."""
    if report.failed and report.when == "call" and "gpu" in report.keywords:
        sys.__stderr__.write(f"\nFAILED {report.nodeid}\n{report.longreprtext[-3000:]}\n")
        sys.__stderr__.flush()


# ---- every test's own kernelkit cache ------------------------------------------------------------------------
# No test reads or writes the user's caches, results store or calibration: each test gets an empty kernelkit cache
# folder (KERNELKIT_CACHE_DIR), except for build products, which cost seconds to minutes to make (nvcc, inductor)
# and are keyed by their content: those subfolders link to one folder shared by the whole run, xdist workers
# included. Spawned worker processes inherit the environment. A test that needs an empty cache, build products
# included, asks for ``fresh_cache``.

SHARED_BUILDS = ("cuda", "inline", "inductor")  # cache_dir() subfolders; "inductor" is torch.compile's (compiled.py)


@pytest.fixture(scope="session")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder shared by every process of this pytest run: the base temp folder, or under xdist its parent (each
    worker's base temp folder is a subfolder of the run's)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def cpu_ceilings() -> dict[str, str]:
    """Cache key -> JSON of made-up ceilings of this CPU, at one torch thread (CPU workers' default: see
    measure/host.py cpu_threads), at $KERNELKIT_THREADS and at this process's thread count. Read from a test's cache,
    they spare it the calibration a CPU benchmark would run (seconds, and refused on a busy machine); their notes
    say they are made up."""
    from kernelkit.measure import ceilings
    from kernelkit.measure.host import THREADS_ENV, cpu_threads

    made_up = {"what": "made up by tests/conftest.py (cpu_ceilings): a test fixture, not a measurement",
               "mode": "none", "iqr_rel": 0.0}
    found = {}
    for threads in sorted({1, cpu_threads(), torch.get_num_threads()}):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(THREADS_ENV, str(threads))
            saved = torch.get_num_threads()
            torch.set_num_threads(threads)
            try:
                name, key = ceilings._identity(torch.device("cpu"))
            finally:
                torch.set_num_threads(saved)
        notes = {"copy": {**made_up, "threads": threads}, "fp32": {**made_up, "threads": threads}}
        for kind in ceilings.MATMUL_KINDS[1:]:
            notes[kind] = {"skipped": "CPU: only the fp32 matmul rate is calibrated"}
        made = ceilings.Ceilings(name, key, copy_gbps=20.0, matmul_tflops={"fp32": 0.1 * threads}, notes=notes,
                                 measured_at="2026-01-01T00:00:00+00:00", device="cpu")
        found[key] = json.dumps(made.to_dict(), indent=2)
    return found


def use_cache(patch: pytest.MonkeyPatch, folder: Path, shared: Path, cpu_ceilings: dict[str, str]) -> None:
    """``folder`` (new and empty) as the kernelkit cache from now on, with its build subfolders linked to those in
    ``shared`` and this CPU's made-up ceilings in it; torch.compile's cache is its "inductor" subfolder."""
    from kernelkit.measure import ceilings

    for name in SHARED_BUILDS:
        (shared / name).mkdir(mode=0o700, parents=True, exist_ok=True)  # exist_ok: xdist workers race here
        (folder / name).symlink_to(shared / name, target_is_directory=True)
    patch.setenv("KERNELKIT_CACHE_DIR", str(folder))
    # Set here rather than by the compile backend, which sets it once per process and never back: torch.compile
    # in this process and in the workers it spawns then uses this test's cache.
    patch.setenv("TORCHINDUCTOR_CACHE_DIR", str(folder / "inductor"))
    for key, text in cpu_ceilings.items():
        ceilings._cache_path(key).write_text(text)


@pytest.fixture(scope="session", autouse=True)
def session_cache(run_folder: Path, tmp_path_factory: pytest.TempPathFactory,
                  cpu_ceilings: dict[str, str]) -> Iterator[Path]:
    """The kernelkit cache of module- and session-scoped fixtures (set up before any test's own), and an
    XDG_CACHE_HOME of the run's, so that nothing a test starts falls back to the user's cache folder."""
    xdg = run_folder / "xdg-cache"
    xdg.mkdir(mode=0o700, exist_ok=True)
    folder = tmp_path_factory.mktemp("kernelkit-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(xdg))
        use_cache(patch, folder, run_folder / "kernelkit-builds", cpu_ceilings)
        yield folder


@pytest.fixture(autouse=True)
def own_cache(run_folder: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
              cpu_ceilings: dict[str, str]) -> Path:
    """This test's own kernelkit cache (see use_cache); ``fresh_cache`` replaces it with an empty one."""
    folder = tmp_path_factory.mktemp("kernelkit-cache")
    use_cache(monkeypatch, folder, run_folder / "kernelkit-builds", cpu_ceilings)
    return folder


@pytest.fixture
def cpu_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton's interpreter and Numba's simulator in this process for one test; the environment is restored."""
    from kernelkit import backends

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    backends.prepare_process("cpu")


@pytest.fixture(scope="session")
def can_compile() -> bool:
    """Whether a CUDA compiler (NVRTC or nvcc) is here: compile-only checks need one."""
    from kernelkit.backends.cuda import build
    from kernelkit.errors import BackendUnavailable

    try:
        build.find_compiler()
    except BackendUnavailable:
        return False
    return True


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty kernelkit disk cache for the test, without the shared build products and made-up ceilings of
    ``own_cache`` (torch.compile's cache stays the run's); nothing is written to the user's."""
    monkeypatch.setenv("KERNELKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def line_of(request: pytest.FixtureRequest) -> Callable[[str], int]:
    """line_of(text): the 1-based line of the requesting test file that holds ``text`` (where a compiler error
    about that text must point)."""
    lines = Path(request.path).read_text().splitlines()
    return lambda text: next(i for i, line in enumerate(lines, 1) if text in line and "line_of(" not in line)
