"""The `nats` inspector's reading of `/jsz`, from an answer a NATS 2.9.10 server gave (trimmed to
the fields read). No server needed: tests/integration/test_stream_inspectors.py reads a real one."""

from __future__ import annotations

from inspector.nats import _jetstream

JSZ = {
    "memory": 0,
    "storage": 278000,
    "api": {"total": 5, "errors": 1},
    "streams": 1,
    "consumers": 1,
    "messages": 2000,
    "bytes": 278000,
    "account_details": [
        {
            "name": "$G",
            "stream_detail": [
                {
                    "name": "maestro-scratch_m",
                    "state": {"messages": 2000, "bytes": 278000, "first_seq": 1, "last_seq": 2000, "consumer_count": 1},
                    "consumer_detail": [
                        {
                            "stream_name": "maestro-scratch_m",
                            "name": "maestro",
                            "delivered": {"consumer_seq": 2000, "stream_seq": 2000},
                            "ack_floor": {"consumer_seq": 1990, "stream_seq": 1990},
                            "num_ack_pending": 10,
                            "num_redelivered": 0,
                            "num_waiting": 1,
                            "num_pending": 0,
                        }
                    ],
                }
            ],
        }
    ],
}


def test_jetstream_totals_streams_and_consumers_are_rows_of_their_own() -> None:
    rows = _jetstream(JSZ)
    assert rows["jetstream"] == [
        {
            "streams": 1,
            "consumers": 1,
            "messages": 2000,
            "bytes": 278000,
            "memory_bytes": 0,
            "storage_bytes": 278000,
            "api_total": 5,
            "api_errors": 1,
        }
    ]
    assert rows["streams"] == [
        {
            "account": "$G",
            "stream": "maestro-scratch_m",
            "messages": 2000,
            "bytes": 278000,
            "first_seq": 1,
            "last_seq": 2000,
            "consumers": 1,
        }
    ]
    assert rows["consumers"] == [
        {
            "account": "$G",
            "stream": "maestro-scratch_m",
            "consumer": "maestro",
            "pending": 0,
            "waiting": 1,
            "ack_pending": 10,
            "redelivered": 0,
            "delivered_seq": 2000,
            "ack_floor_seq": 1990,
        }
    ]


def test_a_server_without_streams_gives_empty_sets() -> None:
    rows = _jetstream({"streams": 0, "account_details": None})
    assert (rows["streams"], rows["consumers"], rows["jetstream"][0]["streams"]) == ([], [], 0)
