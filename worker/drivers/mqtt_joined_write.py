"""QoS 0 PUBLISH packets written in one `send()`, where paho writes each with a `send()` of its own.

A sender's burst hands paho one packet per message, and paho's `_packet_write` sends them one
system call each. Here the run of QoS 0 PUBLISH packets at the head of paho's queue is joined and
offered to the socket at once (an unbounded QoS 0 sender: +30 %, bench/HISTORY.md).
What the socket took is marked written exactly as paho's own write marks it (position, bytes
left, `_set_as_published`), and a packet the socket took only part of keeps its place, for the
next write to finish.

This reads paho's private queue (`Client._out_packet`) as paho 2.1 and 2.2 build it, so
`joins_writes` says no for another paho, which then writes as it always does (a unit test fails
on such a paho, so the change is seen). Plain sockets only: a TLS socket that took part of what
it was offered must be offered the same bytes again."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

import paho.mqtt
import paho.mqtt.client as mqtt

if TYPE_CHECKING:
    from paho.mqtt.client import _OutPacket

__all__ = ["joins_writes", "write_joined"]

_PUBLISH = 0x30  # paho.mqtt.client.PUBLISH: a packet's type, its command's high nibble
_MOST = 512  # packets joined into one send(): some 50 KB of 100-byte messages
_KNOWN = ("2.1.", "2.2.")  # paho releases whose queue of outgoing packets this module knows


def joins_writes(client: mqtt.Client) -> bool:
    """Whether `write_joined` may write for this client's socket as it is now: a plain one, and
    a paho whose queue this module knows."""
    return paho.mqtt.__version__.startswith(_KNOWN) and type(getattr(client, "_sock", None)) is socket.socket


def write_joined(client: mqtt.Client) -> int:
    """Offer the QoS 0 PUBLISH packets at the head of paho's queue to its socket in one `send()`;
    the number of packets written whole. Anything else (a socket that takes nothing, an error,
    another kind of packet at the head) is left where it is, for paho's own `loop_write`."""
    queue, sock = client._out_packet, client._sock
    run: list[_OutPacket] = []
    for packet in queue:
        if packet["command"] & 0xF0 != _PUBLISH or packet["qos"] != 0 or len(run) == _MOST:
            break
        run.append(packet)
    if len(run) < 2 or sock is None:
        return 0
    try:
        sent = sock.send(b"".join([p["packet"][p["pos"] :] if p["pos"] else p["packet"] for p in run]))
    except OSError:  # a full socket (BlockingIOError) or a broken one: paho's write meets it too
        return 0
    written = 0
    for packet in run:
        left = packet["to_process"]
        if sent < left:  # part of it (or none): the rest goes in a later write
            packet["pos"] += sent
            packet["to_process"] = left - sent
            break
        sent -= left
        packet["pos"] += left
        packet["to_process"] = 0
        queue.popleft()
        if (info := packet["info"]) is not None:  # a PUBLISH always has its handle
            info._set_as_published()
        written += 1
    with client._msgtime_mutex:  # the keepalive counts from the last write, as after paho's own
        client._last_msg_out = mqtt.time_func()
    return written
