"""What a worker sends the process that judges it, as data only: nothing it sends is unpickled or evaluated there.

A message is one JSON header and the raw bytes it points into:

    8 bytes: the header's length (little endian) | header (UTF-8 JSON) | blob 0 | blob 1 | ...

The header holds plain JSON values, and these tagged objects:

- ``{"__tensor__": {dtype, shape, stride, offset, storage bytes, device, blob}}``: a tensor's whole storage as raw
  bytes (its layout survives; no storage is shared with the receiver);
- ``{"__bytes__": blob}``, ``{"__tuple__": [...]}``, ``{"__enum__": [name, value]}``;
- ``{"__data__": name, "fields": {...}}``: an instance of one of the dataclasses ``register``ed here (kernelkit's
  own result types), rebuilt field by field through its constructor;
- ``{"__opaque__": type name}``: anything else (an impl's own object, a function): the receiver gets an ``Opaque``
  naming its type, never the object. A ``__reduce__`` that opens a file or runs a command has nothing to run.

Decoding builds only tensors (``torch.empty`` + a byte copy, or, for a buffer the receiver owns, a host tensor over
its bytes), JSON values, the registered dataclasses and enums, and Opaque markers; a malformed message is a
WireError.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import struct
import warnings
from collections.abc import Callable
from typing import Any

_HEADER = struct.Struct("<Q")
_TYPES: dict[str, type] = {}
_ENUMS: dict[str, type[enum.Enum]] = {}


class WireError(ValueError):
    """A message that is not a well-formed kernelkit message (a worker's protocol broke, or it was forged)."""


@dataclasses.dataclass(frozen=True)
class Opaque:
    """What stands for an object that was not sent: only its type's name."""

    type_name: str

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


def register(cls: type) -> type:
    """Let ``cls`` (a dataclass or an Enum) cross the wire by name; usable as a class decorator."""
    table: dict[str, Any] = _ENUMS if issubclass(cls, enum.Enum) else _TYPES
    if not issubclass(cls, enum.Enum) and not dataclasses.is_dataclass(cls):
        raise TypeError(f"only dataclasses and enums cross the wire, not {cls!r}")
    table[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return cls


def encode(value: Any) -> bytearray:
    """``value`` as one message (see the module doc). Each tensor's bytes are copied once, from its storage (on the
    host, or straight from the device) into the message."""
    head, blobs = _layout(value)
    message = bytearray(len(head) + sum(_size(blob) for blob in blobs))
    view = memoryview(message)
    view[:len(head)] = head
    at = len(head)
    for blob in blobs:
        size = _size(blob)
        if isinstance(blob, bytes | memoryview):
            view[at:at + size] = blob
        elif size:  # a storage: copied from the device (or host) straight into the message
            import torch

            torch.frombuffer(view[at:at + size], dtype=torch.uint8).copy_(blob)
        at += size
    return message


def encode_parts(value: Any) -> list[memoryview]:
    """``encode(value)``'s bytes as consecutive parts, for a writer that sends them in a row (channel.send_parts):
    the header, then each blob; a tensor on the host is its own storage's memory (not copied; it must stay
    unchanged until sent), one on a device is copied to the host first."""
    head, blobs = _layout(value)
    parts = [memoryview(head)]
    for blob in blobs:
        if isinstance(blob, bytes | memoryview):
            parts.append(memoryview(blob).cast("B"))
        elif _size(blob):  # a storage: its memory on the host, as it is
            parts.append(memoryview((blob if blob.device.type == "cpu" else blob.cpu()).numpy()).cast("B"))
    return parts


def _layout(value: Any) -> tuple[bytes, list[Any]]:
    """The message's length-prefixed header and its blobs: bytes, or a tensor's storage as a uint8 tensor, wherever
    it is (not copied yet)."""
    blobs: list[Any] = []
    body = _encode(value, blobs)
    header = json.dumps({"value": body, "blobs": [_size(b) for b in blobs]}, separators=(",", ":")).encode()
    return _HEADER.pack(len(header)) + header, blobs


def _size(blob: Any) -> int:
    return len(blob) if isinstance(blob, bytes | memoryview) else blob.numel()


def decode(data: bytes | memoryview, device: str | None = None, own: bool = False) -> Any:
    """The value of a message; tensors on ``device`` (default: where they were). ``own``: the message's buffer is
    the receiver's alone and used once (channel.recv_bytes), so tensors on the host may read it where it is;
    otherwise each gets a copy of its own (a job's packed input set is unpacked again for later calls)."""
    view = memoryview(data) if own else memoryview(data).toreadonly()
    if len(view) < _HEADER.size:
        raise WireError("a message shorter than its header")
    (length,) = _HEADER.unpack_from(view)
    start = _HEADER.size + length
    if start > len(view):
        raise WireError("a message whose header runs past its end")
    try:
        header = json.loads(bytes(view[_HEADER.size:start]))
        value, lengths = header["value"], [int(n) for n in header["blobs"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise WireError(f"a message whose header is not kernelkit's: {exc}") from None
    bounds, at = [], start
    for n in lengths:
        if n < 0:
            raise WireError("a blob of negative length")
        bounds.append((at, at + n))
        at += n
    if at != len(view):
        raise WireError(f"a message of {len(view)} bytes whose blobs end at {at}")

    def blob(index: Any) -> memoryview:
        if type(index) is not int or not 0 <= index < len(bounds):
            raise WireError(f"a bad blob reference {index!r}")
        return view[bounds[index][0]:bounds[index][1]]

    return _decode(value, blob, device)


# ---- encoding -----------------------------------------------------------------------------------------------------


def _encode(value: Any, blobs: list[Any]) -> Any:
    if isinstance(value, enum.Enum):  # before str: kernelkit's Status is a str Enum
        name = f"{type(value).__module__}.{type(value).__qualname__}"
        return {"__enum__": [name, value.value]} if name in _ENUMS else {"__opaque__": type(value).__name__}
    if value is None or type(value) in (bool, str):
        return value
    if isinstance(value, (int, float)) and type(value) in (int, float):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):  # copied once, into the message
        return {"__bytes__": _blob(value if isinstance(value, bytes) else memoryview(value).cast("B"), blobs)}
    if type(value) in (list, tuple):
        items = [_encode(v, blobs) for v in value]
        return items if type(value) is list else {"__tuple__": items}
    if type(value) is dict and all(type(k) is str for k in value):
        return {"__dict__": {k: _encode(v, blobs) for k, v in value.items()}}
    if type(value) is dict:
        return {"__pairs__": [[_encode(k, blobs), _encode(v, blobs)] for k, v in value.items()]}
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return _encode(value.item(), blobs)  # a numpy scalar: its Python number
    name = f"{type(value).__module__}.{type(value).__qualname__}"
    if name in _TYPES and type(value) is _TYPES[name]:
        fields = {f.name: _encode(getattr(value, f.name), blobs) for f in dataclasses.fields(value)}
        return {"__data__": name, "fields": fields}
    tensor = _tensor_header(value, blobs)
    return tensor if tensor is not None else {"__opaque__": type(value).__name__}


def _blob(data: Any, blobs: list[Any]) -> int:
    blobs.append(data)
    return len(blobs) - 1


def _tensor_header(value: Any, blobs: list[Any]) -> dict[str, Any] | None:
    import sys

    torch = sys.modules.get("torch")
    if torch is None or type(value) is not torch.Tensor:  # a subclass may compute when read: opaque
        return None
    storage = value.detach().untyped_storage()
    data = torch.empty(0, dtype=torch.uint8, device=value.device).set_(storage)  # copied into the message by encode
    return {"__tensor__": {"dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
                           "stride": list(value.stride()), "offset": value.storage_offset(),
                           "device": str(value.device), "blob": _blob(data, blobs)}}


# ---- decoding -----------------------------------------------------------------------------------------------------


def _decode(value: Any, blob: Callable[[Any], memoryview], device: str | None) -> Any:
    if not isinstance(value, (dict, list)):
        return value
    if isinstance(value, list):
        return [_decode(v, blob, device) for v in value]
    if len(value) != 1 and "__data__" not in value:
        raise WireError(f"an untagged object in a message: {sorted(value)[:4]}")
    tag = next(iter(value)) if "__data__" not in value else "__data__"
    body = value[tag]
    if tag == "__dict__" and isinstance(body, dict):
        return {k: _decode(v, blob, device) for k, v in body.items()}
    if tag == "__pairs__" and isinstance(body, list) and all(isinstance(p, list) and len(p) == 2 for p in body):
        return {_hashable(_decode(k, blob, device)): _decode(v, blob, device) for k, v in body}
    if tag == "__tuple__" and isinstance(body, list):
        return tuple(_decode(v, blob, device) for v in body)
    if tag == "__bytes__":
        return bytes(blob(body))
    if tag == "__opaque__" and isinstance(body, str):
        return Opaque(body)
    if tag == "__enum__" and isinstance(body, list) and len(body) == 2 and body[0] in _ENUMS:
        return _ENUMS[body[0]](body[1])
    if tag == "__data__" and body in _TYPES and isinstance(value.get("fields"), dict):
        return _dataclass(_TYPES[body], {k: _decode(v, blob, device) for k, v in value["fields"].items()})
    if tag == "__tensor__" and isinstance(body, dict):
        return _tensor(body, blob, device)
    raise WireError(f"an object this process does not take: {tag} {str(body)[:60]}")


def _hashable(key: Any) -> Any:
    try:
        hash(key)
    except TypeError:
        raise WireError(f"a dict key that cannot be one: {key!r}") from None
    return key


def _dataclass(cls: type, fields: dict[str, Any]) -> Any:
    known = {f.name: f for f in dataclasses.fields(cls)}
    if set(fields) - set(known):
        raise WireError(f"{cls.__name__} has no field(s) {sorted(set(fields) - set(known))}")
    instance = cls(**{k: v for k, v in fields.items() if known[k].init})
    for k, v in fields.items():
        if not known[k].init:
            object.__setattr__(instance, k, v)
    return instance


def _tensor(spec: dict[str, Any], blob: Callable[[Any], memoryview], device: str | None) -> Any:
    import torch

    try:
        dtype = getattr(torch, spec["dtype"])
        shape, stride, offset = [int(s) for s in spec["shape"]], [int(s) for s in spec["stride"]], int(spec["offset"])
        data = blob(spec["blob"])
        where = torch.device(device or spec["device"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise WireError(f"a bad tensor header: {exc}") from None
    if not isinstance(dtype, torch.dtype):
        raise WireError(f"not a dtype: {spec['dtype']!r}")
    if not len(data):
        raw = torch.empty(0, dtype=torch.uint8)
    elif where.type == "cpu" and data.readonly:
        raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)  # a writable copy of its own
    elif where.type == "cpu":  # a buffer the receiver owns (decode's own=True): read where it is
        raw = torch.frombuffer(data, dtype=torch.uint8)
    else:  # read in place: the copy to the device is the tensor's own
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "the buffer is not writable": it is only read
            raw = torch.frombuffer(data, dtype=torch.uint8)
    needed = (offset + sum((n - 1) * s for n, s in zip(shape, stride, strict=True)) + 1) * dtype.itemsize \
        if all(shape) else 0
    if needed > raw.numel():
        raise WireError(f"a tensor of {shape} reads past its {raw.numel()} bytes")
    t = torch.empty(0, dtype=dtype, device=where)
    t.set_(raw.to(where).untyped_storage(), offset, shape, stride)
    return t
