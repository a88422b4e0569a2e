"""Read a GPU MODE task.yml: with PyYAML where it is installed, else the parts kernelkit needs.

Without PyYAML: top-level ``key: value`` lines, lists of one-line entries (``- {"size": 127, "seed": 4242}``,
``- B200``) in YAML's flow style ({...}, [...], quoted and plain scalars); block text (``description: |``) is
skipped. Every task.yml of gpu-mode/reference-kernels reads this way.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kernelkit.errors import LoadError


def read_task_yml(path: Path) -> dict[str, Any]:
    """task.yml as a dict: with PyYAML where it is installed, else the parts kernelkit needs (top-level keys,
    lists of one-line mappings such as tests, benchmarks and files)."""
    text = path.read_text()
    try:
        import yaml
    except ImportError:
        return _read_simple_yml(text, path)
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise LoadError(f"{path}: not valid YAML: {exc}") from None


_TOP = re.compile(r"^([A-Za-z_][\w-]*):\s*(.*?)\s*$")
_ITEM = re.compile(r"^\s*-\s*(.*?)\s*$")


def _read_simple_yml(text: str, path: Path) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    key, block = None, False
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        top = _TOP.match(line)
        if top and not line[0].isspace():
            key, value = top[1], top[2]
            block = value.startswith(("|", ">"))  # a block of text (the description): its lines are not read
            spec[key] = _flow(value, path, n) if value and not block else None
            continue
        item = _ITEM.match(line)
        if item and key is not None and not block and isinstance(spec.get(key), (list, type(None))):
            spec[key] = (spec[key] or []) + [_flow(item[1], path, n)]
    return spec


def _flow(text: str, path: Path, line: int) -> Any:
    """A YAML flow value on one line: {k: v, ...}, [a, b], a quoted or plain scalar."""
    try:
        value, rest = _flow_value(text.strip())
    except (IndexError, ValueError):
        rest = "?"
    if rest.strip():
        raise LoadError(f"{path}:{line}: cannot read {text!r} without PyYAML (pip install pyyaml)")
    return value


def _flow_value(text: str) -> tuple[Any, str]:
    text = text.lstrip()
    if text[0] in "{[":
        close, items, rest = "}" if text[0] == "{" else "]", [], text[1:].lstrip()
        while rest[0] != close:
            item, rest = _flow_value(rest)
            if close == "}":
                rest = rest.lstrip()
                if rest[0] != ":":
                    raise ValueError(rest)
                value, rest = _flow_value(rest[1:])
                item = (item, value)
            items.append(item)
            rest = rest.lstrip()
            if rest[0] == ",":
                rest = rest[1:].lstrip()
        return (dict(items) if close == "}" else items), rest[1:]
    if text[0] in "\"'":
        end = text.index(text[0], 1)
        return text[1:end], text[end + 1:]
    m = re.match(r"[^,:{}\[\]]*(?::(?!\s)[^,:{}\[\]]*)*", text)  # a plain scalar ends at , : ] } (not at a:b)
    if m is None or not m[0].strip():
        raise ValueError(text)  # nothing readable here: a bracket that does not close what was opened
    return _scalar(m[0]), text[m.end():]


def _scalar(text: str) -> Any:
    text = text.strip()
    if text in ("true", "True"):
        return True
    if text in ("false", "False"):
        return False
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


