"""Signed notes: the wire form, pinned against an HMAC computed here; every refusal, named."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import struct
import time
from pathlib import Path

import msgpack
import pytest

from protocol.codec import decode, encode, seal
from protocol.notes import AbnormalDisconnect, Header, Note, PingRequest
from protocol.secrets import SecretFileError, read_token_file
from protocol.signing import WINDOW_S, NoteGuard, NoteKey, RefusedNoteError, Seal, SeenNotes, sign, split

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


TOPIC = "/mpt/peer/by-id/a1"


def receive(guard: NoteGuard, data: bytes, topic: str = TOPIC) -> Note:
    unsigned, sealed = split(data)
    note = decode(unsigned)
    guard.check(note, unsigned, sealed, topic)
    return note


def ping(at_ns: int | None = None, message_id: str = "m1") -> Note:
    return stamped(PingRequest(coordinator_time_ns=1), at_ns, message_id)


def test_a_signed_note_is_the_note_with_its_seal_as_a_fifth_element() -> None:
    """The wire form, pinned: [type, command, header, payload, [test_id, mac]], the MAC over the
    domain, the lengths of topic and test id, the topic, the test id and the note's own bytes."""
    unsigned = encode(ping())
    signed = sign(unsigned, KEY, TOPIC, "t-7")
    items = msgpack.unpackb(signed)
    assert len(items) == 5 and items[4][0] == "t-7"
    head = b"maestro-note/2" + struct.pack(">HH", len(TOPIC), 3) + TOPIC.encode() + b"t-7"
    assert items[4][1] == hmac.new(SECRET, head + unsigned, hashlib.sha256).digest()
    assert msgpack.packb(items[:4], use_bin_type=True) == unsigned
    assert split(signed) == (unsigned, Seal("t-7", items[4][1]))
    assert split(unsigned) == (unsigned, None)


def test_a_keyed_guard_takes_a_signed_note_and_a_keyless_one_reads_it_as_any() -> None:
    note = ping()
    signed = sign(encode(note), KEY, TOPIC)
    assert receive(NoteGuard(KEY, require=True), signed) == note
    assert receive(NoteGuard(None, require=False), signed) == note


def test_an_unsigned_note_is_refused_where_signatures_are_required_and_taken_elsewhere() -> None:
    unsigned = encode(ping())
    with pytest.raises(RefusedNoteError, match="unsigned note") as refused:
        receive(NoteGuard(KEY, require=True), unsigned)
    assert refused.value.answer
    receive(NoteGuard(KEY, require=False), unsigned)


def test_a_note_signed_with_another_key_or_altered_is_refused() -> None:
    guard = NoteGuard(KEY, require=True)
    forged = sign(encode(ping()), NoteKey(b"not-the-lab-key-at-all"), TOPIC)
    with pytest.raises(RefusedNoteError, match="bad signature"):
        receive(guard, forged)
    signed = bytearray(sign(encode(ping(message_id="m2")), KEY, TOPIC))
    at = signed.index(b"m2")
    signed[at + 1] = ord("3")  # the message id, altered on the way
    with pytest.raises(RefusedNoteError, match="bad signature"):
        receive(guard, bytes(signed))


def test_a_note_published_on_another_topic_than_it_was_signed_for_is_refused() -> None:
    """#38: an order to agent a1, captured and published on agent a2's topic, or on a group's."""
    signed = sign(encode(ping()), KEY, TOPIC)
    for elsewhere in ("/mpt/peer/by-id/a2", "/mpt/peer/by-role/agent", "/mpt/peer"):
        with pytest.raises(RefusedNoteError, match=rf"bad signature: .* for {elsewhere}"):
            receive(NoteGuard(KEY, require=True), signed, elsewhere)
    # Nor can the seal's test id be changed to suit the receiver.
    unsigned, sealed = split(signed)
    assert sealed is not None
    resealed = seal(unsigned, ["t-other", sealed.mac])
    with pytest.raises(RefusedNoteError, match="bad signature"):
        receive(NoteGuard(KEY, require=True), resealed)


def test_an_order_signed_for_another_test_is_refused_while_one_runs() -> None:
    guard = NoteGuard(KEY, require=True, bound_test=lambda _note: "t-now")
    with pytest.raises(RefusedNoteError, match="signed for test t-old; this peer runs test t-now"):
        receive(guard, sign(encode(ping(message_id="m1")), KEY, TOPIC, "t-old"))
    receive(guard, sign(encode(ping(message_id="m2")), KEY, TOPIC, "t-now"))
    receive(guard, sign(encode(ping(message_id="m3")), KEY, TOPIC, ""))  # a hand-driven session's


