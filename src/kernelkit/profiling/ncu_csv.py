"""Read Nsight Compute's CSV pages into one record per profiled kernel (its metrics, ncu's rule findings); show them.

Two pages of one report (``ncu --import REPORT --csv --page ...``), both documented as comma-separated,
every field quoted:

- ``raw``: a header row (``"ID","Process ID",...,"Kernel Name",...,"Block Size","Grid Size",...`` then one column
  per metric, named like ``gpu__time_duration.sum``), a units row (empty under the ID columns), then one row per
  profiled kernel.
- ``details``: one row per metric or rule result, with the columns ``ID ... Section Name, Metric Name, Metric Unit,
  Metric Value, Rule Name, Rule Type, Rule Description, Estimated Speedup Type, Estimated Speedup``. Metric rows
  often stop after ``Metric Value`` (a trailing comma); rule rows leave the metric columns empty.

ncu writes its own ``==PROF==`` / ``==WARNING==`` lines (and the profiled program's output) into the same stream,
formats numbers with thousands separators (``"1,458,823,529.41"``) and writes ``n/a`` for what it cannot compute.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

_TOOL_LINE = re.compile(r"^==[A-Z][A-Z-]*==")  # ==PROF==, ==WARNING==, ==ERROR==, ==DEBUG==
_GROUPED = re.compile(r"[-+]?[1-9]\d{0,2}(,\d{3})+(\.\d*)?")  # 1,234 or 12,345,678.9: commas group thousands
_NOT_A_VALUE = {"", "n/a", "na", "-", "--", "none"}

_TIME_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
_SI = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}  # ncu's Kbyte is 1000 bytes (16384 B prints as 16.38 Kbyte)
_COUNTED = {"byte", "inst", "cycle", "sector", "request", "warp", "block", "thread", "wavefront", "transaction", "hz"}

# The summary columns: each is the first metric present of its list, in base units.
SUMMARY_METRICS: dict[str, tuple[str, ...]] = {
    "duration_ns": ("gpu__time_duration.sum",),
    "sm_throughput_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
    "memory_throughput_pct": ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",),
    "dram_throughput_pct": ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                            "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
    "achieved_occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "registers_per_thread": ("launch__registers_per_thread",),
}
SHARED_MEM_METRICS = ("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic")


def parse_number(text: str) -> float | None:
    """'1,234.56' / '1.234,56' / '0,55' / '12 345' / '42%' -> a float; 'n/a', '' and non-numbers -> None.

    Commas in groups of three after a non-zero digit are thousands separators (ncu's default, English locale);
    a lone comma otherwise is a decimal comma. Instanced values ('240; 240') are not one number: None.
    """
    s = text.strip().removesuffix("%")
    for mark in ("\u00a0", "\u202f", " ", "'"):  # spaces and apostrophes group digits in some locales
        s = s.replace(mark, "")
    if s.lower() in _NOT_A_VALUE:
        return None
    if "," in s and "." in s:
        s = s.replace(".", "").replace(",", ".") if s.rfind(",") > s.rfind(".") else s.replace(",", "")
    elif "," in s:
        s = s.replace(",", "") if _GROUPED.fullmatch(s) else s.replace(",", ".")
    elif s.count(".") > 1:
        s = s.replace(".", "")
    try:
        return float(s)
    except ValueError:
        return None


def to_base_unit(value: float, unit: str) -> tuple[float, str]:
    """(1.5, 'usecond') -> (1500.0, 'nsecond'); (16.38, 'Kbyte/block') -> (16380.0, 'byte/block');
    (3.2, 'Tbyte/second') -> (3.2e12, 'byte/second'); (2.0, 'byte/usecond') -> (2e6, 'byte/second').
    Units it does not know ('%', 'register/thread') come back unchanged."""
    top, slash, per = unit.strip().partition("/")
    if top in _TIME_NS:
        value, top = value * _TIME_NS[top], "nsecond"
    elif top[:1] in _SI and top[1:] in _COUNTED:
        value, top = value * _SI[top[0]], top[1:]
    if slash and per in _TIME_NS:
        value, per = value * 1e9 / _TIME_NS[per], "second"
    return value, f"{top}{slash}{per}"


@dataclass(frozen=True)
class Metric:
    """One metric of one kernel as ncu printed it, and its value in base units (None when not a number)."""

    name: str
    text: str
    unit: str
    value: float | None

    @classmethod
    def parse(cls, name: str, text: str, unit: str) -> Metric:
        number = parse_number(text)
        if number is None:
            return cls(name, text, unit, None)
        value, base = to_base_unit(number, unit)
        return cls(name, text, base, value)


@dataclass(frozen=True)
class NcuRule:
    """One finding of ncu's rules: OPT (an optimization), WRN (a warning), INF (information), ERR."""

    name: str
    type: str
    section: str
    message: str
    speedup_type: str = ""
    speedup_pct: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "section": self.section, "message": self.message,
                "speedup_type": self.speedup_type, "estimated_speedup_pct": self.speedup_pct}


