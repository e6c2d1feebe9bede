"""At most one log line per sender per minute for notes refused or unreadable.

Anyone who can publish on the control broker can send a daemon thousands of bad notes; a line
for each filled the disk (#38: 10,003 malformed notes left each worker about 4,130 warnings).
The first of a sender's refusals is logged at once, with the reason; later ones within the
minute are counted, and the next line says how many went unlogged. A flood of made-up sender ids
must not be a way around the limit either: past `max_senders` distinct senders in a minute the
rest share one line, as "other senders". Nor a way around its size: a sender names itself, in
notes of up to a megabyte, so a line is cut at `MAX_LINE_CHARS` (25 notes with 1 MB names wrote
20 MB of log in a minute before).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

__all__ = ["MAX_LINE_CHARS", "OTHER_SENDERS", "LogThrottle"]

OTHER_SENDERS = "other senders"
MAX_LINE_CHARS = 500
_MAX_SENDER_CHARS = 128  # a sender as the throttle keys it: what it claims, cut


@dataclass
class _Sender:
    logged_mono: float
    suppressed: int = 0


class LogThrottle:
    """Thread-safe: the bus's network thread and the daemon's loop both complain."""

    def __init__(self, every_s: float = 60.0, max_senders: int = 20) -> None:
        self.every_s = every_s
        self.max_senders = max_senders
        self._senders: dict[str, _Sender] = {}
        self._lock = threading.Lock()

    def admit(self, sender: str, now_mono: float | None = None) -> tuple[str, int] | None:
        """None: do not log this one (it is counted). Else the key to log it under (the sender, or
        OTHER_SENDERS past the limit) and how many of that key's went unlogged since its last line."""
        now = time.monotonic() if now_mono is None else now_mono
        sender = sender[:_MAX_SENDER_CHARS]
        with self._lock:
            if sender not in self._senders and len(self._senders) >= self.max_senders:
                self._forget(now)
                if len(self._senders) >= self.max_senders:
                    sender = OTHER_SENDERS
            seen = self._senders.get(sender)
            if seen is None:
                self._senders[sender] = _Sender(now)
                return sender, 0
            if now - seen.logged_mono < self.every_s:
                seen.suppressed += 1
                return None
            suppressed, seen.suppressed, seen.logged_mono = seen.suppressed, 0, now
            return sender, suppressed

    def log(self, logger: logging.Logger, sender: str, message: str) -> None:
        """`message` about a note from `sender`, at WARNING, if admitted."""
        admitted = self.admit(sender)
        if admitted is None:
            return
        key, suppressed = admitted
        more = f" ({suppressed} more from {key} in the last {self.every_s:g} s not logged)" if suppressed else ""
        if key == OTHER_SENDERS:
            more += f" (too many senders at once: those past {self.max_senders} are logged as one)"
        if len(message) > MAX_LINE_CHARS:
            message = f"{message[:MAX_LINE_CHARS]}... ({len(message) - MAX_LINE_CHARS:,} characters more)"
        logger.warning("%s%s", message, more)

    def _forget(self, now: float) -> None:
        # A sender quiet for a whole period has nothing left to report but what it suppressed,
        # which is lost with it: a fair price for a bounded table under a flood of made-up ids.
        for sender, seen in list(self._senders.items()):
            if now - seen.logged_mono >= self.every_s and sender != OTHER_SENDERS:
                del self._senders[sender]
