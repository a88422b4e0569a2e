"""The bytes between a runner and its worker: length-prefixed frames written from and read into whole buffers.

``multiprocessing.Connection`` pickles a job (a bytearray inside it is copied into the pickle, then again by the
pickle's frame buffer) and reads a message in chunks that it joins (two more copies). A strict check moves each
case's input sets and outputs this way: hundreds of MB a case at the large sizes, where those copies cost seconds
(4096x4096 fp32 square on 2 CPU cores: 2.4 s pickling a job of 384 MB). Here a frame is an 8-byte length and the
bytes, written straight from the sender's buffer and read straight into one new bytearray.

- ``send_job`` / ``recv_job`` (runner -> worker): a pickle whose large bytearrays travel out of band (persistent
  ids), each as a frame of its own; the worker trusts its runner.
- ``send_bytes`` / ``send_parts`` / ``recv_bytes`` (worker -> runner): one frame, from one buffer or from several
  in a row (a result's header and each output's own memory: wire.encode_parts); the runner decodes it as data
  (kernelkit.wire) and unpickles nothing a worker sends.

Both ends must use these for every message on the connection (they do not speak Connection's framing).
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import threading
import weakref
from typing import Any

_LENGTH = struct.Struct("<Q")
OUT_OF_BAND = 1 << 16  # bytes: a bytearray at least this long travels as a frame of its own
_locks: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_locks_guard = threading.Lock()


def _writing(conn: Any) -> threading.Lock:
    """The connection's own write lock: one message at a time on it (a progress note from a thread never splits
    one), while other connections (another slot's worker) write at the same time."""
    with _locks_guard:
        lock = _locks.get(conn)
        if lock is None:
            lock = _locks[conn] = threading.Lock()
        return lock


def send_bytes(conn: Any, data: bytes | bytearray | memoryview) -> None:
    """One frame: ``data``'s length, then its bytes (not copied here)."""
    with _writing(conn):
        _send_frame(conn.fileno(), data)


def send_parts(conn: Any, parts: list[memoryview]) -> None:
    """One frame whose bytes are ``parts`` in a row (wire.encode_parts), written from where they are."""
    with _writing(conn):
        fd = conn.fileno()
        _write_all(fd, _LENGTH.pack(sum(part.nbytes for part in parts)))
        for part in parts:
            _write_all(fd, part)


def recv_bytes(conn: Any) -> bytearray:
    """The next frame's bytes; EOFError when the other end closed the connection."""
    fd = conn.fileno()
    (size,) = _LENGTH.unpack(_read_exact(fd, _LENGTH.size))
    return _read_exact(fd, size)


class _JobPickler(pickle.Pickler):
    """Large bytearrays become persistent ids: the pickle names them, frames after it carry them."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.buffers: list[bytearray] = []

    def persistent_id(self, obj: Any) -> int | None:
        if type(obj) is bytearray and len(obj) >= OUT_OF_BAND:
            self.buffers.append(obj)
            return len(self.buffers) - 1
        return None


class _JobUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, buffers: list[bytearray]) -> None:
        super().__init__(file)
        self.buffers = buffers

    def persistent_load(self, pid: Any) -> bytearray:
        return self.buffers[pid]


def send_job(conn: Any, job: Any) -> None:
    """``job`` pickled, its large bytearrays (a strict check's input sets) each in a frame after the pickle."""
    head = io.BytesIO()
    head.write(b"\0\0\0\0")
    pickler = _JobPickler(head)
    pickler.dump(job)
    message = head.getbuffer()
    struct.pack_into("<I", message, 0, len(pickler.buffers))
    with _writing(conn):
        fd = conn.fileno()
        _send_frame(fd, message)
        del message
        for buffer in pickler.buffers:
            _send_frame(fd, buffer)


def recv_job(conn: Any) -> Any:
    """The next job ``send_job`` sent."""
    head = recv_bytes(conn)
    (count,) = struct.unpack_from("<I", head, 0)
    buffers = [recv_bytes(conn) for _ in range(count)]
    return _JobUnpickler(io.BytesIO(memoryview(head)[4:]), buffers).load()


def _send_frame(fd: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data).cast("B")
    _write_all(fd, _LENGTH.pack(len(view)))
    _write_all(fd, view)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, size: int) -> bytearray:
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = os.readv(fd, [view[got:]])
        if n == 0:
            raise EOFError("the connection was closed mid-message" if got else "the connection was closed")
        got += n
    return buffer
