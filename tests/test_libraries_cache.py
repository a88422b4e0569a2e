"""The cache folder: $KERNELKIT_CACHE_DIR first, else platformdirs' user cache folder (XDG_CACHE_HOME on Linux);
every folder it creates private; no home is a CacheDirError that says what to set."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import platformdirs
import pytest

from kernelkit import cache
from kernelkit.cache import CacheDirError, cache_dir


@pytest.fixture
def no_cache_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv("KERNELKIT_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    return monkeypatch


def test_kernelkit_cache_dir_wins_over_xdg(tmp_path: Path, no_cache_env: pytest.MonkeyPatch):
    no_cache_env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    no_cache_env.setenv("KERNELKIT_CACHE_DIR", str(tmp_path / "kk"))
    assert cache_dir("cuda") == tmp_path / "kk" / "cuda"
    assert not (tmp_path / "xdg").exists()


@pytest.mark.skipif(sys.platform != "linux", reason="XDG folders are Linux's")
def test_without_it_the_xdg_cache_home_then_the_home_folder(tmp_path: Path, no_cache_env: pytest.MonkeyPatch):
    no_cache_env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "kernelkit"
    no_cache_env.delenv("XDG_CACHE_HOME")
    no_cache_env.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir("logs") == tmp_path / "home" / ".cache" / "kernelkit" / "logs"
    assert cache_dir() == Path(platformdirs.user_cache_dir("kernelkit", appauthor=False))


def test_every_folder_it_creates_is_private_whatever_the_umask(tmp_path: Path, no_cache_env: pytest.MonkeyPatch):
    no_cache_env.setenv("KERNELKIT_CACHE_DIR", str(tmp_path / "a" / "b"))
    old = os.umask(0)
    try:
        made = cache_dir("c")
    finally:
        os.umask(old)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", made):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


@pytest.mark.parametrize("answer", [RuntimeError("could not determine the home directory"), "~/.cache/kernelkit"],
                         ids=["platformdirs-4-raises", "platformdirs-3-leaves-the-tilde"])
def test_no_home_is_a_cache_dir_error_that_says_what_to_set(answer, no_cache_env: pytest.MonkeyPatch):
    def user_cache_dir(*args, **kwargs):
        if isinstance(answer, Exception):
            raise answer
        return answer

    no_cache_env.setattr(cache.platformdirs, "user_cache_dir", user_cache_dir)
    with pytest.raises(CacheDirError, match="no home directory to keep kernelkit's cache in .*set KERNELKIT_CACHE_DIR"):
        cache_dir()


def test_a_folder_it_cannot_create_is_a_cache_dir_error_naming_it(tmp_path: Path, no_cache_env: pytest.MonkeyPatch):
    (tmp_path / "file").write_text("")
    no_cache_env.setenv("KERNELKIT_CACHE_DIR", str(tmp_path / "file" / "cache"))
    with pytest.raises(CacheDirError, match=r"cannot create kernelkit's cache directory .*file/cache/x: .*"
                                            "KERNELKIT_CACHE_DIR") as info:
        cache_dir("x")
    assert isinstance(info.value, OSError)
