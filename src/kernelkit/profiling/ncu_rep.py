"""Read an Nsight Compute report (.ncu-rep) with NVIDIA's own ``ncu_report`` module, where the install ships one.

    module, why_not = load_module(find_ncu())      # None (and the reason) where ncu_report does not import
    kernels = read_report(module, "case.ncu-rep")  # the NcuKernel records ncu_csv.parse_pages gives

``ncu_report`` lives in ``<install>/extras/python/`` (a Python file and its native library) of the Nsight Compute
install that holds the ncu executable: beside ``/opt/nvidia/nsight-compute/<version>/ncu``. A CUDA toolkit's
``<cuda>/bin/ncu`` is a script that runs an install elsewhere: ``<cuda>/nsight-compute-<version>``, or (CUDA 13 on
the project's GPU machine: a 2.7 KB script, and ncu_report under /opt/nvidia/nsight-compute/2025.3.1) a standalone
install it names. It reads the report itself: each metric's value as a number with its unit, and the rule results,
where the CSV pages need two ``ncu --import`` runs and carry locale-formatted text (``"1,512,352"``).
profiling/ncu.py reads the CSV pages where this module is missing or fails (ncu_csv.py).

``read_isolated`` imports and runs ncu_report in a child interpreter (``python -m kernelkit.profiling.ncu_rep NCU
REPORT`` prints the kernels as JSON): its native library loaded beside torch's can take the whole process down
(a segfault on CUDA 13's Nsight Compute 2025.3.1 with torch 2.11), so the process that profiles never loads it.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from kernelkit.profiling.ncu_csv import Metric, NcuKernel, NcuRule, to_base_unit

MODULE = "ncu_report"
# NvRules' message types (MsgType: MSG_NONE, MSG_OK, MSG_OPTIMIZATION, MSG_WARNING, MSG_ERROR) as the CSV names them.
RULE_TYPES = {"NONE": "INF", "INFO": "INF", "OPTIMIZATION": "OPT", "WARNING": "WRN", "ERROR": "ERR"}


class ReportReadError(Exception):
    """ncu_report imported but could not read this report (its own errors are SWIG's or RuntimeError)."""


def module_folders(ncu: Path) -> list[Path]:
    """The folders that hold ncu_report.py for ``ncu``, the likeliest first: its own install's; a CUDA toolkit's
    nsight-compute-<version>; the installs a wrapper script (a toolkit's bin/ncu) names by path or version."""
    real = Path(ncu).resolve()  # a link on PATH -> the install
    toolkit = real.parent.parent
    candidates = [real.parent, *_newest_first(toolkit.glob("nsight-compute*"))]
    roots, versions = _named_in_script(real)
    for root in roots:
        candidates += [root, *(root / v for v in versions), *_newest_first(root.glob("*"))]
    candidates += [toolkit / f"nsight-compute-{v}" for v in versions]
    folders = [c / "extras" / "python" for c in candidates]
    return [f for f in dict.fromkeys(folders) if (f / f"{MODULE}.py").is_file()]


def _named_in_script(path: Path) -> tuple[list[Path], list[str]]:
    """(absolute paths with 'nsight-compute' in them, versions like 2025.3.1) that a shell script names."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return [], []
    if not head.startswith(b"#!"):  # the ncu executable itself
        return [], []
    text = head.decode(errors="replace")
    roots = [Path(m.removesuffix("/ncu")) for m in re.findall(r"/[\w.+/-]*nsight-compute[\w.+-]*(?:/ncu)?", text)]
    return list(dict.fromkeys(roots)), list(dict.fromkeys(re.findall(r"\b20\d\d\.\d+\.\d+\b", text)))


def _newest_first(folders: Iterable[Path]) -> list[Path]:
    return sorted(folders, key=lambda p: tuple(int(n) for n in re.findall(r"\d+", p.name)), reverse=True)


def load_module(ncu: Path) -> tuple[ModuleType | None, str]:
    """(ncu_report from the install that holds ``ncu``, "") or (None, why not). Imported once per process; its
    folder stays on sys.path, where NVIDIA's instructions put it (the module imports its native part from there)."""
    loaded = sys.modules.get(MODULE)
    if loaded is not None:
        return loaded, ""
    folders = module_folders(ncu)
    if not folders:
        return None, f"no extras/python/{MODULE}.py in the Nsight Compute install of {ncu}"
    folder = str(folders[0])
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        return importlib.import_module(MODULE), ""
    except Exception as exc:  # noqa: BLE001 - a native library that does not load, a Python it was not built for
        sys.modules.pop(MODULE, None)
        return None, f"{folder}/{MODULE}.py did not import: {type(exc).__name__}: {exc}"


def read_report(module: ModuleType, path: str | Path) -> list[NcuKernel]:
    """One NcuKernel per profiled kernel of the report at ``path``, numbered in report order as ncu's CSV is."""
    try:
        context = module.load_report(str(path))
        if context is None:
            raise ReportReadError(f"{MODULE} could not open {path}")
        kernels: list[NcuKernel] = []
        for r in range(context.num_ranges()):
            profiled = context.range_by_idx(r)
            for a in range(profiled.num_actions()):
                kernels.append(_kernel(module, profiled.action_by_idx(a), str(len(kernels))))
        return kernels
    except ReportReadError:
        raise
    except Exception as exc:  # noqa: BLE001 - the native module raises SWIG's and RuntimeError
        raise ReportReadError(f"{MODULE} could not read {path}: {type(exc).__name__}: {exc}") from exc


def _kernel(module: ModuleType, action: Any, kernel_id: str) -> NcuKernel:
    demangled = getattr(module.IAction, "NameBase_DEMANGLED", None)  # as ncu's CSV prints kernel names
    name = action.name(demangled) if demangled is not None else action.name()
    kinds = _value_kinds(module)
    # The raw page's metric columns: names like 'unit__counter' (not the device attributes' display names).
    metrics = {n: _metric(n, action.metric_by_name(n), kinds) for n in action.metric_names() if "__" in n}
    return NcuKernel(kernel_id, str(name), _launch_shape(metrics, "grid"), _launch_shape(metrics, "block"),
                     metrics, _rules(action))


def _value_kinds(module: ModuleType) -> dict[Any, str]:
    """IMetric's ValueKind constants -> their names ('ValueKind_UINT64'), whichever this ncu version defines."""
    kinds = module.IMetric
    return {getattr(kinds, n): n for n in dir(kinds) if n.startswith("ValueKind_")}


def _metric(name: str, metric: Any, kinds: dict[Any, str]) -> Metric:
    unit = str(metric.unit()) if hasattr(metric, "unit") else ""
    kind = kinds.get(metric.kind(), "")
    if "FLOAT" in kind or "DOUBLE" in kind:
        number: float | int = metric.as_double()
    elif "INT" in kind:
        number = metric.as_uint64()
    else:  # a string, or no single value (an instanced metric: one per SM, per pipe, ...)
        return Metric(name, str(metric.as_string()) if "STRING" in kind else "", unit, None)
    value, base = to_base_unit(float(number), unit)
    return Metric(name, f"{number:g}" if isinstance(number, float) else str(number), base, value)


def _launch_shape(metrics: dict[str, Metric], which: str) -> str:
    """'(65536, 1, 1)' from launch__grid_dim_x/y/z (as the CSV's Grid Size column), else launch__grid_size."""
    dims = [metrics.get(f"launch__{which}_dim_{axis}") for axis in "xyz"]
    if all(d is not None and d.value is not None for d in dims):
        return "(" + ", ".join(str(int(d.value)) for d in dims if d is not None and d.value is not None) + ")"
    size = metrics.get(f"launch__{which}_size")
    return size.text if size is not None else ""


def _rules(action: Any) -> list[NcuRule]:
    """The rule results that say something, in ncu's order, without repeats (as ncu_csv.parse_rules)."""
    as_dicts = getattr(action, "rule_results_as_dicts", None)  # ncu 2023.3 and newer
    found: list[NcuRule] = []
    for result in as_dicts() if as_dicts is not None else ():
        for message in _messages(result.get("rule_message")):
            text = str(message.get("message") or "").strip()
            if not text:
                continue
            speedup = result.get("speedup_estimation") or {}
            rule = NcuRule(str(result.get("rule_identifier") or ""), _short_type(message.get("type")),
                           str(result.get("section_identifier") or ""), text,
                           _short_type(speedup.get("type"), lower=True), _number(speedup.get("speedup")))
            if rule not in found:
                found.append(rule)
    return found


def _messages(value: Any) -> Iterable[dict[str, Any]]:
    if isinstance(value, dict):
        return [value]
    return [m for m in value or () if isinstance(m, dict)]


def _short_type(value: Any, lower: bool = False) -> str:
    """'MsgType.MSG_OPTIMIZATION' / 'OPTIMIZATION' -> 'OPT' (the CSV's Rule Type); 'SpeedupType.LOCAL' -> 'local'."""
    if value is None:
        return ""
    text = str(getattr(value, "name", value)).rsplit(".", 1)[-1].upper()
    for prefix in ("MSGTYPE_", "MSG_", "SPEEDUPTYPE_"):
        text = text.removeprefix(prefix)
    return text.lower() if lower else RULE_TYPES.get(text, text)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def read_isolated(ncu: str | Path, report: str | Path, timeout: float = 120.0) -> list[NcuKernel]:
    """The kernels of ``report`` read by ncu_report in a child interpreter that imports nothing else (no torch).
    Raises ReportReadError where the module is missing, fails, crashes or times out, with the reason."""
    package_root = str(Path(__file__).resolve().parents[2])  # the folder that holds kernelkit/
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}
    command = [sys.executable, "-m", __name__, str(ncu), str(report)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise ReportReadError(f"{MODULE} did not read {report} within {timeout:g} s") from None
    if done.returncode == 3:  # _main's own refusal: the reason is its stderr
        raise ReportReadError(done.stderr.strip() or f"{MODULE} could not read {report}")
    if done.returncode != 0:
        how = f"signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}"
        last = (done.stderr.strip().splitlines() or [""])[-1]
        raise ReportReadError(f"{MODULE} failed ({how}){': ' + last if last else ''}")
    try:
        return [_from_json(k) for k in json.loads(done.stdout)]
    except (ValueError, KeyError, TypeError) as exc:
        raise ReportReadError(f"{MODULE}'s reader printed no kernel list: {exc}") from exc


def _from_json(data: dict[str, Any]) -> NcuKernel:
    metrics = {name: Metric(**m) for name, m in data["metrics"].items()}
    return NcuKernel(data["id"], data["name"], data["grid_size"], data["block_size"], metrics,
                     [NcuRule(**r) for r in data["rules"]])


def _main(argv: list[str]) -> int:
    """``python -m kernelkit.profiling.ncu_rep NCU REPORT``: the report's kernels as JSON on stdout; exit 3 and the
    reason on stderr where ncu_report does not import or read it."""
    module, why_not = load_module(Path(argv[0]))
    if module is None:
        print(why_not, file=sys.stderr)
        return 3
    try:
        kernels = read_report(module, argv[1])
    except ReportReadError as exc:
        print(exc, file=sys.stderr)
        return 3
    json.dump([dataclasses.asdict(k) for k in kernels], sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
