"""The wire format, pinned; every note round-trips; every malformed input is named."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.codec import ProtocolError, decode, encode
from protocol.codes import PROTOCOL_VERSION, Command, NoteType
from protocol.notes import REGISTRY, DrainRequest, Header, Note, OkResponse, PingRequest, SetRequest

HEADER = Header(
    message_id="m1",
    sender_id="p1",
    sender_name="w1",
    sender_host="h1",
    sender_role="sender",
    timestamp_ns=1_700_000_000_000_000_000,
    correlation_id=None,
)
HEADER_MAP = {
    "message_id": "m1",
    "sender_id": "p1",
    "sender_name": "w1",
    "sender_host": "h1",
    "sender_role": "sender",
    "timestamp_ns": 1_700_000_000_000_000_000,
    "correlation_id": None,
    "version": PROTOCOL_VERSION,
}


def wire(note_type: int, command: int, header: Any, payload: Any) -> bytes:
    return msgpack.packb([note_type, command, header, payload], use_bin_type=True)


# --- the format, pinned ---------------------------------------------------------------------------


def test_envelope_is_a_four_element_array_of_type_command_header_payload() -> None:
    data = encode(PingRequest(coordinator_time_ns=42, header=HEADER))
    # 0x94: fixarray of 4; 0x00: REQUEST; 0x0a: PING (10); then the header map.
    assert data[:3] == bytes([0x94, 0x00, 0x0A])
    assert data == wire(0, 10, HEADER_MAP, {"coordinator_time_ns": 42})


def test_response_carries_the_requests_id_as_correlation() -> None:
    header = dataclasses.replace(HEADER, correlation_id="req-7")
    assert msgpack.unpackb(encode(OkResponse(header=header)))[2]["correlation_id"] == "req-7"


def test_command_codes_follow_maestro_java_1_5() -> None:
    expected = {
        "START_WORKER": 0,
        "STOP_WORKER": 1,
        "START_TEST": 2,
        "STOP_TEST": 3,
        "START_INSPECTOR": 4,
        "STOP_INSPECTOR": 5,
        "SET": 7,
        "STATS": 8,
        "HALT": 9,
        "PING": 10,
        "OK": 11,
        "PROTOCOL_ERROR": 12,
        "INTERNAL_ERROR": 13,
        "ABNORMAL_DISCONNECT": 14,
        "NOTIFY_FAIL": 15,
        "NOTIFY_SUCCESS": 16,
        "GET": 17,
        "START_AGENT": 18,
        "STOP_AGENT": 19,
        "AGENT_SOURCE": 21,
        "USER_COMMAND": 30,
        "LOG": 40,
        "DRAIN": 41,
        "NOTIFY_DRAIN_COMPLETE": 42,
        "ROLE_ASSIGN": 60,
        "ROLE_UNASSIGN": 61,
        "NOTIFY_TEST_STARTED": 70,
    }
    assert {name: Command[name].value for name in expected} == expected
    assert all(c.value > 70 for c in Command if c.name not in expected)
    assert Command.PAUSE_WORKER == 75 and Command.RESUME_WORKER == 76
    assert [t.value for t in NoteType] == [0, 1, 2, 3]


def test_every_command_has_a_note_class() -> None:
    commands = {command for (_type, command) in REGISTRY}
    assert commands == set(Command)


# --- every note round-trips -------------------------------------------------------------------------

_scalars = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text(max_size=20)
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def _strategy(hint: Any) -> st.SearchStrategy[Any]:
    origin = typing.get_origin(hint)
    if hint is Any:
        return _values
    if hint is type(None):
        return st.none()
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(_strategy(a) for a in typing.get_args(hint)))
    if origin is list:
        return st.lists(_strategy(typing.get_args(hint)[0]), max_size=5)
    if origin is dict:
        key, item = typing.get_args(hint)
        return st.dictionaries(_strategy(key), _strategy(item), max_size=5)
    return {
        str: st.text(max_size=30),
        int: st.integers(-(2**63), 2**63 - 1),
        float: st.floats(allow_nan=False),
        bool: st.booleans(),
    }[hint]


def _note_strategy(cls: type[Note]) -> st.SearchStrategy[Note]:
    hints = typing.get_type_hints(cls)
    fields = {f.name: _strategy(hints[f.name]) for f in dataclasses.fields(cls) if f.name != "header"}
    header = st.builds(
        Header,
        message_id=st.text(min_size=1, max_size=32),
        sender_id=st.text(min_size=1, max_size=32),
        timestamp_ns=st.integers(0, 2**63 - 1),
        correlation_id=st.none() | st.text(max_size=32),
    )
    return st.builds(cls, header=header, **fields)


@pytest.mark.parametrize("cls", sorted(REGISTRY.values(), key=lambda c: (c.TYPE, c.COMMAND)), ids=lambda c: c.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_note_round_trips(cls: type[Note], data: st.DataObject) -> None:
    note = data.draw(_note_strategy(cls))
    back = decode(encode(note))
    assert type(back) is cls
    assert back == note
    assert back.header == note.header


# --- malformed input ----------------------------------------------------------------------------------


def reason_of(data: bytes, **kwargs: Any) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        decode(data, **kwargs)
    return caught.value


def test_truncated_msgpack() -> None:
    data = encode(PingRequest(coordinator_time_ns=1, header=HEADER))
    assert "does not decode as msgpack" in reason_of(data[:-3]).reason


def test_garbage_bytes() -> None:
    assert "does not decode" in reason_of(b"\xc1\xc1\xc1").reason


def test_not_an_envelope() -> None:
    assert "must be a list [type, command, header, payload]" in reason_of(msgpack.packb({"a": 1})).reason
    assert "got a list of 3" in reason_of(msgpack.packb([0, 10, {}])).reason


def test_unknown_command_is_named_and_correlated() -> None:
    error = reason_of(wire(0, 99, HEADER_MAP, {}))
    assert error.reason == "unknown command 99"
    assert error.correlation_id == "m1"


def test_unknown_note_type() -> None:
    assert reason_of(wire(7, 10, HEADER_MAP, {})).reason == "unknown note type 7"


def test_command_in_the_wrong_type() -> None:
    assert reason_of(wire(0, 11, HEADER_MAP, {})).reason == "command OK (11) is not a request"


def test_non_map_payload() -> None:
    assert reason_of(wire(0, 10, HEADER_MAP, [1, 2])).reason == "PingRequest: payload must be a map, got a list of 2"


def test_missing_field() -> None:
    assert reason_of(wire(0, 10, HEADER_MAP, {})).reason == "PingRequest: missing field 'coordinator_time_ns'"


def test_wrong_field_type() -> None:
    error = reason_of(wire(0, 10, HEADER_MAP, {"coordinator_time_ns": "soon"}))
    assert error.reason == "PingRequest: field 'coordinator_time_ns' must be an integer, got str 'soon'"


def test_bool_is_not_an_integer() -> None:
    assert "must be an integer" in reason_of(wire(0, 10, HEADER_MAP, {"coordinator_time_ns": True})).reason


def test_map_with_wrong_value_types() -> None:
    assert "field 'options' must be a map" in reason_of(wire(0, 7, HEADER_MAP, {"options": [1]})).reason


def test_unknown_field() -> None:
    error = reason_of(wire(0, 9, HEADER_MAP, {"please": True}))
    assert error.reason == "Halt: unknown field 'please'"


def test_header_faults() -> None:
    assert reason_of(wire(0, 9, "h", {})).reason == "header must be a map, got str 'h'"
    no_id = {k: v for k, v in HEADER_MAP.items() if k != "message_id"}
    assert reason_of(wire(0, 9, no_id, {})).reason == "header: missing field 'message_id'"
    bad_ts = {**HEADER_MAP, "timestamp_ns": 1.5}
    assert "header: field 'timestamp_ns' must be an integer" in reason_of(wire(0, 9, bad_ts, {})).reason


def test_other_protocol_version() -> None:
    error = reason_of(wire(0, 9, {**HEADER_MAP, "version": PROTOCOL_VERSION + 1}, {}))
    assert f"protocol version {PROTOCOL_VERSION + 1} is not supported" in error.reason
    assert error.correlation_id == "m1"


def test_oversized_note_is_refused_before_decoding() -> None:
    note = SetRequest(options={"labels": {"blob": "x" * 5000}}, header=HEADER)
    error = reason_of(encode(note), max_bytes=4096)
    assert error.reason.startswith("note of ") and "exceeds the limit of 4096 bytes" in error.reason


def test_float_fields_take_integers() -> None:
    note = decode(wire(0, 41, HEADER_MAP, {"timeout_s": 5}))
    assert isinstance(note, DrainRequest)
    assert note.timeout_s == 5.0
    assert isinstance(note.timeout_s, float)
