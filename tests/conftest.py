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
