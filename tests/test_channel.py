"""channel.py: frames between a runner and its worker, and jobs whose large bytearrays travel after the pickle."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass

import pytest

from kernelkit import channel


@dataclass(frozen=True)
class _Job:
    name: str
    sets: tuple[bytearray, ...]


def _pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair()


def test_a_job_with_large_and_small_bytearrays_arrives_whole() -> None:
    a, b = _pair()
    big = bytearray(range(256)) * (channel.OUT_OF_BAND // 64)  # 4x the out-of-band threshold
    job = _Job("square", (big, bytearray(b"small"), big))
    got: list[_Job] = []
    reader = threading.Thread(target=lambda: got.append(channel.recv_job(b)))
    reader.start()
    channel.send_job(a, job)
    reader.join(timeout=30)
    assert got == [job]
    assert got[0].sets[0] is not big and type(got[0].sets[0]) is bytearray  # the receiver's own, writable
    a.close()
    b.close()


def test_frames_keep_their_order_and_a_closed_end_is_eof() -> None:
    a, b = _pair()
    channel.send_bytes(a, b"one")
    channel.send_bytes(a, memoryview(b"two"))
    channel.send_job(a, None)
    assert channel.recv_bytes(b) == b"one" and channel.recv_bytes(b) == b"two"
    assert channel.recv_job(b) is None
    a.close()
    with pytest.raises(EOFError):
        channel.recv_bytes(b)
    b.close()


def test_a_message_cut_short_is_eof_not_a_short_read() -> None:
    a, b = _pair()
    a.sendall((100).to_bytes(8, "little") + b"only ten b")
    a.close()
    with pytest.raises(EOFError, match="mid-message"):
        channel.recv_bytes(b)
    b.close()


def test_a_slow_reader_on_one_connection_does_not_hold_up_another() -> None:
    # Spread runs send jobs to several workers from several threads: each connection has its own write lock.
    (a, a_peer), (b, b_peer) = _pair(), _pair()
    big = bytearray(32 << 20)  # far more than a socket buffer: the write waits until a_peer reads
    writer = threading.Thread(target=channel.send_bytes, args=(a, big))
    writer.start()
    done = threading.Event()

    def other() -> None:
        channel.send_bytes(b, b"next job")
        assert channel.recv_bytes(b_peer) == b"next job"
        done.set()

    threading.Thread(target=other, daemon=True).start()
    assert done.wait(timeout=10), "a write on another connection waited for the blocked one"
    assert len(channel.recv_bytes(a_peer)) == len(big)
    writer.join(timeout=30)
    for s in (a, a_peer, b, b_peer):
        s.close()
