import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    # Without a GPU, Triton runs in its interpreter, and that is fixed when triton is first imported: its own
    # @triton.jit library functions (tl.max, tl.sum) are made interpreted or compiled at that moment. Some test
    # modules import triton at collection, before any fixture could set this.
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (gpu marker)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


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
    """An empty kernelkit disk cache for the test; nothing is written to the user's."""
    monkeypatch.setenv("KERNELKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def line_of(request: pytest.FixtureRequest) -> Callable[[str], int]:
    """line_of(text): the 1-based line of the requesting test file that holds ``text`` (where a compiler error
    about that text must point)."""
    lines = Path(request.path).read_text().splitlines()
    return lambda text: next(i for i, line in enumerate(lines, 1) if text in line and "line_of(" not in line)
