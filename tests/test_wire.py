"""The worker's messages as data only: tensors, plain values and kernelkit's result types round-trip; anything else
arrives as its type's name; a malformed or forged message is a WireError, never code run in the receiver."""

from __future__ import annotations

import json
import struct

import pytest
import torch

from kernelkit import wire
from kernelkit.measure.measurement import BenchResult, Measurement
from kernelkit.results import CaseResult, Status


class Payload:
    ran: list[str] = []

    def __reduce__(self):
        return (Payload.ran.append, ("unpickled",))


def test_tensors_keep_their_values_layout_and_dtype():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    cases = [base, base.t(), base[1:, 2:4], torch.tensor(3.5), torch.empty(0, 7), base.to(torch.bfloat16),
             torch.arange(5, dtype=torch.int64), torch.tensor([True, False])]
    back = wire.decode(wire.encode(tuple(cases)))
    for got, sent in zip(back, cases, strict=True):
        assert got.dtype == sent.dtype and got.shape == sent.shape and got.stride() == sent.stride()
        assert got.storage_offset() == sent.storage_offset() and torch.equal(got, sent)
        if sent.numel():
            assert got.untyped_storage().data_ptr() != sent.untyped_storage().data_ptr()  # nothing shared


def test_a_message_sent_in_parts_is_the_same_message_and_a_received_one_is_not_copied_again():
    import socket

    from kernelkit import channel

    sent = (torch.arange(6.0).reshape(2, 3).t(), torch.ones(3, dtype=torch.bfloat16), b"raw", "text")
    parts = wire.encode_parts(sent)
    assert b"".join(bytes(part) for part in parts) == bytes(wire.encode(sent))
    a, b = socket.socketpair()
    with a, b:
        channel.send_parts(a, parts)
        message = channel.recv_bytes(b)
    got = wire.decode(message, own=True)
    assert torch.equal(got[0], sent[0]) and got[0].stride() == (1, 3) and torch.equal(got[1], sent[1])
    assert got[2:] == (b"raw", "text")
    at = got[0].untyped_storage().data_ptr() - torch.frombuffer(message, dtype=torch.uint8).data_ptr()
    assert 0 <= at < len(message)  # the tensor reads the received buffer itself: no second copy
    copied = wire.decode(message)  # not owned (a packed set decoded again): each tensor gets a copy of its own
    copied[0].add_(1)
    assert torch.equal(got[0], sent[0])  # the received buffer was not written through the copy
    assert torch.equal(copied[0], sent[0] + 1)


def test_plain_values_and_kernelkits_result_types_round_trip():
    m = Measurement(label="x", mode="cold", device="cpu", device_name="cpu", samples=[1e-3, 2e-3], first_call=0.1,
                    warmup_calls=3, stop_reason="converged")
    result = BenchResult("square", "triton_flat", "triton", (64, 48), "float32", "cpu", "cold", Status.PASSED,
                         measurement=m, details={"autotune": {"k": {"config": "BLOCK=8"}}, 3: (1, 2)})
    value = {"case": CaseResult("square", "eager", "eager", (1, 257), "float32", 0, "cpu", Status.WEAK),
             "bench": result, "nan": float("nan"), "none": None, "bytes": b"\x00\xff", "nested": [(1, "a"), {"b": 2}]}
    back = wire.decode(wire.encode(value))
    assert back["case"] == value["case"] and back["case"].status is Status.WEAK and back["case"].size == (1, 257)
    assert back["bench"].measurement.samples == [1e-3, 2e-3] and back["bench"].details == result.details
    assert back["nan"] != back["nan"] and back["bytes"] == b"\x00\xff" and back["nested"] == [(1, "a"), {"b": 2}]


def test_any_other_object_arrives_as_its_type_name_and_nothing_runs():
    class Shifty(str):  # a str subclass may override __eq__: not a str on arrival
        pass

    back = wire.decode(wire.encode((Payload(), Shifty("x"), len, torch.nn.Linear(2, 2))))
    assert back == (wire.Opaque("Payload"), wire.Opaque("Shifty"), wire.Opaque("builtin_function_or_method"),
                    wire.Opaque("Linear"))
    assert Payload.ran == []


def _message(header: object, *blobs: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


@pytest.mark.parametrize(("data", "words"), [
    (b"\x01\x02", "shorter than its header"),
    (struct.pack("<Q", 99) + b"{}", "runs past its end"),
    (_message({"value": 1}), "not kernelkit's"),
    (_message({"value": {"__data__": "os.system", "fields": {}}, "blobs": []}), "does not take"),
    (_message({"value": {"__data__": "kernelkit.results.CaseResult", "fields": {"evil": 1}}, "blobs": []}),
     "no field"),
    (_message({"value": {"__bytes__": 3}, "blobs": [2]}, b"ab"), "bad blob reference"),
    (_message({"value": 1, "blobs": [5]}, b"ab"), "blobs end at"),
    (_message({"value": {"__tensor__": {"dtype": "float32", "shape": [100], "stride": [1], "offset": 0,
                                        "device": "cpu", "blob": 0}}, "blobs": [4]}, b"abcd"), "reads past"),
    (_message({"value": {"__tensor__": {"dtype": "Tensor", "shape": [1], "stride": [1], "offset": 0,
                                        "device": "cpu", "blob": 0}}, "blobs": [4]}, b"abcd"), "not a dtype"),
    (_message({"value": {"plain": 1, "dict": 2}, "blobs": []}), "untagged"),
    (_message({"value": {"__reduce__": ["os.system", "id"]}, "blobs": []}), "does not take"),
])
def test_a_malformed_or_forged_message_is_a_wire_error(data, words):
    with pytest.raises(wire.WireError, match=words):
        wire.decode(data)
