"""scripts/install with a fake Python: what it prints when all goes well, and one clear line when pip fails."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FAKE_PYTHON = r"""#!/usr/bin/env bash
echo "$*" >>"$FAKE_DIR/calls"
if [ "$1" = "-c" ]; then  # is torch importable, and which?
    [ -e "$FAKE_DIR/torch" ] && { echo "2.13.0+cpu (CPU build)"; exit 0; }
    exit 1
fi
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
    if [ -n "${FAKE_PIP_FAIL:-}" ]; then
        echo "WARNING: Retrying (Retry(total=1)) after connection broken by 'NewConnectionError'"
        echo "ERROR: Could not find a version that satisfies the requirement triton>=3.2 (from versions: none)"
        echo "ERROR: No matching distribution found for triton>=3.2"
        exit 1
    fi
    case "$*" in *torch==2.13.0*) touch "$FAKE_DIR/torch" ;; esac
    exit 0
fi
if [ "$1" = "-" ]; then
    cat >/dev/null
    echo "installed: kernelkit 0.1.0 (editable, this checkout) with [$2]: triton 3.9.0"
fi
"""


def _install(tmp_path: Path, *, torch: bool, fail: bool = False) -> subprocess.CompletedProcess[str]:
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    if torch:
        (tmp_path / "torch").touch()
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(python), "FAKE_DIR": str(tmp_path), "TMPDIR": str(tmp_path),
           **({"FAKE_PIP_FAIL": "1"} if fail else {})}
    return subprocess.run(["bash", str(ROOT / "scripts" / "install"), "triton"], capture_output=True, text=True,
                          env=env, timeout=60)


def test_it_says_which_torch_it_kept_and_what_it_installed(tmp_path):
    done = _install(tmp_path, torch=True)
    assert done.returncode == 0, done.stderr
    assert "torch: kept the torch already installed, 2.13.0+cpu (CPU build)" in done.stdout
    assert "installed: kernelkit 0.1.0 (editable, this checkout) with [triton]" in done.stdout
    assert "torch==2.13.0" not in (tmp_path / "calls").read_text()  # an importable torch is never replaced


def test_without_torch_it_installs_the_pinned_cpu_build(tmp_path):
    done = _install(tmp_path, torch=False)
    assert done.returncode == 0, done.stderr
    assert "torch: installed 2.13.0+cpu (CPU build)" in done.stdout
    assert "-m pip install --quiet --disable-pip-version-check --retries 2 torch==2.13.0" in \
        (tmp_path / "calls").read_text()


@pytest.mark.skipif(os.name != "posix", reason="a bash script")
def test_a_package_pip_cannot_reach_is_one_clear_line_not_a_wall(tmp_path):
    done = _install(tmp_path, torch=True, fail=True)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("scripts/install: pip could not install kernelkit with extras [triton]: Could not "
                               "find a version that satisfies the requirement triton>=3.2")
    assert "Is the package index reachable?" in lines[0] and "Traceback" not in done.stderr
    log = Path(lines[0].rsplit("Full pip output: ", 1)[1])
    assert "No matching distribution found for triton>=3.2" in log.read_text()
    assert "installed:" not in done.stdout
