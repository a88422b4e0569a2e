"""task.yml, read: PyYAML's safe subset, every problem named with the file, the line and what is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kernelkit.errors import LoadError

SPEC_LISTS = ("files", "tests", "benchmarks")  # task.yml keys kernelkit reads: each a list of mappings


def read_task_yml(path: Path) -> dict[str, Any]:
    """task.yml as a dict (YAML's safe subset). LoadError names the file and what is wrong: unreadable, not YAML,
    not a mapping, or a files/tests/benchmarks entry that is not a mapping."""
    try:
        with open(path, "rb") as stream:  # bytes: PyYAML detects the encoding and names the file in its marks
            spec = yaml.safe_load(stream)
    except OSError as exc:
        raise LoadError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise LoadError(f"{path}{_yaml_where(exc)}: not valid YAML: {_yaml_problem(exc)}") from None
    if spec is None:  # empty, or comments only
        return {}
    if not isinstance(spec, dict):
        raise LoadError(f"{path}: not a GPU MODE task: its top level is a {type(spec).__name__}, not a mapping of "
                        f"keys such as {', '.join(SPEC_LISTS)}")
    for key in SPEC_LISTS:
        entries = spec.get(key)
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise LoadError(f"{path}: {key} must be a list of mappings, got a {type(entries).__name__}")
        for n, entry in enumerate(entries, 1):
            if not isinstance(entry, dict):
                raise LoadError(f"{path}: entry {n} of {key} is {entry!r}, not a mapping such as "
                                f"{{\"size\": 127, \"seed\": 4242}}")
    return spec


def _yaml_where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):  # its own text calls an undecodable byte a character
        if exc.encoding == "unicode":  # decoded: a control character
            return f"character #x{exc.character:04x} at position {exc.position} is not allowed in YAML"
        return f"not {exc.encoding} text (at byte {exc.position}: {exc.reason})"
    problem = getattr(exc, "problem", None)
    if not problem:
        return str(exc)
    context = getattr(exc, "context", None)
    return f"{problem} ({context})" if context else problem
