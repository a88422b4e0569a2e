"""Impls that leave their worker changed, each followed by a probe that fails when it inherits the change.

Every impl computes the right answer; a probe returns a wrong one when it sees a polluted process (a working
directory, an environment variable, PATH, torch's thread count or default dtype, leaked memory). With per-case
hygiene every probe PASSES.
"""

import os
import tempfile

import torch

import kernelkit as kk

POLLUTED_DIR = "kk-polluted-dir"
_leaked = []


@kk.op(sizes=[(8, 8)], cpu_sizes=[(8, 8)], dtypes=[torch.float32])
def polluted(x):
    return x * x + 1


def _clean() -> bool:
    return (not os.getcwd().endswith(POLLUTED_DIR) and "KK_POLLUTED" not in os.environ
            and os.environ.get("PATH") != "/nonexistent" and torch.get_num_threads() != 7
            and torch.get_default_dtype() == torch.float32 and not _leaked)


def _probe(x):
    y = x * x + 1
    return y if _clean() else y + 1


def _chdir(x):
    path = os.path.join(tempfile.gettempdir(), POLLUTED_DIR)
    os.makedirs(path, exist_ok=True)
    os.chdir(path)
    return x * x + 1


def _env(x):
    os.environ["KK_POLLUTED"] = "yes"
    os.environ["PATH"] = "/nonexistent"
    return x * x + 1


def _threads(x):
    torch.set_num_threads(7)
    return x * x + 1


def _default_dtype(x):
    torch.set_default_dtype(torch.float64)
    return x * x + 1


def _leak(x):
    _leaked.append(torch.ones(int(os.environ.get("KK_LEAK_BYTES", 1.2 * 2**30)) // 4))
    return x * x + 1


def _everything(x):
    for each in (_chdir, _env, _threads, _default_dtype):
        each(x)
    return x * x + 1


for name, fn in (("everything", _everything), ("chdir", _chdir), ("env", _env), ("threads", _threads),
                 ("dtype", _default_dtype), ("leak", _leak)):
    polluted.impl(f"eager_{name}")(fn)
    polluted.impl(f"eager_probe_after_{name}")(_probe)
