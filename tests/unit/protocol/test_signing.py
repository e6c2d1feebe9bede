"""Signed notes: the wire form, pinned against an HMAC computed here; every refusal, named."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import time
from pathlib import Path

import msgpack
import pytest

from protocol.codec import decode, encode
from protocol.notes import AbnormalDisconnect, Header, Note, PingRequest
from protocol.secrets import SecretFileError, read_token_file
from protocol.signing import WINDOW_S, NoteGuard, NoteKey, RefusedNoteError, sign, split

SECRET = b"0123456789abcdef-lab-key"
KEY = NoteKey(SECRET)


def stamped(note: Note, at_ns: int | None = None, message_id: str = "m1") -> Note:
    header = Header(
        message_id=message_id,
        sender_id="c1",
        sender_name="maestro",
        sender_host="h1",
        sender_role="coordinator",
        timestamp_ns=time.time_ns() if at_ns is None else at_ns,
    )
    return note.with_header(header)


def receive(guard: NoteGuard, data: bytes) -> Note:
    unsigned, mac = split(data)
    note = decode(unsigned)
    guard.check(note, unsigned, mac)
    return note


def test_a_signed_note_is_the_note_with_its_hmac_sha256_as_a_fifth_element() -> None:
    unsigned = encode(stamped(PingRequest(coordinator_time_ns=1)))
    signed = sign(unsigned, KEY)
    items = msgpack.unpackb(signed)
    assert len(items) == 5
    assert items[4] == hmac.new(SECRET, unsigned, hashlib.sha256).digest()
    assert msgpack.packb(items[:4], use_bin_type=True) == unsigned
    assert split(signed) == (unsigned, items[4])
    assert split(unsigned) == (unsigned, None)


def test_a_keyed_guard_takes_a_signed_note_and_a_keyless_one_reads_it_as_any() -> None:
    note = stamped(PingRequest(coordinator_time_ns=1))
    signed = sign(encode(note), KEY)
    assert receive(NoteGuard(KEY, require=True), signed) == note
    assert receive(NoteGuard(None, require=False), signed) == note


def test_an_unsigned_note_is_refused_where_signatures_are_required_and_taken_elsewhere() -> None:
    unsigned = encode(stamped(PingRequest(coordinator_time_ns=1)))
    with pytest.raises(RefusedNoteError, match="unsigned note") as refused:
        receive(NoteGuard(KEY, require=True), unsigned)
    assert refused.value.answer
    receive(NoteGuard(KEY, require=False), unsigned)  # the coordinator takes answers of keyless peers


def test_a_note_signed_with_another_key_or_altered_is_refused() -> None:
    guard = NoteGuard(KEY, require=True)
    forged = sign(encode(stamped(PingRequest(coordinator_time_ns=1))), NoteKey(b"not-the-lab-key-at-all"))
    with pytest.raises(RefusedNoteError, match="bad signature"):
        receive(guard, forged)
    signed = bytearray(sign(encode(stamped(PingRequest(coordinator_time_ns=1), message_id="m2")), KEY))
    at = signed.index(b"m2")
    signed[at + 1] = ord("3")  # the message id, altered on the way
    with pytest.raises(RefusedNoteError, match="bad signature"):
        receive(guard, bytes(signed))


def test_a_copy_of_a_taken_note_is_refused_without_an_answer_and_a_restamped_resend_is_taken() -> None:
    guard = NoteGuard(KEY, require=True)
    note = stamped(PingRequest(coordinator_time_ns=1))
    signed = sign(encode(note), KEY)
    receive(guard, signed)
    with pytest.raises(RefusedNoteError, match="replayed note m1") as refused:
        receive(guard, signed)
    assert not refused.value.answer  # MQTT's at-least-once delivery makes such copies too
    again = note.with_header(dataclasses.replace(note.header, timestamp_ns=note.header.timestamp_ns + 1))
    assert receive(guard, sign(encode(again), KEY)).header.message_id == "m1"


@pytest.mark.parametrize("off_s", [-(WINDOW_S + 5), WINDOW_S + 5])
def test_a_note_stamped_outside_the_window_is_refused(off_s: float) -> None:
    at_ns = time.time_ns() - int(off_s * 1e9)
    signed = sign(encode(stamped(PingRequest(coordinator_time_ns=1), at_ns)), KEY)
    with pytest.raises(RefusedNoteError, match="stale note: stamped 65 s"):
        receive(NoteGuard(KEY, require=True), signed)


def test_a_last_will_is_taken_however_old_and_however_often() -> None:
    guard = NoteGuard(KEY, require=True)
    will = sign(encode(stamped(AbnormalDisconnect(), time.time_ns() - int(3600e9))), KEY)
    receive(guard, will)
    receive(guard, will)  # the broker publishes the same will after each lost connection


def test_the_guard_remembers_only_what_the_window_would_not_refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    guard = NoteGuard(KEY, require=True)
    t0 = time.time_ns()
    for n in range(3):
        receive(guard, sign(encode(stamped(PingRequest(coordinator_time_ns=1), t0, f"m{n}")), KEY))
    later = t0 + int(3 * WINDOW_S * 1e9)
    monkeypatch.setattr(time, "time_ns", lambda: later)
    receive(guard, sign(encode(stamped(PingRequest(coordinator_time_ns=1), later, "m9")), KEY))
    assert guard._seen == {("m9", later)}  # bounded by the rate times the window, not by uptime


def _write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def test_key_files_are_read_stripped_and_refused_with_the_reason(tmp_path: Path) -> None:
    assert NoteKey.from_file(_write(tmp_path / "key", SECRET + b"\n")).secret == SECRET
    with pytest.raises(SecretFileError, match=r"may be read by others \(mode 0644\): chmod 600"):
        NoteKey.from_file(_write(tmp_path / "open", SECRET, 0o644))
    with pytest.raises(SecretFileError, match="holds 5 bytes; it needs at least 16"):
        NoteKey.from_file(_write(tmp_path / "short", b"short"))
    with pytest.raises(SecretFileError, match=r"cannot read the note key file .*missing"):
        NoteKey.from_file(tmp_path / "missing")
    assert "0123" not in repr(NoteKey.from_file(tmp_path / "key"))


def test_token_files_hold_one_printable_word(tmp_path: Path) -> None:
    assert read_token_file(_write(tmp_path / "t", b"s3cret-token\n")) == "s3cret-token"
    with pytest.raises(SecretFileError, match="one word of printable ASCII"):
        read_token_file(_write(tmp_path / "two", b"two words"))
    with pytest.raises(SecretFileError, match="holds 0 bytes"):
        read_token_file(_write(tmp_path / "empty", b"\n"))
