"""The one msgpack codec: notes to bytes and back, with every fault named.

Wire form of a note: msgpack `[type, command, header, payload]`, where `header` and `payload`
are maps with string keys. A signed note carries one element more, its seal (protocol.signing):
`seal` and `unseal` add and find it without re-encoding the note, whose exact bytes are signed.
Decoding checks the envelope, the header and every payload field against the note class;
anything off raises `ProtocolError`, which a peer answers with PROTOCOL_ERROR.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, TypeVar

import msgpack

from protocol.codes import PROTOCOL_VERSION, Command, NoteType
from protocol.notes import Header, Note, note_class

__all__ = ["DEFAULT_MAX_NOTE_BYTES", "ProtocolError", "decode", "encode", "seal", "sender_label", "unseal"]

# Control notes are small; result files travel over HTTP, never through the control broker.
DEFAULT_MAX_NOTE_BYTES = 1024 * 1024

# Header fields have defaults for building notes, but a note on the wire must carry these.
_REQUIRED_HEADER_FIELDS = ("version", "message_id", "sender_id", "timestamp_ns")


class ProtocolError(ValueError):
    """A note could not be decoded. `correlation_id` is set when the header was readable, and
    `sender` then names who it claims to come from (name@host, or its id)."""

    def __init__(self, reason: str, correlation_id: str | None = None, sender: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.correlation_id = correlation_id
        self.sender = sender


def encode(note: Note) -> bytes:
    header = dataclasses.asdict(note.header)
    packed: bytes = msgpack.packb([int(note.TYPE), int(note.COMMAND), header, note.payload()], use_bin_type=True)
    return packed


_NOTE = 0x94  # msgpack fixarray of 4
_SEALED = 0x95  # ... of 5


def seal(unsigned: bytes, extra: list[Any]) -> bytes:
    """An encoded note with `extra` as its fifth element."""
    if not unsigned or unsigned[0] != _NOTE:
        raise ValueError("not an encoded note")
    return bytes([_SEALED]) + unsigned[1:] + msgpack.packb(extra, use_bin_type=True)


def unseal(data: bytes | bytearray, max_bytes: int = DEFAULT_MAX_NOTE_BYTES) -> tuple[bytes, Any]:
    """The note's own bytes, exactly as sent, and its fifth element (None when it has none, or
    when the bytes are no note: `decode` then says what is wrong with them)."""
    data = bytes(data)
    if not data or data[0] != _SEALED or len(data) > max_bytes:
        return data, None
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=len(data))
    unpacker.feed(data)
    try:
        unpacker.read_array_header()
        for _ in range(4):
            unpacker.skip()
        end = unpacker.tell()
        extra = unpacker.unpack()
    except (ValueError, msgpack.OutOfData, msgpack.FormatError, msgpack.StackError, TypeError):
        return data, None
    if unpacker.tell() != len(data):
        return data, None
    return bytes([_NOTE]) + data[1:end], extra


def decode(data: bytes | bytearray, max_bytes: int = DEFAULT_MAX_NOTE_BYTES) -> Note:
    if len(data) > max_bytes:
        raise ProtocolError(f"note of {len(data)} bytes exceeds the limit of {max_bytes} bytes")
    try:
        envelope = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, TypeError) as exc:
        raise ProtocolError(f"note does not decode as msgpack: {exc}") from exc

    if not isinstance(envelope, list) or len(envelope) != 4:
        raise ProtocolError(f"note must be a list [type, command, header, payload], got {_describe(envelope)}")
    raw_type, raw_command, raw_header, raw_payload = envelope
    header = _decode_header(raw_header)
    try:
        return _decode_note(header, raw_type, raw_command, raw_payload)
    except ProtocolError as exc:
        exc.sender = sender_label(header)
        raise


def sender_label(header: Header) -> str:
    """Who a note says it is from, for logs: name@host, else its sender id."""
    return f"{header.sender_name}@{header.sender_host}" if header.sender_name else header.sender_id


def _decode_note(header: Header, raw_type: Any, raw_command: Any, raw_payload: Any) -> Note:
    cid = header.message_id or None
    note_type = _enum(NoteType, raw_type, "note type", cid)
    command = _enum(Command, raw_command, "command", cid)
    cls = note_class(note_type, command)
    if cls is None:
        raise ProtocolError(f"command {command.name} ({command.value}) is not a {note_type.name.lower()}", cid)
    if not isinstance(raw_payload, dict):
        raise ProtocolError(f"{cls.__name__}: payload must be a map, got {_describe(raw_payload)}", cid)
    fields = _check_fields(cls, raw_payload, cid)
    return cls(header=header, **fields)


_E = TypeVar("_E", NoteType, Command)


def _enum(enum: type[_E], value: Any, what: str, cid: str | None) -> _E:
    if type(value) is not int:
        raise ProtocolError(f"{what} must be an integer, got {_describe(value)}", cid)
    try:
        return enum(value)
    except ValueError as exc:
        raise ProtocolError(f"unknown {what} {value}", cid) from exc


def _decode_header(raw: Any) -> Header:
    if not isinstance(raw, dict):
        raise ProtocolError(f"header must be a map, got {_describe(raw)}")
    # Read the message id first, so every later fault can still be correlated.
    message_id = raw.get("message_id")
    cid = message_id if isinstance(message_id, str) and message_id else None
    for name in _REQUIRED_HEADER_FIELDS:
        if name not in raw:
            raise ProtocolError(f"header: missing field {name!r}", cid)
    fields = _check_fields(Header, raw, cid, what="header")
    header = Header(**fields)
    if header.version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"protocol version {header.version} is not supported (this peer speaks {PROTOCOL_VERSION})", cid
        )
    return header


@functools.cache
def _schema(cls: type) -> dict[str, tuple[Any, bool]]:
    """Field name -> (type, required) for a dataclass, resolved once per class."""
    hints = typing.get_type_hints(cls)
    schema = {}
    for f in dataclasses.fields(cls):
        if f.name == "header":
            continue
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        schema[f.name] = (hints[f.name], required)
    return schema


def _check_fields(cls: type, raw: dict[str, Any], cid: str | None, what: str = "") -> dict[str, Any]:
    label = what or cls.__name__
    schema = _schema(cls)
    unknown = sorted(set(raw) - set(schema))
    if unknown:
        raise ProtocolError(f"{label}: unknown field {unknown[0]!r}", cid)
    out: dict[str, Any] = {}
    for name, (hint, required) in schema.items():
        if name not in raw:
            if required:
                raise ProtocolError(f"{label}: missing field {name!r}", cid)
            continue
        value = raw[name]
        if not _matches(hint, value):
            raise ProtocolError(f"{label}: field {name!r} must be {_type_name(hint)}, got {_describe(value)}", cid)
        out[name] = float(value) if hint is float else value
    return out


def _matches(hint: Any, value: Any) -> bool:
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return any(_matches(arg, value) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return type(value) is bool
    if hint is int:
        return type(value) is int
    if hint is float:
        return type(value) in (int, float)
    if hint is str:
        return type(value) is str
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_matches(item, v) for v in value)
    if origin is dict:
        key, item = typing.get_args(hint)
        return isinstance(value, dict) and all(_matches(key, k) and _matches(item, v) for k, v in value.items())
    raise TypeError(f"the codec has no rule for {hint!r}")  # a note class uses a type we never taught it


def _type_name(hint: Any) -> str:
    if hint is type(None):
        return "nil"
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    if typing.get_origin(hint) is list:
        return f"a list of {_type_name(typing.get_args(hint)[0])}"
    if typing.get_origin(hint) is dict:
        return "a map"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(hint, str(hint))


def _describe(value: Any) -> str:
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "a map"
    shown = repr(value)
    return f"{type(value).__name__} {shown if len(shown) <= 40 else shown[:37] + '...'}"
