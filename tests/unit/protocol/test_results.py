"""The file protocol's records: each golden file (a peer.json the daemons wrote in a real run,
one of each kind) is read into its record and written back byte for byte; the merges give
hand-worked sums."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from protocol.results import (
    SEQUENCES_FILE,
    ClientSent,
    PeerRecord,
    ReceiverAccount,
    SendCounts,
    SenderAccount,
    SenderDeliveries,
    read_peer_json,
    read_sequences,
    write_peer_json,
    write_sequences,
)

GOLDEN = Path(__file__).parent / "golden"
PEERS = sorted(GOLDEN.glob("peer-*.json"))


@pytest.mark.parametrize("path", PEERS, ids=[p.stem for p in PEERS])
def test_a_peer_json_reads_into_its_record_and_writes_back_byte_for_byte(path: Path, tmp_path: Path) -> None:
    record = read_peer_json(path)
    write_peer_json(tmp_path, record)
    assert (tmp_path / "peer.json").read_bytes() == path.read_bytes()
    assert read_peer_json(tmp_path / "peer.json") == record


def test_each_role_reads_its_own_account() -> None:
    sender = read_peer_json(GOLDEN / "peer-sender.json")
    assert sender.role == "sender" and sender.receiver is None and sender.sender is not None
    assert sender.sender.sent == sum(c.sent for c in sender.sender.senders.values())
    assert sender.sender.schedule_lag_us is not None and sender.sender.request_reply is None
    requester = read_peer_json(GOLDEN / "peer-requester.json").sender
    assert requester is not None and requester.request_reply is not None and requester.schedule_lag_us is None
    assert requester.retries is None  # a closed system retries nothing: the key is not written
    replier = read_peer_json(GOLDEN / "peer-replier.json").receiver
    assert replier is not None and replier.replier is not None
    assert replier.replier.replied == requester.request_reply.replies + requester.request_reply.late
    inspector = read_peer_json(GOLDEN / "peer-inspector.json")
    assert inspector.inspectors and inspector.sender is None and inspector.receiver is None


def test_an_older_peer_json_gets_the_defaults_of_what_it_lacks() -> None:
    record = PeerRecord.from_json({"name": "r1", "role": "receiver", "received": 3})
    assert record.receiver == ReceiverAccount(received=3)
    assert record.receiver.latency_shift_us == 0 and record.receiver.per_sender == {}


def test_a_peer_json_that_is_not_one_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "peer.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"peer.json: not a peer's record"):
        read_peer_json(tmp_path / "peer.json")
    (tmp_path / "peer.json").write_text("{")
    with pytest.raises(ValueError, match=r"peer.json: not JSON"):
        read_peer_json(tmp_path / "peer.json")


def test_two_processes_counts_add_up() -> None:
    a = SendCounts(
        sent=10, errors={"nacked": 1}, retries=2, per_client={0: 10}, disconnects_ns=(5,), reconnects_ns=(7,)
    )
    b = SendCounts(sent=4, errors={"nacked": 2, "unconfirmed": 1}, per_client={1: 4}, disconnects_ns=(3,))
    assert a.merge(b) == SendCounts(
        sent=14,
        errors={"nacked": 3, "unconfirmed": 1},
        retries=2,
        per_client={0: 10, 1: 4},
        disconnects_ns=(3, 5),
        reconnects_ns=(7,),
    )


def test_a_stream_shared_by_two_processes_is_exact_once_its_bitsets_are_merged() -> None:
    # Sequences 0-9: one process got 0-5, the other 5-9 (5 twice); 2 came out of order there.
    first = SenderDeliveries(received=6, deliveries=6, highest_sequence=5)
    second = SenderDeliveries(received=5, deliveries=5, out_of_order=2, highest_sequence=9)
    summed = first.merge(second)
    assert (summed.deliveries, summed.highest_sequence, summed.out_of_order) == (11, 9, 2)
    assert summed.exact(distinct=10) == SenderDeliveries(
        received=10, deliveries=11, duplicates=1, out_of_order=2, highest_sequence=9, missing_below_highest=0
    )


def test_a_sender_account_writes_only_what_its_kind_has() -> None:
    scheduled = SenderAccount(sent=2, warm_up_end_ns=1, warm_up_s=0.0, senders={"ab": ClientSent(0, 2)}, retries=0)
    assert scheduled.to_json()["retries"] == 0 and "request_reply" not in scheduled.to_json()
    assert json.loads(json.dumps(scheduled.to_json()))["senders"] == {"ab": {"client": 0, "sent": 2}}
    assert SenderAccount.from_json(scheduled.to_json()) == scheduled


def test_a_receivers_sequences_are_written_whole_and_read_back_bit_for_bit(tmp_path: Path) -> None:
    bitsets = {f"{0xC3:016x}": bytes([0b101, 0, 0xFF]), f"{7:016x}": b""}
    write_sequences(tmp_path, bitsets)
    assert read_sequences(tmp_path) == bitsets
    assert [p.name for p in tmp_path.iterdir()] == [SEQUENCES_FILE]  # no temporary file left beside it
    assert read_sequences(tmp_path / "no-receiver-here") == {}
    (tmp_path / SEQUENCES_FILE).write_text('{"00000000000000c3": "not base64 of zlib"}')
    with pytest.raises(ValueError, match=re.escape(SEQUENCES_FILE) + ": not a receiver's sequences"):
        read_sequences(tmp_path)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"00": "AAA', "not JSON"),
        ("[1, 2]", "a JSON object of sender keys was expected"),
        ('{"00000000000000c3": 5}', "sender 00000000000000c3: no compressed bitset"),
        ('{"00000000000000c3": "eHg="}', "sender 00000000000000c3: no compressed bitset"),
    ],
)
def test_a_damaged_sequences_file_is_named_with_what_is_wrong(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / SEQUENCES_FILE).write_text(text)
    with pytest.raises(ValueError, match=re.escape(f"{SEQUENCES_FILE}: not a receiver's sequences ({why}")) as caught:
        read_sequences(tmp_path)
    assert "Error" not in str(caught.value)