def test_an_exact_guard_refuses_a_note_sealed_for_no_test_too() -> None:
    # A keyed coordinator's: peers seal every notification for their test, so one sealed for
    # none (or another) is a copy of another run's.
    guard = NoteGuard(KEY, require=True, bound_test=lambda _note: "t-now")
    guard.exact_test = True
    with pytest.raises(RefusedNoteError, match=r"signed for test \(none\); this coordinator runs test t-now"):
        receive(guard, sign(encode(ping(message_id="m1")), KEY, TOPIC, ""))
    receive(guard, sign(encode(ping(message_id="m2")), KEY, TOPIC, "t-now"))


def test_a_copy_of_a_taken_note_is_refused_without_an_answer_and_a_restamped_resend_is_taken() -> None:
    guard = NoteGuard(KEY, require=True)
    note = ping()
    signed = sign(encode(note), KEY, TOPIC)
    receive(guard, signed)
    with pytest.raises(RefusedNoteError, match="replayed note m1") as refused:
        receive(guard, signed)
    assert not refused.value.answer  # MQTT's at-least-once delivery makes such copies too
    again = note.with_header(dataclasses.replace(note.header, timestamp_ns=note.header.timestamp_ns + 1))
    assert receive(guard, sign(encode(again), KEY, TOPIC)).header.message_id == "m1"


def test_a_copy_is_refused_after_the_receiver_restarts_too(tmp_path: Path) -> None:
    """#38: the notes taken are kept in a file, which a restarted daemon reads."""
    seen = tmp_path / ".maestro" / "seen-notes-a1"
    signed = sign(encode(ping()), KEY, TOPIC)
    receive(NoteGuard(KEY, require=True, seen_file=seen), signed)
    assert seen.stat().st_mode & 0o777 == 0o600
    restarted = NoteGuard(KEY, require=True, seen_file=seen)
    with pytest.raises(RefusedNoteError, match="replayed note m1"):
        receive(restarted, signed)
    # A guard without the file (the bound this test can fail by) takes it again.
    receive(NoteGuard(KEY, require=True), signed)


@pytest.mark.parametrize("off_s", [-(WINDOW_S + 5), WINDOW_S + 5])
def test_a_note_stamped_outside_the_window_is_refused(off_s: float) -> None:
    at_ns = time.time_ns() - int(off_s * 1e9)
    signed = sign(encode(ping(at_ns)), KEY, TOPIC)
    with pytest.raises(RefusedNoteError, match="stale note: stamped 65 s"):
        receive(NoteGuard(KEY, require=True), signed)


def test_the_window_is_judged_on_the_senders_measured_clock_offset() -> None:
    # The sender's clock runs 10 minutes ahead, and that was measured: its fresh notes are taken,
    # and one stamped 65 s before its clock now reads is stale, though our clock alone would
    # call it 9 minutes in the future either way.
    ahead_ns = int(600e9)
    guard = NoteGuard(KEY, require=True, offset_of=lambda _sender: ahead_ns)
    receive(guard, sign(encode(ping(time.time_ns() + ahead_ns, "m1")), KEY, TOPIC))
    stale = ping(time.time_ns() + ahead_ns - int((WINDOW_S + 5) * 1e9), "m2")
    with pytest.raises(RefusedNoteError, match=r"stale note: stamped 65 s before .* measured offset"):
        receive(guard, sign(encode(stale), KEY, TOPIC))


def test_a_last_will_is_taken_however_old_and_however_often() -> None:
    guard = NoteGuard(KEY, require=True)
    will = sign(encode(stamped(AbnormalDisconnect(), time.time_ns() - int(3600e9))), KEY, TOPIC)
    receive(guard, will)
    receive(guard, will)  # the broker publishes the same will after each lost connection


def test_the_guard_remembers_only_what_the_window_would_not_refuse(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    guard = NoteGuard(KEY, require=True, seen_file=tmp_path / "seen")
    t0 = time.time_ns()
    for n in range(3):
        receive(guard, sign(encode(ping(t0, f"m{n}")), KEY, TOPIC))
    later = t0 + int(5 * WINDOW_S * 1e9)
    monkeypatch.setattr(time, "time_ns", lambda: later)
    receive(guard, sign(encode(ping(later, "m9")), KEY, TOPIC))
    assert len(guard.seen) == 1  # bounded by the rate times the window, not by uptime
    assert len(SeenNotes(tmp_path / "seen", keep_s=4 * WINDOW_S)) == 1


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
