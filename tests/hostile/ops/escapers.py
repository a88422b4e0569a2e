"""An impl that starts a process outside its worker's session: ``setsid -f`` forks, the child leads a session of
its own and the fork's parent exits at once, so the sleep is nobody's child and in no group the runner kills.

The sleep carries $KK_ESCAPE_TAG as a second duration (GNU sleep adds them up), so a test finds it by that tag.
"""

import os
import subprocess

import torch

import kernelkit as kk


@kk.op(sizes=[(8, 8)], cpu_sizes=[(8, 8)], dtypes=[torch.float32])
def escaped(x):
    return x * x


@escaped.impl("eager_escapes_its_session")
def escapes_its_session(x):
    subprocess.run(["setsid", "-f", "sleep", "600", os.environ.get("KK_ESCAPE_TAG", "0")], check=True)
    return x * x


@escaped.impl("eager_correct")
def correct(x):
    return x * x