@dataclass
class NcuKernel:
    """One profiled kernel launch: its launch shape, every metric of the raw page, and the rule findings."""

    id: str
    name: str
    grid_size: str
    block_size: str
    metrics: dict[str, Metric] = field(default_factory=dict)
    rules: list[NcuRule] = field(default_factory=list)

    def value(self, *names: str) -> float | None:
        """The first of ``names`` that has a numeric value, in base units."""
        for name in names:
            metric = self.metrics.get(name)
            if metric is not None and metric.value is not None:
                return metric.value
        return None

    def summary(self) -> dict[str, float | None]:
        """duration_ns, sm/memory/dram throughput and achieved occupancy (% of peak), registers per thread,
        shared memory per block in bytes (static + dynamic)."""
        out = {key: self.value(*names) for key, names in SUMMARY_METRICS.items()}
        shared = [self.value(name) for name in SHARED_MEM_METRICS]
        out["shared_mem_per_block_bytes"] = None if all(s is None for s in shared) else sum(s or 0.0 for s in shared)
        return out

    def to_dict(self, metric_names: Iterable[str] = ()) -> dict[str, Any]:
        extra = {n: {"value": m.value, "unit": m.unit, "text": m.text} for n in metric_names
                 if (m := self.metrics.get(n)) is not None}
        return {"id": self.id, "name": self.name, "grid_size": self.grid_size, "block_size": self.block_size,
                **self.summary(), "rules": [r.to_dict() for r in self.rules], "metrics": extra}


def csv_rows(text: str) -> list[list[str]]:
    """The CSV rows of ncu's output, without its tool lines, blank lines and other non-CSV lines.

    A line continues the previous one while a quoted field is open (rule descriptions may hold newlines).
    """
    kept: list[str] = []
    in_quotes = False
    for line in text.lstrip("\ufeff").splitlines():
        if not in_quotes and (_TOOL_LINE.match(line) or not line.strip() or ("," not in line and '"' not in line)):
            continue
        kept.append(line)
        if line.count('"') % 2:
            in_quotes = not in_quotes
    return list(csv.reader(io.StringIO("\n".join(kept))))


def _tables(text: str, required: str) -> list[tuple[list[str], list[list[str]]]]:
    """(header, rows after it) for every header row (first cell 'ID', a cell named ``required``)."""
    found: list[tuple[list[str], list[list[str]]]] = []
    for row in csv_rows(text):
        cells = [c.strip() for c in row]
        if cells and cells[0] == "ID" and required in cells:
            found.append((cells, []))
        elif found:
            found[-1][1].append(row)
    return found


def _kernel_id(cell: str) -> str | None:
    cell = cell.strip().replace(",", "")
    return cell if cell.isdigit() else None


def _shape(text: str) -> str:
    """'(262,144, 1, 1)' -> '(262144, 1, 1)': thousands separators inside a launch shape."""
    parts = [p.strip().replace(",", "") for p in text.strip().strip("()").split(", ")]
    return f"({', '.join(parts)})" if text.strip().startswith("(") else text.strip().replace(",", "")


def parse_raw_page(text: str) -> list[NcuKernel]:
    """``--page raw --csv`` -> one NcuKernel per kernel row; metric columns are those named like 'unit__counter'."""
    kernels: list[NcuKernel] = []
    for header, rows in _tables(text, "Kernel Name"):
        units = [""] * len(header)
        for row in rows:
            cells = dict(zip(header, row, strict=False))
            kernel_id = _kernel_id(row[0]) if row else None
            if kernel_id is None:
                if row and not row[0].strip() and any(c.strip() for c in row):  # the units row
                    units = [*row, *[""] * (len(header) - len(row))]
                continue
            metrics = {name: Metric.parse(name, value, unit.strip())
                       for name, value, unit in zip(header, row, units, strict=False) if "__" in name}
            grid = cells.get("Grid Size") or _metric_text(metrics, "launch__grid_size")
            block = cells.get("Block Size") or _metric_text(metrics, "launch__block_size")
            kernels.append(NcuKernel(kernel_id, cells.get("Kernel Name", "").strip(), _shape(grid), _shape(block),
                                     metrics))
    return kernels


def _metric_text(metrics: dict[str, Metric], name: str) -> str:
    metric = metrics.get(name)
    return metric.text if metric is not None else ""


def parse_rules(text: str) -> dict[str, list[NcuRule]]:
    """``--page details --csv`` -> the rule findings by kernel ID, in ncu's order, without repeats."""
    rules: dict[str, list[NcuRule]] = {}
    for header, rows in _tables(text, "Rule Name"):
        for row in rows:
            cells = {k: v.strip() for k, v in zip(header, row, strict=False)}
            kernel_id = _kernel_id(cells.get("ID", ""))
            if kernel_id is None or not cells.get("Rule Name"):
                continue
            rule = NcuRule(cells["Rule Name"], cells.get("Rule Type", ""), cells.get("Section Name", ""),
                           cells.get("Rule Description", ""), cells.get("Estimated Speedup Type", ""),
                           parse_number(cells.get("Estimated Speedup", "")))
            found = rules.setdefault(kernel_id, [])
            if rule not in found:
                found.append(rule)
    return rules


def parse_pages(raw_text: str, details_text: str = "") -> list[NcuKernel]:
    """The kernels of the raw page, each with its rule findings from the details page."""
    kernels = parse_raw_page(raw_text)
    rules = parse_rules(details_text) if details_text else {}
    for kernel in kernels:
        kernel.rules = rules.get(kernel.id, [])
    return kernels
